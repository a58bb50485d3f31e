"""The grid-search table: the solved rows, the best point and the Delta chi2 intervals of its
parameters (NumPy only: the search writes the table, the figures and reports read it).

A row is one point of :func:`dopplermap.search.grid_search` (a dict: the parameters, ``chi2``,
``chi2_total``, ``loss``, ``status``, ...).
"""

from __future__ import annotations

import math

import numpy as np

from .diagnostics import INTERVAL_CHI2_HIGH, INTERVAL_CHI2_LOW
from .errors import DopplermapInputError

__all__ = ["computed_rows", "best_point", "delta_chi2_interval", "interval_flags"]


def computed_rows(rows: list[dict]) -> list[dict]:
    """The rows of points that were solved (refused points, ``status`` ``"refused"``, left out)."""
    return [r for r in rows if r.get("status", "ok") == "ok"]


def _computed(rows: list[dict]) -> list[dict]:
    if not rows:
        raise DopplermapInputError("no rows in the grid-search table")
    ok = computed_rows(rows)
    if not ok:
        reasons = sorted({r.get("reason", "") for r in rows})
        raise DopplermapInputError(f"every one of the {len(rows)} grid points was refused ({'; '.join(reasons)[:300]}); "
                                   "choose parameter values a star can have")
    return ok


def best_point(rows: list[dict], names, *, column: str = "loss") -> dict:
    """The row of least ``column`` among the solved points (default the loss; pass the column
    of :func:`delta_chi2_interval`, ``"chi2_total"``, to report a best point and intervals
    from one criterion)."""
    rows = _computed(rows)
    if column not in rows[0]:
        raise DopplermapInputError(f"column {column!r} is not in the grid-search table ({sorted(rows[0])})")
    return min(rows, key=lambda r: r[column])


def delta_chi2_interval(rows: list[dict], name: str, *, delta: float = 1.0, column: str = "chi2_total") -> dict:
    """Range of parameter ``name`` with ``chi2_total - min <= delta`` (profiled over the rest).

    Uses the *un-reduced* chi-square ``chi2_total = chi2_reduced * n_epoch * n_vel``: a
    Delta chi-square of 1 (one parameter, 68 %) is only meaningful for the sum of squared
    normalised residuals, not for the reduced value. Refused points are left out: the
    grid's edge is that of the values that were solved. Returns a dict with ``best``,
    ``lo``, ``hi`` (grid values), ``at_edge`` (the interval touches the grid's edge, so the
    true interval may be wider), ``best_at_edge`` (the best value is the first or last one:
    the minimum may lie beyond the grid), ``refused_beyond`` (refused values lie beyond that
    edge: the minimum may lie between them), ``chi2_best`` (the reduced chi-square at the
    best point) and ``profile`` (values, profiled chi2_total).
    """
    every = np.unique([r[name] for r in rows if name in r])
    rows = _computed(rows)
    if name not in rows[0]:
        raise DopplermapInputError(f"parameter {name!r} is not a column of the table ({sorted(rows[0])})")
    vals = np.unique([r[name] for r in rows])
    best_rows = [min((r for r in rows if r[name] == v), key=lambda r: r[column]) for v in vals]
    prof = np.array([r[column] for r in best_rows])
    inside = prof - prof.min() <= delta
    idx = np.nonzero(inside)[0]
    i = int(np.argmin(prof))
    low, high = i == 0, i == vals.size - 1
    refused_beyond = bool((low and np.any(every < vals[0])) or (high and np.any(every > vals[-1])))
    return dict(best=float(vals[i]), lo=float(vals[idx[0]]), hi=float(vals[idx[-1]]),
                at_edge=bool(inside[0] or inside[-1]), best_at_edge=bool(every.size > 1 and (low or high)),
                refused_beyond=refused_beyond,
                chi2_best=float(best_rows[i].get("chi2", math.nan)), delta=float(delta), values=vals, profile=prof,
                note="Delta chi2 on the un-reduced chi-square (chi2_reduced * n_epoch * n_vel)")


def interval_flags(interval: dict, name: str | None = None) -> list[str]:
    """Why an interval of :func:`delta_chi2_interval` is not to be trusted ([] when nothing is
    seen): the best value lies on the grid's edge (the minimum may lie beyond it), or the
    reduced chi-square at the best point is below ``INTERVAL_CHI2_LOW`` or above
    ``INTERVAL_CHI2_HIGH`` (:mod:`dopplermap.diagnostics`): the errors are then mis-scaled
    and a Delta chi2 <= 1 range is not a 68 % interval. Each flag is one phrase."""
    flags = []
    what = f"{name} " if name else ""
    if interval.get("best_at_edge") and interval.get("refused_beyond"):
        flags.append(f"the best {what}value {interval['best']:g} lies on the edge of the solved points, next to "
                     "refused ones (the minimum may lie between them: refine the grid there)")
    elif interval.get("best_at_edge"):
        flags.append(f"the best {what}value {interval['best']:g} lies on the grid's edge (the minimum may lie "
                     "beyond it: widen the grid)")
    c = interval.get("chi2_best", math.nan)
    if math.isfinite(c) and not (INTERVAL_CHI2_LOW <= c <= INTERVAL_CHI2_HIGH):
        side = "below" if c < INTERVAL_CHI2_LOW else "above"
        flags.append(f"the reduced chi2 at the best point is {c:.3g}, {side} the trusted range "
                     f"{INTERVAL_CHI2_LOW:g}..{INTERVAL_CHI2_HIGH:g} (the errors look mis-scaled, so a Delta chi2 "
                     "range is not a 68 % interval)")
    return flags
