"""``dopplermap report RESULT_DIR``: one self-contained HTML report of a result folder."""

from __future__ import annotations

from pathlib import Path

import click


def register(group):
    @group.command()
    @click.argument("result_dir", type=click.Path(file_okay=False, path_type=Path))
    @click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="HTML file to write (default: RESULT_DIR/report.html).")
    @click.option("--overwrite", is_flag=True, help="Replace an existing report (--out, or RESULT_DIR/report.html).")
    @click.option("-q", "--quiet", is_flag=True, help="No progress display.")
    def report(result_dir, out, overwrite, quiet):
        """Write an offline HTML report: figures, parameters, warnings, uncertainties, configuration, 3-D star.

        The folder is checked against its manifest first: an edited file, or one from another run, is refused.
        """
        from ..app.review import report_folder

        click.echo(str(report_folder(result_dir, out, overwrite=overwrite, quiet=quiet)))
