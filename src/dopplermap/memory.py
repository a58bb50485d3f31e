"""Size guards: refuse a grid, model or search that cannot fit, before allocating it.

Each guard estimates the bytes from the sizes the caller already knows and compares them
with the memory available now (``/proc``'s available memory via ``os.sysconf``, or psutil
where installed), or with a user limit: ``DOPPLERMAP_MAX_MEMORY`` (bytes, or with a
``K/M/G/T`` suffix; the CLI's ``--max-memory`` sets it). The message names the parameter
to change.
"""

from __future__ import annotations

import os
import re

from .errors import DopplermapInputError

__all__ = ["available_bytes", "memory_limit", "check_bytes", "parse_size", "format_bytes", "MAX_GRID_POINTS"]

ENV = "DOPPLERMAP_MAX_MEMORY"

MAX_GRID_POINTS = 100_000
"""Most points of one grid search (each is a full inversion); ``max_points`` raises it."""


def parse_size(text) -> int:
    """``"8G"``, ``"512M"``, ``"1.5e9"`` -> bytes."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([KMGT]?)(?:i?B)?\s*", str(text), flags=re.IGNORECASE)
    try:
        value = float(m.group(1)) * 1024 ** (" KMGT".index(m.group(2).upper() or " ")) if m else float("nan")
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise DopplermapInputError(f"memory limit: expected a positive size like 8G or 512M, got {text!r}")
    return int(value)


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024.0
    return f"{n:.3g} PiB"  # pragma: no cover


def available_bytes() -> int | None:
    """Memory available to a new allocation now (bytes), None where unknown."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def memory_limit() -> tuple[int | None, str]:
    """``(bytes, where it comes from)``: the user's limit if set, else the available memory."""
    env = os.environ.get(ENV)
    if env:
        return parse_size(env), f"the limit {ENV}/--max-memory={env}"
    avail = available_bytes()
    return avail, "the memory available now"


def check_bytes(n_bytes: float, what: str, change: str) -> None:
    """Raise :class:`DopplermapInputError` if ``what`` (needing ``n_bytes``) cannot fit.

    ``change`` names the parameter to change, e.g. ``"n_cell"``.
    """
    limit, source = memory_limit()
    if limit is not None and n_bytes > limit:
        raise DopplermapInputError(f"{what} needs about {format_bytes(n_bytes)}, more than {source} "
                                   f"({format_bytes(limit)}); reduce {change}")


def check_grid_size(n_cell: int, kind: str = "bands") -> None:
    """Guard for building a surface grid of ``n_cell`` cells (about 240 bytes a cell at peak:
    centres, bounds, neighbour pairs and their sorting)."""
    change = "n_cell" if kind == "bands" else "nside"
    check_bytes(240.0 * n_cell, f"a {kind} grid of {n_cell:.4g} cells", change)


def check_precompute_size(n_cell: int, n_epoch: int, n_vel: int, method: str, form_bytes: float = 0.0) -> None:
    """Guard for :func:`dopplermap.precompute`: its (n_epoch, n_cell) geometry and weight
    arrays (about a dozen float64 planes) plus ``form_bytes``, the synthesis form's own
    estimate of what it adds (the dense form: its cube and the folded copy)."""
    n = 12.0 * 8 * n_epoch * n_cell + float(form_bytes)
    check_bytes(n, f"precompute ({n_cell} cells x {n_epoch} epochs x {n_vel} velocities, method {method!r})",
                "the grid's n_cell (or the epochs/velocities, or use method='binned')")
