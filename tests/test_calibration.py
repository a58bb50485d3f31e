"""The calibration benchmark's independent disc integrator against dopplermap's dense model,
and one calibration star end to end (benchmarks/bench_calibration.py)."""

import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_calibration as B  # noqa: E402

SPOTS = [(40.0, 30.0, 20.0, "cool", 0.8), (10.0, 200.0, 15.0, "hot", 0.6)]


@pytest.fixture(scope="module")
def case():
    grid = dm.latitude_band_grid(200)
    times = np.linspace(0.0, 2.0, 6)
    vels = np.linspace(-60.0, 60.0, 40)
    fc, fh = B.spot_fill(grid.lat, grid.lon, SPOTS)
    star = dm.StarParams(inclination=55.0, vsini=35.0, period=2.0, t0=0.0)
    pre = dm.precompute(grid, star, times, vels, B._components(), method="dense")
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
