"""Per-cell uncertainties of the filling factors.

* :func:`bootstrap` - resample the epochs with replacement, re-solve each resampled data
  set warm-started from the best map, and take the standard deviation over the re-solved
  maps. A resample is the full problem with each epoch's chi-square counted as often as
  it was drawn, so by default the resamples are error sets of the one model, solved
  several at a time in one vmapped device solve. The bootstrap measures how the map moves
  when the data are resampled; a cell that no epoch ever sees never moves (only the
  regulariser fixes it), so such cells are reported as ``inf`` (unconstrained by the
  data) rather than the meaningless spread 0.
* :func:`laplace` - the Laplace approximation around the optimum. With ``N = n_epoch
  n_vel`` the negative log posterior is ``N / 2 * loss = chi2_total / 2 + N lambda reg / 2``
  (the regulariser acting as a prior), so the covariance is ``(N/2 H)^-1`` with ``H`` the
  Hessian of the loss restricted to the free parameters (filling factors off their
  bounds, free rv and amp: the nuisances are marginalised). Hessian-vector products are
  ``grad(grad(loss) . v)`` (the custom-VJP primitives of ``_linops`` support reverse over
  reverse, not forward mode). The diagonal of the inverse comes exactly (``"dense"``:
  Hessian columns from batched HVPs, then a Cholesky factorisation), exactly and
  matrix-free (``"lowrank"``: ``H = S + E`` with ``S`` the per-cell Hessian of the
  regulariser and penalty and ``E`` the chi-square's, whose range lies in a basis of about
  ``n_epoch n_vel`` vectors: the Jacobian's rows, rv and amp, widened until random probes
  find nothing of ``E`` outside it; then Woodbury in ``S``; for regularisers that couple no
  cells) or stochastically (``"hutchinson"``: ``E[z * H^-1 z]`` over Rademacher probes
  ``z``, each ``H^-1 z`` by conjugate gradients on HVPs). ``"auto"`` chooses by size
  (:func:`laplace_cost`, which also says what it will cost). Filling factors live in [0, 1],
  so Laplace results also carry 1-sigma intervals that stay inside it
  (:func:`bounded_interval`: the Gaussian truncated to [0, 1], its highest-density interval).
  ``width="sandwich"`` gives the linearised sampling width of the regularised estimate,
  ``H^-1 F H^-1`` (``F`` from the chi-square alone): the Laplace counterpart of what the
  bootstrap measures. The posterior width is larger where the regulariser (the prior)
  dominates; in the tests it is ~7x the bootstrap, the sandwich ~1.6x.

A map fitted to light curves alone takes :func:`laplace` only, exactly (the light curves'
Jacobian rows and each cell's prior block, Woodbury; :func:`_laplace_photometry`); its
posterior widths are mostly the prior's, as a light curve fixes longitudes and contrasts,
not single cells.

Cells that no epoch ever sees are reported as ``inf`` by every method: the data do not
constrain them, and the number the algebra gives there (the prior's own width for the
posterior, ~0 for the sandwich and the bootstrap) would read as a measurement. Their
``never_visible`` mask travels with the result; plots draw them as "unconstrained".

Numbers only: :func:`dopplermap.plot.plot_uncertainty` draws map and uncertainty side by side.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from threadpoolctl import threadpool_limits

from . import plan, regularisers
from .cluster import run_tasks
from .constants import FILL_MAX, FILL_MIN
from .errors import DopplermapInputError, DopplermapWarning, warn
from .io.uncertainty import load_uncertainty, save_uncertainty  # noqa: F401  (the module's API)
from .memory import check_bytes, format_bytes
from .model import Precomputed, shift_profiles, solve_form
from .objective import DEFAULT_PENALTY, Layout, LineSets, NoLines, ObjectiveData, Observations, loss, n_windows
from .problem import Problem, require_problem
from .result import Uncertainty
from .solvers import InversionResult, invert, many_mode, photometry, sequential_solver, solve_many
from .solvers.newton import line_residuals, smooth_terms

log = logging.getLogger(__name__)

__all__ = ["Uncertainty", "bootstrap", "laplace", "laplace_cost", "LaplaceCost", "LAPLACE_OPTIONS", "resample_epochs",
           "never_visible", "hvp_function", "EffectiveDof", "effective_dof", "effective_dof_refusal", "influence_traces", "hvp_form", "lowrank_applies", "bounded_interval", "save_uncertainty",
           "load_uncertainty"]


def _one_set(pre, what: str) -> None:
    if n_windows(pre) > 1:
        raise DopplermapInputError(f"{what}: one static map only, this problem has {n_windows(pre)} time windows")
    if isinstance(pre, LineSets):
        raise DopplermapInputError(f"{what}: one line data set only, got {len(pre.sets)} sets "
                                   f"({', '.join(pre.names)}); compute uncertainty maps per set")


def _without_offset_prior(best: InversionResult, what: str) -> None:
    # the maps here come from the objective without the offset prior: say so rather than mislead
    if getattr(best, "offset_prior", None) is not None:
        warn(f"{what}: the map was fitted with an offset prior (offset_sigma); these uncertainties leave the "
             "prior out", stacklevel=3)


def never_visible(pre: Precomputed) -> np.ndarray:
    """(n_cell,) bool: cells that carry zero weight at every epoch.

    Any model form: folded models hold weight *differences* (which may be negative or, for
    a spot as bright as the photosphere, zero), so they are judged by their cube rows.
    """
    _one_set(pre, "never_visible")
    return ~pre.line.seen_cells()


def resample_epochs(pre: Precomputed, obs: Observations, idx) -> tuple[Precomputed, Observations]:
    """The problem restricted to epochs ``idx`` (with repeats): same shapes when len(idx) = n_epoch."""
    _one_set(pre, "resample_epochs")
    idx = np.asarray(idx, dtype=np.int64)
    if idx.ndim != 1 or idx.size == 0 or idx.min() < 0 or idx.max() >= pre.n_epoch:
        raise DopplermapInputError(f"epoch indices must be a 1-D array in [0, {pre.n_epoch}), got {idx!r}")
    new_pre = Precomputed(line=pre.line.select_epochs(idx), cell_area=pre.cell_area, edges=pre.edges)
    j = jnp.asarray(idx)
    new_obs = Observations(times=obs.times[j], vels=obs.vels, flux=obs.flux[j], err=obs.err[j])
    return new_pre, new_obs


BOOTSTRAP_TASK = 16
"""Resamples of one Dask task of a bootstrap on a cluster (one batched solve)."""


def _bootstrap_task(shared, flux, err):
    pre, obs, kw = shared
    many = solve_many(pre, obs, flux=flux, err=err, **kw)
    return np.array([r.fssc for r in many.results]), np.array([r.fssh for r in many.results]), many.describe()


def bootstrap(problem: Problem, best: InversionResult, *, n_boot: int = 20, seed: int = 0, progress=None,
              mode: str = "auto", cluster=None) -> Uncertainty:
    """Bootstrap over epochs, each resample re-solved from ``best`` (same lambda, regulariser).

    The resamples are solved with the problem's ``tol``, ``maxiter``, ``fit_rv`` and
    ``fit_amp`` (``problem.settings``; ``dopplermap invert`` uses tol 1e-6, maxiter 1000);
    the line profiles only (a light curve is left out).

    A resample draws ``n_epoch`` epochs with replacement. Epoch ``e`` drawn ``w_e`` times is
    the same problem as the full data set with that epoch's chi-square counted ``w_e``
    times (its errors divided by ``sqrt(w_e)``, infinite for an epoch not drawn; the
    chi-square keeps its ``n_epoch n_vel`` normalisation, and a repeated epoch's copies
    share one rv/amp, which they would take anyway), so resamples need no model of their own.

    Args:
        problem: a :class:`dopplermap.Problem` (one line data set). best: its inversion.
        n_boot: number of resamples (>= 2). seed: random seed (the same resamples in every mode).
        progress: optional ``progress(i, n_boot)`` after the refits.
        mode: ``"vmap"`` (or ``"batch"``) - the resamples as error sets of the one model,
            solved together in vmapped device solves (:func:`dopplermap.solvers.solve_many`,
            as many per call as memory allows); ``"sequential"`` - the same error sets one
            after another through one compiled device solve; ``"resample"`` - each resample's
            own model and data through :func:`dopplermap.invert` (scipy L-BFGS-B), one after
            another; ``"auto"`` (default) - vmap where :func:`dopplermap.plan.many_mode` says
            it pays, else sequential. The result's ``mode`` says which ran.
        cluster: a :class:`dopplermap.search.Cluster` to spread the resamples over (not
            ``"resample"``), as tasks of :data:`BOOTSTRAP_TASK` resamples, each one batched
            solve in ``mode``; None (default): in this process.
    """
    problem = require_problem(problem, "bootstrap")
    pre, obs, st = problem.pre, problem.obs, problem.settings
    tol, maxiter, fit_rv, fit_amp = st.tol, st.maxiter, st.fit_rv, st.fit_amp
    _one_set(pre, "bootstrap")
    _without_offset_prior(best, "bootstrap")
    if int(n_boot) != n_boot or n_boot < 2:
        raise DopplermapInputError(f"n_boot must be an integer >= 2, got {n_boot!r}")
    if mode not in ("auto", "vmap", "batch", "sequential", "resample"):
        raise DopplermapInputError(f"bootstrap mode must be 'auto', 'vmap', 'batch', 'sequential' or 'resample', "
                                   f"got {mode!r}")
    dtype = plan.cube_dtype(problem.cube_dtype or "auto", tol)
    mode = many_mode(pre, obs, mode, tol=tol, cube_dtype=problem.cube_dtype or "auto")
    mode = "vmap" if mode == "batch" else mode
    if cluster is not None and mode == "resample":
        raise DopplermapInputError("bootstrap mode 'resample' runs in this process; on a cluster use 'vmap', "
                                   "'sequential' or 'auto'")
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    n_e = pre.n_epoch
    hidden = never_visible(pre)
    draws = [rng.integers(0, n_e, n_e) for _ in range(int(n_boot))]
    samples = np.empty((int(n_boot), 2, pre.n_cell))
    if mode != "resample":
        x0 = np.concatenate([best.fssc, best.fssh, best.rv, best.amp])
        err = np.asarray(obs.err, dtype=float)
        w = np.stack([np.bincount(i, minlength=n_e) for i in draws]).astype(float)  # (n_boot, E)
        with np.errstate(divide="ignore"):
            err_b = err[None] / np.sqrt(w)[:, :, None]  # inf for an epoch not drawn
        kw = dict(lmbd=best.lmbd, regulariser=best.regulariser, x0=x0, tol=tol, maxiter=maxiter, fit_rv=fit_rv,
                  fit_amp=fit_amp)
        if mode == "sequential":  # decided once here: the same solver in this process and on every worker
            kw["solver"] = sequential_solver(pre, obs, n_members=int(n_boot), **kw)
        kw["mode"] = mode
        flux_b = np.broadcast_to(np.asarray(obs.flux), err_b.shape)
        if cluster is None:
            many = solve_many(pre, obs, flux=flux_b, err=err_b, **kw)
            for j, r in enumerate(many.results):
                samples[j, 0], samples[j, 1] = r.fssc, r.fssh
            log.info("bootstrap: %s", many.describe())
        else:
            parts = [slice(s, min(s + BOOTSTRAP_TASK, int(n_boot))) for s in range(0, int(n_boot), BOOTSTRAP_TASK)]
            done = run_tasks(cluster, _bootstrap_task, (pre, obs, kw),
                             [(np.array(flux_b[p]), err_b[p]) for p in parts])
            for p, (fssc, fssh, _how) in zip(parts, done, strict=True):
                samples[p, 0], samples[p, 1] = fssc, fssh
            log.info("bootstrap: %d tasks of at most %d on the cluster (%s)", len(parts), BOOTSTRAP_TASK, done[0][2])
        if progress is not None:
            progress(int(n_boot), n_boot)
    else:
        # resample the form the solver iterates on (folding is per epoch): fold once, not per resample
        pre = solve_form(pre, dtype)
        for b, idx in enumerate(draws):
            pre_b, obs_b = resample_epochs(pre, obs, idx)
            x0 = np.concatenate([best.fssc, best.fssh, best.rv[idx], best.amp[idx]])
            with warnings.catch_warnings():  # a resample repeats epochs on purpose
                warnings.filterwarnings("ignore", message=".*duplicate epochs", category=DopplermapWarning)
                r = invert(pre_b, obs_b, lmbd=best.lmbd, regulariser=best.regulariser, x0=x0, tol=tol,
                           maxiter=maxiter, fit_rv=fit_rv, fit_amp=fit_amp)
            samples[b, 0], samples[b, 1] = r.fssc, r.fssh
            if progress is not None:
                progress(b + 1, n_boot)
        log.info("bootstrap: %d resamples one after another (invert)", int(n_boot))
    sd = samples.std(axis=0, ddof=1)
    sd[:, hidden] = np.inf
    return Uncertainty(sigma_fssc=sd[0], sigma_fssh=sd[1], method="bootstrap", never_visible=hidden,
                       samples=samples, time=time.perf_counter() - t0, mode=mode)


def _hvp(x, v, lmbd, pre, obs, regulariser, penalty):
    def g(y):
        return jax.grad(loss)(y, lmbd, pre, obs, regulariser, penalty)

    return jax.grad(lambda y: jnp.vdot(g(y), v))(x)


def _hvps(x, vs, lmbd, pre, obs, regulariser, penalty):
    return jax.vmap(lambda v: _hvp(x, v, lmbd, pre, obs, regulariser, penalty))(vs)


_hvps_jit = jax.jit(_hvps, static_argnames=("regulariser", "penalty"))



def hvp_form(pre: Precomputed, problem: Problem | None = None) -> Precomputed:
    """The model form Hessian-vector products are fastest on, at float64.

    Dense models: the blocked form (:func:`dopplermap.model.block_dense`), where a batch of
    vectors turns each block's products into matrix-matrix products (seed size, 2 cores,
    64 vectors: 2.0 ms per HVP against 27 ms one at a time on the dense cube,
    ``benchmarks/bench_uncertainty.py``), or the
    folded form when the blocked one is too big. Other models as they are. With the
    ``problem`` of ``pre``, the form it keeps (:meth:`dopplermap.problem.Problem.solve_form`:
    built once for all its callers).
    """
    if not pre.line.foldable:
        return pre
    blocked = plan.hvp_blocked(pre.line.blocked_nbytes("float64"))
    if problem is None:
        return solve_form(pre, "float64", blocked=blocked)
    return problem.solve_form("float64", blocked=blocked)


def hvp_function(lmbd, pre: Precomputed, obs: Observations, regulariser: str = "mem",
                 penalty: float = DEFAULT_PENALTY, chunk: int = 64):
    """``hvp(x, V) -> H V`` of the loss for ``V`` of shape (k, n_param) (reverse over reverse).

    Where batching pays (the blocked form, or any accelerator) the products run ``chunk``
    vectors at a time in one vmapped compiled call on :func:`hvp_form`'s model; any call
    with several rows is padded with zero vectors to a multiple of ``chunk`` (one compiled
    shape; a chunk costs far less than a compile), a single vector (conjugate-gradient
    iterations) runs alone. Elsewhere (CPU with the folded or binned form, whose batched
    products cost more than one at a time) the rows run one after another. ``hvp.batched``
    says which.
    """
    _one_set(pre, "hvp_function")
    lm = jnp.asarray(lmbd, dtype=jnp.float64)
    pre = hvp_form(pre)
    chunk = int(chunk)
    if chunk < 1:
        raise DopplermapInputError(f"chunk must be >= 1, got {chunk}")
    batched = _batches_well(pre)

    def run(x, vs):
        return _hvps_jit(x, vs, lm, pre, obs, regulariser=regulariser, penalty=float(penalty))

    def hvp(x, vs):
        vs = jnp.asarray(vs)
        k = vs.shape[0]
        if k == 1:
            return run(x, vs)
        if not batched:
            return jnp.concatenate([run(x, vs[i:i + 1]) for i in range(k)])
        pad = -k % chunk
        if pad:
            vs = jnp.concatenate([vs, jnp.zeros((pad,) + vs.shape[1:], vs.dtype)])
        return jnp.concatenate([run(x, vs[s:s + chunk]) for s in range(0, k + pad, chunk)])[:k]

    hvp.batched = batched
    return hvp


def _batches_well(pre: Precomputed) -> bool:
    """Whether vmapped products on this model form beat one at a time (measured on XLA CPU)."""
    return plan.batch_hvps(pre.line.batches_well)


def _free_mask(best: InversionResult, fit_rv: bool, fit_amp: bool) -> np.ndarray:
    f = np.concatenate([best.fssc, best.fssh])
    span = FILL_MAX - FILL_MIN
    inside = (f > FILL_MIN + 1e-9 * span) & (f < FILL_MAX - 1e-9 * span)
    n_e = best.rv.size
    return np.concatenate([inside, np.full(n_e, fit_rv), np.full(n_e, fit_amp)])


LAPLACE_OPTIONS = {"chunk": 64, "cg_tol": 1e-8, "cg_maxiter": 2000, "penalty": DEFAULT_PENALTY,
                   "lowrank_tol": 1e-8, "n_check": 8}
"""The rarely changed knobs of :func:`laplace` (its ``options``) and their defaults."""

LAPLACE_DIAGONALS = ("auto", "dense", "lowrank", "hutchinson")
"""How :func:`laplace` computes the diagonal of the inverse Hessian."""

DENSE_MAX_FREE = 2000
"""``diagonal="auto"``: the exact dense Hessian up to this many free parameters."""

DENSE_MAX_FREE_FALLBACK = 6000
"""``diagonal="auto"`` where the low-rank form does not apply: dense up to this many, Hutchinson beyond."""

LOWRANK_ROUNDS = 4
"""Most rounds that widen the low-rank basis (each adds what the data Hessian maps outside it)."""

SKETCH = 64
"""Random combinations of what the data Hessian maps outside the basis that one widening round adds."""


# ---------------------------------------------------------------- the low-rank (matrix-free) diagonal

def _vjps(x, us, pre, data):
    # J' u for a batch of cotangents ``us`` of the line residuals: one vmapped backward pass
    _, back = jax.vjp(lambda y: line_residuals(y, 0.0, pre, data), x)
    return jax.vmap(lambda u: back(u)[0])(us)


_vjps_jit = jax.jit(_vjps)


def _vjps_cols(x, start, pre, data, cols, scale, partner, off, *, chunk, m):
    # rows start .. start + chunk of J (one-hot cotangents built here, not sent) on the columns
    # ``cols``, times a matrix with ``scale`` on its diagonal and ``off`` at (partner[i], i)
    us = jax.nn.one_hot(start + jnp.arange(chunk), m, dtype=x.dtype)
    g = _vjps(x, us, pre, data)[:, cols]
    return g * scale + g[:, partner] * off


_vjps_cols_jit = jax.jit(_vjps_cols, static_argnames=("chunk", "m"))


def _epoch_residual(num, norm, rv, amp, flux, err, vels, m):
    # one epoch's line_residuals from its numerator (n_vel,) and normalisation (a forms.Form
    # whose shifted_profiles is the base one: the seed's linear interpolation)
    sh = shift_profiles(vels, rv[None], (num / norm)[None])[0] + amp
    return (flux - sh / jnp.mean(sh)) / err * (1.0 / jnp.sqrt(m))


@jax.jit
def _epoch_jacobians(x, line, flux, err):
    # each epoch's residuals by its numerator, normalisation, rv and amp at the map ``x``:
    # (E, V, V), (E, V) x 3 (one compiled call: op by op, the synthesis compiles ~40 pieces)
    fssc, fssh, rv, amp = Layout(line.n_cell, flux.shape[0]).split(x)
    num, norm = line.numerator_norm(fssc, fssh)
    m = flux.size
    return jax.vmap(jax.jacrev(lambda *a: _epoch_residual(*a, line.vels, m), argnums=(0, 1, 2, 3)))(
        num, norm, rv, amp, flux, err)


def _blocked_rows(x, line, obs, cidx, nuis, nc, scale, off):
    """J (the line residuals' Jacobian, ``line_residuals`` units) on the columns ``cidx`` (filling
    factors, indices into ``(fssc, fssh)``) then ``nuis`` (rv and amp, indices into ``x``), times
    the matrix with ``scale`` on its diagonal and ``off`` coupling a column to the same cell's
    other factor; read from the blocked form's matrices: an epoch's residuals depend on the map
    only through its numerator and normalisation, linear in the factors with the block's rows
    as coefficients, so J's rows of epoch ``e`` are ``K_e L_e`` (``K_e`` the residuals'
    derivatives by those ``n_vel + 1`` numbers). One backward pass per datum instead runs
    through every block."""
    n_e, n_v = obs.n_epoch, obs.n_vel
    m = n_e * n_v
    k_c = cidx.size
    err = jnp.broadcast_to(obs.err, obs.flux.shape)
    kn, kz, kr, ka = (np.asarray(a) for a in _epoch_jacobians(x, line, obs.flux, err))
    k_full = np.concatenate([kn, kz[:, :, None]], axis=2)  # (E, V, V + 1)
    local, block_row, block_cell = (np.asarray(a) for a in line.jacobian_blocks())
    n_b, n_row, n_col = local.shape
    per = n_row // (n_v + 1)
    pos = np.full(2 * nc, -1)
    pos[cidx] = np.arange(k_c)
    sc, oc = np.append(scale[:k_c], 0.0), np.append(off[:k_c], 0.0)  # index -1: not free
    rows = np.zeros((m, k_c + nuis.size))
    # One BLAS thread: many small products, which threads on shared cores only slow down
    with threadpool_limits(limits=1, user_api="blas"):
        for b in range(n_b):
            ep = np.nonzero(block_row // per == b)[0]
            lb = local[b].reshape(per, n_v + 1, n_col)[block_row[ep] % per]  # (e_b, V + 1, n_col)
            # columns u * 2 + k: factor k (0 fssc, 1 fssh) of the union's cell u
            target = pos[np.arange(2)[None, :] * nc + block_cell[b][:, None]].reshape(-1)
            swapped = lb.reshape(lb.shape[:2] + (-1, 2))[..., ::-1].reshape(lb.shape)  # the cell's other factor
            lw = lb * sc[target] + swapped * oc[target]
            # all-zero columns (the union's padding among them) add nothing
            keep = np.nonzero((target >= 0) & np.any(lb != 0.0, axis=(0, 1)))[0]
            lw, tk = lw[:, :, keep], target[keep]
            rows[(ep[:, None] * n_v + np.arange(n_v)).reshape(-1, 1), tk] = (k_full[ep] @ lw).reshape(-1, tk.size)
    # rv_e and amp_e move only epoch e's residuals
    e = (nuis - 2 * nc) % n_e
    d = np.where((nuis - 2 * nc < n_e)[:, None], kr[e], ka[e])  # (q, V)
    rows[e[:, None] * n_v + np.arange(n_v), k_c + np.arange(nuis.size)[:, None]] = d * scale[k_c:, None]
    return rows


def _smooth_hvp(x, v, lmbd, pre, regulariser, penalty):
    return jax.jvp(jax.grad(lambda y: smooth_terms(y, lmbd, pre, regulariser=regulariser, penalty=penalty)),
                   (x,), (v,))[1]


_smooth_hvp_jit = jax.jit(_smooth_hvp, static_argnames=("regulariser", "penalty"))


def lowrank_applies(regulariser: str) -> bool:
    """Whether ``diagonal="lowrank"`` can take ``regulariser``: one whose Hessian couples no
    cells (a positive per-cell prior that the data's low-rank part is added to)."""
    return regulariser != "none" and regularisers.regulariser(regulariser).newton_diagonal is None


class _CellBlocks:
    """The Hessian of ``lmbd reg + penalty`` (couples no cells) as per-cell 2x2 blocks
    ``[[a, b], [b, d]]`` in (fssc, fssh), zero on rv and amp; read with two products."""

    def __init__(self, x, lmbd, pre, regulariser, penalty, n_cell):
        n = x.shape[0]
        self.n_cell = n_cell
        ones_c = jnp.zeros(n).at[:n_cell].set(1.0)
        ones_h = jnp.zeros(n).at[n_cell:2 * n_cell].set(1.0)
        hc = np.asarray(_smooth_hvp_jit(x, ones_c, lmbd, pre, regulariser=regulariser, penalty=penalty))
        hh = np.asarray(_smooth_hvp_jit(x, ones_h, lmbd, pre, regulariser=regulariser, penalty=penalty))
        self.a, self.b, self.d = hc[:n_cell], hc[n_cell:2 * n_cell], hh[n_cell:2 * n_cell]

    def apply(self, v):
        """``S v`` for ``v`` of shape (n, ...) (rows are parameters)."""
        nc = self.n_cell
        out = np.zeros_like(v)
        vc, vh = v[:nc], v[nc:2 * nc]
        ex = (slice(None),) + (None,) * (v.ndim - 1)
        out[:nc] = self.a[ex] * vc + self.b[ex] * vh
        out[nc:2 * nc] = self.b[ex] * vc + self.d[ex] * vh
        return out

    def diagonal(self, n):
        return np.concatenate([self.a, self.d, np.zeros(n - 2 * self.n_cell)])

    def inverse_sqrt(self, free, extra):
        """Per-parameter ``P^-1/2`` as 2x2 cell blocks (arrays m11, m12, m22) and a diagonal on
        rv/amp: P is the block restricted to the free filling factors (a cell with one free
        factor: that factor's own entry), ``extra`` on the free rv/amp. Raises where a free
        cell's block is not positive definite."""
        nc = self.n_cell
        fc, fh = free[:nc], free[nc:2 * nc]
        both = fc & fh
        a = np.where(fc, self.a, 1.0)
        d = np.where(fh, self.d, 1.0)
        b = np.where(both, self.b, 0.0)
        blocks = np.stack([np.stack([a, b], -1), np.stack([b, d], -1)], -2)
        w, v = np.linalg.eigh(blocks)
        if not np.all(w > 0):
            raise ValueError("prior block not positive definite")
        m = np.einsum("cij,cj,ckj->cik", v, 1.0 / np.sqrt(w), v)
        tail = np.where(free[2 * nc:], 1.0 / np.sqrt(extra), 0.0)
        return m[:, 0, 0], m[:, 0, 1], m[:, 1, 1], tail

    @staticmethod
    def apply_blocks(mats, v, n_cell):
        m11, m12, m22, tail = mats
        ex = (slice(None),) + (None,) * (v.ndim - 1)
        out = np.empty_like(v)
        vc, vh = v[:n_cell], v[n_cell:2 * n_cell]
        out[:n_cell] = m11[ex] * vc + m12[ex] * vh
        out[n_cell:2 * n_cell] = m12[ex] * vc + m22[ex] * vh
        out[2 * n_cell:] = tail[ex] * v[2 * n_cell:]
        return out


def _max_col(a):
    return float(np.sqrt(np.max(np.einsum("ij,ij->j", a, a)))) if a.size else 0.0


def _gram_factor(g, tol):
    """``R`` (r, k) with ``R' R = g`` for a positive semi-definite ``g`` (k, k), ``r`` its rank
    down to pivots of ``tol`` x its largest diagonal (pivoted Cholesky), and the pivot order."""
    import scipy.linalg.lapack  # SciPy only where a low-rank diagonal is computed

    k = g.shape[0]
    if k == 0:
        return np.zeros((0, 0)), np.zeros(0, int)
    c, piv, rank, _ = scipy.linalg.lapack.dpstrf(0.5 * (g + g.T), lower=1,
                                                 tol=tol * max(float(np.max(np.diag(g))), 1e-300))
    piv = piv - 1
    r = np.zeros((rank, k))
    r[:, piv] = np.tril(c)[:, :rank].T
    return r, piv[:rank]


def _solve_lower(chol, b):
    import scipy.linalg  # SciPy only where a low-rank diagonal is computed

    return scipy.linalg.solve_triangular(chol, b, lower=True, check_finite=False)


def _orthonormal(a, tol):
    """Orthonormal columns spanning the columns of ``a`` (n, j) down to pivots of ``tol^2``
    (the selected columns, by a pivoted Cholesky of the Gram matrix), then one Cholesky pass
    that restores orthogonality (matrix products only)."""
    if a.shape[1] == 0:
        return a
    r, sel = _gram_factor(a.T @ a, tol ** 2)
    out = a[:, sel]
    for chol in (r[:, sel].T, None):
        if chol is None:
            chol = np.linalg.cholesky(out.T @ out)
        out = _solve_lower(chol, out.T).T
    return out


def _lowrank(x, free, lay, lmbd, hpre, obs, regulariser, penalty, hvp, width, *, chunk, tol, n_check, seed):
    """Loss-scale ``diag(H^-1)`` (or the sandwich's) over ``free``, ``diag(H)`` over all.

    ``H = S + E``: ``S`` the per-cell Hessian of the regulariser and penalty, ``E`` that of the
    chi-square, whose range lies in a small subspace (the Gauss-Newton part ``2 J'J`` has rank
    at most ``n_epoch n_vel``; the second-order part adds a few directions per epoch). The
    basis starts from the rows of ``J'`` and rv/amp, is widened by what ``E`` maps outside it
    (up to :data:`LOWRANK_ROUNDS` rounds) and is checked with random probes orthogonal to it;
    then ``E = U M U'`` exactly up to ``tol`` and the inverse follows by Woodbury in ``S``'s
    whitened coordinates (a ``k x k`` eigenproblem). Returns ``(diag, hii, info)``."""
    n, nc = lay.size, lay.n_cell
    blocks = _CellBlocks(x, lmbd, hpre, regulariser, penalty, nc)
    data = ObjectiveData(obs=obs)
    m = obs.n_epoch * obs.n_vel
    rows = np.empty((m, n))
    for s in range(0, m, chunk):  # J' e_r for every residual r, ``chunk`` at a time (one compiled shape)
        k = min(chunk, m - s)
        us = np.zeros((chunk, m))
        us[np.arange(k), s + np.arange(k)] = 1.0
        rows[s:s + k] = np.asarray(_vjps_jit(x, jnp.asarray(us), hpre, data))[:k]
    rows[:, 2 * nc:] = 0.0  # rv and amp get unit vectors of their own
    nuis = np.zeros((n, n - 2 * nc))
    nuis[2 * nc + np.arange(n - 2 * nc), np.arange(n - 2 * nc)] = 1.0
    u = np.concatenate([_orthonormal(rows.T, 1e-7), nuis], axis=1)
    del rows

    def e_of(cols):  # E v = H v - S v, columns of shape (n, j)
        if cols.shape[1] == 0:
            return cols
        return np.asarray(hvp(x, jnp.asarray(cols.T))).T - blocks.apply(cols)

    rng = np.random.default_rng(seed)
    eu = e_of(u)
    rank0 = u.shape[1]
    scale_e = max(_max_col(eu), 1e-300)
    rounds, outside = 0, 0.0
    while True:
        z = rng.standard_normal((n, int(n_check)))
        z -= u @ (u.T @ z)
        z /= np.linalg.norm(z, axis=0)
        ez = e_of(z)
        mu = u.T @ eu
        resid = eu - u @ mu  # what E maps outside the basis
        outside = max(_max_col(resid), _max_col(ez)) / scale_e
        if outside <= tol or rounds >= LOWRANK_ROUNDS:
            break
        # a random sketch of what lies outside (the next round checks that it caught all)
        new = np.concatenate([resid @ rng.standard_normal((resid.shape[1], SKETCH)), ez], axis=1)
        new -= u @ (u.T @ new)
        new = _orthonormal(new, tol)
        new -= u @ (u.T @ new)  # once more, for the rounding of the first pass
        new = _orthonormal(new, 1e-3)
        u = np.concatenate([u, new], axis=1)
        eu = np.concatenate([eu, e_of(new)], axis=1)
        rounds += 1
    mu = 0.5 * (mu + mu.T)
    hii = blocks.diagonal(n) + np.einsum("ij,ij->i", eu, u)  # diag(H) = diag(S) + diag(U U' E U U'), exact
    info = {"rank": u.shape[1], "rank0": rank0, "rounds": rounds, "outside": float(outside), "n_hvp": int(u.shape[1] + (rounds + 1) * n_check),
            "n_vjp": m}
    if outside > tol:
        return None, hii, info
    # rv/amp carry no prior: give them their own curvature as "prior" and take it out of E
    tail = np.maximum(hii[2 * nc:], 1e-300 * max(np.max(np.abs(hii)), 1.0))
    fr_tail = free[2 * nc:]
    w_t = u[2 * nc:][fr_tail]  # rows of U at the free rv/amp: U' e_j
    mu_f = mu - (w_t.T * tail[fr_tail]) @ w_t
    try:
        mats = blocks.inverse_sqrt(free, tail)
    except ValueError:
        return None, hii, {**info, "reason": "the regulariser's Hessian is not positive definite on the free cells"}
    fidx = np.nonzero(free)[0]
    # Woodbury: H = P + U M U' over the free parameters, A = P^-1 U, K = U' P^-1 U = R' R
    # (pivoted Cholesky; directions of U on fixed parameters only drop out), then
    # H^-1 = P^-1 - A Z A' with Z = M (I + K M)^-1 = M - M R' S^-1 R M, S = I + R M R',
    # positive definite exactly when H is
    uf = u * free[:, None]
    a_mat = _CellBlocks.apply_blocks(mats, _CellBlocks.apply_blocks(mats, uf, nc), nc)[fidx]
    k_mat = uf[fidx].T @ a_mat
    r, _ = _gram_factor(k_mat, 1e-14)
    rm = r @ mu_f
    s_mat = np.eye(r.shape[0]) + rm @ r.T
    try:
        c = np.linalg.cholesky(0.5 * (s_mat + s_mat.T))
    except np.linalg.LinAlgError:
        raise DopplermapInputError("the Hessian at the map is not positive definite (the inversion has not converged "
                                   "to a minimum); re-solve with a tighter tol") from None
    half = _solve_lower(c, rm)  # C^-1 R M
    z = mu_f - half.T @ half
    m11, m12, m22, tl = mats
    p_inv = np.concatenate([m11 ** 2 + m12 ** 2, m12 ** 2 + m22 ** 2, tl ** 2])[fidx]  # diag(P^-1)
    if width == "posterior":
        diag = p_inv - np.einsum("ij,ij->i", a_mat @ z, a_mat)
    else:
        # H^-1 E H^-1 = H^-1 - H^-1 S H^-1 with S = P - C (C: the rv/amp curvature moved into P):
        # H^-1 - H^-1 P H^-1 = A (Z - Z K Z) A', plus the columns H^-1 e_j of the free rv/amp
        diag = np.einsum("ij,ij->i", a_mat @ (z - z @ k_mat @ z), a_mat)
        jt = np.nonzero(fr_tail)[0]
        if jt.size:
            pos = np.searchsorted(fidx, 2 * nc + jt)
            pe = np.zeros((fidx.size, jt.size))
            pe[pos, np.arange(jt.size)] = tl[jt] ** 2
            cols = pe - a_mat @ (z @ a_mat[pos].T)
            diag = diag + np.einsum("ij,ij,j->i", cols, cols, tail[jt])
    return diag, hii, info


@dataclasses.dataclass(frozen=True)
class LaplaceCost:
    """What :func:`laplace` will do and about what it costs, known before it starts.

    Attributes:
        diagonal: the method chosen (``"dense"``, ``"lowrank"`` or ``"hutchinson"``) and
            ``reason``, why. n_free: free parameters. n_hvp: Hessian-vector products (about,
            for lowrank; a lower bound for hutchinson, whose CG steps are not known before).
            n_vjp: Jacobian rows (lowrank). nbytes: peak memory of its arrays, about.
        seconds: estimated wall time (None: not measured).
    """

    diagonal: str
    reason: str
    n_free: int
    n_hvp: int
    n_vjp: int
    nbytes: float
    seconds: float | None = None

    def describe(self) -> str:
        t = "" if self.seconds is None else f", ~{self.seconds:.0f} s"
        parts = [f"{self.n_hvp} Hessian products"] + ([f"{self.n_vjp} Jacobian rows"] if self.n_vjp else [])
        return (f"{self.diagonal} ({self.reason}): {self.n_free} free parameters, {', '.join(parts)}, "
                f"~{format_bytes(self.nbytes)}{t}")


def _choose(diagonal, n_free, m, n_tail, regulariser):
    k = m + n_tail
    if diagonal != "auto":
        return diagonal, "as asked"
    if n_free <= DENSE_MAX_FREE:
        return "dense", f"<= {DENSE_MAX_FREE} free parameters"
    if lowrank_applies(regulariser) and k < n_free:
        return "lowrank", f"> {DENSE_MAX_FREE} free parameters, data rank <= {k}"
    if n_free <= DENSE_MAX_FREE_FALLBACK:
        why = "a regulariser that couples cells" if not lowrank_applies(regulariser) else "more data than parameters"
        return "dense", f"{why}, <= {DENSE_MAX_FREE_FALLBACK} free parameters"
    return "hutchinson", f"> {DENSE_MAX_FREE_FALLBACK} free parameters, no low-rank form"


def _flop_rate() -> float:
    a = np.ones((384, 384))
    t = time.perf_counter()
    a @ a
    return 2 * 384 ** 3 / max(time.perf_counter() - t, 1e-6)


def laplace_cost(problem: Problem, best: InversionResult, *, width: str = "posterior", diagonal: str = "auto",
                 n_probe: int = 64, options: dict | None = None, measure: bool = False) -> LaplaceCost:
    """The method :func:`laplace` will use and its cost (products, memory; with ``measure``, wall
    seconds extrapolated from one timed batch of Hessian products, compiled first)."""
    problem = require_problem(problem, "laplace")
    opt = _laplace_options(options)
    pre, obs = problem.pre, problem.obs
    _one_set(pre, "laplace")
    free = _free_mask(best, problem.settings.fit_rv, problem.settings.fit_amp)
    n_free = int(free.sum())
    if isinstance(pre, NoLines):  # the exact Woodbury form of _laplace_photometry
        _check_photometric(width, diagonal, best)
        m, n = int(problem.lightcurve.n_lc), free.size
        flops = 4.0 * m * m * n + m ** 3
        return LaplaceCost("lowrank", "light curves alone: their Jacobian rows, exact", n_free, 0, m,
                           8.0 * 5 * m * n, flops / _flop_rate() if measure else None)
    n = free.size
    m = obs.n_epoch * obs.n_vel
    n_tail = n - 2 * pre.n_cell
    how, why = _choose(diagonal, n_free, m, n_tail, best.regulariser)
    two = 2 if width == "sandwich" else 1
    if how == "dense":
        n_hvp, n_vjp = two * n_free, 0
        nbytes = 8.0 * (6 + 3 * (two - 1)) * n_free ** 2  # columns, their symmetric copy, factor, inverse
        flops = (2.0 + 2 * (two - 1)) * n_free ** 3
    elif how == "lowrank":
        k = m + n_tail + 2 * n_tail + 3 * opt["n_check"]  # the basis plus a widening round
        n_hvp, n_vjp = k, m
        nbytes = 8.0 * (m * n + 10 * n * k + 4 * k * k)  # Jacobian rows; basis, its products and copies
        flops = 10.0 * n * k * k + 4.0 * k ** 3
    else:
        n_hvp, n_vjp = int(n_probe) * two * 20, 0
        nbytes = 8.0 * (int(n_probe) + 8) * n
        flops = 0.0
    seconds = None
    if measure:
        hvp = hvp_function(jnp.asarray(best.lmbd), pre, obs, best.regulariser, float(opt["penalty"]), chunk=opt["chunk"])
        x = jnp.asarray(best.x)
        k = opt["chunk"] if hvp.batched else 1
        v = jnp.zeros((k, n))
        jax.block_until_ready(hvp(x, v))  # compile
        t = time.perf_counter()
        jax.block_until_ready(hvp(x, v))
        per = (time.perf_counter() - t) / k
        seconds = (n_hvp + 0.5 * n_vjp) * per + flops / _flop_rate()
    return LaplaceCost(how, why, n_free, int(n_hvp), int(n_vjp), float(nbytes), seconds)


def _laplace_options(options):
    unknown = sorted(set(options or {}) - set(LAPLACE_OPTIONS))
    if unknown:
        raise DopplermapInputError(f"laplace options: unknown {', '.join(map(repr, unknown))}; "
                                   f"known: {', '.join(LAPLACE_OPTIONS)}")
    return {**LAPLACE_OPTIONS, **(options or {})}


ONE_SIGMA = 0.6826894921370859
"""Probability inside 1 sigma of a Gaussian: the mass of :func:`bounded_interval`'s intervals."""


def bounded_interval(f, sigma, level: float = ONE_SIGMA):
    """Intervals ``(lower, upper)`` of filling factors that stay inside [0, 1].

    The Laplace Gaussian ``N(f, sigma^2)`` truncated to [0, 1] (the posterior restricted to
    the allowed maps), and its highest-density interval holding ``level``: ``f +- sigma``
    where that lies inside, otherwise reaching the bound (a factor near 0 gets ``[0, b]``,
    so a true value of 0 can be covered) and longer on the open side. A factor on a bound
    with its conditional width gets ``[0, ~sigma]`` (half a Gaussian). ``inf`` sigma
    (unconstrained): the whole range.
    """
    from scipy.special import ndtr  # SciPy only where Laplace intervals are made

    f = np.clip(np.asarray(f, dtype=float), 0.0, 1.0)
    sigma = np.asarray(sigma, dtype=float)
    wide = ~np.isfinite(sigma)
    s = np.where(wide | (sigma <= 0), 1.0, sigma)
    z = ndtr((1.0 - f) / s) - ndtr(-f / s)  # the truncated Gaussian's mass

    def mass(a):
        return (ndtr((np.minimum(1.0, f + a) - f) / s) - ndtr((np.maximum(0.0, f - a) - f) / s)) / z

    lo_a, hi_a = np.zeros_like(f), np.maximum(f, 1.0 - f)
    for _ in range(60):  # the mass grows with the half-width a: bisection
        mid = 0.5 * (lo_a + hi_a)
        below = mass(mid) < level
        lo_a, hi_a = np.where(below, mid, lo_a), np.where(below, hi_a, mid)
    a = np.where(sigma <= 0, 0.0, hi_a)
    lower, upper = np.maximum(0.0, f - a), np.minimum(1.0, f + a)
    return np.where(wide, 0.0, lower), np.where(wide, 1.0, upper)


GAUSSIAN_WARN_FRACTION = 0.05
"""Above this fraction of seen free cells whose 1-sigma Gaussian crosses a bound, :func:`laplace` warns."""


def laplace(problem: Problem, best: InversionResult, *, width: str = "posterior", diagonal: str = "auto",
            n_probe: int = 64, seed: int = 0, options: dict | None = None, cost: LaplaceCost | None = None) -> Uncertainty:
    """Laplace-approximation uncertainties at the optimum ``best`` (see module docstring).

    Args:
        problem: a :class:`dopplermap.Problem` (one line data set); ``fit_rv`` and
            ``fit_amp`` of its settings say whether rv and amp are free (marginalised).
        best: the inversion of the problem (its lambda and regulariser are used).
        width: which width - ``"posterior"``, the Laplace posterior width ``diag(H^-1)``;
            ``"sandwich"``, the linearised sampling width of the regularised estimate,
            ``diag(H^-1 F H^-1)`` with ``F`` the Hessian of ``chi2_total / 2`` alone (what a
            bootstrap measures: zero for cells no datum touches).
        diagonal: how the diagonal of the inverse is computed (:data:`LAPLACE_DIAGONALS`) -
            ``"dense"`` (exact; the Hessian column by column, memory ``n_free^2``),
            ``"lowrank"`` (exact to ``lowrank_tol``, matrix-free: the per-cell prior plus the
            data Hessian in a basis of about ``n_epoch n_vel`` vectors, see :func:`_lowrank`;
            regularisers that couple no cells), ``"hutchinson"`` (``n_probe`` CG solves,
            unbiased but noisy; ``seed`` draws the probes) or ``"auto"`` (default: dense up to
            :data:`DENSE_MAX_FREE` free parameters, then lowrank where it applies and the data
            are fewer than the parameters, else dense up to :data:`DENSE_MAX_FREE_FALLBACK`,
            else hutchinson; :func:`laplace_cost` says which, and what it costs).
        options: any of :data:`LAPLACE_OPTIONS` - ``chunk`` (Hessian-vector products
            evaluated together, in one vmapped call, see :func:`hvp_function`), ``cg_tol`` and
            ``cg_maxiter`` (Hutchinson's conjugate gradients), ``penalty`` (weight of the
            ``fssc + fssh <= 1`` penalty, as in :func:`dopplermap.invert`), ``lowrank_tol``
            (largest part of the data Hessian the low-rank basis may miss, relative) and
            ``n_check`` (random probes that check it each round).
        cost: :func:`laplace_cost`'s answer, if already asked (its method is used).

    Filling factors sitting on a bound are not free; they get ``1 / sqrt(N/2 H_ii)``
    (their conditional width) and are marked ``at_bound``. Every factor gets an interval
    inside [0, 1] (:func:`bounded_interval`); a warning says when many
    seen cells' Gaussian 1-sigma range crosses a bound (the approximation is not meaningful
    there: read the bounded intervals, or use the bootstrap).
    """
    problem = require_problem(problem, "laplace")
    opt = _laplace_options(options)
    chunk, cg_tol, cg_maxiter, penalty = opt["chunk"], opt["cg_tol"], opt["cg_maxiter"], opt["penalty"]
    pre, obs = problem.pre, problem.obs
    _one_set(pre, "laplace")
    if isinstance(pre, NoLines):
        _check_photometric(width, diagonal, best)
        return _laplace_photometry(problem, best, width=width, penalty=float(penalty))
    _without_offset_prior(best, "laplace")
    if diagonal not in LAPLACE_DIAGONALS:
        raise DopplermapInputError(f"Laplace diagonal must be one of {', '.join(map(repr, LAPLACE_DIAGONALS))}, "
                                   f"got {diagonal!r}")
    if width not in ("posterior", "sandwich"):
        raise DopplermapInputError(f"Laplace width must be 'posterior' or 'sandwich', got {width!r}")
    if diagonal == "lowrank" and not lowrank_applies(best.regulariser):
        raise DopplermapInputError(f"Laplace diagonal 'lowrank' needs a regulariser that couples no cells, "
                                   f"got {best.regulariser!r}; use 'dense' or 'hutchinson'")
    t0 = time.perf_counter()
    lay = Layout(pre.n_cell, pre.n_epoch)
    x = jnp.asarray(best.x)
    if x.shape != (lay.size,):
        raise DopplermapInputError(f"best map has {x.shape[0]} parameters, the problem needs {lay.size}")
    if cost is None:
        cost = laplace_cost(problem, best, width=width, diagonal=diagonal, n_probe=n_probe, options=options)
    check_bytes(cost.nbytes, f"the Laplace uncertainty ({cost.describe()})",
                "the grid's n_cell, or choose another diagonal / the bootstrap")
    diagonal = cost.diagonal
    scale = 0.5 * obs.n_epoch * obs.n_vel
    hvp = hvp_function(jnp.asarray(best.lmbd), pre, obs, best.regulariser, float(penalty), chunk=chunk)
    free = _free_mask(best, problem.settings.fit_rv, problem.settings.fit_amp)
    fidx = np.nonzero(free)[0]
    n_free = fidx.size
    diag_inv = np.full(lay.size, np.nan)
    hii_all = None
    note = ""
    if diagonal == "lowrank":
        d, hii_all, info = _lowrank(x, free, lay, jnp.asarray(best.lmbd, dtype=jnp.float64), hvp_form(pre), obs,
                                    best.regulariser, float(penalty), hvp, width, chunk=chunk,
                                    tol=float(opt["lowrank_tol"]), n_check=int(opt["n_check"]), seed=seed)
        if d is None:  # the data Hessian is not low-rank here: the exact dense path
            note = (f"low-rank basis of {info['rank']} left {info['outside']:.2g} of the data Hessian outside "
                    f"(tolerance {opt['lowrank_tol']:.2g}){'; ' + info['reason'] if 'reason' in info else ''}: dense")
            warn(f"laplace: {note}", stacklevel=2)
            diagonal = "dense"
        else:
            diag_inv[fidx] = d / scale
            note = (f"basis of {info['rank']} ({info['rank0']} from the Jacobian and rv/amp, {info['rounds']} widening "
                    f"rounds); {info['outside']:.2g} of the data Hessian outside")
    if diagonal == "dense":
        hvp_data = hvp_function(jnp.asarray(0.0), pre, obs, "none", 0.0, chunk=chunk) if width == "sandwich" else None

        def columns(fn):
            cols = np.empty((n_free, n_free))
            for s in range(0, n_free, chunk):
                ids = fidx[s:s + chunk]
                basis = np.zeros((chunk if fn.batched else ids.size, lay.size))  # batched: one compiled shape
                basis[np.arange(ids.size), ids] = 1.0
                cols[s:s + ids.size] = np.asarray(fn(x, jnp.asarray(basis)))[:ids.size, fidx]
            return scale * 0.5 * (cols + cols.T)

        h = columns(hvp)
        try:
            chol = np.linalg.cholesky(h)
        except np.linalg.LinAlgError:
            raise DopplermapInputError("the Hessian at the map is not positive definite (the inversion has not converged "
                             "to a minimum); re-solve with a tighter tol") from None
        linv = np.linalg.inv(chol)  # H^-1 = L^-T L^-1
        if width == "posterior":
            diag_inv[fidx] = np.sum(linv * linv, axis=0)
        else:
            hinv = linv.T @ linv
            # diag(H^-1 F H^-1) through one BLAS product (a three-operand einsum loops in C
            # without BLAS: 7 minutes at the seed size's 4065 free parameters)
            diag_inv[fidx] = np.einsum("ij,ji->i", hinv @ columns(hvp_data), hinv)
    elif diagonal == "hutchinson":
        diag_inv[fidx] = _hutchinson(x, fidx, lay, best, hvp_form(pre), obs, float(penalty), scale, width,
                                     n_probe=n_probe, seed=seed, chunk=chunk, cg_tol=cg_tol, cg_maxiter=cg_maxiter)
    name = f"laplace-{width}-{diagonal}"

    fixed = np.nonzero(~free[:2 * pre.n_cell])[0]
    if fixed.size:
        if hii_all is not None:
            hii = scale * hii_all[fixed]
        else:
            basis = np.zeros((fixed.size, lay.size))
            basis[np.arange(fixed.size), fixed] = 1.0
            hii = scale * np.asarray(hvp(x, jnp.asarray(basis)))[np.arange(fixed.size), fixed]
        diag_inv[fixed] = 1.0 / np.maximum(hii, 1e-300)
    return _uncertainty(best, np.sqrt(diag_inv[:2 * pre.n_cell]), free[:2 * pre.n_cell], never_visible(pre), name,
                        t0, note)


def _uncertainty(best: InversionResult, sd, free, hidden, name: str, t0: float, note: str = "",
                 instead: str = " or use the bootstrap") -> Uncertainty:
    """The :class:`Uncertainty` of a Laplace width ``sd`` (2 n_cell; ``free`` the factors off their
    bounds, ``hidden`` the cells no datum sees: ``inf``), with its bounded intervals and the
    warning about Gaussians that cross a bound."""
    nc = hidden.size
    sd = np.array(sd, dtype=float)
    sd[:nc][hidden] = np.inf  # unconstrained by the data (see the module docstring)
    sd[nc:][hidden] = np.inf
    fill = np.concatenate([np.asarray(best.fssc, dtype=float), np.asarray(best.fssh, dtype=float)])
    lower, upper = bounded_interval(fill, sd)
    seen = np.concatenate([~hidden, ~hidden]) & free
    crosses = seen & ((fill - sd < 0.0) | (fill + sd > 1.0))
    if seen.any() and crosses.sum() > GAUSSIAN_WARN_FRACTION * seen.sum():
        warn(f"laplace: in {int(crosses.sum())} of {int(seen.sum())} free seen cells the 1-sigma range crosses the "
             f"bound 0 or 1 (there median f {np.median(fill[crosses]):.3g}, median sigma {np.median(sd[crosses]):.3g}): "
             "the Gaussian approximation is not meaningful there; read the bounded intervals (lower/upper: the "
             f"Gaussian truncated to [0, 1]){instead}", stacklevel=3)
    return Uncertainty(sigma_fssc=sd[:nc], sigma_fssh=sd[nc:], method=name, never_visible=hidden,
                       time=time.perf_counter() - t0, lower=np.stack([lower[:nc], lower[nc:]]),
                       upper=np.stack([upper[:nc], upper[nc:]]), at_bound=np.stack([~free[:nc], ~free[nc:]]),
                       n_crossing=int(crosses.sum()), note=note)


# ---------------------------------------------------------------- light curves alone

def _check_photometric(width: str, diagonal: str, best: InversionResult) -> None:
    if width not in ("posterior", "sandwich"):
        raise DopplermapInputError(f"Laplace width must be 'posterior' or 'sandwich', got {width!r}")
    if diagonal not in ("auto", "lowrank"):
        raise DopplermapInputError(f"laplace: a map of light curves alone takes the exact low-rank diagonal (the "
                                   f"light curves' Jacobian rows and each cell's prior block); diagonal {diagonal!r} "
                                   "does not apply: use 'auto'")
    if best.regulariser not in photometry.REGULARISERS or not best.lmbd > 0:
        raise DopplermapInputError(f"laplace: a map of light curves alone needs an entropy regulariser "
                                   f"({', '.join(photometry.REGULARISERS)}) with lambda > 0 as its per-cell prior, "
                                   f"got {best.regulariser!r} at lambda {best.lmbd:g}")


def _laplace_photometry(problem: Problem, best: InversionResult, *, width: str, penalty: float) -> Uncertainty:
    """Laplace widths of a map fitted to light curves alone, exactly: the Hessian is the
    Gauss-Newton one, ``N/2 (2 J'J + S)`` with ``J`` the light curves' (weighted) residual
    Jacobian, ``N`` their points and ``S`` each cell's 2 x 2 block of the regulariser and
    penalty (:func:`dopplermap.solvers.photometry.local_model`). ``J`` has ``N`` rows, so the
    inverse's diagonal comes through the Woodbury identity in ``S`` (an ``N x N`` system):
    ``B^-1 = S^-1 - S^-1 J' (I/2 + J S^-1 J')^-1 J S^-1`` on the free factors, and for the
    sandwich ``B^-1 (2 J'J) B^-1``, whose ``B^-1 J'`` is ``S^-1 J' (I/2 + J S^-1 J')^-1 / 2``.
    The light-curve model is linear in the filling factors but for its normalisation, so the
    Gauss-Newton Hessian is the exact one but for terms of the residuals' size times that
    curvature (tests: against the dense exact Hessian)."""
    t0 = time.perf_counter()
    pre, data = problem.pre, ObjectiveData.create(problem.pre, None, lightcurve=problem.lightcurve,
                                                  lc_weight=problem.settings.lc_weight)
    nc = pre.n_cell
    x = np.concatenate([np.asarray(best.fssc, dtype=float), np.asarray(best.fssh, dtype=float)])
    _, jac, (a, c, d) = photometry.local_model(x, best.lmbd, pre, data, best.regulariser, penalty)
    jac, a, c, d = (np.asarray(v, dtype=float) for v in (jac, a, c, d))
    free = _free_mask(best, False, False)
    n_data = jac.shape[0]
    scale = 0.5 * int(problem.lightcurve.n_lc)
    fc, fh = free[:nc], free[nc:]
    both = fc & fh
    det = a * d - c * c
    # S^-1 on the free factors (a held factor drops out of its cell's block)
    i11 = np.where(both, d / np.where(both, det, 1.0), np.where(fc, 1.0 / a, 0.0))
    i22 = np.where(both, a / np.where(both, det, 1.0), np.where(fh, 1.0 / d, 0.0))
    i12 = np.where(both, -c / np.where(both, det, 1.0), 0.0)
    jf = jac * free
    sj = np.concatenate([jf[:, :nc] * i11 + jf[:, nc:] * i12, jf[:, :nc] * i12 + jf[:, nc:] * i22], axis=1)  # J S^-1
    w = np.linalg.solve(0.5 * np.eye(n_data) + sj @ jf.T, sj)  # (I/2 + J S^-1 J')^-1 J S^-1
    if width == "posterior":
        diag = np.concatenate([i11, i22]) - np.sum(sj * w, axis=0)
    else:
        diag = 0.5 * np.sum(w * w, axis=0)  # rows of (B^-1 J') = (S^-1 J' (..)^-1 / 2): 2 |row|^2
    held = ~free
    hii = 2.0 * np.sum(jac * jac, axis=0) + np.concatenate([a, d])  # a held factor: its conditional width
    diag = np.where(held, 1.0 / np.maximum(hii, 1e-300), diag)
    sd = np.sqrt(np.maximum(diag, 0.0) / scale)
    colmax = np.max(np.abs(jac), axis=0)
    hidden = (colmax[:nc] <= 1e-14 * colmax.max()) & (colmax[nc:] <= 1e-14 * colmax.max())
    note = f"light curves alone: {n_data} Jacobian rows, Woodbury in the cells' prior blocks (Gauss-Newton Hessian)"
    return _uncertainty(best, sd, free, hidden, f"laplace-{width}-lowrank", t0, note, instead="")


def _hutchinson(x, fidx, lay, best, hpre, obs, penalty, scale, width, *, n_probe, seed, chunk, cg_tol, cg_maxiter):
    rng = np.random.default_rng(seed)
    n_free = fidx.size
    pchunk = chunk if _batches_well(hpre) else 1  # probes solved together where that pays
    fj = jnp.asarray(fidx)

    def op_of(lm, reg, pen, pre_, obs_, x_):
        def op(v):
            full = jnp.zeros(lay.size).at[fj].set(v)
            return scale * _hvp(x_, full, lm, pre_, obs_, reg, pen)[fj]
        return op

    # the probes' CG solves run together (vmapped, ``chunk`` at a time) where that pays: every
    # CG step is then one batch of HVPs. Model, data and map are arguments, not constants of
    # the program (as constants XLA would try to fold the products at compile time)
    @jax.jit
    def probe(z, x_, pre_, obs_, lm):
        op = op_of(lm, best.regulariser, penalty, pre_, obs_, x_)
        data_op = op_of(jnp.zeros((), lm.dtype), "none", 0.0, pre_, obs_, x_)

        def one(b):
            y = jax.scipy.sparse.linalg.cg(op, b, tol=cg_tol, maxiter=cg_maxiter)[0]
            if width == "sandwich":
                y = jax.scipy.sparse.linalg.cg(op, data_op(y), tol=cg_tol, maxiter=cg_maxiter)[0]
            return b * y
        return jax.vmap(one)(z).sum(axis=0)

    z_all = rng.choice([-1.0, 1.0], size=(int(n_probe), n_free))  # the same draws as one probe at a time
    acc = np.zeros(n_free)
    lm = jnp.asarray(best.lmbd, dtype=jnp.float64)
    for s in range(0, int(n_probe), pchunk):
        z = z_all[s:s + pchunk]
        if z.shape[0] < pchunk:  # same compiled shape; zero probes add zero
            z = np.concatenate([z, np.zeros((pchunk - z.shape[0], n_free))])
        acc += np.asarray(probe(jnp.asarray(z), x, hpre, obs, lm))
    return np.maximum(acc / n_probe, 0.0)


# ---------------------------------------------------------------- effective degrees of freedom


@dataclasses.dataclass(frozen=True)
class EffectiveDof:
    """How many of the data's degrees of freedom a regularised fit uses (its influence matrix).

    With ``A = d model / d data`` in units of the errors (the influence or hat matrix of the
    fit linearised at the map), ``p_eff = tr A`` is the effective number of parameters and
    ``nu = N - 2 tr A + tr A'A`` the residual degrees of freedom: for errors that match the
    noise, the expected chi-square of the residuals is ``nu`` (plus what the map cannot fit:
    the regulariser's bias, model error). A fit that follows the data absorbs ``N - nu`` of
    the noise, so its ``chi2 / N`` sits below 1 even with exact errors: ``chi2 / nu`` is the
    reduced chi-square to read against 1.

    Attributes:
        n: data points (``n_epoch n_vel``).
        p_eff: ``tr A``.
        tr_a2: ``tr A'A``.
        nu: ``n - 2 p_eff + tr_a2``.
        chi2: the map's reduced chi-square per point (``chi2_total / n``).
        n_free: free parameters the influence matrix was computed over (cells off their
            bounds, free rv and amp).
        time: wall seconds.
    """

    n: int
    p_eff: float
    tr_a2: float
    nu: float
    chi2: float
    n_free: int
    time: float = 0.0

    @property
    def chi2_nu(self) -> float:
        """The reduced chi-square per residual degree of freedom, ``chi2_total / nu``."""
        return self.chi2 * self.n / self.nu

    def describe(self) -> str:
        """One line: both reduced chi-squares and what the fit uses."""
        return (f"reduced chi2 {self.chi2:.4g} per point, {self.chi2_nu:.4g} per residual degree of freedom "
                f"(N {self.n}, effective parameters {self.p_eff:.1f}, residual dof {self.nu:.1f})")

    def to_dict(self) -> dict:
        """For JSON files."""
        return {"chi2_nu": self.chi2_nu, "nu": self.nu, "p_eff": self.p_eff, "tr_a2": self.tr_a2, "n": self.n,
                "n_free": self.n_free}


def influence_traces(b, prior_inv_sqrt, nuisance=None) -> tuple[float, float]:
    """``(tr A, tr A'A)`` of ``A = B (B'B + P)^-1 B'`` (a ridge-type influence matrix).

    ``b`` (N, p): the whitened Jacobian of the penalised parameters; ``prior_inv_sqrt`` (p, p)
    or a callable giving ``P^-1/2 M`` for ``M`` (p, k), ``P`` positive definite; ``nuisance``
    (N, q): the whitened Jacobian of unpenalised parameters (fitted freely alongside), whose
    span the fit reproduces exactly. With ``C = Q B P^-1/2`` (``Q`` the projection off the
    nuisances' span, rank ``r``) and ``g`` the eigenvalues of ``C C'`` (those of the smaller
    of ``C C'`` and ``C'C``: the two share their non-zero eigenvalues),
    ``A = (I - Q) + C (C'C + I)^-1 C'``: ``tr A = r + sum g / (1 + g)``,
    ``tr A'A = r + sum (g / (1 + g))^2``. Costs ``N p k`` (the Gram matrix) and one ``k x k``
    Cholesky inverse of ``G + I`` (``k - tr (G + I)^-1`` is ``sum g / (1 + g)``), ``k = min(N, p)``
    (``p`` less the parameters whose rows of ``P^-1/2 B'`` are zero)."""
    b = np.asarray(b, dtype=float)
    ct = prior_inv_sqrt(b.T) if callable(prior_inv_sqrt) else np.asarray(prior_inv_sqrt, dtype=float) @ b.T
    live = np.any(ct != 0.0, axis=1)
    if not live.all():  # a zero row adds a zero eigenvalue only (cells no epoch sees): dropped
        ct = ct[live]
    r = 0
    # One BLAS thread for the SVD: its reductions are mostly matrix-vector work, which
    # OpenBLAS's threads slow down many times over when the cores are shared
    # (benchmarks/RESULTS.md, "The cost of effective_dof"); the products keep their threads
    if nuisance is not None and np.size(nuisance):
        with threadpool_limits(limits=1, user_api="blas"):
            u, s, _ = np.linalg.svd(np.asarray(nuisance, dtype=float), full_matrices=False)
        u = u[:, s > s[0] * 1e-10 * max(u.shape)]
        r = u.shape[1]
        ct = ct - (ct @ u) @ u.T
    gram = ct @ ct.T if ct.shape[0] < ct.shape[1] else ct.T @ ct  # (k, k): symmetric rank-k update
    del ct
    # sum g/(1+g) = k - tr M and sum (g/(1+g))^2 = k - 2 tr M + |M|_F^2 with M = (G + I)^-1: a
    # Cholesky inverse (matrix-matrix work, about half an eigenvalue problem's time; G + I has
    # every eigenvalue >= 1, so the factorisation is stable). LAPACK through scipy: numpy has no
    # inverse from a Cholesky factor.
    import scipy.linalg.lapack as lapack  # SciPy only where the traces are computed (start-up)

    k = gram.shape[0]
    if k == 0:  # no penalised parameter the data see: the nuisances' span only
        return float(r), float(r)
    gram[np.diag_indices(k)] += 1.0
    chol, info = lapack.dpotrf(gram, lower=1, clean=1, overwrite_a=1)
    if info == 0:
        inv, info = lapack.dpotri(chol, lower=1, overwrite_c=1)  # its lower triangle; the upper stays 0
    if info != 0:
        raise ValueError(f"influence_traces: the Cholesky inverse of G + I failed (LAPACK info {info})")
    d = np.diag(inv).copy()
    tr_m = float(d.sum())
    fro = 2.0 * float(np.einsum("ij,ij->", inv, inv)) - float(d @ d)
    return float(r + k - tr_m), float(r + k - 2.0 * tr_m + fro)


DOF_MAX_BYTES = 2 * 1024 ** 3
"""Most memory (the Jacobian's ``n_epoch n_vel`` rows of all parameters twice and the ``N x N``
Gram matrix, float64) for which :func:`effective_dof_refusal` lets the commands compute."""


def effective_dof_refusal(problem: Problem, regulariser: str | None = None) -> str | None:
    """Why :func:`effective_dof` cannot take ``problem`` (fitted with ``regulariser``, default its
    settings'), in words, or None: several line data sets, time windows, a light curve, a
    regulariser that couples cells, a Jacobian beyond :data:`DOF_MAX_BYTES`."""
    problem = require_problem(problem, "effective_dof_refusal")
    regulariser = problem.settings.regulariser if regulariser is None else regulariser
    if len(problem.lines) > 1 or problem.n_window > 1 or problem.lightcurve_data is not None or problem.obs is None:
        return "one static map of one line data set only"
    if not lowrank_applies(regulariser):
        return f"the regulariser {regulariser!r} couples cells (mem and mem_spotdipy do not)"
    obs = problem.obs
    n = obs.n_epoch * obs.n_vel
    nbytes = 8 * (2 * n * problem.layout.size + n * n)  # the Jacobian, its whitened copy, the Gram matrix
    if nbytes > DOF_MAX_BYTES:
        return (f"its Jacobian ({n} x {problem.layout.size}) and Gram matrix need {format_bytes(nbytes)}, more "
                f"than {format_bytes(DOF_MAX_BYTES)}")
    return None


def effective_dof(problem: Problem, best: InversionResult, *, penalty: float = DEFAULT_PENALTY,
                  chunk: int = 64, direct: bool = True) -> EffectiveDof:
    """The influence matrix of the fit ``best`` of ``problem``: effective parameters and residual
    degrees of freedom (:class:`EffectiveDof`).

    The fit linearised at the map (Gauss-Newton: the model's Jacobian ``J`` in units of the
    errors, the regulariser's Hessian ``S`` as the prior) has ``A = J (J'J + S)^-1 J'`` over
    the free parameters (filling factors off their bounds, free rv and amp; a factor on a
    bound does not move with the data). ``J`` (its free columns) comes from the blocked form's
    matrices where the model is in that form (``direct``), else row by row from one backward
    pass per datum, ``N`` of them (``chunk`` at a time); then :func:`influence_traces`. For
    regularisers whose Hessian couples no cells (:func:`lowrank_applies`; ``mem``), one
    static map and one line data set."""
    problem = require_problem(problem, "effective_dof")
    pre, obs = problem.pre, problem.obs
    _one_set(pre, "effective_dof")
    if not lowrank_applies(best.regulariser):
        raise DopplermapInputError(f"effective_dof: needs a regulariser that couples no cells (mem), got "
                                   f"{best.regulariser!r}")
    t0 = time.perf_counter()
    lay = Layout(pre.n_cell, pre.n_epoch)
    nc, n = pre.n_cell, lay.size
    x = jnp.asarray(best.x, dtype=jnp.float64)
    if x.shape != (n,):
        raise DopplermapInputError(f"best map has {x.shape[0]} parameters, the problem needs {n}")
    hpre = hvp_form(pre, problem)  # the problem keeps it: `dopplermap lambda` asks twice (corner and target)
    m = obs.n_epoch * obs.n_vel
    free = _free_mask(best, problem.settings.fit_rv, problem.settings.fit_amp)
    blocks = _CellBlocks(x, jnp.asarray(best.lmbd, dtype=jnp.float64), hpre, best.regulariser, float(penalty), nc)
    cells = free.copy()
    cells[2 * nc:] = False
    try:
        m11, m12, m22, _ = blocks.inverse_sqrt(cells, np.ones(n - 2 * nc))
    except ValueError:
        raise DopplermapInputError("effective_dof: the regulariser's Hessian is not positive definite on the free "
                                   "cells (the inversion has not converged to a minimum?)") from None
    # Only the free parameters' columns of J enter (a factor on a bound has a zero prior row and
    # column): the free filling factors, then the free rv and amp (the nuisances), whitened as
    # the products come: line_residuals are (obs - model) / err / sqrt(N) and the loss is their
    # squared norm plus S, so in chi-square units J = sqrt(N) rows and the prior is N / 2 times
    # S's Hessian; B P^-1/2 takes sqrt(2) rows P_S^-1/2, a 2x2 block coupling a cell's two
    # factors when both are free.
    cidx = np.nonzero(free[:2 * nc])[0]
    nuis = np.nonzero(free[2 * nc:])[0] + 2 * nc
    cell, hot = cidx % nc, cidx >= nc
    pos = np.full(2 * nc, -1)
    pos[cidx] = np.arange(cidx.size)
    partner = pos[np.where(hot, cidx - nc, cidx + nc)]
    paired = partner >= 0
    k_c, k = cidx.size, cidx.size + nuis.size
    scale = np.concatenate([np.sqrt(2.0) * np.where(hot, m22[cell], m11[cell]), np.full(nuis.size, np.sqrt(m))])
    off = np.concatenate([np.sqrt(2.0) * np.where(paired, m12[cell], 0.0), np.zeros(nuis.size)])
    partner = np.concatenate([np.where(paired, partner, np.arange(k_c)), k_c + np.arange(nuis.size)])
    if direct and hpre.line.jacobian_blocks() is not None:
        rows = _blocked_rows(x, hpre.line, obs, cidx, nuis, nc, scale, off)
    else:
        args = [jnp.asarray(a) for a in (np.concatenate([cidx, nuis]), scale, partner, off)]
        data = ObjectiveData(obs=obs)
        chunk = max(int(chunk), 1)
        out = [_vjps_cols_jit(x, jnp.int32(s), hpre, data, *args, chunk=chunk, m=m) for s in range(0, m, chunk)]
        rows = np.empty((m, k))
        for s, part in zip(range(0, m, chunk), out, strict=True):
            rows[s:s + chunk] = np.asarray(part)[:min(chunk, m - s)]
        del out
    tr_a, tr_a2 = influence_traces(rows[:, :k_c], lambda bt: bt, rows[:, k_c:] if nuis.size else None)
    return EffectiveDof(n=m, p_eff=tr_a, tr_a2=tr_a2, nu=m - 2.0 * tr_a + tr_a2, chi2=float(best.chi2),
                        n_free=int(free.sum()), time=time.perf_counter() - t0)
