"""``dopplermap demo``: simulate the seed-size example, invert it and write a result folder."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from ..figure_process import FigureProcess
from ..io.results import prefetch_writers
from ..model import precompute
from ..progress import Reporter
from ..simulate import DEMO_SPOTS, demo_setup, simulate
from ..solvers import invert
from .folders import save_result, with_context
from .output import Output, output_options

__all__ = ["recovery_correlation", "run_demo"]


def recovery_correlation(true, fitted, lat, inclination_deg):
    """Pearson correlation over cells ever seen (latitude above -inclination)."""
    seen = np.degrees(lat) > -inclination_deg
    return float(np.corrcoef(np.asarray(true)[seen], np.asarray(fitted)[seen])[0, 1])


def run_demo(out: Path, *, lmbd: float, snr: float, n_cell: int, seed: int, output: Output | None = None,
             **loose) -> dict:
    """Simulate, invert and write a result folder at ``out``; returns the summary written.

    ``output`` (:class:`~dopplermap.app.output.Output`, or its fields as loose keywords):
    progress on stderr (rich) unless ``quiet``; figures unless ``plots`` is False, drawn in
    ``figure_process`` (the CLI starts it before this module's imports) or in one started here;
    ``report.html`` (:mod:`dopplermap.report`) unless ``report`` is False.
    """
    opts = output_options("run_demo", output, loose)
    quiet, plots, report, overwrite = opts.quiet, opts.plots, opts.report, opts.overwrite
    t_start = time.perf_counter()
    # matplotlib loads in a child on another core meanwhile (it exits on its own if unused)
    figs = opts.figure_process if opts.figure_process is not None or not plots else FigureProcess()
    with Reporter(quiet=quiet) as rep:
        with rep.step("simulate"):
            star, grid, times, vels, comps = demo_setup(n_cell=n_cell, seed=seed)
            sim = simulate(grid, star, times, vels, comps, DEMO_SPOTS, snr=snr, seed=seed)
        t_pre = time.perf_counter()
        with rep.step("precompute"):
            pre = precompute(grid, star, times, vels, comps)
        pre_time = time.perf_counter() - t_pre
        prefetch_writers(plots and figs is None, report=report)  # during the solve (it runs without the GIL)
        with rep.solve("compile + solve", maxiter=1000) as callback:
            res = invert(pre, sim.obs, lmbd=lmbd, callback=callback)
        corr_cool = recovery_correlation(sim.fssc, res.fssc, grid.lat, star.inclination)
        corr_hot = recovery_correlation(sim.fssh, res.fssh, grid.lat, star.inclination)
        extra = dict(precompute_time=pre_time, corr_cool=corr_cool, corr_hot=corr_hot, n_cell=grid.n_cell,
                     n_epoch=len(times), n_vel=len(vels), snr=snr, total_time=time.perf_counter() - t_start)
        config = {"command": "demo", "lmbd": lmbd, "snr": snr, "n_cell": n_cell, "seed": seed,
                  "regulariser": res.regulariser, "spots": [dataclasses.asdict(s) for s in DEMO_SPOTS]}
        with rep.step("write results" + (" + figures" if plots else "")):
            res = with_context(res, grid=grid, star=star, obs=sim.obs, pre=pre, components=comps,
                               truth={"fssc": sim.fssc, "fssh": sim.fssh}, config=config, extra=extra)
            summary = save_result(res, out, plots=plots, overwrite=overwrite, report=report, figure_process=figs)
    return summary
