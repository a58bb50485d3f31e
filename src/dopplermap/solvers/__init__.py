"""Solvers: the :func:`invert` front door and its back ends.

``invert(pre, obs, lmbd=...)`` builds the objective (see :mod:`dopplermap.objective`),
compiles its value-and-gradient once per problem shape and minimises it with box bounds
``[1e-5, 1 - 1e-5]`` on the filling factors (the seed's), free or fixed ``rv``/``amp``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from ..diagnostics import check_observations, check_result
from ..errors import DopplermapInputError
from ..model import Precomputed, solve_form, with_exact_numerator
from ..objective import DEFAULT_PENALTY, REGULARISERS, Observations
from ..problem import Problem, Settings
from ._common import (
    SPOT_COMPONENTS,
    bounds,
    check_fit_components,
    check_match,
    check_solver_args,
    cube_dtype_of,
    joint_arguments,
    project_feasible,
    resolve_cube_dtype,
    start,
    with_setup,
)
from .batch import invert_device
from .newton import invert_newton
from .result import InversionResult  # the re-export keeps dopplermap.solvers.result bound
from .scipy_lbfgsb import compiled_value_and_grad, lbfgsb

__all__ = ["invert", "bounds", "InversionResult", "project_feasible", "check_solver_args", "check_fit_components",
           "joint_arguments", "resolve_cube_dtype", "start", "with_setup", "SPOT_COMPONENTS"]

SOLVERS = ("lbfgsb", "projected_lbfgs", "newton")


def invert(pre: Precomputed | Problem, obs: Observations | None = None, *, lmbd: float | None = None,
           regulariser: str | None = None, x0=None, tol: float | None = None, maxiter: int | None = None,
           fit_rv: bool | None = None, fit_amp: bool | None = None, penalty: float = DEFAULT_PENALTY,
           solver: str | None = None, callback: Callable | None = None, lightcurve=None,
           line_weight: float | None = None, lc_weight: float | None = None,
           cube_dtype: str | None = "auto", fit_components=None) -> InversionResult:
    """Fit filling-factor maps (and per-epoch rv, amp) to the observations.

    ``invert(problem)`` solves a :class:`dopplermap.problem.Problem` with its settings and
    light curve (keyword arguments override single settings) and returns a result that
    knows the problem's grid, star, observations and intensities (ready for
    :func:`dopplermap.plot.plot_result`). ``invert(pre, obs, ...)`` solves a bare
    precomputed model; settings left at None take :class:`dopplermap.problem.Settings`'
    defaults (shown in brackets below).

    Args:
        pre: a :class:`~dopplermap.problem.Problem`, or :func:`dopplermap.precompute` output
            with ``obs`` its :class:`Observations`.
        lmbd: regularisation weight lambda [1] (an argument: no recompilation per value).
        regulariser: ``"mem"`` (the seed's entropy) [default], ``"tikhonov"`` or ``"none"``.
        x0: starting vector ``[fssc, fssh, rv, amp]``; default the seed's (1e-5, 0).
        tol: L-BFGS-B ftol and gtol [1e-5, the seed's]. maxiter: iteration cap [1000].
        fit_rv, fit_amp: whether rv and amp are free [True].
        penalty: weight of the ``fssc + fssh <= 1`` penalty.
        solver: ``"lbfgsb"`` [default] (scipy's L-BFGS-B on the compiled value-and-gradient;
            reports float64 values, calls ``callback``) or ``"projected_lbfgs"`` (the whole
            solve in one compiled loop, :func:`dopplermap.solvers.batch.invert_device`: the
            fastest on CPU and by far on a GPU; ``callback`` is called once, at the end) or
            ``"newton"`` (projected Gauss-Newton-CG in one compiled loop,
            :mod:`dopplermap.solvers.newton`: far fewer objective passes at tight tolerances;
            ``callback`` once, at the end).
        callback: ``callback(iteration, history)`` after every iteration (progress display).

        lightcurve: optional :class:`dopplermap.lightcurve.LightCurveFit` for the joint fit
            ``line_weight * chi2 + lc_weight * chi2_lc + lmbd * reg`` (``result.chi2_lc``);
            weights [1].
        cube_dtype: dense models only: the solve iterates on the folded cube
            (:func:`dopplermap.model.fold_dense`) stored in this dtype. ``"float32"`` reads a
            third of the dense cube's bytes; its rounding (~1e-8 relative in the loss) only
            affects the iterations (the reported loss, chi2 and model are evaluated in float64)
            but stalls L-BFGS-B below tol ~1e-7. ``"auto"`` (default): float32 when
            ``tol >= 1e-6``, else float64. ``None`` solves on ``pre`` as is.
        fit_components: the spot components fitted [``("cool", "hot")``]; ``("cool",)`` fits a
            two-temperature map (photosphere and cool spots: the hot filling factors are held
            at the floor, so n_cell fewer free parameters).

    Raises :class:`~dopplermap.errors.DopplermapInputError` for ``tol <= 0``, ``maxiter < 1``,
    ``lmbd < 0`` or data with no line, and warns (:class:`~dopplermap.errors.DopplermapWarning`,
    see :mod:`dopplermap.diagnostics`) about suspect data and results: a solve stopped on
    the iteration limit or a line-search failure (a ``ConvergenceWarning``), runaway rv/amp,
    a reduced chi2 far from 1, one or duplicate epochs, profile means far from 1.
    """
    given = dict(lmbd=lmbd, regulariser=regulariser, tol=tol, maxiter=maxiter, fit_rv=fit_rv, fit_amp=fit_amp,
                 line_weight=line_weight, lc_weight=lc_weight, solver=solver, fit_components=fit_components)
    if isinstance(pre, Problem):
        if obs is not None or lightcurve is not None:
            raise DopplermapInputError("invert(problem): the problem brings its observations and light curve; "
                                       "pass neither obs nor lightcurve")
        problem = pre
        res = invert(problem.pre, problem.obs, x0=x0, penalty=penalty, callback=callback,
                     lightcurve=problem.lightcurve, cube_dtype=cube_dtype,
                     **problem.settings.replace(**given).invert_kwargs())
        return dataclasses.replace(res, grid=problem.grid, star=problem.star, obs=problem.obs,
                                   intensities=None if problem.components is None else
                                   tuple(float(c.intensity) for c in problem.components))
    if obs is None:
        raise DopplermapInputError("invert(pre, obs): the observations are missing")
    s = Settings().replace(**given)
    lmbd, regulariser, tol, maxiter, solver = s.lmbd, s.regulariser, s.tol, s.maxiter, s.solver
    fit_rv, fit_amp, line_weight, lc_weight = s.fit_rv, s.fit_amp, s.line_weight, s.lc_weight
    fit_components = check_fit_components(s.fit_components)
    if regulariser not in REGULARISERS:
        raise DopplermapInputError(f"regulariser must be one of {REGULARISERS}, got {regulariser!r}")
    if solver not in SOLVERS:
        raise DopplermapInputError(f"solver must be one of {SOLVERS}, got {solver!r}")
    check_solver_args(tol=tol, maxiter=maxiter, lmbd=lmbd)
    check_match(pre, obs)
    check_observations(obs)
    res = _invert(pre, obs, lmbd=lmbd, regulariser=regulariser, x0=x0, tol=tol, maxiter=maxiter, fit_rv=fit_rv,
                  fit_amp=fit_amp, penalty=penalty, solver=solver, callback=callback, lightcurve=lightcurve,
                  line_weight=line_weight, lc_weight=lc_weight, cube_dtype=cube_dtype, fit_components=fit_components)
    check_result(res, obs, tol=tol, maxiter=maxiter)
    return res


def _invert(pre, obs, *, lmbd, regulariser, x0, tol, maxiter, fit_rv, fit_amp, penalty, solver, callback,
            lightcurve, line_weight, lc_weight, cube_dtype, fit_components) -> InversionResult:
    if solver in ("projected_lbfgs", "newton"):  # one compiled loop on the device: callback once, at the end
        # projected Gauss-Newton-CG (solvers/newton.py) or projected L-BFGS (solvers/batch.py)
        run = invert_newton if solver == "newton" else invert_device
        res = run(pre, obs, lmbd=lmbd, regulariser=regulariser, x0=x0, tol=tol, maxiter=maxiter, fit_rv=fit_rv,
                  fit_amp=fit_amp, penalty=penalty, cube_dtype=cube_dtype, lightcurve=lightcurve,
                  line_weight=line_weight, lc_weight=lc_weight, fit_components=fit_components)
        if callback is not None:
            callback(res.iterations, {"loss": res.history["loss"], "chi2": np.asarray([res.chi2]),
                                      "regulariser": np.asarray([res.regulariser_value])})
        return with_setup(res, pre, obs)
    exact_pre, pre = pre, solve_form(pre, resolve_cube_dtype(cube_dtype, tol))
    layout, x0, lo, hi = start(pre, x0, fit_rv=fit_rv, fit_amp=fit_amp, fit_components=fit_components)

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
    model = np.asarray(aux.model)
    return with_setup(InversionResult(
        fssc=fssc, fssh=fssh, rv=rv, amp=amp, loss=float(val), chi2=float(aux.chi2),
        regulariser_value=float(aux.regulariser), lmbd=float(lmbd), regulariser=regulariser,
        iterations=int(res.nit), n_eval=int(res.nfev), success=bool(res.success),
        stop_reason=str(res.message), compile_time=timing["trace_lower"] + timing["compile"],
        solve_time=solve_time, history=history, model=model, max_sum_excess=excess, solver=solver,
        chi2_lc=float(aux.chi2_lc) if joint is not None else None, cube_dtype=cube_dtype_of(pre),
        fit_components=fit_components), exact_pre, obs)
