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

from .. import plan
from ..constants import FILL_MAX, FILL_MIN
from ..diagnostics import check_observations, check_result
from ..errors import DopplermapInputError
from ..model import Precomputed, setup_of, solve_form, with_exact_numerator
from ..objective import DEFAULT_PENALTY, REGULARISERS, Layout, Observations
from ..problem import Problem, Settings
from .result import InversionResult
from .scipy_lbfgsb import compiled_value_and_grad, lbfgsb

__all__ = ["invert", "bounds", "InversionResult", "project_feasible", "check_solver_args"]

SOLVERS = ("lbfgsb", "projected_lbfgs", "newton")


SPOT_COMPONENTS = ("cool", "hot")


def check_fit_components(fit_components) -> tuple[str, ...]:
    """The spot components to fit, checked: a non-empty subset of ``("cool", "hot")``."""
    comps = tuple(fit_components)
    if not comps or len(set(comps)) != len(comps) or not set(comps) <= set(SPOT_COMPONENTS):
        raise DopplermapInputError(f"fit_components must be 'cool', 'hot' or both (each once), got {list(comps)}")
    return tuple(c for c in SPOT_COMPONENTS if c in comps)


def bounds(layout: Layout, *, fit_rv: bool = True, fit_amp: bool = True, x0=None,
           fit_components=SPOT_COMPONENTS):
    """Lower and upper bounds of the flat vector; fixed nuisances get lower = upper = x0, and
    the filling factors of a component not in ``fit_components`` lower = upper = the floor."""
    lo = np.concatenate([np.full(2 * layout.n_cell, FILL_MIN), np.full(2 * layout.n_epoch, -np.inf)])
    hi = np.concatenate([np.full(2 * layout.n_cell, FILL_MAX), np.full(2 * layout.n_epoch, np.inf)])
    for k, comp in enumerate(SPOT_COMPONENTS):
        if comp not in check_fit_components(fit_components):
            hi[k * layout.n_cell:(k + 1) * layout.n_cell] = FILL_MIN
    x0 = layout.initial() if x0 is None else np.asarray(x0, dtype=float)
    n2 = 2 * layout.n_cell
    if not fit_rv:
        lo[n2:n2 + layout.n_epoch] = hi[n2:n2 + layout.n_epoch] = x0[n2:n2 + layout.n_epoch]
    if not fit_amp:
        lo[n2 + layout.n_epoch:] = hi[n2 + layout.n_epoch:] = x0[n2 + layout.n_epoch:]
    return lo, hi


def start(pre: Precomputed, x0, *, fit_rv: bool, fit_amp: bool, fit_components):
    """``(layout, x0, lower, upper)`` of a solve: the checked start (default the seed's) inside its bounds."""
    layout = Layout(pre.n_cell, pre.n_epoch)
    x0 = layout.initial() if x0 is None else np.asarray(x0, dtype=np.float64)
    if x0.shape != (layout.size,):
        raise DopplermapInputError(f"x0 must have shape ({layout.size},) = 2 n_cell + 2 n_epoch, got {x0.shape}")
    lo, hi = bounds(layout, fit_rv=fit_rv, fit_amp=fit_amp, x0=x0, fit_components=fit_components)
    return layout, np.clip(x0, lo, hi), lo, hi


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
                                   intensities=tuple(float(c.intensity) for c in problem.components))
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
    _check_match(pre, obs)
    check_observations(obs)
    res = _invert(pre, obs, lmbd=lmbd, regulariser=regulariser, x0=x0, tol=tol, maxiter=maxiter, fit_rv=fit_rv,
                  fit_amp=fit_amp, penalty=penalty, solver=solver, callback=callback, lightcurve=lightcurve,
                  line_weight=line_weight, lc_weight=lc_weight, cube_dtype=cube_dtype, fit_components=fit_components)
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
            lightcurve, line_weight, lc_weight, cube_dtype, fit_components) -> InversionResult:
    if solver in ("projected_lbfgs", "newton"):  # one compiled loop on the device: callback once, at the end
        if solver == "newton":  # projected Gauss-Newton-CG (solvers/newton.py)
            from .newton import invert_newton as run
        else:  # projected L-BFGS (solvers/batch.py)
            from .batch import invert_device as run
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
    model = np.asarray(aux[-1])
    return with_setup(InversionResult(
        fssc=fssc, fssh=fssh, rv=rv, amp=amp, loss=float(val), chi2=float(aux[0]),
        regulariser_value=float(aux[1]), lmbd=float(lmbd), regulariser=regulariser,
        iterations=int(res.nit), n_eval=int(res.nfev), success=bool(res.success),
        stop_reason=str(res.message), compile_time=timing["trace_lower"] + timing["compile"],
        solve_time=solve_time, history=history, model=model, max_sum_excess=excess, solver=solver,
        chi2_lc=float(aux[3]) if joint is not None else None, cube_dtype=_cube_dtype(pre),
        fit_components=fit_components), exact_pre, obs)


def with_setup(res: InversionResult, pre: Precomputed, obs: Observations) -> InversionResult:
    """``res`` with ``obs`` and, for a model from :func:`dopplermap.precompute`, its grid, star and
    continuum intensities (what figures and result files need)."""
    changes = {"obs": obs}
    setup = setup_of(pre)
    if setup is not None:
        grid, star, components = setup
        changes.update(grid=grid, star=star, intensities=tuple(float(c.intensity) for c in components))
    return dataclasses.replace(res, **changes)


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


# the "auto" cube dtype of a solve (dopplermap.plan holds every size/back-end choice)
resolve_cube_dtype = plan.cube_dtype


def _cube_dtype(pre: Precomputed) -> str | None:
    """Dtype of the dense/folded cube a solve used (None for the binned model)."""
    line = pre.line
    return None if line.method == "binned" else str(line.local.dtype)
