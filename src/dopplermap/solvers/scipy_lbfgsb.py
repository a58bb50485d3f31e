"""scipy's L-BFGS-B driven by the compiled float64 value-and-gradient of
:mod:`dopplermap.solvers.program` (compiled once per problem shape; data, model and lambda
are its arguments, so a new data set or lambda of the same shape reuses it).
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

try:  # a declared dependency; the fallback only keeps ad-hoc environments (e.g. a bare GPU box) working
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover
    import contextlib

    def threadpool_limits(**_kwargs):
        return contextlib.nullcontext()

from .. import _device
from ..compiled import program_state
from ..result import Outcome
from ._common import LBFGSOptions, RawSolve, SolveSetup
from .program import compiled_value_and_grad, value_and_grad_body

__all__ = ["lbfgsb", "solve", "LBFGSOptions"]


MAX_RESTARTS = 10
"""Restarts after a premature relative-reduction stop (see :func:`lbfgsb`)."""


def lbfgsb(fn: Callable, x0: np.ndarray, lower: np.ndarray, upper: np.ndarray, *,
           options: LBFGSOptions | None = None, callback: Callable | None = None):
    """Minimise with scipy L-BFGS-B; ``fn(x) -> (value, grad, aux)`` on float64 arrays.

    ``options`` (:class:`~dopplermap.solvers._common.LBFGSOptions`; ``LBFGSOptions.at(tol,
    maxiter)`` sets ``ftol`` and ``gtol`` to one ``tol``, as ``scipy.optimize.minimize(tol=...)``
    and the seed's jaxopt call do): ``maxiter``, ``ftol``, ``gtol``, ``maxcor``,
    ``max_restarts``. L-BFGS-B stops as soon as one step reduces the loss by less than
    ``ftol`` relative; with thousands of bounded variables that happens while the loss is
    still falling fast (seen at the seed's size: a 6e-7 step right after 1e-3 steps, 3 %
    above the optimum). So after such a stop the solve restarts from there with a fresh
    memory, and ends when a restarted run gains less than ``ftol`` in total (at most
    ``max_restarts`` times). Returns ``(scipy_result, history)``; the result's ``nit`` and
    ``nfev`` count all runs and ``restarts`` says how many there were.
    """
    options = LBFGSOptions(max_restarts=MAX_RESTARTS) if options is None else options
    maxiter, tol, maxcor, max_restarts = options.maxiter, options.ftol, options.maxcor, options.max_restarts
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
            res = minimize(fun, x, jac=True, method="L-BFGS-B", bounds=bounds, callback=cb,
                           options={"maxiter": max(maxiter - nit, 1), "maxcor": maxcor, "ftol": options.ftol,
                                    "gtol": options.gtol})
            nit, nfev = nit + int(res.nit), nfev + int(res.nfev)
            gained = np.inf if f_before is None else (f_before - res.fun) / max(abs(f_before), abs(res.fun), 1.0)
            f_before, x = float(res.fun), res.x
            ftol_stop = res.status == 0 and "REDUCTION" in str(res.message).upper()
            if not ftol_stop or gained < tol or nit >= maxiter or restarts >= max_restarts:
                break
            restarts += 1
    res.nit, res.nfev, res.restarts = nit, nfev, restarts
    return res, {k: np.asarray(v) for k, v in history.items()}


def compile_state(setup: SolveSetup) -> str:
    """Where the value-and-gradient program of ``setup`` would come from
    (:func:`dopplermap.compiled.program_state`)."""
    xj = _device.asarray(setup.x0)
    lm = _device.asarray(setup.lmbd, dtype=xj.dtype)
    return program_state("value_and_grad", value_and_grad_body, (xj, lm, setup.pre, setup.data),
                         {"regulariser": setup.regulariser, "penalty": float(setup.penalty)})


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
    try:
        fn, timing = compiled_value_and_grad(xj, lm, setup.pre, setup.data, setup.regulariser, float(setup.penalty))
    finally:
        if loader is not None:
            loader.join()
    import scipy.optimize  # noqa: F401  (here, if the thread's import failed, its error is raised)

    def vg(x):
        return fn(x, lm, setup.pre, setup.data)

    t0 = time.perf_counter()
    res, history = lbfgsb(vg, setup.x0, setup.lower, setup.upper, callback=callback,
                          options=LBFGSOptions.at(setup.tol, setup.maxiter, setup.options.get("maxcor", 10)))
    return RawSolve(x=np.asarray(res.x), iterations=int(res.nit), n_eval=int(res.nfev),
                    outcome=Outcome.from_scipy(res.message, int(res.status)), stop_reason=str(res.message),
                    history=history, compile_time=timing["trace_lower"] + timing["compile"],
                    solve_time=time.perf_counter() - t0, extra={"restarts": int(res.restarts)})
