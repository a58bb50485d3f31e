"""Cells integrated over sub-cells (``subdivide``): the line model of a finer grid for the map's parameters."""

import bench_calibration as B  # noqa: E402
import jax.numpy as jnp
import numpy as np
import pytest
from support.problems import components as _comps
from support.problems import gray_kernel

import dopplermap as dm
from dopplermap.errors import DopplermapInputError
from dopplermap.grid import subdivide
from dopplermap.model import forward

STAR = dm.StarParams(inclination=60.0, vsini=30.0, period=1.0)
VELS = np.linspace(-45, 45, 31)
TIMES = np.array([0.0, 0.13, 0.41, 0.77])


def test_sub_cells_partition_each_cell():
    grid = dm.latitude_band_grid(120)
    fine, parent = subdivide(grid, 3)
    assert fine.n_cell == 9 * grid.n_cell
    np.testing.assert_allclose(np.bincount(parent, fine.area), grid.area, rtol=1e-12)
    # each sub-cell's area from its own bounds, and its centre inside its cell
    a = (np.sin(fine.lat_bounds[:, 1]) - np.sin(fine.lat_bounds[:, 0])) * np.diff(fine.lon_bounds, axis=1)[:, 0]
    np.testing.assert_allclose(a, fine.area, rtol=1e-10)
    lb, ob = grid.lat_bounds[parent], grid.lon_bounds[parent]
    assert np.all((fine.lat > lb[:, 0]) & (fine.lat < lb[:, 1]) & (fine.lon > ob[:, 0]) & (fine.lon < ob[:, 1]))
    same, ident = subdivide(grid, 1)
    np.testing.assert_array_equal(same.lat, grid.lat)
    np.testing.assert_array_equal(ident, np.arange(grid.n_cell))


@pytest.mark.parametrize("m", [0, 9, 2.5, True])
def test_bad_subdivide_refused(m):
    with pytest.raises(DopplermapInputError, match="subdivide"):
        subdivide(dm.latitude_band_grid(50), m)


def test_healpix_pixels_split_into_their_nested_children():
    hp = pytest.importorskip("healpy")
    grid = dm.healpix_grid(2)
    fine, parent = subdivide(grid, 4)
    assert fine.n_cell == 16 * grid.n_cell
    np.testing.assert_allclose(np.bincount(parent, fine.area), grid.area, rtol=1e-12)
    # each child lies in its pixel: the pixel of the child's centre at the grid's nside
    inside = hp.ang2pix(2, np.pi / 2 - fine.lat, fine.lon)  # RING, as the grid
    np.testing.assert_array_equal(inside, parent)
    with pytest.raises(DopplermapInputError, match="power of 2"):
        subdivide(grid, 3)


def test_subdivided_healpix_model_is_the_fine_grids():
    pytest.importorskip("healpy")
    grid = dm.healpix_grid(4)
    comps = _comps(dm.gaussian(0.5, 3.0), 0.6)
    sub = dm.precompute(grid, STAR, TIMES, VELS, comps, method="dense", subdivide=2)
    fine, parent = subdivide(grid, 2)
    ref = dm.precompute(fine, STAR, TIMES, VELS, comps, method="dense")
    fc = np.random.default_rng(5).uniform(0, 0.6, grid.n_cell)
    z, e = np.zeros(grid.n_cell), np.zeros(TIMES.size)
    a = forward(jnp.asarray(fc), jnp.asarray(z), jnp.asarray(e), jnp.asarray(e), sub)
    b = forward(jnp.asarray(fc[parent]), jnp.asarray(z[parent]), jnp.asarray(e), jnp.asarray(e), ref)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-12)


def test_subdivided_model_is_the_fine_grids_with_a_shared_filling_factor():
    """The subdivided model (sub-cells merged into one slot per cell) against the plain model of
    the sub-cell grid with each sub-cell given its cell's filling factor: the same disc integral."""
    grid = dm.latitude_band_grid(150)
    comps = _comps(dm.gaussian(0.5, 3.0), 0.6)
    sub = dm.precompute(grid, STAR, TIMES, VELS, comps, method="dense", subdivide=3)
    fine, parent = subdivide(grid, 3)
    ref = dm.precompute(fine, STAR, TIMES, VELS, comps, method="dense")
    rng = np.random.default_rng(3)
    fc, fh = rng.uniform(0, 0.6, grid.n_cell), rng.uniform(0, 0.3, grid.n_cell)
    rv, amp = rng.normal(0, 0.4, TIMES.size), rng.normal(0, 0.002, TIMES.size)
    a = forward(jnp.asarray(fc), jnp.asarray(fh), jnp.asarray(rv), jnp.asarray(amp), sub)
    b = forward(jnp.asarray(fc[parent]), jnp.asarray(fh[parent]), jnp.asarray(rv), jnp.asarray(amp), ref)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-12)
    assert sub.n_cell == grid.n_cell


def test_subdivided_unspotted_star_is_closer_to_grays_profile():
    """Gray's analytic rotational profile: a coarse grid's error falls by subdividing its cells to
    about that of the grid of as many cells as sub-cells."""
    vsini, eps, depth, fwhm = 30.0, 0.6, 0.5, 3.0
    star = dm.StarParams(inclination=70.0, vsini=vsini, period=1.0)
    local = dm.gaussian(depth, fwhm)
    u = np.linspace(-vsini, vsini, 40001)
    k = gray_kernel(u, vsini, eps)
    ref = np.array([1 - np.trapezoid(k * (1 - local(v - u)), u) for v in VELS])

    def error(n, m):
        grid = dm.latitude_band_grid(n)
        pre = dm.precompute(grid, star, [0.0, 0.37], VELS, _comps(local, eps), method="dense", subdivide=m)
        z = jnp.full(grid.n_cell, 1e-12)
        return float(np.max(np.abs(np.asarray(dm.model.synthesize(z, z, pre.line)) - ref[None, :])))

    coarse, sub, fine = error(100, 1), error(100, 4), error(1600, 1)
    assert sub < coarse / 10  # 0.0713 -> 0.0020 of the continuum
    assert sub < 3 * fine  # the plain 1600-cell grid's 0.0009


def test_problem_subdivide_and_its_refusals():
    s = B.make_star(0, n_cell=60)
    p = s["problem"].replace(subdivide=2)
    assert p.pre.n_cell == 60
    res = dm.invert(p, lmbd=1.0, tol=1e-5)
    assert res.fssc.shape == (60,) and np.isfinite(res.chi2)
    with pytest.raises(DopplermapInputError, match="subdivide"):
        s["problem"].replace(subdivide=0)
    with pytest.raises(DopplermapInputError, match="binned"):
        _ = s["problem"].replace(subdivide=2, method="binned").pre
    with pytest.raises(DopplermapInputError, match="subdivide"):
        dm.jointfit.joint_fit(p, fit=("inclination",))


def test_subdivided_lightcurve_model_is_the_fine_grids():
    """The light-curve model's cell weights summed over the sub-cells: the plain model of the
    sub-cell grid with each sub-cell given its cell's filling factor."""
    from dopplermap.lightcurve import LightCurveBand, lightcurve_model, precompute_lightcurve

    grid = dm.latitude_band_grid(120)
    fine, parent = subdivide(grid, 2)
    band = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, 550.0, [dm.LimbDarkening("linear", (0.7,))] * 3)
    t = np.linspace(0.0, 2.0, 57)
    flux, err = np.ones_like(t), np.full_like(t, 1e-3)
    factors = np.random.default_rng(2).uniform(0.9, 1.1, (grid.n_cell, 3))
    sub = precompute_lightcurve(grid, STAR, t, flux, err, band, subdivide=2, cell_factors=factors)
    ref = precompute_lightcurve(fine, STAR, t, flux, err, band, at_times=True, cell_factors=factors[parent])
    rng = np.random.default_rng(4)
    fc, fh = rng.uniform(0, 0.5, grid.n_cell), rng.uniform(0, 0.2, grid.n_cell)
    a = lightcurve_model(jnp.asarray(fc), jnp.asarray(fh), sub)
    b = lightcurve_model(jnp.asarray(fc[parent]), jnp.asarray(fh[parent]), ref)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)


def test_grid_tables_know_the_sub_cells():
    """A grid table's problem fingerprint changes with subdivide: a resumed search does not mix
    models (subdivide = 1 is left out of it, so tables written without sub-cells still resume)."""
    from dopplermap.search import problem_fingerprint

    p = B.make_star(0, n_cell=60)["problem"]
    assert problem_fingerprint(p) != problem_fingerprint(p.replace(subdivide=2))
    assert problem_fingerprint(p) == problem_fingerprint(p.replace(subdivide=1))
