"""``dopplermap plot RESULT_DIR``: draw the figures of a result folder."""

from __future__ import annotations

from pathlib import Path

import click

from ..choices import FIGURE_FORMATS


def register(group):
    @group.command()
    @click.argument("result_dir", type=click.Path(file_okay=False, path_type=Path))
    @click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
                  help="Folder for the figures (default: RESULT_DIR); written as one atomic folder.")
    @click.option("--overwrite", is_flag=True, help="Replace earlier figures in --out.")
    @click.option("--format", "fmt", type=click.Choice(FIGURE_FORMATS), default="png", show_default=True,
                  help="Figure file format.")
    @click.option("--dpi", type=click.IntRange(30, 600), default=150, show_default=True,
                  help="Resolution of PNGs (and of images inside PDF/SVG).")
    @click.option("--max-profiles", type=click.IntRange(1, 200), default=24, show_default=True,
                  help="Most line profiles drawn in the stacked-profile figure.")
    def plot(result_dir, out, overwrite, fmt, dpi, max_profiles):
        """Draw maps, orthographic views, profile fits, dynamic spectra and convergence of a result.

        Figures are journal-sized (3.5 or 7.1 in wide, fonts >= 8 pt; TrueType fonts in PDF). A
        folder whose files come from different runs is refused (each file carries its run id).
        """
        from ..atomic import AtomicFolder, check_out, read_manifest
        from ..io.results import load_result
        from ..plot import plot_result

        if out is not None and Path(out).resolve() != Path(result_dir).resolve():
            check_out(out, "figures", overwrite=overwrite)  # before any work
        res = load_result(result_dir)  # refuses a folder that mixes runs
        if out is None or Path(out).resolve() == Path(result_dir).resolve():
            paths = plot_result(res, result_dir, fmt=fmt, dpi=dpi, max_profiles=max_profiles)
        else:
            source = read_manifest(result_dir) or {}
            with AtomicFolder(out, "figures", overwrite=overwrite, inputs=source.get("run_id"),
                              meta={"result": str(result_dir)}) as folder:
                names = [p.name for p in plot_result(res, folder.tmp, fmt=fmt, dpi=dpi, max_profiles=max_profiles)]
                folder.wrote()
            paths = [Path(out) / n for n in names]
        for p in paths:
            click.echo(str(p))
