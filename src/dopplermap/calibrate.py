"""Stellar parameters calibrated by simulation: a parametric-bootstrap Neyman construction.

The chi-square of a regularised fit, read along a grid of a stellar parameter (inclination,
vsini, ...), is not a likelihood: the regulariser trades against the geometry, so its
minimum is biased and its ``Delta chi2 <= 1`` range far too narrow (measured in
``benchmarks/RESULTS.md``, "Stellar parameters: calibration"). Instead of reading it as a
likelihood, :func:`calibrate_parameter` learns by simulation what the read-out does and
inverts that (Neyman 1937; the parametric bootstrap of Efron 1979; docs/parameters.md):

1. Base estimate ``theta_hat(d)``: the minimum of the profile ``chi2_total`` along the
   parameter's grid values (other grid parameters held), located by a parabola through the
   lowest node and its neighbours (:func:`profile_minimum`).
2. For each trial value ``theta_t`` (by default every grid value) the map is reconstructed
   from the observed data at ``theta_t``: what the data say if ``theta_t`` were true.
   ``n_sim`` data sets are simulated from its model profiles with the observed errors and
   epochs, and the base estimate is taken on each by the same solver and read-out as on the
   observed data (one batched solve per grid value, the observed data its first member;
   walking the grid values in order, each data set starts from its own solution at the
   value before, solved to :data:`WARM_TOL` x the tolerance: the minimum a flat start
   reaches, to that start's tolerance, in about half the iterations).
3. The trials' simulated estimates form the belt (:func:`belt_estimate`): the point
   estimate is the ``theta_t`` whose median estimate equals the observed one
   (median-unbiased), the 68 % / 95 % confidence sets are the ``theta_t`` whose central
   68 % / 95 % of estimates hold the observed one.

Cost: :func:`calibration_cost`; :func:`check_calibration_size` refuses, before anything is
allocated, a calibration of more solves than the grid search's point limit or more memory
than is available. Assumptions (docs/parameters.md): the map reconstructed at
the trial value stands for the true map; Gaussian noise with the stated errors; an exact
forward model (a coarse grid's model error is not simulated); the other grid parameters
held at their given values.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ._repr import compact
from .atomic import fingerprint, write_file
from .cluster import Session
from .errors import DopplermapInputError, DopplermapWarning, warn
from .grid import SurfaceGrid, latitude_band_grid
from .memory import MAX_GRID_POINTS, check_bytes
from .model import forward
from .problem import Problem, require_problem
from .search import (
    SUPPORT_READOUT,
    apply_parameters,
    grid_parameter,
    pad_precomputed,
    problem_fingerprint,
    solve_on_support,
    support_from_point,
)
from .solvers import NEWTON_TOL, invert_batch, many_mode, newton_fits, solve_many

log = logging.getLogger(__name__)

__all__ = ["Calibration", "CalibrationOptions", "Finished", "calibrate_parameter", "calibration_cost", "profile_minimum",
           "belt_estimate", "check_calibratable", "check_calibration_size", "owner_cells", "calibrated_star", "LEVELS", "COLUMNS",
           "SIM_LMBD_FACTOR", "SIM_OVERSAMPLE", "TASK_MEMBERS", "WARM_TOL", "grid_value_task", "READOUTS",
           "support_unit", "calibration_solver"]

COLUMNS = ("chi2_total", "loss")
"""Base read-outs: the profile of the un-reduced chi-square, or of ``n_data`` x the objective."""

READOUTS = ("regularised", "support")
"""What each data set's estimate is read from: the regularised solves' profile (``COLUMNS``), or
``grid --readout support``'s: the map refitted at every grid value on the support of the data
set's own regularised map at its lowest ``chi2_total`` value (:func:`support_unit`)."""

SIM_OVERSAMPLE = 4
"""Default ratio of the simulations' surface cells to the problem's."""

SIM_LMBD_FACTOR = 0.1
"""Default lambda of the trial maps, as a fraction of the read-out's lambda."""

LEVELS = (0.6826894921370859, 0.9544997361036416)
"""Confidence levels of the reported sets: the normal 1- and 2-sigma probabilities."""


def profile_minimum(values, profile) -> float:
    """Minimum of a profile sampled at ``values``: the vertex of the parabola through the
    lowest node and its two neighbours (kept within them), the node itself at a grid edge
    or where the three points do not curve upwards."""
    v, p = np.asarray(values, float), np.asarray(profile, float)
    if v.ndim != 1 or v.shape != p.shape or v.size < 1:
        raise DopplermapInputError(f"profile_minimum: need equal-length 1-D values and profile, got {v.shape}, {p.shape}")
    i = int(np.argmin(p))
    if i == 0 or i == v.size - 1:
        return float(v[i])
    x, y = v[i - 1:i + 2], p[i - 1:i + 2]
    # divided differences: robust on an uneven grid
    d1, d2 = (y[1] - y[0]) / (x[1] - x[0]), (y[2] - y[1]) / (x[2] - x[1])
    a = (d2 - d1) / (x[2] - x[0])
    if not a > 0:
        return float(v[i])
    b = d1 - a * (x[0] + x[1])
    return float(np.clip(-b / (2.0 * a), x[0], x[2]))


def _increasing(y: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit of ``y`` (pool-adjacent-violators)."""
    vals, counts = [], []
    for v in np.asarray(y, float):
        vals.append(v)
        counts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            n = counts[-2] + counts[-1]
            vals[-2] = (vals[-2] * counts[-2] + vals[-1] * counts[-1]) / n
            counts[-2] = n
            vals.pop()
            counts.pop()
    return np.repeat(vals, counts)


def _normal_cdf(z):
    from scipy.special import ndtr

    return ndtr(z)


def _crossings(t: np.ndarray, d: np.ndarray) -> list[float]:
    """Where the piecewise-linear ``d(t)`` changes sign (or is zero)."""
    out = []
    for j in range(t.size - 1):
        if d[j] == 0:
            out.append(float(t[j]))
        elif d[j] * d[j + 1] < 0:
            out.append(float(t[j] + (t[j + 1] - t[j]) * d[j] / (d[j] - d[j + 1])))
    if d[-1] == 0:
        out.append(float(t[-1]))
    return out


BELT_POINTS = 2001
"""Points of the fine trial axis on which the belt is evaluated."""


def belt_estimate(trials, sims, observed, levels: Sequence[float] = LEVELS) -> dict:
    """Point estimate and confidence sets from simulated base estimates (the Neyman belt).

    Per trial, the simulated estimates are summarised by their median ``center`` and half
    their central 68 % range ``spread`` (quantiles, so that estimates piled at a grid edge
    do not distort them); ``center`` is made non-decreasing in the trial value (the estimate
    grows with the truth; pool-adjacent-violators), both are interpolated linearly between
    trials, and ``P(t) = Phi((observed - center(t)) / spread(t))`` is evaluated on a fine
    axis. The estimate is where ``center(t) = observed`` (the middle of that range where
    ``center`` is flat there); the set of level ``L`` is ``{t : (1-L)/2 <= P(t) <= (1+L)/2}``.

    Args:
        trials: (n_trial,) ascending trial values. sims: (n_trial, n_sim) base estimates of
            the data sets simulated at each trial. observed: the base estimate of the data.
    Returns a dict: ``estimate``; per level ``lo{L}``, ``hi{L}`` (``L`` = 68, 95; the hull of
    the set); ``center``, ``spread`` per trial; ``lo_open`` / ``hi_open`` (the 95 % set
    reaches the first / last trial, so the true set may extend beyond the trials);
    ``no_crossing`` (the observed estimate lies outside every trial's center; the estimate
    is then the nearest trial).
    """
    t = np.asarray(trials, float)
    e = np.asarray(sims, float)
    if t.ndim != 1 or e.ndim != 2 or e.shape[0] != t.size or t.size < 2 or e.shape[1] < 4:
        raise DopplermapInputError(f"belt_estimate: need >= 2 trials and >= 4 simulations each, got trials {t.shape}, "
                                   f"sims {e.shape}")
    if np.any(np.diff(t) <= 0):
        raise DopplermapInputError("belt_estimate: trials must be strictly ascending")
    if not (np.all(np.isfinite(e)) and math.isfinite(observed)):
        raise DopplermapInputError("belt_estimate: simulated and observed estimates must be finite")
    q16, q50, q84 = np.quantile(e, [0.15865525393145707, 0.5, 0.8413447460685429], axis=1)
    spread = 0.5 * (q84 - q16)
    # a trial whose simulations agree exactly (all at a grid edge) has no spread of its
    # own: give it the smallest spread seen (or a tiny one)
    pos = spread[spread > 0]
    floor = pos.min() if pos.size else 1e-9 * max(1.0, float(np.ptp(t)))
    spread = np.maximum(spread, floor)
    center = _increasing(q50)
    obs = float(observed)
    tf = np.linspace(t[0], t[-1], BELT_POINTS)
    cf, sf = np.interp(tf, t, center), np.interp(tf, t, spread)
    p = _normal_cdf((obs - cf) / sf)
    out = dict(center=center, raw_center=q50, spread=spread, trials=t, observed=obs)
    if obs < center[0] or obs > center[-1]:
        out["no_crossing"] = True
        out["estimate"] = float(t[0] if obs < center[0] else t[-1])
    else:
        out["no_crossing"] = False
        on = np.nonzero(np.abs(cf - obs) <= 1e-12 * max(1.0, abs(obs)))[0]
        cross = _crossings(tf, cf - obs)
        if on.size:
            out["estimate"] = float(0.5 * (tf[on[0]] + tf[on[-1]]))
        else:
            out["estimate"] = float(np.median(cross))
    for lev in levels:
        a = 0.5 * (1.0 - lev)
        inside = (p >= a) & (p <= 1.0 - a)
        key = int(round(100 * lev))
        idx = np.nonzero(inside)[0]
        if idx.size:
            lo, hi = float(tf[idx[0]]), float(tf[idx[-1]])
        else:  # the belt is narrower than the fine axis' step here
            lo = hi = out["estimate"]
        out[f"lo{key}"], out[f"hi{key}"] = min(lo, out["estimate"]), max(hi, out["estimate"])
        out[f"gaps{key}"] = bool(idx.size and idx[-1] - idx[0] + 1 != idx.size)  # a set of several pieces
    a95 = 0.5 * (1.0 - levels[-1])
    out["lo_open"] = bool(p[0] <= 1.0 - a95)
    out["hi_open"] = bool(p[-1] >= a95)
    return out


@dataclasses.dataclass
class Calibration:
    """A stellar parameter calibrated by simulation (:func:`calibrate_parameter`).

    Attributes:
        name: the parameter. estimate: the calibrated (median-unbiased) value.
        lo68, hi68, lo95, hi95: the 68.3 % and 95.4 % confidence sets (their hull).
        raw: the base estimate of the observed data (profile chi2 minimum).
        lo_open, hi_open: the 95 % set reaches the first / last trial value (the true set may
            extend beyond the grid). no_crossing: the observed estimate lies outside every
            trial's median estimate (the estimate is the nearest trial; widen the grid).
        values: grid values of the profile. trials: trial values. fixed: the other
            parameters as held. sims: (n_trial, n_sim) simulated base estimates.
        center, spread: median (made non-decreasing) and half 68 % width of each trial's
            estimates. profile: (n_grid,) the observed profile ``chi2_total``.
        n_sim, n_solves, seconds, seed, column, sim_lmbd, sim_oversample: the cost and the settings.
        mode: how each grid value's data sets were solved (``"vmap"``: together;
            ``"sequential"``: one compiled device solve after another).
        member_profiles: ``{column: (n_grid, 1 + n_trial n_sim)}`` profiles of every data
            set (the observed first) for each of :data:`COLUMNS` (the support read-out:
            ``chi2_total`` and ``chi2_support``).
        iterations: solver iterations of the grid values' solves made in this run (not those
            taken from a table).
        readout: the base read-out (:data:`READOUTS`). unconverged: the support read-out's
            refits that stopped before their tolerance (made in this run).
    """

    name: str
    estimate: float
    lo68: float
    hi68: float
    lo95: float
    hi95: float
    raw: float
    lo_open: bool
    hi_open: bool
    no_crossing: bool
    values: np.ndarray
    trials: np.ndarray
    fixed: dict
    sims: np.ndarray
    center: np.ndarray
    spread: np.ndarray
    profile: np.ndarray
    n_sim: int
    n_solves: int
    seconds: float
    seed: int
    column: str = "chi2_total"
    sim_lmbd: float | None = None
    sim_oversample: int = SIM_OVERSAMPLE
    member_profiles: dict | None = dataclasses.field(default=None, repr=False)
    mode: str | None = None
    iterations: int | None = None
    readout: str = "regularised"
    unconverged: int | None = None

    def __repr__(self) -> str:
        return compact(self, ("name", "estimate", "lo68", "hi68", "lo95", "hi95", "n_sim", "n_solves"))

    def summary(self) -> dict:
        """JSON-ready summary (no per-simulation arrays)."""
        keys = ("name", "estimate", "lo68", "hi68", "lo95", "hi95", "raw", "lo_open", "hi_open", "no_crossing",
                "fixed", "n_sim", "n_solves", "seconds", "seed", "column", "sim_lmbd", "sim_oversample", "mode", "iterations",
                "readout", "unconverged")
        out = {k: getattr(self, k) for k in keys}
        out.update(trials=self.trials.tolist(), center=self.center.tolist(), spread=self.spread.tolist(),
                   values=self.values.tolist(), profile=self.profile.tolist(),
                   method="parametric-bootstrap Neyman construction (docs/parameters.md)")
        return out


def owner_cells(coarse: SurfaceGrid, fine: SurfaceGrid) -> np.ndarray:
    """(fine.n_cell,) index of the ``coarse`` cell each ``fine`` cell's centre lies in (by the
    cells' bounds on a band grid, else the nearest centre)."""
    lat, lon = np.asarray(fine.lat), np.mod(np.asarray(fine.lon), 2 * np.pi)
    if coarse.lat_bounds is not None and coarse.lon_bounds is not None:
        lb, ob = np.asarray(coarse.lat_bounds), np.asarray(coarse.lon_bounds)
        inside = ((lat[:, None] >= lb[None, :, 0]) & (lat[:, None] < lb[None, :, 1])
                  & (lon[:, None] >= ob[None, :, 0]) & (lon[:, None] < ob[None, :, 1]))
        if np.all(inside.sum(axis=1) == 1):
            return np.argmax(inside, axis=1)

    return np.argmax(fine.unit_vectors() @ coarse.unit_vectors().T, axis=1)


STAR_FIELDS = ("inclination", "vsini", "domega", "period")
"""Grid parameters that are fields of :class:`dopplermap.geometry.StarParams`."""


def calibrated_star(star, calibrations):
    """``star`` with the calibrated estimates of its fields (``calibrations``: Calibration
    objects or ``{name: Calibration}``) substituted, e.g. a start for
    :func:`dopplermap.jointfit.joint_fit`; calibrated component parameters (``t_cool``, ...)
    are not star fields and are left out."""
    cals = calibrations.values() if isinstance(calibrations, dict) else calibrations
    return star.replace(**{c.name: float(c.estimate) for c in cals if c.name in STAR_FIELDS})


def calibration_cost(n_grid: int, n_trial: int, n_sim: int, readout: str = "regularised") -> dict:
    """Solves of one calibration: ``n_trial`` trial maps plus ``n_grid`` batched solves of
    ``1 + n_trial * n_sim`` members (the observed data and every simulated set); the support
    read-out refits every member at every grid value too (``refits``, one solve each)."""
    members = 1 + n_trial * n_sim
    refits = n_grid * members if readout == "support" else 0
    return dict(trial_solves=n_trial, batched_calls=n_grid, members=members, member_solves=n_grid * members,
                refits=refits, total=n_trial + n_grid * members + refits)


def check_calibration_size(problem: Problem, axes: dict, n_sim: int, max_solves: int | None = None,
                           readout: str = "regularised") -> dict:
    """Refuse a calibration too large to run, before anything is allocated: the same guard
    as a grid search's (:func:`dopplermap.search.check_grid_size`, one inversion a point).

    Args:
        problem: the observed problem (its epochs, velocities and cells size the batches).
        axes: ``{name: (n_grid, n_trial)}`` of every parameter to calibrate (one after another).
        n_sim: simulated data sets per trial.
        max_solves: most solves in all (default :data:`dopplermap.memory.MAX_GRID_POINTS`,
            the grid's point limit; ``--max-points`` raises both).
        readout: the base read-out (:data:`READOUTS`; the support read-out's refits count).
    Returns :func:`calibration_cost` summed over the axes. Raises
    :class:`DopplermapInputError` naming the number of solves and how to lower or raise
    it, or the memory of the largest batch (its data sets, their results and solver states)
    where it exceeds what is available (:func:`dopplermap.memory.check_bytes`).
    """
    limit = MAX_GRID_POINTS if max_solves is None else int(max_solves)
    costs = {name: calibration_cost(int(g), int(t), int(n_sim), readout) for name, (g, t) in axes.items()}
    total = sum(c["total"] for c in costs.values())
    what = ", ".join(f"{name}: {c['trial_solves']} trial maps + {c['batched_calls']} values x {c['members']:.4g} "
                     "data sets" + (f" + {c['refits']:.4g} refits" if c["refits"] else "") for name, c in costs.items())
    if total > limit:
        raise DopplermapInputError(f"calibration of {total:.4g} solves ({what}; {n_sim} simulations per trial) is more "
                                   f"than the limit of {limit} (each solve is one inversion): lower --calibrate N "
                                   "(n_sim) or use fewer values (or raise the limit: --max-points / max_solves)")
    obs = problem.obs
    n_data, n_cell = obs.n_epoch * obs.n_vel, problem.grid.n_cell
    members = max(c["members"] for c in costs.values())
    # per member: its data (and the solver's copy), model and residuals; its maps, the
    # L-BFGS history (10 pairs) and the result's arrays; the support read-out keeps each
    # member's maps at every grid value (the refits' starts)
    per_member = 8.0 * (6 * n_data + 50 * n_cell)
    if readout == "support":
        per_member += 8.0 * 2 * n_cell * max(int(g) for g, _ in axes.values())
    check_bytes(members * per_member, f"calibration batch of {members:.4g} data sets ({n_sim} simulations per trial)",
                "--calibrate N (n_sim) or the number of values")
    return dict(total=total, axes=costs)


def check_calibratable(problem: Problem) -> None:
    """Refuse a problem the simulation does not reproduce (time windows, a light curve, a
    line weight): its calibration would describe another problem."""
    settings = problem.settings
    if problem.windows is not None:
        raise DopplermapInputError(f"{problem.source}: calibration by simulation simulates one static map; this "
                                   "problem has time windows")
    if problem.lightcurve_data is not None:
        raise DopplermapInputError(f"{problem.source}: calibration by simulation does not simulate light curves yet; "
                                   "calibrate on the line profiles alone (a target without [data] lightcurve)")
    if settings.line_weight != 1.0:
        raise DopplermapInputError(f"{problem.source}: calibration needs line_weight 1, got {settings.line_weight!r}")


@dataclasses.dataclass(frozen=True)
class CalibrationOptions:
    """How :func:`calibrate_parameter` simulates and reads out.

    Attributes:
        n_sim: simulated data sets per trial (>= 4). seed: of the noise draws.
        column: the base read-out, ``"chi2_total"`` (default; the un-reduced chi-square,
            the plain ``grid`` read-out's) or ``"loss"`` (``n_data`` x the objective,
            regulariser included). Chosen by measurement (docs/parameters.md).
        sim_lmbd: lambda of the trial maps the data sets are simulated from (default
            ``SIM_LMBD_FACTOR`` x the problem's lambda): a map less smoothed than the
            read-out's keeps more of the surface's structure, so that the simulations see the
            regulariser's bias as the real data do (measured: docs/parameters.md).
        sim_oversample: simulate the data sets on a band grid of ``sim_oversample`` times the
            problem's cells (default :data:`SIM_OVERSAMPLE`; each fine cell takes the value of
            the cell it lies in), so that they carry the surface grid's own discretisation
            error as real data do; 1: on the problem's grid.
        max_solves: most solves of one calibration (default
            :data:`dopplermap.memory.MAX_GRID_POINTS`; :func:`check_calibration_size`).
        mode: how each grid value's data sets are solved (:func:`dopplermap.solvers.solve_many`):
            ``"vmap"`` (together, in calls that fit memory), ``"sequential"`` (one compiled device
            solve after another) or ``"auto"`` (default, :func:`dopplermap.plan.many_mode`).
        warm_start: each data set's solve at a grid value starts from its own solution at the
            value before, at :data:`WARM_TOL` x the tolerance (default True; in this process
            the values are walked in order, on a cluster each part of the data sets walks them
            as a chain of tasks); False: every solve from the default flat start. The same
            minimum either way, to the cold solve's tolerance, in fewer iterations (measured:
            benchmarks/RESULTS.md). A value after one taken from a table starts cold.
        table: a ``.jsonl`` path where the finished work is kept as it finishes
            (:class:`Finished`; ``dopplermap grid --calibrate`` keeps it in the grid's folder):
            a calibration of the same inputs run again takes its data sets and finished
            solves from there and solves only the rest. None (default): nothing kept. Where
            the work is kept is not one of the inputs it is matched by.
        trial_map_at: the value of the calibrated parameter at which the one trial map is
            fitted that every trial value's data sets are simulated from (at each trial value's
            model); None (default): each trial value's own map, the map the data give there.
        readout: the base read-out (:data:`READOUTS`): ``"regularised"`` (default) reads
            ``column`` of the regularised solves; ``"support"`` reads ``grid --readout
            support``'s ``chi2_support`` (:func:`support_unit`; ``column`` then stays
            ``"chi2_total"``, the column the support's grid value is chosen by), at about twice
            the solves.
    """

    n_sim: int = 32
    seed: int = 0
    column: str = "chi2_total"
    sim_lmbd: float | None = None
    sim_oversample: int = SIM_OVERSAMPLE
    max_solves: int | None = None
    mode: str = "auto"
    warm_start: bool = True
    table: str | Path | None = None
    readout: str = "regularised"
    trial_map_at: float | None = None

    def __post_init__(self):
        if int(self.n_sim) != self.n_sim or self.n_sim < 4:
            raise DopplermapInputError(f"calibration: n_sim must be an integer >= 4, got {self.n_sim!r}")
        if self.column not in COLUMNS:
            raise DopplermapInputError(f"calibration: column must be one of {COLUMNS}, got {self.column!r}")
        if self.sim_lmbd is not None and not (math.isfinite(self.sim_lmbd) and self.sim_lmbd >= 0):
            raise DopplermapInputError(f"calibration: sim_lmbd must be finite and >= 0, got {self.sim_lmbd!r}")
        if int(self.sim_oversample) != self.sim_oversample or self.sim_oversample < 1:
            raise DopplermapInputError(f"calibration: sim_oversample must be an integer >= 1, got "
                                       f"{self.sim_oversample!r}")
        if self.mode not in ("auto", "vmap", "sequential"):
            raise DopplermapInputError(f"calibration: mode must be 'auto', 'vmap' or 'sequential', got {self.mode!r}")
        if self.max_solves is not None and (int(self.max_solves) != self.max_solves or self.max_solves < 1):
            raise DopplermapInputError(f"calibration: max_solves must be an integer >= 1, got {self.max_solves!r}")
        if self.trial_map_at is not None and not math.isfinite(self.trial_map_at):
            raise DopplermapInputError(f"calibration: trial_map_at must be finite, got {self.trial_map_at!r}")
        if self.readout not in READOUTS:
            raise DopplermapInputError(f"calibration: readout must be one of {READOUTS}, got {self.readout!r}")
        if self.readout == "support" and self.column != "chi2_total":
            raise DopplermapInputError(f"calibration: the support read-out reads chi2_support; column "
                                       f"{self.column!r} applies to the regularised read-out")


TASK_MEMBERS = 16
"""Most data sets of one Dask task of a calibration (one grid value's batched solve, in parts;
each part walks the grid values as a chain of tasks, so the parts are what runs in parallel)."""


class Finished:
    """A calibration's finished work, kept beside a grid table so that a killed run resumes it.

    ``path`` (``.jsonl``): one line per finished unit (a grid value's solves of data sets
    ``start:stop``), appended and synced as each finishes; ``path`` with suffix ``.npz``: the
    simulated data sets (written atomically once the trial maps are solved, so a resumed run
    neither re-solves them nor draws other noise). Every line and the data file carry the
    digest of the calibration's inputs (problem, parameter, grid and trial values, held
    parameters, settings, options): what another calibration left is ignored, never mixed
    in; a line cut off by a kill is dropped.
    """

    def __init__(self, path, digest: str):
        self.path, self.digest = Path(path), digest
        self.data_path = self.path.with_suffix(".npz")
        self.units: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.read_outs: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    u = json.loads(line)
                    if u["digest"] != digest:
                        continue
                    if "chi2_support" in u:  # a support read-out's unit: data sets start:stop at every value
                        self.read_outs[(int(u["start"]), int(u["stop"]))] = (
                            np.asarray(u["chi2_total"], float), np.asarray(u["chi2_support"], float))
                    else:
                        self.units[(int(u["j"]), int(u["start"]), int(u["stop"]))] = (
                            np.asarray(u["chi2_total"], float), np.asarray(u["loss"], float))
                except (ValueError, KeyError, TypeError):  # a line cut off by a kill
                    continue
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()

    def data(self):
        """The simulated data sets a run of these inputs saved, or None."""
        try:
            with np.load(self.data_path) as z:
                return np.array(z["flux"]) if str(z["digest"]) == self.digest else None
        except (OSError, ValueError, KeyError):
            return None

    def save_data(self, flux: np.ndarray) -> None:
        write_file(self.data_path, lambda fh: np.savez(fh, flux=flux, digest=np.array(self.digest)))

    def take(self, j: int, start: int, stop: int):
        """``(chi2_total, loss)`` of a finished unit, or None."""
        return self.units.get((j, start, stop))

    def add(self, j: int, start: int, stop: int, chi2_total, loss) -> None:
        self._append({"digest": self.digest, "j": j, "start": start, "stop": stop,
                      "chi2_total": np.asarray(chi2_total, float).tolist(), "loss": np.asarray(loss, float).tolist()})
        self.units[(j, start, stop)] = (np.asarray(chi2_total, float), np.asarray(loss, float))

    def take_read_out(self, start: int, stop: int):
        """``(chi2_total, chi2_support)``, each ``(n_grid, stop - start)``, of a finished support
        read-out unit (:func:`support_unit`), or None."""
        return self.read_outs.get((start, stop))

    def add_read_out(self, start: int, stop: int, chi2_total, chi2_support) -> None:
        self._append({"digest": self.digest, "start": start, "stop": stop,
                      "chi2_total": np.asarray(chi2_total, float).tolist(),
                      "chi2_support": np.asarray(chi2_support, float).tolist()})
        self.read_outs[(start, stop)] = (np.asarray(chi2_total, float), np.asarray(chi2_support, float))

    def _append(self, unit: dict) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps(unit) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def grid_value_task(problem: Problem, name: str, fixed: dict, value: float, flux, err, kw: dict, mode: str):
    """``(chi2, loss, Many)``: every data set of ``flux`` solved at grid value ``value`` of
    ``name`` (the other parameters ``fixed``), as one :func:`dopplermap.solvers.solve_many`
    with the settings ``kw`` (its ``x0``, where given: a start per data set); a calibration's
    unit of work, in this process or as a Dask task."""
    star, comps = apply_parameters(problem, dict(fixed, **{name: float(value)}))
    point = problem.replace(star=star, components=comps)
    many = solve_many(pad_precomputed(point.pre), point.obs, flux=flux, err=err, mode=mode, **kw)
    return np.array([r.chi2 for r in many.results]), np.array([r.loss for r in many.results]), many


WARM_TOL = 0.1
"""Tolerance of a warm-started solve, as a fraction of the problem's. Started at the solution
of the grid value before, a solve at the problem's own tolerance stops early on its
relative-reduction test, nearer that start than a cold solve stops to its minimum: the
profiles then lag along the walk and the calibrated sets shift (measured:
benchmarks/RESULTS.md). A tenth of the tolerance stops nearer the minimum than a cold solve
does, in fewer iterations. The cube is kept in the cold solve's dtype (a tighter tolerance
alone would switch a float32 cube to float64, at twice the cost an iteration)."""


def calibration_solver(point: Problem, tol: float) -> str:
    """The compiled solve of a calibration's trial maps and of its data sets where they run one
    per compiled call: Gauss-Newton wherever it is a candidate (``tol <= NEWTON_TOL`` and a
    model it fits), as for a grid's points (the calibration reads chi2 differences too, and
    Newton stops nearer the minima), else projected L-BFGS. Decided by the model and the
    tolerance alone, never by what a process has compiled: a calibration then draws the same data
    sets and gives the same sets in one process and on a cluster, after a grid solved here or on
    the workers."""
    return "newton" if float(tol) <= NEWTON_TOL and newton_fits(point) else "projected_lbfgs"


def _member_solver(point: Problem, kw: dict, mode: str) -> dict:
    """``kw`` with :func:`calibration_solver` for the grid values' members where they run one per
    compiled call, decided once for the whole calibration (in this process and on every Dask
    worker alike)."""
    pre = pad_precomputed(point.pre)
    if many_mode(pre, point.obs, mode, tol=float(kw["tol"])) != "sequential":
        return kw
    return dict(kw, solver=calibration_solver(point, kw["tol"]))


def _warm(kw: dict, starts) -> dict:
    """The solve settings ``kw`` of a grid value whose data sets start from ``starts``, the
    ``(solutions, cube dtype)`` of the value before (None: cold)."""
    if starts is None:
        return kw
    x, dtype = starts
    return dict(kw, x0=x, tol=WARM_TOL * float(kw["tol"]), cube_dtype=dtype)


def _solutions(many) -> tuple[tuple[np.ndarray, str | None], int]:
    """Each member's solution and the cube dtype it was solved in (the starts of the next grid
    value's solves), and the iterations."""
    x = np.stack([r.x for r in many.results])
    return (x, many.results[0].cube_dtype), int(sum(r.iterations for r in many.results))


def _task(shared, name, fixed, value, start, stop, kw, mode, starts=None):
    """A cluster task: ``(chi2, loss, mode, solutions, iterations)`` of data sets ``start:stop``;
    ``shared``: the session's ``(problem, flux, err)``; ``starts``: the solutions of the same data
    sets at the grid value before (:func:`_solutions`; None: from the flat start)."""
    problem, flux, err = shared
    chi2, loss, many = grid_value_task(problem, name, fixed, value, flux[start:stop], err, _warm(kw, starts), mode)
    return (chi2, loss, many.mode, *_solutions(many))


def _on_cluster(cluster, problem, name, fixed, v, flux, err, kw, o, profiles, n_data, progress,
                finished: Finished | None = None) -> tuple[str, int]:
    """The grid values' solves as Dask tasks of at most :data:`TASK_MEMBERS` data sets each;
    with ``o.warm_start`` each part's tasks form a chain along the grid values, each started
    from the solutions of the task before, which the client passes on as data once it has read
    them (not as a Dask dependency, whose result lost with a worker would be rebuilt from its own
    predecessor, back along the chain). The problem and data are held by every worker
    (:class:`dopplermap.cluster.Session`), so a task lost with its worker is run again alone.
    Units ``finished`` holds are not solved again; each finished task is added to it. Returns
    the modes used and the iterations."""
    from dask.distributed import as_completed

    parts = [slice(s, min(s + TASK_MEMBERS, flux.shape[0])) for s in range(0, flux.shape[0], TASK_MEMBERS)]
    left = {j: len(parts) for j in range(v.size)}
    todo = []
    for j in range(v.size):
        for p in parts:
            done = None if finished is None else finished.take(j, p.start, p.stop)
            if done is None:
                todo.append((j, p))
            else:
                profiles["chi2_total"][j, p], profiles["loss"][j, p] = done
                left[j] -= 1
    modes, iterations = set(), 0
    if todo:
        waiting = set((j, p.start) for j, p in todo)
        with Session(cluster, (problem, flux, err)) as session:
            def submit(j, p, starts=None):
                waiting.discard((j, p.start))
                return session.submit(_task, name, fixed, float(v[j]), p.start, p.stop, kw, o.mode, starts, retries=2)

            # a chain's first task to do (its value before finished earlier, or no chains): from the flat start
            firsts = [(j, p) for j, p in todo if not (o.warm_start and (j - 1, p.start) in waiting)]
            futs = {submit(j, p): (j, p) for j, p in firsts}
            running = as_completed(list(futs))
            for fut in running:
                j, p = futs.pop(fut)  # the client keeps no task it has read: the scheduler forgets it
                chi2, loss, used, starts, its = session.result(fut)
                if o.warm_start and (j + 1, p.start) in waiting:
                    nxt = submit(j + 1, p, starts)
                    futs[nxt] = (j + 1, p)
                    running.add(nxt)
                modes.add(used)
                iterations += its
                profiles["chi2_total"][j, p], profiles["loss"][j, p] = chi2 * n_data, loss * n_data
                if finished is not None:
                    finished.add(j, p.start, p.stop, chi2 * n_data, loss * n_data)
                left[j] -= 1
                if left[j] == 0 and progress is not None:
                    progress("grid", v.size - sum(1 for n in left.values() if n), v.size)
    used = "+".join(sorted(modes)) or "resumed"
    log.info("calibrate %s: %d grid values x %d tasks on the cluster (%s; %d finished before)", name, v.size,
             len(parts), used, v.size * len(parts) - len(todo))
    return used, iterations


def support_unit(problem: Problem, name: str, fixed: dict, values, flux, err, kw: dict,
                 options: CalibrationOptions = CalibrationOptions()):
    """``grid --readout support``'s read-out of each data set of ``flux`` along grid values
    ``values`` of ``name`` (the other parameters ``fixed``): a calibration's unit of work for the
    support read-out, in this process or as a Dask task. Every data set is solved at every value
    with the settings ``kw`` (as :func:`grid_value_task`, in ``options.mode``, walking the values
    with warm starts where ``options.warm_start``; :data:`dopplermap.search.SUPPORT_READOUT`);
    its support is read off its own regularised map at its lowest ``chi2_total`` value
    (:func:`dopplermap.search.support_from_point`, as ``grid --readout support`` reads it); the
    map is then refitted on that support at every value
    (:func:`dopplermap.search.solve_on_support`, started from the regularised map there).

    Returns ``(chi2_total, chi2_support, mode, iterations, unconverged)``: the two
    ``(n_grid, n_members)`` profiles (un-reduced), the batched solves' mode and iterations, and
    how many refits stopped before their tolerance."""
    v, mode, readout = np.asarray(values, float), options.mode, SUPPORT_READOUT
    obs = problem.obs
    n_data = obs.n_epoch * obs.n_vel
    flux = np.asarray(flux, float)
    chi2, solves, starts, iterations = np.empty((v.size, flux.shape[0])), [], None, 0
    for j, gv in enumerate(v):
        c, _, many = grid_value_task(problem, name, fixed, float(gv), flux, err, _warm(kw, starts), mode)
        mode = many.mode  # every value in the mode the first chose
        x, its = _solutions(many)
        chi2[j], iterations = c * n_data, iterations + its
        solves.append(many.results)
        starts = x if options.warm_start else None
    refit, unconverged = np.empty_like(chi2), 0
    for m in range(flux.shape[0]):
        best = int(np.argmin(chi2[:, m]))
        support = support_from_point(problem, dict(fixed, **{name: float(v[best])}), readout, solve=solves[best][m])
        member = problem.replace(obs=dataclasses.replace(obs, flux=flux[m]))
        for j, gv in enumerate(v):
            with warnings.catch_warnings(record=True) as caught:  # counted and reported once by the caller
                warnings.simplefilter("always", DopplermapWarning)
                r = solve_on_support(member, dict(fixed, **{name: float(gv)}), support.cool, support.hot,
                                     solves[j][m].x, readout=readout)
            unconverged += int(not r.success or any(issubclass(w.category, DopplermapWarning) for w in caught))
            refit[j, m] = float(r.chi2) * n_data
    return chi2, refit, mode, iterations, unconverged


def _support_task(shared, name, fixed, values, start, stop, kw, options):
    """A cluster task: :func:`support_unit` of data sets ``start:stop`` of the session's
    ``(problem, flux, err)``."""
    problem, flux, err = shared
    return support_unit(problem, name, fixed, values, flux[start:stop], err, kw, options)


def _support_read_outs(units, problem, name, fixed, v, flux, err, kw, o, profiles, progress, cluster,
                       finished: Finished | None) -> tuple[str, int, int]:
    """The support read-out of every unit ``(start, stop)`` of data sets (:func:`support_unit`),
    in this process one after another or as Dask tasks, each unit's profiles kept in
    ``finished`` as it finishes and taken from there where it finished before. Returns the modes
    used, the iterations and the unconverged refits."""
    modes, iterations, unconverged, done = set(), 0, 0, 0

    def store(start, stop, chi2, refit):
        nonlocal done
        profiles["chi2_total"][:, start:stop], profiles["chi2_support"][:, start:stop] = chi2, refit
        done += 1
        if progress is not None:
            progress("read-out", done, len(units))

    todo = []
    for start, stop in units:
        kept = None if finished is None else finished.take_read_out(start, stop)
        if kept is None:
            todo.append((start, stop))
        else:
            store(start, stop, *kept)
    if cluster is None:
        for start, stop in todo:
            chi2, refit, used, its, bad = support_unit(problem, name, fixed, v, flux[start:stop], err, kw, o)
            modes.add(used)
            iterations, unconverged = iterations + its, unconverged + bad
            if finished is not None:
                finished.add_read_out(start, stop, chi2, refit)
            store(start, stop, chi2, refit)
    elif todo:
        from dask.distributed import as_completed

        with Session(cluster, (problem, flux, err)) as session:
            futs = {session.submit(_support_task, name, fixed, v, start, stop, kw, o, retries=2):
                    (start, stop) for start, stop in todo}
            for fut in as_completed(list(futs)):
                start, stop = futs.pop(fut)  # the client keeps no task it has read
                chi2, refit, used, its, bad = session.result(fut)
                modes.add(used)
                iterations, unconverged = iterations + its, unconverged + bad
                if finished is not None:
                    finished.add_read_out(start, stop, chi2, refit)
                store(start, stop, chi2, refit)
    log.info("calibrate %s: support read-out of %d units (%d finished before), %d refits unconverged", name,
             len(units), len(units) - len(todo), unconverged)
    return "+".join(sorted(modes)) or "resumed", iterations, unconverged


def _simulated_sets(problem, at, t, kw, lm_sim, err, o, progress) -> np.ndarray:
    """``(1 + n_trial n_sim, n_epoch, n_vel)``: the observed profiles, then for each trial value
    ``n_sim`` data sets drawn from the map the data give there (:func:`calibrate_parameter`)."""
    obs = problem.obs
    rng = np.random.default_rng(o.seed)
    fine = latitude_band_grid(int(o.sim_oversample) * problem.grid.n_cell) if o.sim_oversample > 1 else None
    owner = owner_cells(problem.grid, fine) if fine is not None else None
    flux = [np.asarray(obs.flux, float)[None]]

    def trial_map(point):
        return invert_batch(pad_precomputed(point.pre), point.obs, flux=flux[0], err=err, mode="sequential",
                            form="folded", **dict(kw, lmbd=lm_sim, solver=calibration_solver(point, kw["tol"])))[0]

    one = None if o.trial_map_at is None else trial_map(at(o.trial_map_at))
    for i, tv in enumerate(t):  # the map the data give at each trial value (or the one map), data sets drawn from it
        point = at(tv)
        if one is None:
            res = trial_map(point)
            model = np.asarray(res.model)
        else:
            res = one
            model = np.asarray(forward(np.asarray(res.fssc), np.asarray(res.fssh), np.asarray(res.rv),
                                       np.asarray(res.amp), point.pre))
        if fine is not None:
            fp = point.replace(grid=fine)
            model = np.asarray(forward(np.asarray(res.fssc)[owner], np.asarray(res.fssh)[owner], np.asarray(res.rv),
                                       np.asarray(res.amp), fp.pre))
        flux.append(model[None] + err[None] * rng.standard_normal((o.n_sim, *err.shape)))
        if progress is not None:
            progress("trial", i + 1, t.size)
    return np.concatenate(flux)


def calibrate_parameter(problem: Problem, name: str, values, *, fixed: dict | None = None, trials=None,
                        options: CalibrationOptions = CalibrationOptions(), progress=None,
                        cluster=None) -> Calibration:
    """Calibrate grid parameter ``name`` by simulation (module docs; docs/parameters.md).

    Args:
        problem: the observed problem, solved with its settings (lambda, regulariser, tol,
            maxiter, fit_rv, fit_amp, offset_sigma, fit_components: a cool-spot-only map is
            simulated and read back as one; for others: ``problem.replace(settings=...)``).
        name: a grid parameter (``dopplermap.search.GRID_PARAMETERS``).
        values: (n_grid >= 3,) ascending grid values of ``name`` along which the base estimate
            (the profile ``chi2_total`` minimum) is read.
        fixed: the other grid parameters, held at these values (e.g. the grid's best point).
        trials: trial true values (default ``values``).
        options: the simulations and the read-out (:class:`CalibrationOptions`).
        progress: optional ``progress(stage, i, n)`` per trial map and per grid value.
        cluster: a :class:`dopplermap.search.Cluster` to spread the grid values' solves over,
            as tasks of at most :data:`TASK_MEMBERS` data sets (None: in this process).
    Returns:
        :class:`Calibration`.
    """
    check_calibratable(require_problem(problem, "calibrate_parameter"))
    settings, o = problem.settings, options
    name = grid_parameter(name)
    fixed = {grid_parameter(k): v for k, v in (fixed or {}).items()}
    if name in fixed:
        raise DopplermapInputError(f"calibrate_parameter: {name!r} is both calibrated and fixed")
    v = np.asarray(values, float)
    if v.ndim != 1 or v.size < 3 or np.any(np.diff(v) <= 0):
        raise DopplermapInputError(f"calibrate {name}: need >= 3 ascending grid values, got {np.asarray(values).tolist()}")
    t = v if trials is None else np.asarray(trials, float)
    if t.ndim != 1 or t.size < 2 or np.any(np.diff(t) <= 0):
        raise DopplermapInputError(f"calibrate {name}: need >= 2 ascending trial values, got {np.asarray(trials).tolist()}")
    n_sim = int(o.n_sim)
    check_calibration_size(problem, {name: (v.size, t.size)}, n_sim, o.max_solves, o.readout)  # before any allocation
    t_start = time.perf_counter()
    kw = dict(lmbd=settings.lmbd, regulariser=settings.regulariser, tol=settings.tol, maxiter=settings.maxiter,
              fit_rv=settings.fit_rv, fit_amp=settings.fit_amp, offset_sigma=settings.offset_sigma,
              fit_components=tuple(settings.fit_components))
    lm_sim = SIM_LMBD_FACTOR * float(settings.lmbd) if o.sim_lmbd is None else float(o.sim_lmbd)

    def at(value):
        star, comps = apply_parameters(problem, dict(fixed, **{name: float(value)}))
        return problem.replace(star=star, components=comps)


    obs = problem.obs
    err = np.asarray(obs.err, float)
    finished = None
    if o.table is not None:
        finished = Finished(o.table, fingerprint(problem_fingerprint(problem), name, fixed, v, t, kw, lm_sim,
                                                 dataclasses.asdict(dataclasses.replace(o, table=None))))
    flux = None if finished is None else finished.data()
    if flux is None:
        flux = _simulated_sets(problem, at, t, kw, lm_sim, err, o, progress)
        if finished is not None:
            finished.save_data(flux)
    elif progress is not None:
        progress("trial", t.size, t.size)
    n_data = obs.n_epoch * obs.n_vel
    kw = _member_solver(at(v[0]), kw, o.mode)
    unconverged = None
    if o.readout == "support":  # units: the observed data, then each trial's data sets
        profiles = {c: np.empty((v.size, flux.shape[0])) for c in ("chi2_total", "chi2_support")}
        units = [(0, 1)] + [(1 + i * n_sim, 1 + (i + 1) * n_sim) for i in range(t.size)]
        mode, iterations, unconverged = _support_read_outs(units, problem, name, fixed, v, flux, err, kw, o, profiles,
                                                           progress, cluster, finished)
        if unconverged:
            warn(f"calibrate {name}: {unconverged} of {v.size * flux.shape[0]} support refits stopped before their "
                 f"tolerance (tol {SUPPORT_READOUT.tol:g}); their chi2 is where they stopped")
    elif cluster is None:
        profiles = {c: np.empty((v.size, flux.shape[0])) for c in COLUMNS}
        mode, iterations, n_all, starts = o.mode, 0, flux.shape[0], None
        for j, gv in enumerate(v):  # every data set solved at each grid value, in one batch
            done = None if finished is None else finished.take(j, 0, n_all)
            if done is None:
                warm = starts is not None
                chi2, loss, many = grid_value_task(problem, name, fixed, float(gv), flux, err, _warm(kw, starts), mode)
                # every grid value in the mode the first chose (vmap: a new shape compiles anew, which
                # the first value's choice has counted)
                mode = many.mode
                x, its = _solutions(many)
                starts, iterations = (x if o.warm_start else None), iterations + its
                log.info("calibrate %s = %g: %s, %d iterations (%s)", name, gv, many.describe(), its,
                         "warm" if warm else "cold")
                done = (chi2 * n_data, loss * n_data)
                if finished is not None:
                    finished.add(j, 0, n_all, *done)
            else:
                starts = None  # a value from the table: its solutions were not kept
            profiles["chi2_total"][j], profiles["loss"][j] = done
            if progress is not None:
                progress("grid", j + 1, v.size)
    else:
        profiles = {c: np.empty((v.size, flux.shape[0])) for c in COLUMNS}
        mode, iterations = _on_cluster(cluster, problem, name, fixed, v, flux, err, kw, o, profiles, n_data,
                                       progress, finished)
    column = "chi2_support" if o.readout == "support" else o.column
    prof = profiles[column]
    est = np.array([profile_minimum(v, prof[:, m]) for m in range(flux.shape[0])])
    sims = est[1:].reshape(t.size, n_sim)
    belt = belt_estimate(t, sims, est[0])
    cost = calibration_cost(v.size, t.size, n_sim, o.readout)
    return Calibration(name=name, estimate=belt["estimate"], lo68=belt["lo68"], hi68=belt["hi68"],
                       lo95=belt["lo95"], hi95=belt["hi95"], raw=float(est[0]), lo_open=belt["lo_open"],
                       hi_open=belt["hi_open"], no_crossing=belt["no_crossing"], values=v, trials=t, fixed=fixed,
                       sims=sims, center=belt["center"], spread=belt["spread"], profile=prof[:, 0],
                       n_sim=n_sim, n_solves=cost["total"], seconds=time.perf_counter() - t_start, seed=int(o.seed),
                       column=column, sim_lmbd=lm_sim, sim_oversample=int(o.sim_oversample),
                       member_profiles=profiles, mode=mode, iterations=iterations, readout=o.readout,
                       unconverged=unconverged)
