"""ZDIpy importer: its published parameter layout and line formula carried over to dopplermap."""

import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import special

from dopplermap.broadening import instrumental_broaden
from dopplermap.cli import main
from dopplermap.config import load_config
from dopplermap.errors import DopplermapInputError
from dopplermap.io.lsd import load_profiles, read_lsd, write_lsd
from dopplermap.io.zdipy import (
    ZdipyLine,
    gravity_beta,
    observed_equivalent_width,
    read_inzdi,
    read_zdipy_line,
    voigt_parameters,
    zdipy_n_cell,
)
from dopplermap.profiles import intensity_ratio, voigt

LOPEG = Path(__file__).resolve().parents[2] / "shared" / "data" / "lopeg"
C_KMS = 2.99792458e5


def _lopeg():
    if not (LOPEG / "inzdi.dat").is_file():
        pytest.skip(f"LO Peg data not found at {LOPEG} (the shared data folder is absent)")
    return LOPEG


def test_reads_the_published_lopeg_configuration():
    cfg = read_inzdi(_lopeg() / "inzdi.dat")
    assert (cfg.inclination, cfg.vsini, cfg.period, cfg.domega) == (45.0, 67.7, 0.4232, 0.02)
    assert (cfg.mass, cfg.radius, cfg.n_rings) == (0.66, 0.72, 60)
    assert (cfg.target_form, cfg.target_value, cfg.n_iterations) == ("C", 1.0, 20)
    assert (cfg.fit_mag, cfg.l_max, cfg.mag_geom_type, cfg.fit_bright) == (1, 15, "Full", 0)
    assert (cfg.resolving_power, cfg.vel_start, cfg.vel_end, cfg.jd_ref) == (65000.0, -80.0, 80.0, 2456892.015)
    assert len(cfg.files) == 16 and cfg.files[0] == "LSDprof/lopeg_16aug14_v_02.prof.norm"
    assert cfg.jds[-1] == 2456901.60634 and set(cfg.v_r) == {-19.8}
    line = read_zdipy_line(_lopeg() / "model-voigt-line.dat")
    assert (line.wavelength_nm, line.strength, line.width_gauss, line.width_lorentz) == (650.0, 0.6306, 2.41, 0.89)
    assert (line.lande_g, line.limb_darkening, line.gravity_darkening) == (1.195, 0.66, 0.5)


def _zdipy_profile(v, strength, wg, a):
    """ZDIpy's local profile (lineprofileVoigt.py): 1 - str Re w(u + i a), u = v / width_gauss.

    ZDIpy evaluates w with Humlicek's W4 (1e-4 relative); here the exact Faddeeva function."""
    return 1.0 - strength * special.wofz(v / wg + 1j * a).real


@pytest.mark.parametrize("strength,wg,a", [(0.6306, 2.41, 0.89), (0.735, 1.66, 1.2975), (0.4, 3.0, 0.0)])
def test_voigt_mapping_equals_zdipy_profile(strength, wg, a):
    line = ZdipyLine(650.0, strength, wg, a, 1.2, 0.6, 0.0, "test")
    depth, fwhm, fwhm_l = voigt_parameters(line)
    v = np.linspace(-30, 30, 601)
    assert np.allclose(voigt(depth, fwhm, fwhm_l)(v), _zdipy_profile(v, strength, wg, a), rtol=0, atol=1e-12)
    # ZDIpy folds the instrument into the local line (widths in quadrature, area kept):
    r = 65000.0
    wg_r = math.hypot(wg, C_KMS / r * 0.6005612043932249)
    ref = _zdipy_profile(v, strength * wg / wg_r, wg_r, a * wg / wg_r)
    assert np.allclose(instrumental_broaden(voigt(depth, fwhm, fwhm_l), r)(v), ref, rtol=0, atol=1e-9)


def test_grid_size_matches_zdipy_rings():
    # ZDIpy: ring i at colatitude pi (i + 1/2) / N holds round(2 N sin) cells, ~ 4 N^2 / pi in all
    for n in (10, 30, 60):
        assert abs(zdipy_n_cell(n) - 4 * n * n / math.pi) < 0.01 * 4 * n * n / math.pi
    assert zdipy_n_cell(1) == 2 and zdipy_n_cell(2) == 6  # round(4 sin 45 deg) = 3 per ring


def test_gravity_exponent_conversion():
    # dopplermap T ~ g^beta must give ZDIpy's I ~ g^0.5 at the line wavelength (first order in g)
    beta = gravity_beta(0.5, 4500.0, 650.0)
    g = 1.001
    assert intensity_ratio(4500.0 * g**beta, 4500.0, 650.0) == pytest.approx(g**0.5, rel=1e-6)


def test_observed_equivalent_width_of_a_gaussian_line(tmp_path):
    v = np.arange(-200.0, 200.1, 1.8)
    ew_true = 0.3 * 20.0 * math.sqrt(2 * math.pi)
    profs = []
    for k, c in enumerate((-19.8, 5.0)):
        write_lsd(tmp_path / f"p{k}", v, 1 - 0.3 * np.exp(-0.5 * ((v - c) / 20.0) ** 2), np.full(v.size, 1e-3))
        profs.append(read_lsd(tmp_path / f"p{k}"))
    assert observed_equivalent_width(profs, [-19.8, 5.0], -100.0, 100.0) == pytest.approx(ew_true, rel=1e-3)


def test_import_zdipy_writes_a_target_that_loads(tmp_path, capsys):
    src = _lopeg()
    out = tmp_path / "lopeg.toml"
    assert main(["import-zdipy", str(src / "inzdi.dat"), str(src / "model-voigt-line.dat"), "--out", str(out),
                 "--teff", "4500", "--spot-teff", "3500"]) == 0
    screen = capsys.readouterr().out
    assert "not carried over" in screen and "magnetic field" in screen and "target chi^2 1" in screen
    text = out.read_text()
    assert "#  - magnetic field" in text  # also named in the TOML
    cfg = load_config(out)
    s, ln = cfg.star, cfg.line
    assert s.name == "LOPEG"  # the object of the LSD files' title line, for figures and FITS headers
    assert (s.inclination, s.vsini, s.period, s.t0, s.domega, s.systemic_velocity) == (45.0, 67.7, 0.4232, 2456892.015,
                                                                                        0.02, -19.8)
    assert ln.profile == "voigt" and ln.resolving_power == 65000.0 and ln.ld_phot == (0.66,)
    assert ln.fwhm == pytest.approx(2 * math.sqrt(math.log(2)) * 2.41) and ln.fwhm_lorentz == pytest.approx(2 * 0.89 * 2.41)
    assert cfg.grid.n_cell == zdipy_n_cell(60) and cfg.data.velocity_range == (-80.0, 80.0)
    assert cfg.data.time_scale == "BJD_TDB"  # ZDIpy's dates used as given
    assert cfg.data.error_scale == "auto"  # LSD errors scaled to the profiles' scatter
    assert cfg.inversion.fit_components == ("cool",) and cfg.temperatures.hot == cfg.temperatures.phot  # cool only
    assert not cfg.inversion.fit_rv and not cfg.inversion.fit_amp  # ZDIpy holds v_r fixed, fits no offsets
    obs, files = load_profiles(cfg)
    assert obs.n_epoch == 16 and len(files) == 16
    times = np.asarray(obs.times)
    assert times[0] == 2456886.39347 and times[-1] == 2456901.60634
    u = np.asarray(obs.vels)
    assert -80 <= u[0] < -78 and 78 < u[-1] <= 80  # the window around the line centre
    ref = np.loadtxt(src / "LSDprof" / "lopeg_16aug14_v_02.prof.norm", skiprows=2)
    keep = (ref[:, 0] >= -99.8) & (ref[:, 0] <= 60.2)
    assert np.allclose(np.asarray(obs.flux)[0], ref[keep, 1] / ref[keep, 1].mean(), rtol=1e-12)
    # never overwrite without --overwrite
    before = out.read_text()
    assert main(["import-zdipy", str(src / "inzdi.dat"), "--out", str(out)]) == 2
    assert "exists; use --overwrite" in capsys.readouterr().err and out.read_text() == before
    assert main(["import-zdipy", str(src / "inzdi.dat"), "--out", str(out), "--overwrite", "--teff", "4500"]) == 0


def _copy_lopeg(tmp_path):
    src = _lopeg()
    dst = tmp_path / "z"
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("edit,match", [
    (("45.0        67.7", "45.0        fast"), r"inzdi\.dat:3: vsini must be a number, got 'fast'"),
    (("\n60\n", "\nsixty\n"), r"inzdi\.dat:8: n_rings must be an integer, got 'sixty'"),
    (("-80.0       80.0", "80.0       -80.0"), r"inzdi\.dat:\d+: vel_start must be < vel_end"),
    (("lopeg_31aug14_v_10.prof.norm  2456901.60634", "lopeg_31aug14_v_10.prof.norm  later"),
     r"inzdi\.dat:\d+: Julian date of LSDprof/lopeg_31aug14_v_10\.prof\.norm must be a number, got 'later'"),
    (("LSDprof/lopeg_16aug14_v_02.prof.norm", "LSDprof/missing.prof"), r"inzdi\.dat:\d+: profile file 'LSDprof/missing\.prof' not found"),
    (("C  1.0         20", "X  1.0         20"), r"inzdi\.dat:\d+: target form must be 'C'"),
    (("2456886.39347    -19.8", "2456886.39347    -519.8"), r"inzdi\.dat:\d+: LSDprof/lopeg_16aug14_v_02\.prof\.norm has 0 "
                                                           r"points in the window -80\.\.80 km/s around its centre Vr -519\.8"),
])
def test_bad_inzdi_gives_one_line(tmp_path, capsys, edit, match):
    d = _copy_lopeg(tmp_path)
    text = (d / "inzdi.dat").read_text()
    assert edit[0] in text
    (d / "inzdi.dat").write_text(text.replace(edit[0], edit[1], 1))
    assert main(["import-zdipy", str(d / "inzdi.dat"), "--out", str(tmp_path / "t.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert re.search(match, err), err
    assert not (tmp_path / "t.toml").exists()


def test_truncated_inzdi_and_line_model(tmp_path):
    (tmp_path / "inzdi.dat").write_text("# i vsini P dOmega\n45 60 1.2 0\n0.8 0.9\n")
    with pytest.raises(DopplermapInputError, match=r"inzdi\.dat: ends after 2 parameter lines; expected next: n_rings"):
        read_inzdi(tmp_path / "inzdi.dat")
    (tmp_path / "line.dat").write_text("#wl0 str\n650.0 0.6 2.4\n")
    with pytest.raises(DopplermapInputError, match=r"line\.dat:2: expected 6 values \(wavelength_nm, strength"):
        read_zdipy_line(tmp_path / "line.dat")
