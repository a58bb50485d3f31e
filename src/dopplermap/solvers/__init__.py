"""Solvers: the :func:`invert` front door and its back ends.

``invert(pre, obs, lmbd=...)`` builds the objective (see :mod:`dopplermap.objective`),
compiles its value-and-gradient once per problem shape and minimises it with box bounds
``[1e-5, 1 - 1e-5]`` on the filling factors (the seed's), free or fixed ``rv``/``amp``.
"""

from __future__ import annotations

import time
from typing import Callable

import jax.numpy as jnp
import numpy as np

from ..constants import FILL_MAX, FILL_MIN
from ..diagnostics import check_observations, check_result
from ..errors import DopplermapInputError
from ..model import Precomputed, solve_form, with_exact_numerator
from ..objective import DEFAULT_PENALTY, REGULARISERS, Layout, Observations
from .result import InversionResult
from .scipy_lbfgsb import compiled_value_and_grad, lbfgsb

__all__ = ["invert", "bounds", "InversionResult", "project_feasible", "check_solver_args"]

SOLVERS = ("lbfgsb", "projected_lbfgs")


def bounds(layout: Layout, *, fit_rv: bool = True, fit_amp: bool = True, x0=None):
    """Lower and upper bounds of the flat vector; fixed nuisances get lower = upper = x0."""
    lo = np.concatenate([np.full(2 * layout.n_cell, FILL_MIN), np.full(2 * layout.n_epoch, -np.inf)])
    hi = np.concatenate([np.full(2 * layout.n_cell, FILL_MAX), np.full(2 * layout.n_epoch, np.inf)])
    x0 = layout.initial() if x0 is None else np.asarray(x0, dtype=float)
    n2 = 2 * layout.n_cell
    if not fit_rv:
        lo[n2:n2 + layout.n_epoch] = hi[n2:n2 + layout.n_epoch] = x0[n2:n2 + layout.n_epoch]
    if not fit_amp:
        lo[n2 + layout.n_epoch:] = hi[n2 + layout.n_epoch:] = x0[n2 + layout.n_epoch:]
    return lo, hi


def project_feasible(fssc, fssh):
    """Scale ``(fssc, fssh)`` down where their sum exceeds 1; returns (fssc, fssh, max excess)."""
    s = fssc + fssh
    excess = float(np.max(s - 1.0, initial=0.0))
    scale = np.where(s > 1.0, 1.0 / s, 1.0)
    return fssc * scale, fssh * scale, max(excess, 0.0)


def _check_match(pre: Precomputed, obs: Observations):
    if obs.n_epoch != pre.n_epoch:
        raise DopplermapInputError(f"observations have {obs.n_epoch} epochs but the precomputed model has {pre.n_epoch}")
    if obs.n_vel != pre.n_vel:
        raise DopplermapInputError(f"observations have {obs.n_vel} velocities but the precomputed model has {pre.n_vel}")
    if not np.allclose(np.asarray(obs.vels), np.asarray(pre.line.vels), rtol=0, atol=1e-9):
        raise DopplermapInputError("observations' velocity grid differs from the precomputed model's vels")


def invert(pre: Precomputed, obs: Observations, *, lmbd: float = 1.0, regulariser: str = "mem",
           x0=None, tol: float = 1e-5, maxiter: int = 1000, fit_rv: bool = True, fit_amp: bool = True,
           penalty: float = DEFAULT_PENALTY, solver: str = "lbfgsb",
           callback: Callable | None = None, lightcurve=None, line_weight: float = 1.0,
           lc_weight: float = 1.0, cube_dtype: str | None = "auto") -> InversionResult:
    """Fit filling-factor maps (and per-epoch rv, amp) to the observations.

    Args:
        pre: :func:`dopplermap.precompute` output. obs: :class:`Observations`.
        lmbd: regularisation weight lambda (an argument: no recompilation per value).
        regulariser: ``"mem"`` (the seed's entropy), ``"tikhonov"`` or ``"none"``.
        x0: starting vector ``[fssc, fssh, rv, amp]``; default the seed's (1e-5, 0).
        tol: L-BFGS-B ftol and gtol (the seed used 1e-5). maxiter: iteration cap.
        fit_rv, fit_amp: whether rv and amp are free.
        penalty: weight of the ``fssc + fssh <= 1`` penalty.
        solver: ``"lbfgsb"`` (scipy's L-BFGS-B on the compiled value-and-gradient; reports
            float64 values, calls ``callback``) or ``"projected_lbfgs"`` (the whole solve in
            one compiled loop, :func:`dopplermap.solvers.batch.invert_device`: the fastest on
            CPU and by far on a GPU; ``callback`` is called once, at the end).
        callback: ``callback(iteration, history)`` after every iteration (progress display).

    Raises :class:`~dopplermap.errors.DopplermapInputError` for ``tol <= 0``, ``maxiter < 1``,
    ``lmbd < 0`` or data with no line, and warns (:class:`~dopplermap.errors.DopplermapWarning`,
    see :mod:`dopplermap.diagnostics`) about suspect data and results: a solve stopped on
    the iteration limit or a line-search failure (a ``ConvergenceWarning``), runaway rv/amp,
    a reduced chi2 far from 1, one or duplicate epochs, profile means far from 1.
        lightcurve: optional :class:`dopplermap.lightcurve.LightCurveFit` for the joint fit
            ``line_weight * chi2 + lc_weight * chi2_lc + lmbd * reg`` (``result.chi2_lc``).
        cube_dtype: dense models only: the solve iterates on the folded cube
            (:func:`dopplermap.model.fold_dense`) stored in this dtype. ``"float32"`` reads a
            third of the dense cube's bytes; its rounding (~1e-8 relative in the loss) only
            affects the iterations (the reported loss, chi2 and model are evaluated in float64)
            but stalls L-BFGS-B below tol ~1e-7. ``"auto"`` (default): float32 when
            ``tol >= 1e-6``, else float64. ``None`` solves on ``pre`` as is.
    """
    if regulariser not in REGULARISERS:
        raise DopplermapInputError(f"regulariser must be one of {REGULARISERS}, got {regulariser!r}")
    if solver not in SOLVERS:
        raise DopplermapInputError(f"solver must be one of {SOLVERS}, got {solver!r}")
    check_solver_args(tol=tol, maxiter=maxiter, lmbd=lmbd)
    _check_match(pre, obs)
    check_observations(obs)
    res = _invert(pre, obs, lmbd=lmbd, regulariser=regulariser, x0=x0, tol=tol, maxiter=maxiter, fit_rv=fit_rv,
                  fit_amp=fit_amp, penalty=penalty, solver=solver, callback=callback, lightcurve=lightcurve,
                  line_weight=line_weight, lc_weight=lc_weight, cube_dtype=cube_dtype)
    check_result(res, obs, tol=tol, maxiter=maxiter)
    return res


def check_solver_args(*, tol=None, maxiter=None, lmbd=None, lmbds=None) -> None:
    """Raise :class:`DopplermapInputError` for a tolerance <= 0, an iteration cap < 1 or a
    negative lambda (each would end in a meaningless "result")."""
    if tol is not None and not (isinstance(tol, (int, float, np.floating, np.integer)) and np.isfinite(tol)
                                and tol > 0):
        raise DopplermapInputError(f"tol must be a finite number > 0, got {tol!r}")
    if maxiter is not None and (isinstance(maxiter, bool) or int(maxiter) != maxiter or maxiter < 1):
        raise DopplermapInputError(f"maxiter must be an integer >= 1, got {maxiter!r}")
    if lmbd is not None and not (np.isfinite(lmbd) and lmbd >= 0):
        raise DopplermapInputError(f"lmbd must be a finite number >= 0, got {lmbd!r}")
    if lmbds is not None:
        lm = np.asarray(lmbds, dtype=float)
        if lm.size == 0 or not np.all(np.isfinite(lm) & (lm >= 0)):
            raise DopplermapInputError(f"lmbds must be finite numbers >= 0, got {lmbds!r}")


def _invert(pre, obs, *, lmbd, regulariser, x0, tol, maxiter, fit_rv, fit_amp, penalty, solver, callback,
            lightcurve, line_weight, lc_weight, cube_dtype) -> InversionResult:
    if solver == "projected_lbfgs":  # device-resident solve (solvers/batch.py); no per-iteration callback
        from .batch import invert_device
        res = invert_device(pre, obs, lmbd=lmbd, regulariser=regulariser, x0=x0, tol=tol, maxiter=maxiter,
                            fit_rv=fit_rv, fit_amp=fit_amp, penalty=penalty, cube_dtype=cube_dtype,
                            lightcurve=lightcurve, line_weight=line_weight, lc_weight=lc_weight)
        if callback is not None:  # once, at the end (the loop runs on the device)
            callback(res.iterations, {"loss": res.history["loss"], "chi2": np.asarray([res.chi2]),
                                      "regulariser": np.asarray([res.regulariser_value])})
        return res
    exact_pre, pre = pre, solve_form(pre, resolve_cube_dtype(cube_dtype, tol))
    layout = Layout(pre.n_cell, pre.n_epoch)
    x0 = layout.initial() if x0 is None else np.asarray(x0, dtype=np.float64)
    if x0.shape != (layout.size,):
        raise DopplermapInputError(f"x0 must have shape ({layout.size},) = 2 n_cell + 2 n_epoch, got {x0.shape}")
    lo, hi = bounds(layout, fit_rv=fit_rv, fit_amp=fit_amp, x0=x0)
    x0 = np.clip(x0, lo, hi)

    xj = jnp.asarray(x0)
    lm = jnp.asarray(lmbd, dtype=xj.dtype)
    joint = joint_arguments(pre, lightcurve, line_weight, lc_weight, xj.dtype)
    fn, timing = compiled_value_and_grad(xj, lm, pre, obs, regulariser, float(penalty), joint)

    def vg(x):
        return fn(x, lm, pre, obs) if joint is None else fn(x, lm, pre, obs, joint)

    t0 = time.perf_counter()
    res, history = lbfgsb(vg, x0, lo, hi, tol=tol, maxiter=maxiter, callback=callback)
    solve_time = time.perf_counter() - t0

    fssc, fssh, rv, amp = layout.split(np.asarray(res.x))
    fssc, fssh, excess = project_feasible(fssc, fssh)
    xf = layout.join(fssc, fssh, rv, amp)
    final_pre = with_exact_numerator(pre, exact_pre, fssc, fssh)  # float64 values from a float32 cube
    val, _, aux = fn(xf, lm, final_pre, obs) if joint is None else fn(xf, lm, final_pre, obs, joint)
    model = np.asarray(aux[-1])
    return InversionResult(
        fssc=fssc, fssh=fssh, rv=rv, amp=amp, loss=float(val), chi2=float(aux[0]),
        regulariser_value=float(aux[1]), lmbd=float(lmbd), regulariser=regulariser,
        iterations=int(res.nit), n_eval=int(res.nfev), success=bool(res.success),
        stop_reason=str(res.message), compile_time=timing["trace_lower"] + timing["compile"],
        solve_time=solve_time, history=history, model=model, max_sum_excess=excess, solver=solver,
        chi2_lc=float(aux[3]) if joint is not None else None, cube_dtype=_cube_dtype(pre))


def joint_arguments(pre: Precomputed, lightcurve, line_weight: float, lc_weight: float, dtype):
    """``None`` without a light curve, else the checked ``(lightcurve, line_weight, lc_weight)``."""
    if lightcurve is None:
        return None
    for name, w in (("line_weight", line_weight), ("lc_weight", lc_weight)):
        if not (np.isfinite(w) and w >= 0):
            raise DopplermapInputError(f"{name} must be a finite number >= 0, got {w!r}")
    if lightcurve.weight.shape[1] != pre.n_cell:
        raise DopplermapInputError(f"light curve was precomputed for {lightcurve.weight.shape[1]} cells, "
                         f"the line model has {pre.n_cell}")
    return (lightcurve, jnp.asarray(line_weight, dtype=dtype), jnp.asarray(lc_weight, dtype=dtype))


FLOAT32_MIN_TOL = 1e-6
"""Smallest tolerance for which ``cube_dtype="auto"`` iterates on a float32 cube."""


def resolve_cube_dtype(cube_dtype, tol: float):
    """``"auto"`` -> float32 if ``tol >= FLOAT32_MIN_TOL`` else float64; others are checked and returned."""
    if cube_dtype == "auto":
        return "float32" if tol >= FLOAT32_MIN_TOL else "float64"
    if cube_dtype not in (None, "float32", "float64"):
        raise DopplermapInputError(f"cube_dtype must be 'auto', 'float32', 'float64' or None, got {cube_dtype!r}")
    return cube_dtype


def _cube_dtype(pre: Precomputed) -> str | None:
    """Dtype of the dense/folded cube a solve used (None for the binned model)."""
    line = pre.line
    return None if line.method == "binned" else str(line.local.dtype)
