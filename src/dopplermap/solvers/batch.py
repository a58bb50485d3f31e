"""Device-resident inversions: one solve, or a batch in one compiled call.

:func:`invert_device` runs :func:`~dopplermap.solvers.projected_lbfgs.projected_lbfgs` on the
objective of :mod:`dopplermap.objective` entirely inside one compiled ``while_loop`` (no
host round trip per iteration, which is what matters on a GPU). :func:`invert_batch`
``vmap``s the same solve over several lambdas and/or several observation sets of the same
shape (bootstrap resamples, independent stars sharing a precomputed model), one compile.
Both compile ahead of time and report trace, lower and compile seconds separately.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from .. import plan
from ..errors import DopplermapInputError
from ..model import Precomputed, blocked_nbytes
from ..objective import DEFAULT_PENALTY, REGULARISERS, Layout, LineSets, Observations, set_chi2, solve_form
from ..result import InversionResult
from ._common import (
    bounds,
    check_fit_components,
    check_match,
    check_solver_args,
    cube_dtype_of,
    joint_arguments,
    project_feasible,
    resolve_cube_dtype,
)
from .projected_lbfgs import STOP_REASONS, projected_lbfgs
from .scipy_lbfgsb import value_and_grad_body  # the same compiled value-and-gradient body as the scipy path

__all__ = ["invert_device", "invert_batch", "compile_solver"]

_COMPILED: dict = {}


def _solve(x0, lo, hi, lmbd, pre, obs, joint=None, *, regulariser, penalty, maxiter, tol, maxcor):
    fun = functools.partial(value_and_grad_body, regulariser=regulariser, penalty=penalty)
    return projected_lbfgs(fun, x0, lo, hi, lmbd, pre, obs, joint, maxiter=maxiter, ftol=tol, gtol=tol,
                           maxcor=maxcor)


def compile_solver(x0, lo, hi, lmbd, pre, obs, *, regulariser="mem", penalty=DEFAULT_PENALTY, maxiter=1000,
                   tol=1e-5, maxcor=10, batch_lmbd=False, batch_obs=False, joint=None):
    """AOT-compile the device solve; returns ``(compiled, timings)``.

    The compiled function takes ``(x0, lo, hi, lmbd, pre, obs, joint)``; ``joint`` is
    ``None`` or ``(lightcurve, line_weight, lc_weight)`` (arrays: new weights reuse the
    compiled code) for the joint line + light-curve fit.
    ``timings``: ``trace``, ``lower``, ``compile`` seconds (0 when reused in-process).
    With ``batch_lmbd`` / ``batch_obs`` the solve is vmapped over the leading axis of
    ``lmbd`` / of ``obs.flux`` and ``obs.err``.
    """
    kw = dict(regulariser=regulariser, penalty=float(penalty), maxiter=int(maxiter), tol=float(tol),
              maxcor=int(maxcor))
    fn = functools.partial(_solve, **kw)
    if batch_lmbd or batch_obs:
        obs_axes = Observations(times=None, vels=None, flux=0, err=0) if batch_obs else None
        fn = jax.vmap(fn, in_axes=(None, None, None, 0 if batch_lmbd else None, None, obs_axes, None))
    leaves, treedef = jax.tree_util.tree_flatten((x0, lo, hi, lmbd, pre, obs, joint))
    key = (tuple(sorted(kw.items())), batch_lmbd, batch_obs, treedef,
           tuple((np.shape(v), jnp.result_type(v).name) for v in leaves))
    if key in _COMPILED:
        return _COMPILED[key], {"trace": 0.0, "lower": 0.0, "compile": 0.0, "cached": True}
    t0 = time.perf_counter()
    traced = jax.jit(fn).trace(x0, lo, hi, lmbd, pre, obs, joint)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    _COMPILED[key] = compiled
    return compiled, {"trace": t1 - t0, "lower": t2 - t1, "compile": t3 - t2, "cached": False}


def _setup(pre, obs, regulariser, x0, fit_rv, fit_amp, fit_components=("cool", "hot")):
    if regulariser not in REGULARISERS:
        raise DopplermapInputError(f"regulariser must be one of {REGULARISERS}, got {regulariser!r}")
    layout = Layout(pre.n_cell, pre.n_epoch)
    x0 = layout.initial() if x0 is None else np.asarray(x0, dtype=np.float64)
    if x0.shape != (layout.size,):
        raise DopplermapInputError(f"x0 must have shape ({layout.size},) = 2 n_cell + 2 n_epoch, got {x0.shape}")
    lo, hi = bounds(layout, fit_rv=fit_rv, fit_amp=fit_amp, x0=x0, fit_components=fit_components)
    return layout, jnp.asarray(np.clip(x0, lo, hi)), jnp.asarray(lo), jnp.asarray(hi)


def _to_result(layout, r, lmbd, regulariser, pre, timing, solve_time, solver, joint=False) -> InversionResult:
    x = np.asarray(r.x)
    fssc, fssh, rv, amp = layout.split(x)
    fssc, fssh, excess = project_feasible(fssc, fssh)
    model = jax.tree_util.tree_map(np.asarray, r.aux.model)  # at the solver's x (before the feasibility projection, which moves < 1e-5)
    n_it = int(r.n_iter)
    status = int(r.status)
    return InversionResult(
        fssc=fssc, fssh=fssh, rv=rv, amp=amp, loss=float(r.f), chi2=float(r.aux.chi2),
        regulariser_value=float(r.aux.regulariser), lmbd=float(lmbd), regulariser=regulariser, iterations=n_it,
        n_eval=int(r.n_eval), success=status in (1, 2), stop_reason=STOP_REASONS[status],
        compile_time=timing["trace"] + timing["lower"] + timing["compile"], solve_time=solve_time,
        history={"loss": np.asarray(r.history)[:n_it]}, model=model, max_sum_excess=excess, solver=solver,
        chi2_lc=float(r.aux.chi2_lc) if joint else None, cube_dtype=cube_dtype_of(pre))


def invert_device(pre: Precomputed, obs: Observations, *, lmbd: float = 1.0, regulariser: str = "mem",
                  x0=None, tol: float = 1e-5, maxiter: int = 1000, fit_rv: bool = True, fit_amp: bool = True,
                  penalty: float = DEFAULT_PENALTY, maxcor: int = 10,
                  cube_dtype: str | None = "auto", lightcurve=None, line_weight: float = 1.0,
                  lc_weight: float = 1.0, fit_components=("cool", "hot")) -> InversionResult:
    """Like :func:`dopplermap.invert` but solved by projected L-BFGS on the device.

    ``tol`` is both the relative-reduction and projected-gradient tolerance (as scipy's);
    ``cube_dtype`` and the joint fit (``lightcurve``, ``line_weight``, ``lc_weight``) as in
    :func:`dopplermap.invert`. Unlike the scipy path, the reported loss, chi2 and model are
    those of the solver's last evaluation, so with a float32 cube they carry its rounding
    (~1e-8 relative in the loss).
    """
    check_solver_args(tol=tol, maxiter=maxiter, lmbd=lmbd)
    layout, xj, lo, hi = _setup(pre, obs, regulariser, x0, fit_rv, fit_amp, fit_components)
    check_match(pre, obs)
    pre = solve_form(pre, resolve_cube_dtype(cube_dtype, tol))
    lm = jnp.asarray(lmbd, dtype=xj.dtype)
    joint = joint_arguments(pre, lightcurve, line_weight, lc_weight, xj.dtype)
    fn, timing = compile_solver(xj, lo, hi, lm, pre, obs, regulariser=regulariser, penalty=penalty,
                                maxiter=maxiter, tol=tol, maxcor=maxcor, joint=joint)
    t0 = time.perf_counter()
    r = jax.block_until_ready(fn(xj, lo, hi, lm, pre, obs, joint))
    solve_time = time.perf_counter() - t0
    res = _to_result(layout, r, lmbd, regulariser, pre, timing, solve_time, "projected_lbfgs", joint is not None)
    return dataclasses.replace(res, fit_components=check_fit_components(fit_components),
                               **set_chi2(pre, lightcurve, r.aux))


def invert_batch(pre: Precomputed, obs: Observations, *, lmbds=None, lmbd: float = 1.0, flux=None, err=None,
                 regulariser: str = "mem", x0=None, tol: float = 1e-5, maxiter: int = 1000, fit_rv: bool = True,
                 fit_amp: bool = True, penalty: float = DEFAULT_PENALTY, maxcor: int = 10,
                 cube_dtype: str | None = "auto", mode: str = "auto", form: str = "auto") -> list[InversionResult]:
    """Several device solves in one compiled, ``vmap``-ed call (or one after another).

    Args:
        lmbds: (n_batch,) lambdas (else ``lmbd`` for every member).
        flux, err: (n_batch, n_epoch, n_vel) observation sets sharing ``obs``'s epochs and
            velocities (bootstrap resamples, other stars with the same precomputed model);
            default ``obs`` itself for every member. An infinite error drops its point
            (e.g. an epoch a bootstrap resample did not draw).
        cube_dtype: as in :func:`dopplermap.invert` (dense models only).
        mode: ``"vmap"`` - one compiled call for the whole batch; ``"sequential"`` - the
            members one after another through one compiled single solve; ``"auto"``
            (default) - vmap, except on CPU when the blocked form (below) does not apply
            or fit.
        form: the model form a vmapped batch iterates on. ``"blocked"``
            (:func:`dopplermap.model.block_dense`): epoch blocks as plain matrices, so each
            block is one matrix-matrix product for all members - on CPU the only form
            where batching pays (2 cores, seed size, 8 lambdas: 3.9-5.0x one solve, against
            8-11x sequential and 20-27x for the folded form vmapped, whose per-epoch small
            products and gathers XLA CPU runs 10-20x slower batched); ``"folded"``
            (:func:`dopplermap.model.fold_dense`; session 1 measured 2.8x one solve for
            8 lambdas on an H200 with the then-default form); ``"auto"`` (default) -
            blocked on CPU for dense models while both its copies fit
            ``dopplermap.plan.BLOCKED_MAX_BYTES``, folded otherwise (binned models are used as they are).
    Returns:
        one :class:`InversionResult` per member; ``solve_time`` is the whole batch's.
    """
    check_solver_args(tol=tol, maxiter=maxiter, lmbd=lmbd, lmbds=lmbds)
    if isinstance(pre, LineSets):
        raise DopplermapInputError("invert_batch solves one line data set; several sets go through invert()")
    if mode not in ("auto", "vmap", "sequential"):
        raise DopplermapInputError(f"mode must be 'auto', 'vmap' or 'sequential', got {mode!r}")
    if form not in ("auto", "folded", "blocked"):
        raise DopplermapInputError(f"form must be 'auto', 'folded' or 'blocked', got {form!r}")
    dtype = resolve_cube_dtype(cube_dtype, tol)
    if form == "blocked" and (pre.line.method != "dense" or dtype is None):
        raise DopplermapInputError(f"form='blocked' needs a dense model and a cube_dtype, got a {pre.line.method} model "
                         f"and cube_dtype={cube_dtype!r}")
    form = plan.batch_form(form, mode=mode, blocked_fits=_blocked_fits(pre, dtype))
    mode = plan.batch_mode(mode, form=form)
    layout, xj, lo, hi = _setup(pre, obs, regulariser, x0, fit_rv, fit_amp)
    check_match(pre, obs)
    pre = solve_form(pre, dtype, blocked=form == "blocked")
    batch_lmbd = lmbds is not None
    batch_obs = flux is not None
    if not (batch_lmbd or batch_obs):
        raise DopplermapInputError("invert_batch needs lmbds and/or flux (with err) to batch over")
    lm = jnp.asarray(np.asarray(lmbds, dtype=float) if batch_lmbd else float(lmbd))
    if batch_lmbd and (lm.ndim != 1 or not np.all(np.isfinite(np.asarray(lm))) or np.any(np.asarray(lm) < 0)):
        raise DopplermapInputError(f"lmbds must be a 1-D array of finite values >= 0, got {np.asarray(lmbds)!r}")
    n = lm.shape[0] if batch_lmbd else None
    ob = obs
    if batch_obs:
        flux = np.asarray(flux, dtype=float)
        want = (obs.n_epoch, obs.n_vel)
        if flux.ndim != 3 or flux.shape[1:] != want:
            raise DopplermapInputError(f"flux must have shape (n_batch, n_epoch, n_vel) = (n, {want[0]}, {want[1]}), got {flux.shape}")
        err = np.asarray(obs.err if err is None else err, dtype=float)
        if err.shape not in (want, flux.shape):
            raise DopplermapInputError(f"err must have shape {want} or {flux.shape}, got {err.shape}")
        err = np.broadcast_to(err, flux.shape)
        if not (np.all(np.isfinite(flux)) and not np.any(np.isnan(err)) and np.all(err > 0)):
            raise DopplermapInputError("flux/err batch contains NaN or inf flux, NaN err or err <= 0")
        if n is not None and flux.shape[0] != n:
            raise DopplermapInputError(f"lmbds has {n} values but flux has {flux.shape[0]} sets")
        n = flux.shape[0]
        ob = Observations(times=obs.times, vels=obs.vels, flux=jnp.asarray(flux), err=jnp.asarray(err))
    lm_np = np.broadcast_to(np.asarray(lm), (n,))
    if mode == "sequential":
        return _sequential(layout, xj, lo, hi, lm_np, pre, ob, batch_obs, regulariser=regulariser, penalty=penalty,
                           maxiter=maxiter, tol=tol, maxcor=maxcor)
    fn, timing = compile_solver(xj, lo, hi, lm, pre, ob, regulariser=regulariser, penalty=penalty,
                                maxiter=maxiter, tol=tol, maxcor=maxcor, batch_lmbd=batch_lmbd,
                                batch_obs=batch_obs)
    t0 = time.perf_counter()
    r = jax.block_until_ready(fn(xj, lo, hi, lm, pre, ob, None))
    solve_time = time.perf_counter() - t0
    return [_to_result(layout, jax.tree_util.tree_map(lambda a, i=i: a[i], r), lm_np[i], regulariser, pre, timing,
                       solve_time, "projected_lbfgs") for i in range(n)]




def _blocked_fits(pre: Precomputed, dtype) -> bool:
    return dtype is not None and pre.line.method == "dense" and blocked_nbytes(pre.line, dtype) <= plan.BLOCKED_MAX_BYTES


def _sequential(layout, xj, lo, hi, lmbds, pre, obs, batch_obs, *, regulariser, penalty, maxiter, tol, maxcor):
    """The batch member by member through one compiled single solve; solve_time is the total."""
    def member(i):
        if not batch_obs:
            return obs
        return Observations(times=obs.times, vels=obs.vels, flux=obs.flux[i], err=obs.err[i])

    ob0 = member(0)
    lm0 = jnp.asarray(float(lmbds[0]))
    fn, timing = compile_solver(xj, lo, hi, lm0, pre, ob0, regulariser=regulariser, penalty=penalty,
                                maxiter=maxiter, tol=tol, maxcor=maxcor)
    t0 = time.perf_counter()
    runs = [jax.block_until_ready(fn(xj, lo, hi, jnp.asarray(float(lmbds[i])), pre, member(i), None))
            for i in range(len(lmbds))]
    solve_time = time.perf_counter() - t0
    return [_to_result(layout, r, lmbds[i], regulariser, pre, timing, solve_time, "projected_lbfgs")
            for i, r in enumerate(runs)]
