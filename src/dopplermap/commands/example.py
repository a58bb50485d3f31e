"""``dopplermap example``: write a worked example script from the installed package."""

from __future__ import annotations

from pathlib import Path

import click


def register(group):
    @group.command()
    @click.argument("name", required=False)
    @click.argument("folder", required=False, type=click.Path(file_okay=False, path_type=Path), default=Path("."))
    @click.option("--overwrite", is_flag=True, help="Replace an existing FOLDER/NAME.py.")
    def example(name, folder, overwrite):
        """Write the worked example NAME as FOLDER/NAME.py (default: here); without NAME, list them.

        The script runs as it is (``python FOLDER/NAME.py --help``); it is the same file as
        ``python -m dopplermap.examples.NAME``.
        """
        from ..atomic import check_out_file, write_text
        from ..errors import DopplermapInputError
        from ..examples import EXAMPLES, source

        if name is None:
            width = max(map(len, EXAMPLES))
            for key, (what, _) in EXAMPLES.items():
                click.echo(f"{key:<{width}}  {what}")
            click.echo("write one with: dopplermap example NAME [FOLDER]")
            return
        if name not in EXAMPLES:
            raise DopplermapInputError(f"example {name!r} does not exist (choose from {', '.join(EXAMPLES)})")
        if not folder.is_dir():
            raise DopplermapInputError(f"FOLDER {folder} does not exist; create it first")
        path = check_out_file(folder / f"{name}.py", overwrite=overwrite, option="FOLDER/NAME.py")
        write_text(path, source(name))
        click.echo(f"wrote {path}; run it: python {path} {EXAMPLES[name][1]}")
