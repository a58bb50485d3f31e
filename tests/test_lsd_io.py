"""LSD, epochs-table and light-curve readers: the published layouts (Donati's LSD, LSDpy,
SpecpolFlow, ZDIpy), the real LO Peg files, round trips and one clear line per bad input."""

import warnings
from pathlib import Path

import numpy as np
import pytest

import dopplermap as dm
from dopplermap.errors import DopplermapInputError, DopplermapWarning
from dopplermap.io.lightcurve import read_lightcurve, write_lightcurve
from dopplermap.io.lsd import (
    load_observations,
    read_epochs_table,
    read_local_profile,
    read_lsd,
    read_times_table,
    resample,
    times_from_pattern,
    write_lsd,
)

LOPEG = Path(__file__).resolve().parents[2] / "shared" / "data" / "lopeg"


@pytest.fixture(scope="module")
def sim():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=6, n_vel=24, seed=2)
    return dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=300, seed=2)


@pytest.mark.parametrize("fmt,kw,name", [("donati", {}, "p.lsd"), ("donati", {"columns": 7}, "p.s"),
                                         ("text", {}, "p.txt"), ("csv", {}, "p.csv"), ("fits", {}, "p.fits")])
def test_round_trip_each_format(tmp_path, sim, fmt, kw, name):
    o = sim.obs
    v, f, e = (np.asarray(a) for a in (o.vels, o.flux[2], o.err[2]))
    write_lsd(tmp_path / name, v, f, e, fmt=fmt, **kw)
    p = read_lsd(tmp_path / name)
    assert np.allclose(p.vels, v, rtol=1e-9) and np.allclose(p.flux, f, rtol=1e-9) and np.allclose(p.err, e, rtol=1e-9)


def test_writer_uses_the_published_count_convention(tmp_path):
    """Line 2 is N_points and the number of columns after the velocity (as LSD, LSDpy, ZDIpy)."""
    v = np.linspace(-50, 50, 47)
    write_lsd(tmp_path / "i.lsd", v, np.ones(47), np.full(47, 1e-3))
    write_lsd(tmp_path / "iv.lsd", v, np.ones(47), np.full(47, 1e-3), columns=7)
    for name, count, ncol in (("i.lsd", "47 2", 3), ("iv.lsd", "47 6", 7)):
        lines = (tmp_path / name).read_text().splitlines()
        assert lines[0].startswith("***") and lines[1].split() == count.split()
        # what ZDIpy's reader does: skip 2 lines, columns from numpy
        assert np.loadtxt(tmp_path / name, skiprows=2).shape == (47, ncol)


# ---- fixtures in the published layouts --------------------------------------------------
N = 47
_V = np.round(np.linspace(-82.8, 82.8, N), 4)
_I = np.round(1.0 - 0.3 * np.exp(-0.5 * (_V / 25.0) ** 2), 5)
_SI = np.round(1.3e-3 + 1e-5 * np.arange(N), 7)
_SV = np.round(_SI / 4.5, 7)
_VV = np.round(1e-4 * np.sin(_V / 10.0), 8)


def _donati(cols, title="***Reduced spectrum of 'LOPEG   '          ", count=True, trailer=""):
    """Donati's LSD output: a title, ' N_points N_columns_after_v', rows '%10.4f %11.4e ...'."""
    data = {3: (_V, _I, _SI), 5: (_V, _I, _SI, _VV, _SV), 7: (_V, _I, _SI, _VV, _SV, -_VV, _SV),
            9: (_V, _I, _SI, _VV, _SV, -_VV, _SV, _VV / 2, _SV)}[cols]
    rows = "\n".join(f"{r[0]:10.4f}" + "".join(f" {x:11.4e}" for x in r[1:]) for r in zip(*data, strict=True))
    head = (title + "\n" if title is not None else "") + (f" {N} {cols - 1}\n" if count else "")
    return head + rows + "\n" + trailer


def _lsdpy(cols=7):
    """LSDpy / SpecpolFlow LSD.save: one header line, ' npix 6', rows '{:>12.6f} {:>13.6e} ...'."""
    data = (_V, _I, _SI, _VV, _SV, -_VV, _SV)
    rows = "\n".join(f"{r[0]:>12.6f}" + "".join(f" {x:>13.6e}" for x in r[1:cols]) for r in zip(*data, strict=True))
    title = "***LSD profile normalizing: d=0.200 lande=1.200 wl= 500.0 (I norm weight 0.200, V norm weight 120.000)"
    return f"{title}\n {N} {cols - 1}\n" + rows + "\n"


def _zdipy_model():
    """ZDIpy's saveModelProfs LSD-format output: '#synthetic prof cycle %f', '%i %i \\n', '%f %e ...'."""
    rows = "\n".join(f"{v:f} {i:e} {1e-8:e} {vv:e} {1e-8:e} {0.0:e} {1e-8:e}" for v, i, vv in zip(_V, _I, _VV, strict=True))
    return f"#synthetic prof cycle 0.123400\n{N} 6 \n" + rows + "\n"


@pytest.mark.parametrize("name,text", [
    ("donati_I.lsd", _donati(3)),                                     # ' 47 2': Stokes I only
    ("donati_IV.lsd", _donati(5)),                                    # ' 47 4': I and V
    ("donati_IVN.lsd", _donati(7)),                                   # ' 47 6': I, V, N (ESPaDOnS/NARVAL)
    ("specpolflow_9.lsd", _donati(9)),                                # ' 47 8': I, V, N1, N2
    ("renorm.prof.norm", _donati(7, title="#renormalized LSD prof")),  # ZDIpy renormLSD.py output
    ("no_count.lsd", _donati(7, count=False)),                        # title, no count line
    ("bare.lsd", _donati(7, title=None, count=False)),                # numbers only (SpecpolFlow reads these)
    ("comments.lsd", "# reduced with LSDpy\n# mask: t4500g45\n" + _donati(3, title=None)),
    ("dated_title.lsd", _donati(7, title="2014 Aug 16 LO Peg 02")),  # a title starting with a number
    ("trailing.lsd", _donati(7, trailer="\n\n   \n")),                # trailing blank lines
    ("lsdpy.lsd", _lsdpy()),
    ("zdipy.model", _zdipy_model()),
])
def test_reads_every_published_layout(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)  # the standard layouts read without a warning
        p = read_lsd(tmp_path / name)
    assert p.vels.size == N
    assert np.allclose(p.vels, _V, atol=1e-6) and np.allclose(p.flux, _I, rtol=1e-4)
    if name != "zdipy.model":
        assert np.allclose(p.err, _SI, rtol=1e-4)  # Stokes I error from column 3, never V's
    else:
        assert np.allclose(p.err, 1e-8)


def test_224_6_layout_as_espadons_lsd_writes_it(tmp_path):
    """224 points from -200 km/s in 1.8 km/s steps, ' 224 6', rows '%10.4f' then '%11.4e' x 6."""
    v = -200.0 + 1.8 * np.arange(224)
    i = 1 - 0.2 * np.exp(-0.5 * ((v + 19.8) / 30) ** 2)
    cols = (v, i, np.full(224, 1.3888e-3), np.zeros(224), np.full(224, 2.9998e-4), np.zeros(224), np.full(224, 2.9998e-4))
    rows = "\n".join(f"{r[0]:10.4f}" + "".join(f" {x:11.4e}" for x in r[1:]) for r in zip(*cols, strict=True))
    (tmp_path / "lopeg.prof").write_text("***Reduced spectrum of 'LOPEG   '          \n 224 6\n" + rows + "\n")
    p = read_lsd(tmp_path / "lopeg.prof", "donati")
    assert p.vels.size == 224 and p.vels[-1] == pytest.approx(201.4)
    assert np.allclose(p.flux, np.round(i, 4), atol=1e-4) and np.all(p.err == 1.3888e-3)


@pytest.mark.parametrize("fmt", ["auto", "text", "donati"])
def test_count_line_is_never_a_data_row_in_any_format(tmp_path, fmt):
    (tmp_path / "p.lsd").write_text(_donati(3))
    p = read_lsd(tmp_path / "p.lsd", fmt)
    assert p.vels[0] == pytest.approx(_V[0]) and p.vels.size == N


def test_donati_format_needs_the_count_line(tmp_path):
    (tmp_path / "p.lsd").write_text(_donati(7, count=False))
    with pytest.raises(DopplermapInputError, match=r"p\.lsd:2: format 'donati' needs a count line .*' 47 6'"):
        read_lsd(tmp_path / "p.lsd", "donati")
    assert read_lsd(tmp_path / "p.lsd", "auto").vels.size == N


def test_old_total_column_count_reads_with_a_warning(tmp_path):
    (tmp_path / "old.lsd").write_text(_donati(3).replace(f" {N} 2\n", f"{N} 3\n"))
    with pytest.warns(DopplermapWarning, match=r"old\.lsd:2: count line says 3 columns but counts the velocity"):
        p = read_lsd(tmp_path / "old.lsd")
    assert np.allclose(p.flux, _I)


def test_unusual_column_counts(tmp_path):
    rows = "\n".join(f"{v} {i} {s} 0" for v, i, s in zip(_V, _I, _SI, strict=True))
    (tmp_path / "four.lsd").write_text(f"***four\n {N} 3\n{rows}\n")
    with pytest.warns(DopplermapWarning, match=r"four\.lsd: 4 columns is not a standard LSD layout"):
        read_lsd(tmp_path / "four.lsd")
    # 6 columns: the LSDpy/SpecpolFlow spectrum layout (wl I V N1 N2 sigma): column 3 is V, refused
    rows = "\n".join(f"{v} {i} 1e-4 0 0 {s}" for v, i, s in zip(_V, _I, _SI, strict=True))
    (tmp_path / "obs.s").write_text(f"***Reduced spectrum\n {N} 5\n{rows}\n")
    with pytest.raises(DopplermapInputError, match=r"obs\.s:3: 6 columns is the layout of a spectrum"):
        read_lsd(tmp_path / "obs.s")


GOOD = "***LSD profile\n 4 2\n-10 1.0 0.01\n-5 0.9 0.01\n0 0.8 0.01\n5 0.95 0.01\n"


@pytest.mark.parametrize("text,match", [
    (GOOD.replace("0 0.8 0.01\n", "0 0.8\n"), r"bad\.lsd:5: expected 3 columns like the first data row \(line 3\), got 2"),
    (GOOD.replace("-5 0.9", "-5 abc"), r"bad\.lsd:4: non-numeric value 'abc'"),
    (GOOD.replace("-5 0.9", "-5 nan"), r"bad\.lsd:4: intensity is nan"),
    (GOOD.replace("5 0.95 0.01", "5 0.95 0"), r"bad\.lsd:6: error must be > 0"),
    (GOOD.replace("0 0.8 0.01", "0 0.8 -0.01"), r"bad\.lsd:5: error must be > 0"),
    (GOOD.replace(" 4 2", " 5 2"), r"bad\.lsd:6: file ends after 4 data rows but the count line 2 says N_points = 5"),
    (GOOD.replace(" 4 2", " 3 2"), r"bad\.lsd:6: more data rows than N_points = 3 \(count line 2\)"),
    (GOOD.replace(" 4 2", " 4 6"), r"bad\.lsd:2: count line says 6 columns after the velocity \(7 in all\), but the "
                                   r"data rows \(line 3 on\) have 3: expected ' 4 2'"),
    (GOOD.replace(" 4 2", "four 2"), r"bad\.lsd:2: expected a count line 'N_points N_columns' or data"),
    (GOOD.replace("-5 0.9", "-15 0.9"), r"bad\.lsd:4: velocities must increase"),
    (GOOD.replace(" 4 2\n", ""), None),  # no count line: fine
    (GOOD.replace(" 4 2\n", "").replace("-10 1.0", "-10 abc"), r"bad\.lsd:2: non-numeric value 'abc'"),  # not a title
])
def test_donati_rejects_corrupt_files(tmp_path, text, match):
    (tmp_path / "bad.lsd").write_text(text)
    if match is None:
        assert read_lsd(tmp_path / "bad.lsd").vels.tolist() == [-10, -5, 0, 5]
        return
    with pytest.raises(DopplermapInputError, match=match) as info:
        read_lsd(tmp_path / "bad.lsd")
    assert "\n" not in str(info.value)


def test_velocity_grid_in_m_per_s_is_refused(tmp_path):
    v = np.arange(-200_000.0, 200_001.0, 1800.0)  # a -200..200 km/s LSD grid written in m/s
    write_lsd(tmp_path / "ms.lsd", v, np.ones(v.size), np.full(v.size, 1e-3))
    with pytest.raises(DopplermapInputError, match=r"ms\.lsd: velocity grid looks like m/s, not km/s "
                                                   r"\(median step 1800, span 399600"):
        read_lsd(tmp_path / "ms.lsd")
    # one such file among good ones stops the read, naming it
    write_lsd(tmp_path / "ok.lsd", v / 1000, np.ones(v.size), np.full(v.size, 1e-3))
    with pytest.raises(DopplermapInputError, match=r"ms\.lsd: velocity grid looks like m/s"):
        load_observations([tmp_path / "ok.lsd", tmp_path / "ms.lsd"], times=[0.0, 1.0])


def _line(tmp_path, name, v):
    write_lsd(tmp_path / name, v, 1 - 0.2 * np.exp(-v**2 / 400), np.full(v.size, 1e-3))
    return tmp_path / name


def test_a_grid_unlike_the_others_warns(tmp_path):
    v = np.linspace(-100, 100, 101)
    files = [_line(tmp_path, f"a{k}.lsd", v) for k in range(3)] + [_line(tmp_path, "odd.lsd", np.linspace(-100, 100, 401))]
    with pytest.warns(DopplermapWarning, match=r"velocity grids differ: 1 of 4 files are unlike .*a0\.lsd's grid "
                                               r"\(step 2 km/s, span 200 km/s\), which 3 of them share: .*odd\.lsd "
                                               r"\(step 0\.5 km/s.*put on that grid .*101 points, -100\.\.100 km/s") as rec:
        obs = load_observations(files, times=[0.0, 1.0, 2.0, 3.0])
    assert len([w for w in rec if "grids differ" in str(w.message)]) == 1
    assert np.allclose(obs.vels, v)
    with warnings.catch_warnings():  # the same grid everywhere: no word
        warnings.simplefilter("error", DopplermapWarning)
        load_observations(files[:3], times=[0.0, 1.0, 2.0])


def test_a_coarse_first_profile_does_not_decide_the_grid(tmp_path):
    """The grid most files share is used, and the warning names the odd (first) file."""
    fine = np.linspace(-100, 100, 201)
    files = [_line(tmp_path, "coarse.lsd", np.linspace(-100, 100, 26))]
    files += [_line(tmp_path, f"f{k}.lsd", fine) for k in range(4)]
    with pytest.warns(DopplermapWarning, match=r"1 of 5 files are unlike .*f0\.lsd's grid \(step 1 km/s.*which 4 of "
                                               r"them share: .*coarse\.lsd \(step 8 km/s.*coarser file.*correlated"):
        obs = load_observations(files, times=np.arange(5.0))
    assert np.allclose(obs.vels, fine)
    # the coarse profile is interpolated onto the fine grid, the fine ones are taken as they are
    assert np.allclose(obs.flux[1:], (1 - 0.2 * np.exp(-fine**2 / 400)) / np.mean(1 - 0.2 * np.exp(-fine**2 / 400)))


def test_swapped_flux_and_error_columns_are_refused(tmp_path):
    v = np.linspace(-50, 50, 30)
    write_lsd(tmp_path / "sw.lsd", v, np.full(30, 1e-3), np.ones(30))  # flux ~1e-3, error ~1: swapped
    with pytest.raises(DopplermapInputError, match=r"sw\.lsd: median error 1 >= median intensity 0\.001 .*look swapped"):
        read_lsd(tmp_path / "sw.lsd")


def _fits(path, names, cols):
    from astropy.io import fits

    hdu = fits.BinTableHDU.from_columns([fits.Column(name=n, format="D", array=c) for n, c in zip(names, cols, strict=True)])
    fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(path)


def test_fits_columns_by_name_or_refused(tmp_path):
    v = np.linspace(-50, 50, 30)
    f = 1 - 0.3 * np.exp(-v**2 / 200)
    e = np.full(30, 2e-3)
    _fits(tmp_path / "odd.fits", ["VELO", "ERRS_I", "STOKESI"], [v, e, f])  # v, err, flux under unknown names
    with pytest.raises(DopplermapInputError, match=r"odd\.fits: cannot tell velocity, intensity and error apart from "
                                                   r"the column names \['VELO', 'ERRS_I', 'STOKESI'\].*fits_columns") as info:
        read_lsd(tmp_path / "odd.fits")
    assert "\n" not in str(info.value)
    p = read_lsd(tmp_path / "odd.fits", fits_columns=["VELO", "STOKESI", "ERRS_I"])
    assert np.allclose(p.flux, f) and np.allclose(p.err, e)
    with pytest.raises(DopplermapInputError, match=r"fits_columns 'FLUX' is not a column of the table \(columns found: "):
        read_lsd(tmp_path / "odd.fits", fits_columns=["VELO", "FLUX", "ERRS_I"])
    # recognised names but the data swapped (v, err, flux written as v, flux, err): refused, not chi2 = 0
    _fits(tmp_path / "swap.fits", ["v", "flux", "err"], [v, e, f])
    with pytest.raises(DopplermapInputError, match=r"swap\.fits \(table row\): median error .* look swapped"):
        read_lsd(tmp_path / "swap.fits")


# ---- epochs: tables, systemic velocity, window ------------------------------------------
def _line_files(tmp_path, centres):
    v = np.arange(-200.0, 200.1, 1.8)
    paths = []
    for k, c in enumerate(centres):
        p = tmp_path / f"ep{k}.prof"
        write_lsd(p, v, 1 - 0.3 * np.exp(-0.5 * ((v - c) / 20.0) ** 2), np.full(v.size, 1e-3), columns=7)
        paths.append(p)
    return paths


def test_systemic_velocity_and_window_around_the_line_centre(tmp_path):
    """Profiles on -200..200 km/s around v_rad = -19.8 are fitted on -80..80 around the line centre."""
    paths = _line_files(tmp_path, [-19.8] * 3)
    obs = load_observations(paths, times=[0.0, 1.0, 2.0], systemic_velocity=-19.8, velocity_range=(-80, 80),
                            normalise=False)
    u = np.asarray(obs.vels)
    assert u[0] >= -80 and u[-1] <= 80 and u[0] < -78 and u[-1] > 78
    assert np.allclose(np.diff(u), 1.8)
    for f in np.asarray(obs.flux):  # the line is centred at 0 in the star's frame
        assert abs(u[np.argmin(f)]) <= 0.9
    # same window without the shift would be centred on the observed frame: off by 19.8 km/s
    raw = load_observations(paths, times=[0.0, 1.0, 2.0], velocity_range=(-80, 80), normalise=False)
    assert abs(np.asarray(raw.vels)[np.argmin(np.asarray(raw.flux)[0])] + 19.8) <= 0.9


def test_epochs_table_with_per_epoch_systemic_velocity(tmp_path):
    centres = [-19.8, -5.0, 12.3]
    paths = _line_files(tmp_path, centres)
    (tmp_path / "epochs.csv").write_text("# epochs of the run\nfile,hjd,exptime,v_sys\n" + "".join(
        f"{p.name},{2456886.39 + k},600,{c}\n" for k, (p, c) in enumerate(zip(paths, centres, strict=True))))
    table = read_epochs_table(tmp_path / "epochs.csv")
    assert table["ep1.prof"].time == pytest.approx(2456887.39) and table["ep2.prof"].systemic_velocity == 12.3
    obs = load_observations(paths, times_table=tmp_path / "epochs.csv", velocity_range=(-60, 60), normalise=False)
    u = np.asarray(obs.vels)
    for f in np.asarray(obs.flux):
        assert abs(u[np.argmin(f)]) <= 1.0  # resampled, each epoch centred by its own v_sys
    assert np.asarray(obs.times)[0] == pytest.approx(2456886.39)


def test_epochs_ecsv_with_units(tmp_path):
    from astropy import units as u
    from astropy.table import QTable

    paths = _line_files(tmp_path, [-19.8, -19.8])
    t = QTable({"file": [p.name for p in paths], "bjd": [2459000.5, 2459001.5], "v_rad": [-19800.0, -19800.0] * u.m / u.s})
    t.write(tmp_path / "epochs.ecsv", format="ascii.ecsv")
    table = read_epochs_table(tmp_path / "epochs.ecsv")
    assert table["ep0.prof"].systemic_velocity == pytest.approx(-19.8) and table["ep1.prof"].time == 2459001.5
    t["v_rad"] = [1.0, 2.0] * u.day  # not a velocity
    t.write(tmp_path / "bad.ecsv", format="ascii.ecsv")
    with pytest.raises(DopplermapInputError, match=r"bad\.ecsv: column 'v_rad' \(unit d\) is not a velocity"):
        read_epochs_table(tmp_path / "bad.ecsv")
    (tmp_path / "junk.ecsv").write_text("# %ECSV 1.0\n# ---\n# garbage: [\n")
    with pytest.raises(DopplermapInputError, match=r"junk\.ecsv: not a readable ECSV table"):
        read_epochs_table(tmp_path / "junk.ecsv")


@pytest.mark.parametrize("text,match", [
    ("a.lsd,1.0\nb.lsd,oops\n", r"t\.csv:2: time 'oops' is not a number"),
    ("a.lsd,1.0\na.lsd,2.0\n", r"t\.csv:2: file 'a\.lsd' listed twice"),
    ("a.lsd,1.0,-19.8\nb.lsd,2.0,fast\n", r"t\.csv:2: systemic velocity 'fast' is not a number"),
    ("a.lsd,1.0,-19800\n", r"t\.csv:1: systemic velocity -19800\.0 km/s is beyond any star's .*m/s"),
    ("a.lsd,1.0,-19.8,3,4\n", r"t\.csv:1: expected 'file, time\[, v_sys\]' .* got 5 columns"),
    ("file,exptime\na.lsd,600\n", r"t\.csv:1: no time column among \['file', 'exptime'\]"),
    ("a.lsd,1.0,-19.8\nb.lsd,2.0\n", r"t\.csv:2: expected 3 columns like the first row, got 2"),
    ("a.lsd,nan\n", r"t\.csv:1: time is nan"),
    ("# nothing\n", r"t\.csv: no rows"),
])
def test_bad_epochs_tables(tmp_path, text, match):
    (tmp_path / "t.csv").write_text(text)
    with pytest.raises(DopplermapInputError, match=match) as info:
        read_epochs_table(tmp_path / "t.csv")
    assert "\n" not in str(info.value)


def test_load_observations_times_table_and_pattern(tmp_path, sim):
    o = sim.obs
    paths, rows = [], ["file,bjd"]
    for k in range(o.n_epoch)[::-1]:  # written out of time order
        t = float(o.times[k]) + 2459000.0
        p = tmp_path / f"star_BJD={t:.6f}.lsd"
        write_lsd(p, o.vels, o.flux[k], o.err[k])
        paths.append(p)
        rows.append(f"{p.name},{t:.6f}")
    (tmp_path / "times.csv").write_text("\n".join(rows) + "\n")
    a = load_observations(paths, times_table=tmp_path / "times.csv", normalise=False)
    b = load_observations(paths, time_pattern=r"BJD=(?P<time>[0-9.]+)\.lsd", normalise=False)
    for obs in (a, b):
        assert np.allclose(np.asarray(obs.times) - 2459000.0, np.asarray(o.times), atol=1e-6)
        assert np.allclose(obs.flux, o.flux, rtol=1e-9) and np.allclose(obs.err, o.err, rtol=1e-9)
    assert read_times_table(tmp_path / "times.csv")[paths[0].name] == pytest.approx(float(o.times[-1]) + 2459000.0)


def test_resample_onto_common_grid_propagates_errors(tmp_path, sim):
    o = sim.obs
    v = np.asarray(o.vels)
    fine = np.linspace(v[0], v[-1], 3 * (v.size - 1) + 1)  # contains the coarse nodes
    f2 = np.interp(fine, v, np.asarray(o.flux[1]))
    e2 = np.full(fine.size, 0.01)
    write_lsd(tmp_path / "a.lsd", v, o.flux[0], o.err[0])
    write_lsd(tmp_path / "b.lsd", fine, f2, e2)
    with pytest.warns(DopplermapWarning, match="velocity grids differ"):  # steps differ 3x: the coarser one is used
        obs = load_observations([tmp_path / "a.lsd", tmp_path / "b.lsd"], times=[0.0, 1.0], normalise=False)
    assert np.allclose(obs.vels, v)
    assert np.allclose(obs.flux[1], np.asarray(o.flux[1]), atol=1e-12)  # linear data resample exactly
    # propagated error: halfway between two points of sigma s -> s / sqrt(2); on a node -> s
    f, e = resample([0.0, 1.0, 2.0], np.zeros(3), np.full(3, 0.02), [0.5, 1.0])
    assert e == pytest.approx([0.02 / np.sqrt(2), 0.02])
    with pytest.raises(ValueError, match="cannot resample"):
        resample([0.0, 1.0, 2.0], np.zeros(3), np.ones(3), [-1.0, 1.0])


@pytest.mark.parametrize("text,match", [
    ("v,I,err\n-1,1,0.1\n0,0.9\n1,1,0.1\n", r"bad\.csv:3: expected 3 columns"),
    ("v,I,err\n-1,1,0.1\n0,x,0.1\n1,1,0.1\n", r"bad\.csv:3: non-numeric value 'x'"),
    ("v,I,err\n-1,1,0.1\n0,inf,0.1\n1,1,0.1\n", r"bad\.csv:3: intensity is inf"),
    ("v,I,err\n-1,1,0.1\n0,1,0.0\n1,1,0.1\n", r"bad\.csv:3: error must be > 0"),
])
def test_text_rejects_corrupt_files(tmp_path, text, match):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ValueError, match=match):
        read_lsd(tmp_path / "bad.csv")


def test_fits_rejects_bad_rows(tmp_path):
    write_lsd(tmp_path / "bad.fits", [-1.0, 0.0, 1.0, 2.0], [1.0, np.nan, 1.0, 1.0], [0.1] * 4, fmt="fits")
    with pytest.raises(ValueError, match=r"bad\.fits \(table row\):2: intensity is nan"):
        read_lsd(tmp_path / "bad.fits")
    write_lsd(tmp_path / "bad2.fits", [-1.0, 0.0, 1.0, 2.0], [1.0] * 4, [0.1, 0.1, -1.0, 0.1], fmt="fits")
    with pytest.raises(ValueError, match=r"bad2\.fits \(table row\):3: error must be > 0"):
        read_lsd(tmp_path / "bad2.fits")
    (tmp_path / "junk.fits").write_text("not fits")
    with pytest.raises(ValueError, match=r"junk\.fits: not a readable FITS file"):
        read_lsd(tmp_path / "junk.fits")


def test_time_sources_errors():
    with pytest.raises(ValueError, match=r"does not match file name 'x\.lsd'"):
        times_from_pattern(["x.lsd"], r"BJD=(?P<time>[0-9.]+)")
    with pytest.raises(ValueError, match="needs a group"):
        times_from_pattern(["x.lsd"], r"BJD")


# ---- tabulated local profiles -----------------------------------------------------------
_LV = np.linspace(-100.0, 100.0, 201)
_LI = 1 - 0.6 * np.exp(-0.5 * (_LV / 3.0) ** 2)


@pytest.mark.parametrize("head,cols", [("***local profile T=4500\n 201 2\n", 3), ("#synthetic\n201 1\n", 2),
                                       ("# v I/Ic\n", 2), ("", 2), ("#x\n 201 2\n", 2)])
def test_local_profile_count_line_is_not_a_data_point(tmp_path, head, cols):
    rows = "\n".join(f"{v:.3f} {i:.8f}" + (" 1.0e-4" if cols == 3 else "") for v, i in zip(_LV, _LI, strict=True))
    (tmp_path / "loc.dat").write_text(head + rows + "\n\n")
    prof = read_local_profile(tmp_path / "loc.dat")
    assert prof.velocity.size == 201 and prof.velocity[0] == -100.0
    assert np.allclose(prof(_LV), _LI, atol=1e-7)


def test_local_profile_bad_count_line_and_m_per_s(tmp_path):
    rows = "\n".join(f"{v:.3f} {i:.8f}" for v, i in zip(_LV, _LI, strict=True))
    (tmp_path / "loc.dat").write_text(" 200 1\n" + rows + "\n")
    with pytest.raises(DopplermapInputError, match=r"loc\.dat:202: more data rows than N_points = 200 "
                                                   r"\(count line 1\)"):
        read_local_profile(tmp_path / "loc.dat")
    (tmp_path / "ms.dat").write_text("\n".join(f"{1000 * v:.1f} {i:.8f}" for v, i in zip(_LV, _LI, strict=True)))
    with pytest.raises(DopplermapInputError, match=r"ms\.dat: velocity grid looks like m/s"):
        read_local_profile(tmp_path / "ms.dat")


# ---- the real LO Peg files ----------------------------------------------------------------
def _lopeg_files():
    if not (LOPEG / "LSDprof").is_dir():
        pytest.skip(f"LO Peg data not found at {LOPEG} (the shared data folder is absent)")
    return sorted((LOPEG / "LSDprof").glob("*.prof*"))


def test_lopeg_files_read_value_by_value():
    files = _lopeg_files()
    assert len(files) == 32
    for f in files:
        ref = np.loadtxt(f, skiprows=2)  # independent parse: what ZDIpy does
        p = read_lsd(f)
        assert ref.shape == (224, 7)
        assert np.array_equal(p.vels, ref[:, 0]) and np.array_equal(p.flux, ref[:, 1]) and np.array_equal(p.err, ref[:, 2])
        assert read_lsd(f, "donati").vels.size == 224


def test_lopeg_observations_in_the_zdipy_window():
    files = [f for f in _lopeg_files() if f.name.endswith(".norm")]
    obs = load_observations(files, times=np.arange(len(files), dtype=float), systemic_velocity=-19.8,
                            velocity_range=(-80.0, 80.0), normalise=False)
    ref = np.loadtxt(files[0], skiprows=2)
    keep = (ref[:, 0] >= -80 - 19.8) & (ref[:, 0] <= 80 - 19.8)  # ZDIpy's obsProfSetInRange selection
    assert obs.n_epoch == 16 and obs.n_vel == int(keep.sum())
    assert np.allclose(np.asarray(obs.vels), ref[keep, 0] + 19.8)
    assert np.array_equal(np.asarray(obs.flux)[0], ref[keep, 1])


# ---- light curves (reader shared with io/lightcurve.py) -------------------------------------
@pytest.mark.parametrize("fmt,name", [("csv", "lc.csv"), ("text", "lc.dat"), ("fits", "lc.fits")])
def test_lightcurve_round_trip(tmp_path, fmt, name):
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 5, 40)) + 2459000.0
    f = 1000.0 * (1 + 0.01 * rng.normal(size=40))
    e = np.full(40, 3.0)
    write_lightcurve(tmp_path / name, t, f, e, fmt=fmt)
    lc = read_lightcurve(tmp_path / name)
    assert np.allclose(lc.time, t, rtol=1e-12) and np.allclose(lc.flux, f) and np.allclose(lc.err, e)


@pytest.mark.parametrize("text,match", [
    ("time,flux,err\n1,1,0.1\n2,1\n", r"bad\.csv:3: expected 3 columns"),
    ("time,flux,err\n1,1,0.1\n2,q,0.1\n", r"bad\.csv:3: non-numeric value 'q'"),
    ("time,flux,err\n1,1,0.1\n2,nan,0.1\n", r"bad\.csv:3: flux is nan"),
    ("time,flux,err\n1,1,0.1\n2,1,-0.1\n", r"bad\.csv:3: error must be > 0"),
])
def test_lightcurve_rejects_corrupt(tmp_path, text, match):
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(ValueError, match=match):
        read_lightcurve(tmp_path / "bad.csv")


# ---- configuration keys of the readers ------------------------------------------------------
def _cfg(**over):
    from dopplermap.config import parse_config

    t = {"data": {"profiles": ["*.lsd"], "times_table": "t.csv"}, "star": {"inclination": 60.0, "vsini": 40.0, "period": 2.0},
         "temperatures": {"phot": 5000.0, "cool": 4000.0, "hot": 5000.0}, "line": {"wavelength_nm": 600.0}}
    for sec, kv in over.items():
        t[sec].update(kv)
    return parse_config(t, source="t.toml")


def test_config_reader_keys():
    cfg = _cfg(star={"systemic_velocity": -19.8}, data={"fits_columns": ["VEL", "I", "ERR"], "velocity_range": [-80.0, 80.0]})
    assert cfg.star.systemic_velocity == -19.8 and cfg.data.fits_columns == ("VEL", "I", "ERR")
    assert _cfg().star.systemic_velocity == 0.0 and _cfg().data.fits_columns is None
    for over, match in [({"star": {"systemic_velocity": -19800.0}}, r"t\.toml: \[star\] systemic_velocity -19800\.0 km/s"),
                        ({"star": {"systemic_velocity": "fast"}}, r"t\.toml: \[star\] systemic_velocity must be a number"),
                        ({"data": {"fits_columns": ["VEL", "I"]}}, r"t\.toml: \[data\] fits_columns must name 3 different")]:
        with pytest.raises(DopplermapInputError, match=match):
            _cfg(**over)


def test_load_profiles_from_a_target(tmp_path):
    from dopplermap.config import parse_config
    from dopplermap.io.lsd import load_profiles

    paths = _line_files(tmp_path, [-19.8, -19.8, -19.8])
    (tmp_path / "t.csv").write_text("".join(f"{p.name} {2459000.5 + k}\n" for k, p in enumerate(paths)))
    t = {"data": {"profiles": ["ep*.prof"], "times_table": "t.csv", "velocity_range": [-80.0, 80.0]},
         "star": {"inclination": 60.0, "vsini": 40.0, "period": 2.0, "systemic_velocity": -19.8},
         "temperatures": {"phot": 5000.0, "cool": 4000.0, "hot": 5000.0}, "line": {"wavelength_nm": 600.0}}
    obs, files = load_profiles(parse_config(t, source=str(tmp_path / "t.toml"), base_dir=str(tmp_path)))
    u = np.asarray(obs.vels)
    assert len(files) == 3 and u[0] >= -80 and u[-1] <= 80 and abs(u[np.argmin(np.asarray(obs.flux)[0])]) < 1
    t["data"]["velocity_range"] = [300.0, 400.0]
    with pytest.raises(DopplermapInputError, match=r"t\.toml: \[data\] velocity_range \[300\.0, 400\.0\]: the files share less"):
        load_profiles(parse_config(t, source=str(tmp_path / "t.toml"), base_dir=str(tmp_path)))


def test_a_spectrum_is_not_a_line_profile(tmp_path):
    """SpotDIPy's `.in` spectra (wavelength in nm, tens of thousands of points) and spectra in
    Angstrom are refused naming the file; a short cut-out in nm or thousands of points warn."""
    def write(name, x):
        write_lsd(tmp_path / name, x, 1 - 0.1 * np.exp(-((x - x.mean()) / (0.05 * np.ptp(x))) ** 2), np.full(x.size, 1e-3))
        return tmp_path / name

    with pytest.raises(DopplermapInputError, match=r"nm\.lsd: 5000 points from 600 to 610 \(median step 0\.002\) is "
                                                   r"a spectrum on a wavelength axis \(nm\?\)"):
        read_lsd(write("nm.lsd", np.linspace(600.0, 610.0, 5000)))
    with pytest.raises(DopplermapInputError, match=r"aa\.lsd: 200 points from 6000 to 6100 .* cannot be velocities "
                                                   r"of a stellar line in km/s"):
        read_lsd(write("aa.lsd", np.linspace(6000.0, 6100.0, 200)))
    with pytest.warns(DopplermapWarning, match=r"cut\.lsd: 201 points from 655 to 657 .* wavelengths in nm"):
        read_lsd(write("cut.lsd", np.linspace(655.0, 657.0, 201)))
    with pytest.warns(DopplermapWarning, match=r"many\.lsd: 4001 points from -200 to 200 .* is it a spectrum\?"):
        read_lsd(write("many.lsd", np.linspace(-200.0, 200.0, 4001)))
    with warnings.catch_warnings():  # LSD profiles, around 0 or around a systemic velocity of +150 km/s
        warnings.simplefilter("error", DopplermapWarning)
        read_lsd(write("lsd.lsd", np.linspace(-100.0, 100.0, 112)))
        read_lsd(write("vsys.lsd", np.arange(110.0, 190.0, 1.8)))


def test_a_file_cut_short_warns_and_a_whole_one_does_not(tmp_path):
    """A cut inside the last number still parses (0.0034664 -> 0.00346): only the missing
    final newline tells, so it warns; the same file whole reads without a warning."""
    vels = np.linspace(-40.0, 40.0, 21)
    whole = tmp_path / "whole.lsd"
    write_lsd(whole, vels, 1.0 - 0.3 * np.exp(-0.5 * (vels / 10.0) ** 2), np.full(vels.size, 0.0034664))
    assert whole.read_text().endswith("\n")
    cut = tmp_path / "cut.lsd"
    cut.write_text(whole.read_text()[:-4])
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        read_lsd(whole)
    with pytest.warns(DopplermapWarning, match="cut.lsd: the last line has no newline"):
        prof = read_lsd(cut)
    assert prof.err[-1] != pytest.approx(0.0034664, rel=1e-6)  # the silent change the warning is for
