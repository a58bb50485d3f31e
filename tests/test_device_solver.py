"""Device-resident projected L-BFGS, batched solves and the compilation cache."""

import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap import plan
from dopplermap.cache import default_cache_dir, enable_compilation_cache
from dopplermap.solvers import invert_batch, invert_device
from dopplermap.solvers.projected_lbfgs import LBFGSOptions, projected_lbfgs


@pytest.fixture(scope="module")
def problem():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=20, n_vel=24)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=300, seed=2)
    pre = dm.precompute(grid, star, times, vels, comps)
    return pre, sim


def test_bounded_quadratic_exact():
    # min 0.5 |A x - b|^2 with 0 <= x <= 1: compare with the KKT solution by brute force
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.normal(size=(12, 6)))
    b = jnp.asarray(rng.normal(size=12) * 3)

    def fun(x):
        r = a @ x - b
        return 0.5 * jnp.dot(r, r), a.T @ r, ()

    res = projected_lbfgs(fun, jnp.full(6, 0.5), jnp.zeros(6), jnp.ones(6), options=LBFGSOptions(maxiter=500, ftol=0.0, gtol=1e-10))
    from scipy.optimize import lsq_linear
    ref = lsq_linear(np.asarray(a), np.asarray(b), bounds=(0, 1), tol=1e-14).x
    np.testing.assert_allclose(res.x, ref, atol=1e-6)
    assert int(res.status) in (1, 2)


def test_device_reaches_scipy_loss(problem):
    pre, sim = problem
    ref = dm.invert(pre, sim.obs, lmbd=1.0)
    dev = dm.invert(pre, sim.obs, lmbd=1.0, tol=1e-8, maxiter=3000, solver="projected_lbfgs")
    assert dev.solver == "projected_lbfgs"
    assert dev.loss <= ref.loss * (1 + 1e-6), (dev.loss, ref.loss)
    assert dev.success and np.all(dev.fssc >= 1e-5 - 1e-12) and np.all(dev.fssc <= 1 - 1e-5 + 1e-12)
    assert np.corrcoef(dev.fssc, ref.fssc)[0, 1] > 0.95


@pytest.mark.slow
def test_batch_equals_single_solves(problem):
    pre, sim = problem
    lmbds = [0.3, 3.0]  # two members: what a batch must equal does not grow with their number
    batch = invert_batch(pre, sim.obs, lmbds=lmbds, tol=1e-9, maxiter=3000, mode="vmap")  # blocked form on CPU
    folded = invert_batch(pre, sim.obs, lmbds=lmbds, tol=1e-9, maxiter=3000, mode="vmap", form="folded")
    seq = invert_batch(pre, sim.obs, lmbds=lmbds, tol=1e-9, maxiter=3000, mode="sequential")
    assert [b.lmbd for b in batch] == lmbds == [b.lmbd for b in seq]
    for lm, b, q in zip(lmbds, batch, seq, strict=True):
        one = invert_device(pre, sim.obs, lmbd=lm, tol=1e-9, maxiter=3000)
        # same algorithm; vmap changes float rounding, so the paths differ: compare converged losses
        assert abs(b.loss - one.loss) <= 1e-6 * abs(one.loss)
        assert abs(folded[lmbds.index(lm)].loss - one.loss) <= 1e-6 * abs(one.loss)
        assert q.loss == one.loss  # sequential runs the very same compiled solve
    # more regularisation -> larger chi-square
    assert batch[0].chi2 < batch[1].chi2
    # bootstrap-style batch over observation sets
    rng = np.random.default_rng(0)
    flux = np.asarray(sim.obs.flux)[None] + rng.normal(size=(2,) + sim.obs.flux.shape) * np.asarray(sim.obs.err)
    boot = invert_batch(pre, sim.obs, flux=flux, tol=1e-6, mode="vmap")
    boot_seq = invert_batch(pre, sim.obs, flux=flux, tol=1e-6, mode="sequential")
    assert len(boot) == 2 and boot[0].loss != boot[1].loss
    for b, q in zip(boot, boot_seq, strict=True):
        assert abs(b.loss - q.loss) <= 1e-4 * abs(q.loss)


def test_batch_bad_input(problem):
    pre, sim = problem
    with pytest.raises(ValueError, match="lmbds"):
        invert_batch(pre, sim.obs, lmbds=[1.0, -2.0])
    with pytest.raises(ValueError, match="flux must have shape"):
        invert_batch(pre, sim.obs, flux=np.ones((2, 3, 4)))
    with pytest.raises(ValueError, match="mode"):
        invert_batch(pre, sim.obs, lmbds=[1.0], mode="parallel")
    with pytest.raises(ValueError, match="form"):
        invert_batch(pre, sim.obs, lmbds=[1.0], form="cells")
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=20, n_vel=24)
    binned = dm.precompute(grid, star, times, vels, comps, method="binned")
    with pytest.raises(ValueError, match="form='blocked' needs a dense model"):
        invert_batch(binned, sim.obs, lmbds=[1.0], form="blocked")
    with pytest.raises(ValueError, match="lmbd"):
        invert_device(pre, sim.obs, lmbd=float("nan"))


@pytest.mark.slow
def test_batch_auto_mode_on_cpu(problem, monkeypatch):
    """On CPU, auto vmaps a dense model on its blocked form and runs a binned model (no
    blocked form) member by member; a model whose blocked form would not fit goes
    member by member too."""
    import jax


    if jax.default_backend() != "cpu":
        pytest.skip("CPU policy")
    pre, sim = problem
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=20, n_vel=24)
    binned = dm.precompute(grid, star, times, vels, comps, method="binned")
    auto = invert_batch(binned, sim.obs, lmbds=[0.5, 2.0], tol=1e-6)
    seq = invert_batch(binned, sim.obs, lmbds=[0.5, 2.0], tol=1e-6, mode="sequential")
    assert [a.loss for a in auto] == [q.loss for q in seq]  # the very same compiled single solve
    monkeypatch.setattr(plan, "BLOCKED_MAX_BYTES", 0)
    auto = invert_batch(pre, sim.obs, lmbds=[0.5, 2.0], tol=1e-6)
    seq = invert_batch(pre, sim.obs, lmbds=[0.5, 2.0], tol=1e-6, mode="sequential")
    assert [a.loss for a in auto] == [q.loss for q in seq]


def test_compilation_cache_config(tmp_path, monkeypatch):
    import jax

    old = jax.config.jax_compilation_cache_dir
    try:
        folder = enable_compilation_cache(tmp_path / "cc")
        assert folder.is_dir() and jax.config.jax_compilation_cache_dir == str(folder)
        monkeypatch.setenv("DOPPLERMAP_CACHE_DIR", "off")
        assert default_cache_dir() is None and enable_compilation_cache() is None
        monkeypatch.setenv("DOPPLERMAP_CACHE_DIR", str(tmp_path / "env"))
        assert default_cache_dir() == tmp_path / "env"
        blocker = tmp_path / "file"
        blocker.write_text("x")
        with pytest.raises(ValueError, match="cannot be created"):
            enable_compilation_cache(blocker / "sub")
    finally:
        jax.config.update("jax_compilation_cache_dir", old)


@pytest.mark.slow
def test_device_restarts_after_a_premature_stop(small_problem):
    """As the scipy path: a relative-reduction stop restarts the memory while runs still gain.

    The first relative-reduction stop always restarts (at lambda 0.01 here the restarted
    runs then gain 1.5 %); later ones only if the run since the last restart gained >= ftol.
    """
    import functools

    import jax

    from dopplermap.objective import ObjectiveData
    from dopplermap.solvers import bounds
    from dopplermap.solvers.program import value_and_grad_body

    star, grid, times, vels, comps, sim = small_problem
    pre = dm.solve_form(dm.precompute(grid, star, times, vels, comps))
    lay = dm.Layout(grid.n_cell, len(times))
    lo, hi = (jnp.asarray(b) for b in bounds(lay))
    fun = functools.partial(value_and_grad_body, regulariser="mem", penalty=1e4)

    @functools.partial(jax.jit, static_argnames="max_restarts")
    def solve(lm, max_restarts):
        return projected_lbfgs(fun, jnp.asarray(lay.initial()), lo, hi, lm, pre, ObjectiveData(obs=sim.obs),
                               options=LBFGSOptions(maxiter=2000, ftol=1e-5, gtol=1e-12, max_restarts=max_restarts))

    lm = jnp.asarray(0.01)
    once, full = solve(lm, 0), solve(lm, 10)
    print(f"no restart: {int(once.n_iter)} it, loss {float(once.f):.6g}; with: {int(full.n_iter)} it, "
          f"{int(full.restarts)} restarts, loss {float(full.f):.6g}")
    assert int(once.restarts) == 0 and int(once.status) == 1
    assert 1 <= int(full.restarts) <= 10 and int(full.status) in (1, 2)
    assert float(full.f) < float(once.f)
    assert int(full.n_iter) > int(once.n_iter)
    # it ended because the last restarted run gained less than ftol (or on gtol)
    h = np.asarray(full.history)[:int(full.n_iter)]
    assert np.all(np.diff(h) <= 1e-12 * np.abs(h[:-1]))  # monotone


@pytest.mark.parametrize("solver", ["lbfgsb", "projected_lbfgs", "newton"])
@pytest.mark.slow
def test_the_callback_means_every_iteration_for_every_solver(problem, solver):
    pre, sim = problem
    calls = []
    r = dm.invert(pre, sim.obs, lmbd=1.0, solver=solver, tol=1e-6,
                  callback=lambda it, hist: calls.append((it, len(hist["loss"]), float(hist["loss"][-1]))))
    assert r.solver == solver and r.outcome is not None
    assert [c[0] for c in calls] == list(range(1, r.iterations + 1))  # once per iteration, in order
    assert all(n == it for it, n, _ in calls)  # the history grows with the iterations
    losses = np.array([c[2] for c in calls])
    assert np.all(np.diff(losses) <= 1e-9 * np.abs(losses[:-1]))  # monotone: each report is an accepted step
    assert losses[-1] == pytest.approx(r.loss, rel=1e-5)  # the reported result is the last iterate (projected)
