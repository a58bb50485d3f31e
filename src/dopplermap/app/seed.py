"""``dopplermap invert-seed``, ``convert`` and ``simulate``: the seed's problem files.

* :func:`run_invert_seed` solves the seed's problem (three pickles, or a converted ``.npz``,
  read by :func:`read_problem`) and writes ``summary.json``, ``result.npz`` and figures;
* :func:`convert_seed` writes the three pickles to a safe ``.npz`` problem file;
* :func:`simulate_files` makes a spotted-star problem at the seed's size, as an ``.npz``
  problem or as seed-format pickles, plus ``truth.npz``.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from pathlib import Path

import click
import numpy as np

from .._options import options_of
from ..atomic import AtomicFolder, check_out_file, fingerprint, write_file, write_json
from ..errors import DopplermapError, active_warnings
from ..figure_process import submit
from ..io.seed import (
    load_problem,
    problem_from_arrays,
    read_seed,
    save_problem,
    seed_dicts,
    seed_problem,
    write_seed_pickles,
)
from ..io.seed_arrays import from_child
from ..problem import Settings, from_seed
from ..simulate import DEMO_SPOTS, demo_setup, simulate
from ..solvers import invert
from .output import Output, output_options
from .preflight import (
    SEED_FIGURES,
    check_seed_arguments,
    check_seed_out,
    check_simulation_arguments,
)

__all__ = ["SeedSolve", "SimulatedFiles", "convert_seed", "read_problem", "run_invert_seed", "seed_figure_arrays",
           "simulate_files"]


# modules a solve imports on its way (SciPy's optimiser for L-BFGS-B, JAX's MLIR dialects of a
# cached program): imported while the reading child still works, time this process would wait
_SOLVE_IMPORTS = {"lbfgsb": ("scipy.optimize", "jaxlib.mlir.dialects.mhlo"), "other": ("jaxlib.mlir.dialects.mhlo",)}


def _import_while(reading, solver: str) -> None:
    for name in _SOLVE_IMPORTS["lbfgsb" if solver in ("lbfgsb", "auto") else "other"]:
        if not reading.running():
            return
        try:
            importlib.import_module(name)
        except ImportError:  # a library version without it: the solve imports what it needs
            pass


def read_problem(idc, sg, cpcs, problem, trust_pickle: bool, reading=None, solver: str = "lbfgsb"):
    """The :class:`~dopplermap.io.seed.SeedProblem` of the three pickles or of a converted ``.npz``.

    ``reading``: a :class:`~dopplermap.app.seed_read.SeedReading` of the same pickles, started
    before this process imported JAX; its arrays (or its error) are taken, or, if the child
    failed, the files are read here. While it works, what a solve with ``solver`` will import
    is imported."""
    check_seed_arguments(idc, sg, cpcs, problem)
    if problem is not None:
        return load_problem(problem)
    if reading is not None:
        _import_while(reading, solver)
    sent = reading.finish() if reading is not None else None
    if sent is not None:
        try:
            arrays = from_child(*sent)
        except DopplermapError:
            raise
        except Exception:  # noqa: BLE001  (a child that sent nothing usable: read the files here)
            arrays = None
        if arrays is not None:
            return problem_from_arrays(arrays)
    return read_seed(idc, sg, cpcs, trust_pickle=trust_pickle)


def convert_seed(idc, sg, cpcs, out: Path, *, trust_pickle: bool, overwrite: bool):
    """Write the seed's pickles to the safe ``.npz`` problem file ``out``; returns the problem."""
    check_out_file(out, overwrite=overwrite)  # before any work
    prob = read_seed(idc, sg, cpcs, trust_pickle=trust_pickle)
    save_problem(out, prob)
    return prob


def _write_npz(path: Path, **arrays) -> None:
    write_file(path, lambda fh: np.savez(fh, **arrays))


def seed_figure_arrays(problem, res) -> dict:
    """What the figures of a seed inversion draw, as plain NumPy arrays (picklable without JAX)."""
    obs = problem.obs
    return dict(fssc=np.asarray(res.fssc), fssh=np.asarray(res.fssh), model=np.asarray(res.model),
                flux=np.asarray(obs.flux), err=np.asarray(obs.err), vels=np.asarray(obs.vels), chi2=float(res.chi2),
                lat=None if problem.lat is None else np.asarray(problem.lat),
                lon=None if problem.lon is None else np.asarray(problem.lon))


@dataclasses.dataclass(frozen=True)
class SeedSolve:
    """How :func:`run_invert_seed` solves: the seed's loss at ``lmbd`` (MEM), to ``tol`` within
    ``maxiter`` iterations with ``solver``; ``read_time``: seconds already spent reading the
    files, counted in the summary's ``total_time``."""

    lmbd: float
    tol: float
    maxiter: int
    solver: str = "lbfgsb"
    read_time: float = 0.0


@dataclasses.dataclass(frozen=True)
class SimulatedFiles:
    """What :func:`simulate_files` writes: the demo star at ``n_cell`` x ``n_epoch`` x ``n_vel``
    (S/N ``snr``, noise ``seed``) as ``fmt`` ("npz" or "seed-pickle"); ``per_cell_lis``,
    ``coordinates``, ``keys`` and ``as_jax`` choose the pickles' layout
    (:func:`dopplermap.io.seed.write_seed_pickles`)."""

    fmt: str = "npz"
    n_cell: int = 2500
    n_epoch: int = 150
    n_vel: int = 32
    snr: float = 500.0
    seed: int = 1
    per_cell_lis: bool = False
    coordinates: bool = True
    keys: object = None
    as_jax: bool = False


def run_invert_seed(problem, out: Path, *, solve: SeedSolve, output: Output | None = None, **loose) -> dict:
    """Invert a :class:`~dopplermap.io.seed.SeedProblem` and write the results to ``out``.

    The problem is solved as a :class:`dopplermap.problem.Problem` (:func:`~dopplermap.problem.from_seed`)
    by :func:`dopplermap.invert`. ``out`` is written as one atomic folder
    (:class:`dopplermap.atomic.AtomicFolder`, kind ``seed-result``): ``result.npz``, the
    figures, ``summary.json`` and the manifest, all carrying one run id; a kill leaves the
    previous folder or the complete new one. The figures are drawn by ``figure_process`` (a
    :class:`dopplermap.figure_process.FigureProcess` started with
    ``preload=(dopplermap.app.preflight.SEED_FIGURES,)``) while the result file is written, or here.
    ``solve``: :class:`SeedSolve`. ``output``: :class:`~dopplermap.app.output.Output` (its
    ``report`` does not apply here), or its fields as loose keywords.
    """
    opts = output_options("run_invert_seed", output, loose)
    lmbd, tol, maxiter, solver, read_time = solve.lmbd, solve.tol, solve.maxiter, solve.solver, solve.read_time
    quiet, plots, overwrite, figure_process = opts.quiet, opts.plots, opts.overwrite, opts.figure_process
    check_seed_out(out, overwrite)
    t0 = time.perf_counter()

    def progress(it, hist):
        if not quiet and it % 25 == 0:
            click.echo(f"  iteration {it:4d}  loss {hist['loss'][-1]:.8g}", err=True)

    prob = from_seed(problem, settings=Settings(lmbd=lmbd, regulariser="mem", tol=tol, maxiter=maxiter, solver=solver))
    # no callback when quiet: a compiled loop that reports progress is not kept in the compile cache
    res = invert(prob, callback=None if quiet else progress)
    total = time.perf_counter() - t0 + read_time
    obs = problem.obs
    inputs = fingerprint((obs.times, obs.vels, obs.flux, obs.err), problem.pre.cell_area,
                         {"lmbd": lmbd, "tol": tol, "maxiter": maxiter, "regulariser": "mem"})
    summary = dict(res.summary(), entropy=res.regulariser_value, read_time=read_time, total_time=total,
                   n_cell=problem.n_cell, n_epoch=problem.n_epoch, n_vel=problem.n_vel,
                   n_visible_min=int(problem.n_visible.min()), n_visible_max=int(problem.n_visible.max()),
                   has_coordinates=problem.has_coordinates, source=problem.source,
                   loss_definition="chi2/(n_epoch n_vel) + lmbd * seed MEM (the seed's loss)")
    with AtomicFolder(out, "seed-result", overwrite=overwrite, inputs=inputs) as folder:
        arrays = dict(fssc=res.fssc, fssh=res.fssh, fssp=res.fssp, rv=res.rv, amp=res.amp, model=res.model,
                      flux=np.asarray(obs.flux), err=np.asarray(obs.err), vels=np.asarray(obs.vels),
                      labels=np.array(problem.labels, dtype=str), run_id=np.array(folder.run_id),
                      history_loss=res.history.get("loss", np.zeros(0)),
                      history_chi2=res.history.get("chi2", np.zeros(0)))
        if problem.has_coordinates:
            arrays.update(lat=problem.lat, lon=problem.lon)
        if plots:
            figures = submit(figure_process, f"{SEED_FIGURES}:plot_seed_figures", folder.tmp,
                             seed_figure_arrays(problem, res))
        folder.write("result.npz", lambda p: _write_npz(p, **arrays))
        if plots:
            summary["figures"] = [p.name for p in figures()]
            folder.wrote()
            if not problem.has_coordinates:
                summary["figure_note"] = ("no cell coordinates in the input (sg has no grid_lats/grid_longs): "
                                          "filling factor drawn per cell index")
        summary.update(run_id=folder.run_id, input_fingerprint=inputs, warnings=active_warnings(), complete=True)
        folder.write("summary.json", lambda p: write_json(p, summary))
    return summary


def simulate_files(out: Path, *, options: SimulatedFiles | None = None, overwrite: bool = True,
                   **loose) -> list[Path]:
    """Simulate the demo star and write its problem (``fmt`` "npz" or "seed-pickle") and ``truth.npz``
    into the folder ``out``, as one atomic folder (kind ``simulation``). ``options``:
    :class:`SimulatedFiles`, or its fields as loose keywords."""
    o = options_of("simulate_files", SimulatedFiles, options, loose)
    fmt, n_cell, n_epoch, n_vel, snr, seed = o.fmt, o.n_cell, o.n_epoch, o.n_vel, o.snr, o.seed
    per_cell_lis, coordinates, keys, as_jax = o.per_cell_lis, o.coordinates, o.keys, o.as_jax
    check_simulation_arguments(fmt, n_cell, n_epoch, n_vel)
    star, grid, times, vels, comps = demo_setup(n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, seed=seed)
    sim = simulate(grid, star, times, vels, comps, DEMO_SPOTS, snr=snr, seed=seed)
    kw = dict(keys=keys, per_cell_lis=per_cell_lis, as_jax=as_jax, coordinates=coordinates)
    out = Path(out)
    with AtomicFolder(out, "simulation", overwrite=overwrite,
                      meta={"simulation": {"snr": snr, "seed": seed, "format": fmt}}) as folder:
        tmp = folder.tmp
        if fmt == "seed-pickle":
            names = [p.name for p in write_seed_pickles(sim, tmp, **kw).values()]
        else:
            prob = seed_problem(*seed_dicts(sim, **kw), sources=("simulation",) * 3)
            names = [save_problem(tmp / "problem.npz", prob).name]
        folder.wrote()
        folder.write("truth.npz", lambda p: _write_npz(
            p, fssc=sim.fssc, fssh=sim.fssh, rv=sim.rv, amp=sim.amp, lat=grid.lat, lon=grid.lon,
            times=np.asarray(times), noiseless=sim.noiseless, inclination=star.inclination, vsini=star.vsini_kms,
            period=star.period, snr=snr, run_id=np.array(folder.run_id)))
    return [out / n for n in names] + [out / "truth.npz"]
