"""The projected Gauss-Newton-CG solver (``solver="newton"``): same optimum as scipy's
L-BFGS-B run to a tight tolerance, bounds, fixed nuisances, the joint light-curve fit,
one compilation per shape, and its pieces against independent references."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import lsq_linear

import dopplermap as dm
from dopplermap import compiled
from dopplermap.constants import FILL_MAX, FILL_MIN
from dopplermap.lightcurve import LightCurveBand, LightCurveSet, precompute_lightcurve, simulate_lightcurve
from dopplermap.model import solve_form
from dopplermap.objective import ObjectiveData
from dopplermap.objective import loss as objective_loss
from dopplermap.solvers import newton

TIGHT = dict(tol=1e-10, maxiter=20000, solver="lbfgsb")  # scipy reference


@pytest.fixture(scope="module")
def problem(small_problem):
    star, grid, times, vels, comps, sim = small_problem
    pre = dm.precompute(grid, star, times, vels, comps, method="dense")
    return star, grid, pre, sim


@pytest.fixture(scope="module")
def lightcurve(problem):
    star, grid, pre, sim = problem
    band = LightCurveBand((dm.LimbDarkening("linear", (0.7,)),) * 3, (1.0, 0.3, 1.5))
    t = np.linspace(0.0, 3.0, 60)
    flux, err, _ = simulate_lightcurve(grid, star, t, band, sim.fssc, sim.fssh, sigma=1e-3, seed=5)
    return precompute_lightcurve(grid, star, t, flux, err, band)


@pytest.fixture(scope="module")
def two_bands(problem, lightcurve):
    """A set of two bands (a blue one on other times) fitted with one map, weighted 1 and 0.4."""
    star, grid, pre, sim = problem
    band = LightCurveBand((dm.LimbDarkening("linear", (0.85,)),) * 3, (1.0, 0.15, 1.9))
    t = np.linspace(0.2, 2.7, 45)
    flux, err, _ = simulate_lightcurve(grid, star, t, band, sim.fssc, sim.fssh, sigma=2e-3, seed=6)
    blue = precompute_lightcurve(grid, star, t, flux, err, band)
    return LightCurveSet.create([lightcurve, blue], weights=[1.0, 0.4], names=["red", "blue"])


def _rel(a, b):
    return (a - b) / abs(b)


@pytest.mark.parametrize("fit_rv,fit_amp,comps", [(True, True, ("cool", "hot")), (False, True, ("cool", "hot")),
                                                   (True, False, ("cool", "hot")), (True, True, ("cool",))])
@pytest.mark.slow
def test_reaches_the_tight_scipy_loss_and_respects_bounds(problem, fit_rv, fit_amp, comps):
    _, _, pre, sim = problem
    kw = dict(lmbd=1.0, fit_rv=fit_rv, fit_amp=fit_amp, fit_components=comps)
    ref = dm.invert(pre, sim.obs, **kw, **TIGHT)
    res = dm.invert(pre, sim.obs, **kw, tol=1e-9, solver="newton")
    assert res.solver == "newton" and res.success, res.stop_reason
    assert _rel(res.loss, ref.loss) <= 1e-7, (res.loss, ref.loss)
    for f in (res.fssc, res.fssh):
        assert f.min() >= FILL_MIN and f.max() <= FILL_MAX
    assert np.all(res.fssc + res.fssh <= 1.0 + 1e-12)
    if not fit_rv:
        assert np.all(res.rv == 0.0)
    if not fit_amp:
        assert np.all(res.amp == 0.0)
    if comps == ("cool",):
        assert np.all(res.fssh == FILL_MIN) and res.fit_components == ("cool",)
    # far fewer objective passes than L-BFGS-B's evaluations at the tight tolerance
    assert res.n_eval == res.extra["passes"]["total"] < ref.n_eval


@pytest.mark.slow
@pytest.mark.parametrize("which", ["one", "two_bands"])
def test_joint_light_curve_fit_matches_scipy(problem, lightcurve, two_bands, which):
    """One light curve, or a set of two bands (each band's residuals weighted in R)."""
    _, _, pre, sim = problem
    lc = lightcurve if which == "one" else two_bands
    kw = dict(lmbd=1.0, lightcurve=lc, line_weight=1.0, lc_weight=0.5)
    ref = dm.invert(pre, sim.obs, **kw, **TIGHT)
    res = dm.invert(pre, sim.obs, **kw, tol=1e-9, solver="newton")
    assert res.solver == "newton" and res.chi2_lc is not None
    assert (res.chi2_lc_sets is None) == (which == "one")
    assert _rel(res.loss, ref.loss) <= 1e-7, (res.loss, ref.loss)


def test_residual_form_equals_the_objective(problem, lightcurve, two_bands):
    """|R|^2 + S is the objective of dopplermap.objective (the loss the other solvers minimise)."""
    _, _, pre, sim = problem
    sp = solve_form(pre, "float64")
    lay = dm.Layout(pre.n_cell, pre.n_epoch)
    rng = np.random.default_rng(0)
    x = jnp.asarray(np.concatenate([rng.uniform(1e-5, 0.6, 2 * pre.n_cell), rng.normal(0, 0.3, pre.n_epoch),
                                    rng.normal(0, 0.01, pre.n_epoch)]))
    lm = jnp.asarray(0.7)
    for reg in ("mem", "tikhonov", "none"):
        for lc in (None, lightcurve, two_bands):
            data = ObjectiveData.create(sp, sim.obs, lightcurve=lc, line_weight=0.8, lc_weight=0.3)
            r = newton.line_residuals(x, lm, sp, data)
            ours = float(jnp.vdot(r, r) + newton.smooth_terms(x, lm, sp, data, regulariser=reg))
            extra = {} if lc is None else dict(lightcurve=lc, line_weight=0.8, lc_weight=0.3)
            theirs = float(objective_loss(x, lm, sp, sim.obs, reg, 1e4, **extra))
            assert ours == pytest.approx(theirs, rel=1e-12), (reg, type(lc).__name__)
    assert lay.size == x.shape[0]


@pytest.mark.slow
def test_compiles_once_per_shape(problem):
    _, _, pre, sim = problem
    def programs():  # this process's compiled programs, by name
        return collections.Counter(key[0] for key in compiled._MEMO)

    before = programs()
    a = dm.invert(pre, sim.obs, lmbd=1.0, tol=1e-8, solver="newton")
    after_first = programs()
    noisy = dm.Observations.create(sim.obs.times, sim.obs.vels, np.asarray(sim.obs.flux) * 1.0001,
                                   np.asarray(sim.obs.err))
    b = dm.invert(pre, noisy, lmbd=0.3, tol=1e-7, solver="newton")  # new data, lambda and tol: same program
    assert programs() == after_first
    # the Newton loop and, for the final evaluation, a value-only program (no gradient program)
    assert after_first["newton"] <= before["newton"] + 1 and after_first["value_and_grad"] == before["value_and_grad"]
    assert b.compile_time < a.compile_time or a.compile_time == b.compile_time == 0.0


def test_projected_newton_solves_a_bounded_linear_least_squares_problem():
    """Against scipy.optimize.lsq_linear on min |A x - b|^2 + c |x|^2 with box bounds."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=(40, 12))
    b = rng.normal(size=40)
    lo, hi = np.full(12, -0.2), np.full(12, 0.3)
    lo[3] = hi[3] = 0.1  # one fixed variable
    c = 1e-3
    keep = np.arange(12) != 3  # the reference solves for the free variables, x[3] = 0.1 substituted
    aug = np.vstack([a[:, keep], np.sqrt(c) * np.eye(11)])
    rhs = np.concatenate([b - 0.1 * a[:, 3], np.zeros(11)])
    free = lsq_linear(aug, rhs, bounds=(lo[keep], hi[keep]), tol=1e-14).x
    ref = np.insert(free, 3, 0.1)
    assert np.sum((free <= -0.2 + 1e-9) | (free >= 0.3 - 1e-9)) >= 2  # some bounds are active
    aj, bj = jnp.asarray(a), jnp.asarray(b)
    out = jax.jit(lambda x0: newton._projected_newton(lambda x: aj @ x - bj, lambda x: c * jnp.vdot(x, x), x0,
                                                     jnp.asarray(lo), jnp.asarray(hi), blocks=(12,), maxiter=50,
                                                     ftol=1e-15, gtol=1e-12))(jnp.zeros(12))
    assert np.allclose(np.asarray(out.x), ref, atol=1e-8)
    assert int(out.status) in (1, 2)


def test_kink_spacing_only_for_uniform_velocity_grids():
    lay = dm.Layout(3, 2)
    s = newton.kink_spacing(lay, np.linspace(-10.0, 10.0, 11))
    assert np.allclose(s[6:8], 2.0) and not s[:6].any() and not s[8:].any()
    assert not newton.kink_spacing(lay, np.array([0.0, 1.0, 3.0, 4.0])).any()


def test_refuses_an_exact_rv_model():
    # its rv search scores moves with the linear shift, which an exact-rv model does not use
    star, grid, times, vels, comps = dm.demo_setup(n_cell=150, n_epoch=6, n_vel=24)
    pre = dm.precompute(grid, star, times, vels, comps, method="binned", rv_shift="exact")
    flux = 1.0 - 0.3 * np.exp(-0.5 * (vels / 20.0) ** 2)
    obs = dm.Observations.create(times, vels, np.tile(flux, (6, 1)), np.full((6, 24), 1e-3), normalise=True)
    assert pre.line.exact_rv
    with pytest.raises(dm.DopplermapInputError, match="rv_shift='exact'"):
        dm.invert(pre, obs, solver="newton")


def test_auto_takes_newton_at_tight_tolerances_where_it_applies(problem):
    """``solver="auto"`` (the TOML's default): Newton at tol <= NEWTON_TOL once compiled (a cold
    compile is weighed by :func:`dopplermap.plan.pick_solver`), L-BFGS-B above it, and
    L-BFGS-B for what Newton cannot fit (an exact-rv model, several line data sets)."""
    from dopplermap.objective import LineSets
    from dopplermap.problem import Settings
    from dopplermap.solvers import NEWTON_TOL, choose_solver

    _, _, pre, sim = problem
    dm.invert(pre, sim.obs, solver="newton", tol=1e-8, maxiter=3000)  # compiled in this process
    tight = dm.invert(pre, sim.obs, solver="auto", tol=1e-8, maxiter=3000)
    loose = dm.invert(pre, sim.obs, solver="auto", tol=1e-5)
    assert tight.solver == "newton" and loose.solver == "lbfgsb"
    assert choose_solver(settings=Settings(solver="auto", tol=NEWTON_TOL), pre=pre) == "newton"
    assert choose_solver(settings=Settings(solver="auto", tol=2 * NEWTON_TOL), pre=pre) == "lbfgsb"
    assert choose_solver(settings=Settings(solver="projected_lbfgs", tol=1e-9), pre=pre) == "projected_lbfgs"
    star, grid, times, vels, comps = dm.demo_setup(n_cell=150, n_epoch=6, n_vel=24)
    exact = dm.precompute(grid, star, times, vels, comps, method="binned", rv_shift="exact")
    assert choose_solver(settings=Settings(solver="auto", tol=1e-8), pre=exact) == "lbfgsb"
    sets = LineSets.create((pre, pre), names=("a", "b"))
    assert choose_solver(settings=Settings(solver="auto", tol=1e-8), pre=sets) == "lbfgsb"
    with pytest.raises(dm.DopplermapInputError, match="solver must be one of 'auto', 'lbfgsb'"):
        dm.invert(pre, sim.obs, solver="gauss")


def test_products_from_an_approximate_linearisation_reach_the_exact_optimum():
    """``product_args`` steer CG only: with a 1e-3-perturbed matrix in the products the solve
    still ends at the exact bounded optimum (scipy's lsq_linear), judged by the exact gradient."""
    rng = np.random.default_rng(3)
    a = rng.normal(size=(50, 10))
    b = rng.normal(size=50)
    lo, hi = np.full(10, -0.1), np.full(10, 0.1)
    c = 1e-3
    ref = lsq_linear(np.vstack([a, np.sqrt(c) * np.eye(10)]), np.concatenate([b, np.zeros(10)]),
                     bounds=(lo, hi), tol=1e-14).x
    assert np.sum((ref <= -0.1 + 1e-9) | (ref >= 0.1 - 1e-9)) >= 2  # some bounds are active
    rough = a * (1.0 + 1e-3 * rng.normal(size=a.shape))
    out = jax.jit(lambda x0, m, mp: newton._projected_newton(
        lambda x, m: m @ x - jnp.asarray(b), lambda x, m: c * jnp.vdot(x, x), x0, jnp.asarray(lo), jnp.asarray(hi),
        m, blocks=(10,), maxiter=100, ftol=1e-15, gtol=1e-12, product_args=(mp,)))(
        jnp.zeros(10), jnp.asarray(a), jnp.asarray(rough))
    assert np.allclose(np.asarray(out.x), ref, atol=1e-8)


@pytest.mark.slow  # 8-10 s: keeps the default suite within 5 minutes on 2 cores
def test_float64_cube_takes_float32_products_to_the_same_minimum(problem):
    """A tight solve iterates on a float64 cube and forms its Gauss-Newton products on the
    float32 fold of the same model (the default); the minimum is the all-float64 one's."""
    _, _, pre, sim = problem
    kw = dict(lmbd=0.3, tol=1e-9, solver="newton")
    mixed = dm.invert(pre, sim.obs, **kw)
    plain = dm.invert(pre, sim.obs, **kw, options=dict(products="float64"))
    assert mixed.cube_dtype == plain.cube_dtype == "float64"
    assert (mixed.extra["products"], plain.extra["products"]) == ("float32", "float64")
    assert mixed.success and plain.success, (mixed.stop_reason, plain.stop_reason)
    assert abs(_rel(mixed.loss, plain.loss)) <= 1e-8, (mixed.loss, plain.loss)
    # a float32 cube has no cheaper fold: its products are its own
    loose = dm.invert(pre, sim.obs, lmbd=0.3, tol=1e-5, solver="newton")
    assert loose.cube_dtype == loose.extra["products"] == "float32"
    with pytest.raises(dm.DopplermapInputError, match="products"):
        dm.invert(pre, sim.obs, **kw, options=dict(products="float16"))


def test_held_rv_leaves_the_kink_step_out_of_the_program(problem):
    """Without free rv (``fit_rv=False``, ZDIpy's targets) the compiled loop has no kink step;
    its solve still reaches the tight scipy loss."""
    from dopplermap.solvers import prepare
    from dopplermap.solvers.newton import _program_args

    _, _, pre, sim = problem
    settings = dm.Settings(lmbd=1.0, tol=1e-9)
    assert _program_args(prepare(pre, sim.obs, settings))[1]["kinks"]
    held = settings.replace(fit_rv=False)
    assert not _program_args(prepare(pre, sim.obs, held))[1]["kinks"]
    ref = dm.invert(pre, sim.obs, lmbd=1.0, fit_rv=False, **TIGHT)
    res = dm.invert(pre, sim.obs, lmbd=1.0, fit_rv=False, tol=1e-9, solver="newton")
    assert res.success and _rel(res.loss, ref.loss) <= 1e-7, (res.loss, ref.loss)
    # one linearisation an iteration (with the kink step it is two: its synthesis counts as a pass)
    assert res.extra["passes"]["linearise"] <= res.iterations + 1 < 2 * res.iterations


def test_newton_fits_reads_the_configuration_as_the_model_says():
    """``solvers.newton_fits`` decides from a problem's configuration while its model is not built,
    as ``_newton_fits`` does from the built model (windows, several sets and light curves alone:
    tests of those problems)."""
    from dopplermap.problem import demo_problem
    from dopplermap.solvers import _newton_fits, newton_fits

    plain = demo_problem(n_cell=60, n_epoch=6, n_vel=16)
    exact = plain.replace(method="binned", rv_shift="exact")
    for p, fits in ((plain, True), (exact, False)):
        assert "pre" not in p.__dict__ and newton_fits(p) is fits
        assert _newton_fits(p.pre) is fits and newton_fits(p) is fits  # from the built model, the same


def test_a_warm_start_down_the_noise_fitting_end_does_not_stop_on_its_first_damped_step():
    """Down a sweep's low end, the first Gauss-Newton step from the map of the lambda above is
    often refused in full and backtracked to a tiny reduction; that says the model was poor
    there, not that the minimum is near. Stopping on it left lambda 0.001 at its start's map
    (one iteration), a stall the sweep then re-solved from the flat start."""
    from dopplermap.problem import Settings, demo_problem
    from dopplermap.search import STALL_ITERATIONS

    prob = demo_problem(settings=Settings(tol=1e-7, solver="newton"))  # the `lambda` command's star and tol
    prev, steps = None, []
    for lm in np.logspace(-3, 2, 16)[::-1]:  # its default sweep, downwards as Newton sweeps
        res = dm.invert(prob, lmbd=float(lm), x0=None if prev is None else prev.x)
        if lm < 0.02:  # the start's loss at this lambda: the demo's loss is chi2 + lambda x entropy
            steps.append((lm, res.iterations, prev.chi2 + lm * prev.regulariser_value, res.loss))
        prev = res
    assert len(steps) == 4
    for lm, iterations, start, end in steps:
        assert iterations > STALL_ITERATIONS, (lm, iterations)
        assert end < start * (1 - 1e-5), (lm, start, end)
