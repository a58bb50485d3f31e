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

from ..compiled import compile_cached, loop_options, program_state
from ..objective import DEFAULT_PENALTY, ObjectiveData, Observations
from ..result import Outcome
from ._common import LBFGSOptions, RawSolve, SolveSetup, report_progress, run_members
from .newton import solve_members
from .program import value_and_grad_body  # the same value-and-gradient body as the scipy path
from .projected_lbfgs import STOP_REASONS, projected_lbfgs

__all__ = ["solve_device", "solve_batch", "solve_sequential", "sequential_compile_state"]

def _report(it, f, aux):
    report_progress(it, f, aux.chi2, aux.regulariser)


def _solve(x0, lo, hi, lmbd, pre, data, *, regulariser, penalty, maxiter, tol, maxcor, progress=False):
    fun = functools.partial(value_and_grad_body, regulariser=regulariser, penalty=penalty)
    return projected_lbfgs(fun, x0, lo, hi, lmbd, pre, data, options=LBFGSOptions.at(tol, maxiter, maxcor),
                           report=_report if progress else None)


def _solve_members(x0, lo, hi, lmbd, pre, data, *, batch_lmbd, batch_obs, batch_x0=False, **kw):
    fn = functools.partial(_solve, **kw)
    if batch_lmbd or batch_obs:
        obs_axes = Observations(times=None, vels=None, flux=0, err=0) if batch_obs else None
        # the light curve, its weights and the offset prior are shared by every member
        data_axes = ObjectiveData(obs=obs_axes, lightcurve=None, line_weight=None, lc_weight=None, offset_sigma=None)
        fn = jax.vmap(fn, in_axes=(0 if batch_x0 else None, None, None, 0 if batch_lmbd else None, None, data_axes))
    return fn(x0, lo, hi, lmbd, pre, data)


def _compile_solver(x0, lo, hi, lmbd, pre, data: ObjectiveData, *, regulariser="mem", penalty=DEFAULT_PENALTY,
                    maxiter=1000, tol=1e-5, maxcor=10, batch_lmbd=False, batch_obs=False, batch_x0=False,
                    progress=False):
    """AOT-compile the device solve; returns ``(compiled, timings)``.

    The compiled function takes ``(x0, lo, hi, lmbd, pre, data)`` (``data``: the
    :class:`~dopplermap.objective.ObjectiveData`, whose arrays, weights included, are
    arguments: new values reuse the compiled code).
    ``timings``: ``trace`` (trace and lowering: :func:`dopplermap.compiled.compile_cached`), ``lower``
    (0) and ``compile`` seconds (all 0 when reused in-process).
    With ``batch_lmbd`` / ``batch_obs`` the solve is vmapped over the leading axis of
    ``lmbd`` / of ``data.obs.flux`` and ``data.obs.err``; with ``batch_x0`` also over the leading
    axis of ``x0`` (a start per member). ``progress``: report every iteration to the
    active :class:`~dopplermap.solvers._common.Progress` (single solves only).
    """
    kw = dict(regulariser=regulariser, penalty=float(penalty), maxiter=int(maxiter), tol=float(tol),
              maxcor=int(maxcor), progress=bool(progress) and not (batch_lmbd or batch_obs),
              batch_lmbd=bool(batch_lmbd), batch_obs=bool(batch_obs))
    if batch_x0:  # only when set: the programs compiled before keep their cache key
        kw["batch_x0"] = True
    args = (x0, lo, hi, lmbd, pre, data)
    # a host callback (progress) cannot be exported: that program is traced every run
    compiled, timing = compile_cached("projected_lbfgs", _solve_members, args, kw, cache=not kw["progress"],
                                      options=loop_options())
    return compiled, {"trace": timing["trace_lower"], "lower": 0.0, "compile": timing["compile"],
                      "cached": timing["cached"]}


def sequential_compile_state(setup: SolveSetup, data: ObjectiveData) -> str:
    """Where the compiled single solve that ``solve_batch(mode="sequential")`` runs for
    ``setup`` (projected L-BFGS, members' data like ``data``) would come from
    (:func:`dopplermap.compiled.program_state`)."""
    xj, lo, hi = jnp.asarray(setup.x0), jnp.asarray(setup.lower), jnp.asarray(setup.upper)
    kw = dict(regulariser=setup.regulariser, penalty=float(setup.penalty), maxiter=int(setup.maxiter),
              tol=float(setup.tol), maxcor=int(setup.options.get("maxcor", 10)), progress=False,
              batch_lmbd=False, batch_obs=False)
    return program_state("projected_lbfgs", _solve_members, (xj, lo, hi, jnp.asarray(float(setup.lmbd)), setup.pre,
                                                             data), kw, loop_options())


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
    fn, timing = _compile_solver(xj, lo, hi, lm, setup.pre, setup.data, regulariser=setup.regulariser,
                                penalty=setup.penalty, maxiter=setup.maxiter, tol=setup.tol,
                                maxcor=int(setup.options.get("maxcor", 10)), progress=callback is not None)
    t0 = time.perf_counter()
    r = jax.block_until_ready(fn(xj, lo, hi, lm, setup.pre, setup.data))
    return _raw(r, timing, time.perf_counter() - t0)


def solve_sequential(setup: SolveSetup, lmbds, obs: Observations, *, batch_obs: bool, warm_start: bool = False,
                     starts=None, solver: str = "projected_lbfgs", threads: int = 1) -> list[RawSolve]:
    """The members of a batch (``lmbds`` (n,), ``obs`` with (n, E, V) flux/err when
    ``batch_obs``) through one compiled single solve: ``solver`` ``"projected_lbfgs"`` or
    ``"newton"`` (:func:`dopplermap.solvers.newton.solve_members`). With ``warm_start`` each
    member starts from the map of the one before (one after another), every member from
    ``setup.x0`` otherwise; ``starts``: (n, n_param) a start per member instead (inside the
    bounds). Members that do not chain run on ``threads`` threads
    (:func:`~dopplermap.solvers._common.run_members`); ``solve_time`` is the whole batch's."""
    xj, lo, hi = jnp.asarray(setup.x0), jnp.asarray(setup.lower), jnp.asarray(setup.upper)
    xs = None if starts is None else jnp.asarray(starts, dtype=xj.dtype)
    lmbds = np.asarray(lmbds, dtype=float)

    def member(i):
        if not batch_obs:
            return setup.data.replace(obs=obs)
        return setup.data.replace(obs=Observations(times=obs.times, vels=obs.vels, flux=obs.flux[i], err=obs.err[i]))

    if solver == "newton":
        def chained(i):
            def start(prev):
                x = xs[i] if xs is not None else (prev if warm_start and prev is not None else xj)
                return x, float(lmbds[i]), member(i)
            return start

        raws, _ = solve_members(setup, [chained(i) for i in range(lmbds.size)],
                                threads=1 if warm_start else threads)
        return raws
    fn, timing = _compile_solver(xj, lo, hi, jnp.asarray(float(lmbds[0])), setup.pre, member(0),
                                 regulariser=setup.regulariser, penalty=setup.penalty, maxiter=setup.maxiter,
                                 tol=setup.tol, maxcor=int(setup.options.get("maxcor", 10)))
    t0 = time.perf_counter()
    if warm_start:
        runs, x = [], xj
        for i, lm in enumerate(lmbds):
            if xs is not None:
                x = xs[i]
            runs.append(jax.block_until_ready(fn(x, lo, hi, jnp.asarray(float(lm)), setup.pre, member(i))))
            x = runs[-1].x
    else:
        runs = run_members(lambda i: jax.block_until_ready(fn(xj if xs is None else xs[i], lo, hi,
                                                              jnp.asarray(float(lmbds[i])), setup.pre, member(i))),
                           lmbds.size, threads)
    solve_time = time.perf_counter() - t0
    return [_raw(r, timing, solve_time) for r in runs]


def solve_batch(setup: SolveSetup, lmbds, obs: Observations, *, batch_lmbd: bool, batch_obs: bool,
                mode: str, warm_start: bool = False, starts=None) -> list[RawSolve]:
    """The members of a batch (``lmbds`` (n,), ``obs`` with (n, E, V) flux/err when
    ``batch_obs``): one vmapped compiled call (``mode="vmap"``) or one compiled single solve
    after another (``"sequential"``: :func:`solve_sequential` with projected L-BFGS; with
    ``warm_start`` each member starts from the map of the one before, every member from
    ``setup.x0`` otherwise); ``starts``: (n, n_param) a start per member instead (inside the
    bounds); ``solve_time`` is the whole batch's."""
    if mode == "sequential":
        return solve_sequential(setup, lmbds, obs, batch_obs=batch_obs, warm_start=warm_start, starts=starts)
    xj, lo, hi = jnp.asarray(setup.x0), jnp.asarray(setup.lower), jnp.asarray(setup.upper)
    xs = None if starts is None else jnp.asarray(starts, dtype=xj.dtype)
    kw = dict(regulariser=setup.regulariser, penalty=setup.penalty, maxiter=setup.maxiter, tol=setup.tol,
              maxcor=int(setup.options.get("maxcor", 10)))
    lmbds = np.asarray(lmbds, dtype=float)
    lm = jnp.asarray(lmbds if batch_lmbd else float(lmbds[0]))
    data = setup.data.replace(obs=obs)
    x = xj if xs is None else xs
    fn, timing = _compile_solver(x, lo, hi, lm, setup.pre, data, batch_lmbd=batch_lmbd, batch_obs=batch_obs,
                                 batch_x0=xs is not None, **kw)
    t0 = time.perf_counter()
    r = jax.block_until_ready(fn(x, lo, hi, lm, setup.pre, data))
    solve_time = time.perf_counter() - t0
    return [_raw(jax.tree_util.tree_map(lambda a, i=i: a[i], r), timing, solve_time) for i in range(lmbds.size)]
