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
    assert lc.cells is not None and lc.index.shape == (omega.size, times.size) and lc.n_cell == grid.n_cell
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


# ------------------------------------------------------------------ several sectors


def _shifted_copy(src, dst, days):
    """A copy of a mission FITS light curve moved ``days`` later (another sector)."""
    from astropy.io import fits

    with fits.open(src) as h:
        h[1].data["TIME"] = h[1].data["TIME"] + days
        h.writeto(dst)


def test_several_files_keep_their_time_systems_gaps_and_segments(tmp_path):
    from test_lightcurve_io import mission_fits

    from dopplermap.io.lightcurve import GAP_DAYS, load_lightcurve, read_lightcurve

    mission_fits(tmp_path / "tess.fits", mission="TESS", n=300, n_quality=0, n_nan=0)
    mission_fits(tmp_path / "kep0.fits", mission="Kepler", n=200, n_quality=0, n_nan=0, seed=1)
    _shifted_copy(tmp_path / "kep0.fits", tmp_path / "kepler.fits", 30.0)
    one = [read_lightcurve(tmp_path / n) for n in ("tess.fits", "kepler.fits")]
    data = load_lightcurve([tmp_path / "tess.fits", tmp_path / "kepler.fits"])
    # each file's times from its own keywords (BTJD and BKJD), in time order, nothing assumed
    np.testing.assert_array_equal(data.time, np.concatenate([one[0].time, one[1].time]))
    assert [s["time_scale"] for s in data.segments] == [one[0].time_scale, one[1].time_scale]
    assert one[0].time_scale != one[1].time_scale
    np.testing.assert_array_equal(data.segment, np.repeat([0, 1], [300, 200]))
    for k, o in enumerate(one):  # each divided by its own mean
        np.testing.assert_allclose(data.flux[data.segment == k], o.flux / o.flux.mean(), rtol=1e-12)
    gap = one[1].time.min() - one[0].time.max()
    assert data.gaps == [pytest.approx(gap)] and gap > GAP_DAYS
    assert "2 segments" in data.describe() and f"{gap:.3g} d" in data.describe()


def test_a_free_scale_per_segment_absorbs_each_sectors_level():
    """Two sectors of one star, the second 4 % brighter (another aperture) and covering a
    partial rotation (its mean is not the star's): with the segments' free scales the true map
    fits to the noise; one normalisation for both does not."""
    grid = latitude_band_grid(200)
    fssc, fssh = _maps(grid.n_cell, 5)
    t = np.concatenate([np.linspace(0.0, 2.6, 300), np.linspace(40.0, 40.5, 120)])
    seg = np.repeat([0, 1], [300, 120])
    sigma = 1e-3
    noisy, err, _ = L.simulate_lightcurve(grid, STAR, t, _band(), fssc, fssh, sigma=sigma, seed=3)
    noisy = np.where(seg == 1, noisy * 1.04, noisy)
    free = L.precompute_lightcurve(grid, STAR, t, noisy, err, _band(), segment=seg)
    fixed = L.precompute_lightcurve(grid, STAR, t, noisy, err, _band())
    assert float(L.chi2_lightcurve(fssc, fssh, free)) < 1.3
    assert float(L.chi2_lightcurve(fssc, fssh, fixed)) > 10.0
    with pytest.raises(DopplermapInputError, match="fit_dilution"):
        L.precompute_lightcurve(grid, STAR, t, noisy, err, _band(), segment=seg, fit_dilution=True)


def test_unbinned_light_curve_dominating_the_cost_warns_and_auto_bin_silences_it():
    import dataclasses
    import warnings

    from dopplermap.errors import DopplermapWarning
    from dopplermap.io.lightcurve import LightCurveData as Read
    from dopplermap.problem import LightCurveData, demo_problem

    prob = demo_problem(n_cell=1200, n_epoch=8, n_vel=20)
    t = np.linspace(prob.star.t0, prob.star.t0 + 20 * prob.star.period, 6000)
    flux = 1.0 + 0.01 * np.sin(2 * np.pi * (t - prob.star.t0) / prob.star.period)
    err = np.full(t.size, 1e-3)
    read = Read(time=t, flux=flux, err=err, source="long.csv")
    lc = LightCurveData(times=t, flux=flux, err=err, band=_band(), read=read, source="long.csv")
    with pytest.warns(DopplermapWarning, match=r"long\.csv dominate the cost: 6000 points as \d+ model rows x 1200 "
                                               r"cells.*bin = \"auto\""):
        assert prob.replace(lightcurve_data=lc).lightcurve is not None
    width, unit = L.auto_bin(prob.grid.n_cell, prob.star.period, float(prob.star.domega))
    assert unit == "phase" and width == pytest.approx(np.sqrt(4 * np.pi / 1200) / (2 * np.pi) / L.AUTO_BINS_PER_CELL)
    from dopplermap.io.lightcurve import bin_lightcurve

    binned = bin_lightcurve(read, width, unit=unit, period=prob.star.period, t0=prob.star.t0)
    assert binned.n_points == int(np.ceil(1 / width)) and "points fitted" in binned.describe()
    small = dataclasses.replace(lc, times=binned.time, flux=binned.flux, err=binned.err, read=binned)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        assert prob.replace(lightcurve_data=small).lightcurve is not None
