"""The seed's pickles read in a child interpreter while ``invert-seed`` imports JAX and SciPy.

:func:`start` runs :func:`dopplermap.io.seed_arrays.child_main` in a child on another core:
it unpickles and checks the three files and writes the dense cube into a shared memory file
(``os.memfd_create``: nothing on disk, freed with the last process that maps it), then sends
the rest through a pipe. The parent, once its imports are done, takes the arrays with
:meth:`SeedReading.finish` (:func:`dopplermap.app.seed.read_problem` does). The arrays and
errors are those of :func:`dopplermap.io.seed.read_seed` (the same code runs); if the child
cannot start or fails unexpectedly, the parent reads the files itself. This module loads
nothing heavy: it runs before the command's imports.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["SeedReading", "start"]

log = logging.getLogger(__name__)

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])

_CHILD = """
import sys
if sys.argv[1] not in sys.path:  # the parent's dopplermap, without putting other packages first
    sys.path.insert(0, sys.argv[1])
from dopplermap.io.seed_arrays import child_main
child_main(sys.argv[2:])
"""


class SeedReading:
    """A reading child at work (see the module docstring); a context manager that ends it."""

    def __init__(self, idc, sg, cpcs):
        self._fd = os.memfd_create("dopplermap-seed-cube", os.MFD_CLOEXEC)
        self._err = tempfile.TemporaryFile()
        # JAX arrays in a pickle import JAX in the child: in float64, as in this process
        env = dict(os.environ, JAX_ENABLE_X64="1")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, _PACKAGE_PARENT, str(self._fd), *(os.fspath(p) for p in (idc, sg, cpcs))],
                stdout=subprocess.PIPE, stderr=self._err, pass_fds=(self._fd,), env=env)
        except OSError:
            self.close()
            raise

    def running(self) -> bool:
        """Whether the child still works."""
        return self._proc.poll() is None

    def finish(self):
        """``(stdout, fd)`` of the child for :func:`dopplermap.io.seed_arrays.from_child`, or None
        when it failed (the caller then reads the files itself). Waits for the child."""
        out = self._proc.stdout.read()
        if self._proc.wait() != 0 or not out:
            self._err.seek(0)
            log.debug("the reading child failed (exit %s): %s", self._proc.returncode,
                      self._err.read().decode(errors="replace")[-2000:])
            return None
        return out, self._fd

    def close(self) -> None:
        """End the child if it still runs and close the shared memory file (a mapping of it stays valid)."""
        proc = getattr(self, "_proc", None)
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._err.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def start(idc, sg, cpcs, *, trust_pickle: bool):
    """A :class:`SeedReading` of the three pickle paths, or None where the parent reads them
    itself: without ``trust_pickle`` (the refusal comes from the reader, with its message), on
    systems without ``os.memfd_create``, or if the child cannot start."""
    if not trust_pickle or not hasattr(os, "memfd_create") or None in (idc, sg, cpcs):
        return None
    try:
        return SeedReading(idc, sg, cpcs)
    except OSError:
        return None
