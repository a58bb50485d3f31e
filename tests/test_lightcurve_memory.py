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
    assert n is not None and n <= lc.n_rows < times.size and lc.weight is None and lc.spectra is not None
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
    assert lc.spectra is not None and lc.n_cell == grid.n_cell
    assert len(lc.node_counts) >= omega.size and lc.index.shape == (times.size, 2 * len(lc.node_counts))
    model = np.asarray(L.lightcurve_model(fssc, fssh, lc))
    assert np.max(np.abs(model - exact)) <= L.PHASE_TOLERANCE * 1e-3


@pytest.mark.parametrize("domega", [0.0, 0.3])
def test_circulant_nodes_equal_the_cells_own_weights_to_round_off(domega):
    """Each group's node fluxes (Fourier convolutions of one kernel per ring) equal the sum of
    every cell's own weights computed at the nodes' times, to round-off."""
    grid = latitude_band_grid(200)
    star = STAR.replace(domega=domega)
    times = np.sort(np.random.default_rng(5).uniform(0.0, 13.0, 3000))
    err = np.full(times.size, 5e-3)
    fssc, fssh = _maps(grid.n_cell, 6)
    lc = L.precompute_lightcurve(grid, star, times, np.ones(times.size), err, _band())
    assert lc.spectra is not None and all(n >= L.phase_nodes(err, times.size) for n in lc.node_counts)
    group, omega = L.rotation_groups(grid, star)
    v = np.asarray(L._circulant_nodes(fssc, fssh, lc))
    a = 0
    length = 2 * (lc.spectra.shape[2] - 1)
    cell_group = np.asarray(lc.piece_group)[np.asarray(lc.slots) // length]
    for g, n in enumerate(lc.node_counts):
        cells = np.asarray(lc.group_cells)[cell_group == g]
        t = star.t0 + 2.0 * np.pi * np.arange(n) / (n * omega[group[cells[0]]])
        sub = L._Cells(lat=np.asarray(grid.lat)[cells], lon=np.asarray(grid.lon)[cells],
                       area=np.asarray(grid.area)[cells], n_cell=cells.size)
        w = L._lc_weights(sub, star, t, _band(), None)
        f = np.stack([1.0 - fssc[cells] - fssh[cells], fssc[cells], fssh[cells]], axis=1)
        np.testing.assert_allclose(v[a:a + n], np.einsum("eck,ck->e", w, f), rtol=L.CIRCULANT_RTOL, atol=0)
        a += n
    assert a == v.size


def test_a_grid_that_is_not_circulant_keeps_the_cells_own_weights():
    """A ring not evenly spaced (one cell moved), or factors that vary along a ring: the
    set-up finds no shifted kernel and the model keeps each cell's weights, as accurate."""
    import dataclasses

    grid = latitude_band_grid(200)
    lon = np.array(grid.lon)
    lon[7] += 0.01
    moved = dataclasses.replace(grid, lon=lon)
    times = np.sort(np.random.default_rng(7).uniform(0.0, 13.0, 3000))
    err = np.full(times.size, 5e-3)
    fssc, fssh = _maps(grid.n_cell, 8)
    for g, factors in ((moved, None), (grid, 1.0 + 0.1 * np.cos(np.asarray(grid.lon)))):
        _, _, exact = L.simulate_lightcurve(g, STAR, times, _band(), fssc, fssh, cell_factors=factors)
        lc = L.precompute_lightcurve(g, STAR, times, exact, err, _band(), cell_factors=factors)
        assert lc.spectra is None and lc.cells is not None
        model = np.asarray(L.lightcurve_model(fssc, fssh, lc))
        assert np.max(np.abs(model - exact)) <= L.PHASE_TOLERANCE * 5e-3


def test_circulant_gradient_matches_finite_differences_and_the_cells_own_weights(monkeypatch):
    import jax

    grid = latitude_band_grid(150)
    star = STAR.replace(domega=0.2)
    times = np.sort(np.random.default_rng(9).uniform(0.0, 9.0, 2500))
    seg = (times > 4.5).astype(int)
    fssc, fssh = _maps(grid.n_cell, 10)
    noisy, err, _ = L.simulate_lightcurve(grid, star, times, _band(), fssc, fssh, sigma=5e-3, seed=1)
    lc = L.precompute_lightcurve(grid, star, times, noisy, err, _band(), segment=seg)
    monkeypatch.setattr(L, "_ring_groups", lambda *a: None)
    own = L.precompute_lightcurve(grid, star, times, noisy, err, _band(), segment=seg)
    assert lc.spectra is not None and own.spectra is None and own.cells is not None
    c, h = 0.5 * fssc + 0.05, 0.5 * fssh + 0.01
    chi2 = jax.jit(L.chi2_lightcurve)
    grad = jax.jit(jax.grad(L.chi2_lightcurve, argnums=(0, 1)))
    g, g_own = grad(c, h, lc), grad(c, h, own)
    rng = np.random.default_rng(11)
    for _ in range(3):
        dc, dh = rng.normal(size=grid.n_cell), rng.normal(size=grid.n_cell)
        eps = 1e-6
        fd = (float(chi2(c + eps * dc, h + eps * dh, lc)) - float(chi2(c - eps * dc, h - eps * dh, lc))) / (2 * eps)
        an = float(np.dot(g[0], dc) + np.dot(g[1], dh))
        assert an == pytest.approx(fd, rel=1e-5)
    # the two models differ only by their nodes' interpolation: so do their gradients
    for a, b in zip(g, g_own, strict=True):
        assert np.max(np.abs(np.asarray(a) - np.asarray(b))) <= 0.02 * np.max(np.abs(np.asarray(b)))


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


def test_unbinned_light_curve_dominating_the_cost_warns_and_auto_bin_silences_it(monkeypatch):
    import dataclasses
    import warnings

    from dopplermap.errors import DopplermapWarning
    from dopplermap.io.lightcurve import LightCurveRead as Read
    from dopplermap.problem import LightCurveData, demo_problem

    prob = demo_problem(n_cell=1200, n_epoch=8, n_vel=20)
    t = np.linspace(prob.star.t0, prob.star.t0 + 20 * prob.star.period, 6000)
    flux = 1.0 + 0.01 * np.sin(2 * np.pi * (t - prob.star.t0) / prob.star.period)
    err = np.full(t.size, 1e-3)
    read = Read(time=t, flux=flux, err=err, source="long.csv")
    lc = LightCurveData(times=t, flux=flux, err=err, band=_band(), read=read, source="long.csv")
    with warnings.catch_warnings():  # circulant groups: these points cost less than the profiles
        warnings.simplefilter("error", DopplermapWarning)
        assert prob.replace(lightcurve_data=lc).lightcurve.spectra is not None
    monkeypatch.setattr(L, "_ring_groups", lambda *a: None)  # the cells' own weights: they dominate
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
    # a long band binned as asked beside a short unbinned one: the short one costs nothing, is not blamed
    long_binned = dataclasses.replace(lc, read=dataclasses.replace(read, binned="0.0001 d"), name="long")
    k = slice(0, 200, 4)
    short = LightCurveData(times=t[k], flux=flux[k], err=err[k], band=_band(), name="short", source="short.csv",
                           read=Read(time=t[k], flux=flux[k], err=err[k], source="short.csv"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        assert prob.replace(lightcurve_data=(long_binned, short)).lightcurve is not None


@pytest.mark.parametrize("domega", [0.0, 0.3])
def test_load_bins_auto_through_the_api_as_the_configuration_does(tmp_path, domega):
    from dopplermap.io.lightcurve import LightCurveReading, load_lightcurve
    from dopplermap.problem import LightCurveData

    star = STAR.replace(domega=domega)
    t = np.sort(np.random.default_rng(12).uniform(0.0, 10.0, 3000))
    flux = 1.0 + 0.01 * np.sin(2 * np.pi * (t - star.t0) / star.period)
    np.savetxt(tmp_path / "lc.csv", np.c_[t, flux, np.full(t.size, 1e-3)], delimiter=",")
    d = LightCurveData.load(tmp_path / "lc.csv", _band(), bin_width="auto", star=star, n_cell=300)
    width, unit = L.auto_bin(300, star.period, domega)
    same = load_lightcurve(tmp_path / "lc.csv", bin_width=width, bin_unit=unit, period=star.period, t0=star.t0)
    np.testing.assert_array_equal(d.times, same.time)
    np.testing.assert_array_equal(d.flux, same.flux)
    assert d.read.binned and 1 < d.times.size < t.size
    if domega == 0.0:  # rigid: folded into phase bins
        assert d.times.size <= int(np.ceil(1.0 / width))
    with pytest.raises(DopplermapInputError, match=r"lc\.csv: bin_width = 'auto' .*give star= .* and n_cell="):
        LightCurveData.load(tmp_path / "lc.csv", _band(), bin_width="auto", star=star)
    with pytest.raises(DopplermapInputError, match="give reading=LightCurveReading.* or the loose keywords bin_width, "
                                                   "not both"):
        LightCurveData.load(tmp_path / "lc.csv", _band(), reading=LightCurveReading(), bin_width=0.1)
    with pytest.raises(DopplermapInputError, match="unknown keyword.*bin; the options are"):
        LightCurveData.load(tmp_path / "lc.csv", _band(), bin=0.1)
