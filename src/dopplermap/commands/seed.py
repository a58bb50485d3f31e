"""``dopplermap invert-seed``, ``convert`` and ``simulate``: the seed's problem files.

* ``invert-seed`` solves the seed's problem (three pickles, or a converted ``.npz``) and
  writes ``summary.json``, ``result.npz`` and figures to ``--out``.
* ``convert`` writes the three pickles to a safe ``.npz`` problem file.
* ``simulate`` makes a spotted-star problem at the seed's size, as an ``.npz`` problem
  (default) or as seed-format pickles, plus ``truth.npz``.

What they run is in :mod:`dopplermap.app.seed`.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import click

from ..choices import SIMULATION_FORMATS, SOLVER_CHOICES

_PATH = click.Path(dir_okay=False, path_type=Path)


def register(group):
    @group.command("invert-seed")
    @click.option("--idc", type=_PATH, help="The seed's idc pickle (observations).")
    @click.option("--sg", type=_PATH, help="The seed's sg pickle (surface grid).")
    @click.option("--cpcs", type=_PATH, help="The seed's cpcs pickle (per-epoch coefficients).")
    @click.option("--problem", type=_PATH, help="A .npz problem from `dopplermap convert` (instead of pickles).")
    @click.option("--trust-pickle", is_flag=True,
                  help="Allow unpickling (it can run code from the files): only for files you trust.")
    @click.option("--lmbd", type=click.FloatRange(min=0), default=1.0, show_default=True,
                  help="Regularisation weight lambda.")
    @click.option("--tol", type=click.FloatRange(min=0, min_open=True), default=1e-5, show_default=True,
                  help="L-BFGS-B ftol/gtol (the seed's).")
    @click.option("--maxiter", type=click.IntRange(min=1), default=1000, show_default=True, help="Iteration cap.")
    @click.option("--solver", type=click.Choice(SOLVER_CHOICES), default="lbfgsb", show_default=True,
                  help="Back end (lbfgsb: the seed's algorithm; auto: the shorter compile plus solve).")
    @click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("seed-out"),
                  show_default=True, help="Output folder (an earlier result there is replaced only with --overwrite).")
    @click.option("--overwrite", is_flag=True, help="Replace an earlier invert-seed result in --out.")
    @click.option("-q", "--quiet", is_flag=True, help="No progress display.")
    @click.option("--no-plots", is_flag=True, help="Skip the figures.")
    def invert_seed(idc, sg, cpcs, problem, trust_pickle, lmbd, tol, maxiter, solver, out, overwrite, quiet,
                    no_plots):
        """Solve the seed's problem (idc/sg/cpcs pickles or a converted .npz) with the seed's loss."""
        from ..app import preflight
        from ..errors import exit_status

        preflight.check_seed_out(out, overwrite)  # before any work
        preflight.check_seed_arguments(idc, sg, cpcs, problem)  # answers without JAX
        from ..app import seed_read

        t0 = time.perf_counter()
        # the pickles are read in a child while this process imports JAX and SciPy, and
        # matplotlib loads in another while this process solves
        with seed_read.start(idc, sg, cpcs, trust_pickle=trust_pickle) or contextlib.nullcontext() as reading, \
                preflight.figure_process(not no_plots, preload=(preflight.SEED_FIGURES,)) as figs:
            from ..app.output import Output
            from ..app.seed import SeedSolve, read_problem, run_invert_seed

            prob = read_problem(idc, sg, cpcs, problem, trust_pickle, reading=reading, solver=solver)
            read_time = time.perf_counter() - t0
            if not quiet:
                click.echo(f"read {prob.n_epoch} epochs x {prob.n_vel} velocities, {prob.n_cell} cells "
                           f"({prob.n_visible.min()}-{prob.n_visible.max()} visible) in {read_time:.2f} s", err=True)
            s = run_invert_seed(prob, out, solve=SeedSolve(lmbd=lmbd, tol=tol, maxiter=maxiter, solver=solver,
                                                         read_time=read_time),
                                output=Output(plots=not no_plots, quiet=quiet, overwrite=overwrite,
                                              figure_process=figs))
        click.echo(f"loss {s['loss']:.10g}  chi2 {s['chi2']:.6g}  entropy {s['entropy']:.6g}  "
                   f"iterations {s['iterations']}  compile {s['compile_time']:.2f} s  solve {s['solve_time']:.2f} s")
        if not no_plots and not prob.has_coordinates:
            click.echo("note: the input has no cell coordinates; filling factors are drawn per cell index, not as a map")
        click.echo(f"results in {out}")
        return exit_status(s)

    @group.command("convert")
    @click.option("--idc", type=_PATH, required=True, help="The seed's idc pickle.")
    @click.option("--sg", type=_PATH, required=True, help="The seed's sg pickle.")
    @click.option("--cpcs", type=_PATH, required=True, help="The seed's cpcs pickle.")
    @click.option("--trust-pickle", is_flag=True,
                  help="Allow unpickling (it can run code from the files): only for files you trust.")
    @click.option("--out", type=_PATH, required=True, help="Output .npz problem file.")
    @click.option("--overwrite", is_flag=True, help="Replace an existing --out file.")
    def convert(idc, sg, cpcs, trust_pickle, out, overwrite):
        """Convert the seed's pickles to a safe .npz problem file (read later without --trust-pickle)."""
        from ..app.seed import convert_seed

        prob = convert_seed(idc, sg, cpcs, out, trust_pickle=trust_pickle, overwrite=overwrite)
        click.echo(f"wrote {out}: {prob.n_epoch} epochs x {prob.n_vel} velocities, {prob.n_cell} cells")

    @group.command("simulate")
    @click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("sim-out"),
                  show_default=True, help="Output folder (an earlier simulation there is replaced only with --overwrite).")
    @click.option("--overwrite", is_flag=True, help="Replace an earlier simulation in --out.")
    @click.option("--format", "fmt", type=click.Choice(SIMULATION_FORMATS), default="npz", show_default=True,
                  help="npz: a safe problem.npz; seed-pickle: idc.pkl, sg.pkl, cpcs.pkl as the seed's script reads them.")
    @click.option("--n-cell", type=int, default=2500, show_default=True, help="Surface cells.")
    @click.option("--n-epoch", type=int, default=150, show_default=True, help="Epochs.")
    @click.option("--n-vel", type=int, default=32, show_default=True, help="Velocities per profile.")
    @click.option("--snr", type=float, default=500.0, show_default=True, help="Signal-to-noise ratio.")
    @click.option("--seed", type=int, default=1, show_default=True, help="Random seed.")
    @click.option("--per-cell-lis", is_flag=True, help="seed-pickle: write lis_* per visible cell, not scalars.")
    @click.option("--no-coordinates", is_flag=True, help="Leave grid_lats/grid_longs out of sg (and the .npz).")
    def simulate(out, overwrite, fmt, n_cell, n_epoch, n_vel, snr, seed, per_cell_lis, no_coordinates):
        """Simulate the demo star (spots from dopplermap.DEMO_SPOTS) and write its problem files."""
        from ..app import preflight

        preflight.check_simulation_out(out, overwrite)  # before any work
        preflight.check_simulation_arguments(fmt, n_cell, n_epoch, n_vel)  # answers without JAX
        from ..app.seed import simulate_files

        sim_files = simulate_files(out, fmt=fmt, n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, snr=snr, seed=seed,
                                   per_cell_lis=per_cell_lis, coordinates=not no_coordinates, overwrite=overwrite)
        click.echo("wrote " + ", ".join(str(p) for p in sim_files))
