"""Size and back-end policy, in one place: every "auto" choice of the engine and its thresholds.

* synthesis method (:func:`synthesis_method`): ``"dense"`` (the exact per-cell cube) while
  its float64 cube fits :data:`DENSE_AUTO_BYTES`, ``"binned"`` beyond;
* cube dtype of a solve (:func:`cube_dtype`): float32 at ``tol >= FLOAT32_MIN_TOL``
  (a third of the bytes; its rounding stalls L-BFGS-B below ~1e-7), float64 otherwise;
* batched solves (:func:`batch_form`, :func:`batch_mode`): on CPU a dense model that fits
  :data:`BLOCKED_MAX_BYTES` is solved in its blocked form, the members together (vmap);
  otherwise member by member; an accelerator vmaps the folded form;
* many solves of one shape (:func:`many_mode`, :func:`batch_chunk`): a lambda sweep, a
  bootstrap, a calibration's data sets: members together (vmap) on an accelerator, and on
  CPU for a blocked dense model of at least :data:`VMAP_MIN_CPU_WORK` data x cells; one
  compiled solve after another otherwise; a vmapped call holds at most what
  :data:`BATCH_MEMORY_FRACTION` of the memory holds;
* the solver of ``solver="auto"`` (:func:`pick_solver`): of the back ends that apply, the one
  whose compile (cold, from the persistent cache, or already in this process) plus estimated
  solve (:func:`solver_passes`: more passes at a smaller lambda, a tighter tolerance and
  fewer data per cell) is the shortest; on a repeated run of a shape a cold compile counts
  ``1 / REPEAT_RUNS`` (it is paid once and kept);
* Hessian-vector products (:func:`hvp_blocked`, :func:`batch_hvps`): the blocked float64
  form while it fits :data:`HVP_BLOCKED_MAX_BYTES`; batched where that pays (blocked form,
  or any accelerator).

The measurements behind the thresholds are in ``benchmarks/RESULTS.md``; tests change a
threshold by patching it here.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math

import jax
import numpy as np

from .choices import CUBE_DTYPES, SYNTHESIS_METHODS, check
from .cluster import usable_cpus
from .constants import FLOAT32_MIN_TOL
from .errors import warn
from .memory import memory_limit

__all__ = ["DENSE_AUTO_BYTES", "FLOAT32_MIN_TOL", "BLOCKED_MAX_BYTES", "HVP_BLOCKED_MAX_BYTES", "on_accelerator",
           "synthesis_method", "cube_dtype", "blocked_fits", "batch_form", "batch_mode", "many_mode", "member_bytes", "batch_chunk",
           "VMAP_MIN_CPU_WORK", "BATCH_MEMORY_FRACTION",
           "COMPILE_SECONDS", "REPEAT_RUNS", "LMBD_PASSES_RANGE", "DENSITY_PASSES_MIN", "solver_passes", "solve_seconds", "pick_solver", "MEMBER_COMPILE_SECONDS", "MEMBER_PASSES", "MEMBER_PASS_COST", "pick_member_solver", "member_threads", "members_in_one_thread", "SolverChoice", "hvp_blocked", "batch_hvps", "Plan"]

DENSE_AUTO_BYTES = 512 * 2**20
"""``method="auto"`` picks ``"dense"`` while the float64 dense cube fits this."""

BLOCKED_MAX_BYTES = 512 * 2**20
"""``invert_batch(form="auto")`` uses the blocked form on CPU while both its copies fit this."""

HVP_BLOCKED_MAX_BYTES = 1024 * 2**20
"""Hessian-vector products run on the blocked float64 form while both its copies fit this."""


def on_accelerator() -> bool:
    """Whether JAX computes on a GPU/TPU (the default device is not the CPU)."""
    return jax.default_backend() != "cpu"


def synthesis_method(method: str, dense_nbytes: int, exact_rv: bool = False, subdivided: bool = False) -> str:
    """``"dense"`` or ``"binned"``: ``method`` itself, or for ``"auto"`` the choice by size
    (binned whenever the rv shift is to be synthesised exactly: only it can; dense for cells
    integrated over sub-cells: only it can)."""
    if check(method, SYNTHESIS_METHODS, "method") != "auto":
        return method
    if subdivided and not exact_rv:
        return "dense"
    return "dense" if dense_nbytes <= DENSE_AUTO_BYTES and not exact_rv else "binned"


def cube_dtype(choice, tol: float):
    """``"auto"`` -> float32 if ``tol >= FLOAT32_MIN_TOL`` else float64; others are checked and returned."""
    if choice == "auto":
        return "float32" if tol >= FLOAT32_MIN_TOL else "float64"
    return check(choice, CUBE_DTYPES, "cube_dtype")


_cube_dtype = cube_dtype  # Plan.of's argument of the same name hides the function


def blocked_fits(pre, dtype) -> bool:
    """Whether the blocked form of a dense model ``pre`` (both its copies) in ``dtype`` fits
    :data:`BLOCKED_MAX_BYTES` (never for a model that has no blocked form, or no dtype)."""
    nbytes = None if dtype is None else pre.line.blocked_nbytes(dtype)
    return nbytes is not None and nbytes <= BLOCKED_MAX_BYTES


def batch_form(form: str, *, mode: str, blocked_fits: bool) -> str:
    """The model form of a batched solve: ``"blocked"`` or ``"folded"``."""
    if form != "auto":
        return form
    return "blocked" if not on_accelerator() and mode != "sequential" and blocked_fits else "folded"


def batch_mode(mode: str, *, form: str) -> str:
    """``"vmap"`` (members together) or ``"sequential"`` for a batched solve."""
    if mode != "auto":
        return mode
    return "vmap" if (form == "blocked" or on_accelerator()) else "sequential"


VMAP_MIN_CPU_WORK = 12_000_000
"""On CPU, many solves of a blocked dense model run together (vmap) from this many
``n_epoch x n_vel x n_cell`` on (the seed's size, where a batch was measured to pay): below
it the members' lockstep (each vmapped iteration waits for the slowest member and evaluates
every branch) costs more than the batched products save (benchmarks/RESULTS.md)."""

BATCH_MEMORY_FRACTION = 0.25
"""Share of the available memory (or of ``DOPPLERMAP_MAX_MEMORY``) one vmapped call may hold."""


def many_mode(mode: str, *, n_data: int, n_cell: int, blocked_fits: bool) -> str:
    """``"vmap"`` or ``"sequential"`` for many solves of one shape (``mode`` itself unless
    ``"auto"``): vmap on an accelerator, and on CPU for a dense model whose blocked form fits
    and whose ``n_data x n_cell`` reaches :data:`VMAP_MIN_CPU_WORK`."""
    if mode != "auto":
        return mode
    if on_accelerator():
        return "vmap"
    return "vmap" if blocked_fits and n_data * n_cell >= VMAP_MIN_CPU_WORK else "sequential"


def member_bytes(n_data: int, n_param: int, maxcor: int = 10) -> int:
    """Bytes one member of a vmapped solve holds: its data, error, model and residuals (and
    their copies), its maps and gradients, the L-BFGS pairs and the result's arrays."""
    return int(8 * (6 * n_data + (4 * maxcor + 10) * n_param))


def batch_chunk(n_members: int, per_member: int, budget: int | None = None) -> int:
    """Members per vmapped call: all ``n_members`` while they fit ``budget`` bytes (default
    :data:`BATCH_MEMORY_FRACTION` of :func:`dopplermap.memory.memory_limit`), else as many
    as fit (at least 1)."""
    if budget is None:
        limit, _ = memory_limit()
        budget = None if limit is None else int(BATCH_MEMORY_FRACTION * limit)
    if budget is None:
        return max(1, int(n_members))
    return max(1, min(int(n_members), int(budget) // max(1, int(per_member))))


COMPILE_SECONDS = {"lbfgsb": {"cold": 1.6, "disk": 0.2, "memo": 0.0},
                   "newton": {"cold": 3.3, "disk": 0.4, "memo": 0.0}}
"""Compile seconds of each back end's program by where it comes from: ``"cold"`` (traced and
compiled), ``"disk"`` (the persistent compile cache), ``"memo"`` (compiled in this process)."""

_PASS_SECONDS = {"lbfgsb": 1.0e-9, "newton": 0.75e-9}
"""Seconds of one objective pass per ``n_data x n_cell`` (L-BFGS-B's includes scipy's host work)."""
_PASS_OVERHEAD = {"lbfgsb": 1e-3, "newton": 2e-4}
"""Seconds a pass costs whatever the size (L-BFGS-B: a host round trip per evaluation)."""


_PASSES = {"lbfgsb": (110.0, 70.0, 0.23, 0.05, 0.25), "newton": (140.0, 15.0, 0.26, 0.05, 0.15)}
"""``(base, per_digit, slope, slope_per_digit, sparse_slope)`` of :func:`solver_passes`,
fitted to measured passes of the demo star over lambda 1e-3..10, tol 1e-5..1e-8 and 0.16-1.2
data per cell (benchmarks/RESULTS.md)."""

LMBD_PASSES_RANGE = (1e-3, 1.0)
"""Lambdas outside this range count as its ends in :func:`solver_passes` (no more passes
were measured above lambda 1; below 1e-3 the fit is not extrapolated)."""

DENSITY_PASSES_MIN = 0.1
"""Fewer data per cell than this count as this many in :func:`solver_passes` (the fit's
sparsest set had 0.16)."""


def solver_passes(solver: str, tol: float, lmbd: float = 1.0, density: float = 1.0) -> float:
    """Objective passes a solve from the flat start takes at ``tol``, regularisation ``lmbd``
    and ``density`` data per cell.

    ``(base + per_digit * d) * (1 / lmbd) ** (slope + slope_per_digit * d) / density ** sparse_slope``
    with ``d`` the digits of tolerance beyond 1e-5, ``lmbd`` clipped to
    :data:`LMBD_PASSES_RANGE` and ``density`` to [:data:`DENSITY_PASSES_MIN`, 1]
    (:data:`_PASSES`): a weaker maximum-entropy term, or fewer data per cell, leave the loss
    less well conditioned, and every digit of tolerance then costs more."""
    base, per_digit, slope, slope_digit, sparse_slope = _PASSES[solver]
    digits = max(0.0, -math.log10(tol) - 5.0)
    lo, hi = LMBD_PASSES_RANGE
    weak = 1.0 / min(max(float(lmbd), lo), hi)
    sparse = 1.0 / min(max(float(density), DENSITY_PASSES_MIN), 1.0)
    return (base + per_digit * digits) * weak ** (slope + slope_digit * digits) * sparse ** sparse_slope


def solve_seconds(solver: str, tol: float, n_data: int, n_cell: int, lmbd: float = 1.0) -> float:
    """Estimated seconds of one solve by ``solver`` (passes x seconds a pass)."""
    density = n_data / max(1, n_cell)
    return solver_passes(solver, tol, lmbd, density) * (_PASS_SECONDS[solver] * n_data * n_cell + _PASS_OVERHEAD[solver])


REPEAT_RUNS = 10
"""A shape solved before (a candidate's program is in the persistent cache) is taken to be
solved again: a cold compile is then counted as spread over this many runs, so a back end
that wins once compiled is compiled now rather than never (see :func:`pick_solver`)."""


@dataclasses.dataclass(frozen=True)
class SolverChoice:
    """The back end :func:`pick_solver` chose and why: ``estimates`` maps each candidate to
    ``(compile state, compile seconds, solve seconds)``; ``repeated``: a candidate's program
    was in the persistent cache, so a cold compile counted ``1 / REPEAT_RUNS`` of its seconds."""

    solver: str
    estimates: dict
    repeated: bool = False

    def describe(self) -> str:
        """One line for ``-v``: the choice and every candidate's estimate."""
        parts = [f"{s} {c:.1f} s compile ({state}) + {t:.1f} s solve"
                 for s, (state, c, t) in self.estimates.items()]
        why = (f"; this shape ran before: a cold compile counts 1/{REPEAT_RUNS}" if self.repeated
               and any(state == "cold" for state, _, _ in self.estimates.values()) else "")
        return f"solver auto: {self.solver} (estimated {'; '.join(parts)}{why})"


def pick_solver(states: dict, *, tol: float, n_data: int, n_cell: int, n_solves: int = 1,
                unkept: tuple = (), lmbd=1.0) -> SolverChoice:
    """Of the candidate back ends (``states``: ``{solver: compile state}``, states as in
    :data:`COMPILE_SECONDS`), the one of the least compile plus ``n_solves`` estimated solves
    (one compile serves them all); a tie goes to the first candidate.

    On a first run of a shape (nothing of it in the persistent cache) a cold compile counts
    in full: the user waits for it now. Once a candidate's program is on disk the shape is
    being solved again, and a cold compile counts ``1 / REPEAT_RUNS``: a back end that is
    faster compiled (Newton at tight tolerances) is compiled on that run and kept, instead
    of losing to the cached one on every later run because its own program never gets built.
    ``unkept``: candidates whose program this run cannot store (a compiled loop that reports
    progress to the host): their cold compile always counts in full.
    ``lmbd``: the regularisation weight, or the weights of the solves (a sweep: each solve's
    estimate is the mean over them).
    """
    lmbds = [float(v) for v in np.ravel(lmbd)] or [1.0]

    def solves(s):
        return n_solves * sum(solve_seconds(s, tol, n_data, n_cell, v) for v in lmbds) / len(lmbds)

    return _cheapest({s: (state, COMPILE_SECONDS[s][state], solves(s)) for s, state in states.items()}, unkept)


def _cheapest(est: dict, unkept: tuple = ()) -> SolverChoice:
    """Of the candidates ``est`` (``{solver: (compile state, compile seconds, solve seconds)}``)
    the one of the least compile plus solve; once any program is on disk (a repeated run) a
    cold compile counts ``1 / REPEAT_RUNS``, except for the ``unkept`` candidates."""
    repeated = any(state == "disk" for state, _, _ in est.values())

    def cost(s):
        state, compile_s, solve_s = est[s]
        spread = repeated and state == "cold" and s not in unkept
        return (compile_s / REPEAT_RUNS if spread else compile_s) + solve_s

    return SolverChoice(min(est, key=cost), est, repeated)


MEMBER_COMPILE_SECONDS = {"projected_lbfgs": {"cold": 0.9, "disk": 0.15, "memo": 0.0},
                          "newton": {"cold": 1.75, "disk": 0.3, "memo": 0.0}}
"""Compile seconds of the two compiled loops that solve the members of a batch one after another,
by where the program comes from (as :data:`COMPILE_SECONDS`; measured on the demo star,
benchmarks/RESULTS.md)."""

MEMBER_PASSES = {"projected_lbfgs": 140.0, "newton": 110.0}
"""Objective passes of one member started from the solution of a neighbouring problem (a
bootstrap resample started from the fitted map), measured on the demo star at tol 1e-6
(benchmarks/RESULTS.md)."""

MEMBER_PASS_COST = {"projected_lbfgs": 1.3, "newton": 1.0}
"""Seconds of one pass of each loop relative to Newton's (L-BFGS's line search and its
two-loop recursion; measured 1.4x on the demo star, benchmarks/RESULTS.md)."""


def pick_member_solver(states: dict, *, n_members: int, n_data: int, n_cell: int) -> SolverChoice:
    """The compiled loop for ``n_members`` solves of one shape one after another, each started near
    its solution: of the candidates (``states``: ``{solver: compile state}``, as
    :func:`pick_solver`'s) the one of the least compile plus estimated solves, with
    :func:`pick_solver`'s rule for a repeated run (a cold compile counts ``1 / REPEAT_RUNS``
    once another candidate's program is on disk)."""
    per_pass = _PASS_SECONDS["newton"] * n_data * n_cell + _PASS_OVERHEAD["newton"]  # both are device loops
    return _cheapest({s: (state, MEMBER_COMPILE_SECONDS[s][state],
                          n_members * MEMBER_PASSES[s] * MEMBER_PASS_COST[s] * per_pass)
                      for s, state in states.items()})


_ONE_THREAD = contextvars.ContextVar("dopplermap_members_in_one_thread", default=False)


def member_threads(n_members: int) -> int:
    """Threads that solve ``n_members`` independent members of one shape (each its own compiled
    call, none started from another's map): one per usable CPU, at most one per member, on the
    CPU backend. A compiled solve of a small or medium problem keeps about one core busy (XLA's
    own threads help only its largest products), so on a 2-core machine two members at once take
    0.5-0.7 of the wall time, the less the smaller the problem (benchmarks/RESULTS.md,
    "Independent members on every core"). One
    thread on an accelerator (its executions queue on one device) and inside
    :func:`members_in_one_thread` (a Dask task: the cluster has already given each worker its
    share of the machine)."""
    if _ONE_THREAD.get() or on_accelerator():
        return 1
    return max(1, min(int(n_members), usable_cpus()))


@contextlib.contextmanager
def members_in_one_thread():
    """Within it, :func:`member_threads` is 1 (this thread's context only)."""
    token = _ONE_THREAD.set(True)
    try:
        yield
    finally:
        _ONE_THREAD.reset(token)


def hvp_blocked(blocked_nbytes: int) -> bool:
    """Whether Hessian-vector products of a dense model use its blocked float64 form."""
    return blocked_nbytes <= HVP_BLOCKED_MAX_BYTES


def batch_hvps(blocked: bool) -> bool:
    """Whether many Hessian-vector products are batched (vmap) rather than made one at a time."""
    return blocked or on_accelerator()


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every "auto" choice of the engine for one problem, evaluated once (the functions above)
    and shown in a run's summary.

    Attributes:
        method: the synthesis form (``"dense"`` or ``"binned"``; several sets: each set's).
        cube_dtype: the dtype a solve at the problem's tolerance iterates in (None: binned).
        batch_form, batch_mode: what ``invert_batch(form="auto", mode="auto")`` uses.
        hvp_form: the form of the Hessian-vector products (``"blocked"`` or ``"as solved"``),
            batched or not (``batch_hvps``).
        accelerator: whether JAX computes on a GPU/TPU.
    """

    method: str
    cube_dtype: str | None
    batch_form: str
    batch_mode: str
    hvp_form: str
    batch_hvps: bool
    accelerator: bool

    @classmethod
    def of(cls, pre, tol: float, cube_dtype="auto") -> Plan:
        """The plan of a synthesis form ``pre`` (one set, or a :class:`~dopplermap.objective.LineSets`'
        first set) solved at ``tol``, its cube in ``cube_dtype`` (:func:`cube_dtype`'s choice)."""
        if jax.default_backend() == "tpu":
            # a TPU has no float64 in hardware: the solver's float64 programs run emulated there
            # (a seed-size solve did not return in 7 minutes, benchmarks/RESULTS.md)
            warn("JAX computes on a TPU, which only emulates the float64 the solver needs: solves will be "
                 "very slow; run with JAX_PLATFORMS=cpu, or on a GPU")
        sets = getattr(pre, "sets", None)
        if not sets and not hasattr(pre, "line"):  # light curves alone: no synthesis form of line profiles
            return cls(method="none (light curves alone)", cube_dtype=None, batch_form="folded",
                       batch_mode="sequential", hvp_form="as solved", batch_hvps=False, accelerator=on_accelerator())
        line = (sets[0] if sets else pre).line
        dense = line.foldable
        dtype = _cube_dtype(cube_dtype, tol) if dense else None
        fits = dense and blocked_fits(sets[0] if sets else pre, dtype)
        form = batch_form("auto", mode="auto", blocked_fits=fits)
        hvp = dense and hvp_blocked(line.blocked_nbytes("float64"))
        methods = sorted({s.line.kind for s in sets}) if sets else [line.kind]
        return cls(method="+".join(methods), cube_dtype=dtype, batch_form=form,
                   batch_mode=batch_mode("auto", form=form), hvp_form="blocked" if hvp else "as solved",
                   batch_hvps=batch_hvps(hvp), accelerator=on_accelerator())

    def describe(self) -> str:
        """One line for a summary."""
        cube = f", {self.cube_dtype} cube" if self.cube_dtype else ""
        where = "accelerator" if self.accelerator else "CPU"
        return (f"{self.method} synthesis{cube}; batches {self.batch_form}/{self.batch_mode}; "
                f"Hessian products {self.hvp_form}{' batched' if self.batch_hvps else ''}; {where}")
