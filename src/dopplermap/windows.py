"""Maps that change with time: the campaign cut into time windows, one map per window.

A :class:`Windows` divides the campaign into ``K`` windows by time edges (days, the
epochs' internal BJD_TDB); every epoch belongs to the window holding its time. The maps
of all windows form one parameter vector, window after window within each component::

    x = [fssc_0 .. fssc_{K-1}, fssh_0 .. fssh_{K-1}, rv, amp]     (each map n_cell long)

so ``K = 1`` is the static vector unchanged. :func:`window_form` makes the windowed
synthesis form out of a static one without touching its arrays: a form reads the map
through the slot -> cell index ``cell[e, s]`` (:func:`dopplermap._linops.gather_slots`),
so epoch ``e`` sees its window's map when that index is moved by ``window[e] * n_cell``.
A windowed form is therefore the static form of a surface of ``K x n_cell`` cells of
which each epoch sees only its window's part: one compiled program for every ``K``,
the cost of a model evaluation unchanged, the forms, solvers and bounds untouched.

The objective's regulariser for ``K`` windows (:mod:`dopplermap.objective`) is::

    lambda / K sum_k S(F_k) + lambda_time / K sum_{k>0} T(F_k, F_{k-1})

with the coupling ``T`` (``time_coupling``, :data:`TIME_COUPLINGS`) either ``"quadratic"``::

    T(F, G) = sum_c a_c [(fssc_c - gssc_c)^2 + (fssh_c - gssh_c)^2],  a_c = area_c / sum(area)

or ``"relative_entropy"``, the entropy of each map relative to the previous window's (its
default model, as a flat map is the spatial entropy's; zero where they agree)::

    T(F, G) = sum_c a_c [fssc_c ln(fssc_c / gssc_c) - fssc_c + gssc_c + (the same in fssh)]

which penalises a spot appearing out of nothing more than a spot changing its depth.

A light curve's points belong to windows likewise (:class:`WindowedLightCurve`): each
point's model reads its window's map (a gather of the stacked maps per point).

Divided by ``K``: the loss is then the mean over windows of each window's own loss
(its data's share of the chi-square times ``K``, its entropy, its link to the previous
window), so a lambda that suits one window's inversion suits the windowed one.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from .choices import TIME_COUPLINGS as _COUPLING_NAMES
from .choices import check
from .errors import DopplermapInputError, warn
from .lightcurve import LightCurveFit, model_residuals

__all__ = ["Windows", "window_form", "window_precomputed", "temporal_difference", "temporal_relative_entropy",
           "TIME_COUPLINGS", "time_coupling", "split_maps",
           "WindowedLightCurve", "windowed_lightcurve_models", "chi2_windowed_lightcurves"]


@dataclasses.dataclass(frozen=True)
class Windows:
    """Time windows of a campaign: ``edges`` (K + 1,) increasing times, days (BJD_TDB).

    Build them with :meth:`count` (K windows of equal length over the epochs),
    :meth:`rotations` (windows of a number of rotations each), :meth:`from_cycles` (edges
    in rotation cycles since ``t0``), :meth:`gaps` (a window between gaps in the data) or
    directly from edges in days. Window ``k`` holds the times ``edges[k] <= t < edges[k+1]``
    (the last one its end too).
    """

    edges: tuple[float, ...]

    def __post_init__(self):
        e = np.asarray(self.edges, dtype=float)
        if e.ndim != 1 or e.size < 2 or not np.all(np.isfinite(e)) or np.any(np.diff(e) <= 0):
            raise DopplermapInputError(f"window edges must be >= 2 finite, strictly increasing times, got "
                                       f"{list(self.edges)!r}")
        object.__setattr__(self, "edges", tuple(float(x) for x in e))

    @property
    def n_window(self) -> int:
        return len(self.edges) - 1

    @property
    def spans(self) -> np.ndarray:
        """(K, 2) start and end of each window, days."""
        e = np.asarray(self.edges)
        return np.stack([e[:-1], e[1:]], axis=1)

    @property
    def centres(self) -> np.ndarray:
        e = np.asarray(self.edges)
        return 0.5 * (e[:-1] + e[1:])

    # ------------------------------------------------------------------ builders

    @classmethod
    def count(cls, n_window: int, times, *, where: str = "windows") -> Windows:
        """``n_window`` windows of equal length from the first to the last of ``times``."""
        t = _times(times, where)
        n = _positive_int(n_window, where)
        lo, hi = float(t.min()), float(t.max())
        if hi <= lo:  # one time: one window around it
            if n > 1:
                raise DopplermapInputError(f"{where}: {n} windows need epochs at more than one time")
            return cls((lo, lo + 1e-6))
        return cls(tuple(np.linspace(lo, hi, n + 1)))  # the last window holds its end (index)

    @classmethod
    def rotations(cls, per_window: float, times, period: float, t0: float, *, where: str = "windows") -> Windows:
        """Windows of ``per_window`` rotations each, aligned on ``t0``, covering ``times``."""
        t = _times(times, where)
        if not (np.isfinite(per_window) and per_window > 0):
            raise DopplermapInputError(f"{where}: rotations per window must be a number > 0, got {per_window!r}")
        step = float(per_window) * float(period)
        k0 = np.floor((t.min() - t0) / step)
        k1 = np.floor((t.max() - t0) / step) + 1
        return cls(tuple(t0 + step * np.arange(k0, k1 + 1)))

    @classmethod
    def from_cycles(cls, cycles, period: float, t0: float, *, where: str = "window_edges") -> Windows:
        """Edges given in rotation cycles since ``t0`` (``E = (t - t0) / period``)."""
        c = np.asarray(cycles, dtype=float)
        if c.ndim != 1 or c.size < 2 or not np.all(np.isfinite(c)) or np.any(np.diff(c) <= 0):
            raise DopplermapInputError(f"{where} must be >= 2 strictly increasing rotation cycles, got {cycles!r}")
        return cls(tuple(t0 + float(period) * c))

    @classmethod
    def gaps(cls, min_gap: float, times, *, where: str = "window_gap") -> Windows:
        """A window for each run of ``times`` without a gap longer than ``min_gap`` days."""
        t = np.sort(_times(times, where))
        if not (np.isfinite(min_gap) and min_gap > 0):
            raise DopplermapInputError(f"{where} must be a number of days > 0, got {min_gap!r}")
        cut = np.nonzero(np.diff(t) > min_gap)[0]
        inner = 0.5 * (t[cut] + t[cut + 1])
        end = t[-1] if t[-1] > t[0] else t[0] + 1e-6
        return cls(tuple(np.concatenate([[t[0]], inner, [end]])))

    # ------------------------------------------------------------------ use

    def index(self, times, *, what: str = "epochs", where: str = "windows") -> np.ndarray:
        """(n,) int32 window of each time; a time outside the windows is refused."""
        t = _times(times, where)
        e = np.asarray(self.edges)
        outside = (t < e[0]) | (t > e[-1])
        if outside.any():
            i = int(np.argmax(outside))
            raise DopplermapInputError(f"{where}: {int(outside.sum())} {what} lie outside the windows "
                                       f"[{e[0]:.6f}, {e[-1]:.6f}] d, first at t = {t[i]:.6f} d")
        return np.clip(np.searchsorted(e, t, side="right") - 1, 0, self.n_window - 1).astype(np.int32)

    def check_filled(self, index, *, lmbd_time: float, where: str = "windows", lines: bool = True,
                     lc_index=None) -> None:
        """Warn about windows no epoch falls in (``lines=False``, light curves alone: no
        light-curve point): their maps are set by the temporal coupling alone (and, without
        it, by the regulariser alone). ``lc_index``: the window of each light-curve point of a
        joint fit, whose points in such a window are counted in the warning."""
        counts = np.bincount(np.asarray(index), minlength=self.n_window)
        empty = np.nonzero(counts == 0)[0]
        if empty.size:
            how = ("the temporal coupling of its neighbours" if lmbd_time > 0
                   else "nothing but the regulariser (lmbd_time = 0)")
            what = "line-profile epoch" if lines else "light-curve point"
            also = ""
            if lc_index is not None:
                n_lc = int(np.isin(np.asarray(lc_index), empty).sum())
                also = (f" and the light curve's {n_lc} point(s) in them" if n_lc else
                        " (the light curve has no point in them either)")
            warn(f"{where}: window(s) {', '.join(map(str, empty.tolist()))} of {self.n_window} hold no {what}; "
                 f"their maps are set by {how}{also}")

    def describe(self) -> str:
        lens = np.diff(self.edges)
        return f"{self.n_window} windows of {lens.min():.3g}-{lens.max():.3g} d"


def _times(times, where) -> np.ndarray:
    t = np.atleast_1d(np.asarray(times, dtype=float))
    if t.ndim != 1 or t.size == 0 or not np.all(np.isfinite(t)):
        raise DopplermapInputError(f"{where}: times must be a non-empty 1-D array of finite days")
    return t


def _positive_int(n, where) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise DopplermapInputError(f"{where}: the number of windows must be an integer >= 1, got {n!r}")
    return int(n)


def window_form(line, index, n_window: int):
    """The synthesis form ``line`` (any form reading the map through ``cell``/``pos``) with
    epoch ``e`` reading map ``index[e]`` of ``n_window`` stacked maps (module docstring)."""
    idx = np.asarray(index, dtype=np.int64)
    if idx.shape != (line.n_epoch,) or idx.min(initial=0) < 0 or idx.max(initial=0) >= n_window:
        raise DopplermapInputError(f"window index must be ({line.n_epoch},) in [0, {n_window}), got shape "
                                   f"{idx.shape}")
    if n_window == 1:
        return line
    n_cell, n_slot = line.n_cell, line.n_slot
    cell = np.asarray(line.cell).astype(np.int64) + idx[:, None] * n_cell
    pos = np.asarray(line.pos)
    wide = np.full((line.n_epoch, n_window * n_cell), n_slot, dtype=pos.dtype)
    rows = np.arange(line.n_epoch)[:, None]
    wide[rows, idx[:, None] * n_cell + np.arange(n_cell)[None, :]] = pos
    return dataclasses.replace(line, cell=jnp.asarray(cell.astype(np.asarray(line.cell).dtype)),
                               pos=jnp.asarray(wide))


def window_precomputed(pre, index, n_window: int):
    """A :class:`dopplermap.model.Precomputed` windowed by :func:`window_form` (the grid's
    ``cell_area`` and ``edges`` stay those of one map: the regulariser reads them per window)."""
    return dataclasses.replace(pre, line=window_form(pre.line, index, n_window))


def split_maps(fssc, fssh, n_window: int):
    """``(K, n_cell)`` views of the stacked maps."""
    return fssc.reshape(n_window, -1), fssh.reshape(n_window, -1)


def temporal_difference(fc, fh, cell_area):
    """``sum_k T(F_k, F_{k-1})`` of (K, n_cell) maps, the quadratic coupling (module docstring)."""
    a = cell_area / jnp.sum(cell_area)
    dc, dh = jnp.diff(fc, axis=0), jnp.diff(fh, axis=0)
    return jnp.sum(a[None, :] * (dc * dc + dh * dh))


def temporal_relative_entropy(fc, fh, cell_area):
    """``sum_k T(F_k, F_{k-1})`` of (K, n_cell) maps, each window's entropy relative to the
    previous one (module docstring); the maps are > 0 (the filling factors' floor)."""
    a = cell_area / jnp.sum(cell_area)

    def rel(f):
        new, old = f[1:], f[:-1]
        return new * jnp.log(new / old) - new + old

    return jnp.sum(a[None, :] * (rel(fc) + rel(fh)))


TIME_COUPLINGS = {"quadratic": temporal_difference, "relative_entropy": temporal_relative_entropy}
"""The couplings of neighbouring windows by name (:data:`dopplermap.choices.TIME_COUPLINGS`)."""


def time_coupling(name: str):
    """The coupling ``name``: ``(fc, fh, cell_area) -> sum_k T(F_k, F_{k-1})``."""
    return TIME_COUPLINGS[check(name, _COUPLING_NAMES, "time_coupling")]


@functools.partial(jax.tree_util.register_dataclass, data_fields=["fit", "index"], meta_fields=["n_window"])
@dataclasses.dataclass(frozen=True, eq=False)
class WindowedLightCurve:
    """A light-curve fit whose points belong to time windows.

    Attributes:
        fit: the :class:`~dopplermap.lightcurve.LightCurveFit` (or
            :class:`~dopplermap.lightcurve.LightCurveSet` of bands) of one map.
        index: (n_lc,) int32 window of each point (a tuple, one per band, for a set).
        n_window: the number of windows (static).
    """

    fit: object
    index: object
    n_window: int

    @classmethod
    def create(cls, fit, windows: Windows, *, where: str = "light curve") -> WindowedLightCurve:
        bands = (fit,) if isinstance(fit, LightCurveFit) else tuple(fit.bands)
        if any(b.diff is None for b in bands):
            raise DopplermapInputError(f"{where}: a windowed light curve needs the folded weights of "
                                       "precompute_lightcurve")
        idx = tuple(jnp.asarray(windows.index(np.asarray(b.times), what="light-curve points", where=where))
                    for b in bands)
        return cls(fit=fit, index=idx[0] if isinstance(fit, LightCurveFit) else idx, n_window=windows.n_window)

    @property
    def n_cell(self) -> int:
        """Cells of one map."""
        return self.fit.n_cell

    @property
    def n_lc(self) -> int:
        return self.fit.n_lc

    @property
    def names(self) -> tuple:
        """The bands' names (a :class:`~dopplermap.lightcurve.LightCurveSet`'s), ``()`` for one curve."""
        return tuple(getattr(self.fit, "names", ()))

    def bands(self):
        if isinstance(self.fit, LightCurveFit):
            return ((self.fit, self.index),)
        return tuple(zip(self.fit.bands, self.index, strict=True))


def windowed_lightcurve_models(fssc, fssh, wlc: WindowedLightCurve):
    """Each band's mean-normalised model light curve (n_lc,): each point from its window's map."""
    fc, fh = split_maps(fssc, fssh, wlc.n_window)
    stacked = jnp.concatenate([fc, fh], axis=1)  # (K, 2 n_cell), the folded weights' order
    out = []
    for b, idx in wlc.bands():
        flux = b.base + jnp.sum(b.diff * stacked[idx], axis=1)
        out.append(flux / jnp.mean(flux))
    return tuple(out)


def chi2_windowed_lightcurves(fssc, fssh, wlc: WindowedLightCurve):
    """``(chi2_lc, weighted, per_band)`` as :func:`dopplermap.lightcurve.chi2_lightcurves`."""
    models = windowed_lightcurve_models(fssc, fssh, wlc)
    ssr = jnp.stack([jnp.sum(model_residuals(m, b) ** 2) for m, (b, _) in zip(models, wlc.bands(), strict=True)])
    if isinstance(wlc.fit, LightCurveFit):
        c2 = ssr[0] / wlc.fit.n_lc
        return c2, c2, None
    sizes = np.asarray([b.n_lc for b in wlc.fit.bands], dtype=float)
    n = float(sizes.sum())
    return jnp.sum(ssr) / n, jnp.dot(wlc.fit.weights.astype(ssr.dtype), ssr) / n, tuple(ssr / sizes)
