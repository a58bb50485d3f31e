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
  reverse, not forward mode). The diagonal of the inverse comes either exactly (``"dense"``:
  Hessian columns from batched HVPs, then a Cholesky factorisation) or stochastically
  (``"hutchinson"``: ``E[z * H^-1 z]`` over Rademacher probes ``z``, each ``H^-1 z`` by
  conjugate gradients on HVPs; for problems too large for a dense Hessian).
  ``width="sandwich"`` gives the linearised sampling width of the regularised estimate,
  ``H^-1 F H^-1`` (``F`` from the chi-square alone): the Laplace counterpart of what the
  bootstrap measures. The posterior width is larger where the regulariser (the prior)
  dominates; in the tests it is ~7x the bootstrap, the sandwich ~1.6x.

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
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import plan
from ._repr import compact
from .atomic import write_file
from .choices import uncertainty_choice
from .constants import FILL_MAX, FILL_MIN
from .errors import DopplermapInputError, DopplermapWarning, warn
from .model import Precomputed, solve_form
from .objective import DEFAULT_PENALTY, Layout, LineSets, Observations, loss, n_windows
from .problem import Problem, require_problem
from .solvers import InversionResult, invert, solve_many

log = logging.getLogger(__name__)

__all__ = ["Uncertainty", "bootstrap", "laplace", "LAPLACE_OPTIONS", "resample_epochs", "never_visible", "hvp_function", "hvp_form",
           "save_uncertainty"]


@dataclasses.dataclass
class Uncertainty:
    """Per-cell 1-sigma uncertainties of the filling factors.

    Attributes:
        sigma_fssc, sigma_fssh: (n_cell,) standard deviations (``inf`` where the method
            cannot constrain a cell, see the module docstring).
        method: ``"bootstrap"`` or ``"laplace-<width>-<diagonal>"`` (width posterior/sandwich,
            diagonal dense/hutchinson).
        never_visible: (n_cell,) cells with zero weight at every epoch.
        samples: (n_boot, 2, n_cell) bootstrap maps (bootstrap only).
        time: wall seconds.
        mode: how the bootstrap's refits ran (``"vmap"``, ``"sequential"`` or ``"resample"``).
    """

    sigma_fssc: np.ndarray
    sigma_fssh: np.ndarray
    method: str
    never_visible: np.ndarray
    samples: np.ndarray | None = None
    time: float = 0.0
    mode: str | None = None

    def __repr__(self) -> str:
        return compact(self, ("method", "sigma_fssc", "sigma_fssh", "time"))


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


def bootstrap(problem: Problem, best: InversionResult, *, n_boot: int = 20, seed: int = 0, progress=None,
              mode: str = "auto") -> Uncertainty:
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
    dtype = plan.cube_dtype("auto", tol)
    if mode == "auto":
        mode = plan.many_mode("auto", n_data=obs.n_epoch * obs.n_vel, n_cell=pre.n_cell,
                              blocked_fits=plan.blocked_fits(pre, dtype))
    mode = "vmap" if mode == "batch" else mode
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
        many = solve_many(pre, obs, lmbd=best.lmbd, flux=np.broadcast_to(np.asarray(obs.flux), err_b.shape),
                          err=err_b, regulariser=best.regulariser, x0=x0, tol=tol, maxiter=maxiter,
                          fit_rv=fit_rv, fit_amp=fit_amp, mode=mode)
        for j, r in enumerate(many.results):
            samples[j, 0], samples[j, 1] = r.fssc, r.fssh
        log.info("bootstrap: %s", many.describe())
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



def hvp_form(pre: Precomputed) -> Precomputed:
    """The model form Hessian-vector products are fastest on, at float64.

    Dense models: the blocked form (:func:`dopplermap.model.block_dense`), where a batch of
    vectors turns each block's products into matrix-matrix products (seed size, 2 cores,
    64 vectors: 2.0 ms per HVP against 27 ms one at a time on the dense cube,
    ``benchmarks/bench_uncertainty.py``), or the
    folded form when the blocked one is too big. Other models as they are.
    """
    if not pre.line.foldable:
        return pre
    return solve_form(pre, "float64", blocked=plan.hvp_blocked(pre.line.blocked_nbytes("float64")))


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


LAPLACE_OPTIONS = {"chunk": 64, "cg_tol": 1e-8, "cg_maxiter": 2000, "penalty": DEFAULT_PENALTY}
"""The rarely changed knobs of :func:`laplace` (its ``options``) and their defaults."""


def laplace(problem: Problem, best: InversionResult, *, width: str = "posterior", diagonal: str = "dense",
            n_probe: int = 64, seed: int = 0, options: dict | None = None) -> Uncertainty:
    """Laplace-approximation uncertainties at the optimum ``best`` (see module docstring).

    Args:
        problem: a :class:`dopplermap.Problem` (one line data set); ``fit_rv`` and
            ``fit_amp`` of its settings say whether rv and amp are free (marginalised).
        best: the inversion of the problem (its lambda and regulariser are used).
        width: which width - ``"posterior"``, the Laplace posterior width ``diag(H^-1)``;
            ``"sandwich"``, the linearised sampling width of the regularised estimate,
            ``diag(H^-1 F H^-1)`` with ``F`` the Hessian of ``chi2_total / 2`` alone (what a
            bootstrap measures: zero for cells no datum touches).
        diagonal: how the diagonal of the inverse is computed - ``"dense"`` (exact; memory
            ``n_free^2``) or ``"hutchinson"`` (``n_probe`` CG solves, unbiased but noisy;
            ``seed`` draws the probes).
        options: any of :data:`LAPLACE_OPTIONS` - ``chunk`` (Hessian-vector products
            evaluated together, in one vmapped call, see :func:`hvp_function`), ``cg_tol`` and
            ``cg_maxiter`` (Hutchinson's conjugate gradients), ``penalty`` (weight of the
            ``fssc + fssh <= 1`` penalty, as in :func:`dopplermap.invert`).
    Filling factors sitting on a bound are not free; they get ``1 / sqrt(N/2 H_ii)``
    (their conditional width).
    """
    problem = require_problem(problem, "laplace")
    unknown = sorted(set(options or {}) - set(LAPLACE_OPTIONS))
    if unknown:
        raise DopplermapInputError(f"laplace options: unknown {', '.join(map(repr, unknown))}; "
                                   f"known: {', '.join(LAPLACE_OPTIONS)}")
    opt = {**LAPLACE_OPTIONS, **(options or {})}
    chunk, cg_tol, cg_maxiter, penalty = opt["chunk"], opt["cg_tol"], opt["cg_maxiter"], opt["penalty"]
    pre, obs = problem.pre, problem.obs
    _one_set(pre, "laplace")
    _without_offset_prior(best, "laplace")
    if diagonal not in ("dense", "hutchinson"):
        raise DopplermapInputError(f"Laplace diagonal must be 'dense' or 'hutchinson', got {diagonal!r}")
    if width not in ("posterior", "sandwich"):
        raise DopplermapInputError(f"Laplace width must be 'posterior' or 'sandwich', got {width!r}")
    t0 = time.perf_counter()
    lay = Layout(pre.n_cell, pre.n_epoch)
    x = jnp.asarray(best.x)
    if x.shape != (lay.size,):
        raise DopplermapInputError(f"best map has {x.shape[0]} parameters, the problem needs {lay.size}")
    scale = 0.5 * obs.n_epoch * obs.n_vel
    hvp = hvp_function(jnp.asarray(best.lmbd), pre, obs, best.regulariser, float(penalty), chunk=chunk)
    hvp_data = hvp_function(jnp.asarray(0.0), pre, obs, "none", 0.0, chunk=chunk) if width == "sandwich" else None
    free = _free_mask(best, problem.settings.fit_rv, problem.settings.fit_amp)
    fidx = np.nonzero(free)[0]
    n_free = fidx.size
    diag_inv = np.full(lay.size, np.nan)

    def columns(fn):
        cols = np.empty((n_free, n_free))
        for s in range(0, n_free, chunk):
            ids = fidx[s:s + chunk]
            basis = np.zeros((chunk if fn.batched else ids.size, lay.size))  # batched: one compiled shape
            basis[np.arange(ids.size), ids] = 1.0
            cols[s:s + ids.size] = np.asarray(fn(x, jnp.asarray(basis)))[:ids.size, fidx]
        return scale * 0.5 * (cols + cols.T)

    if diagonal == "dense":
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
        name = f"laplace-{width}-dense"
    else:
        rng = np.random.default_rng(seed)

        hpre = hvp_form(pre)
        pchunk = chunk if _batches_well(hpre) else 1  # probes solved together where that pays

        def op_of(lm, reg, pen):
            def op(v):
                full = jnp.zeros(lay.size).at[fidx].set(v)
                return scale * _hvp(x, full, lm, hpre, obs, reg, pen)[fidx]
            return op

        op = op_of(jnp.asarray(best.lmbd, dtype=jnp.float64), best.regulariser, float(penalty))
        data_op = op_of(jnp.asarray(0.0), "none", 0.0)

        # the probes' CG solves run together (vmapped, ``chunk`` at a time) where that pays:
        # every CG step is then one batch of HVPs, matrix-matrix products on the blocked form
        @jax.jit
        def probe(z):
            def one(b):
                y = jax.scipy.sparse.linalg.cg(op, b, tol=cg_tol, maxiter=cg_maxiter)[0]
                if width == "sandwich":
                    y = jax.scipy.sparse.linalg.cg(op, data_op(y), tol=cg_tol, maxiter=cg_maxiter)[0]
                return b * y
            return jax.vmap(one)(z).sum(axis=0)

        z_all = rng.choice([-1.0, 1.0], size=(int(n_probe), n_free))  # the same draws as one probe at a time
        acc = np.zeros(n_free)
        for s in range(0, int(n_probe), pchunk):
            z = z_all[s:s + pchunk]
            if z.shape[0] < pchunk:  # same compiled shape; zero probes add zero
                z = np.concatenate([z, np.zeros((pchunk - z.shape[0], n_free))])
            acc += np.asarray(probe(jnp.asarray(z)))
        diag_inv[fidx] = np.maximum(acc / n_probe, 0.0)
        name = f"laplace-{width}-hutchinson"

    fixed = np.nonzero(~free[:2 * pre.n_cell])[0]
    if fixed.size:
        basis = np.zeros((fixed.size, lay.size))
        basis[np.arange(fixed.size), fixed] = 1.0
        hii = scale * np.asarray(hvp(x, jnp.asarray(basis)))[np.arange(fixed.size), fixed]
        diag_inv[fixed] = 1.0 / np.maximum(hii, 1e-300)
    sd = np.sqrt(diag_inv[:2 * pre.n_cell])
    hidden = never_visible(pre)
    sd[:pre.n_cell][hidden] = np.inf  # unconstrained by the data (see the module docstring)
    sd[pre.n_cell:][hidden] = np.inf
    return Uncertainty(sigma_fssc=sd[:pre.n_cell], sigma_fssh=sd[pre.n_cell:], method=name,
                       never_visible=hidden, time=time.perf_counter() - t0)


def save_uncertainty(unc: Uncertainty, folder) -> Path:
    """Write ``uncertainty_<method>.npz`` (sigma_fssc, sigma_fssh, never_visible and the full
    method name) into ``folder``; ``<method>`` is the user's choice (``laplace``, ``sandwich``,
    ``bootstrap``, :func:`dopplermap.choices.uncertainty_choice`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return write_file(folder / f"uncertainty_{uncertainty_choice(unc.method)}.npz",
                      lambda fh: np.savez(fh, sigma_fssc=unc.sigma_fssc, sigma_fssh=unc.sigma_fssh,
                                          never_visible=unc.never_visible, method=unc.method))
