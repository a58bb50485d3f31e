"""Light-curve model and the joint line + light-curve fit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.app.demo import recovery_correlation
from dopplermap.lightcurve import (
    LightCurveBand,
    chi2_lightcurve,
    lightcurve_model,
    precompute_lightcurve,
    simulate_lightcurve,
)
from dopplermap.objective import Layout, objective_terms

chi2_lc_jit = jax.jit(chi2_lightcurve)

BAND = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, 550.0,
                                        [dm.LimbDarkening("quadratic", (0.5, 0.2))] * 3)


def _setup(n_cell=300, n_lc=50):
    star = dm.StarParams(inclination=60.0, vsini=40.0, period=2.0)
    grid = dm.latitude_band_grid(n_cell)
    t = np.linspace(0.0, 2.0, n_lc, endpoint=False)
    return star, grid, t


def test_unspotted_star_is_flat_and_matches_loop_reference():
    star, grid, t = _setup()
    lc = precompute_lightcurve(grid, star, t, np.ones(t.size), np.full(t.size, 1e-3), BAND)
    flat = np.asarray(lightcurve_model(jnp.full(grid.n_cell, 1e-5), jnp.full(grid.n_cell, 1e-5), lc))
    # flat up to the tessellation's discreteness (cells crossing the limb), which shrinks with n_cell
    fine_grid = dm.latitude_band_grid(4 * grid.n_cell)
    lc_fine = precompute_lightcurve(fine_grid, star, t, np.ones(t.size), np.full(t.size, 1e-3), BAND)
    flat_fine = np.asarray(lightcurve_model(jnp.full(fine_grid.n_cell, 1e-5), jnp.full(fine_grid.n_cell, 1e-5), lc_fine))
    assert np.max(np.abs(flat - 1.0)) < 1e-3
    assert np.max(np.abs(flat_fine - 1.0)) < 0.5 * np.max(np.abs(flat - 1.0))
    # the sharp limb max(mu, 0) lets each cell's whole area pop in and out at once: rougher
    lc_sharp = precompute_lightcurve(grid, star, t, np.ones(t.size), np.full(t.size, 1e-3), BAND, limb="sharp")
    sharp = np.asarray(lightcurve_model(jnp.full(grid.n_cell, 1e-5), jnp.full(grid.n_cell, 1e-5), lc_sharp))
    assert np.max(np.abs(flat - 1.0)) < 0.5 * np.max(np.abs(sharp - 1.0))
    rng = np.random.default_rng(1)
    fc, fh = rng.uniform(0, 0.6, grid.n_cell), rng.uniform(0, 0.3, grid.n_cell)
    model = np.asarray(lightcurve_model(jnp.asarray(fc), jnp.asarray(fh), lc))
    geo = dm.geometry.cell_geometry((grid.lat, grid.lon, grid.area), t, (star.inclination, star.vsini, star.period))
    mu = np.asarray(geo.mu)
    # the cell-averaged max(mu, 0) of a cell of side sqrt(area): mu uniform over +-h, h = side / 2
    h = 0.5 * np.sqrt(grid.area)[None, :]
    w = np.where(mu >= h, mu, np.where(mu <= -h, 0.0, (mu + h) ** 2 / (4 * h)))
    ldv = [np.asarray(ld(w)) for ld in BAND.limb_darkening]
    ref = np.zeros(t.size)
    for e in range(t.size):  # slow reference: direct sum over the cells in view
        for c in range(grid.n_cell):
            if w[e, c] > 0:
                fills = (1 - fc[c] - fh[c], fc[c], fh[c])
                ref[e] += sum(j * ld[e, c] * grid.area[c] * w[e, c] * f
                              for j, ld, f in zip(BAND.intensity, ldv, fills, strict=True))
    assert np.max(np.abs(model - ref / ref.mean())) < 1e-12


def test_cool_spot_dims_the_star_when_facing_us():
    star, grid, t = _setup(n_cell=600, n_lc=80)
    fc, fh = dm.spot_map(grid, [dm.Spot(lat=30.0, lon=0.0, radius=20.0, kind="cool", fill=0.9)])
    flux, _, clean = simulate_lightcurve(grid, star, t, BAND, fc, fh, sigma=1e-4)
    phase = (t / star.period) % 1.0
    i_min = int(np.argmin(clean))
    assert min(phase[i_min], 1 - phase[i_min]) < 0.03  # longitude 0 faces us at phase 0
    assert clean.max() - clean.min() > 0.01


def test_lightcurve_gradient_matches_finite_differences():
    star, grid, t = _setup(n_cell=200, n_lc=30)
    rng = np.random.default_rng(3)
    fc, fh = rng.uniform(0.05, 0.5, grid.n_cell), rng.uniform(0.05, 0.3, grid.n_cell)
    flux, err, _ = simulate_lightcurve(grid, star, t, BAND, fc * 0.5, fh, sigma=1e-3)
    lc = precompute_lightcurve(grid, star, t, flux, err, BAND)
    g = jax.grad(lambda a, b: chi2_lightcurve(a, b, lc), argnums=(0, 1))(jnp.asarray(fc), jnp.asarray(fh))
    h = 1e-6
    for i in (0, 57, 150):
        for which in (0, 1):
            d = np.zeros(grid.n_cell)
            d[i] = h
            args_p = (fc + d, fh) if which == 0 else (fc, fh + d)
            args_m = (fc - d, fh) if which == 0 else (fc, fh - d)
            fd = (float(chi2_lc_jit(*map(jnp.asarray, args_p), lc))
                  - float(chi2_lc_jit(*map(jnp.asarray, args_m), lc))) / (2 * h)
            assert float(g[which][i]) == pytest.approx(fd, rel=1e-5, abs=1e-9)


def test_joint_objective_adds_weighted_light_curve_term():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=200, n_epoch=6, n_vel=20)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=300)
    pre = dm.precompute(grid, star, times, vels, comps)
    t = np.linspace(0, 2, 40)
    flux, err, _ = simulate_lightcurve(grid, star, t, BAND, sim.fssc, sim.fssh, sigma=1e-3)
    lc = precompute_lightcurve(grid, star, t, flux, err, BAND)
    x = jnp.asarray(Layout(grid.n_cell, len(times)).initial(0.1))
    terms = jax.jit(objective_terms, static_argnames=("regulariser",))
    base, tm = terms(x, 0.5, pre, sim.obs, regulariser="mem")
    c2, reg, pen = tm.chi2, tm.regulariser, tm.penalty
    joint, aux = terms(x, 0.5, pre, sim.obs, regulariser="mem", lightcurve=lc, line_weight=2.0, lc_weight=3.0)
    c2lc = float(chi2_lightcurve(x[:200], x[200:400], lc))
    assert float(aux.chi2_lc) == pytest.approx(c2lc)
    assert float(joint) == pytest.approx(2.0 * float(c2) + 3.0 * c2lc + 0.5 * float(reg) + float(pen), rel=1e-12)


def _spectra_and_lightcurve(n_cell, n_epoch, n_vel, snr, seed, n_lc, flux_unit=1.0):
    """Simulated line profiles and a light curve (flux in any unit) of the demo star."""
    star, grid, times, vels, comps = dm.demo_setup(n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, seed=seed)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=snr, seed=seed)
    band = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, 550.0, [dm.LimbDarkening("linear", (0.7,))] * 3)
    t_lc = np.linspace(0.0, 8.0, n_lc)
    flux, err, _ = simulate_lightcurve(grid, star, t_lc, band, sim.fssc, sim.fssh, sigma=1e-3, seed=seed + 1)
    lc = precompute_lightcurve(grid, star, t_lc, flux * flux_unit, err * flux_unit, band)
    return star, grid, comps, sim, lc, dm.precompute(grid, star, times, vels, comps)


def test_joint_fit_keeps_or_improves_map_and_both_chi2_near_one():
    star, grid, comps, sim, lc, pre = _spectra_and_lightcurve(600, 30, 32, 500, 5, 400, flux_unit=3e4)  # any units
    lines = dm.invert(pre, sim.obs, lmbd=1.0)
    joint = dm.invert(pre, sim.obs, lmbd=1.0, lightcurve=lc)

    inten = np.array([c.intensity for c in comps])
    seen = np.degrees(grid.lat) > -star.inclination

    def scores(r):
        bright = lambda c, h: 1 - c - h + inten[1] * c + inten[2] * h  # noqa: E731 - surface brightness map
        return (recovery_correlation(sim.fssc, r.fssc, grid.lat, star.inclination),
                float(np.corrcoef(bright(sim.fssc, sim.fssh)[seen], bright(r.fssc, r.fssh)[seen])[0, 1]))

    cool_l, bright_l = scores(lines)
    cool_j, bright_j = scores(joint)
    assert cool_j >= cool_l - 1e-3 and bright_j >= bright_l - 1e-3, (cool_l, cool_j, bright_l, bright_j)
    assert abs(joint.chi2 - 1.0) < 0.1 and abs(joint.chi2_lc - 1.0) < 0.1, (joint.chi2, joint.chi2_lc)
    assert lines.chi2_lc is None


def test_dilution_nuisance_is_profiled_out():
    star, grid, t = _setup(n_cell=300, n_lc=60)
    fc, fh = dm.spot_map(grid, dm.DEMO_SPOTS)
    flux, err, clean = simulate_lightcurve(grid, star, t, BAND, fc, fh, sigma=1e-4, seed=2)
    diluted = 1.0 + 0.6 * (flux - 1.0)  # 40 % of the light from a companion: variation x 0.6
    args = (jnp.asarray(fc), jnp.asarray(fh))
    free = precompute_lightcurve(grid, star, t, diluted * 7.0, err * 0.6 * 7.0, BAND, fit_dilution=True)
    fixed = precompute_lightcurve(grid, star, t, diluted * 7.0, err * 0.6 * 7.0, BAND)
    assert float(chi2_lightcurve(*args, free)) < 2.0 < 100.0 < float(chi2_lightcurve(*args, fixed))
    # gradient through the profiled scale equals finite differences
    g = jax.grad(chi2_lightcurve)(jnp.asarray(fc) * 0.8, jnp.asarray(fh), free)
    h = 1e-6
    for i in (3, 120):
        d = np.zeros(grid.n_cell)
        d[i] = h
        fd = (float(chi2_lc_jit(jnp.asarray(fc * 0.8 + d), jnp.asarray(fh), free))
              - float(chi2_lc_jit(jnp.asarray(fc * 0.8 - d), jnp.asarray(fh), free))) / (2 * h)
        assert float(g[i]) == pytest.approx(fd, rel=1e-5, abs=1e-8)


@pytest.mark.slow
def test_device_solver_fits_the_light_curve_too():
    """solver="projected_lbfgs" minimises the same joint objective as the scipy path."""
    _, _, _, sim, lc, pre = _spectra_and_lightcurve(300, 16, 24, 400, 7, 120)
    kw = dict(lmbd=1.0, lightcurve=lc, lc_weight=2.0, tol=1e-9, maxiter=5000, cube_dtype="float64")
    ref = dm.invert(pre, sim.obs, **kw)
    dev = dm.invert(pre, sim.obs, solver="projected_lbfgs", **kw)
    lines_only = dm.invert(pre, sim.obs, solver="projected_lbfgs", lmbd=1.0, tol=1e-9, maxiter=5000,
                           cube_dtype="float64")
    assert dev.chi2_lc is not None and lines_only.chi2_lc is None
    # the same minimum: the two tol-1e-9 stops land up to 5e-5 apart on this flat problem
    # (seen both ways: scipy's relative-reduction stop fires early too)
    assert abs(dev.loss - ref.loss) <= 1e-4 * ref.loss, (dev.loss, ref.loss)
    assert abs(dev.chi2_lc - ref.chi2_lc) <= 1e-2 * ref.chi2_lc
    assert dev.loss > lines_only.loss  # the light-curve term is really in the objective
