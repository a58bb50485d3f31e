"""LSD and light-curve readers: round trips of simulator output and clear errors on bad files."""

import numpy as np
import pytest

import dopplermap as dm
from dopplermap.io.lightcurve import read_lightcurve, write_lightcurve
from dopplermap.io.lsd import load_observations, read_lsd, read_times_table, resample, times_from_pattern, write_lsd


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
    obs = load_observations([tmp_path / "a.lsd", tmp_path / "b.lsd"], times=[0.0, 1.0], normalise=False)
    assert np.allclose(obs.vels, v)
    assert np.allclose(obs.flux[1], np.asarray(o.flux[1]), atol=1e-12)  # linear data resample exactly
    # propagated error: halfway between two points of sigma s -> s / sqrt(2); on a node -> s
    f, e = resample([0.0, 1.0, 2.0], np.zeros(3), np.full(3, 0.02), [0.5, 1.0])
    assert e == pytest.approx([0.02 / np.sqrt(2), 0.02])
    with pytest.raises(ValueError, match="cannot resample"):
        resample([0.0, 1.0, 2.0], np.zeros(3), np.ones(3), [-1.0, 1.0])


GOOD = "***LSD profile\n4 3\n-10 1.0 0.01\n-5 0.9 0.01\n0 0.8 0.01\n5 0.95 0.01\n"


@pytest.mark.parametrize("text,match", [
    (GOOD.replace("0 0.8 0.01\n", "0 0.8\n"), r"bad\.lsd:5: expected 3 columns"),  # truncated row
    (GOOD.replace("-5 0.9", "-5 abc"), r"bad\.lsd:4: non-numeric value 'abc'"),
    (GOOD.replace("-5 0.9", "-5 nan"), r"bad\.lsd:4: intensity is nan"),
    (GOOD.replace("5 0.95 0.01", "5 0.95 0"), r"bad\.lsd:6: error must be > 0"),
    (GOOD.replace("0 0.8 0.01", "0 0.8 -0.01"), r"bad\.lsd:5: error must be > 0"),
    (GOOD.replace("4 3", "5 3"), r"bad\.lsd:6: file ends after 4 data rows but line 2 says N_points = 5"),
    (GOOD.replace("4 3", "3 3"), r"bad\.lsd:6: more data rows than N_points = 3"),
    (GOOD.replace("4 3", "four 3"), r"bad\.lsd:2: expected two integers"),
    (GOOD.replace("-5 0.9", "-15 0.9"), r"bad\.lsd:4: velocities must increase"),
])
def test_donati_rejects_corrupt_files(tmp_path, text, match):
    (tmp_path / "bad.lsd").write_text(text)
    with pytest.raises(ValueError, match=match):
        read_lsd(tmp_path / "bad.lsd")


def test_donati_good_file_reads(tmp_path):
    (tmp_path / "ok.lsd").write_text(GOOD)
    p = read_lsd(tmp_path / "ok.lsd")
    assert p.vels.tolist() == [-10, -5, 0, 5] and p.flux[2] == 0.8


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


def test_time_sources_errors(tmp_path):
    with pytest.raises(ValueError, match=r"does not match file name 'x\.lsd'"):
        times_from_pattern(["x.lsd"], r"BJD=(?P<time>[0-9.]+)")
    with pytest.raises(ValueError, match="needs a group"):
        times_from_pattern(["x.lsd"], r"BJD")
    (tmp_path / "t.csv").write_text("file,bjd\na.lsd,1.0\nb.lsd,oops\n")
    with pytest.raises(ValueError, match=r"t\.csv:3: time 'oops' is not a number"):
        read_times_table(tmp_path / "t.csv")
    (tmp_path / "t2.csv").write_text("a.lsd,1.0\na.lsd,2.0\n")
    with pytest.raises(ValueError, match=r"t2\.csv:2: file 'a\.lsd' listed twice"):
        read_times_table(tmp_path / "t2.csv")


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
