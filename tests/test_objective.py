import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.objective import objective_terms, sum_excess


def test_seed_entropy_formula():
    rng = np.random.default_rng(0)
    fc, fh = rng.uniform(1e-5, 0.5, 50), rng.uniform(1e-5, 0.4, 50)
    area = rng.uniform(0.9, 1.1, 50)
    m = 1e-5
    wp = area / area.max()
    ref = np.sum(wp * (fc * np.log(fc / m) + fh * np.log(fh / m) + (fc + fh) * np.log((fc + fh) / (1 - m)))) / 50
    assert np.isclose(float(dm.regularisers.seed_entropy(jnp.asarray(fc), jnp.asarray(fh), jnp.asarray(area))), ref, rtol=1e-13)


def test_tikhonov_zero_for_uniform_map_and_positive_otherwise():
    g = dm.latitude_band_grid(200)
    e = jnp.asarray(g.edges)
    u = jnp.full(200, 0.3)
    assert float(dm.regularisers.tikhonov(u, u, e)) == 0.0
    v = u.at[17].set(0.9)
    n17 = len(g.neighbours(17))
    assert np.isclose(float(dm.regularisers.tikhonov(v, u, e)), n17 * 0.36 / len(g.edges))


def test_chi2_is_reduced_by_n_epoch_n_vel(small_problem):
    *_, sim = small_problem
    model = sim.obs.flux + sim.obs.err  # one sigma everywhere
    assert np.isclose(float(dm.objective.chi2(model, sim.obs)), 1.0)


def test_sum_penalty_only_when_infeasible(small_problem):
    star, grid, times, vels, comps, sim = small_problem
    pre = dm.precompute(grid, star, times, vels, comps)
    lay = dm.Layout(grid.n_cell, len(times))
    x = lay.initial(0.3)
    pen = objective_terms(jnp.asarray(x), 1.0, pre, sim.obs)[1].penalty
    assert float(pen) == 0.0
    x[:grid.n_cell] = 0.8  # fssc + fssh = 1.1
    pen = objective_terms(jnp.asarray(x), 1.0, pre, sim.obs)[1].penalty
    assert np.isclose(float(pen), 1e4 * grid.n_cell * 0.1**2)
    assert float(sum_excess(jnp.asarray([0.5]), jnp.asarray([0.4]))) == 0.0


@pytest.mark.parametrize("kw,match", [
    (dict(err=-1.0), "err must be > 0"), (dict(err=0.0), "err must be > 0"),
    (dict(flux=np.nan), "NaN"), (dict(err=np.nan), "NaN"),
])
def test_observations_bad_values(kw, match):
    flux = np.ones((3, 5))
    err = np.full((3, 5), 0.01)
    if "flux" in kw:
        flux[1, 2] = kw["flux"]
    if "err" in kw:
        err[2, 4] = kw["err"]
    with pytest.raises(ValueError, match=match):
        dm.Observations.create([0, 1, 2], np.arange(5.0), flux, err)


def test_observations_bad_shapes():
    with pytest.raises(ValueError, match="flux must have shape"):
        dm.Observations.create([0, 1], np.arange(5.0), np.ones((3, 5)), np.ones((2, 5)))
    with pytest.raises(ValueError, match="strictly increasing"):
        dm.Observations.create([0, 1], np.array([0.0, 2, 1, 3, 4]), np.ones((2, 5)), np.ones((2, 5)))


def test_spotdipy_entropy_matches_a_numpy_transcription_of_its_formula():
    """SpotDIPy: sum_i (A_i / sum A) [c ln(c/m) + h ln(h/m) + (1 - p) ln((1 - p)/m)], m = 1e-7, p = 1 - c - h."""
    from dopplermap.regularisers import spotdipy_entropy

    rng = np.random.default_rng(1)
    fc, fh = rng.uniform(1e-5, 0.5, 80), rng.uniform(1e-5, 0.4, 80)
    area = rng.uniform(0.5, 1.5, 80)
    fp = 1.0 - (fc + fh)
    norm_area = area / np.sum(area)
    ref = np.sum(norm_area * (fc * np.log(fc / 1e-7) + fh * np.log(fh / 1e-7) + (1.0 - fp) * np.log((1.0 - fp) / 1e-7)))
    got = float(spotdipy_entropy(jnp.asarray(fc), jnp.asarray(fh), jnp.asarray(area)))
    assert abs(got - ref) <= 1e-12 * abs(ref)


def test_mem_spotdipy_is_selectable_and_weighs_the_map_otherwise(small_problem):
    from dopplermap.objective import regulariser_value
    from dopplermap.regularisers import spotdipy_entropy

    star, grid, times, vels, comps, sim = small_problem
    pre = dm.precompute(grid, star, times, vels, comps)
    x = dm.Layout(pre.n_cell, pre.n_epoch).initial(0.2)
    fc, fh = x[:pre.n_cell], x[pre.n_cell:2 * pre.n_cell]
    reg = objective_terms(jnp.asarray(x), 1.0, pre, sim.obs, "mem_spotdipy")[1].regulariser
    assert float(reg) == pytest.approx(float(spotdipy_entropy(jnp.asarray(fc), jnp.asarray(fh), pre.cell_area)), rel=1e-14)
    # the two entropies weigh the map differently (the lambdas do not carry over 1:1)
    assert float(reg) / float(regulariser_value("mem", jnp.asarray(fc), jnp.asarray(fh), pre.cell_area, pre.edges)) > 1.5
    with pytest.raises(ValueError, match="regulariser must be one of"):
        objective_terms(jnp.asarray(x), 1.0, pre, sim.obs, "entropy")
    res = dm.invert(pre, sim.obs, regulariser="mem_spotdipy", lmbd=0.3, tol=1e-6)
    assert res.success and res.regulariser == "mem_spotdipy" and res.chi2 < 3.0


def test_an_unknown_data_keyword_is_one_line(small_problem):
    star, grid, times, vels, comps, sim = small_problem
    pre = dm.precompute(grid, star, times, vels, comps)
    x = jnp.asarray(dm.Layout(grid.n_cell, len(times)).initial(0.3))
    with pytest.raises(dm.DopplermapInputError, match="loss: unknown keyword.s. lightcurv;"):
        dm.objective.loss(x, 1.0, pre, sim.obs, lightcurv=None)
    assert float(dm.objective.loss(x, 1.0, pre, sim.obs, lightcurve=None)) == float(dm.objective.loss(x, 1.0, pre, sim.obs))
