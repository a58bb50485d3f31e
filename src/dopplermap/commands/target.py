"""``dopplermap init`` (write a commented target template) and ``dopplermap invert TARGET``."""

from __future__ import annotations

from pathlib import Path

import click

from ..choices import SOLVER_CHOICES, UNCERTAINTY_METHODS

__all__ = ["register"]


def register(group):
    @group.command()
    @click.argument("path", type=click.Path(dir_okay=False, path_type=Path), default=Path("target.toml"))
    @click.option("--overwrite", is_flag=True, help="Overwrite an existing file.")
    def init(path, overwrite):
        """Write a commented target-configuration template to PATH (default target.toml)."""
        from ..atomic import check_out_file, write_text
        from ..config import TEMPLATE

        check_out_file(path, overwrite=overwrite, option="PATH")
        write_text(path, TEMPLATE)
        click.echo(f"wrote {path}; edit it, then run: dopplermap invert {path} --out results")

    @group.command()
    @click.argument("target", type=click.Path(dir_okay=False, path_type=Path))
    @click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
                  show_default=True, help="Output folder (an earlier result there is replaced only with --overwrite).")
    @click.option("--overwrite", is_flag=True, help="Replace an earlier result in --out.")
    @click.option("-q", "--quiet", is_flag=True, help="No progress display.")
    @click.option("--no-plots", is_flag=True, help="Skip the figures.")
    @click.option("--no-report", is_flag=True, help="Skip report.html.")
    @click.option("--uncertainty", "uncertainty", multiple=True,
                  type=click.Choice(UNCERTAINTY_METHODS),
                  help="Also write per-cell uncertainty maps (repeatable; overrides [uncertainty] methods).")
    @click.option("--lmbd", type=click.FloatRange(min=0), default=None, help="Override [inversion] lmbd.")
    @click.option("--lmbd-time", "lmbd_time", type=click.FloatRange(min=0), default=None,
                  help="Override [map] lmbd_time (the coupling of the time windows' maps; needs windows).")
    @click.option("--tol", type=click.FloatRange(min=0, min_open=True), default=None, help="Override [inversion] tol.")
    @click.option("--maxiter", type=click.IntRange(min=1), default=None, help="Override [inversion] maxiter.")
    @click.option("--solver", type=click.Choice(SOLVER_CHOICES), default=None,
                  help="Override [inversion] solver.")
    @click.option("--scheduler", default=None,
                  help="Spread the bootstrap's refits (--uncertainty bootstrap) over Dask: a scheduler address (it "
                       "runs the pickled code Dask sends it: use only one you trust) or 'local'; default: here.")
    @click.option("--workers", type=click.IntRange(min=1), default=None,
                  help="Local cluster size (--scheduler local, which --workers alone implies; default: CPU count).")
    def invert(target, out, overwrite, quiet, no_plots, no_report, uncertainty, lmbd, lmbd_time, tol, maxiter,
               solver, scheduler, workers):
        """Map the star described by the TOML file TARGET; write a result folder to --out.

        --lmbd, --tol, --maxiter and --solver override the TOML's [inversion] values and
        --lmbd-time its [map] lmbd_time for this run (the TOML stays the record: the result's
        config.json holds the values used and lists the overrides)."""
        import dataclasses

        from ..app import preflight
        from ..config import load_config
        from ..errors import DopplermapInputError, exit_status

        cfg = load_config(target)
        overrides = {k: v for k, v in dict(lmbd=lmbd, tol=tol, maxiter=maxiter, solver=solver).items() if v is not None}
        if overrides:
            cfg = dataclasses.replace(cfg, inversion=dataclasses.replace(cfg.inversion, **overrides))
        if lmbd_time is not None:
            if not cfg.map.windowed:  # a weight that would change nothing: refused, not ignored
                raise DopplermapInputError(f"--lmbd-time {lmbd_time:g}: {target} has no time windows ([map] windows, "
                                           "window_rotations, window_edges or window_gap)")
            cfg = dataclasses.replace(cfg, map=dataclasses.replace(cfg.map, lmbd_time=lmbd_time))
            overrides["lmbd_time"] = lmbd_time
        preflight.check_result_out(out, overwrite)  # before any work
        if scheduler not in (None, "sync") or workers is not None:  # --workers alone: a local cluster
            methods = list(uncertainty) if uncertainty else list(cfg.uncertainty.methods)
            if "bootstrap" not in methods:
                flag = "--scheduler" if scheduler not in (None, "sync") else "--workers"
                raise DopplermapInputError(f"{flag} spreads the bootstrap's refits: add --uncertainty bootstrap "
                                           "(or list it in the target's [uncertainty] methods)")
        with preflight.figure_process(not no_plots) as figs:  # matplotlib loads there while JAX loads here
            from ..app.output import Output, Scheduling
            from ..app.target import band_line, error_scale_line, run_target, summary_line, windows_line

            s = run_target(cfg, out, config_file=target, uncertainty=list(uncertainty) if uncertainty else None,
                           overrides=overrides, scheduling=Scheduling(scheduler, workers),
                           output=Output(plots=not no_plots, quiet=quiet, report=not no_report,
                                         overwrite=overwrite, figure_process=figs))
        click.echo(summary_line(s))
        if error_scale_line(s):
            click.echo(error_scale_line(s))
        if windows_line(s):
            click.echo(windows_line(s))
        if s.get("plan"):
            click.echo(f"plan: {s['plan']}")
        if s.get("constraints"):
            click.echo(f"note: {s['constraints']}")
        if s.get("lc_note"):
            click.echo(f"light curve {s['lc_note']}")
        if band_line(s):
            click.echo(band_line(s))
        click.echo(f"results in {out}")
        return exit_status(s)
