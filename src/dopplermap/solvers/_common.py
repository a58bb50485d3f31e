"""Pieces every solver back end shares: bounds, the checked start, feasibility, checks and
the result's set-up context. Below :mod:`dopplermap.solvers` and its back ends, which all import it."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from ..choices import SPOT_COMPONENTS
from ..constants import FILL_MAX, FILL_MIN
from ..errors import DopplermapInputError
from ..model import Precomputed
from ..objective import Layout, LineSets, NoLines, ObjectiveData, Observations, check_sets
from ..result import Outcome

__all__ = ["check_fit_components", "bounds", "start", "project_feasible", "check_match",
           "check_solver_args", "cube_dtype_of",
           "SolveSetup", "RawSolve", "Progress", "report_progress", "LBFGSOptions", "run_members"]


@dataclasses.dataclass(frozen=True)
class LBFGSOptions:
    """The stopping rule and tuning of both L-BFGS loops (scipy's and the compiled one), built
    once and passed as one object (static under ``jit``: every field is a Python number).

    Attributes:
        maxiter: iteration cap. ftol, gtol: relative loss reduction and projected-gradient
            tolerances (scipy L-BFGS-B's criteria; :func:`dopplermap.solvers.scipy_lbfgsb.lbfgsb`
            also ends its restarts on ``ftol``). maxcor: stored correction pairs.
        max_backtrack, c1: the compiled loop's Armijo line search (steps, sufficient decrease).
        max_restarts: memory restarts after a relative-reduction stop.
    """

    maxiter: int = 1000
    ftol: float = 1e-5
    gtol: float = 1e-5
    maxcor: int = 10
    max_backtrack: int = 30
    c1: float = 1e-4
    max_restarts: int = 10

    @classmethod
    def at(cls, tol: float, maxiter: int, maxcor: int = 10) -> LBFGSOptions:
        """One tolerance for both criteria (as ``scipy.optimize.minimize(tol=...)`` sets them)."""
        return cls(maxiter=int(maxiter), ftol=float(tol), gtol=float(tol), maxcor=int(maxcor))


@dataclasses.dataclass(frozen=True, eq=False)
class SolveSetup:
    """A checked solve, as every back end receives it (built once by the front door).

    Attributes:
        layout: the parameter layout. x0, lower, upper: (n,) float64 start and bounds.
        lmbd, regulariser, penalty, tol, maxiter: the objective and the stopping rule.
        pre: the model form the solver iterates on (folded/blocked from a dense model).
        exact_pre: the model as given, for the float64 evaluation of the reported result.
        data: what the loss compares with (:class:`~dopplermap.objective.ObjectiveData`:
            observations, light curve and weights, offset prior).
        fit_components: the spot components fitted. options: back-end options (maxcor ...).
        forms: ``cube_dtype -> form``: the same model in another cube dtype (the problem's
            cached :meth:`~dopplermap.problem.Problem.solve_form`), for a back end that
            iterates on two (Newton's float32 Gauss-Newton products); None: only ``pre``.
    """

    layout: Layout
    x0: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    lmbd: float
    regulariser: str
    penalty: float
    tol: float
    maxiter: int
    pre: Precomputed
    exact_pre: Precomputed
    data: ObjectiveData
    fit_components: tuple[str, ...]
    options: dict = dataclasses.field(default_factory=dict)
    forms: Callable[[str], Precomputed] | None = None

    @property
    def obs(self) -> Observations | tuple:
        return self.data.obs


@dataclasses.dataclass(frozen=True)
class RawSolve:
    """What a back end returns: the solver's point and its bookkeeping; the front door turns
    it into the :class:`~dopplermap.result.InversionResult` (one place for every solver)."""

    x: np.ndarray
    iterations: int
    n_eval: int
    outcome: Outcome
    stop_reason: str
    history: dict
    compile_time: float
    solve_time: float
    extra: dict = dataclasses.field(default_factory=dict)


class Progress:
    """Per-iteration progress of a compiled solve, delivered to ``callback(iteration, history)``.

    The compiled loops call :func:`report_progress` through ``jax.debug.callback`` (so the
    compiled program does not depend on which callback it serves); it forwards to the
    active :class:`Progress`, which keeps the same ``history`` dict as the scipy path
    (``loss``, ``chi2``, ``regulariser`` lists). One compiled solve reports at a time per
    process; a second one started meanwhile in another thread runs without reports.
    """

    _active: Progress | None = None
    _lock = threading.Lock()

    def __init__(self, callback: Callable | None):
        self.callback = callback
        self.history = {"loss": [], "chi2": [], "regulariser": []}
        self.on = False

    def __enter__(self):
        if self.callback is not None:
            with Progress._lock:
                if Progress._active is None:
                    Progress._active, self.on = self, True
        return self

    def __exit__(self, *exc):
        if self.on:
            with Progress._lock:
                Progress._active = None
        return False

    def __call__(self, iteration, loss, chi2, reg):
        self.history["loss"].append(float(loss))
        self.history["chi2"].append(float(chi2))
        self.history["regulariser"].append(float(reg))
        self.callback(int(iteration), self.history)


def _deliver(iteration, loss, chi2, reg):
    p = Progress._active
    if p is not None:
        p(iteration, loss, chi2, reg)


def report_progress(iteration, loss, chi2=None, reg=None):
    """Inside a compiled loop: hand one iteration to the active :class:`Progress` (host side)."""
    nan = jnp.full((), jnp.nan, jnp.result_type(loss))
    jax.debug.callback(_deliver, iteration, loss, nan if chi2 is None else chi2, nan if reg is None else reg,
                       ordered=True)


def check_fit_components(fit_components) -> tuple[str, ...]:
    """The spot components to fit, checked: a non-empty subset of :data:`dopplermap.choices.SPOT_COMPONENTS`."""
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


def start(pre: Precomputed, x0, *, fit_rv: bool, fit_amp: bool, fit_components, layout: Layout | None = None):
    """``(layout, x0, lower, upper)`` of a solve: the checked start (default the seed's) inside its
    bounds; ``layout``: the problem's (default: the plain layout of ``pre``)."""
    layout = Layout(pre.n_cell, pre.n_epoch) if layout is None else layout
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


def check_match(pre: Precomputed, obs: Observations):
    if isinstance(pre, LineSets):
        return check_sets(pre, obs)
    if isinstance(pre, NoLines):
        if obs is not None:
            raise DopplermapInputError("a problem without line profiles takes no observations (obs=None)")
        return None
    if obs.n_epoch != pre.n_epoch:
        raise DopplermapInputError(f"observations have {obs.n_epoch} epochs but the precomputed model has {pre.n_epoch}")
    if obs.n_vel != pre.n_vel:
        raise DopplermapInputError(f"observations have {obs.n_vel} velocities but the precomputed model has {pre.n_vel}")
    if not np.allclose(np.asarray(obs.vels), np.asarray(pre.line.vels), rtol=0, atol=1e-9):
        raise DopplermapInputError("observations' velocity grid differs from the precomputed model's vels")


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


def cube_dtype_of(pre: Precomputed) -> str | None:
    """Dtype of the dense/folded cube a solve used (None for the binned model)."""
    if isinstance(pre, NoLines):
        return None
    line = pre.sets[0].line if isinstance(pre, LineSets) else pre.line
    return line.cube_dtype


def run_members(call: Callable[[int], object], n: int, threads: int = 1) -> list:
    """``[call(i) for i in range(n)]``, on ``threads`` threads when more than one. For members that
    do not depend on each other (none starts from another's map): a compiled call releases the
    GIL while it runs, so members on a CPU core each run side by side; each member's result is
    the one it gets alone (the same compiled program on the same inputs)."""
    if threads <= 1 or n <= 1:
        return [call(i) for i in range(n)]
    with ThreadPoolExecutor(max_workers=min(int(threads), n), thread_name_prefix="dopplermap-member") as pool:
        return list(pool.map(call, range(n)))
