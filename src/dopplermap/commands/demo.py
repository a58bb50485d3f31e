"""``dopplermap demo``: simulate the seed-size example, invert it, report and write results."""

from __future__ import annotations

from pathlib import Path

import click


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
        from ..app import preflight
        from ..errors import exit_status

        preflight.check_result_out(out, overwrite)  # before any work
        with preflight.figure_process(not no_plots) as figs:  # matplotlib loads there while JAX loads here
            from ..app.demo import run_demo
            from ..app.output import Output

            s = run_demo(out, lmbd=lmbd, snr=snr, n_cell=n_cell, seed=seed,
                         output=Output(plots=not no_plots, quiet=quiet, report=not no_report, overwrite=overwrite,
                                       figure_process=figs))
        click.echo(f"chi2 {s['chi2']:.4f}  iterations {s['iterations']}  compile {s['compile_time']:.2f} s  "
                   f"solve {s['solve_time']:.2f} s  corr(cool) {s['corr_cool']:.3f}  corr(hot) {s['corr_hot']:.3f}")
        click.echo(f"results in {out}")
        return exit_status(s)
