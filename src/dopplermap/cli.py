"""Command-line interface: ``dopplermap COMMAND ...``.

``main(argv=None) -> int`` is the entry point (tests call it directly). User errors
(bad files, bad values) print one line ``error: ...`` and return 2; each command lives in
a module of :mod:`dopplermap.commands` that defines ``register(group)``.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from . import __version__

# one module per command family; each has register(group)
COMMAND_MODULES = (
    "dopplermap.commands.demo",
    "dopplermap.commands.seed",
    "dopplermap.commands.plot",
    "dopplermap.commands.target",
    "dopplermap.commands.search",
    "dopplermap.commands.report",
)


class UserError(click.ClickException):
    """An error in the user's input: printed as one line, exit status 2."""

    exit_code = 2

    def show(self, file=None):
        click.echo(f"error: {self.format_message()}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dopplermap")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def group(verbose: int):
    """dopplermap: stellar Doppler imaging on JAX."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    from .cache import enable_compilation_cache  # persistent XLA cache ($DOPPLERMAP_CACHE_DIR=off disables)
    enable_compilation_cache()


for _mod in COMMAND_MODULES:
    importlib.import_module(_mod).register(group)


def main(argv=None) -> int:
    """Run the CLI; returns the exit status instead of exiting."""
    try:
        group.main(args=list(sys.argv[1:] if argv is None else argv), prog_name="dopplermap",
                   standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (ValueError, FileNotFoundError, KeyError, PermissionError) as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
