"""The calibration benchmark's independent disc integrator against dopplermap's dense model,
and one calibration star end to end (benchmarks/bench_calibration.py)."""

import dataclasses
from types import SimpleNamespace

import bench_calibration as B  # noqa: E402
import jax.numpy as jnp
import numpy as np
import pytest
from support.cluster import kill_one_worker

import dopplermap as dm
from dopplermap.constants import FILL_MIN

SPOTS = [(40.0, 30.0, 20.0, "cool", 0.8), (10.0, 200.0, 15.0, "hot", 0.6)]


@pytest.fixture(scope="module")
def case():
    grid = dm.latitude_band_grid(200)
    times = np.linspace(0.0, 2.0, 6)
    vels = np.linspace(-60.0, 60.0, 40)
    fc, fh = B.spot_fill(grid.lat, grid.lon, SPOTS)
    star = dm.StarParams(inclination=55.0, vsini=35.0, period=2.0, t0=0.0)
    # the integrator weighs each cell by max(mu, 0): the same sum as the sharp limb
    pre = dm.precompute(grid, star, times, vels, B._components(), method="dense", limb="sharp")
    return grid, times, vels, fc, fh, pre


def _brute(grid, times, vels, fc, fh, rv):
    bf = B.brute_force_profiles(grid.lat, grid.lon, grid.area, fc, fh, times, vels, 55.0, 35.0, 2.0, rv)
    return bf / bf.mean(axis=1, keepdims=True)


def test_planck_ratio_matches_dopplermap():
    assert B.planck_ratio(3800.0, 5000.0, 600.0) == pytest.approx(dm.intensity_ratio(3800.0, 5000.0, 600.0), rel=1e-9)


def test_brute_force_equals_dense_model_without_rv(case):
    # same cells, no rv shift: two independent codes of the same integral agree to rounding
    grid, times, vels, fc, fh, pre = case
    model = np.asarray(dm.forward(jnp.asarray(fc), jnp.asarray(fh), jnp.zeros(6), jnp.zeros(6), pre))
    assert np.abs(_brute(grid, times, vels, fc, fh, 0.0) - model).max() < 1e-9


@pytest.mark.parametrize("inclination", [30.0, 85.0])
def test_smooth_limb_against_the_fine_integrator(inclination):
    """A featureless star on 300 cells against the integrator on ~11.7k: the smooth limb's
    profiles are as close as the sharp limb's (both limited by the cells' discrete velocities)."""
    flat, flon, farea = B.fine_grid(96)
    grid = dm.latitude_band_grid(300)
    times, vels = np.linspace(0.0, 2.0, 8, endpoint=False), np.linspace(-60.0, 60.0, 40)
    zero = np.zeros_like(flat)
    ref = B.brute_force_profiles(flat, flon, farea, zero, zero, times, vels, inclination, 35.0, 2.0, 0.0)
    ref = ref / ref.mean(axis=1, keepdims=True)
    star = dm.StarParams(inclination=inclination, vsini=35.0, period=2.0)
    err = {}
    for limb in ("sharp", "smooth"):
        pre = dm.precompute(grid, star, times, vels, B._components(), method="dense", limb=limb)
        z = jnp.full(grid.n_cell, 1e-5)
        err[limb] = np.abs(np.asarray(dm.forward(z, z, jnp.zeros(8), jnp.zeros(8), pre)) - ref).max()
    assert err["smooth"] < 5e-3 and err["smooth"] <= 1.15 * err["sharp"]


def test_rv_shift_is_exact_and_model_within_interpolation_error(case):
    grid, times, vels, fc, fh, pre = case
    rv = np.linspace(-1.3, 1.3, 6)
    # exactness: shifting the local profiles by rv is the rv=0 profile at v - rv (before normalisation)
    raw = B.brute_force_profiles(grid.lat, grid.lon, grid.area, fc, fh, times, vels, 55.0, 35.0, 2.0, rv)
    for e in range(6):
        ref = B.brute_force_profiles(grid.lat, grid.lon, grid.area, fc, fh, times[e:e + 1], vels - rv[e],
                                     55.0, 35.0, 2.0, 0.0)
        assert np.abs(raw[e] - ref[0]).max() < 1e-12
    # dopplermap interpolates the disc-integrated profile linearly: its error is bounded by
    # t (h - t) / 2 max|f''| per epoch (t the shift's offset from a grid node, h the step)
    model = np.asarray(dm.forward(jnp.asarray(fc), jnp.asarray(fh), jnp.asarray(rv), jnp.zeros(6), pre))
    exact = raw / raw.mean(axis=1, keepdims=True)
    h = vels[1] - vels[0]
    fine = np.arange(vels[0], vels[-1], 0.05)
    prof = B.brute_force_profiles(grid.lat, grid.lon, grid.area, fc, fh, times, fine, 55.0, 35.0, 2.0, 0.0)
    f2 = np.abs(np.diff(prof, 2, axis=1)).max(axis=1) / 0.05**2 / raw.mean(axis=1)
    t = np.mod(rv, h)
    bound = t * (h - t) / 2 * f2 * 1.05 + 1e-9
    err = np.abs(exact - model).max(axis=1)
    assert np.all(err <= bound)
    assert err.max() > 0.05 * bound.max()  # the two really differ: one shifts exactly, one interpolates


@pytest.mark.slow
def test_one_calibration_star_end_to_end():
    s = B.make_star(7, n_lat=48, n_cell=150, n_vel=24)
    assert np.all(np.isfinite(s["truth_fssc"])) and s["truth_fssc"].max() > 0.3  # spots resolved per cell
    r = B.run_grid(s, incs=[50.0, 65.0, 80.0], vsini_steps=[-1.0, 0.0, 1.0])
    assert r["grid_points"] == 9
    for key in ("grid_inc", "cont_inc", "grid_vsini", "cont_vsini", "cont_inc_lo68", "cont_inc_hi68"):
        assert np.isfinite(r[key])
    assert r["grid_inc_lo68"] <= r["grid_inc"] <= r["grid_inc_hi68"]
    assert r["cont_inc_lo68"] <= r["cont_inc"] <= r["cont_inc_hi68"]
    j = B.run_joint(s, start_inc=70.0, maxiter=300)
    assert np.isfinite(j["joint_inc"]) and 1.0 <= j["joint_inc"] <= 90.0 and np.isfinite(j["joint_vsini"])


def test_ld_linear_grid_finds_the_independent_integrator_s_limb_darkening():
    """A spotless star integrated by the benchmark's disc integrator with u = 0.4 on every
    component: the grid over ``ld_linear`` (map free) puts its minimum at 0.4, though the
    problem was built with other coefficients (0.65, 0.75, 0.60)."""
    from dopplermap.problem import DEMO_T_PHOT, DEMO_WAVELENGTH_NM, Problem
    from dopplermap.search import evaluate_point

    flat, flon, farea = B.fine_grid(64)
    zero = np.zeros_like(flat)
    times, vels = np.linspace(0.0, 2.0, 8), np.linspace(-45.0, 45.0, 40)
    clean = B.brute_force_profiles(flat, flon, farea, zero, zero, times, vels, 60.0, 35.0, 2.0, 0.0,
                                   lines=tuple((d, w, 0.4) for d, w, _ in B.LINES))
    mean = clean.mean(axis=1, keepdims=True)
    obs = dm.Observations.create(times, vels, clean / mean, np.full_like(clean, 1e-3) / mean)
    prob = Problem(grid=dm.latitude_band_grid(300), star=dm.StarParams(inclination=60.0, vsini=35.0, period=2.0),
                   obs=obs, components=B._components(), t_phot=DEMO_T_PHOT, wavelength_nm=DEMO_WAVELENGTH_NM)
    vals = np.array([0.2, 0.3, 0.4, 0.5, 0.6])
    prof = np.array([evaluate_point(prob, {"ld_linear": float(v)})["chi2_total"] for v in vals])
    best, _, _ = B.continuous_interval(vals, prof)
    assert abs(best - 0.4) < 0.03, (best, prof)


def test_continuous_interval_on_a_parabola():
    v = np.arange(10.0, 91.0, 5.0)
    best, lo, hi = B.continuous_interval(v, 0.5 * ((v - 47.0) / 3.0) ** 2 * 2, 1.0)
    assert best == pytest.approx(47.0, abs=1e-9)
    # linear interpolation of a parabola overestimates it between nodes: the interval is inside +-3
    assert 44.0 <= lo < 47.0 < hi <= 50.0 and hi - lo > 4.0


def test_continuous_interval_narrower_than_the_grid_step():
    v = np.arange(20.0, 31.0, 1.0)
    best, lo, hi = B.continuous_interval(v, 100.0 * (v - 25.3) ** 2, 1.0)
    assert best == pytest.approx(25.3, abs=1e-9)
    assert lo == pytest.approx(25.2, abs=1e-9) and hi == pytest.approx(25.4, abs=1e-9)


# ------------------------------------------------- the calibrated estimator (dopplermap.calibrate)

def test_profile_minimum_is_the_parabola_vertex():
    from dopplermap.calibrate import profile_minimum

    v = np.array([10.0, 20.0, 25.0, 40.0])  # uneven steps
    assert profile_minimum(v, 3.0 * (v - 23.0) ** 2 + 7.0) == pytest.approx(23.0, abs=1e-9)
    assert profile_minimum(v, v) == 10.0  # minimum at the edge: the node
    assert profile_minimum(v, -np.abs(v - 25.0)) == 10.0  # no upward curvature: the lowest node


SYNTHETIC_TRIALS = np.arange(10.0, 90.1, 5.0)


def _synthetic_belt(truth, rng, n_sim=40, trials=SYNTHETIC_TRIALS):
    """A biased, compressive, clipped estimator (what the regularised read-out looks like):
    estimate = clip(0.6 truth + 14 + N(0, 4), 10, 90)."""
    def estimator(t, size):
        return np.clip(0.6 * t + 14.0 + rng.normal(0.0, 4.0, size), 10.0, 90.0)

    sims = np.stack([estimator(t, n_sim) for t in trials])
    return trials, sims, float(estimator(truth, 1)[0])


def test_neyman_belt_removes_a_known_bias_and_covers():
    from dopplermap.calibrate import belt_estimate

    rng = np.random.default_rng(3)
    truths = np.tile([25.0, 40.0, 55.0, 70.0], 100)
    err, raw_err, in68, in95 = [], [], [], []
    for truth in truths:
        trials, sims, obs = _synthetic_belt(truth, rng)
        b = belt_estimate(trials, sims, obs)
        err.append(b["estimate"] - truth)
        raw_err.append(obs - truth)
        in68.append(b["lo68"] <= truth <= b["hi68"])
        in95.append(b["lo95"] <= truth <= b["hi95"])
        assert b["lo95"] <= b["lo68"] <= b["estimate"] <= b["hi68"] <= b["hi95"]
    err, raw_err = np.array(err), np.array(raw_err)
    # the raw estimate is biased by 14 - 0.4 truth (+4 at 25, -14 at 70 deg); the calibrated one is
    # not, and its scatter is the raw scatter / 0.6 (4 / 0.6 = 6.7 deg), so 400 draws give its mean
    # to +-0.35 deg and each truth's 100 to +-0.7 (bounds at 3.4 and 4 sigma)
    assert np.mean(raw_err[truths == 70.0]) < -12.0 and np.mean(raw_err[truths == 25.0]) > 2.5
    assert abs(np.mean(err)) < 1.2
    for t in (25.0, 40.0, 55.0, 70.0):
        assert abs(np.mean(err[truths == t])) < 3.0
    assert 6.0 < np.std(err) < 7.8
    assert 0.58 <= np.mean(in68) <= 0.78
    assert 0.90 <= np.mean(in95) <= 0.99


def test_neyman_belt_flat_estimator_gives_a_wide_honest_set():
    from dopplermap.calibrate import belt_estimate

    # an estimator that ignores the truth above 50: the set must span everything above ~50
    rng = np.random.default_rng(4)
    trials = np.arange(10.0, 90.1, 10.0)
    sims = np.stack([np.minimum(t, 50.0) + rng.normal(0.0, 2.0, 30) for t in trials])
    b = belt_estimate(trials, sims, 50.0)
    assert b["lo68"] < 50.0 and b["hi68"] == 90.0 and b["hi_open"]
    b = belt_estimate(trials, sims, 5.0)  # below every trial's estimates
    assert b["no_crossing"] and b["estimate"] == 10.0


def test_neyman_belt_sharp_estimator_between_trials():
    from dopplermap.calibrate import belt_estimate

    # spread 0.05 with trials 1 apart: the set is the spread's width, not the trials' step
    rng = np.random.default_rng(5)
    trials = np.arange(30.0, 35.1, 1.0)
    sims = np.stack([t - 0.2 + rng.normal(0.0, 0.05, 400) for t in trials])
    b = belt_estimate(trials, sims, 32.3)
    assert b["estimate"] == pytest.approx(32.5, abs=0.02)
    assert 0.07 < b["hi68"] - b["lo68"] < 0.13


@pytest.mark.slow
def test_calibrate_parameter_on_a_small_star():
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter, calibration_cost

    s = B.make_star(7, n_lat=48, n_cell=120, n_vel=20)
    vals = [60.0, 70.0, 80.0]
    c = calibrate_parameter(s["problem"], "inclination", vals, fixed={"vsini": s["vsini"]},
                            options=CalibrationOptions(n_sim=4, seed=2))
    assert c.sims.shape == (3, 4) and c.n_solves == calibration_cost(3, 3, 4)["total"] == 3 + 3 * 13
    assert np.all((c.sims >= 60.0) & (c.sims <= 80.0)) and 60.0 <= c.raw <= 80.0
    assert c.lo95 <= c.lo68 <= c.estimate <= c.hi68 <= c.hi95
    assert 60.0 <= c.lo95 and c.hi95 <= 80.0
    # the raw estimate is read off the observed profile: within a step of its lowest node
    assert abs(c.raw - vals[int(np.argmin(c.profile))]) <= 10.0 and np.all(np.isfinite(c.profile))
    from dopplermap.calibrate import calibrated_star

    st = calibrated_star(s["problem"].star, {"inclination": c})
    assert st.inclination == c.estimate and st.vsini == s["problem"].star.vsini
    with pytest.raises(dm.DopplermapInputError, match="both calibrated and fixed"):
        calibrate_parameter(s["problem"], "inclination", vals, fixed={"inclination": 50.0})
    with pytest.raises(dm.DopplermapInputError, match="n_sim"):
        calibrate_parameter(s["problem"], "inclination", vals, options=CalibrationOptions(n_sim=2))


@pytest.mark.slow
def test_cli_grid_calibrate_prints_one_criterion(tmp_path, capsys):
    import json

    from dopplermap.app.search import save_problem
    from dopplermap.cli import main

    s = B.make_star(7, n_lat=48, n_cell=120, n_vel=20)
    npz = save_problem(tmp_path / "p.npz", s["problem"].obs, s["problem"].star, n_cell=120)
    out = tmp_path / "g"
    rc = main(["grid", str(npz), "--out", str(out), "--param", "inclination=60,70,80", "--param", "vsini=35",
               "--calibrate", "4", "--scheduler", "sync", "-q"])
    assert rc == 0
    text = capsys.readouterr().out
    cal = json.loads((out / "grid.json").read_text())["calibrated"]
    assert list(cal) == ["inclination"] and cal["inclination"]["n_sim"] == 4
    c = cal["inclination"]
    assert c["lo95"] <= c["lo68"] <= c["estimate"] <= c["hi68"] <= c["hi95"]
    # the printed best point and interval are the calibrated ones; vsini (one value) is held
    assert f"inclination={c['estimate']:.4g}" in text and "vsini=35 (held)" in text
    assert f"68 % {c['lo68']:.4g} .. {c['hi68']:.4g}" in text and "Delta chi2" not in text
    # the calibration's finished work kept beside the table (what --resume continues from)
    assert len((out / "calibrate-inclination.jsonl").read_text().splitlines()) == 3
    assert (out / "calibrate-inclination.npz").exists()
    # nothing to calibrate: refused before the search
    assert main(["grid", str(npz), "--out", str(tmp_path / "h"), "--param", "inclination=60,70", "--calibrate", "4",
                 "--scheduler", "sync"]) == 2
    assert not (tmp_path / "h" / "grid.csv").exists()


def test_owner_cells_by_bounds_and_by_nearest_centre():
    import dataclasses

    from dopplermap.calibrate import owner_cells

    coarse, fine = dm.latitude_band_grid(200), dm.latitude_band_grid(800)
    o = owner_cells(coarse, fine)
    lb, ob = np.asarray(coarse.lat_bounds)[o], np.asarray(coarse.lon_bounds)[o]
    lat, lon = np.asarray(fine.lat), np.mod(np.asarray(fine.lon), 2 * np.pi)
    assert np.all((lb[:, 0] <= lat) & (lat < lb[:, 1]) & (ob[:, 0] <= lon) & (lon < ob[:, 1]))
    assert np.bincount(o, minlength=200).min() >= 1  # every coarse cell is sampled
    # without bounds (any other grid kind): the nearest centre, mostly the same cell
    bare = dataclasses.replace(coarse, lat_bounds=None, lon_bounds=None)
    assert np.mean(owner_cells(bare, fine) == o) > 0.8


@pytest.mark.slow
def test_cli_calibrates_in_axis_order_holding_calibrated_values(tmp_path):
    import json

    from dopplermap.app.search import save_problem
    from dopplermap.cli import main

    s = B.make_star(7, n_lat=48, n_cell=120, n_vel=20)
    npz = save_problem(tmp_path / "p.npz", s["problem"].obs, s["problem"].star, n_cell=120)
    out = tmp_path / "g"
    assert main(["grid", str(npz), "--out", str(out), "--param", "inclination=60,70,80", "--param", "vsini=34,35,36",
                 "--calibrate", "4", "--calibrate-oversample", "1", "--scheduler", "sync", "-q"]) == 0
    g = json.loads((out / "grid.json").read_text())
    cal = g["calibrated"]
    assert list(cal) == ["inclination", "vsini"] and cal["vsini"]["sim_oversample"] == 1
    assert cal["inclination"]["fixed"] == {"vsini": g["best"]["vsini"]}  # the grid's best
    assert cal["vsini"]["fixed"] == {"inclination": cal["inclination"]["estimate"]}  # the calibrated value


def test_calibration_refuses_what_it_does_not_simulate():
    from dopplermap.calibrate import check_calibratable

    p = B.make_star(7, n_lat=24, n_cell=60, n_vel=12)["problem"]
    check_calibratable(p)  # the plain line-profile problem is fine
    check_calibratable(p.replace(settings=p.settings.replace(fit_components=("cool",))))  # simulated as one
    with pytest.raises(dm.DopplermapInputError, match="line_weight"):
        check_calibratable(p.replace(settings=p.settings.replace(line_weight=2.0)))


def test_a_cool_spot_only_calibration_fits_cool_spots_only(monkeypatch):
    """A cool-spot-only problem (``import-zdipy``'s) is calibrated as one: its trial maps and
    every data set's solves hold the hot spots at the floor, as the grid's own solves do."""
    from dopplermap import calibrate
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter

    seen = []

    def spy(fn):
        def wrapped(*args, **kw):
            out = fn(*args, **kw)
            results = out.results if hasattr(out, "results") else out
            seen.append((kw.get("fit_components"), max(float(np.max(r.fssh)) for r in results)))
            return out
        return wrapped

    monkeypatch.setattr(calibrate, "solve_many", spy(calibrate.solve_many))
    monkeypatch.setattr(calibrate, "invert_batch", spy(calibrate.invert_batch))
    s = B.make_star(7, n_lat=32, n_cell=80, n_vel=16)
    p = s["problem"]
    cool = p.replace(settings=p.settings.replace(fit_components=("cool",)))
    c = calibrate_parameter(cool, "inclination", [60.0, 70.0, 80.0], fixed={"vsini": s["vsini"]},
                            options=CalibrationOptions(n_sim=4, seed=1, sim_oversample=1))
    assert len(seen) >= 2 + 3  # the trial maps, then every grid value's data sets
    assert all(comps == ("cool",) and fssh == FILL_MIN for comps, fssh in seen), seen
    assert np.all(np.isfinite(c.sims)) and c.lo95 <= c.estimate <= c.hi95


def test_calibration_is_sized_before_anything_is_allocated(tmp_path, capsys, monkeypatch):
    """The grid's guard for the calibration: the number of solves (the --max-points limit) and
    the memory of its largest batch, refused before the grid search or any simulation."""
    import re

    from dopplermap import calibrate, search
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter, calibration_cost, check_calibration_size
    from dopplermap.cli import main
    from dopplermap.memory import MAX_GRID_POINTS

    p = B.make_star(7, n_lat=24, n_cell=60, n_vel=12)["problem"]
    # the cost sums the axes: 3 trial maps + 3 values x (1 + 3 x 4) data sets each
    assert check_calibration_size(p, {"inclination": (3, 3), "vsini": (3, 3)}, 4)["total"] == 2 * 42
    n = calibration_cost(3, 3, 1_000_000)["total"]
    assert n == 3 + 3 * 3_000_001 > MAX_GRID_POINTS
    with pytest.raises(dm.DopplermapInputError, match=re.escape(f"{n:.4g} solves") + f".*limit of {MAX_GRID_POINTS}.*--max-points"):
        check_calibration_size(p, {"inclination": (3, 3)}, 1_000_000)
    with pytest.raises(dm.DopplermapInputError, match="9006 solves"):  # a lowered limit
        check_calibration_size(p, {"inclination": (3, 3)}, 1000, max_solves=9005)
    assert check_calibration_size(p, {"inclination": (3, 3)}, 1000, max_solves=9006)["total"] == 9006
    monkeypatch.setenv("DOPPLERMAP_MAX_MEMORY", "1M")
    with pytest.raises(dm.DopplermapInputError, match=r"calibration batch of 3001 data sets .* more than the limit"):
        check_calibration_size(p, {"inclination": (3, 3)}, 1000)
    monkeypatch.delenv("DOPPLERMAP_MAX_MEMORY")

    def never(*a, **k):
        raise AssertionError("work started before the calibration was sized")

    monkeypatch.setattr(calibrate, "invert_batch", never)
    with pytest.raises(dm.DopplermapInputError, match="solves"):
        calibrate_parameter(p, "inclination", [60.0, 70.0, 80.0], options=CalibrationOptions(n_sim=1_000_000))
    with pytest.raises(dm.DopplermapInputError, match="max_solves"):
        CalibrationOptions(max_solves=0)
    monkeypatch.setattr(search, "grid_search", never)
    import dopplermap.app.search as app_search

    monkeypatch.setattr(app_search, "load_problem", lambda *a, **k: p)  # the small star, as a PROBLEM file would give
    out = tmp_path / "g"
    assert main(["grid", "--out", str(out), "--param", "inclination=50,60,70", "--calibrate", "1000000",
                 "--scheduler", "sync"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "9e+06 solves" in err[0] and "--max-points" in err[0]
    assert not (out / "grid.csv").exists()


@pytest.mark.slow
def test_calibration_on_a_two_worker_cluster_equals_the_serial_one(monkeypatch):
    """The grid values' solves as Dask tasks of a few data sets each, on a local 2-worker
    cluster: the same profiles, estimate and sets as in this process, also when a worker is
    killed midway (its tasks run again elsewhere)."""
    from dask.distributed import LocalCluster

    from dopplermap import calibrate, search
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter

    s = B.make_star(7, n_lat=48, n_cell=120, n_vel=20)
    kw = dict(fixed={"vsini": s["vsini"]}, options=CalibrationOptions(n_sim=4, seed=2, mode="sequential"))
    vals = [60.0, 70.0, 80.0]
    serial = calibrate_parameter(s["problem"], "inclination", vals, **kw)
    monkeypatch.setattr(calibrate, "TASK_MEMBERS", 5)  # 13 data sets: 3 tasks per grid value
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        where = search.Cluster(cluster.scheduler_address)
        held = []

        def count_held(stage, i, n):  # finished results the scheduler still keeps, mid-run
            if stage == "grid" and i == 2:
                from dask.distributed import Client

                with Client(cluster.scheduler_address) as c:
                    held.append(c.run_on_scheduler(lambda dask_scheduler: (
                        sum(t.state == "memory" for t in dask_scheduler.tasks.values()),
                        max((len(t.dependencies) for t in dask_scheduler.tasks.values()), default=0))))

        spread = calibrate_parameter(s["problem"], "inclination", vals, cluster=where, progress=count_held, **kw)
        # at most one unread result a chain (3), nothing scattered (the workers hold the problem and
        # data), and no task depends on another: a worker lost now costs no finished task, and a
        # lost task is run again alone, not rebuilt from its chain's task before (and that one's)
        assert held and held[0][0] <= 3 and held[0][1] == 0, held
        killed = []

        def kill_a_worker(stage, i, n):  # when the first grid value is in: a worker dies mid-run
            if stage == "grid" and not killed:
                killed.append(kill_one_worker(cluster.scheduler_address))

        survived = calibrate_parameter(s["problem"], "inclination", vals, cluster=where, progress=kill_a_worker, **kw)
    assert killed
    for run in (spread, survived):
        assert run.mode == serial.mode == "sequential"
        for col in calibrate.COLUMNS:
            np.testing.assert_allclose(run.member_profiles[col], serial.member_profiles[col], rtol=1e-9)
        assert (run.estimate, run.lo68, run.hi68) == pytest.approx((serial.estimate, serial.lo68, serial.hi68),
                                                                   rel=1e-9)


def test_interrupted_calibration_resumes_from_its_table(tmp_path, monkeypatch):
    """A calibration keeps its data sets and each finished grid value's solves as they finish:
    killed midway and run again with the same table it solves only what was left and gives
    the uninterrupted result; a line cut off by the kill is dropped, and a calibration of
    other inputs (another seed) takes nothing from the table. The solves are stand-ins (a
    profile with its minimum where each data set's mean puts it): the bookkeeping is tested."""
    from dopplermap import calibrate
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter
    from dopplermap.problem import demo_problem

    class Killed(Exception):
        pass

    small_problem = demo_problem(n_cell=100, n_epoch=8, n_vel=20)
    calls = {"sets": 0, "values": [], "warm": []}

    def sets(problem, at, t, kw, lm_sim, err, o, progress):
        calls["sets"] += 1
        rng = np.random.default_rng(o.seed)
        return rng.normal(size=(1 + t.size * o.n_sim, *err.shape))

    def value_task(problem, name, fixed, value, flux, err, kw, mode):
        calls["values"].append(value)
        calls["warm"].append("x0" in kw)
        if value == stop_at[0]:
            raise Killed  # the run is killed while solving this grid value
        centre = 70.0 + 20.0 * flux.mean(axis=(1, 2))
        chi2 = 1.0 + ((value - centre) / 10.0) ** 2
        results = [SimpleNamespace(x=np.full(3, value), iterations=1, cube_dtype=None) for _ in chi2]
        return chi2, chi2 + 0.5, SimpleNamespace(mode="sequential", results=results, describe=lambda: "stand-in")

    monkeypatch.setattr(calibrate, "_simulated_sets", sets)
    monkeypatch.setattr(calibrate, "grid_value_task", value_task)
    vals = [60.0, 65.0, 70.0, 75.0, 80.0]
    kw = dict(fixed={"vsini": small_problem.star.vsini}, options=CalibrationOptions(n_sim=4, seed=3))
    stop_at = [None]
    whole = calibrate_parameter(small_problem, "inclination", vals, **kw)
    table = tmp_path / "calibrate-inclination.jsonl"
    kept = dict(kw, options=CalibrationOptions(n_sim=4, seed=3, table=table))
    stop_at[0] = 75.0
    calls.update(sets=0, values=[], warm=[])
    with pytest.raises(Killed):
        calibrate_parameter(small_problem, "inclination", vals, **kept)
    # every value after the first starts from the solutions at the value before
    assert calls == {"sets": 1, "values": [60.0, 65.0, 70.0, 75.0], "warm": [False, True, True, True]}
    assert len(table.read_text().splitlines()) == 3 and table.with_suffix(".npz").exists()
    with open(table, "a") as fh:  # a line cut off by the kill
        fh.write('{"digest": "')
    stop_at[0] = None
    calls.update(sets=0, values=[], warm=[])
    resumed = calibrate_parameter(small_problem, "inclination", vals, **kept)
    # the data sets and three values from the table; the first value solved again starts cold
    assert calls == {"sets": 0, "values": [75.0, 80.0], "warm": [False, True]}
    for col in calibrate.COLUMNS:
        np.testing.assert_array_equal(resumed.member_profiles[col], whole.member_profiles[col])
    assert (resumed.estimate, resumed.lo68, resumed.hi68) == (whole.estimate, whole.lo68, whole.hi68)
    # other inputs: nothing taken from the table, everything solved
    calls.update(sets=0, values=[], warm=[])
    other = dict(kw, options=CalibrationOptions(n_sim=4, seed=4, table=table))
    calibrate_parameter(small_problem, "inclination", vals, **other)
    assert calls["sets"] == 1 and calls["values"] == vals


def test_warm_started_calibration_gives_the_cold_profiles(monkeypatch):
    """Each data set's solve at a grid value starts from its own solution at the value
    before: on a problem with one minimum (maps only, rv and offsets held; tol 1e-9) every
    data set's profile is the cold-started one's to 0.05 in chi2 (the profiles change by
    several units a grid step), so the base estimates and the calibrated sets are the same.
    (The iterations saved are measured at the calibration's real size: bench_many.py.)"""
    from dopplermap import calibrate
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter
    from dopplermap.problem import demo_problem

    p = demo_problem(n_cell=100, n_epoch=8, n_vel=20)
    p = p.replace(settings=p.settings.replace(tol=1e-9, maxiter=5000, fit_rv=False, fit_amp=False))
    kw = dict(fixed={"vsini": p.star.vsini}, trials=[55.0, 70.0])
    vals = [55.0, 62.5, 70.0]
    seen = []
    task = calibrate.grid_value_task

    def spy(problem, name, fixed, value, flux, err, kw, mode):
        out = task(problem, name, fixed, value, flux, err, kw, mode)
        seen.append((kw.get("x0"), np.stack([r.x for r in out[2].results])))
        return out

    def run(warm):
        return calibrate_parameter(p, "inclination", vals, **kw, options=CalibrationOptions(
            n_sim=4, seed=1, sim_oversample=1, mode="sequential", warm_start=warm))

    cold = run(False)
    monkeypatch.setattr(calibrate, "grid_value_task", spy)
    warm = run(True)
    # each data set started from its own solution at the value before (the first value cold)
    assert seen[0][0] is None and len(seen) == len(vals)
    for (_, before), (x0, _) in zip(seen[:-1], seen[1:], strict=True):
        np.testing.assert_array_equal(x0, before)
    step = np.abs(np.diff(cold.member_profiles["chi2_total"], axis=0))
    assert np.median(step) > 1.0
    np.testing.assert_allclose(warm.member_profiles["chi2_total"], cold.member_profiles["chi2_total"], rtol=0,
                               atol=0.05)
    np.testing.assert_allclose(warm.sims, cold.sims, rtol=0, atol=0.05)
    assert (warm.estimate, warm.lo68, warm.hi68) == pytest.approx((cold.estimate, cold.lo68, cold.hi68), abs=0.05)


@pytest.mark.slow  # 8-10 s: keeps the default suite within 5 minutes on 2 cores
@pytest.mark.parametrize("oversample", [1, 2])
def test_one_trial_map_simulates_every_trial_value(oversample):
    # trial_map_at: the map fitted at one value, its model at each trial value; at that value the
    # data sets are the default's (the same map, the same noise draws), elsewhere that map's
    from dopplermap import calibrate
    from dopplermap.calibrate import CalibrationOptions
    from dopplermap.model import forward
    from dopplermap.problem import demo_problem
    from dopplermap.search import apply_parameters

    p = demo_problem(n_cell=60, n_epoch=4, n_vel=16)

    def at(value):
        star, comps = apply_parameters(p, {"inclination": float(value), "vsini": p.star.vsini})
        return p.replace(star=star, components=comps)

    kw = dict(lmbd=1.0, regulariser="mem", tol=1e-6, maxiter=500, fit_rv=True, fit_amp=True, offset_sigma=None)
    err = np.asarray(p.obs.err, float)
    t = np.array([50.0, 70.0])

    def sets(**more):
        o = CalibrationOptions(n_sim=4, seed=3, sim_oversample=oversample, **more)
        return calibrate._simulated_sets(p, at, t, kw, 0.1, err, o, None)

    each, one = sets(), sets(trial_map_at=50.0)
    assert each.shape == one.shape == (1 + 2 * 4, *err.shape)
    np.testing.assert_array_equal(one[0], each[0])  # the observed profiles first
    np.testing.assert_allclose(one[1:5], each[1:5], rtol=0, atol=1e-9)
    assert np.max(np.abs(one[5:] - each[5:])) > 1e-4  # at 70 deg: not the map fitted there
    if oversample == 1:  # at 70 deg: the 50-deg map's model there plus the second trial's draws
        res = calibrate.invert_batch(calibrate.pad_precomputed(at(50.0).pre), p.obs, flux=each[:1], err=err,
                                     mode="sequential", form="folded", **dict(kw, lmbd=0.1))[0]
        model = np.asarray(forward(np.asarray(res.fssc), np.asarray(res.fssh), np.asarray(res.rv),
                                   np.asarray(res.amp), at(70.0).pre))
        rng = np.random.default_rng(3)
        rng.standard_normal((4, *err.shape))
        np.testing.assert_allclose(one[5:], model + err * rng.standard_normal((4, *err.shape)), rtol=0, atol=1e-9)
    with pytest.raises(dm.DopplermapInputError, match="trial_map_at"):
        CalibrationOptions(trial_map_at=float("nan"))


@pytest.fixture(scope="module")
def support_calibration():
    """The support read-out calibrated on the demo star (truth 60 deg, data made on the inversion
    grid itself: simulations on that grid), every data set solved from the flat start."""
    from dopplermap import calibrate
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter
    from dopplermap.problem import demo_problem

    p = demo_problem(n_cell=100, n_epoch=8, n_vel=20)
    vals = [50.0, 55.0, 60.0, 65.0, 70.0]
    made, plain = {}, calibrate._simulated_sets

    def keep(*args):  # the data sets, to read one again by hand
        made["flux"] = plain(*args)
        return made["flux"]

    calibrate._simulated_sets = keep
    try:
        c = calibrate_parameter(p, "inclination", vals, fixed={"vsini": p.star.vsini}, trials=[50.0, 60.0, 70.0],
                                options=CalibrationOptions(n_sim=4, seed=1, sim_oversample=1, mode="sequential",
                                                           warm_start=False, readout="support"))
    finally:
        calibrate._simulated_sets = plain
    return p, vals, c, made["flux"]


def test_support_calibration_reads_each_data_set_by_its_own_support(support_calibration):
    """Each data set is read as ``grid --readout support`` reads the observed data: its own
    regularised map at its lowest chi2_total value chooses its support, and the map refitted on
    it at every value gives the profile the estimate is read from. Checked on the observed data
    and on one simulated set against the search module's own support and refit."""
    from dopplermap import calibrate, search

    p, vals, c, sims = support_calibration
    assert (c.readout, c.column, c.unconverged) == ("support", "chi2_support", 0)
    assert c.n_solves == calibrate.calibration_cost(5, 3, 4, "support")["total"] == 3 + 2 * 5 * 13
    assert c.lo95 <= c.lo68 <= c.estimate <= c.hi68 <= c.hi95 and c.lo95 <= 60.0 <= c.hi95
    assert c.raw == calibrate.profile_minimum(vals, c.member_profiles["chi2_support"][:, 0])
    assert sims.shape == (13, p.obs.n_epoch, p.obs.n_vel)
    n_data = p.obs.n_epoch * p.obs.n_vel
    for m in (0, 5):  # the observed data, and the second trial's first data set
        member = p.replace(obs=dataclasses.replace(p.obs, flux=sims[m]))
        kw = dict(lmbd=p.settings.lmbd, regulariser=p.settings.regulariser, tol=p.settings.tol,
                  maxiter=p.settings.maxiter, fit_rv=p.settings.fit_rv, fit_amp=p.settings.fit_amp,
                  offset_sigma=p.settings.offset_sigma)
        maps, chi2 = [], []
        for v in vals:
            c2, _, many = calibrate.grid_value_task(member, "inclination", {"vsini": p.star.vsini}, v, sims[m:m + 1],
                                                    np.asarray(p.obs.err), kw, "sequential")
            chi2.append(c2[0] * n_data)
            maps.append(many.results[0])
        np.testing.assert_allclose(c.member_profiles["chi2_total"][:, m], chi2, rtol=1e-9)
        best = maps[int(np.argmin(chi2))]
        support = [search.support_mask(p.grid, f) for f in (best.fssc, best.fssh)]
        refit = [search.solve_on_support(member, {"inclination": v, "vsini": p.star.vsini}, *support, r.x).chi2 * n_data
                 for v, r in zip(vals, maps, strict=True)]
        np.testing.assert_allclose(c.member_profiles["chi2_support"][:, m], refit, rtol=1e-9)


def test_support_calibration_resumes_from_its_table(tmp_path, monkeypatch):
    """The support read-out's units (the observed data, then each trial's data sets) are kept
    as each finishes: killed midway and run again it reads only the units left and gives the
    uninterrupted result; the regularised read-out's lines of the same table are not taken. The
    read-outs are stand-ins (a profile with its minimum where each data set's mean puts it)."""
    from dopplermap import calibrate
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter
    from dopplermap.problem import demo_problem

    class Killed(Exception):
        pass

    p = demo_problem(n_cell=100, n_epoch=8, n_vel=20)
    units = []

    def sets(problem, at, t, kw, lm_sim, err, o, progress):
        return np.random.default_rng(o.seed).normal(size=(1 + t.size * o.n_sim, *err.shape))

    def unit(problem, name, fixed, values, flux, err, kw, options):
        units.append(flux.shape[0])
        if len(units) == stop_at[0]:
            raise Killed
        centre = 60.0 + 20.0 * flux.mean(axis=(1, 2))
        refit = 1.0 + ((np.asarray(values)[:, None] - centre[None]) / 10.0) ** 2
        return refit + 3.0, refit, "sequential", 1, 1

    monkeypatch.setattr(calibrate, "_simulated_sets", sets)
    monkeypatch.setattr(calibrate, "support_unit", unit)
    vals = [50.0, 55.0, 60.0, 65.0, 70.0]
    table = tmp_path / "calibrate-inclination.jsonl"

    def run(tab):
        return calibrate_parameter(p, "inclination", vals, fixed={"vsini": p.star.vsini}, trials=[50.0, 60.0, 70.0],
                                   options=CalibrationOptions(n_sim=4, seed=3, readout="support", table=tab))

    stop_at = [None]
    with pytest.warns(dm.DopplermapWarning, match="4 of 65 support refits stopped"):
        whole = run(None)
    assert units == [1, 4, 4, 4] and whole.unconverged == 4
    np.testing.assert_array_equal(whole.member_profiles["chi2_total"], whole.member_profiles["chi2_support"] + 3.0)
    units.clear()
    stop_at[0] = 3
    with pytest.raises(Killed):
        run(table)
    assert len(table.read_text().splitlines()) == 2
    units.clear()
    stop_at[0] = None
    with pytest.warns(dm.DopplermapWarning, match="2 of 65"):  # only this run's refits are counted
        resumed = run(table)
    assert units == [4, 4]
    for col in ("chi2_total", "chi2_support"):
        np.testing.assert_array_equal(resumed.member_profiles[col], whole.member_profiles[col])
    assert (resumed.estimate, resumed.lo68, resumed.hi68) == (whole.estimate, whole.lo68, whole.hi68)
    with pytest.raises(dm.DopplermapInputError, match="column 'loss' applies to the regularised"):
        CalibrationOptions(readout="support", column="loss")
    with pytest.raises(dm.DopplermapInputError, match="readout must be one of"):
        CalibrationOptions(readout="profiled")


@pytest.mark.slow
def test_support_calibration_on_a_two_worker_cluster_equals_the_serial_one(support_calibration):
    """The support read-out's units as Dask tasks on a local 2-worker cluster: the same profiles,
    estimate and sets as in this process."""
    from dask.distributed import LocalCluster

    from dopplermap import search
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter

    p, vals, serial, _ = support_calibration
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        spread = calibrate_parameter(p, "inclination", vals, fixed={"vsini": p.star.vsini}, trials=[50.0, 60.0, 70.0],
                                     cluster=search.Cluster(cluster.scheduler_address),
                                     options=CalibrationOptions(n_sim=4, seed=1, sim_oversample=1, mode="sequential",
                                                                warm_start=False, readout="support"))
    for col in ("chi2_total", "chi2_support"):
        np.testing.assert_allclose(spread.member_profiles[col], serial.member_profiles[col], rtol=1e-9)
    assert (spread.estimate, spread.lo68, spread.hi68) == pytest.approx((serial.estimate, serial.lo68, serial.hi68),
                                                                        rel=1e-9)


@pytest.mark.slow  # 8-10 s: keeps the default suite within 5 minutes on 2 cores
def test_a_calibration_does_not_depend_on_what_this_process_compiled(monkeypatch):
    """The trial maps and the data sets are solved by Gauss-Newton wherever it applies, decided by
    the model and the tolerance alone, not by the automatic choice that counts what a process has
    compiled: with that choice made to answer L-BFGS, then Newton, a calibration draws the same
    data sets and gives the same sets (it took the cheaper compile on a cold start and Newton once
    compiled: `grid` gave other sets with its points solved on Dask workers than in one process)."""
    from dopplermap import calibrate, plan
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter, calibration_solver
    from dopplermap.compiled import forget_compiled

    s = B.make_star(7, n_lat=48, n_cell=120, n_vel=20)
    prob = s["problem"]
    kw = dict(fixed={"vsini": s["vsini"]}, options=CalibrationOptions(n_sim=4, seed=2, mode="sequential"))
    vals = [60.0, 70.0, 80.0]
    choose = plan.pick_member_solver

    def only(name):  # the automatic members' choice, left with one candidate
        return lambda states, **k: choose({name: states[name]}, **k)

    forget_compiled()
    monkeypatch.setattr(plan, "pick_member_solver", only("projected_lbfgs"))
    first = calibrate_parameter(prob, "inclination", vals, **kw)
    monkeypatch.setattr(plan, "pick_member_solver", only("newton"))
    again = calibrate_parameter(prob, "inclination", vals, **kw)
    for col in calibrate.COLUMNS:
        np.testing.assert_array_equal(first.member_profiles[col], again.member_profiles[col])
    assert (first.estimate, first.lo68, first.hi68) == (again.estimate, again.lo68, again.hi68)
    assert calibration_solver(prob, 1e-6) == "newton"
    assert calibration_solver(prob, 1e-5) == "projected_lbfgs"
