"""``dopplermap report RESULT_DIR``: one self-contained HTML report of a result folder."""

from __future__ import annotations

from pathlib import Path

import click


def register(group):
    @group.command()
    @click.argument("result_dir", type=click.Path(file_okay=False, path_type=Path))
    @click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="HTML file to write (default: RESULT_DIR/report.html).")
    def report(result_dir, out):
        """Write an offline HTML report: figures, parameters, warnings, uncertainties, configuration, 3-D star."""
        from ..report import write_report

        click.echo(str(write_report(result_dir, out)))
