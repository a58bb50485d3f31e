"""JAX's persistent compilation cache, so a second run of the same shape skips XLA compile.

:func:`enable_compilation_cache` is called by the CLI at start-up (on by default); the
location is ``$DOPPLERMAP_CACHE_DIR`` or ``~/.cache/dopplermap/jax``, and
``DOPPLERMAP_CACHE_DIR=off`` (or ``0``/``none``) disables it. The solvers keep their lowered
programs beside it (:mod:`dopplermap.compiled`), so later runs skip the trace too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .errors import DopplermapInputError

__all__ = ["enable_compilation_cache", "default_cache_dir", "ENV_VAR"]

ENV_VAR = "DOPPLERMAP_CACHE_DIR"
_OFF = ("", "0", "off", "none", "false", "no")


def default_cache_dir() -> Path | None:
    """The cache folder from ``$DOPPLERMAP_CACHE_DIR`` (None if disabled there) or the default."""
    env = os.environ.get(ENV_VAR)
    if env is not None:
        return None if env.strip().lower() in _OFF else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dopplermap" / "jax"


def enable_compilation_cache(path: str | os.PathLike | None = None, *, min_compile_seconds: float = 0.0) -> Path | None:
    """Point JAX's persistent compilation cache at ``path`` (default :func:`default_cache_dir`).

    Every compiled program taking at least ``min_compile_seconds`` is stored; later
    processes load it instead of compiling. Returns the folder, or None when disabled.
    Raises ValueError if the folder cannot be created.
    """
    folder = Path(path).expanduser() if path is not None else default_cache_dir()
    if folder is None:
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DopplermapInputError(f"compilation cache folder {str(folder)!r} cannot be created: {exc}") from exc
    settings = {"jax_compilation_cache_dir": str(folder),
                "jax_persistent_cache_min_compile_time_secs": float(min_compile_seconds),
                "jax_persistent_cache_min_entry_size_bytes": -1}
    jax = sys.modules.get("jax")
    if jax is not None:
        for key, value in settings.items():
            jax.config.update(key, value)
    else:
        # JAX not imported yet (the CLI at start-up): it reads these variables when it is,
        # so a command that never computes (--help, init, a bad argument) never loads it
        os.environ.update({key.upper(): str(value) for key, value in settings.items()})
    return folder
