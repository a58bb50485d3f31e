"""The light-curve model's memory: phase nodes for long light curves of a rigid rotator,
weights built in chunks, the size guard, and ``bin = "auto"``."""

from __future__ import annotations

import numpy as np
import pytest

from dopplermap import lightcurve as L
from dopplermap.errors import DopplermapInputError
from dopplermap.geometry import StarParams
from dopplermap.grid import latitude_band_grid
from dopplermap.limb_darkening import LimbDarkening

STAR = StarParams(inclination=55.0, vsini=30.0, period=1.3, t0=0.2)


def _band():
    lds = [LimbDarkening("quadratic", (0.4, 0.25)), LimbDarkening("quadratic", (0.5, 0.2)),
           LimbDarkening("quadratic", (0.35, 0.25))]
    return L.LightCurveBand(tuple(lds), (1.0, 0.3, 1.5))


def _maps(n_cell, seed=0):
    rng = np.random.default_rng(seed)
    fssc = np.where(rng.random(n_cell) < 0.15, rng.random(n_cell) * 0.9, 1e-5)
    fssh = np.where(rng.random(n_cell) < 0.05, rng.random(n_cell) * 0.09, 1e-5)
    return fssc, fssh


@pytest.mark.parametrize("sigma", [1e-3, 5e-3])
def test_phase_nodes_agree_with_the_exact_rows_within_the_stated_tolerance(sigma):
    grid = latitude_band_grid(300)
    times = np.sort(np.random.default_rng(1).uniform(0.0, 13.0, 4500))
    err = np.full(times.size, sigma)
    fssc, fssh = _maps(grid.n_cell)
    _, _, exact = L.simulate_lightcurve(grid, STAR, times, _band(), fssc, fssh, sigma=sigma)
    lc = L.precompute_lightcurve(grid, STAR, times, exact, err, _band())
    n = L.phase_nodes(err, times.size)
    assert n is not None and lc.n_rows == n < times.size and lc.weight is None
    model = np.asarray(L.lightcurve_model(fssc, fssh, lc))
    assert np.max(np.abs(model - exact)) <= L.PHASE_TOLERANCE * sigma
    # and not trivially: the spots vary the flux by far more than the tolerance
    assert np.ptp(exact) > 200 * L.PHASE_TOLERANCE * sigma


def test_differential_rotation_nodes_per_rotation_group():
    """Each latitude turns at its own rate: nodes per rotation group, against the exact rows."""
    grid = latitude_band_grid(300)
    star = STAR.replace(domega=0.3)
    group, omega = L.rotation_groups(grid, star)
    assert omega.size == np.unique(np.round(np.sin(grid.lat) ** 2, 12)).size > 1
    times = np.sort(np.random.default_rng(4).uniform(0.0, 13.0, 4500))
    err = np.full(times.size, 1e-3)
    fssc, fssh = _maps(grid.n_cell, 2)
    _, _, exact = L.simulate_lightcurve(grid, star, times, _band(), fssc, fssh)
    lc = L.precompute_lightcurve(grid, star, times, exact, err, _band())
    assert lc.cells is not None and lc.index.shape == (times.size, omega.size) and lc.n_cell == grid.n_cell
    model = np.asarray(L.lightcurve_model(fssc, fssh, lc))
    assert np.max(np.abs(model - exact)) <= L.PHASE_TOLERANCE * 1e-3


def test_short_curves_keep_rows_at_the_times():
    grid = latitude_band_grid(120)
    times = np.linspace(0.0, 5.0, 400)
    err = np.full(times.size, 1e-3)
    assert L.phase_nodes(err, 3000) is None  # fewer points than twice the nodes
    assert L.phase_nodes(err, 10**6, L.MAX_ROTATION_GROUPS + 1) is None
    fssc, fssh = _maps(grid.n_cell, 2)
    _, _, exact = L.simulate_lightcurve(grid, STAR, times, _band(), fssc, fssh)
    lc = L.precompute_lightcurve(grid, STAR, times, exact, err, _band())
    assert lc.index is None and lc.n_rows == times.size
    np.testing.assert_allclose(np.asarray(L.lightcurve_model(fssc, fssh, lc)), exact, rtol=0, atol=1e-12)


def test_chunks_give_the_same_weights(monkeypatch):
    grid = latitude_band_grid(150)
    times = np.linspace(0.0, 3.0, 97)
    err = np.full(times.size, 1e-3)
    fssc, fssh = _maps(grid.n_cell, 3)
    whole = L.precompute_lightcurve(grid, STAR, times, np.ones(times.size), err, _band())
    monkeypatch.setattr(L, "CHUNK_BYTES", 24 * 3 * grid.n_cell * 10)  # 10 rows a chunk
    parts = L.precompute_lightcurve(grid, STAR, times, np.ones(times.size), err, _band())
    np.testing.assert_array_equal(np.asarray(whole.diff), np.asarray(parts.diff))
    np.testing.assert_array_equal(np.asarray(whole.base), np.asarray(parts.base))


def test_the_size_guard_refuses_a_model_past_the_limit(monkeypatch):
    monkeypatch.setenv("DOPPLERMAP_MAX_MEMORY", "1M")
    grid = latitude_band_grid(200)
    times = np.linspace(0.0, 3.0, 500)
    assert L.lightcurve_plan(grid, STAR, np.full(500, 1e-3), 500)["bytes"] > 2**20
    with pytest.raises(DopplermapInputError, match="light-curve model .*bin = \"auto\""):
        L.precompute_lightcurve(grid, STAR, times, np.ones(500), np.full(500, 1e-3), _band())
    monkeypatch.setenv("DOPPLERMAP_MAX_MEMORY", "2G")
    L.precompute_lightcurve(grid, STAR, times, np.ones(500), np.full(500, 1e-3), _band())
