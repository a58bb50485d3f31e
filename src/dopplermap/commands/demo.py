"""``dopplermap demo``: simulate the seed-size example, invert it, report and write results."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import click
import numpy as np


def recovery_correlation(true, fitted, lat, inclination_deg):
    """Pearson correlation over cells ever seen (latitude above -inclination)."""
    seen = np.degrees(lat) > -inclination_deg
    return float(np.corrcoef(np.asarray(true)[seen], np.asarray(fitted)[seen])[0, 1])


def run_demo(out: Path, *, lmbd: float, snr: float, n_cell: int, seed: int, quiet: bool, plots: bool,
             report: bool = True, overwrite: bool = True) -> dict:
    """Simulate, invert and write a result folder at ``out``; returns the summary written.

    Progress goes to stderr (rich) unless ``quiet``; figures are drawn unless ``plots`` is
    False; ``report.html`` (:mod:`dopplermap.report`) is written unless ``report`` is False.
    """
    from ..figure_process import FigureProcess

    t_start = time.perf_counter()
    # matplotlib loads in a child on another core meanwhile (it exits on its own if unused)
    figs = FigureProcess() if plots else None

    import dopplermap as dm

    from ..app import save_result, with_context
    from ..io.results import prefetch_writers
    from ..progress import Reporter

    with Reporter(quiet=quiet) as rep:
        with rep.step("simulate"):
            star, grid, times, vels, comps = dm.demo_setup(n_cell=n_cell, seed=seed)
            sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=snr, seed=seed)
        t_pre = time.perf_counter()
        with rep.step("precompute"):
            pre = dm.precompute(grid, star, times, vels, comps)
        pre_time = time.perf_counter() - t_pre
        prefetch_writers(plots and figs is None, report=report)  # during the solve (it runs without the GIL)
        with rep.solve("compile + solve", maxiter=1000) as callback:
            res = dm.invert(pre, sim.obs, lmbd=lmbd, callback=callback)
        corr_cool = recovery_correlation(sim.fssc, res.fssc, grid.lat, star.inclination)
        corr_hot = recovery_correlation(sim.fssh, res.fssh, grid.lat, star.inclination)
        extra = dict(precompute_time=pre_time, corr_cool=corr_cool, corr_hot=corr_hot, n_cell=grid.n_cell,
                     n_epoch=len(times), n_vel=len(vels), snr=snr, total_time=time.perf_counter() - t_start)
        config = {"command": "demo", "lmbd": lmbd, "snr": snr, "n_cell": n_cell, "seed": seed,
                  "regulariser": res.regulariser, "spots": [dataclasses.asdict(s) for s in dm.DEMO_SPOTS]}
        with rep.step("write results" + (" + figures" if plots else "")):
            res = with_context(res, grid=grid, star=star, obs=sim.obs, pre=pre, components=comps,
                               truth={"fssc": sim.fssc, "fssh": sim.fssh}, config=config, extra=extra)
            summary = save_result(res, out, plots=plots, overwrite=overwrite, report=report, figure_process=figs)
    return summary


def register(group):
    @group.command()
    @click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("demo-out"),
                  show_default=True, help="Output folder (an earlier demo result there is replaced only with --overwrite).")
    @click.option("--overwrite", is_flag=True, help="Replace an earlier result in --out.")
    @click.option("--lmbd", type=click.FloatRange(min=0), default=1.0, show_default=True,
                  help="Regularisation weight lambda.")
    @click.option("--snr", type=click.FloatRange(min=0, min_open=True), default=500.0, show_default=True,
                  help="Signal-to-noise ratio.")
    @click.option("--n-cell", type=click.IntRange(min=8), default=2500, show_default=True, help="Surface cells.")
    @click.option("--seed", type=int, default=1, show_default=True, help="Random seed.")
    @click.option("-q", "--quiet", is_flag=True, help="No progress display.")
    @click.option("--no-plots", is_flag=True, help="Skip the figures.")
    @click.option("--no-report", is_flag=True, help="Skip report.html.")
    def demo(out, overwrite, lmbd, snr, n_cell, seed, quiet, no_plots, no_report):
        """Simulate a spotted star at the seed's size (150 x 32, 2500 cells) and map it."""
        from ..atomic import check_out
        from ..cli import exit_status
        from ..io.results import is_result_dir

        check_out(out, "result", overwrite=overwrite, legacy=is_result_dir)  # before any work
        s = run_demo(out, lmbd=lmbd, snr=snr, n_cell=n_cell, seed=seed, quiet=quiet, plots=not no_plots,
                     report=not no_report, overwrite=overwrite)
        click.echo(f"chi2 {s['chi2']:.4f}  iterations {s['iterations']}  compile {s['compile_time']:.2f} s  "
                   f"solve {s['solve_time']:.2f} s  corr(cool) {s['corr_cool']:.3f}  corr(hot) {s['corr_hot']:.3f}")
        click.echo(f"results in {out}")
        return exit_status(s)
