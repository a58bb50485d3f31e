"""Choosing lambda and the stellar parameters.

* :func:`sweep_lambda` solves one problem over a list of regularisation weights. ``lambda``
  is an argument of the compiled objective, so one compiled function serves every value;
  each solve starts from the map of the neighbouring (next smaller) lambda.
* :func:`lcurve_corner` picks lambda at the L-curve corner: the maximum curvature of
  ``log chi2`` against ``log (regulariser - floor)`` along ``log lambda``, located between
  the sweep's lambdas on cubic splines through the sweep. A corner at the first or last
  lambda of the sweep is refused (the true corner may lie outside it).
* :func:`lambda_for_chi2` finds the lambda where the reduced chi-square reaches an aim:
  a bracket (from a sweep, or widened from ``lo``/``hi``), then a safeguarded Illinois root
  finder in ``log lambda`` on warm-started solves.
* :func:`grid_search` re-precomputes and re-solves at every point of a Cartesian grid of
  stellar parameters (inclination, vsini, domega, period, t_cool, t_hot, macro_gauss,
  ew_scale) and appends one CSV row per finished point, so a killed search resumes where it
  stopped. Points run serially in this process, or on a Dask cluster (:class:`Cluster`): a
  local one sized to the machine, or a remote one at a scheduler's address. A point whose
  star cannot exist (:func:`point_refusal`: beyond break-up where the mass is known) is
  recorded as refused, with its reason, and the others are solved; every row carries the
  radius the point implies (and log g where the mass is known). A lock file keeps a second
  process off the table.
* :func:`delta_chi2_interval` gives the range of a parameter whose *un-reduced*
  chi-square ``chi2_reduced * n_epoch * n_vel`` lies within ``Delta chi2`` of the minimum
  (profiled over the other grid parameters); :func:`interval_flags` says when it is not to
  be trusted (best point on the grid's edge, reduced chi-square far from 1).

The table helpers (:func:`computed_rows`, :func:`best_point`, :func:`delta_chi2_interval`,
:func:`interval_flags`) live in :mod:`dopplermap.gridtable` (NumPy only, which the figures
read too); the figures of a sweep and a grid in :mod:`dopplermap.plot`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import itertools
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import plan, regularisers
from ._options import options_of
from ._repr import compact
from .atomic import exclusive_lock, fingerprint, write_text
from .choices import (
    GRID_PARAMETERS,
    MANY_MODES,
    MEMBER_SOLVERS,
    REGULARISERS,
    WEIGHTED_REGULARISERS,
    check,
    did_you_mean,
)
from .cluster import CONNECT_TIMEOUT, Cluster, Session, run_tasks  # noqa: F401  (the search's API)
from .constants import FILL_MIN
from .diagnostics import check_result, check_spot_contrast, fields_checked
from .errors import DopplermapInputError, DopplermapWarning, reader, warn
from .errorscale import ErrorScale, error_scale_for
from .geometry import StarParams, check_star
from .gravity import breakup, log_g
from .grid import healpix_grid, latitude_band_grid
from .gridtable import best_point, computed_rows, delta_chi2_interval, interval_flags  # noqa: F401  (the search's API)
from .limb_darkening import LimbDarkening
from .memory import MAX_GRID_POINTS
from .model import Precomputed, forward
from .objective import n_windows
from .problem import Problem, Settings, require_problem
from .profiles import ComponentSet, LocalProfile, intensity_ratio, tabulated
from .regularisers import seed_entropy
from .result import line_sets
from .solvers import (
    NEWTON_TOL,
    InversionResult,
    SolveOptions,
    check_solver_args,
    finish,
    invert,
    newton_fits,
    prepare,
    sequential_solver,
    solve_many,
    solver_choice,
)
from .solvers.newton import solve_newton
from .uncertainty import EffectiveDof, effective_dof_refusal
from .uncertainty import effective_dof as uncertainty_dof

__all__ = [
    "LambdaSweep", "sweep_lambda", "sweep_lmbd_time", "lcurve_corner", "refine_corner", "CORNER_RATIO", "CORNER_SOLVES",
    "lcurve_curvature", "regulariser_floor",
    "lambda_for_chi2", "fit_error_scale", "apply_error_scale", "ERROR_SCALE_LAMBDA", "Problem", "GRID_PARAMETERS", "RENAMED_GRID_PARAMETERS", "grid_parameter", "apply_parameters",
    "grid_points", "count_points", "check_grid_size", "validate_points", "problem_fingerprint",
    "evaluate_point", "point_refusal", "refused_row", "point_star", "Cluster", "grid_search", "grid_lock", "read_table",
    "computed_rows", "best_point", "delta_chi2_interval", "interval_flags", "pad_precomputed",
    "SupportReadout", "SUPPORT_READOUT", "SUPPORT_CROWDED", "SupportFit", "support_mask", "solve_on_support", "support_from_point",
    "PointSolve", "read_solutions",
]

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- lambda


@dataclasses.dataclass
class LambdaSweep:
    """Inversions over a list of lambdas (ascending).

    Attributes:
        lmbd: (n,) regularisation weights, ascending.
        chi2: (n,) reduced chi-square. regulariser: (n,) regulariser value.
        loss: (n,) objective. iterations: (n,) solver iterations.
        results: the :class:`InversionResult` of each lambda.
        floor: infimum of the regulariser (subtracted on the L-curve's axis).
        total_time: wall seconds for the sweep (compile included).
        mode: how the solves ran (``"vmap"``, ``"sequential"`` or ``"invert"``, see :func:`sweep_lambda`).
        parameter: the weight swept: ``"lmbd"`` (the spatial regulariser's), or ``"lmbd_time"``
            (:func:`sweep_lmbd_time`: ``lmbd`` then holds the ``lmbd_time`` values and
            ``regulariser`` the temporal coupling's value, ``floor`` 0).
        repaired: points whose chi2 lay above the next larger lambda's, re-solved from that
            lambda's map (:func:`sweep_lambda`).
    """

    lmbd: np.ndarray
    chi2: np.ndarray
    regulariser: np.ndarray
    loss: np.ndarray
    iterations: np.ndarray
    results: list
    floor: float
    total_time: float
    mode: str = "invert"
    parameter: str = "lmbd"
    repaired: int = 0

    def __repr__(self) -> str:
        return compact(self, ("parameter", "lmbd", "chi2", "floor", "total_time"))

    def table(self) -> str:
        """CSV text: lambda, chi2, regulariser, loss, iterations, solve_time (a sweep of
        ``lmbd_time``: lmbd_time, chi2, temporal, ...)."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        time_sweep = self.parameter == "lmbd_time"
        w.writerow(["lmbd_time" if time_sweep else "lmbd", "chi2", "temporal" if time_sweep else "regulariser",
                    "loss", "iterations", "solve_time"])
        for v, reg, r in zip(self.lmbd, self.regulariser, self.results, strict=True):
            w.writerow([repr(float(v)), repr(r.chi2), repr(float(reg)), repr(r.loss), r.iterations,
                        f"{r.solve_time:.4f}"])
        return buf.getvalue()


def regulariser_floor(name: str, pre: Precomputed) -> float:
    """Infimum of the regulariser ``name`` over the allowed maps: its entry's ``infimum``
    (:mod:`dopplermap.regularisers`; 0 for Tikhonov and none, negative for the seed's entropy)."""
    reg = regularisers.regulariser(name)
    return reg.infimum(np.asarray(pre.cell_area), reg.floor)


STALL_ITERATIONS = 3
"""A warm-started solve that stops within this many iterations is checked against a solve
from the flat start (see :func:`_warm_solve`)."""


def _stalled(res: InversionResult, tol: float) -> bool:
    """Whether a warm-started solve stopped without moving the loss at its own lambda: within
    ``STALL_ITERATIONS`` iterations, or with its loss lowered by less than ``tol`` (relative)
    from its first iterate to its last."""
    if res.iterations <= STALL_ITERATIONS:
        return True
    history = getattr(res, "history", None)  # a back end that keeps none: the iteration count only
    loss = np.asarray(history.get("loss", ())) if history else np.zeros(0)
    if loss.size < 2:
        return False
    return bool(loss[0] - loss[-1] <= tol * max(abs(float(loss[-1])), 1.0))


def _warm_solve(problem, lmbd, start, cold, on_solve=None, parameter="lmbd") -> InversionResult:
    """``invert`` from ``start``; if it stalled (:func:`_stalled`), also from ``cold`` and the
    lower loss is kept. From a map that is nearly optimal for a nearby lambda, the first
    steps can be so short that the relative-reduction test stops the solve at once, leaving
    the old map (chi2 and regulariser unchanged), which bends the L-curve and shifts
    chi2(lambda). ``parameter``: the weight ``lmbd`` sets (``"lmbd"`` or ``"lmbd_time"``)."""
    res = invert(problem, x0=start, **{parameter: lmbd})
    if on_solve is not None:
        on_solve(lmbd, res)
    if start is None or start is cold or not _stalled(res, problem.settings.tol):
        return res
    other = invert(problem, x0=cold, **{parameter: lmbd})
    if on_solve is not None:
        on_solve(lmbd, other)
    log.info("%s %.4g: warm start stopped after %d iterations; flat start: loss %.8g vs %.8g", parameter,
             lmbd, res.iterations, other.loss, res.loss)
    return other if other.loss < res.loss else res


SWEEP_ORDER_RTOL = 1e-6
"""Exact minima's chi2 does not fall as lambda grows: a sweep point whose chi2 exceeds the next
larger lambda's by more than this (relative) stopped short of its minimum (:func:`_order_repair`)."""


def _sweep_downwards(solver: str) -> bool:
    """Whether a sweep whose solves run on ``solver`` goes from the largest lambda down. Newton
    follows the maximum-entropy trajectory from its smooth end (as MEMSYS lowers its alpha): each
    solve starts from the smoother map of the lambda above, and the smallest lambda, the costliest
    solve, no longer starts from the flat map. L-BFGS-B's iterations hardly depend on the
    direction, and it keeps the upward order (benchmarks/RESULTS.md, "The order of a sweep")."""
    return solver == "newton"


def _order_repair(problem, lm, results: dict, mode: str, member_solver: str = "auto", *,
                  downwards: bool = False, x0=None) -> int:
    """Re-solve every sweep point whose chi2 lies above the next larger lambda's (beyond
    :data:`SWEEP_ORDER_RTOL`), keeping the lower loss at its own lambda, from the neighbour's map it
    was not started from: an upward sweep's from the next larger lambda's (walked downwards, so a
    repaired point serves the next one down); a downward sweep's from the next smaller lambda's,
    or ``x0`` at the smallest (walked upwards). At the noise-fitting end every solver stops on its
    relative-reduction test short of the minimum; this catches what the stall test cannot.
    Returns the number of points re-solved."""
    asc = np.argsort(lm)
    n = 0
    ks = range(asc.size - 1) if downwards else range(asc.size - 2, -1, -1)
    for k in ks:
        i, j = int(asc[k]), int(asc[k + 1])
        if results[i].chi2 <= results[j].chi2 * (1.0 + SWEEP_ORDER_RTOL):
            continue
        n += 1
        start = (x0 if k == 0 else results[int(asc[k - 1])].x) if downwards else results[j].x
        if mode == "invert":
            other = invert(problem, lmbd=float(lm[i]), x0=start)
        else:
            other = solve_many(problem, lmbds=[float(lm[i])], x0=start, mode="sequential",
                               solver=member_solver).results[0]
        log.info("lambda %.4g: chi2 %.6g above lambda %.4g's %.6g; re-solved from %s: loss %.8g vs %.8g",
                 lm[i], results[i].chi2, lm[j], results[j].chi2,
                 "the next larger lambda's map" if not downwards else
                 "the flat start" if k == 0 else "the next smaller lambda's map", other.loss, results[i].loss)
        if other.loss < results[i].loss:
            results[i] = other
    return n


SWEEP_TASK_LAMBDAS = 4
"""Lambdas of one Dask task of a sweep on a cluster (neighbours, warm-started within the task)."""


def _sweep_task(problem, lmbds, warm_start, x0, mode, member_solver="auto"):
    return sweep_lambda(problem, lmbds, warm_start=warm_start, x0=x0, mode=mode, member_solver=member_solver).results


def sweep_lambda(problem: Problem, lmbds: Sequence[float], *, warm_start: bool = True, x0=None,
                 progress=None, mode: str = "auto", cluster: Cluster | None = None,
                 member_solver: str = "auto") -> LambdaSweep:
    """Invert at every lambda, warm-starting each solve from its neighbour's map: from the
    largest lambda down where the solves are Gauss-Newton's, else from the smallest up
    (:func:`_sweep_downwards`).

    Every solve is of ``problem`` with its settings (regulariser, tol, maxiter, weights,
    light curve) and that lambda. Set a tight ``tol`` (e.g.
    ``problem.replace(settings=problem.settings.replace(tol=1e-7))``, what ``dopplermap
    lambda`` uses): a loose one leaves solver noise on the L-curve and in chi2(lambda).

    Args:
        problem: a :class:`dopplermap.Problem`. lmbds: positive regularisation weights (any
            order, unique).
        warm_start: start each solve from the previous lambda's map (one that stops within
            ``STALL_ITERATIONS`` is re-solved from ``x0`` and the lower loss kept); otherwise
            every solve starts from ``x0`` (default: the seed's flat map). The members of a
            vmapped sweep all start from ``x0``. With it, a point whose chi2 lies above the
            next larger lambda's (it stopped short of its minimum) is re-solved from the other
            neighbour's map and the lower loss kept (``repaired`` counts them; :func:`_order_repair`).
        progress: optional ``progress(n_done, n_total, result)`` called after each solve
            (a vmapped sweep: after the batch, once per lambda).
        mode: how the solves run (:func:`dopplermap.solvers.solve_many`): ``"vmap"`` (all
            lambdas in one compiled call, the device back end), ``"sequential"`` (one
            compiled device solve after another), ``"invert"`` (:func:`dopplermap.invert`
            each, with the problem's solver); ``"auto"`` (default): vmap on an accelerator
            where :func:`dopplermap.plan.many_mode` says it pays, else ``"invert"`` (on CPU
            always: warm-started solves beat a batch whose members' lambdas span decades).
        cluster: a :class:`Cluster` to spread the sweep over, as tasks of
            :data:`SWEEP_TASK_LAMBDAS` neighbouring lambdas each, solved in ``mode`` and
            warm-started within the task (each task's first lambda from ``x0``); None
            (default): in this process.
        member_solver: with ``mode="sequential"``, the compiled solve of the members
            (:func:`dopplermap.solvers.solve_many`'s ``solver``); ``"auto"`` is decided once
            here (:func:`dopplermap.solvers.sequential_solver`) for every task and re-solve.
    Returns:
        :class:`LambdaSweep`, ascending in lambda; its ``mode`` says how it was solved.
    """
    problem = require_problem(problem, "sweep_lambda")
    regulariser = problem.settings.regulariser
    lm = np.asarray(lmbds, dtype=float).ravel()
    if lm.size < 1:
        raise DopplermapInputError("lmbds: need at least one lambda")
    if not np.all(np.isfinite(lm)) or np.any(lm <= 0):
        raise DopplermapInputError(f"lmbds must be finite and > 0, got {lm[~(np.isfinite(lm) & (lm > 0))][:3].tolist()}")
    if np.unique(lm).size != lm.size:
        raise DopplermapInputError("lmbds contains repeated values")
    check(regulariser, WEIGHTED_REGULARISERS, "regulariser for a lambda sweep")
    check(mode, MANY_MODES, "mode")
    mode = _sweep_mode(problem, mode)
    check(member_solver, MEMBER_SOLVERS, "member_solver")
    t0 = time.perf_counter()
    if mode == "sequential" and member_solver == "auto":
        member_solver = sequential_solver(problem, n_members=lm.size)
    if mode == "invert":  # one choice for every solve, and for every task (a task alone would weigh its few solves)
        problem = _sweep_solver(problem, lm.size, lm)
    downwards = _sweep_downwards(problem.settings.solver if mode == "invert" else member_solver)
    order = np.argsort(lm)[::-1] if downwards else np.argsort(lm)
    results: dict[int, InversionResult] = {}
    if cluster is not None:
        chunks = [order[s:s + SWEEP_TASK_LAMBDAS] for s in range(0, order.size, SWEEP_TASK_LAMBDAS)]
        parts = run_tasks(cluster, _sweep_task, problem, [(lm[c], warm_start, x0, mode, member_solver) for c in chunks])
        for c, part in zip(chunks, parts, strict=True):
            for i, res in zip(c[np.argsort(lm[c])], part, strict=True):  # a task's results come ascending
                results[int(i)] = res
                _report_lambda(lm[i], res, len(results), lm.size, progress)
    elif mode == "invert":
        start = x0
        for i in order:
            res = _warm_solve(problem, float(lm[i]), start, x0)
            results[int(i)] = res
            if warm_start:
                start = res.x
            _report_lambda(lm[i], res, len(results), lm.size, progress)
    else:
        many = solve_many(problem, lmbds=lm[order], x0=x0, mode=mode, warm_start=warm_start and mode == "sequential",
                          solver=member_solver)
        for k, (i, res) in enumerate(zip(order, many.results, strict=True)):
            if mode == "sequential" and warm_start and k > 0 and res.iterations <= STALL_ITERATIONS:
                # the chained start can stop at once, as in _warm_solve: also from the flat start
                other = solve_many(problem, lmbds=[float(lm[i])], x0=x0, mode="sequential",
                                   solver=member_solver).results[0]
                res = other if other.loss < res.loss else res
            results[int(i)] = res
            _report_lambda(lm[i], res, len(results), lm.size, progress)
    repaired = _order_repair(problem, lm, results, mode, member_solver, downwards=downwards, x0=x0) if warm_start else 0
    log.info("lambda sweep: %s, %s%s%s", _mode_line(mode, lm.size), "downwards" if downwards else "upwards",
             "" if cluster is None else f" in tasks of {SWEEP_TASK_LAMBDAS} on the cluster",
             f"; {repaired} point(s) re-solved from a neighbour's map" if repaired else "")
    asc = np.argsort(lm)
    rs = [results[int(i)] for i in asc]
    floor = regulariser_floor(regulariser, problem.pre)
    _warn_one_map(lm[asc], rs, problem.settings.tol, floor)
    return LambdaSweep(lmbd=lm[asc], chi2=np.array([r.chi2 for r in rs]),
                       regulariser=np.array([r.regulariser_value for r in rs]),
                       loss=np.array([r.loss for r in rs]), iterations=np.array([r.iterations for r in rs]),
                       results=rs, floor=floor, total_time=time.perf_counter() - t0, mode=mode, repaired=repaired)


def _swept_value(r: InversionResult, parameter: str) -> float:
    """The value on a sweep's regulariser axis: the coupling's for ``lmbd_time``, else the regulariser's."""
    return r.temporal if parameter == "lmbd_time" else r.regulariser_value


def _warn_one_map(lm, rs, tol: float, floor: float, parameter: str = "lmbd") -> None:
    """Warn where neighbouring lambdas' solves stopped on one map: chi2 and regulariser equal to
    the solver's tolerance. Exact minima move with lambda (chi2 up, regulariser down); equal ones
    say the relative-reduction test stopped each solve where its start was, and the L-curve there
    is the solver's, not the data's (on LO Peg at tol 1e-5 four lambdas over a decade). Not where
    the maps are the flat one (regulariser at its floor): there the minima themselves coincide.
    ``parameter="lmbd_time"``: a sweep of the temporal weight, its regulariser the coupling's value."""
    def value(r):
        return _swept_value(r, parameter)

    def flat(r):
        return value(r) - floor <= tol * max(1.0, abs(floor))

    same = [k for k in range(len(rs) - 1)
            if np.isclose(rs[k].chi2, rs[k + 1].chi2, rtol=tol, atol=0.0)
            and np.isclose(value(rs[k]), value(rs[k + 1]), rtol=tol, atol=0.0)
            and not (flat(rs[k]) and flat(rs[k + 1]))]
    if same:
        name = "lmbd_time" if parameter == "lmbd_time" else "lambda"
        lo, hi = lm[same[0]], lm[same[-1] + 1]
        warn(f"{name} sweep: the solves from {name} {lo:.4g} to {hi:.4g} stopped on one map ({len(same)} neighbouring "
             f"pair(s) with chi2 and regulariser equal to tol {tol:g}): the L-curve there is where the solver "
             "stopped, not the data's; solve the sweep with a tighter tol (1e-7, dopplermap lambda's default)")


def sweep_lmbd_time(problem: Problem, values: Sequence[float], *, warm_start: bool = True, x0=None,
                    progress=None) -> LambdaSweep:
    """Invert a windowed problem at every temporal weight ``lmbd_time``, from the smallest to
    the largest, warm-starting each solve; the machinery of :func:`sweep_lambda` for the
    coupling of the windows' maps (:mod:`dopplermap.windows`).

    The spatial ``lmbd`` stays the problem's. The sweep's L-curve is ``(temporal coupling,
    chi2)``: a small ``lmbd_time`` leaves the windows free to fit the noise of their own
    epochs (small chi2, large change between windows), a large one pulls them to one static
    map (chi2 rises, the change vanishes); :func:`lcurve_corner` of the returned sweep is
    the weight at the corner, and :func:`lambda_for_chi2` with ``parameter="lmbd_time"``
    the weight at a target chi2. Give the problem a tight ``tol``, as for a lambda sweep.

    Args:
        problem: a :class:`dopplermap.Problem` with time windows (``problem.windows``).
        values: positive ``lmbd_time`` values (any order, unique).
        warm_start, x0, progress: as :func:`sweep_lambda` (the solves run through
            :func:`dopplermap.invert` one after another; ``lmbd_time`` is data of the
            compiled program, so they share one compilation).
    Returns:
        :class:`LambdaSweep` with ``parameter = "lmbd_time"``: ``lmbd`` the ascending
        ``lmbd_time`` values, ``regulariser`` the temporal coupling ``sum_k T(F_k, F_k-1)``
        of each solve's maps, ``floor`` 0.
    """
    problem = require_problem(problem, "sweep_lmbd_time")
    if problem.windows is None or problem.windows.n_window < 2:
        raise DopplermapInputError("sweep_lmbd_time: the problem needs >= 2 time windows (problem.windows) for "
                                   "lmbd_time to couple anything")
    lt = np.asarray(values, dtype=float).ravel()
    if lt.size < 1:
        raise DopplermapInputError("lmbd_time values: need at least one")
    if not np.all(np.isfinite(lt)) or np.any(lt <= 0):
        raise DopplermapInputError(f"lmbd_time values must be finite and > 0, got "
                                   f"{lt[~(np.isfinite(lt) & (lt > 0))][:3].tolist()}")
    if np.unique(lt).size != lt.size:
        raise DopplermapInputError("lmbd_time values contain repeated values")
    t0 = time.perf_counter()
    problem = _sweep_solver(problem, lt.size)
    asc = np.sort(lt)  # upwards: from detailed, independent windows towards one map
    rs, start = [], x0
    for k, v in enumerate(asc):
        res = _warm_solve(problem, float(v), start, x0, parameter="lmbd_time")
        rs.append(res)
        if warm_start:
            start = res.x
        log.info("lmbd_time %.4g: chi2 %.5g temporal %.5g (%d it)", v, res.chi2, res.temporal, res.iterations)
        if progress is not None:
            progress(k + 1, lt.size, res)
    _warn_one_map(asc, rs, problem.settings.tol, 0.0, parameter="lmbd_time")
    return LambdaSweep(lmbd=asc, chi2=np.array([r.chi2 for r in rs]),
                       regulariser=np.array([r.temporal for r in rs], dtype=float),
                       loss=np.array([r.loss for r in rs]), iterations=np.array([r.iterations for r in rs]),
                       results=rs, floor=0.0, total_time=time.perf_counter() - t0, mode="invert",
                       parameter="lmbd_time")


def _sweep_mode(problem: Problem, mode: str) -> str:
    """The mode a sweep runs in: ``mode``, or for ``"auto"`` vmap on an accelerator where it
    pays, else invert (one line data set only: several go through invert)."""
    if problem.lines:
        if mode not in ("auto", "invert"):
            raise DopplermapInputError(f"a lambda sweep over several line data sets runs in mode 'invert', not {mode!r}")
        return "invert"
    if mode != "auto":
        return mode
    if not plan.on_accelerator():
        # a sweep's lambdas span decades, so its members' iterations differ 10-100x, and a CPU
        # batch runs them in lockstep to the slowest: slower than warm-started solves one after
        # another even at the size where a batch of one lambda's members pays (RESULTS.md)
        return "invert"
    pre, obs = problem.pre, problem.obs
    fits = plan.blocked_fits(pre, plan.cube_dtype(problem.cube_dtype or "auto", problem.settings.tol))
    many = plan.many_mode("auto", n_data=obs.n_epoch * obs.n_vel, n_cell=pre.n_cell, blocked_fits=fits)
    return "vmap" if many == "vmap" else "invert"


def _sweep_solver(problem: Problem, n: int, lmbds=None, *, what: str = "lambda sweep",
                  accurate: bool = False) -> Problem:
    """The problem with ``solver="auto"`` resolved once for all ``n`` solves of a sweep or a grid
    (one compile serves them all: :func:`dopplermap.solvers.solver_choice`), at the sweep's
    ``lmbds`` (default: the problem's lambda for each). ``accurate``: Gauss-Newton wherever it is
    a candidate, whatever the time estimates prefer. A grid asks for it: it reads chi2 differences
    between points, and at its tolerance L-BFGS-B can stop chi2 units above the minima
    (``chi2_jitter``; benchmarks/RESULTS.md, "The grid's solver on real data")."""
    st = problem.settings
    if st.solver != "auto":
        return problem
    if accurate:  # whether Newton is a candidate is all that matters: no model, set-up or compile states
        solver = "newton" if st.tol <= NEWTON_TOL and newton_fits(problem) else "lbfgsb"
        log.info("%s of %d solves: %s (Gauss-Newton wherever it applies, for accuracy)", what, n, solver)
        return problem.replace(settings=st.replace(solver=solver))
    setup = prepare(problem.pre, problem.observations, st, lightcurve=problem.lightcurve, problem=problem)
    choice = solver_choice(settings=st, pre=problem.pre, setup=setup, n_solves=n, lmbds=lmbds)
    if choice.estimates:
        log.info("%s of %d solves: %s", what, n, choice.describe())
    return problem.replace(settings=st.replace(solver=choice.solver))


def _mode_line(mode: str, n: int) -> str:
    return {"vmap": f"{n} solves together (vmap)",
            "sequential": f"{n} solves one after another through one compiled device solve",
            "invert": f"{n} solves one after another (invert)"}[mode]


def _report_lambda(lmbd, res, n_done, n_total, progress):
    log.info("lambda %.4g: chi2 %.5g reg %.5g (%d it)", lmbd, res.chi2, res.regulariser_value, res.iterations)
    if progress is not None:
        progress(n_done, n_total, res)


def lcurve_curvature(lmbd, chi2, reg, floor: float = 0.0) -> np.ndarray:
    """Signed curvature of the L-curve ``(log(reg - floor), log chi2)`` along ``log lambda``.

    Positive where the curve turns like an L's corner (flat chi-square at small lambda
    turning to a steep rise at large lambda). Shapes (n,) in, (n,) out.
    """
    lmbd, chi2, reg = (np.asarray(a, dtype=float) for a in (lmbd, chi2, reg))
    if not (lmbd.shape == chi2.shape == reg.shape) or lmbd.size < 5:
        raise DopplermapInputError(f"the L-curve needs >= 5 lambdas of equal-length lambda/chi2/regulariser, got {lmbd.shape}")
    excess = reg - floor
    if np.any(excess <= 0) or np.any(chi2 <= 0):
        raise DopplermapInputError("the L-curve needs chi2 > 0 and regulariser above its floor at every lambda")
    t = np.log(lmbd)
    x, y = np.log(excess), np.log(chi2)
    dx, dy = np.gradient(x, t), np.gradient(y, t)
    ddx, ddy = np.gradient(dx, t), np.gradient(dy, t)
    return (ddx * dy - dx * ddy) / np.maximum(dx * dx + dy * dy, 1e-300) ** 1.5


def _spline_curvature(t, x, y):
    """Curvature of the L-curve through cubic splines of ``x(t)`` and ``y(t)``, as a function of t."""
    from scipy.interpolate import CubicSpline

    sx, sy = CubicSpline(t, x), CubicSpline(t, y)

    def kappa(u):
        dx, dy, ddx, ddy = sx(u, 1), sy(u, 1), sx(u, 2), sy(u, 2)
        return (ddx * dy - dx * ddy) / np.maximum(dx * dx + dy * dy, 1e-300) ** 1.5

    return kappa


def lcurve_corner(sweep: LambdaSweep, *, refine: bool = True) -> tuple[float, np.ndarray]:
    """The lambda of maximum L-curve curvature and the curvature array (at the sweep's lambdas).

    Exact minimisers give an L-curve on which chi-square rises and the regulariser falls
    with lambda; where a step breaks that (solver noise on the flat, noise-fitting end),
    or leaves chi2 unchanged to :data:`SWEEP_ORDER_RTOL` (a solve that kept its start's map),
    the curvature is not trusted and the point cannot be the corner. A point is a
    candidate if the steps to both neighbours are monotone. Raises ``ValueError`` if the
    largest curvature of a monotone point lies at the first or last lambda, or if no point
    inside the sweep bends like a corner (curvature > 0).

    ``refine`` (default): the corner is then located between the sweep's lambdas, as the
    maximum of the curvature of cubic splines through ``log(reg - floor)`` and ``log chi2``
    against ``log lambda`` at the five sweep points around the best one (no further
    solves), searched between its neighbours. It moves continuously with the data instead of jumping from one
    sweep value to the next. ``refine=False``: the best sweep lambda itself.
    """
    name = "lambda" if getattr(sweep, "parameter", "lmbd") == "lmbd" else sweep.parameter
    kappa = lcurve_curvature(sweep.lmbd, sweep.chi2, sweep.regulariser, sweep.floor)
    # a step that leaves chi2 within SWEEP_ORDER_RTOL is a solve that kept its start's map: a zero-length
    # step on the curve, whose one-sided difference makes the end point's curvature blow up
    step_ok = (np.diff(sweep.chi2) > SWEEP_ORDER_RTOL * sweep.chi2[:-1]) & (np.diff(sweep.regulariser) < 0)
    ok = np.zeros(kappa.size, bool)
    ok[0], ok[-1] = step_ok[0], step_ok[-1]
    ok[1:-1] = step_ok[:-1] & step_ok[1:]
    score = np.where(ok, kappa, -np.inf)
    i = int(np.argmax(score))
    if not np.isfinite(score[i]) or score[i] <= 0:
        raise DopplermapInputError(f"no L-curve corner inside the sweep {sweep.lmbd[0]:.4g}..{sweep.lmbd[-1]:.4g} "
                                   f"(no monotone point bends like a corner); extend the {name} range or tighten tol")
    if i == 0 or i == kappa.size - 1:
        side = "smallest" if i == 0 else "largest"
        raise DopplermapInputError(f"L-curve corner lies at the sweep boundary (the {side} {name}, "
                                   f"{sweep.lmbd[i]:.4g}); extend the {name} range beyond "
                                   f"{sweep.lmbd[0]:.4g}..{sweep.lmbd[-1]:.4g}")
    if not refine:
        return float(sweep.lmbd[i]), kappa
    from scipy.optimize import minimize_scalar

    # splines through the five points around the best one only: noise at the far (flat,
    # noise-fitting) end of the sweep must not move the corner
    w = slice(max(0, i - 2), min(kappa.size, i + 3))
    t = np.log(sweep.lmbd)
    curv = _spline_curvature(t[w], np.log(sweep.regulariser[w] - sweep.floor), np.log(sweep.chi2[w]))
    best = minimize_scalar(lambda u: -float(curv(u)), bounds=(t[i - 1], t[i + 1]), method="bounded",
                           options={"xatol": 1e-6})
    u = float(best.x) if -best.fun >= curv(t[i]) else float(t[i])
    return float(np.exp(u)), kappa


CORNER_RATIO = 1.4
""":func:`refine_corner` adds solves until the corner's neighbours lie within this factor of it."""

CORNER_SOLVES = 8
"""The most solves :func:`refine_corner` adds."""


def refine_corner(problem: Problem, sweep: LambdaSweep, *, ratio: float = CORNER_RATIO,
                  max_solves: int = CORNER_SOLVES, progress=None) -> LambdaSweep:
    """``sweep`` with solves added around its L-curve corner, so that the corner does not depend
    on where the sweep's samples fell.

    The L-curve's curvature can peak broadly: the curvature of a coarse sweep, and so its corner,
    then follows the sampling (benchmarks/RESULTS.md, "The L-curve corner across sweeps"; where
    the top is flat to the solves' noise, the corner stays anywhere on it). While a neighbour of
    the best sweep point lies more than
    ``ratio`` from it, a solve at their geometric mean is added, warm-started from the best
    point's map (:func:`_warm_solve`), at most ``max_solves`` in all. A sweep without a corner
    candidate is returned as it is (:func:`lcurve_corner` then says why); where added solves leave
    none (solves stopped short, e.g. at ``maxiter``, are noise on the curve), the sweep as it was
    before them. ``progress``: optional ``progress(n_added, max_solves, result)`` after each
    added solve.
    """
    problem = require_problem(problem, "refine_corner")
    if not (np.isfinite(ratio) and ratio > 1.0):
        raise DopplermapInputError(f"refine_corner: ratio must be > 1, got {ratio!r}")
    if int(max_solves) != max_solves or max_solves < 0:
        raise DopplermapInputError(f"refine_corner: max_solves must be an integer >= 0, got {max_solves!r}")
    param = sweep.parameter
    if problem.settings.solver == "auto" and sweep.results:  # the sweep's own solver: no second compile
        problem = problem.replace(settings=problem.settings.replace(solver=sweep.results[0].solver))
    t0 = time.perf_counter()
    cur, added, kept = sweep, 0, None
    while True:
        try:
            best, _ = lcurve_corner(cur, refine=False)
        except ValueError:
            break
        kept = cur
        if added >= max_solves:
            break
        i = int(np.flatnonzero(cur.lmbd == best)[0])
        new = [float(np.sqrt(cur.lmbd[i] * cur.lmbd[j])) for j in (i - 1, i + 1)
               if max(cur.lmbd[i], cur.lmbd[j]) / min(cur.lmbd[i], cur.lmbd[j]) > ratio]
        if not new:
            break
        rs = dict(zip(cur.lmbd.tolist(), cur.results, strict=True))
        for v in new[:max_solves - added]:
            rs[v] = _warm_solve(problem, v, cur.results[i].x, None, parameter=param)
            added += 1
            log.info("%s %.4g added near the L-curve corner: chi2 %.6g (%d it)", param, v, rs[v].chi2,
                     rs[v].iterations)
            if progress is not None:
                progress(added, int(max_solves), rs[v])
        lm = np.array(sorted(rs))
        res = [rs[v] for v in lm.tolist()]
        reg = [_swept_value(r, param) for r in res]
        cur = dataclasses.replace(cur, lmbd=lm, chi2=np.array([r.chi2 for r in res]), regulariser=np.array(reg, float),
                                  loss=np.array([r.loss for r in res]),
                                  iterations=np.array([r.iterations for r in res]), results=res,
                                  total_time=sweep.total_time + time.perf_counter() - t0)
    if kept is None or kept is cur:
        return cur
    # the solves added last left no corner candidate (solves stopped short, e.g. at maxiter, are
    # noise on the curve): the sweep as it was before them, its time the whole
    log.info("%s: the solves added near the L-curve corner left no corner; kept the %d points before them",
             param, kept.lmbd.size)
    return dataclasses.replace(kept, total_time=sweep.total_time + time.perf_counter() - t0)


def _crossing(sweep: LambdaSweep, target: float):
    """Indices ``(j, j + 1)`` of the first sweep step whose chi2 crosses ``target`` upwards, or None."""
    below = sweep.chi2 <= target
    for j in range(sweep.lmbd.size - 1):
        if below[j] and not below[j + 1]:
            return j, j + 1
    return None


def lambda_for_chi2(problem: Problem, target: float, *, lo: float = 1e-3, hi: float = 1e3, rtol: float = 1e-3,
                    max_solves: int = 10, sweep: LambdaSweep | None = None,
                    parameter: str = "lmbd") -> tuple[float, InversionResult, list]:
    """The lambda at which the reduced chi-square equals ``target``, to ``|chi2 / target - 1| < rtol``.

    Every solve is :func:`dopplermap.invert` of ``problem`` with its settings and a trial
    lambda; as for :func:`sweep_lambda`, give the problem a tight ``tol`` (chi2 must follow
    lambda, not the solver's stopping point).

    A root of ``g(s) = log(chi2(e^s) / target)`` in ``s = log lambda``, found by bracketing and
    the Illinois variant of regula falsi (superlinear on a smooth ``g``) with a bisection
    safeguard: after a step that did not halve the smallest ``|g|`` so far, or one that
    would leave the bracket, the next point is the bracket's midpoint. Every step
    keeps a sign change, so where chi2 is not monotone in lambda (solver noise near the
    answer) the result is still a crossing inside the bracket. Each solve is warm-started
    from the map of the bracket's initial upper end.

    The bracket comes from ``sweep`` (a :class:`LambdaSweep` of the same problem: the first
    step whose chi2 crosses the target; no new solve) if given, else from ``lo`` and ``hi``
    (each widened by 10x up to 4 times when needed). Returns ``(lambda, result, trials)``
    with ``trials`` the ``(lambda, chi2)`` of every solve this call made (a stalled warm
    start re-solved from the flat start counts twice, see :func:`_warm_solve`); it stops after
    ``max_solves`` solves (a warning says so if the tolerance was not reached by then).

    ``parameter="lmbd_time"`` finds the temporal weight of a windowed problem instead
    (:func:`sweep_lmbd_time`; ``sweep`` then one of its sweeps), the spatial lambda fixed.
    """
    problem = require_problem(problem, "lambda_for_chi2")
    if parameter not in ("lmbd", "lmbd_time"):
        raise DopplermapInputError(f"parameter must be 'lmbd' or 'lmbd_time', got {parameter!r}")
    if parameter == "lmbd_time" and (problem.windows is None or problem.windows.n_window < 2):
        raise DopplermapInputError("lmbd_time for a target chi2: the problem needs >= 2 time windows")
    if sweep is not None and getattr(sweep, "parameter", "lmbd") != parameter:
        raise DopplermapInputError(f"the sweep given swept {sweep.parameter}, not {parameter}")

    def weight(r):
        return r.lmbd if parameter == "lmbd" else r.lmbd_time

    if not target > 0:
        raise DopplermapInputError(f"target chi2 must be > 0, got {target!r}")
    if not (0 < lo < hi):
        raise DopplermapInputError(f"need 0 < lo < hi for the lambda bracket, got lo={lo!r}, hi={hi!r}")
    if not (0 < rtol < 1):
        raise DopplermapInputError(f"rtol must be in (0, 1), got {rtol!r}")
    trials: list[tuple[float, float]] = []
    aim = math.log1p(rtol)

    def solve(lm, start):
        return _warm_solve(problem, lm, start, None, on_solve=lambda m, r: trials.append((m, r.chi2)),
                           parameter=parameter)

    def g(r):
        return math.log(r.chi2 / target)

    pair = _crossing(sweep, target) if sweep is not None else None
    if pair is not None:
        r_lo, r_hi = sweep.results[pair[0]], sweep.results[pair[1]]
    else:
        if sweep is not None:  # no crossing inside the sweep: widen from its ends, already solved
            r_lo, r_hi = sweep.results[0], sweep.results[-1]
            lo, hi = weight(r_lo), weight(r_hi)
        else:
            r_hi = solve(hi, None)
        for _ in range(4):
            if r_hi.chi2 >= target:
                break
            hi *= 10.0
            r_hi = solve(hi, r_hi.x)
        if sweep is None:
            r_lo = solve(lo, r_hi.x)
        for _ in range(4):
            if r_lo.chi2 <= target:
                break
            lo /= 10.0
            r_lo = solve(lo, r_lo.x)
        if not (r_lo.chi2 <= target <= r_hi.chi2):
            raise DopplermapInputError(f"target chi2 {target:.5g} not reached: chi2 runs from {r_lo.chi2:.5g} "
                                       f"({parameter} {lo:.3g}) to {r_hi.chi2:.5g} ({parameter} {hi:.3g})")
    a, fa = math.log(weight(r_lo)), g(r_lo)
    b, fb = math.log(weight(r_hi)), g(r_hi)
    # Every step starts from the map of the bracket's first upper end (smoother than the
    # answer's): a solve warm-started from a map that is already nearly optimal for a close
    # lambda can stop after a step or two (the relative-reduction test), so chi2 would keep
    # the start's value and jump with the start instead of following lambda.
    start = r_hi.x
    best = min((r_lo, r_hi), key=lambda r: abs(g(r)))
    side = 0  # which end the last step replaced (Illinois: halve the kept end's value on a repeat)
    stalled = False
    while abs(g(best)) >= aim and len(trials) < max_solves and b - a > 1e-12:
        s = (a * fb - b * fa) / (fb - fa) if fb != fa else 0.5 * (a + b)
        if stalled or not (a < s < b):
            s = 0.5 * (a + b)
        r = solve(math.exp(s), start)
        fs = g(r)
        stalled = abs(fs) > 0.5 * abs(g(best))  # no superlinear progress: bisect next
        if abs(fs) < abs(g(best)):
            best = r
        if fs <= 0:
            a, fa, r_lo = s, fs, r
            if side == -1:
                fb *= 0.5
            side = -1
        else:
            b, fb, r_hi = s, fs, r
            if side == 1:
                fa *= 0.5
            side = 1
    if abs(g(best)) >= aim:
        warn(f"{'lambda' if parameter == 'lmbd' else parameter} for target chi2 {target:.5g}: best chi2 {best.chi2:.5g} (off by "
             f"{abs(best.chi2 / target - 1):.2%}) after {len(trials)} solves, between lambda "
             f"{math.exp(a):.5g} and {math.exp(b):.5g}; raise max_solves or tighten tol")
    return weight(best), best, trials


# ------------------------------------------------------------------------ the error scale


ERROR_SCALE_LAMBDA = 0.1
"""Lambda of :func:`fit_error_scale`'s fit, in units of its reduced chi2 (small: the map
follows the data; in the errors being scaled, lambda moves by their factor squared)."""
ERROR_SCALE_TOL = 1e-5
"""Solver tolerance of those fits (the residual sums are differenced)."""


def _ssr(problem: Problem, res: InversionResult) -> np.ndarray:
    """(n_set,) sums of squared normalised residuals, per line data set."""
    obs = problem.observations if problem.lines else (problem.obs,)
    return np.array([float(np.sum(((np.asarray(o.flux) - np.asarray(s["model"])) / np.asarray(o.err)) ** 2))
                     for o, s in zip(obs, line_sets(res), strict=True)])


def fit_error_scale(problem: Problem, *, lmbd: float = ERROR_SCALE_LAMBDA, tol: float = ERROR_SCALE_TOL,
                    seed: int = 0) -> tuple:
    """The ``"residuals"`` error scale of every line data set, from the residuals of a fit at
    small lambda with the fit's own share of the noise put back; the line profiles are fitted
    alone (a problem's light curves, with errors of their own, are left out of these fits).

    The fit is made at ``lambda = lmbd x chi2``, chi2 the reduced chi2 of a first fit at
    ``lmbd`` (scaling the errors by ``f`` moves every lambda by ``1 / f^2``, so only a lambda in
    units of the chi2 is small for every data set; two solves). Its residuals alone read the scatter low: a map that
    follows the data absorbs part of the noise.
    So the residual sum of each set is divided by its residual degrees of freedom ``k``
    instead of its points ``N``; ``k`` is measured by refitting the data with a noise ``b``
    of the estimated size added and subtracted, ``k = (SSR(+b) + SSR(-b) - 2 SSR) / (2 c^2)``
    (two more solves: for a linear fit the expected value is exactly ``N - 2 tr H + tr H^T H``,
    and the pair cancels the cross term of one draw). Factor ``sqrt(SSR / k)``; per epoch the
    epoch's rms residual times ``sqrt(N / k)``. ``seed`` fixes the added noise (the same
    problem gives the same scale). Returns ``(scales, lambda)``: one
    :class:`~dopplermap.errorscale.ErrorScale` per line data set, in the problem's order, and
    the lambda of the fit."""
    problem = require_problem(problem, "fit_error_scale")
    # the line profiles' own scatter: a light curve (its own errors) would only pull the map
    problem = problem.without_lightcurves()
    problem = problem.replace(settings=problem.settings.replace(tol=min(tol, problem.settings.tol)))
    names = problem.set_names
    obs = list(problem.observations) if problem.lines else [problem.obs]
    n = np.array([np.size(o.flux) for o in obs], dtype=float)
    with warnings.catch_warnings():  # a chi2 far from 1 is what is measured here
        warnings.filterwarnings("ignore", message="reduced chi2", category=DopplermapWarning)
        first = invert(problem, lmbd=lmbd)
        lm = lmbd * first.chi2
        res = invert(problem, lmbd=lm, x0=first.x)
        ssr = _ssr(problem, res)
        c = np.sqrt(ssr / n)
        rng = np.random.default_rng(seed)
        draws = [rng.normal(size=np.shape(o.flux)) * np.asarray(o.err) * ci for o, ci in zip(obs, c, strict=True)]
        pair = []
        for sign in (1.0, -1.0):
            moved = problem.with_observations([dataclasses.replace(o, flux=o.flux + sign * b)
                                               for o, b in zip(obs, draws, strict=True)])
            pair.append(_ssr(moved, invert(moved, lmbd=lm, x0=res.x)))
    k = (pair[0] + pair[1] - 2.0 * ssr) / (2.0 * c ** 2)
    low = np.flatnonzero(~(k > 0.05 * n))
    if low.size:
        raise DopplermapInputError(
            f"{problem.source}: error scale from the residuals of {names[low[0]]!r}: the fit follows the added noise "
            f"almost entirely (residual degrees of freedom {k[low[0]]:.3g} of {int(n[low[0]])} points), so its "
            "residuals do not show the scatter; give the error scale as a number ([data] error_scale = 0.5) or "
            "widen the velocity window so that the continuum sets it")
    k = np.minimum(k, n)  # no more than the points (the draw's noise can push it over)
    scales = []
    for i, (o, s) in enumerate(zip(obs, line_sets(res), strict=True)):
        z2 = ((np.asarray(o.flux) - np.asarray(s["model"])) / np.asarray(o.err)) ** 2
        per = tuple(float(v) for v in np.sqrt(z2.mean(axis=1) * n[i] / k[i]))
        scales.append(ErrorScale(factor=float(np.sqrt(ssr[i] / k[i])), method="residuals", per_epoch=per,
                                 n_points=int(np.shape(o.flux)[1]), name=names[i],
                                 detail=f"sqrt(chi2 x N / {k[i] / n[i]:.2f} N residual degrees of freedom) "
                                        f"at lambda {lm:.3g} (before scaling)"))
    return tuple(scales), lm


def apply_error_scale(problem: Problem, spec=None, *, lmbd: float = ERROR_SCALE_LAMBDA,
                      tol: float = ERROR_SCALE_TOL) -> Problem:
    """The problem with its errors scaled; what ``[data] error_scale`` does, for a Problem.

    ``spec``: a number (the factor), ``"continuum"``, ``"residuals"`` or ``"auto"`` (see
    :mod:`dopplermap.errorscale`), applied to every line data set of a problem whose errors
    are not scaled yet; None: complete the scales a target's ``[data] error_scale`` left
    pending (those read from the residuals of a fit, :func:`fit_error_scale`; the problem
    as it is when none is). The result's :attr:`~dopplermap.problem.Problem.error_scale` says
    each set's factor and method::

        problem = dopplermap.search.apply_error_scale(problem, "auto")
        print(problem.error_scale[0].describe())
    """
    problem = require_problem(problem, "apply_error_scale")
    if spec is not None:
        sets = list(problem.lines) if problem.lines else [None]
        scales = []
        for ld, name in zip(sets, problem.set_names, strict=True):
            obs, comps = (problem.obs, problem.components) if ld is None else (ld.obs, ld.components)
            vsini = None if problem.star is None else problem.star.vsini_kms
            scales.append(error_scale_for(spec, obs, comps, vsini, name=name,
                                          where=problem.source + ("" if ld is None else f" ({name!r})")))
        problem = problem.scale_errors(scales)
    pending = [e for e in problem.error_scale if e.pending]
    if not pending:
        return problem
    found, _ = fit_error_scale(problem, lmbd=lmbd, tol=tol)
    return problem.scale_errors({f.name: dataclasses.replace(f, detail=f"{f.detail}; {problem.error_scale_of(f.name).detail}")
                                 for f in found if f.name in {e.name for e in pending}})


# ------------------------------------------------------------------------ the problem


RENAMED_GRID_PARAMETERS = {"macroturbulence": "macro_gauss"}
"""Grid parameters under an older name: read as the new one, with a warning naming it."""


def grid_parameter(name: str) -> str:
    """``name``, or the new name of a renamed grid parameter (:data:`RENAMED_GRID_PARAMETERS`),
    with a :class:`~dopplermap.errors.DopplermapWarning` naming it; an unknown name is a
    :class:`~dopplermap.errors.DopplermapInputError` (with the nearest known one)."""
    new = RENAMED_GRID_PARAMETERS.get(name)
    if new is None:
        if name not in GRID_PARAMETERS:  # before any work: the command calls this on its --param names
            raise DopplermapInputError(f"unknown grid parameter {name!r}{did_you_mean(name, GRID_PARAMETERS)} "
                                       f"(known: {', '.join(sorted(GRID_PARAMETERS))})")
        return name
    warn(f"grid parameter {name!r} is now called {new!r} (a Gaussian broadening of the local lines, not the "
         f"[line] radial-tangential macroturbulence); read as {new!r}")
    return new


def _renamed(params: dict) -> dict:
    return {grid_parameter(k): v for k, v in params.items()}


def _broadened(profile: LocalProfile, zeta: float) -> LocalProfile:
    """Local profile convolved with Gaussian macroturbulence ``exp(-v^2/zeta^2)`` (zeta km/s)."""
    if zeta <= 0:
        return profile
    fwhm_macro = 2.0 * math.sqrt(math.log(2.0)) * zeta
    if profile.kind == "gaussian":  # widths add in quadrature, equivalent width is kept
        fwhm = math.hypot(profile.fwhm, fwhm_macro)
        return dataclasses.replace(profile, fwhm=fwhm, depth=profile.depth * profile.fwhm / fwhm)
    hw = profile.half_width + 4.0 * zeta
    h = min(zeta / 20.0, 0.05)
    v = np.arange(-hw, hw + h, h)
    k = np.exp(-(v / zeta) ** 2)
    k /= k.sum()
    depth = np.convolve(1.0 - profile(v), k, mode="same")
    return tabulated(v, 1.0 - depth, name="macroturbulence-broadened profile")


def _scaled(profile: LocalProfile, s: float) -> LocalProfile:
    if profile.kind in ("gaussian", "voigt"):
        if not 0.0 <= profile.depth * s < 1.0:
            raise DopplermapInputError(f"ew_scale {s!r} makes a line depth {profile.depth * s:.3g} outside [0, 1)")
        return dataclasses.replace(profile, depth=profile.depth * s)
    return tabulated(profile.velocity, 1.0 - s * (1.0 - profile.intensity), name="scaled profile")


def apply_parameters(problem: Problem, params: dict) -> tuple[StarParams, ComponentSet]:
    """Star and components of ``problem`` with grid parameters ``params`` substituted."""
    problem.single("the grid search")
    if problem.photometry_only:  # each point is a line-profile fit (its synthesis, its chi2)
        raise DopplermapInputError(f"{problem.source}: the grid search compares fits to line profiles; this problem "
                                   "has light curves alone (their map is a longitude / contrast map): map one star "
                                   "with dopplermap invert")
    params = _renamed(params)
    unknown = sorted(set(params) - set(GRID_PARAMETERS))
    if unknown:
        raise DopplermapInputError(f"unknown grid parameter(s) {unknown}; known: {sorted(GRID_PARAMETERS)}")
    star = problem.star.replace(**{k: float(params[k]) for k in ("inclination", "vsini", "domega", "period")
                                   if k in params})
    phot, cool, hot = problem.components
    for key in ("t_cool", "t_hot"):
        if key in params:
            if problem.t_phot is None or problem.wavelength_nm is None:
                raise DopplermapInputError(f"grid parameter {key} needs the problem's t_phot and wavelength_nm")
            ratio = intensity_ratio(float(params[key]), problem.t_phot, problem.wavelength_nm)
            if key == "t_cool":
                cool = dataclasses.replace(cool, intensity=ratio)
            else:
                hot = dataclasses.replace(hot, intensity=ratio)
    comps = [phot, cool, hot]
    if "ew_scale" in params:
        comps = [dataclasses.replace(c, profile=_scaled(c.profile, float(params["ew_scale"]))) for c in comps]
    if "macro_gauss" in params:
        z = float(params["macro_gauss"])
        if z < 0:
            raise DopplermapInputError(f"macro_gauss must be >= 0 km/s, got {z!r}")
        comps = [dataclasses.replace(c, profile=_broadened(c.profile, z)) for c in comps]
    if "ld_linear" in params:
        u = float(params["ld_linear"])
        if not 0.0 <= u <= 1.0:
            raise DopplermapInputError(f"ld_linear (the linear limb-darkening coefficient) must lie in [0, 1], got {u!r}")
        other = [f"{name} {c.limb_darkening.law!r}" for name, c in zip(("phot", "cool", "hot"), comps, strict=True)
                 if c.limb_darkening.law != "linear"]
        if other:
            raise DopplermapInputError(f"{problem.source}: grid parameter ld_linear sets the linear law's coefficient, "
                                       f"but the lines' limb darkening is {', '.join(other)}: use [line] "
                                       "limb_darkening = \"linear\"")
        comps = [dataclasses.replace(c, limb_darkening=LimbDarkening("linear", (u,))) for c in comps]
    if "t_cool" in params or "t_hot" in params:  # the point's own intensities, for the spots that are fitted
        check_spot_contrast(tuple(c.intensity for c in comps), what="continuum intensities (phot, cool, hot)",
                            where=f"grid point {params}", fitted=problem.settings.fit_components)
    with fields_checked():  # the problem's own intensities were checked where it was built
        return star, ComponentSet(*comps)


def pad_precomputed(pre: Precomputed, n_slot: int | None = None, n_bin: int | None = None) -> Precomputed:
    """Pad the slot and bin axes with zero-weight entries (same model, new shapes).

    By default ``n_slot`` is rounded up to a multiple of ``max(32, n_cell // 16)`` and
    ``n_bin`` to a multiple of 128, so that neighbouring grid points share one compiled
    objective. Each synthesis form pads its own arrays (:meth:`dopplermap.forms.Form.pad`)
    and keeps every other field.
    """
    return dataclasses.replace(pre, line=pre.line.pad(n_slot, n_bin))


@dataclasses.dataclass(frozen=True)
class ProfileReadout:
    """Settings of a grid point solved for reading star parameters off the chi2 profile: the
    map nearly free (lambda a small fraction of the working one, the map's bounds active as
    in every solve) and solved to convergence, so that the regulariser does not pull the chi2
    minimum and the landscape carries no solver noise. The nearly free map is ill-conditioned:
    the L-BFGS solvers' relative-reduction test stops them in its flat valley well before the
    minimum, the Gauss-Newton solver reaches it in a few hundred iterations.

    Attributes:
        lmbd_fraction: lambda of the read-out as a fraction of the problem's lambda.
        solver, tol, maxiter: the solve's back end ("auto": Gauss-Newton where it fits the
            model, :func:`dopplermap.solvers.choose_solver`) and stopping rule.
        dof: read ``chi2_total + dof`` (:func:`effective_dof`) instead of ``chi2_total``: the
            nearly free map fits part of the noise, as much more as it has effective
            parameters, and their number moves with the star parameters.
    """

    lmbd_fraction: float = 0.01
    solver: str = "auto"
    tol: float = 1e-10
    maxiter: int = 5000
    dof: bool = True

    def settings(self, settings: Settings) -> dict:
        """The fields of ``settings`` the read-out replaces (``settings.replace(**...)``)."""
        return dict(lmbd=settings.lmbd * self.lmbd_fraction, solver=self.solver, tol=self.tol,
                    maxiter=max(self.maxiter, settings.maxiter))


PROFILE_READOUT = ProfileReadout()
"""The profiled read-out's settings (``grid --readout profiled``)."""


def evaluate_point(problem: Problem, params: dict, x0=None, *, dof: bool = False,
                   support: SupportFit | None = None, kept: PointSolve | None = None, keep: bool = False) -> dict:
    """Re-precompute and re-solve at one grid point; returns the table row (a dict).

    The point is ``problem`` with the grid parameters substituted (:meth:`Problem.replace`),
    so gravity darkening, a light curve, the synthesis method and the settings carry over.
    Row fields: the parameters, ``chi2`` (reduced, line profiles), ``chi2_total``
    (un-reduced, ``chi2 * n_epoch * n_vel``: the read-outs' column), ``chi2_lc`` (reduced, the
    light curves of a joint fit, which shape each point's map but are not read; else NaN), ``loss``, ``regulariser``, ``entropy`` (the
    seed's entropy of the map, whatever the regulariser), ``iterations``, ``success``,
    ``radius`` (R_sun, implied by the point's rotation, :attr:`dopplermap.geometry.StarParams.radius_rsun`),
    ``logg`` (cgs, where the problem's mass is known, else NaN), ``status`` (``"ok"``) and
    ``reason`` (empty), ``dof`` and ``chi2_dof`` (``chi2_total + dof``): with ``dof``
    the solve's effective number of parameters (:func:`effective_dof`), else NaN;
    ``chi2_support``: with ``support`` (:class:`SupportFit`) the ``chi2_total`` of the map
    refitted from this solve with only the support's cells free (:func:`solve_on_support`),
    else NaN. A point :func:`point_refusal` refuses is not solved here either: its row is
    :func:`refused_row`.

    ``kept``: this point's solve as an earlier call kept it (:class:`PointSolve`, same problem
    and settings): its columns and map are used and the point is not solved again (``x0`` is
    then unused). ``keep``: the row also carries the solve as ``row["solve"]`` (a
    :class:`PointSolve`; not a table column).
    """
    reason = point_refusal(require_problem(problem, "evaluate_point"), params)
    if reason is not None:
        return refused_row(problem, params, reason)
    star, comps = apply_parameters(problem, params)
    point = problem.replace(star=star, components=comps)
    if kept is None:
        pre = pad_precomputed(point.pre)
        res = invert(pre, point.obs, **point.invert_kwargs(), x0=x0)
        k = n_windows(pre)  # time windows: the mean of the windows' entropies (as the objective's)
        ent = float(np.mean([_seed_entropy(jnp.asarray(c), jnp.asarray(h), pre.cell_area)
                             for c, h in zip(np.reshape(res.fssc, (k, -1)), np.reshape(res.fssh, (k, -1)),
                                             strict=True)]))
        kept = PointSolve(fssc=np.asarray(res.fssc, float), fssh=np.asarray(res.fssh, float),
                          rv=np.asarray(res.rv, float), amp=np.asarray(res.amp, float), chi2=float(res.chi2),
                          loss=float(res.loss), regulariser=float(res.regulariser_value), entropy=ent,
                          iterations=int(res.iterations), success=bool(res.success),
                          chi2_lc=math.nan if res.chi2_lc is None else float(res.chi2_lc))
    obs = point.obs
    n_data = obs.n_epoch * obs.n_vel
    chi2_total = kept.chi2 * n_data
    n_dof = effective_dof(point, kept) if dof else math.nan
    chi2_support = math.nan
    if support is not None:
        refit = solve_on_support(problem, params, support.cool, support.hot, kept.x, readout=support.readout)
        chi2_support = refit.chi2 * n_data
    row = dict(params, chi2=kept.chi2, chi2_total=chi2_total, chi2_lc=kept.chi2_lc, loss=kept.loss,
               regulariser=kept.regulariser,
               entropy=kept.entropy, iterations=kept.iterations, success=kept.success,
               **_star_columns(problem, star), status="ok", reason="", dof=n_dof, chi2_dof=chi2_total + n_dof,
               chi2_support=chi2_support)
    if keep:
        row["solve"] = kept
    return row


_seed_entropy = jax.jit(seed_entropy)  # one program per grid size, not one per operation (eagerly)


@dataclasses.dataclass(frozen=True, eq=False)
class PointSolve:
    """A grid point's regularised solve, kept so that it need not be solved again
    (:func:`evaluate_point`'s ``keep`` and ``kept``; :func:`grid_search`'s ``solutions`` file):
    its map (``fssc``, ``fssh``, ``rv``, ``amp``) and the table's columns of it."""

    fssc: np.ndarray
    fssh: np.ndarray
    rv: np.ndarray
    amp: np.ndarray
    chi2: float
    loss: float
    regulariser: float
    entropy: float
    iterations: int
    success: bool
    chi2_lc: float = math.nan  # reduced chi-square of the light curves (a joint fit), else NaN

    @property
    def x(self) -> np.ndarray:
        """The solve's vector ``[fssc, fssh, rv, amp]`` (a start for :func:`solve_on_support`)."""
        return np.concatenate([self.fssc, self.fssh, self.rv, self.amp])

    def to_json(self) -> dict:
        """The solve as JSON data (floats written exactly: ``repr`` round trips)."""
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict) -> PointSolve:
        """The solve of :meth:`to_json`'s data (a missing or malformed field raises KeyError/ValueError/TypeError)."""
        arrays = {k: np.asarray(data[k], dtype=float) for k in ("fssc", "fssh", "rv", "amp")}
        if any(a.ndim != 1 for a in arrays.values()):
            raise ValueError("a map is not a list of numbers")
        return cls(**arrays, chi2=float(data["chi2"]), loss=float(data["loss"]),
                   regulariser=float(data["regulariser"]), entropy=float(data["entropy"]),
                   iterations=int(data["iterations"]), success=bool(data["success"]),
                   chi2_lc=float(data.get("chi2_lc", math.nan)))


def dof_refusal(problem: Problem) -> str | None:
    """Why :func:`effective_dof` cannot count ``problem``'s fitted parameters, or None: what
    :func:`dopplermap.uncertainty.effective_dof_refusal` refuses, a problem given as a synthesis
    form, and an offset prior (which the count leaves out)."""
    if problem.form is not None:
        return "it needs a line data set built from a grid"
    if problem.settings.offset_sigma is not None:
        return "the offsets have a prior (offset_sigma)"
    return effective_dof_refusal(problem)


def effective_dof(problem: Problem, res: InversionResult) -> float:
    """The effective number of parameters of a solve at ``problem``'s lambda:
    ``trace(J (J^T W J + (N / 2) lambda d^2R)^-1 J^T W)`` at ``res`` (the trace of the influence
    matrix, :func:`dopplermap.uncertainty.effective_dof`; a factor on a bound does not move
    with the data and counts nothing).

    On noisy data the fitted chi2 is lower than the noise-free one by about this much (for a
    linear model whose influence matrix is a projection, exactly in expectation). Where the map
    is nearly free its value moves with the star parameters (each spotted cell a free
    parameter, each cell pinned at the floor none), so a chi2 profile prefers the parameters
    that give the map the most room to fit the noise; ``chi2 + dof`` (Mallows' Cp, Stein's
    unbiased risk estimate) is, for such a linear model, the noise-free profile plus a constant
    in expectation. The bounded, nonlinear map fit departs from that (benchmarks/RESULTS.md,
    "The read-outs on the 2500-cell grid").
    """
    return float(influence(problem, res).p_eff)


def influence(problem: Problem, res: InversionResult) -> EffectiveDof:
    """The influence matrix of a solve at ``problem``'s lambda (:func:`effective_dof`'s count):
    ``p_eff = tr A`` and ``tr_a2 = tr A'A`` (:class:`dopplermap.uncertainty.EffectiveDof`). For a
    linear fit the noise lowers the expected chi2 by ``2 tr A - tr A'A`` (``N - nu``); ``tr A``
    alone where ``A`` is a projection (every direction fitted fully or not at all)."""
    reason = dof_refusal(problem)
    if reason is not None:
        raise DopplermapInputError(f"effective_dof: {reason}")
    at = _AtLambda(np.asarray(res.fssc, dtype=float), np.asarray(res.fssh, dtype=float),
                   np.asarray(res.rv, dtype=float), np.asarray(res.amp, dtype=float),
                   float(problem.settings.lmbd), problem.settings.regulariser, float(getattr(res, "chi2", math.nan)))
    return uncertainty_dof(problem, at)


@dataclasses.dataclass(frozen=True)
class _AtLambda:
    """A map read at the problem's lambda and regulariser (what :func:`effective_dof` counts)."""

    fssc: np.ndarray
    fssh: np.ndarray
    rv: np.ndarray
    amp: np.ndarray
    lmbd: float
    regulariser: str
    chi2: float

    @property
    def x(self) -> np.ndarray:
        return np.concatenate([self.fssc, self.fssh, self.rv, self.amp])


@dataclasses.dataclass(frozen=True)
class SupportReadout:
    """Settings of the support refit (``grid --readout support``): the regularised solves at
    every grid point choose where the spots are; the map is then refitted at every point with
    only those cells free and no regulariser, so that the data alone place the chi2 minimum.

    The support is the cells whose filling factor exceeds ``threshold`` (each spot component
    apart) in the regularised map at the grid's best point, grown by every cell whose centre
    lies within ``dilate_deg`` of one (so that a spot can move as the star parameters change).
    It is the same at every point: the number of free parameters does not move with the star
    parameters and the chi2 profile needs no effective-parameter correction.

    Attributes:
        threshold: filling factor above which a cell of the regularised map is in the support.
        dilate_deg: the support grown by this angular radius, deg (0: not grown).
        lmbd: the refit's lambda (0: the data alone; the cells outside the support are held
            at the floor, where the regulariser is the same at every point).
        tol, maxiter: the refit's stopping rule (Gauss-Newton, :mod:`dopplermap.solvers.newton`).
    """

    threshold: float = 0.05
    dilate_deg: float = 5.0
    lmbd: float = 0.0
    tol: float = 1e-10
    maxiter: int = 5000


SUPPORT_READOUT = SupportReadout()
"""The support refit's settings (``grid --readout support``)."""

SUPPORT_CROWDED = 0.5
"""A support refit with more free parameters than this fraction of its data points is warned
about (:meth:`SupportFit.crowded`): its chi2 minimum is fitted noise, whose profile over the star
parameters is flat (on the 2500-cell calibration stars the refits of 232-382 parameters for
280-1120 data points had information bounds of 30-90 deg; docs/parameters.md)."""


def support_mask(grid, fill, threshold: float = SUPPORT_READOUT.threshold,
                 dilate_deg: float = SUPPORT_READOUT.dilate_deg) -> np.ndarray:
    """(n_cell,) bool: the cells of ``grid`` whose ``fill`` exceeds ``threshold``, grown by every
    cell whose centre lies within ``dilate_deg`` (deg) of one of them."""
    fill = np.asarray(fill, dtype=float)
    if fill.shape != (grid.n_cell,):
        raise DopplermapInputError(f"support_mask: fill has shape {fill.shape}, the grid {grid.n_cell} cells")
    mask = fill > threshold
    if dilate_deg <= 0 or not mask.any():
        return mask
    xyz = grid.unit_vectors()
    return np.max(xyz @ xyz[mask].T, axis=1) >= np.cos(np.radians(dilate_deg))


def solve_on_support(problem: Problem, params: dict, support_cool, support_hot, x0=None, *,
                     readout: SupportReadout = SUPPORT_READOUT) -> InversionResult:
    """The map refitted at one grid point with only the support's cells free: the filling
    factors of the cells outside ``support_cool`` / ``support_hot`` (bool, (n_cell,)) held at
    the floor, the others within their bounds, rv and amp as the problem's settings say; at
    ``readout.lmbd`` (default no regulariser), Gauss-Newton to ``readout.tol``. ``x0``: the
    start (a solve's ``[fssc, fssh, rv, amp]``, clipped into the support; default the seed's)."""
    require_problem(problem, "solve_on_support").single("solve_on_support (the Gauss-Newton refit)")
    if problem.windows is not None:
        raise DopplermapInputError("solve_on_support: the refit fits one static map; the problem has time windows")
    star, comps = apply_parameters(problem, params)
    point = problem.replace(star=star, components=comps)
    n = point.grid.n_cell
    keep = [np.asarray(m, dtype=bool) for m in (support_cool, support_hot)]
    if any(m.shape != (n,) for m in keep):
        raise DopplermapInputError(f"solve_on_support: a support mask's shape is not ({n},)")
    settings = point.settings.replace(lmbd=readout.lmbd, tol=readout.tol, maxiter=readout.maxiter, solver="newton")
    setup = prepare(pad_precomputed(point.pre), point.obs, settings, x0=x0, lightcurve=point.lightcurve,
                    solve=SolveOptions())
    lower, upper = setup.lower.copy(), setup.upper.copy()
    for k, m in enumerate(keep):  # lower = upper: the Gauss-Newton solver holds the cell
        upper[k * n:(k + 1) * n][~m] = FILL_MIN
        lower[k * n:(k + 1) * n][~m] = FILL_MIN
    setup = dataclasses.replace(setup, lower=lower, upper=upper, x0=np.clip(setup.x0, lower, upper))
    res = finish(setup, solve_newton(setup, None), "newton")
    check_result(res, point.obs, tol=setup.tol, maxiter=setup.maxiter)
    return res


@dataclasses.dataclass(frozen=True)
class PointColumns:
    """The optional columns of a grid point (:func:`evaluate_point`'s keywords, given to
    :func:`grid_search` as loose keywords): ``dof`` (count the solve's effective parameters),
    ``support`` (a :class:`SupportFit` to refit the map on) and ``solutions`` (the file of the
    points' regularised solves, :func:`grid_search`: a search without ``support`` keeps each
    point's there, one with ``support`` refits a kept solve instead of solving the point again)."""

    dof: bool = False
    support: SupportFit | None = None
    solutions: str | os.PathLike | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class SupportFit:
    """A support for the refit of every grid point (:func:`evaluate_point`'s ``support``):
    ``cool`` and ``hot`` (n_cell,) bool masks of the cells left free, and the refit's
    :class:`SupportReadout`; ``at``: the grid point whose regularised map chose it."""

    cool: np.ndarray
    hot: np.ndarray
    readout: SupportReadout = SUPPORT_READOUT
    at: dict | None = None
    n_free: int | None = None  # the refit's free parameters: the support's cells and the fitted nuisances
    n_data: int | None = None  # the data points the refit fits (line profiles and light curves)

    def summary(self) -> dict:
        """What grid.json records of the support."""
        return dict(at=self.at, cool_cells=int(np.sum(self.cool)), hot_cells=int(np.sum(self.hot)),
                    threshold=self.readout.threshold, dilate_deg=self.readout.dilate_deg, lmbd=self.readout.lmbd,
                    tol=self.readout.tol, n_free=self.n_free, n_data=self.n_data)

    def crowded(self) -> str | None:
        """Why this support leaves the refit's chi2 profile uninformative, or None: more free
        parameters than :data:`SUPPORT_CROWDED` of the data points (the refit then fits the noise
        at every grid point, and its chi2 hardly moves with the star parameters)."""
        if self.n_free is None or self.n_data is None or self.n_free <= SUPPORT_CROWDED * self.n_data:
            return None
        cells = int(np.sum(self.cool)) + int(np.sum(self.hot))
        nuisances = f" and {self.n_free - cells} fitted rv shifts and offsets" if self.n_free > cells else ""
        return (f"the support refit frees {self.n_free} parameters ({int(np.sum(self.cool))} cool and "
                f"{int(np.sum(self.hot))} hot cells{nuisances}) for {self.n_data} data points: "
                "with so many it fits the noise at every grid point and its chi2 profile says little about the "
                "parameters; use fewer, larger cells ([grid] n_cell) integrated over sub-cells ([grid] subdivide)")


def support_from_point(problem: Problem, params: dict, readout: SupportReadout = SUPPORT_READOUT,
                       solve: PointSolve | None = None) -> SupportFit:
    """The support of the regularised map at one grid point (``problem``'s settings, from the
    flat start, as :func:`evaluate_point` solves it): each component's cells above
    ``readout.threshold``, grown by ``readout.dilate_deg`` (:func:`support_mask`). ``solve``:
    that point's solve as a search kept it (:class:`PointSolve`), read instead of solving again."""
    star, comps = apply_parameters(require_problem(problem, "support_from_point"), params)
    point = problem.replace(star=star, components=comps)
    if solve is None:
        solve = invert(pad_precomputed(point.pre), point.obs, **point.invert_kwargs())
    masks = [support_mask(point.grid, f, readout.threshold, readout.dilate_deg) for f in (solve.fssc, solve.fssh)]
    obs, settings = point.obs, point.settings
    n_free = int(sum(np.sum(m) for m in masks)) + obs.n_epoch * (int(settings.fit_rv) + int(settings.fit_amp))
    n_data = obs.n_epoch * obs.n_vel + sum(np.size(d.flux) for d in point.lightcurve_bands)
    return SupportFit(masks[0], masks[1], readout, at={k: float(v) for k, v in params.items()}, n_free=n_free,
                      n_data=int(n_data))


MODEL_ERROR_REFINE = 4
"""How many times more cells the grid :func:`model_grid_error` compares the problem's with."""


def _refined_grid(grid, factor: int):
    """The same kind of grid with ``factor`` times the cells (HEALPix: the nearest power of
    two of nside), or None where there is none to build (a distorted surface)."""
    if grid is None or grid.surface is not None:
        return None
    if grid.kind == "bands":
        return latitude_band_grid(factor * grid.n_cell)
    nside = round(math.sqrt(grid.n_cell / 12))
    return healpix_grid(nside * 2 ** max(1, round(math.log2(factor) / 2)))


def model_grid_error(problem: Problem, params: dict | None = None, factor: int = MODEL_ERROR_REFINE) -> float | None:
    """The surface grid's discretisation error in units of chi2: ``sum(((m_n - m_fine) / err)^2)``
    over the line profiles of the unspotted star (rv 0, amp 0) at grid point ``params``, with
    ``m_n`` the model on the problem's cells and ``m_fine`` on ``factor`` times as many.

    A chi2 read-out is biased by the grid where this is not well below its Delta chi2 (the map
    absorbs part of the error, the rest moves the minimum), so a grid that reads star
    parameters needs cells fine enough for it. None where it is not estimated: several line
    data sets, a form given as data, a light curve alone, time windows, a distorted surface.
    """
    problem = require_problem(problem, "model_grid_error")
    if (problem.lines or problem.form is not None or problem.photometry_only or problem.windows is not None
            or problem.obs is None):
        return None
    fine = _refined_grid(problem.grid, factor)
    if fine is None:
        return None
    star, comps = apply_parameters(problem, params or {})
    point = problem.replace(star=star, components=comps)
    obs = point.obs
    diff = (np.asarray(_unspotted(point.pre)) - np.asarray(_unspotted(point.replace(grid=fine).pre))) / np.asarray(obs.err)
    return float(np.sum(diff ** 2))


@jax.jit
def _unspotted(pre):
    """The unspotted star's model profiles (rv 0, amp 0) of ``pre``: one compiled program per model
    shape (run eagerly, each of the model's operations compiles its own: ~1 s of a first run)."""
    blank = jnp.zeros(pre.n_cell)
    zero = jnp.zeros(pre.n_epoch)
    return forward(blank, blank, zero, zero, pre)


JITTER_REFERENCE = dict(solver="auto", tol=1e-12, maxiter=5000)
"""The converged solve :func:`chi2_jitter` compares a grid point's with ("auto" resolved for
accuracy: Gauss-Newton wherever it fits the model, whatever the compile state; see
:func:`_sweep_solver`)."""


def chi2_jitter(problem: Problem, params: dict, chi2_total: float | None = None) -> float:
    """``|chi2_total|`` difference at grid point ``params`` between the problem's solve and
    :data:`JITTER_REFERENCE` (Gauss-Newton to convergence where it applies), both from the flat start: the noise
    a grid's chi2 landscape carries from where its solves stop (Delta chi2 below it is noise).
    ``chi2_total``: the problem's own solve there as a grid search recorded it (the same solve:
    :func:`evaluate_point` with the problem's settings), so that only the reference is solved."""
    # the reference's "auto" resolved for accuracy: chosen on compile time alone it can be L-BFGS-B,
    # which at tol 1e-12 still stops above the minimum (a jitter of the reference's own)
    reference = _sweep_solver(problem.replace(settings=problem.settings.replace(**JITTER_REFERENCE)), 1,
                              what="chi2_jitter reference", accurate=True)
    rows = ([] if chi2_total is not None else [evaluate_point(problem, params)]) + [evaluate_point(reference, params)]
    if any(r["status"] != "ok" for r in rows):
        return math.nan
    own = float(chi2_total) if chi2_total is not None else rows[0]["chi2_total"]
    return float(abs(own - rows[-1]["chi2_total"])) if math.isfinite(own) else math.nan


def point_star(problem: Problem, params: dict) -> StarParams:
    """The star of ``problem`` at grid point ``params`` (its star fields substituted)."""
    return problem.star.replace(**{k: float(params[k]) for k in _STAR_KEYS if k in params})


def _star_columns(problem: Problem, star: StarParams) -> dict:
    """The table's ``radius`` (R_sun) and ``logg`` (cgs; NaN without a mass) of a point's star."""
    r = float(star.radius_rsun)
    mass = problem.stellar_mass
    return dict(radius=r, logg=log_g(mass, r) if mass is not None else math.nan)


def point_refusal(problem: Problem, params: dict) -> str | None:
    """Why the star at grid point ``params`` cannot exist, or None: the physical checks of one
    point (where the problem's mass is known, :attr:`Problem.stellar_mass`: rotation at or
    beyond break-up, ``omega^2 R^3 / (G M) >= 1`` with the implied radius R). Checks of the
    values themselves (an inclination outside (0, 90], ...) concern the whole grid and
    are :func:`validate_points`' (errors before any solve)."""
    mass = problem.stellar_mass
    if mass is None:
        return None
    return breakup(point_star(problem, params), mass)


def refused_row(problem: Problem, params: dict, reason: str) -> dict:
    """The table row of a refused point: its parameters, the implied radius (and log g),
    ``status`` ``"refused"``, the ``reason``, NaN for every result and 0 iterations."""
    nan = math.nan
    return dict(params, chi2=nan, chi2_total=nan, chi2_lc=nan, loss=nan, regulariser=nan, entropy=nan, iterations=0,
                success=False, **_star_columns(problem, point_star(problem, params)), status="refused",
                reason=reason, dof=nan, chi2_dof=nan, chi2_support=nan)


# ------------------------------------------------------------------------- grid search

_RESULT_COLUMNS = ("chi2", "chi2_total", "chi2_lc", "loss", "regulariser", "entropy", "iterations", "success", "radius",
                   "logg", "dof", "chi2_dof", "chi2_support", "status", "reason")
# what makes two rows comparable: the solve settings and the problem, on every row
_SETTING_COLUMNS = ("lmbd", "regulariser_kind", "tol", "maxiter", "fit_rv", "fit_amp", "problem")
_INT_COLUMNS = ("point", "iterations", "success", "maxiter", "fit_rv", "fit_amp")
_STR_COLUMNS = ("regulariser_kind", "problem", "status", "reason")
_STAR_KEYS = ("inclination", "vsini", "domega", "period")


def problem_fingerprint(problem: Problem) -> str:
    """Fingerprint of a search problem: data, star, grid, components, light curve and model
    settings (not the solver settings, which the table records in their own columns, nor
    the file name it came from)."""
    fields = {f.name: getattr(problem, f.name) for f in dataclasses.fields(problem)
              if f.name not in ("settings", "source", "files")}
    if fields.get("mass") is None:  # no mass: the fingerprint of a problem that had no such field
        fields.pop("mass", None)
    if fields.get("windows") is None:  # a static map: likewise
        fields.pop("windows", None)
    else:  # the coupling is a setting the table has no column for
        fields["lmbd_time"] = float(problem.settings.lmbd_time)
        fields["time_coupling"] = str(problem.settings.time_coupling)
    if fields.get("subdivide") == 1:  # no sub-cells: likewise
        fields.pop("subdivide", None)
    return fingerprint(type(problem).__qualname__, fields)


def _settings_row(settings: Settings, problem_fp: str) -> dict:
    return {"lmbd": float(settings.lmbd), "regulariser_kind": str(settings.regulariser), "tol": float(settings.tol),
            "maxiter": int(settings.maxiter), "fit_rv": int(bool(settings.fit_rv)),
            "fit_amp": int(bool(settings.fit_amp)), "problem": problem_fp}


def _axis_values(name: str, values) -> np.ndarray:
    if name not in GRID_PARAMETERS:
        raise DopplermapInputError(f"unknown grid parameter {name!r}; known: {sorted(GRID_PARAMETERS)}")
    try:
        v = np.atleast_1d(np.asarray(values, dtype=float))
    except (TypeError, ValueError):
        raise DopplermapInputError(f"grid parameter {name!r}: need numbers, got {values!r}") from None
    if v.ndim != 1 or v.size < 1 or not np.all(np.isfinite(v)):
        raise DopplermapInputError(f"grid parameter {name!r}: need a 1-D list of finite values, got {values!r}")
    if np.unique(v).size != v.size:
        raise DopplermapInputError(f"grid parameter {name!r} has repeated values")
    return v


def count_points(axes: dict) -> int:
    """Number of points of the Cartesian grid ``axes`` (without building it)."""
    if not axes:
        raise DopplermapInputError("grid search needs at least one parameter axis")
    return math.prod(int(np.size(v)) for v in axes.values())


def check_grid_size(axes: dict, max_points: int | None = None) -> int:
    """Refuse a grid of more than ``max_points`` points (default
    :data:`dopplermap.memory.MAX_GRID_POINTS`; each is one inversion); returns the count."""
    limit = MAX_GRID_POINTS if max_points is None else int(max_points)
    n = count_points(axes)
    if n > limit:
        sizes = ", ".join(f"{k}: {np.size(v)}" for k, v in axes.items())
        longest = max(axes, key=lambda k: np.size(axes[k]))
        raise DopplermapInputError(f"grid search of {n:.4g} points ({sizes}) is more than the limit of {limit} "
                                   f"(each point is one inversion): use a larger step for {longest} or fewer "
                                   "values (or raise max_points / --max-points)")
    return n


def grid_points(axes: dict, max_points: int | None = None) -> list[dict]:
    """Cartesian product of ``{name: values}`` as a list of dicts (last axis fastest)."""
    if not axes:
        raise DopplermapInputError("grid search needs at least one parameter axis")
    axes = _renamed(axes)
    names = list(axes)
    vals = [_axis_values(n, axes[n]) for n in names]
    check_grid_size(dict(zip(names, vals, strict=True)), max_points)
    return [dict(zip(names, (float(x) for x in combo), strict=False)) for combo in itertools.product(*vals)]


def validate_points(problem: Problem, points: list[dict]) -> None:
    """Check every grid value before the first solve: each axis value on its own (line
    profile, temperatures, Gaussian broadening) and the star of every point (so a bad
    inclination or vsini fails now, not hours into a search)."""
    if not points:
        return
    for name in points[0]:
        for v in sorted({p[name] for p in points}):
            try:
                apply_parameters(problem, {name: v})
            except DopplermapInputError as exc:
                raise DopplermapInputError(f"grid parameter {name}={v:g}: {exc}") from None
    star_keys = [k for k in points[0] if k in _STAR_KEYS]
    if star_keys:
        for p in points:
            try:
                check_star(problem.star.replace(**{k: p[k] for k in star_keys}))
            except DopplermapInputError as exc:
                where = ", ".join(f"{k}={p[k]:g}" for k in star_keys)
                raise DopplermapInputError(f"grid point {where}: {exc}") from None


def _fmt(v) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, (bool, np.bool_)):
        return "1" if v else "0"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return repr(float(v))


def _cell(k: str, v: str):
    if k in _STR_COLUMNS:
        return v
    return int(v) if k in _INT_COLUMNS else float(v)


@reader("grid-search table")
def read_table(path) -> list[dict]:
    """Rows of a grid-search CSV (floats; ``point``, ``iterations``, ``success``, ``maxiter``,
    ``fit_rv``, ``fit_amp`` ints; ``regulariser_kind``, ``problem``, ``status`` and ``reason``
    strings). Refused points are rows too (``status`` ``"refused"``, NaN results):
    :func:`computed_rows` leaves them out.

    A last line without its newline (a write cut off by a kill) is ignored.
    """
    path = Path(path)
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]
    if not lines:
        return []
    reader = csv.DictReader(lines)
    out = []
    for i, row in enumerate(reader):
        try:
            out.append({k: _cell(k, v) for k, v in row.items()})
        except (TypeError, ValueError) as exc:
            raise DopplermapInputError(f"{path}: row {i + 2} is malformed ({exc})") from None
    return out


def _header(names) -> list[str]:
    return ["point", *names, *_RESULT_COLUMNS, *_SETTING_COLUMNS]


def _settings_diff(row: dict, want: dict) -> str | None:
    """One line naming the settings in which a table row differs from this search, or None."""
    diffs = []
    for k, v in want.items():
        have = row.get(k)
        same = have == v if isinstance(v, str) else (have is not None and abs(float(have) - v) <= 1e-12 * max(1.0, abs(v)))
        if not same:
            label = "problem fingerprint (data, star, grid, model)" if k == "problem" else k
            diffs.append(f"{label} {have} in the table vs {v} now")
    return "; ".join(diffs) or None


def _prepare_table(path: Path, names, points, resume: bool, settings_row: dict | None = None) -> set[int]:
    """Create the table, or check an existing one and return its finished point ids.

    A resumed table must have this search's columns, grid points and, on every row, the
    same solve settings and problem fingerprint (``settings_row``); any difference is
    refused with a one-line diff, so incomparable rows never share a table.
    """
    header = _header(names)
    if path.exists() and path.stat().st_size > 0:
        if not resume:
            raise DopplermapInputError(f"{path} exists; pass resume=True (--resume) to continue it, or remove it")
        with path.open(errors="replace") as fh:  # a damaged header is refused below as another search's
            first = fh.readline().rstrip("\n").split(",")
        if first != header:
            raise DopplermapInputError(f"{path}: columns {first} differ from this search's {header}; not the same search")
        rows = read_table(path)
        done = set()
        for r in rows:
            p = r["point"]
            if not (0 <= p < len(points)) or any(abs(r[n] - points[p][n]) > 1e-12 * max(1.0, abs(r[n])) for n in names):
                raise DopplermapInputError(f"{path}: row for point {p} does not match this search's grid; not the same search")
            diff = None if settings_row is None else _settings_diff(r, settings_row)
            if diff:
                raise DopplermapInputError(f"{path}: resume refused, not the same search: {diff}")
            done.add(p)
        # rewrite without any cut-off last line and without duplicates (keep the first)
        seen: set[int] = set()
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        for r in rows:
            if r["point"] not in seen:
                seen.add(r["point"])
                w.writerow([_fmt(r[c]) if c not in _INT_COLUMNS else int(r[c]) for c in header])
        write_text(path, buf.getvalue())
        return done
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, ",".join(header) + "\n")
    return set()


def _append_row(path: Path, names, point: int, row: dict, settings_row: dict | None = None) -> None:
    extra = settings_row or {}
    buf = io.StringIO()  # csv quoting: a refusal's reason holds commas
    csv.writer(buf, lineterminator="\n").writerow(
        [str(point), *(_fmt(row[n]) for n in names), *(_fmt(row[c]) for c in _RESULT_COLUMNS),
         *(_fmt(extra.get(c, "")) for c in _SETTING_COLUMNS)])
    line = buf.getvalue()
    with path.open("a") as fh:  # one write per row; a cut-off row is dropped on resume
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def _sort_table(path: Path) -> None:
    text = path.read_text().splitlines(keepends=True)
    header, body = text[0], text[1:]
    body.sort(key=lambda s: int(s.split(",", 1)[0]))  # the point id, first and never quoted
    write_text(path, header + "".join(body))


SOLVES_KIND = "dopplermap grid-point solves"
"""The first line of a solutions file (:func:`grid_search`'s ``solutions``) names it so."""


def _solves_header(axes: dict, settings_row: dict) -> dict:
    """The first line of a solutions file: what makes its solves this search's (the grid's axes,
    the solve settings and the problem fingerprint, as on every table row)."""
    return {"kind": SOLVES_KIND, "axes": {k: [float(v) for v in np.atleast_1d(vals)] for k, vals in axes.items()},
            **settings_row}


def _solves_diff(have: dict, want: dict) -> str | None:
    """One line naming how a solutions file's first line differs from this search's, or None."""
    if not isinstance(have, dict) or have.get("kind") != SOLVES_KIND:
        return "its first line is not a grid search's solutions header"
    axes, want_axes = have.get("axes"), want["axes"]
    if not isinstance(axes, dict) or list(axes) != list(want_axes):
        return f"axes {list(axes) if isinstance(axes, dict) else axes} in the file vs {list(want_axes)} now"
    for k, v in want_axes.items():
        got = np.asarray(axes[k], dtype=float) if isinstance(axes[k], list) else np.zeros(0)
        if got.shape != (len(v),) or np.any(np.abs(got - v) > 1e-12 * np.maximum(1.0, np.abs(got))):
            return f"values of {k} {axes[k]} in the file vs {v} now"
    return _settings_diff(have, {k: v for k, v in want.items() if k not in ("kind", "axes")})


def _parse_solves(path: Path, want: dict, n_points: int) -> tuple[dict[int, PointSolve], list[str]]:
    """The solves of an existing solutions file, checked against this search's header
    (``want``), and its lines to keep (header, then one per point; a last line cut off by a
    kill is dropped, a repeated point keeps its first)."""
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]
    if not lines:
        return {}, []
    try:
        head = json.loads(lines[0])
    except ValueError:
        head = None
    diff = _solves_diff(head, want)
    if diff:
        raise DopplermapInputError(f"{path}: not the solutions of this search: {diff}")
    solves: dict[int, PointSolve] = {}
    keep = [lines[0]]
    for j, line in enumerate(lines[1:], start=2):
        try:
            data = json.loads(line)
            point, solve = int(data["point"]), PointSolve.from_json(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise DopplermapInputError(f"{path}: line {j} is malformed ({type(exc).__name__}: {exc})") from None
        if not 0 <= point < n_points:
            raise DopplermapInputError(f"{path}: line {j} holds point {point}, not a point of this grid "
                                       f"(0 .. {n_points - 1})")
        if point not in solves:
            solves[point] = solve
            keep.append(line)
    return solves, keep


def _prepare_solves(path: Path, header: dict, n_points: int, resume: bool) -> dict[int, PointSolve]:
    """Create the solutions file (its header, written atomically), or check an existing one
    (only with ``resume``, as the table) and return its solves, rewritten atomically without a
    cut-off last line or repeated points."""
    if path.exists() and path.stat().st_size > 0:
        if not resume:
            raise DopplermapInputError(f"{path} exists; pass resume=True (--resume) to continue it, or remove it")
        solves, lines = _parse_solves(path, header, n_points)
        if lines:
            write_text(path, "".join(lines))
            return solves
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(header) + "\n")
    return {}


def _append_solve(path: Path, point: int, solve: PointSolve) -> None:
    line = json.dumps({"point": int(point), **solve.to_json()}) + "\n"
    with path.open("a") as fh:  # one write per point; a cut-off line is dropped on resume
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def read_solutions(path, problem: Problem, axes: dict) -> dict[int, PointSolve]:
    """The regularised solves a grid search of ``problem`` over ``axes`` kept in ``path``
    (:func:`grid_search`'s ``solutions``), by point id; ``{}`` where there is no such file.
    A file of another search (grid, settings or problem) is refused in one line."""
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return {}
    problem = require_problem(problem, "read_solutions")
    axes = _renamed(axes)
    header = _solves_header(axes, _settings_row(problem.settings, problem_fingerprint(problem)))
    return _parse_solves(path, header, count_points(axes))[0]


def grid_search(problem: Problem, axes: dict, table, *, resume: bool = False, cluster: Cluster | None = None,
                progress=None, max_points: int | None = None, **columns) -> list[dict]:
    """Invert at every point of a Cartesian parameter grid; one CSV row per finished point.

    Args:
        problem: :class:`dopplermap.problem.Problem`, solved with its settings (for others:
            ``problem.replace(settings=...)``). axes: ``{parameter: values}`` (see ``GRID_PARAMETERS``).
        table: CSV path. Rows are appended as points finish (each point is solved from the
            seed's flat start, so results do not depend on the order of execution); at the
            end the table is sorted by point id. Every row also carries the solve settings
            (``lmbd``, ``regulariser_kind``, ``tol``, ``maxiter``, ``fit_rv``, ``fit_amp``)
            and the ``problem`` fingerprint (:func:`problem_fingerprint`).
        resume: continue an existing table, skipping its finished points (a row cut off by
            a kill is dropped); without it an existing table is an error. A table of
            another grid, other settings or another problem is refused with a one-line diff.
        cluster: the Dask cluster the points run on (:class:`Cluster`); None (default):
            in this process, a point per usable CPU at a time
            (:func:`dopplermap.plan.member_threads`: each point's compiled solve keeps about
            one core busy, and every point gets the result it gets alone).
        max_points: most grid points (default :data:`dopplermap.memory.MAX_GRID_POINTS`).
        progress: optional ``progress(n_done, n_total, row)`` called per finished point.
        columns: the fields of :class:`PointColumns`, :func:`evaluate_point`'s optional columns:
        dof: also count each solve's effective parameters (the ``dof`` and ``chi2_dof``
            columns). support: also refit each point's map on this :class:`SupportFit` (the
            ``chi2_support`` column). solutions: a file of the points' regularised solves
            (:class:`PointSolve`, one JSON line each). Without ``support`` the search keeps each
            point's solve there as it finishes (the file is created with its header atomically,
            continued only with ``resume`` and refused, as the table, when another search made
            it). With ``support`` it is read (:func:`read_solutions`): a point kept there is not
            solved again, its kept map starts the refit and its columns fill the row; a point
            missing there is solved.
    Every grid value is validated before the first solve (:func:`validate_points`; an error
    there concerns the whole grid). A point whose star cannot exist (:func:`point_refusal`)
    is recorded as refused, with its reason (``status``/``reason`` columns, NaN results),
    and the other points are solved. Every row carries the implied ``radius`` and ``logg``
    (:func:`evaluate_point`).

    While it runs the table is locked (``TABLE.lock``, :func:`dopplermap.atomic.exclusive_lock`):
    a second process on the same table is refused in one line, so two resumes never
    write a point twice.
    Returns:
        All rows of the finished table, sorted by point id (refused points included).
    """
    settings = require_problem(problem, "grid_search").settings
    cols = options_of("grid_search", PointColumns, None, columns)
    dof, support, solutions = cols.dof, cols.support, cols.solutions
    table = Path(table)
    axes = _renamed(axes)
    points = grid_points(axes, max_points)
    names = list(axes)
    check_solver_args(tol=settings.tol, maxiter=settings.maxiter, lmbd=settings.lmbd)
    check(settings.regulariser, REGULARISERS, "regulariser")
    validate_points(problem, points)  # raise on bad parameters before starting any worker
    srow = _settings_row(settings, problem_fingerprint(problem))
    table.parent.mkdir(parents=True, exist_ok=True)
    with grid_lock(table):
        done = _prepare_table(table, names, points, resume, srow)
        todo = [i for i in range(len(points)) if i not in done]
        n_done = len(done)
        kept: dict[int, PointSolve] = {}
        keep = solutions is not None and support is None
        if keep:
            kept = _prepare_solves(Path(solutions), _solves_header(axes, srow), len(points), resume)
        elif solutions is not None:  # the support refit: the first pass's solves start it
            kept = read_solutions(solutions, problem, axes)

        def finish(i, row):
            nonlocal n_done
            solve = row.pop("solve", None)
            if keep and solve is not None and i not in kept:  # before its row: a row's solve is always kept
                _append_solve(Path(solutions), i, solve)
            _append_row(table, names, i, row, srow)
            n_done += 1
            if progress is not None:
                progress(n_done, len(points), row)

        refused = {i: r for i in todo if (r := point_refusal(problem, points[i])) is not None}
        for i, reason in refused.items():  # recorded at once, never sent to a solver
            finish(i, refused_row(problem, points[i], reason))
        todo = [i for i in todo if i not in refused]
        n_solve = sum(i not in kept for i in todo)
        if n_solve:  # one choice for every point, made for the landscape's accuracy
            problem = _sweep_solver(problem, n_solve, what="grid", accurate=True)
        if todo and cluster is None:
            _points_here(problem, points, todo, finish, kept, dof=dof, support=support, keep=keep)
        elif todo:
            from dask.distributed import as_completed

            with Session(cluster, problem) as session:
                futs = {session.submit(evaluate_point, points[i], dof=dof, support=support, kept=kept.get(i),
                                       keep=keep): i for i in todo}
                for fut in as_completed(futs):
                    finish(futs[fut], session.result(fut))
        _sort_table(table)
        return read_table(table)


def _points_here(problem, points, todo, finish, kept: dict, **columns) -> None:
    """:func:`grid_search`'s points in this process: ``finish(i, row)`` in this thread as each
    is done; the points on :func:`~dopplermap.plan.member_threads` threads, each running its own
    solves in its thread (no threads within a point's). The first point is solved alone, so the
    programs every point shares are compiled once before the others start. ``kept``: the points'
    kept solves (:func:`evaluate_point`'s ``kept``), ``columns`` its other keywords."""

    def one(i):
        with plan.members_in_one_thread():
            return evaluate_point(problem, points[i], kept=kept.get(i), **columns)

    threads = plan.member_threads(len(todo))
    log.info("grid: %d point(s) in this process, %d at a time%s", len(todo), threads,
             " (threads)" if threads > 1 else "")
    finish(todo[0], one(todo[0]))
    if threads <= 1:
        for i in todo[1:]:
            finish(i, one(i))
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="dopplermap-point") as pool:
        futures = {pool.submit(one, i): i for i in todo[1:]}
        try:
            for fut in as_completed(futures):
                finish(futures[fut], fut.result())
        except BaseException:  # an error, or Ctrl-C: the points not started are not solved
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def grid_lock(table):
    """The lock :func:`grid_search` holds on ``table`` while it runs (a context manager,
    :func:`dopplermap.atomic.exclusive_lock`: ``TABLE.lock``); hold it around more work on
    the same folder (the CLI: clearing it, the summary), grid_search then keeps it."""
    return exclusive_lock(table, f"the grid-search table {table}")
