"""scipy's L-BFGS-B driven by one jitted float64 value-and-gradient.

The objective is compiled once per problem shape (ahead of time, so compile time is
measured apart from the solve); data, precomputed model and lambda are arguments, so a
new data set or lambda of the same shape reuses the compiled function.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Callable

import jax
import numpy as np

try:  # a declared dependency; the fallback only keeps ad-hoc environments (e.g. a bare GPU box) working
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover
    import contextlib

    def threadpool_limits(**_kwargs):
        return contextlib.nullcontext()

from .. import _device
from ..compiled import compile_cached, compiled_program
from ..objective import objective_terms
from ..result import Outcome
from ._common import RawSolve, SolveSetup

__all__ = ["compiled_value_and_grad", "compiled_terms", "trailing_args", "lbfgsb", "solve"]


def value_and_grad_body(x, lmbd, pre, obs, joint=None, offset_sigma=None, *, regulariser, penalty):
    # joint: optional (lightcurve, line_weight, lc_weight) for the joint line + light-curve fit;
    # offset_sigma: optional (n_epoch,) sigma of the offset prior (dopplermap.objective)
    extra = () if joint is None else tuple(joint)
    (val, aux), grad = jax.value_and_grad(
        lambda x: objective_terms(x, lmbd, pre, obs, regulariser, penalty, *extra, with_model=True,
                                  offset_sigma=offset_sigma),
        has_aux=True)(x)
    return val, grad, aux


_vg_jit = jax.jit(value_and_grad_body, static_argnames=("regulariser", "penalty"))


def trailing_args(joint=None, offset_sigma=None) -> tuple:
    """The compiled value-and-gradient's arguments after ``(x, lmbd, pre, obs)``: none, ``(joint,)``
    or ``(joint, offset_sigma)`` (see :func:`compiled_value_and_grad`)."""
    if offset_sigma is None:
        return () if joint is None else (joint,)
    return (joint, offset_sigma)


def compiled_value_and_grad(x, lmbd, pre, obs, regulariser="mem", penalty=1e4, joint=None, offset_sigma=None):
    """AOT-compiled ``(x, lmbd, pre, obs) -> (loss, grad, (chi2, reg, pen, model))``.

    With ``joint = (lightcurve, line_weight, lc_weight)`` (arrays, so new weights reuse the
    compiled code) the function is ``(x, lmbd, pre, obs, joint)`` and aux gains ``chi2_lc`` (before ``model``).
    With ``offset_sigma`` ((n_epoch,) array: the offset prior of :mod:`dopplermap.objective`)
    it is ``(x, lmbd, pre, obs, joint, offset_sigma)`` (``joint`` may be None);
    :func:`trailing_args` gives the arguments after ``obs`` either way.
    Returns ``(fn, timings)`` where ``timings`` holds ``trace_lower`` and ``compile``
    seconds (both 0 when the function came from this process's cache).
    """
    args = (x, lmbd, pre, obs, *trailing_args(joint, offset_sigma))
    return compile_cached("value_and_grad", value_and_grad_body, args, {"regulariser": regulariser, "penalty": penalty})


def terms_body(x, lmbd, pre, obs, joint=None, offset_sigma=None, *, regulariser, penalty):
    extra = () if joint is None else tuple(joint)
    return objective_terms(x, lmbd, pre, obs, regulariser, penalty, *extra, with_model=True, offset_sigma=offset_sigma)


def compiled_terms(x, lmbd, pre, obs, regulariser="mem", penalty=1e4, joint=None, offset_sigma=None):
    """``(x, lmbd, pre, obs, *trailing) -> (loss, (chi2, reg, pen, model))``: the loss and its
    terms without the gradient, for a solve's final evaluation (arguments as
    :func:`compiled_value_and_grad`). It is the value-and-gradient of the same signature
    when this process has compiled one (an L-BFGS-B solve just did), else a value-only
    program: a Newton or device solve needs no gradient program, and the value alone
    compiles in a fraction of the time. Returns ``(fn, timings)`` as
    :func:`compiled_value_and_grad`."""
    args = (x, lmbd, pre, obs, *trailing_args(joint, offset_sigma))
    static = {"regulariser": regulariser, "penalty": penalty}
    vg = compiled_program("value_and_grad", value_and_grad_body, args, static)
    if vg is not None:
        return (lambda *a: _drop_grad(vg(*a))), {"trace_lower": 0.0, "compile": 0.0, "cached": True}
    return compile_cached("objective_terms", terms_body, args, static)


def _drop_grad(out):
    val, _, terms = out
    return val, terms


MAX_RESTARTS = 10
"""Restarts after a premature relative-reduction stop (see :func:`lbfgsb`)."""


def lbfgsb(fn: Callable, x0: np.ndarray, lower: np.ndarray, upper: np.ndarray, *, tol: float = 1e-5,
           maxiter: int = 1000, maxcor: int = 10, callback: Callable | None = None,
           max_restarts: int = MAX_RESTARTS):
    """Minimise with scipy L-BFGS-B; ``fn(x) -> (value, grad, aux)`` on float64 arrays.

    ``tol`` sets both ``ftol`` and ``gtol`` (as ``scipy.optimize.minimize(tol=...)`` and the
    seed's jaxopt call do). L-BFGS-B stops as soon as one step reduces the loss by less than
    ``ftol`` relative; with thousands of bounded variables that happens while the loss is
    still falling fast (seen at the seed's size: a 6e-7 step right after 1e-3 steps, 3 %
    above the optimum). So after such a stop the solve restarts from there with a fresh
    memory, and ends when a restarted run gains less than ``tol`` in total (at most
    ``max_restarts`` times). Returns ``(scipy_result, history)``; the result's ``nit`` and
    ``nfev`` count all runs and ``restarts`` says how many there were.
    """
    last = {}
    history = {"loss": [], "chi2": [], "regulariser": []}

    def fun(x):
        val, grad, aux = fn(x)
        val = float(val)
        last["aux"] = aux
        return val, np.asarray(grad, dtype=np.float64)

    def cb(intermediate_result):
        history["loss"].append(float(intermediate_result.fun))
        aux = last.get("aux")
        history["chi2"].append(float(aux.chi2) if aux is not None else np.nan)
        history["regulariser"].append(float(aux.regulariser) if aux is not None else np.nan)
        if aux is not None and aux.chi2_lc is not None:  # joint fit
            history.setdefault("chi2_lc", []).append(float(aux.chi2_lc))
        if callback is not None:
            callback(len(history["loss"]), history)

    # scipy.optimize here, not at the top: ~0.2 s of start-up that the Newton and device solvers never use
    from scipy.optimize import Bounds, minimize

    bounds = Bounds(np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64))
    x = np.asarray(x0, dtype=np.float64)
    nit = nfev = restarts = 0
    f_before = None  # loss at the start of the current run (None: the first run)
    # One BLAS thread: L-BFGS-B's vectors are small, and OpenBLAS's idle threads spin on the
    # cores XLA needs next.
    with threadpool_limits(limits=1, user_api="blas"):
        while True:
            res = minimize(fun, x, jac=True, method="L-BFGS-B", bounds=bounds, tol=tol, callback=cb,
                           options={"maxiter": max(maxiter - nit, 1), "maxcor": maxcor})
            nit, nfev = nit + int(res.nit), nfev + int(res.nfev)
            gained = np.inf if f_before is None else (f_before - res.fun) / max(abs(f_before), abs(res.fun), 1.0)
            f_before, x = float(res.fun), res.x
            ftol_stop = res.status == 0 and "REDUCTION" in str(res.message).upper()
            if not ftol_stop or gained < tol or nit >= maxiter or restarts >= max_restarts:
                break
            restarts += 1
    res.nit, res.nfev, res.restarts = nit, nfev, restarts
    return res, {k: np.asarray(v) for k, v in history.items()}


def solve(setup: SolveSetup, callback: Callable | None = None) -> RawSolve:
    """The ``"lbfgsb"`` back end: scipy's L-BFGS-B on the compiled value-and-gradient;
    ``callback(iteration, history)`` after every iteration."""
    # scipy.optimize loads in a thread while XLA compiles (which releases the GIL): a cold
    # compile hides its import; the join leaves it out of the solve's clock either way
    loader = None
    if "scipy.optimize" not in sys.modules:
        loader = threading.Thread(target=importlib.import_module, args=("scipy.optimize",),
                                  name="dopplermap-scipy-import", daemon=True)
        loader.start()
    xj = _device.asarray(setup.x0)
    lm = _device.asarray(setup.lmbd, dtype=xj.dtype)
    joint = setup.joint
    try:
        fn, timing = compiled_value_and_grad(xj, lm, setup.pre, setup.obs, setup.regulariser, float(setup.penalty),
                                             joint, setup.offset_sigma)
    finally:
        if loader is not None:
            loader.join()
    extra = trailing_args(joint, setup.offset_sigma)
    import scipy.optimize  # noqa: F401  (here, if the thread's import failed, its error is raised)

    def vg(x):
        return fn(x, lm, setup.pre, setup.obs, *extra)

    t0 = time.perf_counter()
    res, history = lbfgsb(vg, setup.x0, setup.lower, setup.upper, tol=setup.tol, maxiter=setup.maxiter,
                          maxcor=int(setup.options.get("maxcor", 10)), callback=callback)
    return RawSolve(x=np.asarray(res.x), iterations=int(res.nit), n_eval=int(res.nfev),
                    outcome=Outcome.from_scipy(res.message, int(res.status)), stop_reason=str(res.message),
                    history=history, compile_time=timing["trace_lower"] + timing["compile"],
                    solve_time=time.perf_counter() - t0, extra={"restarts": int(res.restarts)})
