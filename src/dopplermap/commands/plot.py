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
    @click.option("--overwrite", is_flag=True, help="Replace earlier figures (in --out, or in RESULT_DIR when drawing there).")
    @click.option("--format", "fmt", type=click.Choice(FIGURE_FORMATS), default="png", show_default=True,
                  help="Figure file format.")
    @click.option("--dpi", type=click.IntRange(30, 600), default=150, show_default=True,
                  help="Resolution of PNGs (and of images inside PDF/SVG).")
    @click.option("--max-profiles", type=click.IntRange(1, 200), default=24, show_default=True,
                  help="Most line profiles drawn in the stacked-profile figure.")
    @click.option("-q", "--quiet", is_flag=True, help="No progress display.")
    def plot(result_dir, out, overwrite, fmt, dpi, max_profiles, quiet):
        """Draw maps, orthographic views, profile fits, dynamic spectra and convergence of a result.

        Figures are journal-sized (3.5 or 7.1 in wide, fonts >= 8 pt; TrueType fonts in PDF). The
        folder is checked against its manifest first: an edited file, or one from another run, is refused.
        """
        from ..app.review import plot_folder

        for p in plot_folder(result_dir, out, overwrite=overwrite, fmt=fmt, dpi=dpi, max_profiles=max_profiles,
                             quiet=quiet):
            click.echo(str(p))
