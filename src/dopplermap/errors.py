"""Errors and warnings of dopplermap: what the user did wrong, what looks suspect.

* :class:`DopplermapInputError` (a ``ValueError``): bad input - a file, a field, a value
  the user can change. The CLI prints it as one line and exits 2. Every message names the
  file (or argument), the field and the value.
* :class:`MissingFileError` (also a ``FileNotFoundError``): an input file that does not exist.
* :class:`DopplermapWarning` (a ``UserWarning``): legal input or a result that deserves a
  second look (a light curve that looks like magnitudes, a solve that stopped on the
  iteration limit, ...). Emitted through Python's :mod:`warnings`, so scripts and notebooks
  can filter them or turn them into errors (``warnings.simplefilter("error",
  dm.DopplermapWarning)``); the CLI lists a run's warnings in its summary and in
  ``summary.json``. Each message says what to check.

A reader of an input file (decorated with :func:`reader`) turns bytes it cannot decode
(not UTF-8, cut short, a damaged zip or FITS, nested too deeply) into a one-line
:class:`DopplermapInputError` naming the file (:func:`bad_file`). Anything else that
escapes is a bug of ours: the CLI shows its traceback and exits 1.
The exit statuses (``EXIT_*``) are defined here, with :func:`exit_status` for a written
result, so that the app layer and the commands need not import the CLI.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import struct
import sys
import warnings
import zipfile
import zlib

__all__ = ["DopplermapError", "DopplermapInputError", "MissingFileError", "DopplermapWarning",
           "ConvergenceWarning", "warn", "collect_warnings", "active_warnings", "exit_status", "bad_file", "reader", "one_line",
           "EXIT_OK", "EXIT_BUG", "EXIT_USER", "EXIT_NOT_CONVERGED", "EXIT_INTERRUPTED"]

EXIT_OK = 0
EXIT_BUG = 1
EXIT_USER = 2
EXIT_NOT_CONVERGED = 3
"""Exit status of ``invert``, ``invert-seed`` and ``demo`` when the result was written but
the solve stopped before meeting its tolerance (iteration limit or line-search failure)."""
EXIT_INTERRUPTED = 130


class DopplermapError(Exception):
    """Base class of the errors dopplermap raises on purpose."""


class DopplermapInputError(DopplermapError, ValueError):
    """Bad user input (file, field, value): one line, exit status 2 in the CLI."""


class MissingFileError(DopplermapInputError, FileNotFoundError):
    """An input file or folder that does not exist."""


# what a reader raises on bytes it cannot decode: text that is not UTF-8, a cut or damaged zip
# or FITS file, numbers that do not parse, structures nested past the interpreter's limit
BAD_BYTES = (UnicodeError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, struct.error, RecursionError,
             OSError, KeyError, IndexError, TypeError,
             NotImplementedError)  # zipfile, for a damaged header's "compression method"


def _decoding(exc: BaseException) -> bool:
    """``exc`` says the bytes could not be decoded: one of :data:`BAD_BYTES`, or an error of
    astropy's readers (a FITS card that does not parse raises its own ``VerifyError``)."""
    return isinstance(exc, BAD_BYTES) or type(exc).__module__.startswith(("astropy.io.", "astropy.table."))


def bad_file(path, what: str, exc: BaseException, hint: str = "") -> DopplermapInputError:
    """The one-line error for a file ``path`` (a ``what``: "TOML file", ".npz problem file" ...)
    that could not be read because of ``exc``: says what is wrong and names the file; ``hint``
    is added (what else the file might be)."""
    if isinstance(exc, UnicodeDecodeError):
        bad = exc.object[exc.start:exc.start + 1]
        reason = f"not UTF-8 text (byte 0x{bad.hex()} at offset {exc.start}: {exc.reason}); save the {what} as UTF-8"
    elif isinstance(exc, RecursionError):
        reason = f"nested too deeply to read as a {what}"
    elif isinstance(exc, (EOFError, zipfile.BadZipFile, zlib.error, struct.error, NotImplementedError)):
        reason = f"truncated or damaged {what} ({type(exc).__name__}: {exc})"
    elif isinstance(exc, IsADirectoryError):
        reason = f"is a folder, not a {what}"
    elif isinstance(exc, OSError) and exc.strerror:
        reason = f"cannot read the {what} ({exc.strerror})"
    else:
        reason = f"not a readable {what} ({type(exc).__name__}: {exc})"
    err = MissingFileError if isinstance(exc, FileNotFoundError) else DopplermapInputError
    return err(one_line(f"{path}: {reason}" + (f" ({hint})" if hint else "")))


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line and at most ``limit`` characters (a library's message quoted in an
    error can span lines and quote a whole damaged file)."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def reader(what: str, arg: str = "path"):
    """Decorator of a function that reads the file (or folder) named by its argument ``arg``:
    a decoding failure (:data:`BAD_BYTES`) inside it becomes :func:`bad_file`'s one-line
    :class:`DopplermapInputError` naming that file; the errors it raises on purpose pass,
    put on one line (:func:`one_line`) where they quote a library's message over several."""

    def wrap(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def read(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except DopplermapError as exc:
                if len(exc.args) == 1 and "\n" in str(exc.args[0]):
                    exc.args = (one_line(exc.args[0], limit=2000),)
                raise
            except Exception as exc:
                if not _decoding(exc):
                    raise
                path = sig.bind_partial(*args, **kwargs).arguments.get(arg, "?")
                raise bad_file(path, what, exc) from None

        return read

    return wrap


class DopplermapWarning(UserWarning):
    """Suspicious but legal input, or a result to check before trusting it."""


class ConvergenceWarning(DopplermapWarning):
    """A solve stopped before meeting its tolerance (iteration limit, line-search failure)."""


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# frames a warning passes through on its way out that are not the user's either: the
# libraries that call back into dopplermap (JAX's tracing, SciPy's optimiser loop)
_PASS_THROUGH = ("jax.", "jaxlib.", "scipy.", "numpy.", "contextlib", "functools", "concurrent.", "threading")


def _user_stacklevel(fallback: int) -> int:
    """The ``warnings.warn`` stack level of the first frame outside dopplermap (and the
    libraries it runs through) above :func:`warn`'s caller: the user's line. ``fallback``
    (counted from :func:`warn`'s caller) when every frame is ours (the CLI's own run)."""
    frame, level = sys._getframe(2), 2  # warn's caller, as warnings.warn counts from warn
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR)
                or name.startswith(_PASS_THROUGH) or name.split(".")[0] == "dopplermap"):
            return level
        frame, level = frame.f_back, level + 1
    return fallback + 1


def warn(message: str, *, stacklevel: int = 2, category: type = DopplermapWarning) -> None:
    """Emit a :class:`DopplermapWarning` (or ``category``) attributed to the user's line: the
    first caller outside dopplermap (a script's or notebook cell's call of ``dm.invert``, not
    the package's internals), else ``stacklevel`` frames up as :func:`warnings.warn` counts
    from the caller of this function."""
    warnings.warn(message, category, stacklevel=_user_stacklevel(stacklevel))


class _Collected(list):
    """The messages of :func:`collect_warnings`; ``categories`` maps each to its class,
    ``counts`` to how many times it was raised."""

    def __init__(self):
        super().__init__()
        self.categories: dict[str, type] = {}
        self.counts: dict[str, int] = {}

    def of(self, category: type) -> list[str]:
        """The messages of ``category`` (or a subclass)."""
        return [m for m in self if issubclass(self.categories[m], category)]


_ACTIVE: list[_Collected] = []


def active_warnings() -> list[str]:
    """The messages collected so far by the innermost :func:`collect_warnings` ([] outside one)."""
    return list(_ACTIVE[-1]) if _ACTIVE else []


@contextlib.contextmanager
def collect_warnings(echo=None):
    """Record the :class:`DopplermapWarning` s raised inside the block.

    Yields a list that fills with the warning messages (each once, in order) as they are
    raised; ``echo``, if given, is called with each new message at that moment (the CLI
    prints it). Other warning categories are shown as usual.
    """
    seen = _Collected()
    with warnings.catch_warnings():  # restores the filters and showwarning on exit
        warnings.simplefilter("always", DopplermapWarning)
        shown = warnings.showwarning

        def record(message, category, filename, lineno, file=None, line=None):
            if not issubclass(category, DopplermapWarning):
                return shown(message, category, filename, lineno, file, line)
            msg = str(message)
            seen.counts[msg] = seen.counts.get(msg, 0) + 1
            if msg not in seen:
                seen.append(msg)
                seen.categories[msg] = category
                if echo is not None:
                    echo(msg)

        warnings.showwarning = record
        _ACTIVE.append(seen)
        try:
            yield seen
        finally:
            _ACTIVE.remove(seen)


def exit_status(summary: dict) -> int:
    """:data:`EXIT_NOT_CONVERGED` for a written result whose solve did not converge (saying so
    on stderr), else :data:`EXIT_OK`."""
    if summary.get("success", True):
        return EXIT_OK
    print(f"warning: the solve did not converge ({summary.get('stop_reason')}); the result was written, "
          f"exit status {EXIT_NOT_CONVERGED}", file=sys.stderr, flush=True)
    return EXIT_NOT_CONVERGED
