"""Effective degrees of freedom of a regularised fit: the influence matrix's traces against
ridge regression's closed form and against the exact implicit derivative d model / d data."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support import problems
from support.problems import form_problem

import dopplermap as dm
from dopplermap import uncertainty as U
from dopplermap.model import forward
from dopplermap.objective import Layout, loss


def test_influence_traces_ridge():
    """Ridge regression: tr A = sum s^2 / (s^2 + alpha); with unpenalised columns the dense hat matrix."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 15))
    alpha = 3.0
    s = np.linalg.svd(x, compute_uv=False)
    shrink = s ** 2 / (s ** 2 + alpha)
    tr, tr2 = U.influence_traces(x, np.eye(15) / np.sqrt(alpha))
    assert tr == pytest.approx(shrink.sum(), rel=1e-10)
    assert tr2 == pytest.approx(np.sum(shrink ** 2), rel=1e-10)
    # a per-parameter prior as a callable, and two free (unpenalised) columns beside it
    prior = rng.uniform(0.5, 4.0, 15)
    z = rng.normal(size=(40, 2))
    full = np.hstack([x, z])
    hat = full @ np.linalg.solve(full.T @ full + np.diag(np.concatenate([prior, [0.0, 0.0]])), full.T)
    tr, tr2 = U.influence_traces(x, lambda m: m / np.sqrt(prior)[:, None], z)
    assert tr == pytest.approx(np.trace(hat), rel=1e-10)
    assert tr2 == pytest.approx(np.sum(hat * hat), rel=1e-10)
    assert 2.0 < tr < 17.0  # the free columns count fully, the penalised ones partly


@pytest.mark.parametrize("n_data,n_par", [(40, 15), (15, 40)])
def test_influence_traces_either_gram_side(n_data, n_par):
    """Fewer parameters than data (the Gram matrix over parameters) and more (over data), a 2x2
    coupled prior and two free columns: both give the dense hat matrix's traces."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n_data, n_par))
    z = rng.normal(size=(n_data, 2))
    q = rng.normal(size=(n_par, n_par))
    prior = q @ q.T + n_par * np.eye(n_par)  # couples parameters
    w, v = np.linalg.eigh(prior)
    inv_sqrt = v @ np.diag(w ** -0.5) @ v.T
    full = np.hstack([x, z])
    p_full = np.zeros((n_par + 2, n_par + 2))
    p_full[:n_par, :n_par] = prior
    hat = full @ np.linalg.solve(full.T @ full + p_full, full.T)
    tr, tr2 = U.influence_traces(x, inv_sqrt, z)
    assert tr == pytest.approx(np.trace(hat), rel=1e-10)
    assert tr2 == pytest.approx(np.sum(hat * hat), rel=1e-10)
    assert tr < min(n_data, n_par + 2)  # a penalised fit uses less than the parameters or data allow


def test_influence_traces_ignore_parameters_the_data_do_not_see():
    """Zero columns (cells no epoch sees) change neither trace, on either side of the Gram matrix."""
    rng = np.random.default_rng(2)
    for n_data, n_par in ((30, 12), (12, 30)):
        x, z = rng.normal(size=(n_data, n_par)), rng.normal(size=(n_data, 2))
        prior = rng.uniform(0.5, 4.0, n_par)
        wide = np.hstack([x, np.zeros((n_data, 25))])
        wide_prior = np.concatenate([prior, rng.uniform(0.5, 4.0, 25)])
        full = np.hstack([x, z])
        hat = full @ np.linalg.solve(full.T @ full + np.diag(np.concatenate([prior, [0.0, 0.0]])), full.T)
        tr, tr2 = U.influence_traces(wide, lambda m, p=wide_prior: m / np.sqrt(p)[:, None], z)
        assert tr == pytest.approx(np.trace(hat), rel=1e-10)
        assert tr2 == pytest.approx(np.sum(hat * hat), rel=1e-10)
    # none seen at all: the free columns' span alone (rank 2)
    assert U.influence_traces(np.zeros((12, 5)), np.eye(5), rng.normal(size=(12, 2))) == (2.0, 2.0)
    assert U.influence_traces(np.zeros((12, 5)), np.eye(5)) == (0.0, 0.0)


@pytest.fixture(scope="module")
def mem_fit():
    return problems.mem_fitted()


def _implicit_influence(pre, obs, best):
    """Exact ``d model / d data`` (whitened) over the free parameters by implicit differentiation:
    ``grad loss = 0`` at the map gives ``dx/dy = H^-1 (2/N) J' W`` with ``H`` the full Hessian."""
    x = jnp.asarray(best.x)
    free = U._free_mask(best, True, True)
    fidx = np.nonzero(free)[0]
    # compiled: op by op, the Hessian's and the Jacobian's rows take several times longer
    h = np.asarray(jax.jit(jax.jacrev(jax.grad(lambda y: loss(y, best.lmbd, pre, obs, best.regulariser))))(x))
    h = h[np.ix_(fidx, fidx)]
    lay = Layout(pre.n_cell, pre.n_epoch)
    jac = np.asarray(jax.jit(jax.jacrev(lambda y: forward(*lay.split(y), pre).reshape(-1)))(x))[:, fidx]
    b = jac / np.asarray(obs.err).reshape(-1)[:, None]
    n = b.shape[0]
    return 2.0 / n * b @ np.linalg.solve(h, b.T)


@pytest.mark.slow
def test_effective_dof_is_the_trace_of_d_model_d_data(mem_fit):
    """The Gauss-Newton influence matrix agrees with the exact implicit derivative (which holds
    the model's curvature too) at a converged fit; nu and chi2 per nu follow from it."""
    pre, sim, best = mem_fit
    dof = U.effective_dof(form_problem(pre, sim.obs), best)
    a = _implicit_influence(pre, sim.obs, best)
    n = sim.obs.n_epoch * sim.obs.n_vel
    assert dof.n == n and dof.n_free == int(U._free_mask(best, True, True).sum())
    assert dof.p_eff == pytest.approx(np.trace(a), rel=0.02)
    assert dof.tr_a2 == pytest.approx(np.sum(a * a), rel=0.03)
    assert 2 * pre.n_epoch < dof.p_eff < n  # rv and amp count fully; the map uses part of the rest
    assert dof.nu == pytest.approx(n - 2 * dof.p_eff + dof.tr_a2)
    assert dof.chi2_nu == pytest.approx(best.chi2 * n / dof.nu)
    assert dof.chi2_nu > dof.chi2
    assert "per residual degree of freedom" in dof.describe()


@pytest.mark.slow
def test_effective_dof_falls_with_lambda(mem_fit):
    """More regularisation, fewer effective parameters (down to the free rv and amp)."""
    pre, sim, best = mem_fit
    prob = form_problem(pre, sim.obs)
    strong = dm.invert(pre, sim.obs, lmbd=100.0, regulariser="mem", tol=1e-10, maxiter=5000, x0=best.x)
    lo, hi = U.effective_dof(prob, strong), U.effective_dof(prob, best)
    assert lo.p_eff < hi.p_eff
    assert lo.p_eff >= 2 * pre.n_epoch - 1e-6


@pytest.mark.slow
def test_effective_dof_refuses_coupled_regulariser(mem_fit, monkeypatch):
    pre, sim, best = mem_fit
    prob = form_problem(pre, sim.obs)
    assert U.effective_dof_refusal(prob) is None
    assert "couples cells" in U.effective_dof_refusal(prob, "tikhonov")
    monkeypatch.setattr(U, "DOF_MAX_BYTES", 1000)
    assert "Gram matrix need" in U.effective_dof_refusal(prob)
    with pytest.raises(dm.DopplermapInputError, match="couples no cells"):
        U.effective_dof(form_problem(pre, sim.obs), dataclasses.replace(best, regulariser="tikhonov"))


@pytest.mark.slow
def test_chi2_per_residual_dof_is_1_with_the_true_errors():
    """A simulated star with errors exactly its noise: fitted at a small lambda the map absorbs
    part of the noise, so chi2 per point sits clearly below 1 while chi2 per residual degree of
    freedom is 1 to within its spread ``sqrt(2 / nu)``."""
    star, grid, times, _, comps = dm.demo_setup(n_cell=300, n_epoch=12, seed=5)
    sim = dm.simulate(grid, star, times, np.linspace(-60.0, 60.0, 28), comps, dm.DEMO_SPOTS, snr=500.0, seed=5,
                      method="dense")
    prob = dm.Problem(grid=grid, star=star, obs=sim.obs, components=comps, settings=dm.Settings(tol=1e-8))
    res = dm.invert(prob, lmbd=0.02)
    dof = U.effective_dof(prob, res)
    assert dof.chi2 < 1.0 - 4 * np.sqrt(2.0 / dof.n)
    assert dof.chi2_nu == pytest.approx(1.0, abs=3 * np.sqrt(2.0 / dof.nu))


@pytest.mark.slow
def test_effective_dof_reads_the_blocked_form_like_the_backward_passes(mem_fit):
    """J read from the blocked form's matrices and J from one backward pass per datum give the
    same traces (a fit with free rv and amp, and cells on their bounds)."""
    pre, sim, best = mem_fit
    prob = form_problem(pre, sim.obs)
    line = prob.solve_form("float64", blocked=True).line
    assert line.jacobian_blocks() is not None and prob.solve_form("float64").line.jacobian_blocks() is None
    assert U.hvp_form(pre).line.jacobian_blocks() is not None  # the form effective_dof takes: the direct read runs
    assert U._free_mask(best, True, True)[:2 * pre.n_cell].mean() < 1.0
    direct, passes = U.effective_dof(prob, best), U.effective_dof(prob, best, direct=False)
    assert direct.n_free == passes.n_free
    for name in ("p_eff", "tr_a2", "nu"):
        assert getattr(direct, name) == pytest.approx(getattr(passes, name), rel=1e-10)
