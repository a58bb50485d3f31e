"""Figures drawn in a child interpreter, started before the computation that feeds them.

A command that ends with figures starts a :class:`FigureProcess` first: the child imports
matplotlib and the figure code (and draws a tiny figure, which loads the fonts and the PNG
writer) on another core while the parent reads, sets up and solves. When the results are
there the parent hands the child one call, ``module:function(*args, **kwargs)``, and writes
its own files meanwhile; :meth:`FigureProcess.result` waits for the figure paths. The call
and its arguments go through a pipe as a pickle (parent to its own child: nothing untrusted
is unpickled), so they should be plain data; what they need to unpickle the child imports.

If the child cannot start, dies or fails, :meth:`FigureProcess.result` raises
:class:`FigureProcessError` with the child's last error lines; :func:`submit` then draws the
same call in this process instead (same code, same files).
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

from .errors import DopplermapError

__all__ = ["FigureProcess", "FigureProcessError", "submit"]

log = logging.getLogger(__name__)

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[1])

# the child: import what the call needs, warm up matplotlib, then wait for the call on stdin
_CHILD = """
import importlib, io, pickle, sys
if sys.argv[1] not in sys.path:  # the parent's dopplermap, without putting other packages first
    sys.path.insert(0, sys.argv[1])
for name in sys.argv[2:]:
    importlib.import_module(name)
from matplotlib.figure import Figure
from matplotlib.backends.backend_agg import FigureCanvasAgg
fig = Figure(figsize=(1, 1)); FigureCanvasAgg(fig)
fig.add_axes((0.1, 0.1, 0.8, 0.8)).set_title("0.5\\u00b0", fontsize=7)
fig.savefig(io.BytesIO(), format="png", dpi=20)
job = sys.stdin.buffer.read()
if not job:
    sys.exit(0)
module, name, args, kwargs = pickle.loads(job)
out = getattr(importlib.import_module(module), name)(*args, **kwargs)
sys.stdout.buffer.write(pickle.dumps([str(p) for p in out]))
sys.stdout.flush(); sys.stderr.flush()
import os; os._exit(0)  # the files are closed: the parent waits for EOF, not for an interpreter teardown
"""


class FigureProcessError(DopplermapError):
    """The figure child could not draw (its error is in the message)."""


class FigureProcess:
    """A child interpreter that draws one figure call; see the module docstring.

    Args:
        preload: modules the child imports while it waits (those of the call, and those its
            arguments need to unpickle).
    """

    def __init__(self, preload=("dopplermap.plot",)):
        env = dict(os.environ)
        env.setdefault("MPLBACKEND", "agg")
        self._err = tempfile.TemporaryFile()  # a file, not a pipe: a chatty child cannot block on it
        try:
            self._proc = subprocess.Popen([sys.executable, "-c", _CHILD, _PACKAGE_PARENT, *preload], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=self._err, env=env)
        except OSError as exc:  # no usable interpreter (frozen or embedded Python)
            self._proc, self._start_error = None, exc
        self._sent = False

    def submit(self, func: str, *args, **kwargs) -> None:
        """Hand the child ``func`` (``"module:function"``) with its arguments; returns at once."""
        module, name = func.split(":")
        if self._proc is None:
            raise FigureProcessError(f"figure process did not start: {self._start_error}")
        job = pickle.dumps((module, name, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        self._sent = True
        try:
            self._proc.stdin.write(job)
            self._proc.stdin.close()
        except OSError as exc:  # the child died while it waited
            raise FigureProcessError(f"figure process ended early: {exc}; {self._stderr()}") from None

    def result(self) -> list[Path]:
        """The paths the call returned; waits for the child."""
        if self._proc is None or not self._sent:
            raise FigureProcessError("figure process has no call to finish")
        out = self._proc.stdout.read()
        if self._proc.wait() != 0:
            raise FigureProcessError(f"figure process failed (exit {self._proc.returncode}): {self._stderr()}")
        try:
            return [Path(p) for p in pickle.loads(out)]
        except (pickle.UnpicklingError, EOFError, TypeError) as exc:
            raise FigureProcessError(f"figure process gave no paths ({exc}): {self._stderr()}") from None

    def close(self) -> None:
        """End the child if it still runs (a command that stops before its figures)."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait()
            for f in (self._proc.stdin, self._proc.stdout):
                if f is not None and not f.closed:
                    f.close()
        self._err.close()

    def _stderr(self) -> str:
        """The last lines the child wrote to stderr, joined into one."""
        try:
            self._err.seek(0)
            lines = self._err.read().decode(errors="replace").strip().splitlines()
        except (OSError, ValueError):
            return ""
        return " | ".join(lines[-3:])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def submit(process: FigureProcess | None, func: str, *args, **kwargs):
    """Start ``func(*args, **kwargs)`` (``"module:function"``, returning the paths it wrote) in
    ``process``; returns ``finish()``, which waits for the paths. Without a process, or when
    the child fails, ``finish()`` draws the call in this process instead."""
    def here() -> list[Path]:
        module, name = func.split(":")
        return [Path(p) for p in getattr(importlib.import_module(module), name)(*args, **kwargs)]

    if process is None:
        return here
    try:
        process.submit(func, *args, **kwargs)
    except FigureProcessError as exc:
        log.warning("%s; drawing the figures in this process", exc)
        return here

    def finish() -> list[Path]:
        try:
            return process.result()
        except FigureProcessError as exc:
            log.warning("%s; drawing the figures in this process", exc)
            return here()

    return finish
