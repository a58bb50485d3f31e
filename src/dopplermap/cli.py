"""Command-line interface: ``dopplermap COMMAND ...``.

``main(argv=None) -> int`` runs a command and returns its exit status (tests call it
directly); :func:`run`, the console command, exits with it. User errors
(bad files, bad values: :class:`~dopplermap.errors.DopplermapInputError`, click usage
errors) print one line ``error: ...`` and return 2; any other exception is a bug of ours:
traceback, a request to report it, status 1. A written result whose solve did not
converge returns 3. Each command lives in a module of :mod:`dopplermap.commands` that
defines ``register(group)``.
"""

from __future__ import annotations

import errno
import importlib
import logging
import os
import sys
import traceback

import click

from . import __version__
from .errors import EXIT_BUG, EXIT_INTERRUPTED, EXIT_OK, EXIT_USER, DopplermapInputError, collect_warnings

# one module per command family; each has register(group)
COMMAND_MODULES = (
    "dopplermap.commands.demo",
    "dopplermap.commands.seed",
    "dopplermap.commands.plot",
    "dopplermap.commands.target",
    "dopplermap.commands.search",
    "dopplermap.commands.report",
    "dopplermap.commands.zdipy",
    "dopplermap.commands.example",
)


# click >= 8.2 raises this for a group called without a command (older versions print the
# help and exit 0 themselves)
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())

# errors of the environment the user controls (disk full, read-only, permissions): one line
_USER_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT}


def _verbosity(ctx, param, value):
    """``-v``/``-q`` given after the subcommand add to those given before it."""
    if value:
        root = ctx.find_root()
        root.meta["dopplermap.verbose"] = root.meta.get("dopplermap.verbose", 0) + value
        _configure_logging(root.meta["dopplermap.verbose"])
    return value


def _configure_logging(verbose: int) -> None:
    level = logging.WARNING if verbose <= 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", force=True)
    # JAX's and Dask's own INFO logs are noise unless asked for with -vv
    quiet_others = logging.WARNING if verbose < 2 else logging.DEBUG
    for name in ("jax", "jax._src", "distributed", "dask", "bokeh", "tornado"):
        logging.getLogger(name).setLevel(quiet_others)
    # Dask worker processes read their log level from the environment they inherit
    os.environ["DASK_LOGGING__DISTRIBUTED"] = "warning" if verbose < 2 else "info"


def _max_memory(ctx, param, value):
    if value is not None:
        from .memory import ENV, parse_size

        parse_size(value)  # a bad value is a one-line error
        # the environment, so Dask workers started by this command inherit the limit; restored when
        # the command ends, so that in-process invocations (tests, notebooks) do not inherit it
        before = os.environ.get(ENV)
        os.environ[ENV] = str(value)
        ctx.find_root().call_on_close(lambda: os.environ.__setitem__(ENV, before) if before is not None
                                      else os.environ.pop(ENV, None))
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="dopplermap")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug, with JAX and Dask logs).")
@click.option("--max-memory", default=None, callback=_max_memory, expose_value=False,
              help="Refuse grids, models and searches estimated to need more than this (e.g. 8G); "
                   "default: the memory available.")
def group(verbose: int):
    """dopplermap: stellar Doppler imaging on JAX."""
    root = click.get_current_context().find_root()
    root.meta["dopplermap.verbose"] = root.meta.get("dopplermap.verbose", 0) + verbose
    _configure_logging(root.meta["dopplermap.verbose"])
    from .cache import enable_compilation_cache  # persistent XLA cache ($DOPPLERMAP_CACHE_DIR=off disables)
    enable_compilation_cache()


for _mod in COMMAND_MODULES:
    importlib.import_module(_mod).register(group)

# every subcommand also takes -v after its name (dopplermap invert target.toml -v)
for _cmd in group.commands.values():
    if not any(o.name == "verbose_after" for o in _cmd.params):
        _cmd.params.append(click.Option(["-v", "--verbose", "verbose_after"], count=True, expose_value=False,
                                        callback=_verbosity, is_eager=True,
                                        help="More log output (-vv for debug)."))
    # -q on every command, so scripts can pass it to any; here only where a command shows no progress
    if not any(o.name == "quiet" for o in _cmd.params):
        _cmd.params.append(click.Option(["-q", "--quiet"], is_flag=True, expose_value=False,
                                        help="No progress display (this command shows none; accepted "
                                             "for uniformity)."))


def _report_bug(exc: BaseException) -> None:
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    click.echo(f"internal error: this is a bug in dopplermap {__version__}, not a problem with your input. "
               "Please report it with the command line and the traceback above.", err=True)


def _missing_package(exc: ImportError) -> bool:
    """A third-party package that cannot be found (a missing module of dopplermap itself is a bug)."""
    return isinstance(exc, ModuleNotFoundError) and bool(exc.name) and exc.name.partition(".")[0] != "dopplermap"


def _print_warnings(seen) -> None:
    if seen:
        click.echo(f"{len(seen)} warning(s) (also in summary.json where a result was written):", err=True)
        for msg in seen:  # one line per message; one raised by several solves says how many
            n = seen.counts.get(msg, 1)
            click.echo(f"  warning: {msg}" + (f" ({n} times)" if n > 1 else ""), err=True)


def main(argv=None) -> int:
    """Run the CLI; returns the exit status instead of exiting.

    0: done. 1: an internal error (a bug: traceback printed). 2: a user error (bad input,
    bad option, unusable output folder, disk full: one line ``error: ...``), or no command
    given (the help is printed, as click does). 3: result
    written but the solve did not converge (:data:`~dopplermap.errors.EXIT_NOT_CONVERGED`). 130: interrupted.
    The run's :class:`~dopplermap.errors.DopplermapWarning` s are listed at the end.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    with collect_warnings() as seen:
        try:
            rv = group.main(args=args, prog_name="dopplermap", standalone_mode=False)
        except (click.exceptions.Abort, KeyboardInterrupt):
            click.echo("interrupted", err=True)
            rv = EXIT_INTERRUPTED
        except click.exceptions.Exit as exc:
            rv = exc.exit_code
        except _NO_ARGS_IS_HELP as exc:  # bare `dopplermap`: the help as click formats it, not an error line
            click.echo(exc.ctx.get_help())
            rv = EXIT_USER
        except click.UsageError as exc:
            hint = f" (see: dopplermap {exc.ctx.info_name} --help)" if exc.ctx is not None and exc.ctx.parent else ""
            click.echo(f"error: {exc.format_message()}{hint}".replace("\n", " "), err=True)
            rv = EXIT_USER
        except click.ClickException as exc:
            exc.show()
            rv = exc.exit_code
        except DopplermapInputError as exc:  # one line, whatever a library's message quoted in it held
            click.echo(f"error: {' '.join(str(exc).split())}", err=True)
            rv = EXIT_USER
        except ImportError as exc:
            if "pip install" in str(exc):  # an optional dependency the user can install
                click.echo(f"error: {exc}", err=True)
                rv = EXIT_USER
            elif _missing_package(exc):  # the environment lacks a dependency: not a bug of ours
                click.echo(f"error: the Python package {exc.name.partition('.')[0]!r} is not installed in this "
                           f"environment ({sys.executable}); install dopplermap with its dependencies "
                           "(pip install dopplermap)", err=True)
                rv = EXIT_USER
            else:
                _report_bug(exc)
                rv = EXIT_BUG
        except OSError as exc:
            if exc.errno in _USER_ERRNOS:
                click.echo(f"error: {exc.strerror}: {exc.filename or exc}", err=True)
                rv = EXIT_USER
            else:
                _report_bug(exc)
                rv = EXIT_BUG
        except Exception as exc:  # anything else is ours
            _report_bug(exc)
            rv = EXIT_BUG
    _print_warnings(seen)
    results = sys.modules.get("dopplermap.io.results")
    if results is not None and results._PREFETCH is not None:  # never exit while it imports (abort 134)
        results._PREFETCH.join(timeout=60)
    return rv if isinstance(rv, int) else EXIT_OK


def run() -> None:
    """The ``dopplermap`` console command: :func:`main`, then exit without the interpreter's
    teardown. Every result file is closed by then; the exit handlers (logging's, JAX's)
    still run, but not the finalisation of the numeric libraries' objects, which costs a
    few tenths of a second once JAX is loaded and does nothing a finished run needs."""
    import atexit

    rc = main()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    atexit._run_exitfuncs()
    os._exit(rc)


if __name__ == "__main__":  # pragma: no cover
    run()
