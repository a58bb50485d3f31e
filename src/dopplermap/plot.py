"""Publication figures: the matplotlib Figure API only (no pyplot state, no backend switch).

Import this module lazily (it imports matplotlib). Every ``plot_*`` function takes plain
arrays, draws into the Figure or Axes it is given (``fig=`` / ``ax=``) or into a new one of
journal size (:mod:`dopplermap.style`), and returns the Figure; nothing here writes a file
except the save-type functions: :func:`plot_result` (every figure of a result into a
folder) and :func:`dopplermap.style.save_figure` (one figure). :func:`result_figures`
returns a result's figures as a dict for a notebook. No function here computes physics.

Maps are drawn from the cells themselves: with cell bounds (latitude-band grids) every image
pixel takes the value of the cell that contains it; without bounds (HEALPix) the value of
the nearest cell centre. Angles: latitude and longitude in radians on input, degrees on the
axes; longitude 0 faces the observer at phase 0 and the central meridian at phase ``phi``
is at longitude ``-360 phi`` (mod 360) (``docs/conventions.md``). Colour maps and labels of
each quantity come from :data:`dopplermap.style.CMAPS` and :data:`dopplermap.style.LABELS`.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import numpy as np

from . import style
from .choices import (
    MAP_PROJECTIONS,
    REGULARISER_LABELS,
    RESULT_PLOT_KINDS,
    SPOT_COMPONENTS,
    check,
    uncertainty_choice,
    uncertainty_title,
)
from .constants import FILL_MIN
from .errors import DopplermapInputError
from .gridtable import computed_rows, delta_chi2_interval
from .result import light_curves, line_sets, relative_brightness

__all__ = ["View", "MapStyle", "plot_map", "plot_profiles",
           "plot_light_curve", "plot_convergence", "plot_uncertainty", "uncertainty_figures", "result_figures", "DRAW_COST", "plot_result",
           "fitted_components", "cell_lookup", "central_meridians", "QUANTITIES",
           "plot_spot_area", "plot_polar", "plot_lcurve", "plot_grid", "plot_chi2_landscape",
           "plot_result_kind"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, eq=False)
class View:
    """How a map figure places the star, shared by :func:`plot_map`, :func:`plot_polar` and
    :func:`plot_uncertainty`.

    Attributes:
        inclination: deg; hatches the never-visible band (the polar view's outer ring).
        phases: rotation phases (cycles) of the observations; their central meridians
            (:func:`central_meridians`) are ticked.
        lat_bounds, lon_bounds: (n_cell, 2) cell bounds, rad: every pixel takes the value of
            the cell containing it (without them: of the nearest cell centre).
    """

    inclination: float | None = None
    phases: object = None
    lat_bounds: object = None
    lon_bounds: object = None

    @classmethod
    def of(cls, grid, *, inclination: float | None = None, phases=None) -> View:
        """The view of a :class:`~dopplermap.grid.SurfaceGrid`'s cells (its bounds)."""
        return cls(inclination=inclination, phases=phases, lat_bounds=getattr(grid, "lat_bounds", None),
                   lon_bounds=getattr(grid, "lon_bounds", None))

    def replace(self, **changes) -> View:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class MapStyle:
    """How a map figure draws its values.

    Attributes:
        vmin, vmax: colour-scale limits (default from the values shown).
        resolution: image rows (pixels across the polar view); None: the figure's default.
        colorbar: draw the colour bar. title: above the figure.
    """

    vmin: float | None = None
    vmax: float | None = None
    resolution: int | None = None
    colorbar: bool = True
    title: str | None = None

    def replace(self, **changes) -> MapStyle:
        return dataclasses.replace(self, **changes)


_MAP_STYLE_FIELDS = tuple(f.name for f in dataclasses.fields(MapStyle))

_SQRT2 = np.sqrt(2.0)

QUANTITIES = {k: (style.LABELS[k], style.CMAPS[k]) for k in ("cool", "hot", "total", "brightness")}
"""Map quantity -> (label, colour-map name), from :mod:`dopplermap.style`."""

_FILL = {"cool": "fssc", "hot": "fssh"}


def fitted_components(result) -> tuple[str, ...]:
    """The spot components worth drawing for a result: ``("cool", "hot")`` or ``("cool",)``.

    A component the fit did not free (``result.fit_components``) is left out, and so is the
    hot component when every hot filling factor sits at the floor (``FILL_MIN``): a hot
    panel would only show the bound.
    """
    comps = tuple(getattr(result, "fit_components", None) or SPOT_COMPONENTS)
    if "hot" in comps and not np.any(np.asarray(result.fssh, float) > 2.0 * FILL_MIN):
        comps = tuple(c for c in comps if c != "hot")
    return _check_components(comps or ("cool",))


def _check_components(components) -> tuple[str, ...]:
    comps = tuple(components)
    if not comps or any(c not in _FILL for c in comps):
        raise DopplermapInputError(f"components must be a non-empty subset of {tuple(_FILL)}, got {components!r}")
    return comps


# ---------------------------------------------------------------------------- helpers


def central_meridians(phases) -> np.ndarray:
    """Longitude (deg, in [0, 360)) of the central meridian at rotation ``phases`` (cycles)."""
    return np.mod(-360.0 * np.asarray(phases, dtype=float), 360.0)


def cell_lookup(lat, lon, lat_bounds=None, lon_bounds=None):
    """Return ``f(plat, plon) -> cell index`` for points (rad) on the sphere.

    With bounds (cells arranged in latitude bands, as :func:`latitude_band_grid` makes
    them) the index is that of the cell containing the point; points that fall outside
    every cell's bounds, and all points when no bounds are given, take the nearest centre.
    """
    lat = np.asarray(lat, dtype=float)
    lon = np.mod(np.asarray(lon, dtype=float), 2 * np.pi)
    xyz = np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)
    tree = None

    def nearest(plat, plon):
        nonlocal tree
        if tree is None:
            from scipy.spatial import cKDTree

            tree = cKDTree(xyz)
        p = np.stack([np.cos(plat) * np.cos(plon), np.cos(plat) * np.sin(plon), np.sin(plat)], axis=-1)
        return tree.query(p)[1]

    if lat_bounds is None or lon_bounds is None:
        return nearest

    latb = np.asarray(lat_bounds, dtype=float)
    lonb = np.asarray(lon_bounds, dtype=float)
    band_lo = np.unique(latb[:, 0])
    band = np.searchsorted(band_lo, latb[:, 0])
    key = band * 8.0 + np.mod(lonb[:, 0], 2 * np.pi)  # 2 pi < 8: keys sort band by band
    order = np.argsort(key)
    key_sorted = key[order]

    def lookup(plat, plon):
        plat = np.asarray(plat, dtype=float)
        plon = np.mod(np.asarray(plon, dtype=float), 2 * np.pi)
        b = np.clip(np.searchsorted(band_lo, plat, side="right") - 1, 0, band_lo.size - 1)
        j = np.clip(np.searchsorted(key_sorted, b * 8.0 + plon, side="right") - 1, 0, key.size - 1)
        idx = order[j]
        tol = 1e-9
        ok = ((plat >= latb[idx, 0] - tol) & (plat <= latb[idx, 1] + tol)
              & (plon >= lonb[idx, 0] - tol) & (plon <= lonb[idx, 1] + tol))
        if not np.all(ok):
            idx = np.where(ok, idx, nearest(plat, plon))
        return idx

    return lookup


def _mollweide_forward(lat, lam):
    """Mollweide plane (x, y) of latitude ``lat`` and longitude ``lam`` in [-pi, pi] (rad)."""
    lat = np.asarray(lat, dtype=float)
    theta = lat.copy()
    target = np.pi * np.sin(lat)
    for _ in range(30):  # Newton on 2 theta + sin 2 theta = pi sin lat
        f = 2 * theta + np.sin(2 * theta) - target
        d = 2 + 2 * np.cos(2 * theta)
        theta = np.where(d > 1e-12, theta - f / np.where(d > 1e-12, d, 1.0), theta)
    return 2 * _SQRT2 / np.pi * lam * np.cos(theta), _SQRT2 * np.sin(theta)


def _mollweide_inverse(x, y):
    """Latitude, longitude in [-pi, pi] (rad) and an inside mask of Mollweide-plane points."""
    theta = np.arcsin(np.clip(y / _SQRT2, -1.0, 1.0))
    lat = np.arcsin(np.clip((2 * theta + np.sin(2 * theta)) / np.pi, -1.0, 1.0))
    c = np.cos(theta)
    lam = np.pi * x / (2 * _SQRT2 * np.where(c > 1e-12, c, 1e-12))
    inside = (np.abs(y) <= _SQRT2) & (np.abs(lam) <= np.pi)
    return lat, lam, inside


class _Raster:
    """Pixel -> cell index for one projection, reused for every panel.

    Mollweide panels span x in [-2 sqrt 2, 2 sqrt 2], y in [-sqrt 2, sqrt 2] with longitude
    180 deg at the centre; rectangular panels span longitude [0, 360], latitude [-90, 90] deg.
    """

    def __init__(self, lookup, projection: str, ny: int):
        if projection == "mollweide":
            nx = 2 * ny
            x = (np.arange(nx) + 0.5) / nx * 4 * _SQRT2 - 2 * _SQRT2
            y = _SQRT2 - (np.arange(ny) + 0.5) / ny * 2 * _SQRT2
            xx, yy = np.meshgrid(x, y)
            plat, lam, inside = _mollweide_inverse(xx, yy)
            plon = lam + np.pi  # the centre of the map is longitude 180
            self.extent = (-2 * _SQRT2, 2 * _SQRT2, -_SQRT2, _SQRT2)
        elif projection == "rect":
            nx = 2 * ny
            plon = (np.arange(nx) + 0.5) / nx * 2 * np.pi
            plat = np.pi / 2 - (np.arange(ny) + 0.5) / ny * np.pi
            plon, plat = np.meshgrid(plon, plat)
            inside = np.ones_like(plat, dtype=bool)
            self.extent = (0.0, 360.0, -90.0, 90.0)
        else:
            raise DopplermapInputError(f"projection must be 'mollweide' or 'rect', got {projection!r}")
        self.inside = inside
        self.index = np.where(inside, lookup(np.where(inside, plat, 0.0), np.where(inside, plon, 0.0)), 0)

    def image(self, values):
        return np.ma.masked_array(np.asarray(values, dtype=float)[self.index], mask=~self.inside)




_RASTERS: dict = {}


def grid_raster(lat, lon, lat_bounds, lon_bounds, projection, ny) -> _Raster:
    """:class:`_Raster` of a grid, cached (the same grid is drawn in several figures)."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for a in (lat, lon, lat_bounds, lon_bounds):
        h.update(b"-" if a is None else np.ascontiguousarray(a, dtype=float).tobytes())
    key = (h.hexdigest(), projection, int(ny))
    r = _RASTERS.get(key)
    if r is None:
        if len(_RASTERS) > 16:
            _RASTERS.clear()
        r = _RASTERS[key] = _Raster(cell_lookup(lat, lon, lat_bounds, lon_bounds), projection, ny)
    return r


class _Sheet:
    """One axes holding a grid of panels (no axes per panel: drawing stays fast).

    Panel ``(r, c)`` spans data x in ``[c (pw + gx), c (pw + gx) + pw]`` and y in
    ``[-r (ph + gy) - ph, -r (ph + gy)]``. The figure is ``width`` inches wide; the gaps
    ``gx``, ``gy`` and the margins (left, right, top, bottom) are inches, so labels keep
    their room whatever the panel size. ``fig``: draw into this (empty) Figure, resized.
    """

    def __init__(self, nrow, ncol, pw, ph, gx, gy, width, margins, fig=None):
        left, right, top, bottom = margins
        self.scale = s = (width - left - right - (ncol - 1) * gx) / (ncol * pw)  # inches per data unit
        self.pw, self.ph, self.gx, self.gy = pw, ph, gx / s, gy / s
        self.w = ncol * pw + (ncol - 1) * self.gx
        self.h = nrow * ph + (nrow - 1) * self.gy
        self.fig_w, self.fig_h = width, self.h * s + top + bottom
        if fig is None:
            fig = style.new_figure(self.fig_w, self.fig_h)
        else:
            fig.set_size_inches(self.fig_w, self.fig_h)
        self.fig = fig
        with style.context():
            self.ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))  # the whole figure, in panel data units
        self.ax.set_xlim(-left / s, self.w + right / s)
        self.ax.set_ylim(-self.h - bottom / s, top / s)
        self.ax.set_aspect("auto")
        self.ax.axis("off")

    def origin(self, r, c):
        """Lower-left corner of panel (r, c) in data units."""
        return c * (self.pw + self.gx), -r * (self.ph + self.gy) - self.ph

    def text(self, x, y, s, **kw):
        kw.setdefault("fontsize", style.FONT_PT)
        return self.ax.text(x, y, s, **kw)

    def colorbar(self, quantity, norm, y0, y1, label):
        """A vertical colour bar right of the panels, from data y0 to y1 (drawn, not an axes)."""
        from matplotlib.ticker import MaxNLocator

        ax, s = self.ax, self.scale
        x0, x1 = self.w + 0.1 / s, self.w + 0.22 / s
        vmin, vmax = float(norm.vmin), float(norm.vmax)
        grad = np.linspace(vmax, vmin, 256)[:, None]
        im = ax.imshow(grad, extent=(x0, x1, y0, y1), cmap=style.cmap(quantity), norm=norm,
                       interpolation="bilinear", aspect="auto", zorder=1)
        im.set_label(f"colorbar:{quantity}")
        ax.plot([x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0], color="k", lw=0.6, zorder=2)
        ticks = [t for t in MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]).tick_values(vmin, vmax) if vmin - 1e-9 <= t <= vmax + 1e-9]
        for t in ticks:
            y = y0 + (float(norm(t)) if vmax > vmin else 0.5) * (y1 - y0)
            ax.plot([x1, x1 + 0.04 / s], [y, y], color="k", lw=0.6)
            self.text(x1 + 0.06 / s, y, f"{t:.3g}", ha="left", va="center")
        self.text(x1 + 0.5 / s, 0.5 * (y0 + y1), label, rotation=90, ha="center", va="center",
                  multialignment="center")


def _nan_join(segments):
    """Concatenate (x, y) segments with NaN separators, for one ``plot`` call."""
    xs, ys = [], []
    for x, y in segments:
        xs += [np.asarray(x, float), [np.nan]]
        ys += [np.asarray(y, float), [np.nan]]
    return np.concatenate(xs), np.concatenate(ys)


_GRAT = dict(color="0.5", lw=0.4, alpha=0.8)
_SHADE = dict(facecolor=(0.6, 0.6, 0.6, 0.55), edgecolor="0.35", hatch="////", linewidth=0.0)
_HALO = None


def _halo():
    """White outline for labels drawn over images."""
    global _HALO
    if _HALO is None:
        from matplotlib import patheffects

        _HALO = [patheffects.withStroke(linewidth=1.6, foreground="white")]
    return _HALO


def _decor(projection, inclination, phase_lons):
    """Panel-local decoration of a map (computed once per figure, drawn for every panel).

    Returns a dict: ``grat`` and ``outline`` (x, y) NaN-joined lines, ``shade`` (n, 2)
    polygon or None, ``ticks`` (x positions, y0, y1) or None, ``lat_labels`` and
    ``lon_labels`` lists of (x, y, text, ha, va), ``image_extent``, ``origin``.
    """
    d = {}
    if projection == "mollweide":
        lam = np.linspace(-np.pi, np.pi, 121)
        phi = np.linspace(-np.pi / 2, np.pi / 2, 61)
        segs = [_mollweide_forward(np.full_like(lam, np.radians(la)), lam) for la in (-60, -30, 0, 30, 60)]
        segs += [_mollweide_forward(phi, np.full_like(phi, np.radians(lo) - np.pi)) for lo in (90, 180, 270)]
        d["grat"] = _nan_join(segs)
        t = np.linspace(0, 2 * np.pi, 181)
        d["outline"] = (2 * _SQRT2 * np.cos(t), _SQRT2 * np.sin(t))
        d["shade"] = None
        if inclination is not None and inclination < 90:
            la0 = -np.radians(inclination)
            xa, ya = _mollweide_forward(np.full_like(lam, la0), lam)
            phi_b = np.linspace(la0, -np.pi / 2, 40)
            xr, yr = _mollweide_forward(phi_b, np.full_like(phi_b, np.pi))
            d["shade"] = np.concatenate([np.stack([xa, ya], 1), np.stack([xr, yr], 1), np.stack([-xr[::-1], yr[::-1]], 1)])
        d["ticks"] = None
        if phase_lons is not None and len(phase_lons):
            xp, _ = _mollweide_forward(np.zeros(len(phase_lons)), np.radians(np.asarray(phase_lons)) - np.pi)
            d["ticks"] = (xp, -_SQRT2 - 0.32, -_SQRT2 - 0.1)
        xl, _ = _mollweide_forward(np.zeros(3), np.radians([90.0, 180.0, 270.0]) - np.pi)
        d["lon_labels"] = [(x, 0.05, f"{lo}°", "center", "bottom") for x, lo in zip(xl, (90, 180, 270), strict=True)]
        xq, yq = _mollweide_forward(np.radians([-60.0, 0.0, 60.0]), np.full(3, -np.pi))
        d["lat_labels"] = [(x - 0.06, y, f"{la}°", "right", "center") for x, y, la in zip(xq, yq, (-60, 0, 60), strict=True)]
        d["image_extent"] = (-2 * _SQRT2, 2 * _SQRT2, -_SQRT2, _SQRT2)
        d["origin"] = (2 * _SQRT2, _SQRT2 + 0.42)  # panel corner -> map centre
    else:
        segs = [([0, 360], [la, la]) for la in (-60, -30, 0, 30, 60)]
        segs += [([lo, lo], [-90, 90]) for lo in (60, 120, 180, 240, 300)]
        d["grat"] = _nan_join(segs)
        d["outline"] = (np.array([0, 360, 360, 0, 0.0]), np.array([-90, -90, 90, 90, -90.0]))
        d["shade"] = None
        if inclination is not None and inclination < 90:
            d["shade"] = np.array([[0, -90], [360, -90], [360, -inclination], [0, -inclination]], dtype=float)
        d["ticks"] = None
        if phase_lons is not None and len(phase_lons):
            d["ticks"] = (np.asarray(phase_lons, float), 93.0, 105.0)
        d["lon_labels"] = [(lo, -94.0, f"{lo}°", "center", "top") for lo in range(0, 360, 90)]
        d["lat_labels"] = [(-6.0, la, f"{la}°", "right", "center") for la in range(-90, 91, 45)]
        d["image_extent"] = (0.0, 360.0, -90.0, 90.0)
        d["origin"] = (0.0, 90.0)
    return d


def colour_limits(name, arrays):
    """``(lo, hi)`` colour-bar limits of quantity ``name`` over the finite values of ``arrays``."""
    vals = np.concatenate([np.asarray(a, dtype=float).ravel() for a in arrays])
    vals = vals[np.isfinite(vals)]
    if name == "brightness":
        lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (0.0, 2.0)
        return min(lo, 1.0 - 1e-3), max(hi, 1.0 + 1e-3)
    if name == "uncertainty":
        return 0.0, float(vals.max()) if vals.size and vals.max() > 0 else 1.0
    hi = float(vals.max()) if vals.size else 1.0
    return 0.0, max(0.05, min(1.0, np.ceil(hi * 20) / 20))


def _norm(vmin, vmax):
    from matplotlib.colors import Normalize

    return Normalize(vmin=vmin, vmax=vmax)


_TICKS_LABEL = "central meridian of each observation"
_LEGEND_ROW_IN = 0.17
"""Height of one more row of the legend strip under map panels, inches."""


def _legend_labels(ticks: bool, shade: bool, missing: str | None) -> list[str]:
    return [t for t, on in ((_TICKS_LABEL, ticks), ("never visible", shade), (missing, bool(missing))) if on]


def _legend_ncols(labels: list[str], width: float) -> int:
    """Entries per row of the legend strip so that a row fits ``width`` inches: the labels'
    widths measured in the figure font (matplotlib's text layout, no renderer needed), plus
    each entry's handle and the spacing between entries."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    if not labels:
        return 1
    with style.context():
        prop = FontProperties(size=style.FONT_PT)
    measure = TextToPath()
    em = style.FONT_PT / 72.0
    entry = [measure.get_text_width_height_descent(t, prop, ismath=False)[0] / 72.0 + (1.2 + 0.8) * em
             for t in labels]
    for n in range(len(labels), 0, -1):
        rows = -(-len(entry) // n)  # matplotlib fills the columns first
        cols = [max(entry[j * rows:(j + 1) * rows]) for j in range(n) if entry[j * rows:(j + 1) * rows]]
        if sum(cols) + 1.2 * em * (len(cols) - 1) <= 0.96 * width:
            return n
    return 1


def _legend_strip(sheet, *, ticks: bool, shade: bool, missing: str | None = None, ncols: int | None = None):
    """Explain the phase ticks, the hatched band and grey cells under the panels, ``ncols``
    entries a row (default: all in one)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = []
    if ticks:
        handles.append(Line2D([], [], color="k", lw=0.8, marker="|", ms=6, ls="none", label=_TICKS_LABEL))
    if shade:
        handles.append(Patch(label="never visible", **_SHADE))
    if missing:
        handles.append(Patch(facecolor=style.GAP_COLOUR, label=missing))
    if handles:
        sheet.ax.legend(handles=handles, loc="lower center", ncols=ncols or len(handles), frameon=False,
                        bbox_to_anchor=(0.5, 0.0), bbox_transform=sheet.fig.transFigure,
                        fontsize=style.FONT_PT, handlelength=1.2, columnspacing=1.2, borderaxespad=0.1)


# ---------------------------------------------------------------------------- maps


def _plot_maps(lat, lon, maps: dict, *, truth: dict | None = None, lat_bounds=None, lon_bounds=None,
              inclination: float | None = None, phase_lons=None, projection: str = "mollweide",
              components=SPOT_COMPONENTS, title: str | None = None, resolution: int = 200,
              missing_label: str | None = None, hidden=None, limits: dict | None = None, fig=None):
    """Maps of filling factors / brightness, true beside recovered when ``truth`` is given.

    Args:
        lat, lon: (n_cell,) cell centres, rad. maps: quantity -> (n_cell,) values, quantities
            from ``"cool"``, ``"hot"``, ``"total"``, ``"brightness"``, ``"uncertainty"``
            (one row each, in that order, each with its colour map of :mod:`dopplermap.style`).
        truth: the same quantities for the true map (left column).
        lat_bounds, lon_bounds: (n_cell, 2) cell bounds, rad (optional).
        inclination: deg; latitudes below ``-inclination`` (never visible) are hatched.
        phase_lons: deg, central-meridian longitudes of the observations (ticks under /
            above each map, explained in a legend).
        projection: ``"mollweide"`` or ``"rect"``. resolution: image rows per panel.
        components: filling-factor components to draw (``("cool",)`` drops the hot row).
        missing_label: legend text for cells without a value (NaN or inf: drawn grey).
        hidden: (n_cell,) bool, cells left blank (not grey) where they lack a value: the
            never-visible band, hatched.
        limits: quantity -> (lo, hi) colour-scale limits (default from the values shown).
        fig: an empty Figure to draw into (resized to the layout); default a new one,
            one column wide (3.5 in) for one column of maps, two columns (7.1 in) for two.

    Returns the Figure.
    """
    comps = _check_components(components)
    order = ("cool", "hot", "total", "brightness", "uncertainty")
    names = [k for k in order if k in maps and (k not in _FILL or k in comps)]
    if not names:
        raise DopplermapInputError(f"maps must contain some of {order}, got {tuple(maps)}")
    for k, v in list(maps.items()) + list((truth or {}).items()):
        if np.shape(v) != np.shape(lat):
            raise DopplermapInputError(f"map {k!r} has shape {np.shape(v)}, expected (n_cell,) = {np.shape(lat)}")
    cols = [("true", truth), ("recovered", maps)] if truth else [("recovered", maps)]
    check(projection, MAP_PROJECTIONS, "projection")
    raster = grid_raster(lat, lon, lat_bounds, lon_bounds, projection, resolution)
    nrow, ncol = len(names), len(cols)
    width = style.ONE_COLUMN if ncol == 1 else style.TWO_COLUMN
    dec = _decor(projection, inclination, phase_lons)
    has_ticks, has_shade = dec["ticks"] is not None, dec["shade"] is not None
    blank = np.zeros(np.shape(lat), bool) if hidden is None else np.asarray(hidden, bool)
    missing = missing_label if missing_label and any(
        np.any(~np.isfinite(np.asarray(d[k], float)) & ~blank) for _, d in cols if d for k in names if k in d) else None
    top = 0.3 + (0.25 if title else 0.0)
    labels = _legend_labels(has_ticks, has_shade, missing)
    legend_ncols = _legend_ncols(labels, width)
    legend_rows = -(-len(labels) // legend_ncols)
    bottom = 0.3 + _LEGEND_ROW_IN * max(legend_rows - 1, 0) if labels else 0.1
    if projection == "mollweide":
        pad = 0.42  # phase-tick strip under each map
        sheet = _Sheet(nrow, ncol, 4 * _SQRT2, 2 * _SQRT2 + pad, 0.32, 0.12, width, (0.3, 0.95, top, bottom), fig)
    else:
        pad = 18.0  # phase-tick strip above each map
        sheet = _Sheet(nrow, ncol, 360.0, 180.0 + pad, 0.4, 0.3, width, (0.6, 0.95, top, bottom + 0.3), fig)
    ax = sheet.ax
    from matplotlib.collections import PolyCollection

    grat, outline, shades, ticks = [], [], [], []
    ex = dec["image_extent"]
    for r, name in enumerate(names):
        shown = [d[name] for _, d in cols if d is not None and name in d]
        norm = _norm(*((limits or {}).get(name) or colour_limits(name, shown)))
        cm = style.cmap(name).with_extremes(bad=(0.0, 0.0, 0.0, 0.0))  # outside the map: transparent
        for c, (colname, data) in enumerate(cols):
            x0, y0 = sheet.origin(r, c)
            cx, cy = x0 + dec["origin"][0], y0 + dec["origin"][1]
            panel = f"{r},{c}"
            if data is not None and name in data:
                img = raster.image(np.where(np.isfinite(data[name]), data[name], np.nan))
                im = ax.imshow(img, extent=(ex[0] + cx, ex[1] + cx, ex[2] + cy, ex[3] + cy), origin="upper",
                               interpolation="nearest", cmap=cm, norm=norm, zorder=1)
                im.set_label(name)
                im.set_gid(f"panel:{panel}")
                gap_mask = raster.inside & ~(np.isfinite(np.asarray(data[name], float)) | blank)[raster.index]
                if gap_mask.any():  # cells without a value (unconstrained): the gap colour
                    gap = np.zeros(gap_mask.shape + (4,))
                    gap[gap_mask] = style.GAP_COLOUR
                    ax.imshow(gap, extent=(ex[0] + cx, ex[1] + cx, ex[2] + cy, ex[3] + cy), origin="upper",
                              interpolation="nearest", zorder=1)
                grat.append((dec["grat"][0] + cx, dec["grat"][1] + cy))
                outline.append((dec["outline"][0] + cx, dec["outline"][1] + cy))
                if has_shade:
                    shades.append(dec["shade"] + [cx, cy])
                if has_ticks:
                    tx = dec["ticks"][0] + cx
                    ticks.append((tx, np.full_like(tx, dec["ticks"][1] + cy), np.full_like(tx, dec["ticks"][2] + cy)))
                # coordinates labelled on every panel
                for kind, labels in (("lat", dec["lat_labels"]), ("lon", dec["lon_labels"])):
                    for lx, ly, txt, ha, va in labels:
                        t = sheet.text(lx + cx, ly + cy, txt, ha=ha, va=va, zorder=5, color="0.1")
                        t.set_gid(f"{kind}:{panel}")
                        if projection == "mollweide" and kind == "lon":
                            t.set_path_effects(_halo())
            if r == 0:
                sheet.text(x0 + sheet.pw / 2, y0 + sheet.ph + 0.06 / sheet.scale, colname, ha="center",
                           va="bottom", fontsize=style.TITLE_PT)
        _, y0 = sheet.origin(r, 0)
        lo, hi = (y0 + pad, y0 + sheet.ph) if projection == "mollweide" else (y0, y0 + 180.0)
        label = style.LABELS[name].replace(" filling", "\nfilling").replace("relative ", "relative\n")
        sheet.colorbar(name, norm, lo + 0.06 * (hi - lo), hi - 0.06 * (hi - lo), label)
    if projection == "rect":  # axis titles once per figure: the degree labels sit on every panel
        sheet.text(sheet.w / 2, -sheet.h - 0.22 / sheet.scale, "longitude", ha="center", va="top")
        sheet.text(-0.5 / sheet.scale, -sheet.h / 2, "latitude", rotation=90, ha="center", va="center")
    if shades:
        ax.add_collection(PolyCollection(shades, zorder=2, **_SHADE), autolim=False)
    if grat:
        ax.plot(*_nan_join(grat), zorder=3, **_GRAT)
        ax.plot(*_nan_join(outline), color="0.15", lw=0.7, zorder=4)
    if ticks:
        ax.vlines(*(np.concatenate(t) for t in zip(*ticks, strict=True)), color="k", lw=0.5)
    _legend_strip(sheet, ticks=has_ticks, shade=has_shade, missing=missing, ncols=legend_ncols)
    if title:
        _fit_width(sheet.fig.suptitle(title, fontsize=style.TITLE_PT, y=1.0 - 0.05 / sheet.fig_h, va="top"),
                   sheet.fig)
    return sheet.fig


def _fit_width(text, fig, margin: float = 0.03) -> None:
    """Shrink a figure-wide ``text`` wider than the figure (a long title over one column of
    maps ran off both edges) to fit within ``margin`` of each edge."""
    room = fig.bbox.width * (1.0 - 2.0 * margin)
    for _ in range(3):  # the width is not quite proportional to the size (hinting): measure again
        width = text.get_window_extent(renderer=fig.canvas.get_renderer()).width
        if width <= room:
            break
        text.set_fontsize(text.get_fontsize() * room / width * 0.98)


def plot_map(lat, lon, values, *, quantity: str = "cool", ax=None, view: View | None = None,
             look: MapStyle | None = None):
    """One Mollweide map of ``values`` (n_cell,) into ``ax`` (default: a new one-column figure).

    ``quantity`` picks the colour map and label (:data:`dopplermap.style.CMAPS`). ``view``: the
    cells' bounds and the inclination (:class:`View`; e.g. ``View.of(grid, inclination=60)``);
    ``look``: colour limits, resolution (default 200), colour bar (:class:`MapStyle`; its
    title is not drawn here). Returns the Figure.
    """
    view, look = view or View(), look or MapStyle()
    lat_bounds, lon_bounds, inclination = view.lat_bounds, view.lon_bounds, view.inclination
    vmin, vmax, colorbar = look.vmin, look.vmax, look.colorbar
    resolution = 200 if look.resolution is None else look.resolution
    if np.shape(values) != np.shape(lat):
        raise DopplermapInputError(f"values has shape {np.shape(values)}, expected (n_cell,) = {np.shape(lat)}")
    if ax is None:
        fig = style.new_figure(style.ONE_COLUMN, 2.0)
        with style.context():
            ax = fig.add_subplot()
    fig = ax.figure
    raster = grid_raster(lat, lon, lat_bounds, lon_bounds, "mollweide", resolution)
    dec = _decor("mollweide", inclination, None)
    lo, hi = colour_limits(quantity, [values])
    with style.context():
        cm = style.cmap(quantity).with_extremes(bad=(0.0, 0.0, 0.0, 0.0))  # outside the map: transparent
        im = ax.imshow(raster.image(values), extent=dec["image_extent"], origin="upper", cmap=cm,
                       norm=_norm(lo if vmin is None else vmin, hi if vmax is None else vmax), zorder=1)
        im.set_label(quantity)
        gap_mask = raster.inside & ~np.isfinite(np.asarray(values, float)[raster.index])
        if gap_mask.any():  # cells without a value: the gap colour
            gap = np.zeros(gap_mask.shape + (4,))
            gap[gap_mask] = style.GAP_COLOUR
            ax.imshow(gap, extent=dec["image_extent"], origin="upper", zorder=1)
        ax.plot(*dec["grat"], zorder=3, **_GRAT)
        ax.plot(*dec["outline"], color="0.15", lw=0.7, zorder=4)
        if dec["shade"] is not None:
            from matplotlib.patches import Polygon

            ax.add_patch(Polygon(dec["shade"], zorder=2, label="never visible", **_SHADE))
        for kind, labels in (("lat", dec["lat_labels"]), ("lon", dec["lon_labels"])):
            for lx, ly, txt, ha, va in labels:
                t = ax.text(lx, ly, txt, ha=ha, va=va, zorder=5, color="0.1", fontsize=style.FONT_PT)
                t.set_gid(f"{kind}:0,0")
                if kind == "lon":
                    t.set_path_effects(_halo())
        ax.set_xlim(-2 * _SQRT2 - 0.5, 2 * _SQRT2 + 0.05)
        ax.set_ylim(-_SQRT2 - 0.05, _SQRT2 + 0.05)
        ax.set_aspect("equal")
        ax.axis("off")
        if colorbar:
            fig.colorbar(im, ax=ax, label=style.LABELS[quantity], shrink=0.8)
    return fig


def _ortho_image(lookup, values, inclination, phase, n):
    """(n, n) masked image of ``values`` seen at rotation ``phase``; the receding limb is on the right."""
    inc = np.radians(inclination)
    s = (np.arange(n) + 0.5) / n * 2 - 1
    X, Y = np.meshgrid(s, s[::-1])
    r2 = X**2 + Y**2
    disc = r2 < 1.0
    Z = np.sqrt(np.clip(1.0 - r2, 0.0, 1.0))
    # sky axes in the star's inertial frame: right = (0, 1, 0), up = (-cos i, 0, sin i), towards us = (sin i, 0, cos i)
    px = -Y * np.cos(inc) + Z * np.sin(inc)
    py = X
    pz = Y * np.sin(inc) + Z * np.cos(inc)
    plat = np.arcsin(np.clip(pz[disc], -1, 1))
    plon = np.mod(np.arctan2(py[disc], px[disc]) - 2 * np.pi * phase, 2 * np.pi)
    img = np.full(X.shape, np.nan)
    img[disc] = np.asarray(values, dtype=float)[lookup(plat, plon)]
    return np.ma.masked_invalid(img)


def _ortho_graticule(inclination, phase):
    """NaN-separated (x, y) of the visible parts of the parallels and meridians."""
    inc = np.radians(inclination)
    segs = []

    def add(la, lo):
        a = lo + 2 * np.pi * phase
        px, py, pz = np.cos(la) * np.cos(a), np.cos(la) * np.sin(a), np.sin(la)
        X = py
        Y = -px * np.cos(inc) + pz * np.sin(inc)
        Z = px * np.sin(inc) + pz * np.cos(inc)
        segs.append((np.where(Z >= 0, X, np.nan), Y))

    t = np.linspace(0, 2 * np.pi, 121)
    for la in (-60, -30, 0, 30, 60):
        add(np.full_like(t, np.radians(la)), t)
    p = np.linspace(-np.pi / 2, np.pi / 2, 61)
    for lo in range(0, 360, 30):
        add(p, np.full_like(p, np.radians(lo)))
    return _nan_join(segs)


def _pole_and_rotation(ax, inclination, cx, cy):
    """The visible (north) pole as a cross and the sense of rotation as an arrow along the
    parallel at latitude 70 deg, across the front of the disc (left to right: the approaching
    limb is on the left)."""
    inc = np.radians(inclination)
    a = np.linspace(-0.9, 0.9, 40)
    la = np.radians(70.0)
    px, py, pz = np.cos(la) * np.cos(a), np.cos(la) * np.sin(a), np.sin(la)
    X, Y = py, -px * np.cos(inc) + pz * np.sin(inc)
    halo = _halo()  # a white outline: seen on a dark polar spot too
    ax.plot(X[:-1] + cx, Y[:-1] + cy, color="k", lw=0.8, zorder=6, gid="rotation", path_effects=halo)
    ax.annotate("", xy=(X[-1] + cx, Y[-1] + cy), xytext=(X[-3] + cx, Y[-3] + cy), zorder=6,
                arrowprops=dict(arrowstyle="-|>", color="k", lw=0.8, mutation_scale=7, shrinkA=0, shrinkB=0,
                                path_effects=halo))
    ax.plot([cx], [cy + np.sin(inc)], marker="+", color="k", ms=5, mew=0.9, zorder=6, gid="pole", path_effects=halo)


def _plot_orthographic(lat, lon, values, *, inclination: float, phases=None, truth=None, lat_bounds=None,
                      lon_bounds=None, quantity: str = "brightness", vmin=None, vmax=None, resolution: int = 160,
                      fig=None):
    """The star as seen at 1-8 rotation phases (recovered; the truth above it when given).

    Args:
        lat, lon: (n_cell,) rad. values, truth: (n_cell,) values of ``quantity`` (its
            colour map and label from :mod:`dopplermap.style`).
        inclination: deg. phases: rotation phases (cycles) of the views, 1-8 of them
            (default 6 evenly spaced). The receding limb is on the right, north up; a cross
            marks the visible pole and an arrow the sense of rotation.
        fig: an empty Figure to draw into (resized); default a new two-column figure.

    Returns the Figure.
    """
    phases = np.arange(6) / 6.0 if phases is None else np.atleast_1d(np.asarray(phases, dtype=float))
    if not 1 <= phases.size <= 8:
        raise DopplermapInputError(f"phases must hold 1 to 8 rotation phases, got {phases.size}")
    for name, v in (("values", values), ("truth", truth)):
        if v is not None and np.shape(v) != np.shape(lat):
            raise DopplermapInputError(f"{name} has shape {np.shape(v)}, expected (n_cell,) = {np.shape(lat)}")
    from matplotlib.patches import Circle

    lookup = cell_lookup(lat, lon, lat_bounds, lon_bounds)
    rows = [("true", truth), ("recovered", values)] if truth is not None else [("recovered", values)]
    lo, hi = colour_limits(quantity, [v for _, v in rows])
    lo, hi = (lo if vmin is None else vmin), (hi if vmax is None else vmax)
    if hi <= lo:
        hi = lo + 1e-3
    norm = _norm(lo, hi)
    cm = style.cmap(quantity).with_extremes(bad=(0.0, 0.0, 0.0, 0.0))
    width = style.TWO_COLUMN if phases.size > 3 else style.ONE_COLUMN
    sheet = _Sheet(len(rows), phases.size, 2.0, 2.0, 0.06, 0.22, width, (0.25, 0.85, 0.25, 0.05), fig)
    ax = sheet.ax
    for r, (rowname, vals) in enumerate(rows):
        for c, ph in enumerate(phases):
            x0, y0 = sheet.origin(r, c)
            cx, cy = x0 + 1.0, y0 + 1.0
            im = ax.imshow(_ortho_image(lookup, vals, inclination, ph, resolution),
                           extent=(cx - 1, cx + 1, cy - 1, cy + 1), cmap=cm, norm=norm,
                           interpolation="bilinear", origin="upper")
            im.set_label(quantity)
            im.set_gid(f"panel:{r},{c}")
            gx, gy = _ortho_graticule(inclination, ph)
            ax.plot(gx + cx, gy + cy, color="0.5", lw=0.35, alpha=0.7)
            _pole_and_rotation(ax, inclination, cx, cy)
            ax.add_patch(Circle((cx, cy), 1.0, fill=False, lw=0.6, color="0.2"))
            sheet.text(cx, cy + 1.04, f"phase {ph:.2f}", ha="center", va="bottom").set_gid(f"title:{r},{c}")
            if c == 0:
                sheet.text(x0 - 0.05 / sheet.scale, cy, rowname, rotation=90, ha="right", va="center")
    _, ylo = sheet.origin(len(rows) - 1, 0)
    label = style.LABELS[quantity].replace(" filling", "\nfilling").replace("relative ", "relative\n")
    sheet.colorbar(quantity, norm, ylo + 0.1, -0.1, label)
    return sheet.fig


def _select_epochs(phases, max_profiles):
    order = np.argsort(np.mod(phases, 1.0), kind="stable")
    if order.size > max_profiles:
        order = order[np.unique(np.round(np.linspace(0, order.size - 1, max_profiles)).astype(int))]
    return order


def _nice(x):
    """Round ``x`` > 0 to 1, 2 or 5 times a power of ten."""
    e = np.floor(np.log10(x))
    m = x / 10**e
    return float((1 if m < 1.5 else 2 if m < 3.5 else 5 if m < 7.5 else 10) * 10**e)


def _profile_arrays(vels, phases, obs, model):
    """Float arrays of a profile plot; ``obs`` and ``model`` must be (n_epoch, n_vel)."""
    vels, phases, obs, model = (np.asarray(a, float) for a in (vels, phases, obs, model))
    if obs.shape != model.shape or obs.shape != (phases.size, vels.size):
        raise DopplermapInputError(f"obs {obs.shape} and model {model.shape} must both be (n_epoch, n_vel) = "
                                   f"({phases.size}, {vels.size})")
    return vels, phases, obs, model


def _axes_grid(fig, width, height, nrows, ncols, margins, wspace=0.0, hspace=0.0, **ratios):
    """Axes on a grid with margins and gaps in inches (fixed layout: no layout engine to run
    at every draw). ``margins``: (left, right, top, bottom) in; ``fig``: draw into it (its
    own size is used) or None for a new ``width`` x ``height`` figure. Returns (fig, axes list)."""
    if fig is None:
        fig = style.new_figure(width, height)
    w, h = fig.get_size_inches()
    left, right, top, bottom = margins
    aw = (w - left - right - (ncols - 1) * wspace) / ncols
    ah = (h - top - bottom - (nrows - 1) * hspace) / nrows
    with style.context():
        grid = fig.add_gridspec(nrows, ncols, left=left / w, right=1 - right / w, top=1 - top / h, bottom=bottom / h,
                                wspace=wspace / aw if ncols > 1 else 0.0, hspace=hspace / ah if nrows > 1 else 0.0,
                                **ratios)
        axes = [fig.add_subplot(grid[i, j]) for i in range(nrows) for j in range(ncols)]
    return fig, axes


def _inch_axes(fig, x0, y0, w, h):
    """An axes at (x0, y0) inches from the lower left, w x h inches."""
    fw, fh = fig.get_size_inches()
    with style.context():
        return fig.add_axes((x0 / fw, y0 / fh, w / fw, h / fh))


def plot_profiles(vels, phases, obs, model, *, err=None, spotless=None, max_profiles: int = 24, fig=None):
    """Stacked line-profile fits (left) and residuals (right), offset per epoch.

    Args:
        vels: (n_vel,) km/s. phases: (n_epoch,) rotation phases in cycles, not wrapped
            (each profile is labelled with its phase and rotation cycle).
        obs, model: (n_epoch, n_vel) observed and fitted profiles. err: (n_epoch, n_vel).
        spotless: (n_epoch, n_vel) model of the unspotted star (dashed).
        max_profiles: at most this many epochs, evenly spread in phase, are drawn (the
            title says how many of how many).
        fig: an empty Figure to draw into; default a new two-column figure.

    The residuals are magnified by a stated factor; the scale bar on the right gives their
    size in units of the continuum. Returns the Figure.
    """
    vels, phases, obs, model = _profile_arrays(vels, phases, obs, model)
    sel = _select_epochs(phases, max_profiles)
    depth = float(np.median(obs.max(axis=1) - obs.min(axis=1))) or 1.0
    step = 0.28 * depth
    resid = obs - model
    noise = float(np.median(err)) if err is not None else float(np.std(resid)) or 1e-3
    mag = _nice(max(1.0, step / (7.0 * noise)))
    fig, (ax, axr) = _axes_grid(fig, style.TWO_COLUMN, min(2.2 + 0.3 * sel.size, 9.0), 1, 2,
                                (0.6, 0.45, 0.25, 0.45), wspace=0.45, width_ratios=(1.25, 1.0))
    cont = float(np.median(obs[:, [0, -1]]))
    off = step * np.arange(sel.size)[:, None]
    nan = np.full((sel.size, 1), np.nan)

    def joined(y):  # (k, n_vel) rows -> one NaN-separated line
        return (np.concatenate([np.broadcast_to(vels, y.shape), nan], axis=1).ravel(),
                np.concatenate([y, nan], axis=1).ravel())

    with style.context():
        if spotless is not None:
            ax.plot(*joined(np.asarray(spotless, float)[sel] + off), color="0.55", lw=0.7, ls="--", zorder=1,
                    label="unspotted star")
        ax.plot(*joined(obs[sel] + off), ".", color="k", ms=2.2, zorder=2, label="observed")
        ax.plot(*joined(model[sel] + off), color=style.MODEL_COLOUR, lw=0.9, zorder=3, label="model")
        span = np.ptp(vels)
        for k, e in enumerate(sel):
            ax.text(vels[-1] + 0.02 * span, cont + k * step, f"{np.mod(phases[e], 1):.3f} ({int(np.floor(phases[e]))})",
                    fontsize=style.FONT_PT, va="center", ha="left")
        ax.text(vels[-1] + 0.02 * span, cont + sel.size * step, "phase (cycle)", fontsize=style.FONT_PT,
                va="center", ha="left")
        if err is not None:
            from matplotlib.collections import PolyCollection

            band = mag * np.asarray(err, float)[sel]
            polys = [np.concatenate([np.stack([vels, o - b], 1), np.stack([vels[::-1], (o + b)[::-1]], 1)])
                     for o, b in zip(off[:, 0], band, strict=True)]
            axr.add_collection(PolyCollection(polys, facecolor="0.86", linewidth=0, zorder=1, label="±1σ"))
        axr.hlines(off[:, 0], vels[0], vels[-1], color="0.6", lw=0.5, zorder=2)
        axr.plot(*joined(off + mag * resid[sel]), color="k", lw=0.7, zorder=3)
        # scale bar: a nice residual size, drawn at the same magnification
        bar = _nice(3.0 * noise)
        xb = vels[-1] + 0.04 * span
        yb = off[-1, 0] + 0.5 * step
        axr.plot([xb, xb], [yb - 0.5 * mag * bar, yb + 0.5 * mag * bar], color="k", lw=1.6, clip_on=False)
        axr.text(xb + 0.02 * span, yb, f"{bar:g}", fontsize=style.FONT_PT, va="center", ha="left", clip_on=False)
        axr.set_ylim(-step, step * sel.size)
        ax.set_ylim(cont - depth - step, cont + (sel.size + 0.6) * step)
        ax.set_xlim(vels[0], vels[-1] + 0.36 * span)
        ax.set_xlabel("velocity (km/s)")
        ax.set_ylabel("normalised intensity + offset")
        shown = f"{sel.size} of {phases.size} epochs" if sel.size < phases.size else f"{phases.size} epochs"
        ax.set_title(f"line profiles ({shown})")
        ax.legend(loc="lower left", fontsize=style.FONT_PT, handlelength=1.5, borderaxespad=0.2, ncols=3)
        axr.set_xlim(vels[0], vels[-1] + 0.2 * span)
        axr.set_xlabel("velocity (km/s)")
        axr.set_ylabel(f"residual × {mag:g} + offset (bar: {bar:g})")
        axr.set_yticks([])
        axr.set_title("observed − model" + (", ±1σ grey" if err is not None else ""))
        for a in (ax, axr):  # no velocity ticks over the label column / scale bar
            a.set_xticks([t for t in a.get_xticks() if vels[0] - 1e-9 <= t <= vels[-1] + 1e-9])
    return fig


def _cycle_rows(phases):
    """Rotation cycle of each epoch and its row position ``rank(cycle) + phase``: cycles
    without data are left out, so the y axis runs over the observed cycles only."""
    p = np.asarray(phases, float)
    cyc = np.floor(p).astype(int)
    cycles = np.unique(cyc)
    y = np.searchsorted(cycles, cyc) + (p - cyc)
    return y, cycles


FOLD_EPOCHS_PER_CYCLE = 3
"""A dynamic spectrum whose observed cycles hold fewer epochs than this (median) is drawn
folded on one rotation: a lone profile would otherwise fill its whole cycle's row."""


def _folds(phases) -> bool:
    """Whether the dynamic spectrum of epochs at ``phases`` (cycles, not wrapped) is drawn folded:
    more than two observed cycles, with a median of fewer than :data:`FOLD_EPOCHS_PER_CYCLE`
    epochs each (LO Peg's 16 profiles over 12 cycles)."""
    _, counts = np.unique(np.floor(np.asarray(phases, float)).astype(int), return_counts=True)
    return counts.size > 2 and float(np.median(counts)) < FOLD_EPOCHS_PER_CYCLE


def _phase_image(y, rows, n_bins, span: float = 1.0):
    """Image (n_bins, n_vel) of ``rows`` placed at positions ``y`` in ``[0, span)``.

    Every row covers the half-way points to its neighbours, at most 1.5 typical spacings:
    wider gaps stay empty (masked), so they are drawn in the gap colour, not as zero.
    """
    y = np.asarray(y, float)
    order = np.argsort(y, kind="stable")
    y, rows = y[order], np.asarray(rows, float)[order]
    gaps = np.diff(y)
    med = float(np.median(gaps[gaps > 0])) if np.any(gaps > 0) else 1.0 / max(y.size, 1)
    half = 1.5 * med
    mids = 0.5 * (y[1:] + y[:-1])
    lo = np.concatenate([[y[0] - half], np.maximum(mids, y[1:] - half)])
    hi = np.concatenate([np.minimum(mids, y[:-1] + half), [y[-1] + half]])
    centre = (np.arange(n_bins) + 0.5) / n_bins * span
    j = np.clip(np.searchsorted(lo, centre, side="right") - 1, 0, y.size - 1)
    ok = (centre >= lo[j]) & (centre <= hi[j])
    img = np.where(ok[:, None], rows[j], np.nan)
    return np.ma.masked_invalid(img)


def _plot_dynamic_spectrum(vels, phases, obs, model, *, spotless=None, err=None, vsini: float | None = None,
                          bins_per_cycle: int = 200, fig=None):
    """Dynamic spectra (rotation cycle + phase x velocity): spots show as tracks from blue to red.

    Args:
        vels: (n_vel,) km/s. phases: (n_epoch,) rotation phases in cycles, not wrapped:
            every epoch is drawn at its own cycle and phase (no folding hides one), the
            observed cycles one above the other, labelled with their numbers; a sparse run
            (:func:`_folds`: a median of fewer than :data:`FOLD_EPOCHS_PER_CYCLE` epochs per
            observed cycle) is folded on one rotation, as the static map that fits it is, and
            the axis says so.
        obs, model, spotless, err: (n_epoch, n_vel) as in :func:`plot_profiles`.
        vsini: km/s, marks the line edges.
        fig: an empty Figure to draw into; default a new two-column figure.

    Panels: observed - unspotted and model - unspotted (when ``spotless`` is given), in % of
    the mean intensity, and observed - model (in units of ``err`` when given), all in the
    ``difference`` colour map; times without observations are grey. Returns the Figure.
    """
    vels, phases, obs, model = _profile_arrays(vels, phases, obs, model)
    panels = []
    if spotless is not None:
        spotless = np.asarray(spotless, float)
        d_obs, d_mod = 100 * (obs - spotless), 100 * (model - spotless)
        lim = max(float(np.percentile(np.abs(d_mod), 99.5)), float(np.percentile(np.abs(d_obs), 98)), 1e-9)
        panels += [("observed − unspotted", d_obs, lim, "% of mean intensity"),
                   ("model − unspotted", d_mod, lim, "% of mean intensity")]
    if err is not None:
        res, unit = (obs - model) / np.asarray(err, float), "residual (σ)"
    else:
        res, unit = 100 * (obs - model), "% of mean intensity"
    panels.append(("observed − model", res, max(float(np.percentile(np.abs(res), 99.5)), 1e-9), unit))
    y, cycles = _cycle_rows(phases)
    folded = _folds(phases)
    if folded:  # one row: every epoch at its phase, whatever its cycle
        y, n_cyc = np.mod(np.asarray(phases, float), 1.0), 1
    else:
        n_cyc = cycles.size
    height = float(np.clip(1.6 + 1.1 * n_cyc, 3.2, 9.0)) if not folded else 5.0
    fig, axes = _axes_grid(fig, style.TWO_COLUMN, height, 1, len(panels), (0.62, 0.12, 0.25, 1.0), wspace=0.1)
    for a in axes[1:]:
        a.sharey(axes[0])
    cm = style.cmap("difference")
    dv = 0.5 * (vels[1] - vels[0])
    n_bins = int(bins_per_cycle * n_cyc)
    with style.context():
        step = 1 if n_cyc <= 6 else int(np.ceil(n_cyc / 6))
        minor = n_cyc <= 3
        ticks, labels = [], []
        for k, c in enumerate(cycles if not folded else [0]):
            if k % step == 0:
                ticks.append(k)
                labels.append(f"{c}.0" if not folded else "0.0")
            if minor:
                ticks += [k + 0.25, k + 0.5, k + 0.75]
                labels += [f"{c}.25", f"{c}.5", f"{c}.75"] if not folded else ["0.25", "0.5", "0.75"]
        if folded:
            ticks.append(1.0)
            labels.append("1.0")
        ims = []
        for k, (title, data, lim, _unit) in enumerate(panels):
            ax = axes[k]
            im = ax.imshow(_phase_image(y, data, n_bins, n_cyc), extent=(vels[0] - dv, vels[-1] + dv, n_cyc, 0.0),
                           aspect="auto", cmap=cm, vmin=-lim, vmax=lim, interpolation="nearest")
            im.set_label("difference")
            ims.append(im)
            ax.hlines(np.arange(1, n_cyc), vels[0] - dv, vels[-1] + dv, color="k", lw=0.8)
            if vsini is not None:
                for v in (-vsini, vsini):
                    ax.axvline(v, color="0.25", lw=0.6, ls=":")
            ax.set_ylim(n_cyc, 0.0)
            ax.set_title(title)
            ax.set_xlabel("velocity (km/s)")
            ax.set_yticks(ticks, labels)
            ax.set_ylabel("rotation cycle . phase" if not folded else
                          f"phase (folded: {y.size} epochs over cycles {cycles[0]} to {cycles[-1]})")
            if k:  # shares the first panel's y axis and its label
                ax.tick_params(labelleft=False)
                ax.yaxis.label.set_visible(False)
        fw = fig.get_size_inches()[0]

        def bar(im, first, last, label):  # a colour bar under panels first..last
            p0, p1 = axes[first].get_position(), axes[last].get_position()
            x0, x1 = p0.x0 * fw, p1.x1 * fw
            cax = _inch_axes(fig, x0 + 0.1 * (x1 - x0), 0.42, 0.8 * (x1 - x0), 0.09)
            cb = fig.colorbar(im, cax=cax, orientation="horizontal")
            cb.set_label(label)
            cb.ax.xaxis.set_major_locator(MaxNLocator(nbins=6, symmetric=True))

        from matplotlib.ticker import MaxNLocator

        if spotless is not None:
            bar(ims[1], 0, 1, panels[0][3])
        bar(ims[-1], len(panels) - 1, len(panels) - 1, panels[-1][3])
        fig.text(0.01, 0.01, "grey: no observation", fontsize=style.FONT_PT, ha="left", va="bottom")
    return fig


def plot_light_curve(phases, flux, model, *, err=None, fig=None):
    """Light-curve fit (top) and residuals (bottom) against rotation phase.

    Args:
        phases: (n_obs,) rotation phases in cycles, not wrapped: the model is drawn as one
            curve per rotation (``floor(phases)``). flux, model: (n_obs,) normalised flux.
        err: (n_obs,) 1-sigma errors (optional).
        fig: an empty Figure to draw into; default a new one-column figure.

    Returns the Figure.
    """
    raw = np.asarray(phases, float)
    ph = np.mod(raw, 1.0)
    flux = np.asarray(flux, float)
    model = np.asarray(model, float)
    if flux.shape != ph.shape or model.shape != ph.shape:
        raise DopplermapInputError(f"flux {flux.shape} and model {model.shape} must match phases {ph.shape}")
    cycle = np.floor(raw)
    order = np.lexsort((ph, cycle))
    xs, ys = [], []
    for cyc in np.unique(cycle):  # one model curve per rotation, so evolving spots do not zigzag
        o = order[cycle[order] == cyc]
        xs.append(ph[o])
        ys.append(model[o])
    fig, (ax, axr) = _axes_grid(fig, style.ONE_COLUMN, 3.4, 2, 1, (0.75, 0.1, 0.25, 0.42), hspace=0.06,
                                height_ratios=(3, 1.3))
    e = None if err is None else np.asarray(err, float)
    with style.context():
        ax.sharex(axr)
        ax.errorbar(ph, flux, yerr=e, fmt=".", color="k", ms=2.5, lw=0.5, elinewidth=0.4, label="observed")
        ax.plot(*_nan_join(zip(xs, ys, strict=True)), color=style.MODEL_COLOUR, lw=1.0, label="model")
        ax.set_ylabel("normalised flux")
        ax.set_xlabel("rotation phase")
        ax.tick_params(labelbottom=False)
        ax.xaxis.label.set_visible(False)
        ax.legend()
        n_cyc = np.unique(cycle).size
        ax.set_title(f"light curve ({flux.size} points, {n_cyc} rotation{'s' if n_cyc != 1 else ''})")
        axr.errorbar(ph, flux - model, yerr=e, fmt=".", color="k", ms=2.5, lw=0.5, elinewidth=0.4)
        axr.axhline(0, color=style.MODEL_COLOUR, lw=0.8)
        axr.set_xlabel("rotation phase")
        axr.set_ylabel("residual")
        axr.set_xlim(0, 1)
    return fig


def plot_convergence(history: dict, *, regulariser_label: str = "regulariser", fig=None):
    """Loss, reduced chi-square (line profiles and, for a joint fit, light curve) and
    regulariser against iteration.

    Args:
        history: ``{"loss", "chi2", "regulariser"}`` and, for a joint fit, ``"chi2_lc"``
            per-iteration arrays (:attr:`InversionResult.history`). regulariser_label: y label
            of the last panel. fig: an empty Figure to draw into; default a new one-column figure.

    Returns the Figure.
    """
    def has(k):
        return k in history and len(history[k]) and np.any(np.isfinite(np.asarray(history[k], float)))

    panels = [k for k in ("loss", "chi2", "regulariser") if has(k)]
    if has("chi2_lc") and "chi2" not in panels:
        panels.insert(min(1, len(panels)), "chi2")
    if not panels:
        raise DopplermapInputError(f"history has no per-iteration values (keys {tuple(history)})")
    fig, axes = _axes_grid(fig, style.ONE_COLUMN, 1.15 * len(panels) + 0.55, len(panels), 1, (0.62, 0.1, 0.1, 0.42),
                           hspace=0.08)
    labels = {"loss": "loss", "chi2": "reduced χ²", "regulariser": regulariser_label}
    with style.context():
        for i, (ax, k) in enumerate(zip(axes, panels, strict=True)):
            if i:
                ax.sharex(axes[0])
            curves = [("chi2", "line profiles", "k"), ("chi2_lc", "light curve", "#1f77b4")] if k == "chi2" \
                else [(k, None, "k")]
            fin_all = []
            for key, lab, colour in curves:
                if not has(key):
                    continue
                y = np.asarray(history[key], float)
                ax.plot(np.arange(1, y.size + 1), y, color=colour, lw=1.0, label=lab,
                        marker="." if y.size < 60 else None, ms=3)
                fin_all.append(y[np.isfinite(y)])
            fin = np.concatenate(fin_all)
            if k in ("loss", "chi2") and fin.size and np.all(fin > 0) and fin.max() > 30 * fin.min():
                ax.set_yscale("log")
            if k == "chi2":
                ax.axhline(1.0, color="0.4", lw=0.7, ls="--")
                if has("chi2_lc"):
                    ax.legend(loc="upper right")
            ax.set_ylabel(labels[k])
            ax.set_xlabel("iteration")
            ax.tick_params(labelbottom=(i == len(panels) - 1))
            if i != len(panels) - 1:
                ax.xaxis.label.set_visible(False)
            ax.grid(alpha=0.3, lw=0.5)
    return fig


def plot_uncertainty(grid, fill, unc, *, component: str = "cool", view: View | None = None,
                     sigma_max: float | None = None, look: MapStyle | None = None, fig=None):
    """Map of a filling factor beside its 1-sigma uncertainty map (Mollweide), one figure, in
    the maps' conventions (:func:`_plot_maps`).

    Args:
        grid: the :class:`~dopplermap.grid.SurfaceGrid`. fill: (n_cell,) filling factors of
            ``component``. unc: a :class:`dopplermap.uncertainty.Uncertainty`; cells it
            reports as unconstrained (``inf``) are drawn in the gap colour, except those of
            the never-visible band, which is hatched as on the maps.
        view: a :class:`View` (default ``View.of(grid)``): ``inclination`` (deg; hatches the
            never-visible band), ``phases`` (the observations' central meridians are ticked,
            as on the maps); cell bounds default to the grid's.
        sigma_max: the uncertainty's colour-scale top; ``look.vmax``: the filling factor's
            (to give several methods' figures one scale). ``look.title``: default the component
            and the method's readable name (:func:`dopplermap.choices.uncertainty_title`).
        fig: an empty Figure to draw into.

    Returns the Figure.
    """
    view, look = view or View(), look or MapStyle()
    if view.lat_bounds is None and view.lon_bounds is None:
        view = view.replace(lat_bounds=grid.lat_bounds, lon_bounds=grid.lon_bounds)
    inclination, fill_max, title = view.inclination, look.vmax, look.title
    phase_lons = None if view.phases is None else central_meridians(view.phases)
    if component not in _FILL:
        raise DopplermapInputError(f"component must be one of {tuple(_FILL)}, got {component!r}")
    sigma = np.asarray(unc.sigma_fssc if component == "cool" else unc.sigma_fssh, float)
    sig = np.where(np.isfinite(sigma), sigma, np.nan)
    hidden = None
    if inclination is not None and inclination < 90:  # under the hatch: blank, as on the maps
        hidden = np.asarray(unc.never_visible, bool) & (np.degrees(np.asarray(grid.lat)) < -inclination)
    limits = {}
    if sigma_max is not None:
        limits["uncertainty"] = (0.0, float(sigma_max))
    if fill_max is not None:
        limits[component] = (0.0, float(fill_max))
    if title is None:
        title = f"{component} spots, 1σ: {uncertainty_title(str(unc.method))}"
    fig = _plot_maps(grid.lat, grid.lon, {component: np.asarray(fill, float), "uncertainty": sig},
                    lat_bounds=view.lat_bounds, lon_bounds=view.lon_bounds, inclination=inclination,
                    phase_lons=phase_lons, components=(component,), title=title,
                    missing_label="unconstrained", hidden=hidden, limits=limits, fig=fig)
    return fig


def uncertainty_figures(result, uncertainties, *, components=None) -> dict:
    """The uncertainty maps of ``result``: ``{"uncertainty_<method>_<component>": callable() ->
    Figure}`` for each of ``uncertainties`` (:class:`dopplermap.uncertainty.Uncertainty`, as
    computed or read back by :func:`dopplermap.uncertainty.load_uncertainty`) and each fitted
    component (default :func:`fitted_components`), drawn lazily by :func:`plot_uncertainty` with
    one colour scale over every method (the finite sigmas' largest) and the maps' view (the
    never-visible band, the observations' central meridians). Needs the result's grid."""
    uncertainties = list(uncertainties)
    if not uncertainties:
        return {}
    if result.grid is None:
        raise DopplermapInputError("uncertainty maps need the result's grid (invert a Problem, or load the result "
                                   "folder)")
    grid, star = result.grid, result.star
    comps = fitted_components(result) if components is None else _check_components(components)
    phases = None
    if star is not None and result.obs is not None and not isinstance(result.obs, tuple):
        phases = (np.asarray(result.obs.times, float) - star.t0) / star.period
    view = View.of(grid, inclination=None if star is None else float(star.inclination), phases=phases)
    name = getattr(star, "name", None)

    def top(key):  # one colour scale over every method's figure (finite values)
        v = np.concatenate([np.asarray(getattr(u, key), float).ravel() for u in uncertainties])
        v = v[np.isfinite(v)]
        return float(v.max()) if v.size and v.max() > 0 else None

    out = {}
    for unc in uncertainties:
        for comp in comps:
            fill = result.fssc if comp == "cool" else result.fssh
            key = "sigma_fssc" if comp == "cool" else "sigma_fssh"
            title = " · ".join(x for x in (name, f"{comp} spots, 1σ: {uncertainty_title(str(unc.method))}") if x)
            out[f"uncertainty_{uncertainty_choice(str(unc.method))}_{comp}"] = (
                lambda unc=unc, comp=comp, fill=fill, key=key, title=title: plot_uncertainty(
                    grid, fill, unc, component=comp, view=view, sigma_max=top(key), look=MapStyle(title=title)))
    return out


# ---------------------------------------------------------------------------- all figures


def result_figures(result, *, n_views: int = 6, max_profiles: int = 24, components=None) -> dict:
    """Every figure the result's context allows: ``{name: callable() -> Figure}``.

    Names: ``map_mollweide``, ``map_rect``, ``orthographic``, ``polar`` (need ``grid``; the
    views need the star), ``profiles``,
    ``dynamic_spectrum`` (need ``obs`` and ``model``), ``light_curve`` (when present),
    ``convergence`` (when the history is not empty). The figures are made lazily (each
    call draws one), so a caller can draw only those it needs or draw them in parallel.
    ``components``: filling-factor components to show (default :func:`fitted_components`).
    The star's name (``star.name``), when known, titles every figure.
    """
    comps = fitted_components(result) if components is None else _check_components(components)
    grid, star = result.grid, result.star
    sets, bands = line_sets(result), light_curves(result)
    several = isinstance(result.obs, tuple)  # several line data sets: one profile figure pair per set
    inc = None if star is None else float(star.inclination)
    phases = None  # unwrapped rotation phases of the line-profile epochs (every set's)
    if sets and star is not None:
        phases = (np.concatenate([np.asarray(d["obs"].times, float) for d in sets]) - star.t0) / star.period
    phase_lons = None if phases is None else central_meridians(phases)
    star_name = getattr(star, "name", None)  # titles every figure when known

    def named(label):
        return " · ".join(x for x in (star_name, label) if x) or None

    out = {}

    def quantities(fssc, fssh):
        q = {"cool": np.asarray(fssc, float), "hot": np.asarray(fssh, float)}
        if result.intensities is not None:
            q["brightness"] = relative_brightness(fssc, fssh, result.intensities)
        return q

    windowed = getattr(result, "n_window", 1) > 1
    if grid is not None and windowed:  # one map per time window: the sequence, the butterfly view, the area
        fc, fh = result.window_maps()
        true_c = None
        if result.truth is not None and np.size(result.truth["fssc"]) == fc.size:
            true_c = np.reshape(result.truth["fssc"], fc.shape)
        spans = result.window_spans
        t_ref = None if star is None else star.t0
        per = None if star is None else star.period
        out["map_windows"] = lambda: _plot_window_maps(grid.lat, grid.lon, fc, spans, truth=true_c,
                                                      lat_bounds=grid.lat_bounds, lon_bounds=grid.lon_bounds,
                                                      t_ref=t_ref, period=per)
        out["time_longitude"] = lambda: _plot_time_longitude(grid.lat, grid.lon, grid.area, fc, spans, t_ref=t_ref,
                                                            period=per)
        out["spot_area"] = lambda: plot_spot_area(spans, grid.area, fc, truth=true_c, t_ref=t_ref, period=per)
        if "hot" in comps:
            out["map_windows_hot"] = lambda: _plot_window_maps(grid.lat, grid.lon, fh, spans, quantity="hot",
                                                              lat_bounds=grid.lat_bounds,
                                                              lon_bounds=grid.lon_bounds, t_ref=t_ref, period=per)
    elif grid is not None:
        rec = quantities(result.fssc, result.fssh)
        tru = quantities(result.truth["fssc"], result.truth["fssh"]) if result.truth is not None else None
        for proj in MAP_PROJECTIONS:
            out[f"map_{proj}"] = lambda proj=proj: _plot_maps(
                grid.lat, grid.lon, rec, truth=tru, lat_bounds=grid.lat_bounds, lon_bounds=grid.lon_bounds,
                inclination=inc, phase_lons=phase_lons, projection=proj, components=comps, title=star_name)
        if inc is not None:
            key = "brightness" if "brightness" in rec else "cool"
            out["orthographic"] = _labelled(lambda: _plot_orthographic(
                grid.lat, grid.lon, rec[key], truth=None if tru is None else tru[key], inclination=inc,
                phases=np.arange(n_views) / n_views, lat_bounds=grid.lat_bounds, lon_bounds=grid.lon_bounds,
                quantity=key), star_name)
            out["polar"] = lambda: plot_polar(
                grid.lat, grid.lon, rec[key], quantity=key, view=View.of(grid, inclination=inc, phases=phases),
                look=MapStyle(title=star_name))
    else:
        log.info("no grid in the result: map figures skipped")
    for d in sets:
        if d["model"] is None:
            continue
        obs = d["obs"]
        ph = (np.asarray(obs.times, float) - star.t0) / star.period if star is not None \
            else np.arange(obs.n_epoch) / obs.n_epoch
        flux, err = np.asarray(obs.flux), np.asarray(obs.err)
        suffix = f"_{_file_name(d['name'])}" if several else ""
        label = named(_set_label(d["name"], d["chi2"]) if several else None)
        out[f"profiles{suffix}"] = _labelled(lambda obs=obs, ph=ph, flux=flux, err=err, d=d: plot_profiles(
            obs.vels, ph, flux, d["model"], err=err, spotless=d["spotless"], max_profiles=max_profiles), label)
        out[f"dynamic_spectrum{suffix}"] = _labelled(lambda obs=obs, ph=ph, flux=flux, err=err, d=d: _plot_dynamic_spectrum(
            obs.vels, ph, flux, d["model"], spotless=d["spotless"], err=err,
            vsini=None if star is None else star.vsini_kms), label)
    if star is not None:
        for lc in bands:
            lph = (np.asarray(lc["times"], float) - star.t0) / star.period  # unwrapped: one curve per rotation
            several_lc = isinstance(result.light_curve, tuple)
            suffix = f"_{_file_name(lc['name'])}" if several_lc else ""
            out[f"light_curve{suffix}"] = _labelled(lambda lc=lc, lph=lph: plot_light_curve(
                lph, lc["flux"], lc["model"], err=lc.get("err")), named(_set_label(lc["name"], lc["chi2"]) if several_lc
                                                                         else None))
    if result.history and len(result.history.get("loss", ())):
        label = REGULARISER_LABELS.get(result.regulariser, "regulariser")
        out["convergence"] = _labelled(lambda: plot_convergence(result.history, regulariser_label=label), star_name)
    return out


# ------------------------------------------------------------------ maps that change with time


def _window_labels(spans, t_ref, period):
    spans = np.asarray(spans, float)
    if period:
        c = (spans - t_ref) / period
        return [f"cycles {a:.1f}–{b:.1f}" for a, b in c]
    return [f"t = {a - t_ref:.1f}–{b - t_ref:.1f} d" for a, b in spans]


def _check_windows(maps, spans, n_cell):
    maps = np.asarray(maps, float)
    spans = np.asarray(spans, float)
    if maps.ndim != 2 or maps.shape[1] != n_cell or spans.shape != (maps.shape[0], 2):
        raise DopplermapInputError(f"window maps must be (K, n_cell) = (K, {n_cell}) with spans (K, 2), got "
                                   f"{maps.shape} and {spans.shape}")
    return maps, spans


def _plot_window_maps(lat, lon, maps, spans, *, quantity: str = "cool", truth=None, lat_bounds=None,
                     lon_bounds=None, t_ref: float | None = None, period: float | None = None, ncol: int = 4,
                     resolution: int = 90, fig=None):
    """The maps of the time windows in sequence (rectangular projection), on one colour scale.

    Args:
        lat, lon: (n_cell,) cell centres, rad. maps: (K, n_cell) one map per window (a
            filling factor or brightness, ``quantity`` naming its colour map and label).
        spans: (K, 2) start and end of each window, days. truth: (K, n_cell) true maps,
            drawn on the row below each recovered row (same colour scale).
        t_ref, period: windows labelled in rotation cycles since ``t_ref`` when ``period``
            is given, else in days since ``t_ref`` (default the first window's start).
        ncol: panels per row.

    Returns the Figure.
    """
    maps, spans = _check_windows(maps, spans, np.size(lat))
    if truth is not None:
        truth, _ = _check_windows(truth, spans, np.size(lat))
    k = maps.shape[0]
    ncol = max(1, min(int(ncol), k))
    nrow_w = -(-k // ncol)
    rows = nrow_w * (2 if truth is not None else 1)
    raster = grid_raster(lat, lon, lat_bounds, lon_bounds, "rect", resolution)
    norm = _norm(*colour_limits(quantity, [maps] + ([truth] if truth is not None else [])))
    cm = style.cmap(quantity)
    t_ref = float(spans[0, 0]) if t_ref is None else float(t_ref)
    labels = _window_labels(spans, t_ref, period)
    pw = (style.TWO_COLUMN - 1.2) / ncol
    ph = pw / 2 + 0.3
    if fig is None:
        fig = style.new_figure(style.TWO_COLUMN, rows * ph + 0.5)
    w, h = fig.get_size_inches()
    with style.context():
        for i in range(k):
            for j, (data, tag) in enumerate([(maps, "")] + ([(truth, "true, ")] if truth is not None else [])):
                r = (i // ncol) * (2 if truth is not None else 1) + j
                c = i % ncol
                ax = fig.add_axes(((0.45 + c * pw) / w, 1 - (0.3 + (r + 1) * ph) / h, (pw - 0.1) / w, (ph - 0.3) / h))
                ax.imshow(raster.image(data[i]), extent=raster.extent, origin="upper", cmap=cm, norm=norm,
                          interpolation="nearest", aspect="auto")
                ax.set_title(tag + labels[i], fontsize=style.FONT_PT)
                ax.set_xticks([0, 180, 360])
                ax.set_yticks([-90, 0, 90])
                ax.tick_params(labelbottom=r == rows - 1 or i + ncol >= k, labelleft=c == 0, labelsize=6)
        cax = fig.add_axes(((0.45 + ncol * pw) / w, 0.15, 0.12 / w, 0.7))
        from matplotlib.cm import ScalarMappable

        fig.colorbar(ScalarMappable(norm=norm, cmap=cm), cax=cax, label=style.LABELS[quantity])
    return fig


def _plot_time_longitude(lat, lon, area, maps, spans, *, bands=(-90.0, -30.0, 0.0, 30.0, 60.0, 90.0),
                        n_lon: int = 36, quantity: str = "cool", t_ref: float | None = None,
                        period: float | None = None, fig=None):
    """Spot coverage against longitude and time, one panel per latitude band (the
    "butterfly" view of evolving and shearing spots).

    Each pixel is the area-weighted mean of ``maps`` over the cells of the band whose centre
    falls in the longitude bin (a bin holding no centre, near a pole: the nearest cell's
    value), for each window (rows: windows, at their time spans).

    Args:
        lat, lon: (n_cell,) cell centres, rad. area: (n_cell,) cell areas.
        maps: (K, n_cell) one map per window. spans: (K, 2) days.
        bands: latitude band edges, deg (increasing); panels from the north down.
        n_lon: longitude bins.

    Returns the Figure.
    """
    maps, spans = _check_windows(maps, spans, np.size(lat))
    bands = np.asarray(bands, float)
    if bands.ndim != 1 or bands.size < 2 or np.any(np.diff(bands) <= 0):
        raise DopplermapInputError(f"bands must be increasing latitude edges (deg), got {list(bands)}")
    latd, lond = np.degrees(np.asarray(lat, float)), np.mod(np.degrees(np.asarray(lon, float)), 360.0)
    area = np.asarray(area, float)
    lbin = np.minimum((lond / (360.0 / n_lon)).astype(int), n_lon - 1)
    t_ref = float(spans[0, 0]) if t_ref is None else float(t_ref)
    scale = float(period) if period else 1.0
    y_edges = (np.concatenate([spans[:, 0], spans[-1:, 1]]) - t_ref) / scale
    images = []
    for b in range(bands.size - 2, -1, -1):
        sel = (latd >= bands[b]) & (latd < bands[b + 1] if b < bands.size - 2 else latd <= bands[b + 1])
        wsum = np.bincount(lbin[sel], weights=area[sel], minlength=n_lon)
        img = np.stack([np.bincount(lbin[sel], weights=area[sel] * m[sel], minlength=n_lon) for m in maps])
        with np.errstate(invalid="ignore", divide="ignore"):
            img = np.where(wsum > 0, img / wsum, np.nan)
        empty = np.nonzero(wsum == 0)[0]
        if empty.size and sel.any():  # fewer cells than bins (near a pole): the nearest cell's value
            centre = (empty + 0.5) * (360.0 / n_lon)
            d = np.abs((lond[sel][None, :] - centre[:, None] + 180.0) % 360.0 - 180.0)
            img[:, empty] = maps[:, sel][:, np.argmin(d, axis=1)]
        images.append((bands[b], bands[b + 1], img))
    norm = _norm(*colour_limits(quantity, [im for _, _, im in images]))
    cm = style.cmap(quantity).with_extremes(bad=style.GAP_COLOUR)
    n = len(images)
    if fig is None:
        fig = style.new_figure(style.ONE_COLUMN + 0.6, 0.9 + 1.1 * n)
    w, h = fig.get_size_inches()
    x_edges = np.linspace(0.0, 360.0, n_lon + 1)
    with style.context():
        axes = []
        for i, (lo, hi, img) in enumerate(images):
            ax = fig.add_axes((0.6 / w, 1 - (0.25 + 1.1 * (i + 1)) / h, (w - 1.5) / w, 0.95 / h))
            ax.pcolormesh(x_edges, y_edges, np.ma.masked_invalid(img), cmap=cm, norm=norm)
            ax.set_ylabel("cycle" if period else "days", fontsize=style.FONT_PT)
            ax.text(0.01, 0.97, f"{lo:+.0f}° to {hi:+.0f}°", transform=ax.transAxes, ha="left", va="top",
                    fontsize=6, bbox={"fc": "white", "ec": "none", "alpha": 0.7, "pad": 1})
            ax.set_xlim(0, 360)
            ax.set_xticks([0, 90, 180, 270, 360])
            ax.tick_params(labelbottom=i == n - 1)
            axes.append(ax)
        axes[-1].set_xlabel("longitude (deg)")
        cax = fig.add_axes(((w - 0.8) / w, 0.2, 0.1 / w, 0.6))
        from matplotlib.cm import ScalarMappable

        fig.colorbar(ScalarMappable(norm=norm, cmap=cm), cax=cax, label=style.LABELS[quantity])
    return fig


def plot_spot_area(spans, area, maps, *, truth=None, t_ref: float | None = None, period: float | None = None,
                   label: str = "cool-spot coverage", fig=None):
    """Spot coverage of the whole surface (area-weighted mean filling factor) in each window
    against time, with the true coverage when ``truth`` ((K, n_cell)) is given.

    Returns the Figure.
    """
    maps, spans = _check_windows(maps, spans, np.size(area))
    area = np.asarray(area, float) / np.sum(area)
    t_ref = float(spans[0, 0]) if t_ref is None else float(t_ref)
    scale = float(period) if period else 1.0
    t = (spans.mean(axis=1) - t_ref) / scale
    half = 0.5 * (spans[:, 1] - spans[:, 0]) / scale
    if fig is None:
        fig = style.new_figure(style.ONE_COLUMN, 2.4)
    with style.context():
        ax = fig.add_axes((0.2, 0.18, 0.75, 0.72))
        ax.errorbar(t, maps @ area, xerr=half, fmt="o", color="k", ms=3, lw=0.6, label="recovered")
        if truth is not None:
            tr, _ = _check_windows(truth, spans, np.size(area))
            ax.plot(t, tr @ area, "s--", color=style.MODEL_COLOUR, ms=3, lw=0.8, label="true")
            ax.legend()
        ax.set_xlabel("rotation cycle" if period else "days")
        ax.set_ylabel(label)
    return fig


def _file_name(name: str) -> str:
    """A data set's name as part of a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name)).strip("_") or "set"


def _set_label(name, chi2) -> str:
    return f"{name}" + ("" if chi2 is None else f": reduced χ² {chi2:.3f}")


def _labelled(make, label, strip_in: float = 0.24):
    """``make`` with ``label`` (a data set's name and chi2) on a strip ``strip_in`` inches high
    added above the figure (the axes, laid out in inches, keep their size and place)."""
    if label is None:
        return make

    def draw():
        fig = make()
        w, h = fig.get_size_inches()
        k = h / (h + strip_in)
        fig.set_size_inches(w, h + strip_in)
        for ax in fig.axes:
            p = ax.get_position()
            ax.set_position([p.x0, p.y0 * k, p.width, p.height * k])
        for t in fig.texts:
            x, y = t.get_position()
            t.set_position((x, y * k))
        fig.text(0.01, 1.0 - 0.04 / (h + strip_in), label, ha="left", va="top", fontsize=style.TITLE_PT)
        return fig

    return draw


# relative drawing costs (the rest 1), to balance the figures among processes
DRAW_COST = {"dynamic_spectrum": 3.0, "profiles": 1.5}
"""Relative drawing time of the figures that take longer than a map (the others count 1): how
:func:`dopplermap.style.save_figures` balances them over its processes."""


def plot_result(result, out_dir, *, fmt: str = "png", dpi: float | None = None, max_profiles: int = 24,
                components=None, workers: int | None = None, processes: int | None = None) -> list[Path]:
    """Save every figure of :func:`result_figures` into ``out_dir`` as ``NAME.{fmt}``; returns the paths.
    (Other figure choices: ``style.save_figures(result_figures(result, ...), out_dir, costs=DRAW_COST)``,
    with :func:`uncertainty_figures` for instance.)

    The figures are drawn in parallel (:func:`dopplermap.style.save_figures`): in forked
    processes where that is safe (the figure child of a CLI run), else in ``workers``
    threads (each its own Figure and Agg canvas, so no state is shared).
    """
    figs = result_figures(result, max_profiles=max_profiles, components=components)
    return style.save_figures(figs, out_dir, fmt=fmt, dpi=dpi, costs=DRAW_COST, processes=processes, workers=workers)



# ---------------------------------------------------------------------------- polar view


_POLAR_GRAT = dict(color="0.2", lw=0.4, alpha=0.6)  # darker than the maps': seen on mid-grey brightness


def _polar_xy(lat_deg, lon_deg):
    """Flattened polar projection: radius = colatitude (deg), longitude 0 at the bottom and
    increasing counter-clockwise (the sense of rotation seen from above the north pole)."""
    r = 90.0 - np.asarray(lat_deg, float)
    lam = np.radians(lon_deg)
    return r * np.sin(lam), -r * np.cos(lam)


def plot_polar(lat, lon, values, *, quantity: str = "brightness", view: View | None = None,
               lat_min: float | None = None, look: MapStyle | None = None, ax=None):
    """Flattened polar view: the north pole at the centre, colatitude as radius.

    The view of Doppler-imaging papers: latitude rings every 30 deg (labelled), longitude 0
    at the bottom (facing the observer at phase 0) increasing counter-clockwise, the sense in
    which the star turns seen from above its north pole (an arrow shows it); the central
    meridian of each observation is ticked outside the outer ring, at longitude
    ``-360 phase`` (phases advance clockwise).

    Args:
        lat, lon: (n_cell,) rad. values: (n_cell,) values of ``quantity`` (colour map and
            label from :mod:`dopplermap.style`); NaN or inf cells are drawn in the gap colour.
        view: a :class:`View`: ``inclination`` (deg; the outer ring defaults to latitude
            ``-inclination``, the lowest latitude ever seen), ``phases`` (rotation phases,
            cycles, of the observations), the cells' bounds.
        lat_min: outer ring latitude, deg (default ``-inclination``, else -30).
        look: a :class:`MapStyle`: colour limits, pixels across (default 240), colour bar,
            title above the view. ax: an Axes to draw into (default a new one-column figure).

    Returns the Figure.
    """
    view, look = view or View(), look or MapStyle()
    inclination, phases, lat_bounds, lon_bounds = view.inclination, view.phases, view.lat_bounds, view.lon_bounds
    vmin, vmax, title, colorbar = look.vmin, look.vmax, look.title, look.colorbar
    resolution = 240 if look.resolution is None else look.resolution
    if np.shape(values) != np.shape(lat):
        raise DopplermapInputError(f"values has shape {np.shape(values)}, expected (n_cell,) = {np.shape(lat)}")
    if lat_min is None:
        lat_min = -float(inclination) if inclination is not None else -30.0
    if not -90.0 <= lat_min < 60.0:
        raise DopplermapInputError(f"lat_min must be in [-90, 60) deg, got {lat_min!r}")
    if ax is None:
        fig = style.new_figure(style.ONE_COLUMN, 3.05 if title else 2.85)
        with style.context():
            ax = fig.add_axes([0.03, 0.06, 0.76, 0.86 if title else 0.92])
    fig = ax.figure
    rmax = 90.0 - lat_min
    s = (np.arange(resolution) + 0.5) / resolution * 2 - 1
    X, Y = np.meshgrid(s * rmax, s[::-1] * rmax)
    R = np.hypot(X, Y)
    inside = R <= rmax
    plat = np.radians(90.0 - R[inside])
    plon = np.mod(np.arctan2(X[inside], -Y[inside]), 2 * np.pi)
    vals = np.asarray(values, float)
    img = np.full(X.shape, np.nan)
    img[inside] = vals[cell_lookup(lat, lon, lat_bounds, lon_bounds)(plat, plon)]
    lo, hi = colour_limits(quantity, [vals])
    norm = _norm(lo if vmin is None else vmin, hi if vmax is None else vmax)
    from matplotlib.patches import Circle, FancyArrowPatch

    with style.context():
        cm = style.cmap(quantity).with_extremes(bad=(0.0, 0.0, 0.0, 0.0))
        ext = (-rmax, rmax, -rmax, rmax)
        im = ax.imshow(np.ma.masked_invalid(img), extent=ext, origin="upper", cmap=cm, norm=norm,
                       interpolation="nearest", zorder=1)
        im.set_label(quantity)
        gap = inside & ~np.isfinite(img)
        if gap.any():
            g = np.zeros(gap.shape + (4,))
            g[gap] = style.GAP_COLOUR
            ax.imshow(g, extent=ext, origin="upper", interpolation="nearest", zorder=1)
        t = np.linspace(0, 2 * np.pi, 241)
        for la in range(60, int(np.floor(lat_min)), -30):
            if la <= lat_min:
                continue
            r = 90.0 - la
            ax.plot(r * np.cos(t), r * np.sin(t), zorder=3, ls="-" if la else "--", **_POLAR_GRAT)
            lx, ly = _polar_xy(la, 135.0)
            ax.text(lx, ly, f"{la}°", fontsize=style.FONT_PT, color="0.1", ha="center", va="center", zorder=5,
                    path_effects=_halo()).set_gid("lat")
        for lo_ in range(0, 360, 30):
            xs, ys = _polar_xy(np.array([90.0, lat_min]), lo_)
            ax.plot(xs, ys, zorder=3, **_POLAR_GRAT)
        ax.add_patch(Circle((0, 0), rmax, fill=False, lw=0.7, color="0.15", zorder=4))
        for lo_ in range(0, 360, 90):
            lx, ly = _polar_xy(lat_min - 0.16 * rmax, lo_)
            ax.text(lx, ly, f"{lo_}°", ha="center", va="center", fontsize=style.FONT_PT).set_gid("lon")
        if phases is not None and len(np.atleast_1d(phases)):
            cm_lon = central_meridians(np.atleast_1d(np.asarray(phases, float)))
            x0, y0 = _polar_xy(lat_min - 0.01 * rmax, cm_lon)
            x1, y1 = _polar_xy(lat_min - 0.07 * rmax, cm_lon)
            ax.plot(*_nan_join([([a, b], [c, d]) for a, b, c, d in zip(x0, x1, y0, y1, strict=True)]),
                    color="k", lw=0.7, zorder=4, gid="phases", label="central meridian of each observation")
        # rotation sense: counter-clockwise around the pole, seen from above it
        a0, a1 = np.radians(190.0), np.radians(280.0)
        rr = 0.2 * rmax
        arrow = FancyArrowPatch((rr * np.cos(a0), rr * np.sin(a0)), (rr * np.cos(a1), rr * np.sin(a1)),
                                connectionstyle="arc3,rad=0.4", arrowstyle="-|>", mutation_scale=9, lw=1.0,
                                color="k", zorder=6, gid="rotation", path_effects=_halo())
        ax.add_patch(arrow)
        ax.plot([0], [0], marker="+", color="k", ms=5, mew=0.8, zorder=6, gid="pole", path_effects=_halo())
        ax.set_xlim(-1.3 * rmax, 1.3 * rmax)
        ax.set_ylim(-1.22 * rmax, 1.22 * rmax)
        ax.set_aspect("equal")
        ax.axis("off")
        if title:
            ax.set_title(title, fontsize=style.TITLE_PT)
        if colorbar:
            fig.colorbar(im, ax=ax, label=style.LABELS[quantity], shrink=0.7, pad=0.02)
        handles = [h for h in ax.get_lines() if h.get_gid() == "phases"]
        if handles:
            ax.legend(handles=handles, labels=["observations (central meridian)"], loc="upper center",
                      bbox_to_anchor=(0.5, 0.02), frameon=False, fontsize=style.FONT_PT, handlelength=1.0)
    return fig


# ---------------------------------------------------------------------------- searches


def _log_ticks(ax, which: str) -> None:
    """Readable log-axis ticks: plain numbers (``0.5``, ``2``, ``1e+04``); over less than two
    decades 1-2-5 steps and within one decade evenly spaced round numbers, so a narrow range
    still carries several labelled ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    axis = ax.xaxis if which == "x" else ax.yaxis
    lo, hi = ax.get_xlim() if which == "x" else ax.get_ylim()
    ratio = hi / lo if lo > 0 else np.inf
    if ratio < 10.0:  # less than a decade: evenly spaced round numbers
        axis.set_major_locator(MaxNLocator(nbins=5))
    else:
        axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0) if ratio < 100.0 else (1.0,)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
    axis.set_minor_formatter(NullFormatter())


def plot_lcurve(sweep, corner: float | None = None, target: float | None = None, *,
                target_lambda: float | None = None, fig=None):
    """The L-curve (reduced chi2 against the regulariser's excess over its floor) and chi2
    against lambda, with the L-curve's corner and the lambda of the target chi2 marked;
    returns the Figure.

    ``sweep``: a :class:`dopplermap.search.LambdaSweep` (``lmbd``, ``chi2``, ``regulariser``,
    ``floor``). ``corner``: the corner's lambda. ``target``: the target reduced chi2;
    ``target_lambda`` its lambda (default: read off the sweep by log interpolation, marked
    "≈"). ``fig``: an empty Figure (default a new two-column one). Save it with
    :func:`dopplermap.style.save_figure`. A sweep of ``lmbd_time``
    (:func:`dopplermap.search.sweep_lmbd_time`) is drawn against the temporal coupling and
    labelled λ_time.
    """
    time_sweep = getattr(sweep, "parameter", "lmbd") == "lmbd_time"
    sym = "λ_time" if time_sweep else "λ"
    lm, chi2 = np.asarray(sweep.lmbd, float), np.asarray(sweep.chi2, float)
    x = np.asarray(sweep.regulariser, float) - float(sweep.floor)
    approx = ""
    if target is not None and target_lambda is None:
        order = np.argsort(chi2)
        if chi2.min() <= target <= chi2.max() and np.all(lm > 0):
            target_lambda = float(np.exp(np.interp(target, chi2[order], np.log(lm[order]))))
            approx = "≈ "
    if fig is None:
        fig = style.new_figure(style.TWO_COLUMN, 2.8)
    with style.context():
        a1, a2 = fig.subplots(1, 2, gridspec_kw=dict(left=0.09, right=0.98, top=0.9, bottom=0.17, wspace=0.3))
        pos = x > 0
        a1.loglog(x[pos], chi2[pos], "o-", ms=3, color="k", lw=0.8, label=f"sweep (one point per {sym})")
        a2.loglog(lm, chi2, "o-", ms=3, color="k", lw=0.8, label="sweep")
        def on_curve(lam):  # the L-curve's point at lambda, interpolated in log-log
            if not (np.all(pos) and lm.size > 1 and np.all(np.diff(lm) > 0)):
                return None
            t = np.log(lam)
            return np.exp(np.interp(t, np.log(lm), np.log(x))), np.exp(np.interp(t, np.log(lm), np.log(chi2)))

        if corner is not None:
            pt = on_curve(corner)
            if pt is not None:
                a1.plot(*pt, "*", color=style.MODEL_COLOUR, ms=10, zorder=5, gid="corner",
                        label=f"corner, {sym} = {corner:.3g}")
            a2.axvline(corner, color=style.MODEL_COLOUR, ls="--", lw=0.8, gid="corner", label=f"corner {sym} = {corner:.3g}")
        if target is not None:
            a1.axhline(target, color="0.4", ls=":", lw=0.8)
            a2.axhline(target, color="0.4", ls=":", lw=0.8, label=f"target χ² = {target:g}")
        if target_lambda is not None:
            pt = on_curve(target_lambda)
            if pt is not None:
                a1.plot(*pt, "D", color="C0", ms=5, zorder=5, gid="target",
                        label=f"target χ², {sym} {approx}{target_lambda:.3g}")
            a2.axvline(target_lambda, color="C0", ls="-.", lw=0.8, gid="target",
                       label=f"{sym} for target χ² {approx}{target_lambda:.3g}")
        for a in (a1, a2):
            a.legend(loc="best")
            a.grid(alpha=0.3, lw=0.5, which="major")
        a1.set_xlabel("temporal coupling" if time_sweep else "regulariser − floor")
        a1.set_ylabel("reduced χ²")
        a1.set_title("L-curve")
        a2.set_xlabel("λ_time (temporal weight)" if time_sweep else style.PARAMETER_LABELS["lmbd"])
        a2.set_ylabel("reduced χ²")
        a2.set_title(f"χ² against {sym}")
        for a in (a1, a2):
            _log_ticks(a, "x")
            _log_ticks(a, "y")
    return fig


def _parameter_label(name: str) -> str:
    return style.PARAMETER_LABELS.get(name, name)


def _parameter_unit(name: str) -> str:
    label = style.PARAMETER_LABELS.get(name, "")
    return label[label.rfind("(") + 1:-1] if label.endswith(")") else ""


def _calibrated(calibrated, name):
    """(estimate, lo68, hi68) of a calibrated axis: a Calibration or its summary dict, or None."""
    if not calibrated or name not in calibrated:
        return None
    c = calibrated[name]
    get = c.get if isinstance(c, dict) else lambda k: getattr(c, k)
    return float(get("estimate")), float(get("lo68")), float(get("hi68"))


def _surface(rows, p, q, column):
    """(xs, ys, z): the least ``column`` at each (p, q) point (profiled over the other
    parameters), NaN where no point was solved."""
    xs, ys = np.unique([r[p] for r in rows]), np.unique([r[q] for r in rows])
    z = np.full((ys.size, xs.size), np.nan)
    for r in rows:
        i, j = np.searchsorted(ys, r[q]), np.searchsorted(xs, r[p])
        z[i, j] = r[column] if np.isnan(z[i, j]) else min(z[i, j], r[column])
    return xs, ys, z


def _edges(v):
    """Cell edges around sorted grid values (for pcolormesh)."""
    v = np.asarray(v, float)
    if v.size == 1:
        return np.array([v[0] - 0.5, v[0] + 0.5]) if v[0] == 0 else v[0] * np.array([0.95, 1.05])
    mid = (v[1:] + v[:-1]) / 2
    return np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])


def _delta_map(ax, fig, rows, p, q, column, best, label):
    from matplotlib.colors import Normalize

    xs, ys, z = _surface(rows, p, q, column)
    z = z - np.nanmin(z)
    top = max(float(np.nanmax(z)), 1e-9)
    mesh = ax.pcolormesh(_edges(xs), _edges(ys), np.ma.masked_invalid(z), cmap=style.cmap("chi2"),
                         norm=Normalize(0.0, top), shading="flat")
    mesh.set_label("chi2")  # the quantity, as the maps label their images
    if xs.size > 1 and ys.size > 1:
        cs = ax.contour(xs, ys, z, levels=[2.30, 6.18], colors="w", linewidths=0.8)
        ax.clabel(cs, fmt={2.30: "68 %", 6.18: "95 %"}, fontsize=style.FONT_PT)
    gx, gy = np.meshgrid(xs, ys)
    solved = np.isfinite(z)
    ax.plot(gx[solved], gy[solved], ".", color="k", ms=2.5, gid="grid_points", label="grid points")
    if (~solved).any():
        ax.plot(gx[~solved], gy[~solved], "x", color="0.4", ms=3, gid="refused", label="refused")
    ax.plot([best[p]], [best[q]], "*", color=style.MODEL_COLOUR, mec="w", mew=0.4, ms=10, gid="best",
            label="best point")
    fig.colorbar(mesh, ax=ax, label=label, pad=0.02)
    ax.set_xlabel(_parameter_label(p))
    ax.set_ylabel(_parameter_label(q))


def plot_grid(rows: list[dict], names, *, column: str = "chi2_total", delta: float = 1.0, calibrated=None,
              fig=None):
    """A grid search: the profiled Delta chi2 of each parameter and a Delta chi2 map of each
    pair; returns the Figure.

    Each profile shows every solved point (grey), the profile (black), the best point (red
    star), the Delta chi2 <= ``delta`` range (shaded) and, given ``calibrated`` (``{name:
    Calibration or its summary dict}``, :mod:`dopplermap.calibrate`), the calibrated 68 %
    interval and estimate (blue). Each map shows the grid points, the best point and the 1-
    and 2-sigma contours of two parameters (Delta chi2 = 2.30, 6.18) on the ``chi2`` colour
    map, with a labelled colour bar. Axes carry the parameters' units
    (:data:`dopplermap.style.PARAMETER_LABELS`). ``rows``: the grid-search table
    (:func:`dopplermap.search.grid_search`). ``fig``: an empty Figure (default a new one).
    """
    import itertools

    names = list(names)
    every = rows
    rows = computed_rows(rows)
    if not rows:
        delta_chi2_interval(every, names[0], column=column)  # raises the table's own error
    best = min(rows, key=lambda r: r[column])
    pairs = list(itertools.combinations(names, 2))
    n = len(names) + len(pairs)
    if fig is None:
        fig = style.new_figure(min(style.TWO_COLUMN, 2.5 * n + 0.6), 2.9)
    with style.context():
        w = fig.get_size_inches()[0]
        axes = fig.subplots(1, n, squeeze=False, gridspec_kw=dict(left=0.55 / w, right=1 - (0.45 if pairs else 0.1) / w,
                                                                  top=0.76, bottom=0.19, wspace=0.6))[0]
        for ax, name in zip(axes, names, strict=False):
            iv = delta_chi2_interval(every, name, delta=delta, column=column)
            base = iv["profile"].min()
            ax.plot([r[name] for r in rows], [r[column] - base for r in rows], "o", ms=2.5, color="0.6",
                    gid="grid_points", label="grid points", zorder=2)
            ax.plot(iv["values"], iv["profile"] - base, "-", color="k", lw=0.9, label="profile", zorder=3)
            ax.axhline(delta, color="0.5", ls=":", lw=0.8)
            ax.axvspan(iv["lo"], iv["hi"], color="0.88", label=f"Δχ² ≤ {delta:g}", zorder=0)
            ax.plot([iv["best"]], [0.0], "*", color=style.MODEL_COLOUR, ms=10, gid="best", label="best point", zorder=5)
            unit = _parameter_unit(name)
            title = (f"Δχ² ≤ {delta:g}: {iv['lo']:.4g}–{iv['hi']:.4g} {unit}" if iv["hi"] > iv["lo"]
                     else f"Δχ² ≤ {delta:g}: {iv['best']:.4g} {unit} only")
            cal = _calibrated(calibrated, name)
            if cal is not None:
                est, lo68, hi68 = cal
                ax.axvspan(lo68, hi68, facecolor="none", edgecolor="C0", hatch="///", lw=0.0, gid="calibrated",
                           label="calibrated 68 %", zorder=1)
                ax.axvline(est, color="C0", lw=1.0, gid="calibrated_estimate", label="calibrated estimate")
                title = f"calibrated {lo68:.4g}–{hi68:.4g} {unit}"
            ax.set_title(title.strip(), fontsize=style.FONT_PT)
            ax.set_xlabel(_parameter_label(name))
            ax.set_ylabel("Δχ² (profiled)")
            ax.set_ylim(bottom=-0.05 * max(1.0, float(np.max(iv["profile"] - base))))
        for ax, (p, q) in zip(axes[len(names):], pairs, strict=False):
            _delta_map(ax, fig, rows, p, q, column, best, "Δχ² (profiled)")
        legend = {}
        for ax in axes[:len(names)]:
            for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault("calibrated estimate" if label.startswith("calibrated ") and label != "calibrated 68 %"
                                  else label, h)
        ncols = min(len(legend), 4 if w > 5.0 else 2)
        fig.legend(list(legend.values()), list(legend), loc="upper center", bbox_to_anchor=(0.5, 1.0),
                   ncols=ncols, frameon=False, fontsize=style.FONT_PT, handlelength=1.2)
        rows_in = 0.19 * -(-len(legend) // ncols) + 0.3  # legend rows and the panel titles, inches
        fig.subplots_adjust(top=1 - rows_in / fig.get_size_inches()[1])
    return fig


def plot_chi2_landscape(rows: list[dict], names, *, column: str = "chi2", fig=None):
    """The chi2 landscape of a one- or two-parameter grid search: the reduced chi2 at every
    grid point against the parameter (one), or as a map over the two with the 1- and
    2-sigma contours of the un-reduced Delta chi2 (two); the best point marked. Returns the
    Figure. ``column``: the reduced chi-square column; the contours read ``chi2_total``.
    """
    names = list(names)
    if len(names) not in (1, 2):
        raise DopplermapInputError(f"a chi2 landscape needs one or two grid parameters, got {len(names)} "
                                   f"({', '.join(names)}); plot_grid profiles more")
    solved = computed_rows(rows)
    if not solved:
        delta_chi2_interval(rows, names[0])  # raises the table's own error
    if column not in solved[0]:
        raise DopplermapInputError(f"column {column!r} is not in the grid-search table ({sorted(solved[0])})")
    best = min(solved, key=lambda r: r.get("chi2_total", r[column]))
    if fig is None:
        fig = style.new_figure(style.ONE_COLUMN, 2.8)
    with style.context():
        ax = fig.add_axes([0.17, 0.16, 0.55 if len(names) == 2 else 0.78, 0.74])
        if len(names) == 1:
            (p,) = names
            v = np.array([r[p] for r in solved])
            c = np.array([r[column] for r in solved])
            o = np.argsort(v, kind="stable")
            ax.plot(v[o], c[o], "o-", color="k", ms=3, lw=0.8, gid="grid_points", label="grid points")
            ax.plot([best[p]], [best[column]], "*", color=style.MODEL_COLOUR, ms=10, gid="best", label="best point")
            ax.set_xlabel(_parameter_label(p))
            ax.set_ylabel("reduced χ²")
            ax.legend(loc="best")
            ax.grid(alpha=0.3, lw=0.5)
        else:
            from matplotlib.colors import Normalize

            p, q = names
            xs, ys, z = _surface(solved, p, q, column)
            mesh = ax.pcolormesh(_edges(xs), _edges(ys), np.ma.masked_invalid(z), cmap=style.cmap("chi2"),
                                 norm=Normalize(float(np.nanmin(z)), max(float(np.nanmax(z)), float(np.nanmin(z)) + 1e-9)),
                                 shading="flat")
            mesh.set_label("chi2")
            if "chi2_total" in best and xs.size > 1 and ys.size > 1:
                _, _, zt = _surface(solved, p, q, "chi2_total")
                cs = ax.contour(xs, ys, zt - np.nanmin(zt), levels=[2.30, 6.18], colors="w", linewidths=0.8)
                ax.clabel(cs, fmt={2.30: "68 %", 6.18: "95 %"}, fontsize=style.FONT_PT)
            gx, gy = np.meshgrid(xs, ys)
            ok = np.isfinite(z)
            ax.plot(gx[ok], gy[ok], ".", color="k", ms=2.5, gid="grid_points")
            ax.plot([best[p]], [best[q]], "*", color=style.MODEL_COLOUR, mec="w", mew=0.4, ms=10, gid="best")
            cax = fig.add_axes([0.75, 0.16, 0.03, 0.74])
            fig.colorbar(mesh, cax=cax, label="reduced χ²")
            ax.set_xlabel(_parameter_label(p))
            ax.set_ylabel(_parameter_label(q))
        ax.set_title("χ² landscape", fontsize=style.TITLE_PT)
    return fig


# ---------------------------------------------------------------------------- result.plot


def plot_result_kind(result, kind: str, *, ax=None, **kwargs):
    """One figure of ``result`` by ``kind`` (:data:`dopplermap.choices.RESULT_PLOT_KINDS`), as
    :meth:`dopplermap.InversionResult.plot` draws it; returns the Figure."""
    check(kind, RESULT_PLOT_KINDS, "kind")
    if ax is not None and kind not in ("map", "polar", "convergence"):
        raise DopplermapInputError(f"kind {kind!r} fills a Figure (fig=...); ax= is taken by 'map', 'polar' and "
                                   "'convergence'")
    window = kwargs.pop("window", None)
    if getattr(result, "n_window", 1) > 1 and kind in ("map", "orthographic", "polar"):
        result = result.window(-1 if window is None else window)  # one window's map (default the last)
    grid, star = result.grid, result.star
    inc = None if star is None else float(star.inclination)
    if kind in ("map", "maps", "orthographic", "polar") and grid is None:
        raise DopplermapInputError(f"result.plot({kind!r}) needs the result's grid (invert a Problem, or load the "
                                   "result folder)")
    if kind in ("map", "polar"):
        quantity = kwargs.pop("quantity", "cool" if kind == "map" else "brightness"
                              if result.intensities is not None else "cool")
        values = _result_quantity(result, quantity)
        look = MapStyle(**{k: kwargs.pop(k) for k in _MAP_STYLE_FIELDS if k in kwargs})
        if kind == "map":
            return plot_map(grid.lat, grid.lon, values, quantity=quantity, ax=ax,
                            view=View.of(grid, inclination=inc), look=look, **kwargs)
        phases = None
        sets = line_sets(result)
        if sets and star is not None:
            phases = (np.concatenate([np.asarray(d["obs"].times, float) for d in sets]) - star.t0) / star.period
        if look.title is None:
            look = look.replace(title=result.name)
        return plot_polar(grid.lat, grid.lon, values, quantity=quantity, ax=ax,
                          view=View.of(grid, inclination=inc, phases=phases), look=look, **kwargs)
    if kind == "convergence":
        if ax is not None:
            kwargs["fig"] = ax.figure
            ax.remove()
        return plot_convergence(result.history, regulariser_label=REGULARISER_LABELS.get(result.regulariser,
                                                                                          "regulariser"), **kwargs)
    figs = result_figures(result)
    name = {"maps": "map_windows" if getattr(result, "n_window", 1) > 1 else "map_mollweide"}.get(kind, kind)
    if name not in figs:
        raise DopplermapInputError(f"result.plot({kind!r}): this result lacks what the figure needs (observations "
                                   "and model for profiles, a light curve, the star for the views)")
    return figs[name]()


def _result_quantity(result, quantity):
    if quantity == "cool":
        return np.asarray(result.fssc, float)
    if quantity == "hot":
        return np.asarray(result.fssh, float)
    if quantity == "total":
        return np.asarray(result.fssc, float) + np.asarray(result.fssh, float)
    if quantity == "brightness":
        if result.intensities is None:
            raise DopplermapInputError("quantity 'brightness' needs the result's intensities")
        return relative_brightness(result.fssc, result.fssh, result.intensities)
    raise DopplermapInputError(f"quantity must be one of cool, hot, total, brightness, got {quantity!r}")
