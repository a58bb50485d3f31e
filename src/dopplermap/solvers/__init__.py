"""Solvers: the one front door (:func:`invert`) and its back ends.

``invert(problem)`` (or ``invert(pre, obs, ...)``) checks the problem once, builds one
:class:`~dopplermap.solvers._common.SolveSetup` (bounds, start, the model form to iterate
on, the joint light-curve arguments), hands it to a back end and turns the back end's
:class:`~dopplermap.solvers._common.RawSolve` into the
:class:`~dopplermap.result.InversionResult` in one place: the feasibility projection, the
float64 evaluation of the reported loss, chi2 and model, the :class:`~dopplermap.result.Outcome`,
the warnings. Back ends (``solver=``; ``"auto"``, the default, picks one: :func:`choose_solver`):

* ``"lbfgsb"`` (``"auto"`` at ``tol > 1e-6``): scipy's L-BFGS-B on the compiled value-and-gradient
  (:mod:`dopplermap.solvers.scipy_lbfgsb`);
* ``"projected_lbfgs"``: the whole solve in one compiled loop
  (:mod:`dopplermap.solvers.batch`), the fastest on CPU and by far on a GPU;
* ``"newton"`` (``"auto"`` at ``tol <= 1e-6``): projected Gauss-Newton-CG in one compiled
  loop (:mod:`dopplermap.solvers.newton`): far fewer objective passes at tight tolerances.
  On light curves alone (``"auto"`` there at every tolerance) it is Gauss-Newton with each
  step's bounded subproblem solved exactly, on the host (:mod:`dopplermap.solvers.photometry`).

The callback means the same for all three: ``callback(iteration, history)`` after every
iteration (the compiled loops report through ``jax.debug.callback``). :func:`invert_device`
is ``invert(solver="projected_lbfgs")``; :func:`invert_batch` is the same device solve
``vmap``-ed over lambdas and/or observation sets.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .. import _device, plan
from .._options import options_of
from ..choices import BATCH_FORMS, BATCH_MODES, MANY_MODES, MEMBER_SOLVERS, REGULARISERS, SOLVER_CHOICES, check
from ..diagnostics import check_observations, check_result
from ..errors import DopplermapInputError
from ..model import Precomputed
from ..objective import (
    DEFAULT_PENALTY,
    LineSets,
    NoLines,
    ObjectiveData,
    Observations,
    n_windows,
    set_chi2,
    solve_form,
    with_exact_numerator,
)
from ..problem import Problem, Settings
from ..result import InversionResult
from . import photometry
from ._common import (
    Progress,
    RawSolve,
    SolveSetup,
    bounds,
    check_fit_components,
    check_match,
    check_solver_args,
    cube_dtype_of,
    project_feasible,
    start,
)
from .batch import sequential_compile_state, solve_batch, solve_device, solve_sequential
from .newton import compile_state as newton_compile_state
from .newton import solve_newton
from .program import compiled_terms
from .scipy_lbfgsb import compile_state as lbfgsb_compile_state
from .scipy_lbfgsb import solve as solve_scipy

__all__ = ["invert", "invert_device", "invert_batch", "solve_many", "Many", "prepare", "SolveOptions", "BatchOptions",
           "ManyOptions", "finish", "bounds", "InversionResult",
           "project_feasible", "check_solver_args", "check_fit_components",
           "start", "NEWTON_TOL", "choose_solver", "solver_choice", "sequential_solver", "many_mode", "newton_fits"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Backend:
    """A solver back end: ``solve(setup, callback) -> RawSolve``. ``compiled_loop``: the
    iterations run inside one compiled program, which reports progress through the active
    :class:`~dopplermap.solvers._common.Progress` (given as the callback); otherwise the
    loop runs on the host and calls the user's callback itself."""

    solve: Callable[..., RawSolve]
    compiled_loop: bool


# one entry per back end of dopplermap.choices.SOLVERS
_BACKENDS: dict[str, Backend] = {
    "lbfgsb": Backend(solve_scipy, compiled_loop=False),
    "projected_lbfgs": Backend(solve_device, compiled_loop=True),
    "newton": Backend(solve_newton, compiled_loop=True),
}

# solver "newton" on light curves alone: exact bounded Gauss-Newton steps on the host
_PHOTOMETRY = Backend(photometry.solve, compiled_loop=False)

NEWTON_TOL = 1e-6
"""``solver="auto"`` takes Newton at ``tol <= NEWTON_TOL`` (where it needs several times fewer
objective passes than L-BFGS-B and, compiled once, solves faster), else L-BFGS-B."""


def _newton_fits(pre) -> bool:
    """Whether the Newton back end can fit this model: one line data set, the interpolating rv
    shift (its rv search scores moves with it), one time window."""
    return not isinstance(pre, (LineSets, NoLines)) and not pre.line.exact_rv and n_windows(pre) == 1


def newton_fits(problem: Problem) -> bool:
    """:func:`_newton_fits` of ``problem``'s model, read off its configuration while the model is
    not built (a grid's base problem, whose points build their own, need not build it to choose)."""
    if problem.form is not None or "pre" in problem.__dict__:
        return _newton_fits(problem.pre)
    return (not problem.photometry_only and not problem.lines and problem.rv_shift != "exact"
            and problem.windows is None)


def choose_solver(problem: Problem | None = None, *, settings: Settings | None = None, pre=None,
                  setup: SolveSetup | None = None, n_solves: int = 1) -> str:
    """The back end a solve uses: ``settings.solver``, or for ``"auto"``
    :func:`solver_choice`'s. Pass a problem, or its settings and model."""
    lightcurve = None
    if problem is not None:
        settings, pre = problem.settings, problem.pre
        lightcurve = problem.lightcurve if isinstance(pre, NoLines) else None
    if settings.solver != "auto":
        return settings.solver
    return solver_choice(settings=settings, pre=pre, setup=setup, n_solves=n_solves, lightcurve=lightcurve).solver


def solver_choice(*, settings: Settings, pre, setup: SolveSetup | None = None, n_solves: int = 1,
                  progress: bool = False, lmbds=None, lightcurve=None) -> plan.SolverChoice:
    """What ``solver="auto"`` takes, with its estimates (:func:`dopplermap.plan.pick_solver`).

    Newton is a candidate at ``tol <= NEWTON_TOL`` where it can fit the model (one line data
    set, the interpolating rv shift); L-BFGS-B always. Of the candidates the one of the least
    compile plus ``n_solves`` estimated solves is taken; the compile is counted cold, from the
    persistent cache or as already done in this process, as ``setup`` (the solve's
    :class:`SolveSetup`) finds it; without a setup both count as compiled (the solve alone).
    Once a program of the shape is in the persistent cache (a repeated run) a cold compile
    counts ``1 / plan.REPEAT_RUNS``, so the back end that wins compiled gets built.
    ``progress``: the solve reports each iteration (a callback): Newton's loop is then a
    program the persistent cache cannot keep, so its cold compile counts in full.
    ``lmbds``: the regularisation weights of the ``n_solves`` solves (a lambda sweep; default
    ``settings.lmbd``): a weaker weight costs more passes (:func:`dopplermap.plan.solver_passes`).
    ``lightcurve``: a problem of light curves alone without ``setup``: its light-curve model."""
    if isinstance(pre, NoLines):
        # light curves alone: L-BFGS-B stops far above the minimum at any usual tolerance
        # (dopplermap.solvers.photometry), so Gauss-Newton wherever it applies, whatever the time
        lc = lightcurve if setup is None else setup.data.lightcurve
        lams = np.ravel(settings.lmbd if lmbds is None else lmbds)
        ok = lc is not None and all(photometry.fits(pre, lc, settings.regulariser, float(lm)) for lm in lams)
        return plan.SolverChoice("newton" if ok else "lbfgsb", {})
    if not (settings.tol <= NEWTON_TOL and _newton_fits(pre)):
        return plan.SolverChoice("lbfgsb", {})
    if setup is None:
        states = {"newton": "memo", "lbfgsb": "memo"}
    else:
        states = {"newton": newton_compile_state(setup, progress), "lbfgsb": lbfgsb_compile_state(setup)}
    n_data = pre.n_epoch * len(np.asarray(pre.line.vels))
    return plan.pick_solver(states, tol=settings.tol, n_data=n_data, n_cell=pre.n_cell, n_solves=n_solves,
                            unkept=("newton",) if progress else (),
                            lmbd=settings.lmbd if lmbds is None else tuple(np.ravel(lmbds)))


def invert(problem: Problem | Precomputed, obs: Observations | None = None, *, x0=None,
           callback: Callable | None = None, options: dict | None = None, **settings) -> InversionResult:
    """Fit filling-factor maps (and per-epoch rv, amp) to the observations.

    ``invert(problem)`` solves a :class:`dopplermap.problem.Problem` with its settings and
    light curve (keyword arguments override single settings) and returns a result that
    knows the problem's grid, star, observations and intensities (ready for
    :func:`dopplermap.plot.plot_result`). ``invert(pre, obs, ...)``, the adapter for
    scripts that hold a bare precomputed model, solves it; settings left out take
    :class:`dopplermap.problem.Settings`' defaults (shown in brackets below), and its result
    knows the observations only.

    Args:
        problem: a :class:`~dopplermap.problem.Problem`; or :func:`dopplermap.model.precompute` output
            with ``obs`` its :class:`Observations`, or several line data sets
            (:class:`~dopplermap.objective.LineSets`) with ``obs`` a tuple of them (solvers
            ``lbfgsb`` and ``projected_lbfgs``; ``result.chi2_sets`` per set).
        settings: single settings (the fields of :class:`~dopplermap.problem.Settings`), and
            the solve keywords ``penalty``, ``cube_dtype`` and, for a bare model, ``lightcurve``:
        lmbd: regularisation weight lambda [1] (an argument: no recompilation per value).
        regulariser: one of :data:`dopplermap.choices.REGULARISERS` [``"mem"``, the seed's entropy].
        x0: starting vector ``[fssc, fssh, rv, amp]``; default the seed's (1e-5, 0).
        tol: ftol and gtol [1e-5, the seed's]. maxiter: iteration cap [1000].
        fit_rv, fit_amp: whether rv and amp are free [True].
        penalty: weight of the ``fssc + fssh <= 1`` penalty.
        solver: ``"lbfgsb"``, ``"projected_lbfgs"``, ``"newton"`` (see the module)
            or ``"auto"`` [default] (:func:`solver_choice`: on light curves alone Gauss-Newton
            where :mod:`~dopplermap.solvers.photometry` applies; at ``tol <= 1e-6``, where Newton applies, the
            shorter of Newton and L-BFGS-B counting each one's compile, cold, from the
            persistent cache (the CLI keeps compiled programs across runs) or done in this
            process, plus its estimated solve; L-BFGS-B otherwise).
        callback: ``callback(iteration, history)`` after every iteration (progress display),
            for every solver; ``history`` holds the ``loss``, ``chi2`` and ``regulariser``
            lists so far (``chi2``/``regulariser`` NaN where the back end does not form them).
            The compiled loops then call back to the host each iteration, and JAX keeps no
            such program in its persistent compilation cache: a callback costs them the
            cache (compiled once per process instead of once per machine).
        lightcurve: optional :class:`dopplermap.lightcurve.LightCurveFit` (or a
            :class:`~dopplermap.lightcurve.LightCurveSet` of bands, ``result.chi2_lc_sets``) for the joint fit
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
        offset_sigma: a Gaussian prior ``amp_e ~ N(0, offset_sigma^2)`` on the per-epoch
            continuum offsets [None: no prior], added to the un-normalised chi-square (see
            :mod:`dopplermap.objective`; ``result.offset_prior`` reports its term): a number, or
            with several line data sets one value (or None) per set. Every solver.
        options: back-end options: ``maxcor`` (L-BFGS memory, 10), ``max_cg``, ``n_probe``
            and ``products`` (Newton: ``"float32"``, the default, forms the Gauss-Newton
            products of a solve on a float64 cube from the float32 fold of the same model;
            ``"float64"`` from the solve's own cube).

    Raises :class:`~dopplermap.errors.DopplermapInputError` for ``tol <= 0``, ``maxiter < 1``,
    ``lmbd < 0`` or data with no line, and warns (:class:`~dopplermap.errors.DopplermapWarning`,
    see :mod:`dopplermap.diagnostics`) about suspect data and results: a solve stopped on
    the iteration limit or a line-search failure (a ``ConvergenceWarning``), runaway rv/amp,
    a reduced chi2 far from 1, one or duplicate epochs, profile means far from 1.
    """
    solve = _solve_arguments("invert", problem, obs, settings)
    pre, obs, settings = solve.pre, solve.obs, solve.settings
    check(settings.solver, SOLVER_CHOICES, "solver")
    setup = prepare(pre, obs, settings, x0=x0, lightcurve=solve.lightcurve, problem=solve.problem,
                    solve=SolveOptions(penalty=solve.penalty, cube_dtype=solve.cube_dtype, backend=options))
    if settings.solver == "auto":
        choice = solver_choice(settings=settings, pre=pre, setup=setup, progress=callback is not None)
        if choice.estimates:
            log.info("%s", choice.describe())
        settings = settings.replace(solver=choice.solver)
    photometric = settings.solver == "newton" and isinstance(pre, NoLines)
    if photometric:
        why = photometry.why_not(pre, setup.data.lightcurve, settings.regulariser, settings.lmbd)
        if why is not None:
            raise DopplermapInputError(f"solver 'newton' on light curves alone: {why}")
    if settings.solver == "newton" and n_windows(pre) > 1:
        raise DopplermapInputError("solver 'newton' fits one static map; with time windows use 'lbfgsb' or "
                                   "'projected_lbfgs'")
    if isinstance(pre, LineSets):
        if settings.solver == "newton":
            raise DopplermapInputError("solver 'newton' fits one line data set; with several use 'lbfgsb' or "
                                       "'projected_lbfgs'")
        for name, o in zip(pre.names, obs, strict=True):
            check_observations(o, source=f"line data set {name!r}")
    elif not isinstance(pre, NoLines):
        check_observations(obs)
    backend = _PHOTOMETRY if photometric else _BACKENDS[settings.solver]
    with Progress(callback if backend.compiled_loop else None) as progress:
        raw = backend.solve(setup, (progress if progress.on else None) if backend.compiled_loop else callback)
    if callback is not None and backend.compiled_loop and not progress.on:
        # another compiled solve held the progress reports: one report, at the end
        callback(raw.iterations, {"loss": list(np.asarray(raw.history["loss"])), "chi2": [], "regulariser": []})
    res = finish(setup, raw, settings.solver)
    check_result(res, obs, tol=setup.tol, maxiter=setup.maxiter)
    return _in_context(res, solve.problem)


@dataclasses.dataclass(frozen=True)
class _Solve:
    """What a front door solves: the problem (None for a bare model) and the loose arguments."""

    problem: Problem | None
    pre: Precomputed
    obs: Observations | tuple
    lightcurve: object
    settings: Settings
    penalty: float
    cube_dtype: str | None


_SOLVE_KEYWORDS = ("penalty", "cube_dtype", "lightcurve")
_SETTINGS = tuple(f.name for f in dataclasses.fields(Settings))


def _solve_arguments(door: str, problem, obs, given: dict) -> _Solve:
    """The checked arguments of ``door(problem, **given)`` or of the adapter ``door(pre, obs, **given)``."""
    unknown = sorted(set(given) - set(_SETTINGS) - set(_SOLVE_KEYWORDS))
    if unknown:
        raise DopplermapInputError(f"{door}: unknown keyword(s) {', '.join(unknown)}; a setting is one of "
                                   f"{', '.join(_SETTINGS)}, or {', '.join(_SOLVE_KEYWORDS)}")
    given = dict(given)
    penalty = given.pop("penalty", DEFAULT_PENALTY)
    cube_dtype = given.pop("cube_dtype", problem.cube_dtype if isinstance(problem, Problem) else "auto")
    lightcurve = given.pop("lightcurve", None)
    if isinstance(problem, Problem):
        if obs is not None or lightcurve is not None:
            raise DopplermapInputError(f"{door}(problem): the problem brings its observations and light curve; "
                                       "pass neither obs nor lightcurve")
        return _Solve(problem, problem.pre, problem.observations, problem.lightcurve,
                      problem.settings.replace(**given), penalty, cube_dtype)
    if not isinstance(problem, (Precomputed, LineSets, NoLines)):
        raise DopplermapInputError(f"{door}: give a dopplermap.Problem (or a precomputed model and its "
                                   f"observations), got {type(problem).__name__}")
    if obs is None and not isinstance(problem, NoLines):
        raise DopplermapInputError(f"{door}(pre, obs): the observations are missing")
    return _Solve(None, problem, obs, lightcurve, Settings().replace(**given), penalty, cube_dtype)


def _in_context(res: InversionResult, problem: Problem | None) -> InversionResult:
    """A result that knows its problem's grid, star and intensities besides its observations
    (figures and result files need them); a bare model's result knows its observations only."""
    if problem is None:
        return res
    windows = {} if problem.windows is None else {"window_edges": np.asarray(problem.windows.edges)}
    return dataclasses.replace(res, grid=problem.grid, star=problem.star, intensities=problem.intensities, **windows)


def _planned(problem: Problem | None, cube_dtype, tol: float) -> bool:
    """Whether a solve at ``tol`` with ``cube_dtype`` is the one the problem's plan decided."""
    return (problem is not None and cube_dtype == problem.cube_dtype and tol == problem.settings.tol
            and problem.plan.cube_dtype is not None)


def _cube_dtype(problem: Problem | None, cube_dtype, tol: float):
    """The cube dtype a solve iterates in: the problem's plan's, where the solve is the planned
    one (:attr:`dopplermap.problem.Problem.plan`, decided once), else decided here."""
    return problem.plan.cube_dtype if _planned(problem, cube_dtype, tol) else plan.cube_dtype(cube_dtype, tol)


@dataclasses.dataclass(frozen=True, eq=False)
class SolveOptions:
    """How :func:`prepare` sets a solve up, beyond the :class:`~dopplermap.problem.Settings`.

    Attributes:
        penalty: weight of the ``fssc + fssh <= 1`` penalty. cube_dtype: the dtype of the
            dense cube the solve iterates on (as :func:`invert`'s). blocked: iterate on the
            blocked form (:func:`invert_batch`'s ``form="blocked"``). backend: the back end's
            options (``maxcor``, ``max_cg``, ``n_probe``).
    """

    penalty: float = DEFAULT_PENALTY
    cube_dtype: str | None = "auto"
    blocked: bool = False
    backend: dict | None = None


def prepare(pre: Precomputed, obs: Observations, settings: Settings, *, x0=None, lightcurve=None,
            problem: Problem | None = None, solve: SolveOptions | None = None, **loose) -> SolveSetup:
    """Check a solve's arguments and build its :class:`SolveSetup` (every back end's input).

    With ``problem`` (whose ``pre`` this is) the form the solve iterates on is the problem's,
    built once for all its solves (:meth:`dopplermap.problem.Problem.solve_form`). ``solve``:
    a :class:`SolveOptions`, or its fields as keywords (``penalty=1e4``)."""
    o = options_of("prepare", SolveOptions, solve, loose, "solve")
    penalty, cube_dtype, blocked, options = o.penalty, o.cube_dtype, o.blocked, o.backend
    check(settings.regulariser, REGULARISERS, "regulariser")
    check_solver_args(tol=settings.tol, maxiter=settings.maxiter, lmbd=settings.lmbd)
    fit_components = check_fit_components(settings.fit_components)
    check_match(pre, obs)
    dtype = _cube_dtype(problem, cube_dtype, settings.tol)
    forms = (functools.partial(problem.solve_form, blocked=blocked) if problem is not None
             else functools.partial(solve_form, pre, blocked=blocked))
    form = forms(dtype)
    layout, x0, lo, hi = start(form, x0, fit_rv=settings.fit_rv, fit_amp=settings.fit_amp,
                               fit_components=fit_components, layout=None if problem is None else problem.layout)
    data = ObjectiveData.create(pre, obs, lightcurve=lightcurve, line_weight=settings.line_weight,
                                lc_weight=settings.lc_weight, offset_sigma=settings.offset_sigma,
                                lmbd_time=settings.lmbd_time, time_coupling=settings.time_coupling)
    return SolveSetup(layout=layout, x0=x0, lower=lo, upper=hi, lmbd=float(settings.lmbd),
                      regulariser=settings.regulariser, penalty=float(penalty), tol=float(settings.tol),
                      maxiter=int(settings.maxiter), pre=form, exact_pre=pre, data=data,
                      fit_components=fit_components, options=dict(options or {}), forms=forms)


def finish(setup: SolveSetup, raw: RawSolve, solver: str, obs: Observations | None = None,
           lmbd: float | None = None) -> InversionResult:
    """The :class:`InversionResult` of a back end's solve: the maps projected onto
    ``fssc + fssh <= 1`` and the loss, terms and model evaluated there in float64 (from the
    dense model when the solve iterated on a float32 cube). ``obs``/``lmbd``: a batch member's."""
    data = setup.data if obs is None else setup.data.replace(obs=obs)
    obs = data.obs
    lmbd = setup.lmbd if lmbd is None else float(lmbd)
    lay = setup.layout
    fssc, fssh, rv, amp = lay.split(np.asarray(raw.x))
    fssc, fssh, excess = project_feasible(fssc, fssh)
    xf = _device.asarray(lay.join(fssc, fssh, rv, amp))
    lm = _device.asarray(lmbd, dtype=xf.dtype)
    evaluate, timing = compiled_terms(xf, lm, setup.pre, data, setup.regulariser, setup.penalty)
    final_pre = with_exact_numerator(setup.pre, setup.exact_pre, fssc, fssh)
    val, terms = evaluate(xf, lm, final_pre, data)
    res = InversionResult(
        fssc=fssc, fssh=fssh, rv=rv, amp=amp, loss=float(val), chi2=float(terms.chi2),
        regulariser_value=float(terms.regulariser), lmbd=lmbd, regulariser=setup.regulariser,
        iterations=raw.iterations, n_eval=raw.n_eval, success=raw.outcome.converged, outcome=raw.outcome,
        stop_reason=raw.stop_reason, compile_time=raw.compile_time + timing["trace_lower"] + timing["compile"],
        solve_time=raw.solve_time, history=raw.history, model=jax.tree_util.tree_map(np.asarray, terms.model),
        max_sum_excess=excess,
        solver=solver, chi2_lc=None if terms.chi2_lc is None else float(terms.chi2_lc),
        offset_prior=None if terms.offset_prior is None else float(terms.offset_prior),
        temporal=None if terms.temporal is None else float(terms.temporal),
        lmbd_time=None if data.lmbd_time is None else float(data.lmbd_time),
        cube_dtype=cube_dtype_of(setup.pre), fit_components=setup.fit_components, extra=dict(raw.extra),
        **set_chi2(setup.pre, data.lightcurve, terms))
    return dataclasses.replace(res, obs=obs)


def invert_device(problem: Problem | Precomputed, obs: Observations | None = None, *, maxcor: int = 10,
                  **kwargs) -> InversionResult:
    """:func:`invert` with ``solver="projected_lbfgs"`` (the whole solve in one compiled loop);
    ``maxcor``: the L-BFGS memory."""
    return invert(problem, obs, solver="projected_lbfgs", options={"maxcor": int(maxcor)}, **kwargs)


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """How :func:`invert_batch` runs its members: ``mode``, ``form``, ``warm_start`` and ``solver``
    (described there). Its fields may also be given as keywords (``mode="sequential"``)."""

    mode: str = "auto"
    form: str = "auto"
    warm_start: bool = False
    solver: str = "auto"


@dataclasses.dataclass(frozen=True)
class ManyOptions:
    """How :func:`solve_many` runs its members: ``mode``, ``warm_start``, ``budget`` and
    ``solver`` (described there). Its fields may also be given as keywords (``mode="vmap"``)."""

    mode: str = "auto"
    warm_start: bool = False
    budget: int | None = None
    solver: str = "auto"


def _options_in(where: str, cls, given, settings: dict):
    """The ``cls`` options of a door called with ``given`` or with its fields among ``settings``
    (taken out of it)."""
    names = [f.name for f in dataclasses.fields(cls)]
    return options_of(where, cls, given, {k: settings.pop(k) for k in names if k in settings},
                      "batch" if cls is BatchOptions else "many")


def invert_batch(problem: Problem | Precomputed, obs: Observations | None = None, *, lmbds=None, flux=None,
                 err=None, batch: BatchOptions | None = None, **settings) -> list[InversionResult]:
    """Several device solves (:func:`invert_device`) in one compiled, ``vmap``-ed call (or one after another).

    Args:
        problem, obs: a :class:`~dopplermap.problem.Problem` (one line data set), or a bare
            precomputed model and its observations (as :func:`invert`).
        lmbds: (n_batch,) lambdas (else the setting ``lmbd`` for every member).
        flux, err: (n_batch, n_epoch, n_vel) observation sets sharing ``obs``'s epochs and
            velocities (bootstrap resamples, other stars with the same precomputed model);
            default ``obs`` itself for every member. An infinite error drops its point
            (e.g. an epoch a bootstrap resample did not draw).
        cube_dtype: as in :func:`invert` (dense models only).
        batch: a :class:`BatchOptions`, or its fields as keywords:
        mode: ``"vmap"`` - one compiled call for the whole batch; ``"sequential"`` - the
            members one after another through one compiled single solve; ``"auto"``
            (default) - vmap, except on CPU when the blocked form (below) does not apply
            or fit.
        form: the model form a vmapped batch iterates on. ``"blocked"``
            (:func:`dopplermap.model.block_dense`): epoch blocks as plain matrices, so each
            block is one matrix-matrix product for all members - on CPU the only form
            where batching pays (see benchmarks/RESULTS.md); ``"folded"``
            (:func:`dopplermap.model.fold_dense`); ``"auto"`` (default) - blocked on CPU for
            dense models while both its copies fit ``dopplermap.plan.BLOCKED_MAX_BYTES``,
            folded otherwise (binned models are used as they are).
        warm_start: ``mode="sequential"`` only: each member starts from the map of the one
            before it (neighbouring lambdas), the first from ``x0``.
        solver: the compiled solve of ``mode="sequential"``: ``"projected_lbfgs"``,
            ``"newton"`` (the members of one shape through one compiled Newton program), or
            ``"auto"`` (default): the one of the least estimated compile plus solves
            (:func:`dopplermap.plan.pick_member_solver`; Newton where it fits the model, as
            :func:`solver_choice` says). A vmapped batch is always projected L-BFGS.
        settings: as in :func:`invert` (shared by every member), and ``x0`` (the start of
            every member, or (n_batch, n_param) a start per member: e.g. each member's
            solution at a neighbouring stellar parameter; not with ``warm_start``) and
            ``maxcor`` (the L-BFGS memory, 10).
    Returns:
        one :class:`InversionResult` per member (each evaluated as :func:`invert` reports
        it); ``solve_time`` is the whole batch's.
    """
    b = _options_in("invert_batch", BatchOptions, batch, settings)
    mode, form, warm_start, member_solver = b.mode, b.form, b.warm_start, b.solver
    check(member_solver, MEMBER_SOLVERS, "solver")
    x0, maxcor = settings.pop("x0", None), settings.pop("maxcor", 10)
    solve = _solve_arguments("invert_batch", problem, obs, settings)
    pre, obs, settings = solve.pre, solve.obs, solve.settings.replace(solver="projected_lbfgs")
    cube_dtype, tol = solve.cube_dtype, settings.tol
    check_solver_args(tol=tol, maxiter=settings.maxiter, lmbd=settings.lmbd, lmbds=lmbds)
    if isinstance(pre, (LineSets, NoLines)):
        raise DopplermapInputError("invert_batch solves one line data set; several sets, or light curves alone, "
                                   "go through invert()")
    check(mode, BATCH_MODES, "mode")
    check(form, BATCH_FORMS, "form")
    dtype = _cube_dtype(solve.problem, cube_dtype, tol)
    if form == "blocked" and (not pre.line.foldable or dtype is None):
        raise DopplermapInputError(f"form='blocked' needs a dense model and a cube_dtype, got a {pre.line.kind} model "
                                   f"and cube_dtype={cube_dtype!r}")
    if form == mode == "auto" and _planned(solve.problem, cube_dtype, tol):  # the problem's plan decided both
        form, mode = solve.problem.plan.batch_form, solve.problem.plan.batch_mode
    form = plan.batch_form(form, mode=mode, blocked_fits=plan.blocked_fits(pre, dtype))
    mode = plan.batch_mode(mode, form=form)
    if warm_start and mode != "sequential":
        raise DopplermapInputError("invert_batch: warm_start chains the members one after another; it needs "
                                   "mode='sequential'")
    batch_lmbd, batch_obs = lmbds is not None, flux is not None
    if not (batch_lmbd or batch_obs):
        raise DopplermapInputError("invert_batch needs lmbds and/or flux (with err) to batch over")
    starts = None if x0 is None or np.ndim(x0) == 1 else np.asarray(x0, dtype=np.float64)
    if starts is not None:
        if starts.ndim != 2:
            raise DopplermapInputError(f"x0 must be one start (n_param,) or one per member (n_batch, n_param), got "
                                       f"shape {starts.shape}")
        if warm_start:
            raise DopplermapInputError("invert_batch: warm_start chains the members from one start; with a start "
                                       "per member (2-D x0) leave it off")
        x0 = starts[0]  # the bounds' fixed nuisances (fit_rv/fit_amp off) are taken from it
    setup = prepare(pre, obs, settings, x0=x0, lightcurve=solve.lightcurve, problem=solve.problem,
                    solve=SolveOptions(penalty=solve.penalty, cube_dtype=cube_dtype, blocked=form == "blocked",
                                       backend={"maxcor": int(maxcor)}))
    lm = np.asarray(lmbds, dtype=float) if batch_lmbd else None
    if batch_lmbd and lm.ndim != 1:
        raise DopplermapInputError(f"lmbds must be a 1-D array of finite values >= 0, got {np.asarray(lmbds)!r}")
    n = lm.shape[0] if batch_lmbd else None
    ob = obs
    if batch_obs:
        flux = np.asarray(flux, dtype=float)
        want = (obs.n_epoch, obs.n_vel)
        if flux.ndim != 3 or flux.shape[1:] != want:
            raise DopplermapInputError(f"flux must have shape (n_batch, n_epoch, n_vel) = (n, {want[0]}, {want[1]}), "
                                       f"got {flux.shape}")
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
    lm_all = np.broadcast_to(lm if batch_lmbd else float(settings.lmbd), (n,))
    if starts is not None:
        if starts.shape != (n, setup.x0.size):
            raise DopplermapInputError(f"x0 with a start per member must have shape (n_batch, n_param) = ({n}, "
                                       f"{setup.x0.size}), got {starts.shape}")
        fixed = np.nonzero(setup.lower == setup.upper)[0]
        fixed = fixed[fixed >= 2 * setup.layout.n_cell]  # rv / amp held: the same for every member
        if np.any(starts[:, fixed] != starts[0, fixed]):
            raise DopplermapInputError("x0: the held rv / continuum offsets (fit_rv / fit_amp off) differ between "
                                       "the members' starts; a batch holds them at one value")
        starts = np.clip(starts, setup.lower, setup.upper)
    if mode == "vmap":
        if member_solver == "newton":
            raise DopplermapInputError("invert_batch: solver 'newton' solves the members one after another; it "
                                       "needs mode='sequential'")
        member_solver = "projected_lbfgs"
    else:
        member_solver = _member_solver(member_solver, setup, pre, ob, batch_obs, n)
    if mode == "sequential":
        raws = solve_sequential(setup, lm_all, ob, batch_obs=batch_obs, warm_start=bool(warm_start), starts=starts,
                                solver=member_solver, threads=_threads(n, bool(warm_start)))
    else:
        raws = solve_batch(setup, lm_all, ob, batch_lmbd=batch_lmbd, batch_obs=batch_obs, mode=mode,
                           warm_start=bool(warm_start), starts=starts)

    def member(i):
        if not batch_obs:
            return obs
        return Observations(times=obs.times, vels=obs.vels, flux=ob.flux[i], err=ob.err[i])

    return [_in_context(finish(setup, raw, member_solver, obs=member(i), lmbd=lm_all[i]), solve.problem)
            for i, raw in enumerate(raws)]


def _threads(n_members: int, warm_start: bool) -> int:
    """Threads of a sequential batch: members that chain run one after another, the others on
    :func:`dopplermap.plan.member_threads` threads."""
    return 1 if warm_start else plan.member_threads(n_members)


def _member_solver(choice: str, setup: SolveSetup, pre, ob: Observations, batch_obs: bool, n: int) -> str:
    """The compiled loop that solves a sequential batch's members (``choice`` itself unless ``"auto"``)."""
    newton_fits = _newton_fits(pre)
    if choice == "newton" and not newton_fits:
        raise DopplermapInputError("solver 'newton' needs the interpolating rv shift and one time window; use "
                                   "'projected_lbfgs'")
    if choice != "auto":
        return choice
    if not newton_fits:
        return "projected_lbfgs"
    first = ob if not batch_obs else Observations(times=ob.times, vels=ob.vels, flux=ob.flux[0], err=ob.err[0])
    states = {"projected_lbfgs": sequential_compile_state(setup, setup.data.replace(obs=first)),
              "newton": newton_compile_state(setup)}
    pick = plan.pick_member_solver(states, n_members=int(n), n_data=ob.flux.shape[-2] * ob.flux.shape[-1],
                                   n_cell=pre.n_cell)
    log.info("%s", pick.describe().replace("solver auto", "members' solver"))
    return pick.solver


def many_mode(pre, obs: Observations, mode: str = "auto", *, tol: float, cube_dtype="auto") -> str:
    """The mode :func:`solve_many` runs members of this model and data shape in (``mode``
    itself unless ``"auto"``: :func:`dopplermap.plan.many_mode` for the model's size)."""
    if mode != "auto":
        return mode
    dtype = plan.cube_dtype(cube_dtype, tol)
    return plan.many_mode("auto", n_data=obs.n_epoch * obs.n_vel, n_cell=pre.n_cell,
                          blocked_fits=plan.blocked_fits(pre, dtype))


def sequential_solver(problem: Problem | Precomputed, obs: Observations | None = None, *, n_members: int,
                      **settings) -> str:
    """The compiled solve ``solve_many(..., mode="sequential", solver="auto")`` would take for
    ``n_members`` members of this problem in this process now (``settings`` as
    :func:`invert_batch`'s). A search that spreads its members over Dask workers decides here,
    once, and passes the choice on: a worker's own choice would follow what that worker happens
    to have compiled, and its members would then differ from this process's."""
    settings = dict(settings)
    x0, maxcor = settings.pop("x0", None), settings.pop("maxcor", 10)
    if x0 is not None and np.ndim(x0) == 2:
        x0 = np.asarray(x0)[0]
    solve = _solve_arguments("sequential_solver", problem, obs, settings)
    pre, obs = solve.pre, solve.obs
    if isinstance(pre, (LineSets, NoLines)):
        return "projected_lbfgs"
    setup = prepare(pre, obs, solve.settings.replace(solver="projected_lbfgs"), x0=x0, lightcurve=solve.lightcurve,
                    problem=solve.problem, solve=SolveOptions(penalty=solve.penalty, cube_dtype=solve.cube_dtype,
                                                              backend={"maxcor": int(maxcor)}))
    return _member_solver("auto", setup, pre, obs, False, int(n_members))


@dataclasses.dataclass
class Many:
    """What :func:`solve_many` solved and how.

    Attributes:
        results: one :class:`InversionResult` per member, in the members' order.
        mode: ``"vmap"`` (members together), ``"sequential"`` (one compiled device solve per
            member) or ``"invert"`` (:func:`invert` each, the problem's own solver).
        chunk: members per vmapped call (``mode="vmap"``; the last call is padded to it).
        n_calls: compiled calls made.
        threads: threads the sequential members ran on (1: one after another).
    """

    results: list
    mode: str
    chunk: int
    n_calls: int
    threads: int = 1

    def describe(self) -> str:
        """One line for a log or a summary."""
        n = len(self.results)
        if self.mode == "vmap":
            return f"{n} solves together (vmap), {self.n_calls} call(s) of {self.chunk}"
        if self.mode == "sequential":
            how = f" ({self.results[0].solver})" if self.results else ""
            if self.threads > 1:
                return f"{n} solves through one compiled device solve{how}, {self.threads} at a time (threads)"
            return f"{n} solves one after another through one compiled device solve{how}"
        return f"{n} solves one after another (invert)"


def solve_many(problem: Problem | Precomputed, obs: Observations | None = None, *, lmbds=None, flux=None, err=None,
               x0=None, many: ManyOptions | None = None, **settings) -> Many:
    """Many solves of one problem's shape: lambdas and/or observation sets (as :func:`invert_batch`;
    a :class:`~dopplermap.problem.Problem`, or a bare model and its observations).

    ``many``: a :class:`ManyOptions`, or its fields as keywords. ``mode``: ``"vmap"`` - the members together, in calls of as many members as fit ``budget``
    bytes (:func:`dopplermap.plan.batch_chunk`; the last call padded to the same shape, so one
    compile serves all); ``"sequential"`` - one compiled device solve after another (with
    ``warm_start`` each from the map of the one before; ``solver`` as :func:`invert_batch`'s); ``x0``: one start for every member or
    (n_members, n_param) one each (``"vmap"`` and ``"sequential"``); ``"invert"`` - :func:`invert` each
    member with the problem's own solver (lambdas only); ``"auto"`` (default) -
    :func:`dopplermap.plan.many_mode`. Returns a :class:`Many` (results and the mode used).
    """
    m = _options_in("solve_many", ManyOptions, many, settings)
    mode, warm_start, budget = m.mode, m.warm_start, m.budget
    check(mode, MANY_MODES, "mode")
    check(m.solver, MEMBER_SOLVERS, "solver")
    if isinstance(problem, Problem):
        pre, obs = problem.pre, (problem.obs if not problem.lines else None)
        base = problem.settings
    else:
        pre, base = problem, Settings()
    if isinstance(pre, LineSets) and mode not in ("auto", "invert"):
        raise DopplermapInputError(f"solve_many: mode {mode!r} solves one line data set; several sets need "
                                   "mode 'invert'")
    n_members = (np.size(lmbds) if lmbds is not None else np.shape(flux)[0]) if (lmbds is not None or
                                                                                 flux is not None) else 0
    if n_members < 1:
        raise DopplermapInputError("solve_many needs lmbds and/or flux (with err), at least one member")
    if isinstance(pre, LineSets):
        mode = "invert"
    mode = many_mode(pre, obs, mode, tol=float(settings.get("tol", base.tol)),
                     cube_dtype=settings.get("cube_dtype", "auto"))
    if mode == "invert":
        if flux is not None:
            raise DopplermapInputError("solve_many: mode 'invert' solves lambdas only; observation sets need "
                                       "'vmap' or 'sequential'")
        results, start = [], x0
        for i, lm in enumerate(np.asarray(lmbds, dtype=float).ravel()):
            if x0 is not None and np.ndim(x0) == 2:
                start = np.asarray(x0)[i]
            results.append(invert(problem, obs if not isinstance(problem, Problem) else None, x0=start,
                                  **dict(settings, lmbd=float(lm))))
            if warm_start:
                start = results[-1].x
        return Many(results=results, mode="invert", chunk=1, n_calls=len(results))
    if mode == "sequential":
        rs = invert_batch(problem, None if isinstance(problem, Problem) else obs, lmbds=lmbds, flux=flux, err=err,
                          x0=x0, mode="sequential", form="folded",
                          warm_start=warm_start, solver=m.solver, **settings)
        return Many(results=rs, mode="sequential", chunk=1, n_calls=len(rs),
                    threads=_threads(n_members, bool(warm_start)))
    n_param = 2 * pre.n_cell + 2 * obs.n_epoch
    chunk = plan.batch_chunk(n_members, plan.member_bytes(obs.n_epoch * obs.n_vel, n_param,
                                                          int(settings.get("maxcor", 10))), budget)
    lm = None if lmbds is None else np.asarray(lmbds, dtype=float).ravel()
    fl = None if flux is None else np.asarray(flux, dtype=float)
    er = None if err is None else np.asarray(err, dtype=float)
    if er is not None and fl is not None and er.ndim == 3:
        er = np.broadcast_to(er, fl.shape)
    results = []
    for s in range(0, n_members, chunk):
        take = np.arange(s, min(s + chunk, n_members))
        idx = np.concatenate([take, np.full(chunk - take.size, take[-1])])  # one shape for every call
        part = dict(lmbds=None if lm is None else lm[idx], flux=None if fl is None else fl[idx],
                    err=er if (er is None or er.ndim == 2) else er[idx])
        start = x0 if x0 is None or np.ndim(x0) == 1 else np.asarray(x0)[idx]
        rs = invert_batch(problem, None if isinstance(problem, Problem) else obs, x0=start, mode="vmap", **part,
                          **settings)
        results.extend(rs[:take.size])
    return Many(results=results, mode="vmap", chunk=chunk, n_calls=-(-n_members // chunk))
