"""``dopplermap lambda`` and ``dopplermap grid``: choose lambda; scan stellar parameters
(and calibrate them by simulation), on the problems of :func:`load_problem`.

The problem sources (a target TOML, an ``.npz`` file written by :func:`save_problem`, or
the simulated demo star) are described in :mod:`dopplermap.commands.search`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
import warnings
from pathlib import Path

import click
import numpy as np

from .. import calibrate, plan, plot, search, uncertainty
from ..atomic import AtomicFolder, check_out, new_run_id, write_manifest, write_text
from ..choices import GRID_READOUTS, check
from ..config import load_config
from ..errors import DopplermapInputError, DopplermapWarning, warn
from ..errorscale import describe_all, summarise
from ..memory import MAX_GRID_POINTS
from ..problem import Settings, demo_problem, from_config, from_npz, save_npz
from ..solvers import invert
from ..style import save_figure
from .defaults import DEFAULT_READOUT, GRID_TOL, LAMBDA_TOL
from .output import Scheduling

__all__ = ["load_problem", "run_grid", "run_lambda", "save_problem", "Source", "SearchSettings", "SearchRun",
           "GridSpec"]


@dataclasses.dataclass(frozen=True)
class Source:
    """The problem a search runs on (:func:`load_problem`): ``path`` a target TOML or an
    ``.npz`` PROBLEM file; None the simulated demo star of ``n_cell`` cells, ``n_epoch``
    epochs, ``n_vel`` velocities at signal-to-noise ``snr``."""

    path: Path | None = None
    n_cell: int = 400
    n_epoch: int = 30
    n_vel: int = 24
    snr: float = 500.0


@dataclasses.dataclass(frozen=True)
class SearchSettings:
    """What a search sets on its problem's settings; None keeps the problem's (the target's
    ``[inversion]``, else the command's default). ``lmbd``: the grid's (a lambda sweep sets its own)."""

    regulariser: str | None = None
    lmbd: float | None = None
    tol: float | None = None


@dataclasses.dataclass(frozen=True)
class SearchRun:
    """How a search runs and writes its folder.

    Attributes:
        overwrite: replace an earlier output of the command in the folder. quiet: no progress
            lines. resume: the grid: continue an interrupted search in the folder.
        scheduling: where the points are solved (:class:`~dopplermap.app.output.Scheduling`;
            its scheduler None is this process).
    """

    overwrite: bool = False
    quiet: bool = False
    resume: bool = False
    scheduling: Scheduling = Scheduling()


@dataclasses.dataclass(frozen=True)
class GridSpec:
    """A grid search: its axes and read-out.

    Attributes:
        params: the axes, ``NAME=start:stop:step``, ``NAME=start:stop:nN`` or ``NAME=v1,v2,...``
            (each name once). max_points: most grid points and calibration solves (default
            :data:`dopplermap.memory.MAX_GRID_POINTS`). delta_chi2: of the intervals.
        readout: one of :data:`dopplermap.choices.GRID_READOUTS`.
        n_sim: calibrate each axis of >= 3 values with this many simulated data sets per trial
            value (None: no calibration); calibrate_seed: their noise's seed;
            calibrate_oversample: their band grid's cells per problem cell (None: the default).
    """

    params: tuple = ()
    max_points: int | None = None
    delta_chi2: float = 1.0
    readout: str = DEFAULT_READOUT
    n_sim: int | None = None
    calibrate_seed: int = 0
    calibrate_oversample: int | None = None


def save_problem(path, obs, star=None, n_cell: int | None = None) -> Path:
    """Write observations (and optionally star parameters, grid size) as a PROBLEM ``.npz``."""
    return save_npz(path, obs, star=star, n_cell=n_cell)


def load_problem(path=None, *, n_cell=400, n_epoch=30, n_vel=24, snr=500.0, tol=1e-6, quiet=True, check=None):
    """The :class:`dopplermap.problem.Problem` of a target TOML (exactly what ``dopplermap
    invert`` solves: gravity darkening, light curve, method, [inversion] settings and the
    errors scaled by [data] error_scale included), of an ``.npz`` file, or of the simulated
    demo star (``path`` None; it and an ``.npz`` solve with ``solver="auto"``, a TOML's default).
    A line on stderr before an error scale is read from a fit, unless ``quiet``. ``check``: called
    with the problem before that fit (the command's input against the problem, before any solve)."""
    if path is not None and Path(path).suffix.lower() == ".toml":
        prob = from_config(load_config(path)).single("the lambda and grid searches")
        if check is not None:
            check(prob)
        if any(e.pending for e in prob.error_scale):
            if not quiet:
                click.echo("error scale from the residuals of a fit (4 solves) ...", err=True)
            prob = search.apply_error_scale(prob)
        return prob
    settings = Settings(tol=tol, solver="auto")  # as a target's [inversion] default
    if path is None:
        prob = demo_problem(n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, snr=snr, settings=settings)
    else:
        prob = from_npz(path, n_cell=n_cell, settings=settings)
    if check is not None:
        check(prob)
    return prob


def _echo_error_scale(prob) -> dict | None:
    """Print the line about the problem's error scale (if its errors were scaled); return
    what the output's JSON records of it."""
    scale = summarise(prob.error_scale)
    if scale is not None:
        click.echo(describe_all(scale))
    return scale


def _floats(text: str, name: str) -> np.ndarray:
    """``a:b:n`` (n log-spaced values for lambda, linear otherwise is chosen by caller) or ``v1,v2,...``."""
    try:
        if ":" in text:
            a, b, n = text.split(":")
            return np.array([float(a), float(b), float(int(n))])
        return np.array([float(v) for v in text.split(",") if v.strip()])
    except ValueError:
        raise DopplermapInputError(f"{name}: expected 'start:stop:count' or 'v1,v2,...', got {text!r}") from None


def _lambda_list(text: str) -> np.ndarray:
    if ":" in text:
        a, b, n = _floats(text, "--lmbds")
        if not (a > 0 and b > a and n >= 2):
            raise DopplermapInputError(f"--lmbds: need 0 < start < stop and count >= 2, got {text!r}")
        return np.logspace(np.log10(a), np.log10(b), int(n))
    return _floats(text, "--lmbds")


PARAM_FORMS = "NAME=start:stop:step, NAME=start:stop:nN (N values) or NAME=v1,v2,..."

STOP_TOLERANCE = 1e-6
"""A ``start:stop:step`` axis includes ``stop`` when it lies within this fraction of a step
of the last step's value (so that ``0:0.3:0.1`` ends at 0.3 despite rounding)."""


def _axis_range(name: str, spec: str, max_points: int | None) -> np.ndarray:
    """The values of ``start:stop:step`` (float step; ``stop`` included within
    ``STOP_TOLERANCE`` of a step) or ``start:stop:nN`` (N values, both ends included)."""
    parts = spec.split(":")
    bad = DopplermapInputError(f"--param {name}={spec}: expected start:stop:step or start:stop:nN (e.g. "
                               f"{name}=38:42:0.5 or {name}=38:42:n9)")
    if len(parts) != 3:
        raise bad
    count = parts[2].strip().lower().startswith("n")
    try:
        a, b = float(parts[0]), float(parts[1])
        third = parts[2].strip()[1:] if count else parts[2]
        step = float(third)
    except ValueError:
        raise bad from None
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(step)):
        raise DopplermapInputError(f"--param {name}={spec}: start, stop and step must be finite numbers")
    if count:
        if step != int(step) or step < 2 or not b > a:
            raise DopplermapInputError(f"--param {name}={spec}: start:stop:nN needs start < stop and a whole number "
                                       f"N >= 2 of values, got N = {third}")
        n = int(step)
    else:
        if not step > 0 or b < a:
            raise DopplermapInputError(f"--param {name}={spec}: need start <= stop and step > 0")
        n = math.floor((b - a) / step + STOP_TOLERANCE) + 1  # counted before any array is made
    limit = MAX_GRID_POINTS if max_points is None else max_points
    if n > limit:
        raise DopplermapInputError(f"--param {name}={spec} gives {n:.4g} points, more than the limit of {limit} "
                                   f"(each point is one inversion): use a larger step for {name} "
                                   "(or raise --max-points)")
    if count:
        v = np.linspace(a, b, n)
    else:
        v = a + step * np.arange(n)  # not a float loop: each value is start + i * step
        if abs(v[-1] - b) <= STOP_TOLERANCE * step:
            v[-1] = b
    # drop the binary noise of start + i * step (0.30000000000000004) below the step's own digits
    digits = 12 - math.floor(math.log10(max(abs(a), abs(b), abs(step), 1e-300)))
    return np.round(v, max(digits, 0))


def _axis(text: str, max_points: int | None = None) -> tuple[str, np.ndarray]:
    if "=" not in text:
        raise DopplermapInputError(f"--param: expected {PARAM_FORMS}, got {text!r}")
    name, spec = text.split("=", 1)
    name = name.strip()
    if ":" in spec:
        return name, _axis_range(name, spec, max_points)
    return name, _floats(spec, f"--param {name}")


def _axes(params, max_points: int | None = None) -> dict:
    """``{name: values}`` of the ``--param`` options; a parameter given twice is refused."""
    axes: dict = {}
    for text in params:
        name, values = _axis(text, max_points)
        name = search.grid_parameter(name)
        if name in axes:
            first = next(t for t in params if t.split("=", 1)[0].strip() == name)
            raise DopplermapInputError(f"--param {name} is given twice ({first!r} and {text!r}); give each "
                                       "parameter once, with all its values")
        axes[name] = values
    return axes


def _write_json(path: Path, data: dict) -> None:
    write_text(path, json.dumps(data, indent=2, default=float))


def _is_grid(folder: Path) -> bool:
    """A grid-search folder: its manifest is written only when the search completes (a support
    read-out's first pass writes :data:`SUPPORT_FIRST_TABLE` before ``grid.csv``)."""
    return (folder / "grid.csv").is_file() or (folder / SUPPORT_FIRST_TABLE).is_file()


@contextlib.contextmanager
def _expected_chi2_spread():
    """In a sweep or a grid, a reduced chi2 far from 1 at some points is the point of the
    search (too much or too little regularisation, wrong parameters): not a warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="reduced chi2", category=DopplermapWarning)
        yield


def run_lambda(source: Source, out: Path, *, lmbds: str = "0.001:100:16", target_chi2: float | None = None,
               parameter: str = "lmbd", settings: SearchSettings = SearchSettings(),
               run: SearchRun = SearchRun(), refine_corner: bool = True) -> dict:
    """``dopplermap lambda``: sweep ``lmbds`` (``start:stop:count`` log-spaced, or ``v1,v2,...``)
    on the problem of ``source`` and write the folder ``out`` (lcurve.csv, lambda.json,
    lcurve.png) atomically; progress on stderr unless ``run.quiet``, the result line on stdout.
    ``parameter="lmbd_time"`` (``--time``) sweeps the time windows' coupling instead
    (:func:`dopplermap.search.sweep_lmbd_time`); lambda.json then says ``"parameter":
    "lmbd_time"``. ``run.scheduling.scheduler``: None/``"sync"`` in this process, ``"local"`` a
    local Dask cluster of ``run.scheduling.workers``, else a scheduler's address (the lambda sweep only).
    ``settings``: its regulariser and tol. ``refine_corner``: add solves around the corner
    (:func:`dopplermap.search.refine_corner`; lcurve.csv holds them, lambda.json lists them in
    ``lmbds_added``, their seconds in ``corner_solves_time``, apart from ``sweep_time``). Returns
    what lambda.json holds."""
    problem, overwrite, quiet = source.path, run.overwrite, run.quiet
    regulariser, tol = settings.regulariser, settings.tol
    check_out(out, "lambda", overwrite=overwrite)  # before any work
    lm = _lambda_list(lmbds)
    if not np.all(np.isfinite(lm) & (lm >= 0)):
        raise DopplermapInputError(f"--lmbds: every lambda must be finite and >= 0, got {lmbds!r}")
    if parameter == "lmbd_time":  # before any work: only a target's [map] cuts the data into windows
        if problem is None or Path(problem).suffix.lower() != ".toml":
            raise DopplermapInputError("--time sweeps the coupling of time windows: give a target .toml with "
                                       "[map] windows (the demo star and .npz problems have one static map)")
        if not load_config(problem).map.windowed:
            raise DopplermapInputError(f"--time: {problem} has no time windows ([map] windows, window_rotations, "
                                       "window_edges or window_gap)")
        if np.any(lm <= 0):
            raise DopplermapInputError(f"--lmbds: every lmbd_time of a --time sweep must be > 0, got {lmbds!r}")
    cluster = run.scheduling.cluster()
    if cluster is not None and parameter == "lmbd_time":
        raise DopplermapInputError("--scheduler: a --time sweep runs in this process")
    prob = load_problem(problem, n_cell=source.n_cell, n_epoch=source.n_epoch, n_vel=source.n_vel, snr=source.snr,
                        tol=LAMBDA_TOL, quiet=quiet)
    scale = _echo_error_scale(prob)
    fp = search.problem_fingerprint(prob)
    prob = prob.replace(settings=prob.settings.replace(regulariser=regulariser, tol=tol))  # None: the problem's
    if tol is None and prob.settings.tol > LAMBDA_TOL:  # a looser target tol leaves solver noise on the L-curve
        prob = prob.replace(settings=prob.settings.replace(tol=LAMBDA_TOL))
    regulariser, tol = prob.settings.regulariser, prob.settings.tol
    t_start = time.perf_counter()

    time_sweep = parameter == "lmbd_time"
    name = "lmbd_time" if time_sweep else "lambda"

    def progress(n, total, res):  # points done, the solve's chi2, elapsed
        value = res.lmbd_time if time_sweep else res.lmbd
        click.echo(f"{name} {n}/{total}: {value:.4g}  chi2 {res.chi2:.5g}  ({res.iterations} it; "
                   f"{time.perf_counter() - t_start:.1f} s)", err=True)

    def near_corner(n, most, res):
        value = res.lmbd_time if time_sweep else res.lmbd
        click.echo(f"{name} {value:.4g} near the corner ({n} of at most {most})  chi2 {res.chi2:.5g}  "
                   f"({res.iterations} it; {time.perf_counter() - t_start:.1f} s)", err=True)

    with _expected_chi2_spread():
        if time_sweep:
            sw = search.sweep_lmbd_time(prob, lm, progress=None if quiet else progress)
        else:
            sw = search.sweep_lambda(prob, lm, progress=None if quiet else progress, cluster=cluster)
    swept = sw
    if refine_corner:
        with _expected_chi2_spread():
            sw = search.refine_corner(prob, swept, progress=None if quiet else near_corner)
    choice = {"lmbds": swept.lmbd.tolist(), "lmbds_added": sorted(set(sw.lmbd.tolist()) - set(swept.lmbd.tolist())),
              "sweep_time": swept.total_time, "corner_solves_time": sw.total_time - swept.total_time,
              "solve_mode": sw.mode, "repaired": sw.repaired,
              "regulariser_floor": sw.floor, "regulariser": regulariser, "tol": tol, "problem": fp, "error_scale": scale, "parameter": parameter}
    if time_sweep:
        choice["lmbd"] = prob.settings.lmbd
    try:
        corner, _ = search.lcurve_corner(sw)
        choice["lcurve_corner"] = corner
    except ValueError as exc:
        corner = None
        choice["lcurve_corner"] = None
        choice["lcurve_message"] = str(exc)
        click.echo(f"warning: {exc}", err=True)
    missed, target_res = None, None
    if target_chi2 is not None:
        try:
            with _expected_chi2_spread():
                lmt, target_res, trials = search.lambda_for_chi2(prob, target_chi2, lo=float(sw.lmbd[0]),
                                                                 hi=float(sw.lmbd[-1]), sweep=sw, parameter=parameter)
            choice.update(target_chi2=target_chi2, target_lambda=lmt, target_result_chi2=target_res.chi2,
                          target_trials=trials)
        except DopplermapInputError as exc:  # the sweep is still worth keeping: write it, then fail
            missed = str(exc)
            choice.update(target_chi2=target_chi2, target_lambda=None, target_message=missed)
    if not time_sweep:
        _effective_dofs(prob, sw, corner, target_res, choice, quiet)
    lines = sw.table().splitlines()  # each row also names its settings and problem
    table = "\n".join([lines[0] + ",regulariser_kind,tol,problem"]
                      + [f"{ln},{regulariser},{tol!r},{fp}" for ln in lines[1:]]) + "\n"
    with AtomicFolder(out, "lambda", overwrite=overwrite, inputs=fp) as folder:
        folder.write("lcurve.csv", lambda p: p.write_text(table))
        choice["run_id"] = folder.run_id
        folder.write("lambda.json", lambda p: p.write_text(json.dumps(choice, indent=2, default=float)))
        folder.write("lcurve.png", lambda p: save_figure(plot.plot_lcurve(
            sw, corner=corner, target=target_chi2, target_lambda=choice.get("target_lambda")), p))
    if missed is not None:
        raise DopplermapInputError(f"--target-chi2: {missed}; the sweep is written to {out}")
    msg = f"L-curve corner {name} {corner:.4g}" if corner is not None else "no L-curve corner"
    if choice.get("corner_dof"):
        msg += f" (chi2 {_per_point_and_dof(choice['corner_dof'])})"
    if target_chi2 is not None:
        msg += (f"; {name} for chi2={target_chi2:g}: {choice['target_lambda']:.4g} "
                f"(chi2 {choice['target_result_chi2']:.5g}, {len(choice['target_trials'])} more solves)")
        if choice.get("target_dof"):
            msg += f" (chi2 {_per_point_and_dof(choice['target_dof'])})"
    n_added = len(choice["lmbds_added"])
    solves = f"{swept.lmbd.size} solves" + (f" + {n_added} near the corner" if n_added else "")
    click.echo(f"{msg}  ({solves} in {sw.total_time:.1f} s); results in {out}")
    return choice


DOF_TOL = 1e-7
"""Solver tolerance of the maps whose effective degrees of freedom ``dopplermap lambda`` reports."""


def _per_point_and_dof(d: dict) -> str:
    return f"{d['chi2']:.4g} per point, {d['chi2_nu']:.4g} per residual dof; {d['p_eff']:.0f} effective parameters"


def _effective_dofs(prob, sw, corner, target_res, choice: dict, quiet: bool) -> None:
    """Record in ``choice`` the chi2 per point and per residual degree of freedom
    (:func:`dopplermap.uncertainty.effective_dof`) of the map at the L-curve corner (one more
    solve, warm-started from the nearest sweep point) and at the target chi2's lambda, both
    solved to :data:`DOF_TOL` at least; a
    ``dof_message`` says why not where they cannot be had (several line sets, time windows, a
    regulariser coupling cells, a Jacobian too large:
    :func:`dopplermap.uncertainty.effective_dof_refusal`)."""
    why = uncertainty.effective_dof_refusal(prob)
    if why is not None:
        choice["dof_message"] = f"no chi2 per residual degree of freedom: {why}"
        return
    if not quiet:
        click.echo("effective degrees of freedom at the chosen maps ...", err=True)
    # polished to DOF_TOL: a loosely converged map leaves cells off the floor that the regulariser
    # would still push down, and counts them as parameters (LO Peg's corner: 319 at tol 1e-5, 282)
    tight = prob.replace(settings=prob.settings.replace(tol=min(prob.settings.tol, DOF_TOL)))
    maps = {}
    with _expected_chi2_spread():
        if corner is not None:
            near = int(np.argmin(np.abs(np.log(sw.lmbd / corner))))
            maps["corner"] = invert(tight, lmbd=corner, x0=sw.results[near].x)
            choice["corner_chi2"] = maps["corner"].chi2
        if target_res is not None:
            maps["target"] = target_res if prob.settings.tol <= DOF_TOL else invert(
                tight, lmbd=target_res.lmbd, x0=target_res.x)
    for key, res in maps.items():
        try:
            d = uncertainty.effective_dof(prob, res)
        except DopplermapInputError as exc:
            choice["dof_message"] = f"no chi2 per residual degree of freedom: {exc}"
            return
        choice[f"{key}_dof"] = {"chi2": d.chi2, **d.to_dict()}


def run_grid(source: Source, out: Path, grid: GridSpec, *, settings: SearchSettings = SearchSettings(),
             run: SearchRun = SearchRun()) -> dict:
    """``dopplermap grid``: invert over the grid of ``grid.params`` (``NAME=start:stop:step``,
    ``NAME=start:stop:nN`` or ``NAME=v1,v2,...``; each name once) on the problem of
    ``source``, optionally calibrating each axis of >= 3 values by ``grid.n_sim``
    simulations per trial value; writes grid.csv (as points finish), grid.json, grid.png (and
    landscape.png, the chi2 landscape of one or two parameters) and
    the manifest to ``out``; progress on stderr unless ``quiet``, the best point, the
    intervals (flagged where not to be trusted), the refused points and, for a small grid,
    the table on stdout. The folder is locked while the search runs. Returns what grid.json
    holds."""
    problem, params, max_points, readout = source.path, grid.params, grid.max_points, grid.readout
    delta_chi2, n_sim = grid.delta_chi2, grid.n_sim
    lmbd, regulariser, tol = settings.lmbd, settings.regulariser, settings.tol
    overwrite, quiet, resume = run.overwrite, run.quiet, run.resume
    axes = _axes(params, max_points)
    search.check_grid_size(axes, max_points)
    if not (out.is_dir() and resume and _is_grid(out)):  # resuming: grid_search checks the table
        check_out(out, "grid", overwrite=overwrite, unfinished=_is_grid,  # before any work
                  flag="--resume (to continue an interrupted search) or --overwrite")
    cluster = run.scheduling.cluster()
    prob = load_problem(problem, n_cell=source.n_cell, n_epoch=source.n_epoch, n_vel=source.n_vel, snr=source.snr,
                        tol=GRID_TOL, quiet=quiet, check=lambda p: search.validate_points(p, search.grid_points(axes, max_points)))
    _echo_error_scale(prob)
    settings = prob.settings.replace(lmbd=lmbd, regulariser=regulariser, tol=tol)
    if tol is None and settings.tol > GRID_TOL:  # a looser target tol leaves solver noise in the landscape
        settings = settings.replace(tol=GRID_TOL)
    dof = False
    if check(readout, GRID_READOUTS, "--readout") == "profiled":
        profiled = search.PROFILE_READOUT.settings(settings)
        settings = settings.replace(**(profiled if tol is None else dict(profiled, tol=tol)))
        dof = search.PROFILE_READOUT.dof
        if dof and (why := search.dof_refusal(prob)) is not None:
            dof = False
            warn(f"grid --readout profiled reads chi2_total without the effective-parameter correction ({why}): "
                 "the profile can favour the parameters that give the map the most room to fit the noise")
    prob = prob.replace(settings=settings)
    if readout == "support":
        if prob.windows is not None:
            raise DopplermapInputError("grid --readout support refits one static map; the problem has time windows")
    if n_sim is not None:  # refuse what cannot be calibrated before the search, not after it
        calibrate.check_calibratable(prob)
        sizes = {k: (np.size(v), np.size(v)) for k, v in axes.items() if np.size(v) >= 3}
        if not sizes:
            raise DopplermapInputError("--calibrate needs a --param axis of at least 3 values")
        calibrate.check_calibration_size(prob, sizes, n_sim, max_points, _calibrated_readout(readout))
    out.mkdir(exist_ok=True)
    # the lock first: a second process must not clear or resume this folder meanwhile; it
    # is released before the manifest, which lists every file of the folder
    with search.grid_lock(out / "grid.csv"):
        if overwrite and not resume:  # an earlier grid search (checked above): start again
            for name in ("grid.csv", SUPPORT_FIRST_TABLE, SUPPORT_FIRST_SOLVES, "grid.json", "grid.png", "landscape.png", "dopplermap.json"):
                (out / name).unlink(missing_ok=True)
            for kept in out.glob(f"{CALIBRATION_PREFIX}*"):  # an earlier calibration's finished work
                kept.unlink()
        summary, rows, best, calibrated = _search_and_summarise(prob, axes, out, resume, cluster, max_points, quiet,
                                                                delta_chi2, problem, n_sim, grid.calibrate_seed,
                                                                grid.calibrate_oversample, readout, dof)
    _finish_grid_folder(out, summary["problem"])
    _print_grid(axes, rows, best, summary, calibrated, delta_chi2)
    click.echo(f"results in {out}")
    return summary


JITTER_LIMIT = 0.1
"""``grid`` warns when its ``chi2_jitter`` exceeds this fraction of the intervals' Delta chi2."""

TABLE_ROWS = 60
"""Most grid points whose table ``grid`` prints on stdout (larger grids: grid.csv)."""


def _describe(row: dict) -> str:
    """The implied radius (and log g) of a table row, for the screen."""
    text = f"R {row['radius']:.3g} R_sun"
    if math.isfinite(row.get("logg", math.nan)):
        text += f", log g {row['logg']:.2f}"
    return text


def _search_and_summarise(prob, axes, out, resume, cluster, max_points, quiet, delta_chi2, problem, n_sim,
                          calibrate_seed, calibrate_oversample, readout="regularised", dof=False):
    """The grid search, its intervals (flagged) and calibration, grid.json and grid.png; with
    ``dof`` read on ``chi2_dof`` (:func:`dopplermap.search.effective_dof`); with ``readout``
    ``"support"`` a regularised first pass (:data:`SUPPORT_FIRST_TABLE`), then every point
    refitted on the support of the first pass's best map and read on ``chi2_support``
    (:func:`dopplermap.search.support_from_point`; the first pass's solves kept in
    :data:`SUPPORT_FIRST_SOLVES` are not solved again); else on ``chi2_total``."""
    t_start, best_so_far = time.perf_counter(), {}

    def progress(n, total, row):  # points done, best so far (the grid's criterion), elapsed
        at_point = ", ".join(f"{k}={row[k]:g}" for k in axes)
        if row["status"] != "ok":
            click.echo(f"point {n}/{total}: {at_point} refused: {row['reason']} ({_describe(row)})", err=True)
            return
        if not best_so_far or row["chi2_total"] < best_so_far["chi2_total"]:
            best_so_far.update(row)
        at = ", ".join(f"{k}={best_so_far[k]:g}" for k in axes)
        click.echo(f"point {n}/{total}: {at_point} chi2 {row['chi2']:.5g} ({_describe(row)}); best so far {at} "
                   f"(chi2 {best_so_far['chi2']:.5g}); {time.perf_counter() - t_start:.1f} s", err=True)

    support = None
    with _expected_chi2_spread():
        if readout == "support":  # the regularised grid chooses the support, then every point is refitted on it
            solves = out / SUPPORT_FIRST_SOLVES  # each point's map, kept: the refit starts from it, not a new solve
            first = search.grid_search(prob, axes, out / SUPPORT_FIRST_TABLE, resume=resume, cluster=cluster,
                                       max_points=max_points, progress=None if quiet else progress,
                                       solutions=solves)
            if not search.computed_rows(first):
                raise DopplermapInputError("grid --readout support: no grid point was solved, so there is no "
                                           "regularised map to choose the support from")
            at = search.best_point(first, list(axes), column="chi2_total")
            kept = search.read_solutions(solves, prob, axes).get(int(at["point"]))
            support = search.support_from_point(prob, {k: at[k] for k in axes}, solve=kept)
            if (why := support.crowded()) is not None:
                warn(f"grid --readout support: {why}")
            if not quiet:
                click.echo(f"support: {support.summary()['cool_cells']} cool + {support.summary()['hot_cells']} hot "
                           f"cells free, from the regularised map at " + ", ".join(f"{k}={at[k]:g}" for k in axes)
                           + "; refitting every point", err=True)
            best_so_far.clear()
        rows = search.grid_search(prob, axes, out / "grid.csv", resume=resume, cluster=cluster,
                                  max_points=max_points, progress=None if quiet else progress, dof=dof,
                                  support=support, solutions=None if support is None else out / SUPPORT_FIRST_SOLVES)
    # one criterion for the best point and the intervals
    column = "chi2_support" if support is not None else "chi2_dof" if dof else "chi2_total"
    best = search.best_point(rows, list(axes), column=column)
    intervals = {}
    for name in axes:
        iv = search.delta_chi2_interval(rows, name, delta=delta_chi2, column=column)
        flags = search.interval_flags(iv, name)
        intervals[name] = {k: iv[k] for k in ("best", "lo", "hi", "at_edge", "best_at_edge", "refused_beyond",
                                              "chi2_best", "delta", "note")}
        intervals[name]["flags"] = flags
        if flags and n_sim is None:
            warn(f"grid interval of {name} {iv['lo']:g} .. {iv['hi']:g} is not to be trusted: {'; '.join(flags)}; "
                 "calibrate it by simulation (--calibrate N)")
    refused = [{"point": r["point"], **{k: r[k] for k in axes}, "radius": r["radius"], "reason": r["reason"]}
               for r in rows if r["status"] != "ok"]
    fp = search.problem_fingerprint(prob)
    settings = prob.settings
    summary = {"best": best, "intervals": intervals, "refused": refused, "mass": prob.stellar_mass,
               "support": None if support is None else support.summary(),
               "lmbd": settings.lmbd, "regulariser": settings.regulariser, "tol": settings.tol, "problem": fp,
               "error_scale": summarise(prob.error_scale), "readout": readout, "column": column,
               "chi2_jitter": (search.chi2_jitter(prob, {k: best[k] for k in axes}, chi2_total=best["chi2_total"])
                               if best else None),
               # the built-in demo's data are made on the inversion grid itself: no discretisation error
               "model_error_chi2": (_model_error(prob, {k: best[k] for k in axes}, delta_chi2)
                                    if best and problem is not None else None),
               "where": _where(cluster, len(rows))}
    jitter = summary["chi2_jitter"]
    # the regularised solves' noise; the support read-out reads refits converged to tol 1e-10 instead
    if column != "chi2_support" and jitter is not None and jitter > JITTER_LIMIT * delta_chi2:  # NaN: False
        warn(f"grid: chi2_total at the best point moves by {jitter:.3g} between the grid's solve and one converged to "
             f"tol {search.JITTER_REFERENCE['tol']:g} (chi2_jitter), more than {JITTER_LIMIT:g} of the intervals' "
             f"Delta chi2 {delta_chi2:g}: differences of that size between points are where the solves stopped, "
             "not the data; use a tighter --tol (below 1e-6 the cube is float64) or the Gauss-Newton solver")
    calibrated = None
    if n_sim is not None:
        if calibrate_oversample is None:
            calibrate_oversample = 1 if problem is None else calibrate.SIM_OVERSAMPLE
        calibrated = _calibrate(prob, axes, best, n_sim, calibrate_seed, calibrate_oversample, quiet, max_points,
                                cluster=cluster, folder=out, readout=_calibrated_readout(readout))
        summary["calibrated"] = {name: c.summary() for name, c in calibrated.items()}
    _write_json(out / "grid.json", summary)
    save_figure(plot.plot_grid(rows, list(axes), column=column, delta=delta_chi2, calibrated=calibrated),
                out / "grid.png")
    if len(axes) <= 2:
        save_figure(plot.plot_chi2_landscape(rows, list(axes)), out / "landscape.png")
    return summary, rows, best, calibrated


def _where(cluster, n_points: int) -> str:
    """Where a grid's points ran, for grid.json: this process (and how many points at a time) or
    the Dask cluster."""
    if cluster is None:
        return f"this process, up to {plan.member_threads(n_points)} point(s) at a time"
    return cluster.describe()


def _model_error(prob, point: dict, delta_chi2: float) -> float | None:
    """The surface grid's discretisation error at the best point in chi2 units
    (:func:`dopplermap.search.model_grid_error`), warned about where it reaches the intervals' Delta chi2."""
    err = search.model_grid_error(prob, point)
    if err is not None and err > delta_chi2:
        n, m = prob.grid.n_cell, prob.subdivide
        cells = f"{n} cells" if m == 1 else f"{n} cells of {m} x {m} sub-cells"
        warn(f"grid: the surface grid's discretisation error is worth chi2 {err:.3g} against the errors (the model on "
             f"{cells} against {search.MODEL_ERROR_REFINE}x as many), more than the intervals' Delta chi2 "
             f"{delta_chi2:g}: it can move the best point and the intervals; use more cells ([grid] n_cell) or "
             "integrate each over sub-cells ([grid] subdivide)")
    return err


def _print_grid(axes, rows, best, summary, calibrated, delta_chi2) -> None:
    """stdout: the table of a small grid, the refused points, the best point and the intervals.
    A read-out on another column than ``chi2_total`` (``summary["column"]``: the support refit's
    ``chi2_support``, the profiled ``chi2_dof``) shows that column beside the regularised solve's
    reduced ``chi2``, and its intervals are labelled with it."""
    column = summary.get("column", "chi2_total")
    extra = [] if column == "chi2_total" else [column]
    # a joint fit's light curves shape every point's map; their chi2 is shown, the lines' is read
    lc = ["chi2_lc"] if any(r["status"] == "ok" and math.isfinite(r.get("chi2_lc", math.nan)) for r in rows) else []
    if len(rows) <= TABLE_ROWS:
        names = list(axes)
        click.echo("  ".join([f"{n:>12s}" for n in names] + [f"{c:>12s}" for c in ["chi2", *lc, *extra]]
                             + [f"{'R/R_sun':>8s}", f"{'log g':>6s}", "status"]))
        for r in rows:
            logg = f"{r['logg']:6.2f}" if math.isfinite(r["logg"]) else f"{'-':>6s}"
            vals = [f"{r[c]:12.6g}" if r["status"] == "ok" else f"{'-':>12s}" for c in ["chi2", *lc, *extra]]
            status = r["status"]  # the reasons follow the table
            click.echo("  ".join([f"{r[n]:12g}" for n in names] + vals + [f"{r['radius']:8.3g}", logg, status]))
    if summary["refused"]:
        click.echo(f"{len(summary['refused'])} of {len(rows)} points refused (not solved): " + "; ".join(
            ", ".join(f"{k}={x[k]:g}" for k in axes) + f" ({x['reason']})" for x in summary["refused"][:10])
            + ("; ..." if len(summary["refused"]) > 10 else ""))
    if calibrated:  # one criterion for the best point and the intervals: the calibrated one
        click.echo("best (calibrated): " + ", ".join(
            f"{k}={calibrated[k].estimate:.4g}" if k in calibrated else f"{k}={best[k]:g} (held)" for k in axes))
        for name, c in calibrated.items():
            edge = " (reaches the grid edge)" if (c.lo_open or c.hi_open) else ""
            cross = "; the observed estimate is beyond every trial's, widen the grid" if c.no_crossing else ""
            click.echo(f"{name}: {c.estimate:.4g}, 68 % {c.lo68:.4g} .. {c.hi68:.4g}, 95 % {c.lo95:.4g} .. "
                       f"{c.hi95:.4g} (calibrated by {c.n_sim} simulations per trial, {c.n_solves} solves, "
                       f"{c.seconds:.0f} s){edge}{cross}")
    else:
        read = "".join(f"  {c} {best[c]:.6g}" for c in extra)
        click.echo("best: " + ", ".join(f"{k}={best[k]:g}" for k in axes) + f"  chi2 {best['chi2']:.5g}{read}  "
                   f"({_describe(best)})")
        for name, iv in summary["intervals"].items():
            edge = " (reaches the grid edge)" if iv["at_edge"] else ""
            flag = f"; NOT TO BE TRUSTED: {'; '.join(iv['flags'])}; try --calibrate N" if iv["flags"] else ""
            lines = " of the line profiles" if lc else ""
            click.echo(f"{name}: {iv['lo']:g} .. {iv['hi']:g} (Delta {column}{lines} <= {delta_chi2:g}){edge}{flag}")


SUPPORT_FIRST_TABLE = "grid-regularised.csv"
"""``grid --readout support``: the table of the regularised first pass, whose best point's map
chooses the support (``grid.csv`` holds the refitted points)."""

SUPPORT_FIRST_SOLVES = "grid-regularised-solves.jsonl"
"""``grid --readout support``: the first pass's regularised solves, one JSON line per point
(:func:`dopplermap.search.grid_search`'s ``solutions``): the support is read off the best
point's and every point's refit starts from its own, so none is solved twice; ``--resume``
continues it."""

CALIBRATION_PREFIX = "calibrate-"
"""The grid folder's files of a calibration's finished work (``calibrate-NAME.jsonl`` and
its data sets ``.npz``, :class:`dopplermap.calibrate.Finished`): ``--resume`` continues from them."""


def _calibrated_readout(readout: str) -> str:
    """The base read-out a calibration simulates (:data:`dopplermap.calibrate.READOUTS`): the
    support refit for ``--readout support``; else the regularised solves with the grid's
    settings (``--readout profiled``: its lambda and tolerance)."""
    return "support" if readout == "support" else "regularised"


def _calibrate(prob, axes, best, n_sim, seed, oversample, quiet, max_solves=None, cluster=None, folder=None,
               readout="regularised") -> dict:
    """Calibrate every axis of >= 3 values in the order of the axes; the others are held at
    the grid's best point, or at their calibrated value once calibrated (as the benchmark
    measured it: inclination, then vsini at the calibrated inclination). With a ``folder``
    each calibration keeps its finished work there as it goes (a killed run resumes it).
    ``readout``: the base read-out each data set is read by (:data:`dopplermap.calibrate.READOUTS`)."""
    names = [n for n in axes if np.size(axes[n]) >= 3]
    if not names:
        raise DopplermapInputError("--calibrate needs a --param axis of at least 3 values")
    out = {}
    held = {k: float(best[k]) for k in axes}
    for i, name in enumerate(names):
        v = np.sort(np.asarray(axes[name], float))
        cost = calibrate.calibration_cost(v.size, v.size, n_sim, readout)
        if not quiet:
            refits = f" + {cost['refits']} support refits" if cost["refits"] else ""
            click.echo(f"calibrating {name}: {cost['trial_solves']} trial maps + {cost['batched_calls']} batched "
                       f"solves of {cost['members']} data sets{refits} ({cost['total']} solves)", err=True)
        fixed = {k: x for k, x in held.items() if k != name}

        def progress(stage, i, n, name=name):
            if not quiet:
                click.echo(f"calibrating {name}: {stage} {i}/{n}", err=True)

        with _expected_chi2_spread():
            table = None if folder is None else folder / f"{CALIBRATION_PREFIX}{name}.jsonl"
            options = calibrate.CalibrationOptions(n_sim=n_sim, seed=seed + i, sim_oversample=oversample,
                                                   max_solves=max_solves, table=table, readout=readout)
            out[name] = calibrate.calibrate_parameter(prob, name, v, fixed=fixed, options=options, progress=progress,
                                                      cluster=cluster)
        held[name] = out[name].estimate
    return out


def _finish_grid_folder(out: Path, fp: str) -> None:
    """Write the manifest of a finished grid folder (the table grows in place, for --resume)."""
    write_manifest(out, kind="grid", run_id=new_run_id(), inputs=fp)
