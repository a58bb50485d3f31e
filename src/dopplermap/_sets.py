"""The checks shared by every "several of them, one map" container (line data sets, light-curve bands)."""

from __future__ import annotations

import numpy as np

from . import _device
from .errors import DopplermapInputError

__all__ = ["names_and_weights"]


def names_and_weights(what: str, prefix: str, n_cells, names=None, weights=None):
    """``(names, weights)`` of ``len(n_cells)`` members, checked: unique names (default
    ``prefix1``, ``prefix2`` ...), finite weights >= 0 (default 1, as a device array), one grid
    (every member's ``n_cell`` equal). ``what`` names the members in the messages."""
    n = len(n_cells)
    names = tuple(f"{prefix}{i + 1}" for i in range(n)) if names is None else tuple(map(str, names))
    weights = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    if len(names) != n or len(set(names)) != len(names):
        raise DopplermapInputError(f"{what} names must be {n} unique names, got {list(names)}")
    if weights.shape != (n,) or not np.all(np.isfinite(weights) & (weights >= 0)):
        raise DopplermapInputError(f"{what} weights must be {n} finite numbers >= 0, got {weights.tolist()}")
    if len(set(n_cells)) != 1:
        raise DopplermapInputError(f"{what}s precomputed for different grids: n_cell {sorted(set(n_cells))}")
    return names, _device.asarray(weights)
