import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap import compiled
from dopplermap.solvers import project_feasible


@pytest.fixture(scope="module")
def fitted(small_problem):
    star, grid, times, vels, comps, sim = small_problem
    pre = dm.precompute(grid, star, times, vels, comps)
    return pre, dm.invert(pre, sim.obs, lmbd=0.3, maxiter=400)


def test_recovers_spots_within_bounds(small_problem, fitted):
    star, grid, times, vels, comps, sim = small_problem
    pre, res = fitted
    assert res.success and res.iterations > 5
    assert res.chi2 < 1.5
    seen = np.degrees(grid.lat) > -star.inclination
    assert np.corrcoef(res.fssc[seen], sim.fssc[seen])[0, 1] > 0.7
    assert np.corrcoef(res.fssh[seen], sim.fssh[seen])[0, 1] > 0.5
    for f in (res.fssc, res.fssh):
        assert np.all(f >= 1e-5 - 1e-12) and np.all(f <= 1 - 1e-5 + 1e-12)
    assert np.all(res.fssc + res.fssh <= 1.0 + 1e-12)
    assert len(res.history["loss"]) == res.iterations
    assert np.all(np.diff(res.history["loss"]) <= 1e-12)
    assert res.model.shape == (len(times), len(vels))


def test_new_lambda_reuses_compiled_function(small_problem, fitted):
    *_, sim = small_problem
    pre, res = fitted
    n = len(compiled._MEMO)
    res2 = dm.invert(pre, sim.obs, lmbd=3.0, maxiter=50)
    assert len(compiled._MEMO) == n and res2.compile_time == 0.0
    # stronger regularisation: lower entropy term, higher chi2
    assert res2.regulariser_value < res.regulariser_value


def test_fixed_nuisances_stay_fixed(small_problem, fitted):
    *_, sim = small_problem
    pre, _ = fitted
    res = dm.invert(pre, sim.obs, lmbd=1.0, fit_rv=False, fit_amp=False, maxiter=20)
    assert np.all(res.rv == 0.0) and np.all(res.amp == 0.0)


def test_tikhonov_regulariser_runs(small_problem, fitted):
    *_, sim = small_problem
    pre, _ = fitted
    res = dm.invert(pre, sim.obs, lmbd=50.0, regulariser="tikhonov", maxiter=60)
    assert np.isfinite(res.loss) and res.regulariser == "tikhonov"


def test_project_feasible():
    fc, fh, ex = project_feasible(np.array([0.7, 0.2]), np.array([0.5, 0.1]))
    assert np.isclose(ex, 0.2) and np.allclose(fc + fh, [1.0, 0.3])


def test_invert_bad_arguments(small_problem, fitted):
    *_, sim = small_problem
    pre, _ = fitted
    with pytest.raises(ValueError, match="regulariser"):
        dm.invert(pre, sim.obs, regulariser="maxent")
    with pytest.raises(ValueError, match="lmbd"):
        dm.invert(pre, sim.obs, lmbd=-1.0)
    with pytest.raises(ValueError, match="x0 must have shape"):
        dm.invert(pre, sim.obs, x0=np.zeros(3))
    other = dm.Observations.create(sim.obs.times[:5], sim.obs.vels, sim.obs.flux[:5], sim.obs.err[:5])
    with pytest.raises(ValueError, match="epochs"):
        dm.invert(pre, other)


def test_dense_solve_float32_cube_reports_float64_values(small_problem):
    """The float32 folded cube only drives the iterations: reported loss/chi2/model are exact."""
    from dopplermap.objective import objective_terms

    star, grid, times, vels, comps, sim = small_problem
    pd = dm.precompute(grid, star, times, vels, comps, method="dense")
    r32 = dm.invert(pd, sim.obs, lmbd=1.0, tol=1e-6)
    r64 = dm.invert(pd, sim.obs, lmbd=1.0, tol=1e-9)  # "auto": float64 below tol 1e-6
    assert r32.cube_dtype == "float32" and r64.cube_dtype == "float64"
    for r in (r32, r64):
        val, t = objective_terms(jnp.asarray(r.x), 1.0, pd, sim.obs)
        c2 = t.chi2
        assert abs(r.loss - float(val)) <= 1e-12 * float(val)
        assert abs(r.chi2 - float(c2)) <= 1e-12 * float(c2)
        np.testing.assert_allclose(r.model, np.asarray(dm.forward(*map(jnp.asarray, (r.fssc, r.fssh, r.rv, r.amp)), pd)),
                                   rtol=0, atol=1e-13)
    # the folded model itself is accepted too (values then from its float32 cube)
    rf = dm.invert(dm.solve_form(pd), sim.obs, lmbd=1.0, tol=1e-6)
    assert rf.cube_dtype == "float32" and abs(rf.loss - r32.loss) <= 1e-6 * r32.loss
    # float32 iterations stop near the float64 optimum (f64 at tol 1e-5 is 5e-4 above it here)
    assert r64.loss <= r32.loss <= (1 + 2e-4) * r64.loss
    with pytest.raises(ValueError, match="cube_dtype"):
        dm.invert(pd, sim.obs, cube_dtype="float16")


def test_lbfgsb_restarts_after_a_premature_stop(small_problem):
    """At lambda 0.01 scipy's L-BFGS-B stops on one small step far from the optimum; the restart goes on."""
    from dopplermap.objective import ObjectiveData
    from dopplermap.solvers import bounds
    from dopplermap.solvers.program import compiled_value_and_grad
    from dopplermap.solvers.scipy_lbfgsb import LBFGSOptions, lbfgsb

    star, grid, times, vels, comps, sim = small_problem
    pre = dm.solve_form(dm.precompute(grid, star, times, vels, comps))
    lay = dm.Layout(grid.n_cell, len(times))
    x0 = lay.initial()
    lo, hi = bounds(lay)
    lm = jnp.asarray(0.01)
    data = ObjectiveData(obs=sim.obs)
    fn, _ = compiled_value_and_grad(jnp.asarray(x0), lm, pre, data)

    def vg(x):
        return fn(x, lm, pre, data)

    once, _ = lbfgsb(vg, x0, lo, hi, options=LBFGSOptions(max_restarts=0))
    full, hist = lbfgsb(vg, x0, lo, hi)
    assert once.restarts == 0 and full.restarts >= 1
    assert full.fun < (1 - 1e-2) * once.fun  # 5 % lower here
    assert full.nit == len(hist["loss"]) and full.nit > once.nit


def test_invert_a_problem_uses_its_settings_and_knows_its_context(small_problem):
    """`invert(problem)` = `invert(pre, obs, **settings)`, overrides win, the result knows the problem."""
    from dopplermap.problem import Problem, Settings

    star, grid, times, vels, comps, sim = small_problem
    prob = Problem(grid=grid, star=star, obs=sim.obs, components=comps, settings=Settings(lmbd=0.3, tol=1e-6))
    res = dm.invert(prob)
    ref = dm.invert(prob.pre, sim.obs, lmbd=0.3, tol=1e-6)
    assert res.loss == ref.loss and res.lmbd == 0.3
    assert res.grid is grid and res.star is star and res.obs is sim.obs
    assert res.intensities == tuple(float(c.intensity) for c in comps)
    assert dm.invert(prob, lmbd=1.0).lmbd == 1.0
    with pytest.raises(ValueError, match="brings its observations"):
        dm.invert(prob, sim.obs)
    with pytest.raises(ValueError, match="observations are missing"):
        dm.invert(prob.pre)


@pytest.mark.slow
def test_cool_only_fit_holds_the_hot_map_at_the_floor():
    """fit_components=("cool",): n_cell fewer free parameters, the hot map at its floor, the
    same loss as the objective at that point, and on a star with cool spots only a map at
    least as close to the truth as the three-component fit's (whose hot map is degenerate)."""
    from dopplermap.constants import FILL_MIN
    from dopplermap.solvers import bounds

    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=16, n_vel=28, seed=5)
    spots = tuple(s for s in dm.DEMO_SPOTS if s.kind == "cool")
    sim = dm.simulate(grid, star, times, vels, comps, spots, snr=600, seed=5)
    pre = dm.precompute(grid, star, times, vels, comps)
    lay = dm.Layout(pre.n_cell, pre.n_epoch)
    lo, hi = bounds(lay, fit_components=("cool",))
    assert int(np.sum(lo < hi)) == pre.n_cell + 2 * pre.n_epoch
    cool = dm.invert(pre, sim.obs, lmbd=1.0, tol=1e-9, fit_components=["cool"])
    both = dm.invert(pre, sim.obs, lmbd=1.0, tol=1e-9)
    assert cool.fit_components == ("cool",) and both.fit_components == ("cool", "hot")
    assert np.all(cool.fssh == FILL_MIN)
    assert float(dm.objective.loss(jnp.asarray(cool.x), 1.0, pre, sim.obs)) == pytest.approx(cool.loss, rel=1e-12)
    assert cool.loss >= both.loss * (1 - 1e-6)  # fewer freedoms, never a lower minimum
    truth = sim.fssc
    corr = [np.corrcoef(r.fssc, truth)[0, 1] for r in (cool, both)]
    assert corr[0] >= corr[1] - 0.01
    dev = dm.invert(pre, sim.obs, lmbd=1.0, tol=1e-9, fit_components=("cool",), solver="projected_lbfgs")
    assert np.all(dev.fssh == FILL_MIN) and dev.loss == pytest.approx(cool.loss, rel=1e-5)
    with pytest.raises(ValueError, match="fit_components"):
        dm.invert(pre, sim.obs, fit_components=("warm",))
