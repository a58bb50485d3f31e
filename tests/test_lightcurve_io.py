"""Light-curve files: TESS/Kepler FITS in the missions' layout, magnitudes, binning, warnings."""

from __future__ import annotations

import contextlib
import math
import re
import warnings

import astropy.units as u
import numpy as np
import pytest
from astropy.io import fits

from dopplermap.errors import DopplermapInputError, DopplermapWarning
from dopplermap.io.lightcurve import LightCurveRead, bin_lightcurve, load_lightcurve, read_lightcurve

BJD0 = 2459500.0  # a TESS sector (Oct 2021)


@contextlib.contextmanager
def strict():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        yield


# flags that the default masks of both missions drop (attitude tweak, safe mode, coarse point,
# Earth point, desaturation: bits 1-4 and 6 in both archive manuals)
DROPPED_BY_DEFAULT = (1, 2, 4, 8, 32)


def mission_fits(path, *, mission="TESS", n=400, n_quality=20, n_nan=15, drop=(), set_=None, seed=0, tunit=None,
                 flags=DROPPED_BY_DEFAULT):
    """A light-curve file in the layout of the TESS Science Data Products Description (SPOC
    ``*_lc.fits``) or of the Kepler Archive Manual (``kplr*_llc.fits``): primary header with
    the target, binary table LIGHTCURVE with the mission's columns, units and time keywords;
    ``n_quality`` cadences carry one of ``flags``.
    Returns the true BJD_TDB, the PDCSAP and SAP fluxes and the mask of good cadences."""
    rng = np.random.default_rng(seed)
    refi = 2457000 if mission == "TESS" else 2454833
    dt = 2.0 / 1440.0 if mission == "TESS" else 29.4244 / 1440.0
    bjd = BJD0 + 0.25 + dt * np.arange(n)
    pdc = (12000.0 * (1 + 0.01 * np.sin(2 * np.pi * (bjd - BJD0) / 0.4232)) + rng.normal(0, 5, n)).astype(np.float32)
    sap = (pdc * 1.07 + 40.0).astype(np.float32)  # SAP differs: picking it by mistake is visible
    quality = np.zeros(n, dtype=np.int32)
    qi = rng.choice(n, n_quality, replace=False)
    quality[qi] = rng.choice(flags, n_quality)
    ni = rng.choice(np.setdiff1d(np.arange(n), qi), n_nan, replace=False)
    pdc[ni] = np.nan
    time = bjd - refi
    time_col = time.copy()
    time_col[qi[:3]] = np.nan  # the pipelines leave NaN times in flagged gaps
    good = np.ones(n, bool)
    good[qi] = good[ni] = False
    qname = "QUALITY" if mission == "TESS" else "SAP_QUALITY"
    tunit = tunit or ("BJD - 2457000, days" if mission == "TESS" else "BJD - 2454833")
    cols = [fits.Column("TIME", "D", unit=tunit, array=time_col),
            fits.Column("TIMECORR", "E", unit="d", array=np.full(n, 3.1e-3, np.float32)),
            fits.Column("CADENCENO", "J", array=np.arange(n, dtype=np.int32) + 100000),
            fits.Column("SAP_FLUX", "E", unit="e-/s", array=sap),
            fits.Column("SAP_FLUX_ERR", "E", unit="e-/s", array=np.full(n, 6.0, np.float32)),
            fits.Column("SAP_BKG", "E", unit="e-/s", array=np.full(n, 300.0, np.float32)),
            fits.Column("SAP_BKG_ERR", "E", unit="e-/s", array=np.full(n, 2.0, np.float32)),
            fits.Column("PDCSAP_FLUX", "E", unit="e-/s", array=pdc),
            fits.Column("PDCSAP_FLUX_ERR", "E", unit="e-/s", array=np.full(n, 5.0, np.float32)),
            fits.Column(qname, "J", array=quality),
            fits.Column("PSF_CENTR1", "D", unit="pixel", array=np.full(n, np.nan)),
            fits.Column("PSF_CENTR2", "D", unit="pixel", array=np.full(n, np.nan)),
            fits.Column("MOM_CENTR1", "D", unit="pixel", array=np.full(n, 1024.3)),
            fits.Column("MOM_CENTR2", "D", unit="pixel", array=np.full(n, 512.7)),
            fits.Column("POS_CORR1", "E", unit="pixel", array=np.zeros(n, np.float32)),
            fits.Column("POS_CORR2", "E", unit="pixel", array=np.zeros(n, np.float32))]
    tab = fits.BinTableHDU.from_columns(cols, name="LIGHTCURVE")
    h = tab.header
    keys = dict(TELESCOP=mission if mission == "TESS" else "Kepler", TIMEREF="SOLARSYSTEM", TASSIGN="SPACECRAFT",
                TIMESYS="TDB", BJDREFI=refi, BJDREFF=0.0, TIMEUNIT="d", TELAPSE=float(n * dt),
                TSTART=float(time[0]), TSTOP=float(time[-1]), TIMEPIXR=0.5, TIERRELA=1.16e-5, TIMEDEL=dt,
                INT_TIME=1.98, DEADC=0.8)
    keys.update(set_ or {})
    for k, v in keys.items():
        if k not in drop:
            h[k] = v
    prim = fits.PrimaryHDU()
    ph = prim.header
    if mission == "TESS":
        ph.update(TELESCOP="TESS", INSTRUME="TESS Photometer", OBJECT="TIC 123456789", TICID=123456789, SECTOR=44,
                  CAMERA=1, CCD=2, RA_OBJ=322.85, DEC_OBJ=23.3356, ORIGIN="NASA/Ames", CREATOR="SPOC")
    else:
        ph.update(TELESCOP="Kepler", INSTRUME="Kepler Photometer", OBJECT="KIC 1234567", KEPLERID=1234567,
                  QUARTER=5, RA_OBJ=290.0, DEC_OBJ=44.5, ORIGIN="NASA/Ames")
    aperture = fits.ImageHDU(np.ones((11, 11), np.int32), name="APERTURE")
    fits.HDUList([prim, tab, aperture]).writeto(path)
    return bjd, pdc.astype(float), sap.astype(float), good


@pytest.mark.parametrize("mission", ["TESS", "Kepler"])
def test_mission_fits_times_pdcsap_quality_nan(tmp_path, mission):
    path = tmp_path / ("tess_lc.fits" if mission == "TESS" else "kplr_llc.fits")
    bjd, pdc, _, good = mission_fits(path, mission=mission)
    with strict():
        lc = read_lightcurve(path)
    assert lc.column == "PDCSAP_FLUX"
    np.testing.assert_allclose(lc.time, bjd[good], rtol=0, atol=1e-6)  # BJD_TDB, full JD
    np.testing.assert_allclose(lc.flux, pdc[good], rtol=1e-7)
    assert np.all(lc.err == 5.0)
    assert (lc.n_read, lc.n_quality, lc.n_invalid, lc.n_points) == (400, 20, 15, 365)
    q = fits.getdata(path, "LIGHTCURVE")["QUALITY" if mission == "TESS" else "SAP_QUALITY"]
    names = {1: "Attitude tweak", 2: "Safe mode", 4: "Coarse point", 8: "Earth point", 32: "Desaturation event"}
    by_flag = {names[b]: int(np.sum(q == b)) for b in DROPPED_BY_DEFAULT if np.any(q == b)}
    assert lc.dropped_by_flag == by_flag and sum(by_flag.values()) == 20
    mask = 17087 if mission == "TESS" else 1130799
    flags = ", ".join(f"{k} {v}" for k, v in by_flag.items())
    assert (f"400 cadences, PDCSAP_FLUX, quality mask 'default' ({mission}: {mask}), 35 dropped (quality 20 [{flags}], "
            "NaN 15); 365 points fitted") in lc.describe()


def test_sap_flux_on_request(tmp_path):
    bjd, pdc, sap, good = mission_fits(tmp_path / "lc.fits", n_nan=0)
    lc = read_lightcurve(tmp_path / "lc.fits", column="sap_flux")
    assert lc.column == "SAP_FLUX"
    np.testing.assert_allclose(lc.flux, sap[good], rtol=1e-7)
    with pytest.raises(DopplermapInputError, match=r"lc\.fits: lightcurve_column 'KSPSAP_FLUX' is not a column"):
        read_lightcurve(tmp_path / "lc.fits", column="KSPSAP_FLUX")


@pytest.mark.parametrize("drop,set_,match", [
    (("BJDREFI",), None, r"tess\.fits: keyword BJDREFI is missing \(needed for BJD = TIME \+ BJDREFI \+ BJDREFF\)"),
    (("BJDREFF",), None, r"tess\.fits: keyword BJDREFF is missing"),
    (("TIMESYS",), None, r"tess\.fits: keyword TIMESYS is missing"),
    (("TIMEUNIT",), None, r"tess\.fits: keyword TIMEUNIT is missing"),
    ((), {"TIMESYS": "GPS"}, r"tess\.fits: keyword TIMESYS = 'GPS' is not a time scale"),
    ((), {"TIMEUNIT": "yr"}, r"tess\.fits: keyword TIMEUNIT = 'yr' is not a time unit"),
    ((), {"BJDREFI": "2457000"}, r"tess\.fits: keyword BJDREFI = '2457000' is not a number"),
    ((), {"TIMEREF": "LOCAL"}, r"tess\.fits: keyword TIMEREF = 'LOCAL' is not a reference position"),
    ((), {"BJDREFI": 2454833}, r"tess\.fits: TIME unit 'BJD - 2457000, days' disagrees with BJDREFI \+ BJDREFF"),
])
def test_mission_keywords_are_read_never_assumed(tmp_path, drop, set_, match):
    mission_fits(tmp_path / "tess.fits", drop=drop, set_=set_)
    with pytest.raises(DopplermapInputError, match=match) as exc:
        read_lightcurve(tmp_path / "tess.fits")
    assert "\n" not in str(exc.value)


def test_mission_time_keywords_are_applied(tmp_path):
    """TIMESYS = 'TT' and a fractional BJDREFF are converted, not ignored."""
    bjd, *_ , good = mission_fits(tmp_path / "a.fits", set_={"BJDREFF": 0.25}, n_nan=0,
                                 tunit="BJD - 2457000.25, days")
    lc = read_lightcurve(tmp_path / "a.fits")
    np.testing.assert_allclose(lc.time, bjd[good] + 0.25, rtol=0, atol=1e-6)
    mission_fits(tmp_path / "b.fits", set_={"TIMESYS": "TT"}, n_nan=0)
    tt = read_lightcurve(tmp_path / "b.fits")
    d = (tt.time - bjd[good]) * 86400.0  # TDB - TT: periodic, |.| < 1.7 ms
    assert np.all(np.abs(d) < 2e-3) and np.all(d != 0.0)


def test_declared_scale_of_a_mission_file_must_agree(tmp_path):
    mission_fits(tmp_path / "tess.fits")
    read_lightcurve(tmp_path / "tess.fits", time_scale="BTJD")
    with pytest.raises(DopplermapInputError, match=r"lightcurve_time_scale = 'BKJD' disagrees with the file's keywords"):
        read_lightcurve(tmp_path / "tess.fits", time_scale="BKJD")


def test_many_dropped_cadences_warn(tmp_path):
    mission_fits(tmp_path / "tess.fits", n_quality=90, n_nan=30)
    with pytest.warns(DopplermapWarning, match=r"tess\.fits: 120 of 400 cadences dropped \(90 by the quality mask "
                                               r"'default' \(TESS: 17087\), 30 with NaN PDCSAP_FLUX"):
        lc = read_lightcurve(tmp_path / "tess.fits")
    assert lc.n_points == 280


def test_text_light_curve_in_btjd(tmp_path):
    bjd = BJD0 + np.linspace(0.0, 5.0, 30)
    np.savetxt(tmp_path / "lc.csv", np.c_[bjd - 2457000.0, np.ones(30), np.full(30, 1e-3)], delimiter=",",
               header="btjd,flux,flux_err", comments="")
    with strict():
        lc = read_lightcurve(tmp_path / "lc.csv", time_scale="BTJD")
    np.testing.assert_allclose(lc.time, bjd, rtol=0, atol=1e-9)
    assert lc.n_read is None and lc.n_dropped == 0


def test_magnitudes_converted_with_propagated_errors(tmp_path):
    rng = np.random.default_rng(2)
    t = BJD0 + np.linspace(0, 3, 60)
    m = 9.2 + 0.05 * np.sin(2 * np.pi * t / 0.4232) + 0.002 * rng.standard_normal(60)
    sm = np.full(60, 0.002) * (1 + rng.random(60))
    np.savetxt(tmp_path / "lc.dat", np.c_[t, m, sm], header="time mag err")
    with strict():
        lc = read_lightcurve(tmp_path / "lc.dat", unit="mag")
    want = u.Magnitude(m).physical  # astropy's definition of a magnitude: F = 10^(-0.4 m)
    np.testing.assert_allclose(lc.flux, want, rtol=1e-13)
    h = 1e-6  # error propagation = |dF/dm| sigma_m, by central differences
    deriv = (10 ** (-0.4 * (m - h)) - 10 ** (-0.4 * (m + h))) / (2 * h)
    np.testing.assert_allclose(lc.err, deriv * sm, rtol=1e-8)
    np.testing.assert_allclose(lc.err / lc.flux, 0.4 * math.log(10) * sm, rtol=1e-12)
    assert np.corrcoef(lc.flux, m)[0, 1] < -0.99  # brighter = smaller magnitude


def test_magnitudes_fed_as_flux_warn(tmp_path):
    t = BJD0 + np.linspace(0, 3, 60)
    m = 9.2 + 0.05 * np.sin(2 * np.pi * t / 0.4232)
    np.savetxt(tmp_path / "plain.csv", np.c_[t, m, np.full(60, 0.002)], delimiter=",")
    with pytest.warns(DopplermapWarning, match=r"plain\.csv: fluxes 9\.15\.\.9\.25 .* look like magnitudes.*"
                                               r"unit = 'mag' in its \[\[lightcurves\]\] table"):
        read_lightcurve(tmp_path / "plain.csv")
    np.savetxt(tmp_path / "named.csv", np.c_[t, 10 ** (-0.4 * m), np.full(60, 1e-6)], delimiter=",",
               header="time,Vmag,err", comments="")
    with pytest.warns(DopplermapWarning, match=r"named\.csv: the flux column is labelled 'Vmag'"):
        read_lightcurve(tmp_path / "named.csv")
    np.savetxt(tmp_path / "flux.csv", np.c_[t, 1 + 0.01 * np.sin(t), np.full(60, 1e-3)], delimiter=",")
    with pytest.warns(DopplermapWarning, match=r"flux\.csv: values .* are declared magnitudes but look like fluxes"):
        read_lightcurve(tmp_path / "flux.csv", unit="mag")
    np.savetxt(tmp_path / "dmag.csv", np.c_[t, m - 9.2, np.full(60, 0.002)], delimiter=",")
    with pytest.warns(DopplermapWarning, match=r"dmag\.csv: fluxes -0\.04978\.\.0\.05 change sign around 0: differential"):
        read_lightcurve(tmp_path / "dmag.csv")
    with strict():  # normalised fluxes and counts are not magnitudes
        read_lightcurve(tmp_path / "flux.csv")
        np.savetxt(tmp_path / "counts.csv", np.c_[t, 12000 + 100 * np.sin(t), np.full(60, 10.0)], delimiter=",")
        read_lightcurve(tmp_path / "counts.csv")


def _lc(t, f, e):
    return LightCurveRead(time=np.asarray(t, float), flux=np.asarray(f, float), err=np.asarray(e, float), source="x")


def test_time_binning_weighted_means_and_errors():
    t = np.array([0.0, 0.01, 0.02, 0.10, 0.11, 0.30])
    f = np.array([1.0, 2.0, 4.0, 3.0, 5.0, 7.0])
    e = np.array([0.1, 0.2, 0.4, 0.1, 0.1, 0.5])
    b = bin_lightcurve(_lc(t, f, e), 0.05)
    w = 1 / e**2
    groups = [slice(0, 3), slice(3, 5), slice(5, 6)]
    np.testing.assert_allclose(b.flux, [np.average(f[g], weights=w[g]) for g in groups], rtol=1e-14)
    np.testing.assert_allclose(b.err, [1 / np.sqrt(w[g].sum()) for g in groups], rtol=1e-14)
    np.testing.assert_allclose(b.time, [np.average(t[g], weights=w[g]) for g in groups], rtol=1e-14)
    # the weighted mean of the whole light curve and its error are kept
    wb = 1 / b.err**2
    assert np.average(b.flux, weights=wb) == pytest.approx(np.average(f, weights=w), rel=1e-14)
    assert wb.sum() == pytest.approx(w.sum(), rel=1e-14)
    assert (b.n_read, b.n_points, b.binned) == (6, 3, "0.05 d")


def test_phase_binning_folds_cycles():
    period, t0 = 0.5, BJD0
    rng = np.random.default_rng(3)
    phase = rng.random(2000)
    cycle = rng.integers(0, 40, 2000)
    t = np.sort(t0 + period * (cycle + phase))
    ph = np.mod((t - t0) / period, 1.0)
    f = 1 + 0.02 * np.cos(2 * np.pi * ph) + 1e-3 * rng.standard_normal(2000)
    e = np.full(2000, 1e-3)
    b = bin_lightcurve(_lc(t, f, e), 0.05, unit="phase", period=period, t0=t0)
    assert b.n_points == 20 and b.binned == "0.05 phase"
    bph = np.mod((b.time - t0) / period, 1.0)
    for k in range(20):
        inside = (ph >= 0.05 * k) & (ph < 0.05 * (k + 1))
        j = int(np.argmin(np.abs(bph - ph[inside].mean())))
        assert b.flux[j] == pytest.approx(f[inside].mean(), rel=1e-12)
        assert b.err[j] == pytest.approx(1e-3 / np.sqrt(inside.sum()), rel=1e-12)
    n_ref = math.floor(np.median((t - t0) / period))
    assert np.all(np.floor((b.time - t0) / period) == n_ref)  # one cycle: the median cadence's


def test_bad_binning_is_refused():
    lc = _lc([0, 1, 2], [1, 1, 1], [1, 1, 1])
    for width, unit, match in ((0.0, "d", r"lightcurve_bin must be > 0, got 0\.0"),
                               (0.7, "phase", r"in phase must be <= 0\.5, got 0\.7"),
                               (0.1, "cycles", r"lightcurve_bin_unit must be one of 'd', 'phase', got 'cycles'")):
        with pytest.raises(DopplermapInputError, match=match):
            bin_lightcurve(lc, width, unit=unit, period=1.0, t0=0.0)


def test_load_lightcurve_warns_for_days_from_zero_against_bjd_profiles(tmp_path):
    """The reported case: light-curve times in days from 0, profiles in BJD 2459500."""
    t = np.linspace(0, 27, 300)
    np.savetxt(tmp_path / "lc.csv", np.c_[t, 1 + 0.01 * np.sin(t), np.full(300, 1e-3)], delimiter=",")
    prof = BJD0 + np.linspace(0, 10, 15)
    with pytest.warns(DopplermapWarning, match=r"lc\.csv: light curve 0\.0+\.\.27\.0+, profiles 2459500.*do not overlap"):
        load_lightcurve(tmp_path / "lc.csv", profile_times=prof, period=0.4232, t0=BJD0)
    mission_fits(tmp_path / "tess.fits", n=2000)
    with strict():
        lc = load_lightcurve(tmp_path / "tess.fits", profile_times=prof, period=0.4232, t0=BJD0, bin_width=0.02,
                             bin_unit="phase")
    assert lc.n_points == 50 and lc.n_read == 2000 and "binned in 0.02 phase; 50 points fitted" in lc.describe()


def _target(root, lc_name, *, time_scale="BTJD", star_extra="", lc_extra="", old=False):
    """A target whose profiles are dated in ``time_scale`` (BJD0 + 0.3 .. 2.3 d) and a light curve
    (a ``[[lightcurves]]`` table; ``old``: the old ``[data] lightcurve`` spelling)."""
    from dopplermap.io.lsd import write_lsd
    from dopplermap.io.times import parse_time_scale

    off = parse_time_scale(time_scale).offset
    rows = []
    vels = np.linspace(-60, 60, 25)
    for k, t in enumerate(BJD0 + np.linspace(0.3, 2.3, 4)):
        name = f"ep{k}.lsd"
        write_lsd(root / name, vels, 1 - 0.3 * np.exp(-(vels / 20) ** 2), np.full(25, 1e-3))
        rows.append(f"{name},{t - off:.8f}")
    (root / "times.csv").write_text("file,time\n" + "\n".join(rows) + "\n")
    (root / "t.toml").write_text(f"""
[data]
profiles = ["ep*.lsd"]
times_table = "times.csv"
time_scale = "{time_scale}"
{f'lightcurve = "{lc_name}"' if old else ""}
[star]
inclination = 45.0
vsini = 30.0
period = 0.4232
t0 = {BJD0 - off}
{star_extra}
[temperatures]
phot = 5000.0
cool = 4000.0
hot = 6000.0

[line]
wavelength_nm = 600.0

[grid]
n_cell = 60
""" + ("" if old else f'\n[[lightcurves]]\nfile = "{lc_name}"\n{lc_extra}\n'))
    return root / "t.toml"


def test_problem_builder_converts_profiles_t0_and_light_curve(tmp_path):
    from dopplermap.config import load_config
    from dopplermap.problem import from_config

    bjd, pdc, _, good = mission_fits(tmp_path / "tess_lc.fits", n=1500)
    cfg = load_config(_target(tmp_path, "tess_lc.fits", lc_extra='bin = 0.01\nbin_unit = "d"'))
    with strict():
        prob = from_config(cfg)
    np.testing.assert_allclose(np.asarray(prob.obs.times), BJD0 + np.linspace(0.3, 2.3, 4), atol=1e-8)
    assert prob.star.t0 == pytest.approx(BJD0, abs=1e-9)
    read = prob.lightcurve_data.read
    assert (read.n_read, read.n_quality, read.n_invalid, read.binned) == (1500, 20, 15, "0.01 d")
    assert read.n_points == prob.lightcurve_data.times.size < 1500 - 35
    assert bjd[good][0] - 1e-9 <= prob.lightcurve_data.times[0] < bjd[good][0] + 0.01


def _two_spellings(root):
    """One light curve with reading options and a band, written in the old spelling
    (``[data] lightcurve*`` with ``[lightcurve]``) and as a ``[[lightcurves]]`` table:
    (old config, its DopplermapWarning messages, new config, old problem, new problem)."""
    from dopplermap.config import load_config
    from dopplermap.problem import from_config

    t = BJD0 + np.linspace(0.0, 2.0, 400)
    m = 9.2 + 0.02 * np.sin(2 * np.pi * t / 0.4232)
    np.savetxt(root / "lc.csv", np.c_[t, m, np.full(t.size, 2e-3)], delimiter=",")
    reading = {"unit": '"mag"', "bin": "0.05", "bin_unit": '"phase"', "time_scale": '"BJD_TDB"'}
    band = {"wavelength_nm": "700.0", "ld_phot": "[0.55]", "ld_cool": "[0.72]", "ld_hot": "[0.41]",
            "fit_dilution": "true"}
    old = _target(root, "lc.csv", time_scale="BJD_TDB", old=True)
    text = old.read_text().replace('lightcurve = "lc.csv"', 'lightcurve = "lc.csv"\n' + "\n".join(
        f"lightcurve_{k} = {v}" for k, v in reading.items()))
    old.write_text(text + "\n[lightcurve]\n" + "\n".join(f"{k} = {v}" for k, v in band.items()) + "\n")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cfg_old = load_config(old)
    said = [str(w.message) for w in seen if issubclass(w.category, DopplermapWarning)]
    (root / "new").mkdir()
    new = _target(root / "new", "../lc.csv", time_scale="BJD_TDB",
                  lc_extra="\n".join(f"{k} = {v}" for k, v in {**reading, **band}.items()))
    with strict():  # the table warns of nothing
        cfg_new = load_config(new)
        prob_new = from_config(cfg_new)
    return cfg_old, said, cfg_new, from_config(cfg_old), prob_new


def test_old_light_curve_spelling_is_read_as_one_table_with_one_warning(tmp_path):
    """The old spelling builds the problem its one ``[[lightcurves]]`` table builds (files,
    reading options, band, weights) and says the table once."""
    import jax

    cfg_old, said, cfg_new, prob_old, prob_new = _two_spellings(tmp_path)
    assert len(said) == 1 and "[[lightcurves]]" in said[0] and 'file = "lc.csv"' in said[0], said
    assert 'unit = "mag"' in said[0] and "ld_cool = [0.72]" in said[0] and "fit_dilution = true" in said[0]
    assert cfg_old.data.lightcurve is None and len(cfg_old.lightcurves) == 1
    assert cfg_new.lightcurves[0].name == cfg_old.lightcurves[0].name == "lightcurve"
    a, b = prob_old.lightcurve_data, prob_new.lightcurve_data
    assert a.read.binned and a.times.size < 400  # the reading options reached the reader
    for field in ("times", "flux", "err"):
        np.testing.assert_array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(b, field)))
    assert (a.band, a.fit_dilution, a.weight, a.name) == (b.band, True, 1.0, "lightcurve")
    assert a.band.limb_darkening[1].coeffs == pytest.approx((0.72,))
    assert prob_old.settings == prob_new.settings and prob_old.gravity == prob_new.gravity
    # the precomputed light-curve fits the loss reads agree leaf by leaf
    fa, fb = jax.tree_util.tree_flatten(prob_old.lightcurve), jax.tree_util.tree_flatten(prob_new.lightcurve)
    assert fa[1] == fb[1]
    for leaf_a, leaf_b in zip(fa[0], fb[0], strict=True):
        np.testing.assert_array_equal(np.asarray(leaf_a), np.asarray(leaf_b))


@pytest.mark.slow
def test_old_light_curve_spelling_gives_the_same_loss(tmp_path):
    from dopplermap.objective import loss

    *_, prob_old, prob_new = _two_spellings(tmp_path)
    x = np.linspace(0.05, 0.4, prob_old.layout.size)
    kw = {k: v for k, v in prob_old.invert_kwargs().items() if k in ("line_weight", "lc_weight", "offset_sigma")}
    f_old, f_new = (float(loss(x, 1.0, p.pre, p.obs, "mem", lightcurve=p.lightcurve, **kw))
                    for p in (prob_old, prob_new))
    assert np.isfinite(f_old) and f_old == f_new


def test_problem_builder_warns_for_reported_light_curve_cases(tmp_path):
    from dopplermap.config import load_config
    from dopplermap.problem import from_config

    t = np.linspace(0, 27, 300)
    np.savetxt(tmp_path / "days.csv", np.c_[t, 1 + 0.01 * np.sin(t), np.full(300, 1e-3)], delimiter=",")
    with pytest.warns(DopplermapWarning, match=r"days\.csv: light curve 0\.0+\.\.27\.0+, profiles 2459500\.3.* do not "
                                               r"overlap"):
        from_config(load_config(_target(tmp_path, "days.csv", time_scale="BJD_TDB")))
    m = 9.2 + 0.05 * np.sin(2 * np.pi * t / 0.4232)
    np.savetxt(tmp_path / "mag.csv", np.c_[BJD0 + t / 10, m, np.full(300, 2e-3)], delimiter=",")
    with pytest.warns(DopplermapWarning, match=r"mag\.csv: fluxes .* look like magnitudes"):
        from_config(load_config(_target(tmp_path, "mag.csv", time_scale="BJD_TDB")))
    with strict():
        prob = from_config(load_config(_target(tmp_path, "mag.csv", time_scale="BJD_TDB",
                                               lc_extra='unit = "mag"')))
    np.testing.assert_allclose(prob.lightcurve_data.flux, 10 ** (-0.4 * m), rtol=1e-12)


def test_long_light_curve_reads_without_a_fixed_size_warning_and_bins(tmp_path):
    """Reading warns of no size (the problem weighs the cost against its grid and line
    profiles: tests/test_lightcurve_memory.py); binning counts what is fitted."""
    mission_fits(tmp_path / "long.fits", n=20100, n_quality=0, n_nan=0)
    with strict():
        load_lightcurve(tmp_path / "long.fits")
        lc = load_lightcurve(tmp_path / "long.fits", bin_width=30.0 / 1440.0)
    assert lc.n_points == 1340 and lc.n_read == 20100  # 20100 two-minute cadences in 30-min bins


def test_invert_prints_what_was_read_dropped_and_fitted(tmp_path, capsys):
    """`dopplermap invert` with a TESS light curve: the counts on screen and in summary.json;
    the result's LIGHTCURVE times read back as BJD_TDB Time."""
    import json

    from astropy.table import QTable

    from dopplermap.cli import main

    bjd, _, _, good = mission_fits(tmp_path / "tess_lc.fits", n=1500)
    toml = _target(tmp_path, "tess_lc.fits", lc_extra='bin = 0.02\nbin_unit = "phase"')
    toml.write_text(toml.read_text() + "\n[inversion]\nmaxiter = 3\n")
    rc = main(["invert", str(toml), "--out", str(tmp_path / "res"), "--no-plots", "--quiet"])
    assert rc == 3  # maxiter = 3 keeps the test short: a complete result, reported as not converged
    out = capsys.readouterr().out
    assert re.search(r"1500 cadences, PDCSAP_FLUX, quality mask 'default' \(TESS: 17087\), 35 dropped \(quality 20 "
                     r"\[[^]]+\], NaN 15\), binned in 0\.02 phase; 50 points fitted", out)
    s = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert (s["lc_cadences"], s["lc_dropped_quality"], s["lc_dropped_nan"], s["lc_points"]) == (1500, 20, 15, 50)
    q = fits.getdata(tmp_path / "tess_lc.fits", "LIGHTCURVE")["QUALITY"]
    names = {1: "Attitude tweak", 2: "Safe mode", 4: "Coarse point", 8: "Earth point", 32: "Desaturation event"}
    assert s["lc_dropped_by_flag"] == {names[b]: int(np.sum(q == b)) for b in DROPPED_BY_DEFAULT if np.any(q == b)}
    assert s["lc_quality_bitmask"] == "'default' (TESS: 17087)"
    lc = QTable.read(tmp_path / "res" / "profiles.fits", hdu="LIGHTCURVE", astropy_native=True)
    assert lc["TIME"].scale == "tdb" and len(lc) == 50
    assert bjd[good].min() - 0.5 < lc["TIME"].jd.min() and lc["TIME"].jd.max() < bjd[good].max() + 0.5


# --------------------------------------------------------------- quality masks, columns, other files

# the flags each preset drops besides the default's, as the archive manuals describe them (TESS Science
# Data Products Description, cadence quality flags; Kepler Archive Manual, table 2.3)
DEFAULT_DROPS = {
    "TESS": {"Attitude tweak", "Safe mode", "Coarse point", "Earth point", "Argabrightening", "Desaturation event",
             "Manual exclude", "Impulsive outlier", "Bad calibration exclude"},
    "Kepler": {"Attitude tweak", "Safe mode", "Coarse point", "Earth point", "Desaturation event", "Manual exclude",
               "Detector anomaly", "No data", "Thruster firing"},
}
HARD_ALSO = {
    "TESS": {"Cosmic ray in aperture", "Cosmic ray in collateral data", "Straylight", "Scattered light"},
    "Kepler": {"Sudden sensitivity dropout", "Cosmic ray in aperture", "Cosmic ray in collateral data",
               "Possible thruster firing"},
}


@pytest.mark.parametrize("mission", ["TESS", "Kepler"])
def test_each_preset_drops_the_flags_the_archive_manuals_name(tmp_path, mission):
    from dopplermap.io.quality import KEPLER_FLAGS, TESS_FLAGS

    table = TESS_FLAGS if mission == "TESS" else KEPLER_FLAGS
    assert len(table) == (16 if mission == "TESS" else 20)  # TESS bits 1-16; Kepler 1-21 less the unused bit 10
    path = tmp_path / "lc.fits"
    mission_fits(path, mission=mission, n=600, n_quality=110, n_nan=0, flags=tuple(table))
    tab = fits.getdata(path, "LIGHTCURVE")
    q, gap = tab["QUALITY" if mission == "TESS" else "SAP_QUALITY"], np.isnan(tab["TIME"])  # flagged gaps: NaN time
    drops = {"none": set(), "default": DEFAULT_DROPS[mission], "hard": DEFAULT_DROPS[mission] | HARD_ALSO[mission],
             "hardest": set(table.values())}
    for preset, names in drops.items():
        with strict():
            lc = read_lightcurve(path, quality_bitmask=preset)
        bits = [b for b, name in table.items() if name in names]
        dropped = np.isin(q, bits)
        assert (lc.n_quality, lc.n_invalid, lc.n_points) == (dropped.sum(), (gap & ~dropped).sum(),
                                                             (~dropped & ~gap).sum())
        assert lc.dropped_by_flag == {table[b]: int(np.sum(q == b)) for b in sorted(table) if b in bits and
                                      np.any(q == b)}
    assert read_lightcurve(path).n_quality == read_lightcurve(path, quality_bitmask="default").n_quality
    # an integer mask is the bits it has: the two flags of bit value 4 and 32 (coarse point, desaturation)
    lc = read_lightcurve(path, quality_bitmask=4 | 32)
    assert lc.n_quality == int(np.isin(q, [4, 32]).sum()) and set(lc.dropped_by_flag) == {"Coarse point",
                                                                                           "Desaturation event"}
    assert "quality mask 36 (" + mission + ")" in lc.describe()


def test_cadences_with_several_flags_count_under_each(tmp_path):
    mission_fits(tmp_path / "lc.fits", n=50, n_quality=0, n_nan=0)
    with fits.open(tmp_path / "lc.fits", mode="update") as h:
        h["LIGHTCURVE"].data["QUALITY"][:4] = [1 | 32, 32, 256, 0]  # 256 (a corrected discontinuity) is kept
    lc = read_lightcurve(tmp_path / "lc.fits")
    assert (lc.n_quality, lc.n_points) == (2, 48)
    assert lc.dropped_by_flag == {"Attitude tweak": 1, "Desaturation event": 2}


def test_a_preset_needs_the_mission_an_integer_does_not(tmp_path):
    mission_fits(tmp_path / "lc.fits", n_nan=0, set_={"TELESCOP": "SOMEWHERE"})
    with fits.open(tmp_path / "lc.fits", mode="update") as h:
        h[0].header["TELESCOP"] = "SOMEWHERE"
    with pytest.raises(DopplermapInputError, match=r"lc\.fits: quality_bitmask 'default' needs the mission's flag "
                                                   r"definitions.*give an integer bit mask, or 'none'") as e:
        read_lightcurve(tmp_path / "lc.fits")
    assert "\n" not in str(e.value)
    assert read_lightcurve(tmp_path / "lc.fits", quality_bitmask="none").n_quality == 0
    assert read_lightcurve(tmp_path / "lc.fits", quality_bitmask=0xFFFF).n_quality == 20


@pytest.mark.parametrize("spec,match", [
    ("soft", r"quality_bitmask must be one of 'none', 'default', 'hard', 'hardest', got 'soft' \(or an integer bit "
             r"mask >= 0\)"),
    (-1, r"quality_bitmask must be >= 0 as an integer bit mask, got -1"),
    (True, r"quality_bitmask must be one of .* got True"),
])
def test_bad_quality_bitmask_is_one_line(tmp_path, spec, match):
    mission_fits(tmp_path / "lc.fits")
    with pytest.raises(DopplermapInputError, match=match):
        read_lightcurve(tmp_path / "lc.fits", quality_bitmask=spec)


def test_quality_bitmask_needs_a_quality_column(tmp_path):
    t = BJD0 + np.linspace(0, 1, 20)
    np.savetxt(tmp_path / "lc.csv", np.c_[t, np.ones(20), np.full(20, 1e-3)], delimiter=",")
    with pytest.raises(DopplermapInputError, match=r"lc\.csv: quality_bitmask = 'hard' applies to FITS light curves "
                                                   r"with a QUALITY column; a text file has none"):
        read_lightcurve(tmp_path / "lc.csv", quality_bitmask="hard")
    read_lightcurve(tmp_path / "lc.csv")  # not given: nothing to apply


def _add_columns(path, *cols):
    with fits.open(path) as h:
        tab = fits.BinTableHDU.from_columns(h["LIGHTCURVE"].columns + fits.ColDefs(list(cols)), header=h[1].header,
                                            name="LIGHTCURVE")
        fits.HDUList([h[0].copy(), tab, h[2].copy()]).writeto(path, overwrite=True)


def test_any_flux_column_with_its_own_error(tmp_path):
    _, pdc, _, good = mission_fits(tmp_path / "lc.fits", n_nan=0)
    cbv = (pdc * 0.98 + 7.0).astype(np.float32)
    _add_columns(tmp_path / "lc.fits", fits.Column("CBVSAP_FLUX", "E", unit="e-/s", array=cbv),
                 fits.Column("CBVSAP_FLUX_ERR", "E", unit="e-/s", array=np.full(pdc.size, 4.5, np.float32)),
                 fits.Column("KSPSAP_FLUX", "E", unit="e-/s", array=cbv))
    with strict():
        lc = read_lightcurve(tmp_path / "lc.fits", column="cbvsap_flux")
    assert lc.column == "CBVSAP_FLUX"
    np.testing.assert_array_equal(lc.flux, cbv[good].astype(float))
    assert np.all(lc.err == 4.5)
    with pytest.raises(DopplermapInputError, match=r"lc\.fits: no error column KSPSAP_FLUX_ERR for KSPSAP_FLUX"):
        read_lightcurve(tmp_path / "lc.fits", column="KSPSAP_FLUX")


def lightkurve_fits(path, *, tunit="btjd", telescop="TESS", n=300, creator="lightkurve.LightCurve.to_fits()"):
    """A file in the layout lightkurve's ``LightCurve.to_fits()`` writes (lightkurve 2.x): primary
    CREATOR/TELESCOP/MISSION, no time keywords; LIGHTCURVE table with TIME in the astropy format
    of the light curve (its unit), FLUX and FLUX_ERR (normalised: no unit), CADENCENO, QUALITY.
    Returns the TIME values, the flux and the QUALITY words."""
    rng = np.random.default_rng(4)
    time = 2459500.25 - (0.0 if tunit == "jd" else 2457000.0) + 2.0 / 1440.0 * np.arange(n)
    flux = (1 + 0.01 * np.sin(2 * np.pi * time / 0.4232) + 1e-4 * rng.standard_normal(n)).astype(np.float32)
    quality = np.zeros(n, np.int32)
    quality[::30] = 32  # desaturation: dropped by the default mask
    quality[5::30] = 256  # discontinuity corrected: kept
    cols = [fits.Column("TIME", "D", unit=tunit, array=time), fits.Column("FLUX", "E", array=flux),
            fits.Column("FLUX_ERR", "E", array=np.full(n, 1e-4, np.float32)),
            fits.Column("CADENCENO", "J", array=np.arange(n, dtype=np.int32)),
            fits.Column("QUALITY", "J", array=quality)]
    prim = fits.PrimaryHDU()
    prim.header.update(ORIGIN="Unofficial data product", CREATOR=creator, PROCVER="2.6.0", TELESCOP=telescop,
                       MISSION=telescop, OBJECT="25155310", RA_OBJ=63.37, DEC_OBJ=-69.23)
    fits.HDUList([prim, fits.BinTableHDU.from_columns(cols, name="LIGHTCURVE")]).writeto(path)
    return time, flux.astype(float), quality


def test_lightkurve_files_take_their_times_from_the_time_format(tmp_path):
    time, flux, q = lightkurve_fits(tmp_path / "flat.fits")
    with strict():
        lc = read_lightcurve(tmp_path / "flat.fits")
    keep = (q & 32) == 0
    np.testing.assert_array_equal(lc.time, time[keep] + 2457000.0)  # BTJD: BJD_TDB - 2457000
    np.testing.assert_array_equal(lc.flux, flux[keep])
    assert lc.column == "FLUX" and lc.time_scale == "TIME in lightkurve's 'btjd' format (BJD_TDB - 2457000)"
    assert (lc.n_read, lc.n_quality, lc.dropped_by_flag) == (300, 10, {"Desaturation event": 10})
    read_lightcurve(tmp_path / "flat.fits", time_scale="BTJD")  # agrees
    with pytest.raises(DopplermapInputError, match=r"lightcurve_time_scale = 'BKJD' disagrees with the file's TIME "
                                                   r"unit"):
        read_lightcurve(tmp_path / "flat.fits", time_scale="BKJD")
    time, _, _ = lightkurve_fits(tmp_path / "kepler.fits", tunit="bkjd", telescop="Kepler")
    np.testing.assert_array_equal(read_lightcurve(tmp_path / "kepler.fits").time[:3], time[1:4] + 2454833.0)
    # a target with it: the times reach the problem as BJD_TDB, beside profiles dated in BTJD
    from dopplermap.config import load_config
    from dopplermap.problem import from_config

    with strict():
        prob = from_config(load_config(_target(tmp_path, "flat.fits")))
    np.testing.assert_array_equal(prob.lightcurve_data.times, lc.time)
    for bad in (12, np.ones(3)):
        with pytest.raises(DopplermapInputError, match=r"a light curve is a file path or a lightkurve LightCurve"):
            read_lightcurve(bad)


def test_lightkurve_files_in_jd_need_a_declared_scale(tmp_path):
    time, *_ = lightkurve_fits(tmp_path / "jd.fits", tunit="jd")
    with pytest.raises(DopplermapInputError, match=r"jd\.fits: TIME is in 'jd' and the file names no time scale or "
                                                   r"reference point.*declare it with lightcurve_time_scale") as e:
        read_lightcurve(tmp_path / "jd.fits")
    assert "\n" not in str(e.value)
    with pytest.raises(DopplermapInputError, match=r"'BTJD' \(values \+ 2457000\) disagrees with the TIME unit 'jd'"):
        read_lightcurve(tmp_path / "jd.fits", time_scale="BTJD")
    lc = read_lightcurve(tmp_path / "jd.fits", time_scale="BJD_TDB")
    np.testing.assert_array_equal(lc.time[:2], time[1:3])


@pytest.mark.parametrize("make,match", [
    ("tess_tpf", r"tpf\.fits: a target-pixel file \(PIXELS table: a 11 x 11 pixel FLUX image per cadence, 40 "
                 r"cadences\), not a light curve: make a light curve from it first"),
    ("kepler_tpf", r"tpf\.fits: a target-pixel file \(TARGETTABLES table: a 6 x 5 pixel FLUX image per cadence"),
    ("ffi", r"tpf\.fits: a full-frame image \(64 x 48 pixels in HDU 1\), not a light curve"),
    ("image", r"tpf\.fits: an image \(64 x 48 pixels in HDU 0\), not a light curve"),
    ("spectrum_1d", r"tpf\.fits: a 1-D spectrum \(500 pixels along WAVE, HDU 0\), not a light curve"),
    ("spectrum_table", r"tpf\.fits: a spectrum \(table SPECTRUM has a wavelength column WAVE and no time column\)"),
    ("profile", r"tpf\.fits: a line profile \(table 1 has a velocity column V and no time column\), not a light "
                r"curve: give profiles as \[data\] profiles"),
    ("folded", r"tpf\.fits: a folded light curve \(written by lightkurve\.FoldedLightCurve\.to_fits\(\): TIME is "
               r"rotation phase\)"),
])
def test_other_products_given_as_a_light_curve_say_what_they_are(tmp_path, make, match):
    path, n = tmp_path / "tpf.fits", 40
    prim = fits.PrimaryHDU()
    if make in ("tess_tpf", "kepler_tpf"):  # TESS SDPDD / Kepler Archive Manual target-pixel layout
        shape = (11, 11) if make == "tess_tpf" else (5, 6)
        cube = np.ones((n, *shape), np.float32)
        dim = f"({shape[1]},{shape[0]})"
        cols = [fits.Column("TIME", "D", unit="BJD - 2457000, days", array=np.arange(n) / 720.0),
                fits.Column("RAW_CNTS", f"{cube[0].size}J", dim=dim, array=cube.astype(np.int32)),
                fits.Column("FLUX", f"{cube[0].size}E", dim=dim, unit="e-/s", array=cube),
                fits.Column("FLUX_ERR", f"{cube[0].size}E", dim=dim, unit="e-/s", array=cube),
                fits.Column("QUALITY", "J", array=np.zeros(n, np.int32))]
        prim.header.update(TELESCOP="TESS" if make == "tess_tpf" else "Kepler",
                           CREATOR="TargetPixelExporterPipelineModule")
        hdus = [prim, fits.BinTableHDU.from_columns(cols, name="PIXELS" if make == "tess_tpf" else "TARGETTABLES"),
                fits.ImageHDU(np.ones(shape, np.int32), name="APERTURE")]
    elif make == "ffi":
        prim.header.update(TELESCOP="TESS", CAMERA=1, CCD=1)
        hdus = [prim, fits.ImageHDU(np.zeros((48, 64), np.float32))]
    elif make == "image":
        hdus = [fits.PrimaryHDU(np.zeros((48, 64), np.float32))]
    elif make == "spectrum_1d":
        prim = fits.PrimaryHDU(np.ones(500, np.float32))
        prim.header.update(CTYPE1="WAVE", CRVAL1=5000.0, CDELT1=0.1, CUNIT1="Angstrom")
        hdus = [prim]
    elif make == "spectrum_table":
        cols = [fits.Column("WAVE", "D", unit="Angstrom", array=np.linspace(5000, 5100, n)),
                fits.Column("FLUX", "E", array=np.ones(n, np.float32)), fits.Column("ERR", "E", array=np.ones(n))]
        hdus = [prim, fits.BinTableHDU.from_columns(cols, name="SPECTRUM")]
    elif make == "profile":
        from dopplermap.io.lsd import write_lsd

        v = np.linspace(-50, 50, n)
        write_lsd(path, v, 1 - 0.2 * np.exp(-(v / 15) ** 2), np.full(n, 1e-3), fmt="fits")
        hdus = None
    else:  # folded
        lightkurve_fits(path, creator="lightkurve.FoldedLightCurve.to_fits()")
        hdus = None
    if hdus is not None:
        fits.HDUList(hdus).writeto(path)
    with pytest.raises(DopplermapInputError, match=match) as e:
        read_lightcurve(path)
    assert "\n" not in str(e.value)


def test_config_takes_a_quality_bitmask_for_each_light_curve(tmp_path):
    from dopplermap.config import load_config, parse_config
    from dopplermap.problem import from_config

    mission_fits(tmp_path / "tess_lc.fits", n=400, n_nan=0, flags=(256,))  # corrected discontinuities: kept
    toml = _target(tmp_path, "tess_lc.fits", old=True)  # the old spelling's key, then the table's
    read = from_config(load_config(toml)).lightcurve_data.read
    assert (read.n_quality, read.n_invalid, read.n_points) == (0, 3, 397)  # 3 flagged gaps have a NaN time
    toml.write_text(toml.read_text().replace('lightcurve = "tess_lc.fits"',
                                             'lightcurve = "tess_lc.fits"\nlightcurve_quality_bitmask = "hardest"'))
    read = from_config(load_config(toml)).lightcurve_data.read
    assert (read.n_points, read.dropped_by_flag) == (380, {"Discontinuity corrected": 20})
    toml.write_text(toml.read_text().replace('"hardest"', "256"))
    assert from_config(load_config(toml)).lightcurve_data.read.n_points == 380
    toml.write_text(toml.read_text().replace("= 256", "= 2.5"))
    with pytest.raises(DopplermapInputError, match=r"\[data\] lightcurve_quality_bitmask must be a string or an "
                                                   r"integer, got 2\.5"):
        load_config(toml)
    import tomllib

    t = tomllib.loads(toml.read_text().replace("lightcurve_quality_bitmask = 2.5\n", "").replace(
        'lightcurve = "tess_lc.fits"\n', ""))
    t["lightcurves"] = [{"file": "tess_lc.fits", "quality_bitmask": "nope"}]
    with pytest.raises(DopplermapInputError, match=r"\[\[lightcurves\]\] 1 \('lightcurve'\) quality_bitmask must be "
                                                   r"one of 'none', 'default', 'hard', 'hardest'"):
        parse_config(t, source="t.toml", base_dir=str(tmp_path))
    t["lightcurves"][0]["quality_bitmask"] = 256
    cfg = parse_config(t, source="t.toml", base_dir=str(tmp_path))
    assert from_config(cfg).lightcurve_data.read.n_points == 380
