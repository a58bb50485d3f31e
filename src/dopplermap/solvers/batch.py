"""The device back end: projected L-BFGS in one compiled loop, for one solve or a batch.

:func:`solve_device` (``solver="projected_lbfgs"`` of :func:`dopplermap.invert`) runs
:func:`~dopplermap.solvers.projected_lbfgs.projected_lbfgs` on the objective of
:mod:`dopplermap.objective` entirely inside one compiled ``while_loop`` (no host round
trip per iteration, which is what matters on a GPU). :func:`solve_batch` ``vmap``s the same
solve over several lambdas and/or several observation sets of the same shape (bootstrap
resamples, independent stars sharing a precomputed model), one compile. Both compile ahead
of time and report trace, lower and compile seconds separately. The front door
(:mod:`dopplermap.solvers`: ``invert``, ``invert_device``, ``invert_batch``) checks the
problem and builds the results.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from .. import plan
from ..compiled import compile_cached
from ..model import Precomputed
from ..objective import DEFAULT_PENALTY, Observations
from ..result import Outcome
from ._common import RawSolve, SolveSetup, report_progress
from .projected_lbfgs import STOP_REASONS, projected_lbfgs
from .scipy_lbfgsb import value_and_grad_body  # the same compiled value-and-gradient body as the scipy path

__all__ = ["solve_device", "solve_batch", "compile_solver", "blocked_fits"]

def _report(it, f, aux):
    report_progress(it, f, aux.chi2, aux.regulariser)


def _solve(x0, lo, hi, lmbd, pre, obs, joint=None, offset_sigma=None, *, regulariser, penalty, maxiter, tol, maxcor,
           progress=False):
    fun = functools.partial(value_and_grad_body, regulariser=regulariser, penalty=penalty)
    return projected_lbfgs(fun, x0, lo, hi, lmbd, pre, obs, joint, offset_sigma, maxiter=maxiter, ftol=tol, gtol=tol,
                           maxcor=maxcor, report=_report if progress else None)


def _solve_members(x0, lo, hi, lmbd, pre, obs, joint=None, offset_sigma=None, *, batch_lmbd, batch_obs, **kw):
    fn = functools.partial(_solve, **kw)
    if batch_lmbd or batch_obs:
        obs_axes = Observations(times=None, vels=None, flux=0, err=0) if batch_obs else None
        # joint (light curve, weights) and the offset prior are shared by every member
        fn = jax.vmap(fn, in_axes=(None, None, None, 0 if batch_lmbd else None, None, obs_axes, None, None))
    return fn(x0, lo, hi, lmbd, pre, obs, joint, offset_sigma)


def compile_solver(x0, lo, hi, lmbd, pre, obs, *, regulariser="mem", penalty=DEFAULT_PENALTY, maxiter=1000,
                   tol=1e-5, maxcor=10, batch_lmbd=False, batch_obs=False, joint=None, offset_sigma=None,
                   progress=False):
    """AOT-compile the device solve; returns ``(compiled, timings)``.

    The compiled function takes ``(x0, lo, hi, lmbd, pre, obs, joint, offset_sigma)``; ``joint`` is
    ``None`` or ``(lightcurve, line_weight, lc_weight)`` (arrays: new weights reuse the
    compiled code) for the joint line + light-curve fit; ``offset_sigma`` None or the
    (n_epoch,) sigma of the offset prior (:mod:`dopplermap.objective`).
    ``timings``: ``trace`` (trace and lowering: :func:`dopplermap.compiled.compile_cached`), ``lower``
    (0) and ``compile`` seconds (all 0 when reused in-process).
    With ``batch_lmbd`` / ``batch_obs`` the solve is vmapped over the leading axis of
    ``lmbd`` / of ``obs.flux`` and ``obs.err``. ``progress``: report every iteration to the
    active :class:`~dopplermap.solvers._common.Progress` (single solves only).
    """
    kw = dict(regulariser=regulariser, penalty=float(penalty), maxiter=int(maxiter), tol=float(tol),
              maxcor=int(maxcor), progress=bool(progress) and not (batch_lmbd or batch_obs),
              batch_lmbd=bool(batch_lmbd), batch_obs=bool(batch_obs))
    args = (x0, lo, hi, lmbd, pre, obs, joint, offset_sigma)
    # a host callback (progress) cannot be exported: that program is traced every run
    compiled, timing = compile_cached("projected_lbfgs", _solve_members, args, kw, cache=not kw["progress"])
    return compiled, {"trace": timing["trace_lower"], "lower": 0.0, "compile": timing["compile"],
                      "cached": timing["cached"]}


def _raw(r, timing, solve_time) -> RawSolve:
    n_it = int(r.n_iter)
    status = int(r.status)
    return RawSolve(x=np.asarray(r.x), iterations=n_it, n_eval=int(r.n_eval), outcome=Outcome.from_status(status),
                    stop_reason=STOP_REASONS[status], history={"loss": np.asarray(r.history)[:n_it]},
                    compile_time=timing["trace"] + timing["lower"] + timing["compile"], solve_time=solve_time,
                    extra={"restarts": int(r.restarts)})


def solve_device(setup: SolveSetup, callback=None) -> RawSolve:
    """The ``"projected_lbfgs"`` back end: the whole solve in one compiled loop; with a
    ``callback`` the loop reports every iteration (:class:`~dopplermap.solvers._common.Progress`)."""
    xj, lo, hi = jnp.asarray(setup.x0), jnp.asarray(setup.lower), jnp.asarray(setup.upper)
    lm = jnp.asarray(setup.lmbd, dtype=xj.dtype)
    fn, timing = compile_solver(xj, lo, hi, lm, setup.pre, setup.obs, regulariser=setup.regulariser,
                                penalty=setup.penalty, maxiter=setup.maxiter, tol=setup.tol,
                                maxcor=int(setup.options.get("maxcor", 10)), joint=setup.joint,
                                offset_sigma=setup.offset_sigma, progress=callback is not None)
    t0 = time.perf_counter()
    r = jax.block_until_ready(fn(xj, lo, hi, lm, setup.pre, setup.obs, setup.joint, setup.offset_sigma))
    return _raw(r, timing, time.perf_counter() - t0)


def solve_batch(setup: SolveSetup, lmbds, obs: Observations, *, batch_lmbd: bool, batch_obs: bool,
                mode: str) -> list[RawSolve]:
    """The members of a batch (``lmbds`` (n,), ``obs`` with (n, E, V) flux/err when
    ``batch_obs``): one vmapped compiled call (``mode="vmap"``) or one compiled single solve
    after another (``"sequential"``); ``solve_time`` is the whole batch's."""
    xj, lo, hi = jnp.asarray(setup.x0), jnp.asarray(setup.lower), jnp.asarray(setup.upper)
    kw = dict(regulariser=setup.regulariser, penalty=setup.penalty, maxiter=setup.maxiter, tol=setup.tol,
              maxcor=int(setup.options.get("maxcor", 10)))
    lmbds = np.asarray(lmbds, dtype=float)
    if mode == "sequential":
        def member(i):
            if not batch_obs:
                return obs
            return Observations(times=obs.times, vels=obs.vels, flux=obs.flux[i], err=obs.err[i])

        fn, timing = compile_solver(xj, lo, hi, jnp.asarray(float(lmbds[0])), setup.pre, member(0),
                                    joint=setup.joint, offset_sigma=setup.offset_sigma, **kw)
        t0 = time.perf_counter()
        runs = [jax.block_until_ready(fn(xj, lo, hi, jnp.asarray(float(lm)), setup.pre, member(i), setup.joint,
                                         setup.offset_sigma))
                for i, lm in enumerate(lmbds)]
        solve_time = time.perf_counter() - t0
        return [_raw(r, timing, solve_time) for r in runs]
    lm = jnp.asarray(lmbds if batch_lmbd else float(lmbds[0]))
    fn, timing = compile_solver(xj, lo, hi, lm, setup.pre, obs, batch_lmbd=batch_lmbd, batch_obs=batch_obs,
                                joint=setup.joint, offset_sigma=setup.offset_sigma, **kw)
    t0 = time.perf_counter()
    r = jax.block_until_ready(fn(xj, lo, hi, lm, setup.pre, obs, setup.joint, setup.offset_sigma))
    solve_time = time.perf_counter() - t0
    return [_raw(jax.tree_util.tree_map(lambda a, i=i: a[i], r), timing, solve_time) for i in range(lmbds.size)]


def blocked_fits(pre: Precomputed, dtype) -> bool:
    """Whether the blocked form of a dense ``pre`` (both its copies) fits ``plan.BLOCKED_MAX_BYTES``."""
    nbytes = None if dtype is None else pre.line.blocked_nbytes(dtype)
    return nbytes is not None and nbytes <= plan.BLOCKED_MAX_BYTES
