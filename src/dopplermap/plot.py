"""Publication figures with matplotlib (Agg, no GUI toolkit, no pyplot state).

Import this module lazily (it imports matplotlib). Every function takes plain arrays, draws
one figure, writes it to ``path`` (temporary name, then rename) and returns the path; no
function here computes physics. :func:`plot_result` draws all figures of an
:class:`~dopplermap.solvers.result.InversionResult` with its context.

Maps are drawn from the cells themselves: with cell bounds (latitude-band grids) every image
pixel takes the value of the cell that contains it; without bounds (HEALPix) the value of
the nearest cell centre. Angles: latitude and longitude in radians on input, degrees on the
axes; longitude 0 faces the observer at phase 0 and the central meridian at phase ``phi``
is at longitude ``-360 phi`` (mod 360) (``docs/conventions.md``).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from .errors import DopplermapInputError

__all__ = ["plot_maps", "plot_orthographic", "plot_profiles", "plot_dynamic_spectrum", "plot_light_curve",
           "plot_convergence", "plot_result", "cell_lookup", "central_meridians"]

log = logging.getLogger(__name__)

_SQRT2 = np.sqrt(2.0)

# quantity -> (label, colormap)
QUANTITIES = {
    "cool": ("cool-spot filling factor", "Blues"),
    "hot": ("hot-spot filling factor", "Oranges"),
    "total": ("total spot filling factor", "Purples"),
    "brightness": ("relative brightness", "RdBu_r"),
}


# ---------------------------------------------------------------------------- helpers


def _figure(figsize):
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout=None)


def _save(fig, path, dpi) -> Path:
    """Write ``fig`` to ``path`` through a temporary file in the same folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = path.suffix.lstrip(".").lower() or "png"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".{fmt}", dir=path.parent)
    os.close(fd)
    try:
        kw = {"pil_kwargs": {"compress_level": 1}} if fmt == "png" else {}
        fig.savefig(tmp, dpi=dpi, format=fmt, facecolor="white", **kw)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


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


class _Sheet:
    """One axes holding a grid of panels (no axes per panel: drawing stays fast).

    Panel ``(r, c)`` spans data x in ``[c (pw + gx), c (pw + gx) + pw]`` and y in
    ``[-r (ph + gy) - ph, -r (ph + gy)]``; ``scale`` is inches per data unit and the
    margins (left, right, top, bottom) are inches.
    """

    def __init__(self, nrow, ncol, pw, ph, gx, gy, scale, margins):
        self.pw, self.ph, self.gx, self.gy, self.scale = pw, ph, gx, gy, scale
        left, right, top, bottom = margins
        self.w = ncol * pw + (ncol - 1) * gx
        self.h = nrow * ph + (nrow - 1) * gy
        self.fig_w, self.fig_h = self.w * scale + left + right, self.h * scale + top + bottom
        self.fig = _figure((self.fig_w, self.fig_h))
        self.ax = self.fig.add_axes((0.0, 0.0, 1.0, 1.0))  # the whole figure, in panel data units
        self.ax.set_xlim(-left / scale, self.w + right / scale)
        self.ax.set_ylim(-self.h - bottom / scale, top / scale)
        self.ax.set_aspect("auto")
        self.ax.axis("off")

    def origin(self, r, c):
        """Lower-left corner of panel (r, c) in data units."""
        return c * (self.pw + self.gx), -r * (self.ph + self.gy) - self.ph

    def colorbar(self, norm, cmap, y0, y1, label):
        """A vertical colour bar right of the panels, from data y0 to y1 (drawn, not an axes)."""
        from matplotlib.ticker import MaxNLocator

        ax, s = self.ax, self.scale
        x0, x1 = self.w + 0.18 / s, self.w + 0.32 / s
        grad = cmap(np.linspace(0.0, 1.0, 256)[::-1, None], bytes=True)
        ax.imshow(grad, extent=(x0, x1, y0, y1), interpolation="bilinear", aspect="auto", zorder=1)
        ax.plot([x0, x1, x1, x0, x0], [y0, y0, y1, y1, y0], color="k", lw=0.6, zorder=2)
        vmin, vmax = float(norm.vmin), float(norm.vmax)
        ticks = [t for t in MaxNLocator(nbins=5).tick_values(vmin, vmax) if vmin - 1e-9 <= t <= vmax + 1e-9]
        if getattr(norm, "vcenter", None) is not None:  # two-slope: mark the centre, drop crowded ticks
            c = float(norm.vcenter)
            ticks = [c] + [t for t in ticks if abs(float(norm(t)) - float(norm(c))) > 0.09]
        for t in ticks:
            y = y0 + float(norm(t)) * (y1 - y0)
            ax.plot([x1, x1 + 0.04 / s], [y, y], color="k", lw=0.6)
            ax.text(x1 + 0.06 / s, y, f"{t:.3g}", ha="left", va="center", fontsize=7)
        ax.text(x1 + 0.45 / s, 0.5 * (y0 + y1), label, rotation=90, ha="center", va="center", fontsize=7.5)


def _nan_join(segments):
    """Concatenate (x, y) segments with NaN separators, for one ``plot`` call."""
    xs, ys = [], []
    for x, y in segments:
        xs += [np.asarray(x, float), [np.nan]]
        ys += [np.asarray(y, float), [np.nan]]
    return np.concatenate(xs), np.concatenate(ys)


_GRAT = dict(color="0.55", lw=0.4, alpha=0.8)
_SHADE = dict(facecolor=(0.6, 0.6, 0.6, 0.55), edgecolor="0.35", hatch="////", linewidth=0.0)


def _decor(projection, inclination, phase_lons):
    """Panel-local decoration of a map (computed once per figure, drawn for every panel).

    Returns a dict: ``grat`` and ``outline`` (x, y) NaN-joined lines, ``shade`` (n, 2)
    polygon or None, ``ticks`` (x positions, y0, y1) or None, ``lat_labels`` and
    ``lon_labels`` lists of (x, y, text, ha, va), ``image_extent``.
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
            d["ticks"] = (xp, -_SQRT2 - 0.2, -_SQRT2 - 0.07)
        xl, _ = _mollweide_forward(np.zeros(3), np.radians([90.0, 180.0, 270.0]) - np.pi)
        d["lon_labels"] = [(x + 0.04, 0.03, f"{lo}°", "left", "bottom") for x, lo in zip(xl, (90, 180, 270), strict=True)]
        xq, yq = _mollweide_forward(np.radians([-60.0, -30.0, 0.0, 30.0, 60.0]), np.full(5, -np.pi))
        d["lat_labels"] = [(x - 0.06, y, f"{la}°", "right", "center") for x, y, la in zip(xq, yq, (-60, -30, 0, 30, 60), strict=True)]
        d["image_extent"] = (-2 * _SQRT2, 2 * _SQRT2, -_SQRT2, _SQRT2)
        d["origin"] = (2 * _SQRT2, _SQRT2 + 0.3)  # panel corner -> map centre
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
            d["ticks"] = (np.asarray(phase_lons, float), 92.0, 102.0)
        d["lon_labels"] = [(lo, -96.0, f"{lo}", "center", "top") for lo in range(0, 361, 60)]
        d["lon_labels"].append((180.0, -114.0, "longitude (deg)", "center", "top"))
        d["lat_labels"] = [(-5.0, la, f"{la}", "right", "center") for la in range(-90, 91, 30)]
        d["lat_labels"].append((-42.0, 0.0, "latitude (deg)", "center", "center"))
        d["image_extent"] = (0.0, 360.0, -90.0, 90.0)
        d["origin"] = (0.0, 90.0)
    return d


def _limits(name, arrays):
    vals = np.concatenate([np.asarray(a, dtype=float).ravel() for a in arrays])
    vals = vals[np.isfinite(vals)]
    if name == "brightness":
        lo, hi = (float(vals.min()), float(vals.max())) if vals.size else (0.0, 2.0)
        return min(lo, 1.0 - 1e-3), max(hi, 1.0 + 1e-3)
    hi = float(vals.max()) if vals.size else 1.0
    return 0.0, max(0.05, min(1.0, np.ceil(hi * 20) / 20))


def _norm_cmap(name, vmin, vmax):
    import matplotlib
    from matplotlib.colors import Normalize, TwoSlopeNorm

    cmap = matplotlib.colormaps[QUANTITIES[name][1]]
    if name == "brightness":
        return TwoSlopeNorm(vcenter=1.0, vmin=vmin, vmax=vmax), cmap
    return Normalize(vmin=vmin, vmax=vmax), cmap


# ---------------------------------------------------------------------------- figures


def plot_maps(path, lat, lon, maps: dict, *, truth: dict | None = None, lat_bounds=None, lon_bounds=None,
              inclination: float | None = None, phase_lons=None, projection: str = "mollweide",
              title: str | None = None, dpi: int = 100, resolution: int = 240) -> Path:
    """Maps of filling factors / brightness, true beside recovered when ``truth`` is given.

    Args:
        lat, lon: (n_cell,) cell centres, rad. maps: quantity -> (n_cell,) values, quantities
            from ``"cool"``, ``"hot"``, ``"total"``, ``"brightness"`` (one row each; brightness
            is drawn blue below 1 and red above).
        truth: the same quantities for the true map (left column).
        lat_bounds, lon_bounds: (n_cell, 2) cell bounds, rad (optional).
        inclination: deg; latitudes below ``-inclination`` (never visible) are hatched.
        phase_lons: deg, central-meridian longitudes of the observations (ticks under /
            above each map).
        projection: ``"mollweide"`` or ``"rect"``. resolution: image rows per panel.
    """
    names = [k for k in QUANTITIES if k in maps]
    if not names:
        raise DopplermapInputError(f"maps must contain some of {tuple(QUANTITIES)}, got {tuple(maps)}")
    for k, v in list(maps.items()) + list((truth or {}).items()):
        if np.shape(v) != np.shape(lat):
            raise DopplermapInputError(f"map {k!r} has shape {np.shape(v)}, expected (n_cell,) = {np.shape(lat)}")
    cols = [("true", truth), ("recovered", maps)] if truth else [("recovered", maps)]
    raster = _Raster(cell_lookup(lat, lon, lat_bounds, lon_bounds), projection, resolution)
    nrow, ncol = len(names), len(cols)
    if projection == "mollweide":
        pad = 0.3  # phase-tick strip under each map
        sheet = _Sheet(nrow, ncol, 4 * _SQRT2, 2 * _SQRT2 + pad, 0.35, 0.3, 4.0 / (4 * _SQRT2),
                       (0.45, 1.05, 0.35 if not title else 0.6, 0.1))
    else:
        pad = 16.0  # phase-tick strip above each map
        sheet = _Sheet(nrow, ncol, 360.0, 180.0 + pad, 30.0, 14.0, 4.0 / 360.0,
                       (0.55, 1.05, 0.3 if not title else 0.55, 0.45))
    ax = sheet.ax
    from matplotlib.collections import PolyCollection

    dec = _decor(projection, inclination, phase_lons)
    grat, outline, shades, ticks = [], [], [], []
    ex = dec["image_extent"]
    for r, name in enumerate(names):
        shown = [d[name] for _, d in cols if d is not None and name in d]
        norm, cmap = _norm_cmap(name, *_limits(name, shown))
        for c, (colname, data) in enumerate(cols):
            x0, y0 = sheet.origin(r, c)
            cx, cy = x0 + dec["origin"][0], y0 + dec["origin"][1]
            if data is not None and name in data:
                rgba = cmap(norm(np.asarray(data[name], float)), bytes=True)[raster.index]
                rgba[~raster.inside] = 0
                ax.imshow(rgba, extent=(ex[0] + cx, ex[1] + cx, ex[2] + cy, ex[3] + cy), origin="upper",
                          interpolation="nearest", zorder=1)
                grat.append((dec["grat"][0] + cx, dec["grat"][1] + cy))
                outline.append((dec["outline"][0] + cx, dec["outline"][1] + cy))
                if dec["shade"] is not None:
                    shades.append(dec["shade"] + [cx, cy])
                if dec["ticks"] is not None:
                    tx = dec["ticks"][0] + cx
                    ticks.append((tx, np.full_like(tx, dec["ticks"][1] + cy), np.full_like(tx, dec["ticks"][2] + cy)))
                if projection == "mollweide":  # one labelled map (bottom left) is enough
                    labels = dec["lat_labels"] + dec["lon_labels"] if (c == 0 and r == nrow - 1) else []
                else:
                    labels = (list(dec["lat_labels"]) if c == 0 else []) + (dec["lon_labels"] if c == 0 and r == nrow - 1 else [])
                for lx, ly, txt, ha, va in labels:
                    ax.text(lx + cx, ly + cy, txt, ha=ha, va=va, fontsize=6.5 if projection == "mollweide" else 7,
                            color="0.3" if projection == "mollweide" else "k",
                            rotation=90 if txt.startswith("latitude") else 0, zorder=5)
            if r == 0:
                ax.text(x0 + sheet.pw / 2, y0 + sheet.ph + (0.12 if projection == "mollweide" else 4), colname,
                        ha="center", va="bottom", fontsize=10)
        _, y0 = sheet.origin(r, 0)
        lo, hi = (y0 + pad, y0 + sheet.ph) if projection == "mollweide" else (y0, y0 + 180.0)
        sheet.colorbar(norm, cmap, lo + 0.08 * (hi - lo), hi - 0.08 * (hi - lo), QUANTITIES[name][0])
    if shades:
        ax.add_collection(PolyCollection(shades, zorder=2, **_SHADE), autolim=False)
    if grat:
        ax.plot(*_nan_join(grat), zorder=3, **_GRAT)
        ax.plot(*_nan_join(outline), color="0.15", lw=0.8, zorder=4)
    if ticks:
        ax.vlines(*(np.concatenate(t) for t in zip(*ticks, strict=True)), color="k", lw=0.5)
    if title:
        sheet.fig.suptitle(title, fontsize=11, y=1.0 - 0.15 / sheet.fig_h, va="top")
    return _save(sheet.fig, path, dpi)


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


def plot_orthographic(path, lat, lon, values, *, inclination: float, phases=None, truth=None, lat_bounds=None,
                      lon_bounds=None, label: str = "relative brightness", cmap: str = "afmhot", vmin=None,
                      vmax=None, dpi: int = 100, resolution: int = 200) -> Path:
    """The star as seen at 4-8 rotation phases (recovered; the truth above it when given).

    Args:
        lat, lon: (n_cell,) rad. values, truth: (n_cell,) values to show.
        inclination: deg. phases: rotation phases (cycles) of the views, 1-8 of them
            (default 6 evenly spaced). The receding limb is on the right, north up.
    """
    phases = np.arange(6) / 6.0 if phases is None else np.atleast_1d(np.asarray(phases, dtype=float))
    if not 1 <= phases.size <= 8:
        raise DopplermapInputError(f"phases must hold 1 to 8 rotation phases, got {phases.size}")
    for name, v in (("values", values), ("truth", truth)):
        if v is not None and np.shape(v) != np.shape(lat):
            raise DopplermapInputError(f"{name} has shape {np.shape(v)}, expected (n_cell,) = {np.shape(lat)}")
    import matplotlib
    from matplotlib.patches import Circle

    lookup = cell_lookup(lat, lon, lat_bounds, lon_bounds)
    rows = [("true", truth), ("recovered", values)] if truth is not None else [("recovered", values)]
    arrays = [np.asarray(v, float) for _, v in rows]
    lo = float(min(a.min() for a in arrays)) if vmin is None else vmin
    hi = float(max(a.max() for a in arrays)) if vmax is None else vmax
    if cmap == "afmhot" and vmin is None:
        lo = min(lo, 0.0)
        hi = max(hi, 1.0) * 1.15
    if hi <= lo:
        hi = lo + 1e-3
    cm = matplotlib.colormaps[cmap].with_extremes(bad=(0.0, 0.0, 0.0, 0.0))
    sheet = _Sheet(len(rows), phases.size, 2.0, 2.0, 0.2, 0.15, 0.85, (0.35, 0.85, 0.35, 0.08))
    ax = sheet.ax
    for r, (rowname, vals) in enumerate(rows):
        for c, ph in enumerate(phases):
            x0, y0 = sheet.origin(r, c)
            cx, cy = x0 + 1.0, y0 + 1.0
            ax.imshow(_ortho_image(lookup, vals, inclination, ph, resolution),
                      extent=(cx - 1, cx + 1, cy - 1, cy + 1), cmap=cm, vmin=lo, vmax=hi,
                      interpolation="bilinear", origin="upper")
            gx, gy = _ortho_graticule(inclination, ph)
            ax.plot(gx + cx, gy + cy, color="0.5", lw=0.35, alpha=0.7)
            ax.add_patch(Circle((cx, cy), 1.0, fill=False, lw=0.7, color="0.2"))
            if r == 0:
                ax.text(cx, cy + 1.08, f"phase {ph:.2f}", ha="center", va="bottom", fontsize=8.5)
            if c == 0:
                ax.text(x0 - 0.08, cy, rowname, rotation=90, ha="right", va="center", fontsize=8.5)
    from matplotlib.colors import Normalize

    _, ylo = sheet.origin(len(rows) - 1, 0)
    sheet.colorbar(Normalize(lo, hi), cm, ylo + 0.1, -0.1, label)
    return _save(sheet.fig, path, dpi)


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


def plot_profiles(path, vels, phases, obs, model, *, err=None, spotless=None, max_profiles: int = 24,
                  dpi: int = 100) -> Path:
    """Stacked line-profile fits (left) and residuals (right), offset per phase.

    Args:
        vels: (n_vel,) km/s. phases: (n_epoch,) rotation phases (cycles).
        obs, model: (n_epoch, n_vel) observed and fitted profiles. err: (n_epoch, n_vel).
        spotless: (n_epoch, n_vel) model of the unspotted star (dashed).
        max_profiles: at most this many epochs, evenly spread in phase, are drawn.
    """
    vels, phases, obs, model = _profile_arrays(vels, phases, obs, model)
    sel = _select_epochs(phases, max_profiles)
    depth = float(np.median(obs.max(axis=1) - obs.min(axis=1))) or 1.0
    step = 0.28 * depth
    resid = obs - model
    noise = float(np.median(err)) if err is not None else float(np.std(resid)) or 1e-3
    mag = _nice(max(1.0, step / (7.0 * noise)))
    fig = _figure((8.0, min(2.0 + 0.36 * sel.size, 14.0)))
    gs = fig.add_gridspec(1, 2, width_ratios=(1.25, 1.0), left=0.08, right=0.98, top=0.95, bottom=0.06,
                          wspace=0.28)
    ax, axr = fig.add_subplot(gs[0]), fig.add_subplot(gs[1])
    cont = float(np.median(obs[:, [0, -1]]))
    off = step * np.arange(sel.size)[:, None]
    nan = np.full((sel.size, 1), np.nan)

    def joined(y):  # (k, n_vel) rows -> one NaN-separated line
        return (np.concatenate([np.broadcast_to(vels, y.shape), nan], axis=1).ravel(),
                np.concatenate([y, nan], axis=1).ravel())

    if spotless is not None:
        ax.plot(*joined(np.asarray(spotless, float)[sel] + off), color="0.55", lw=0.7, ls="--", zorder=1)
    ax.plot(*joined(obs[sel] + off), ".", color="k", ms=2.4, zorder=2)
    ax.plot(*joined(model[sel] + off), color="tab:red", lw=0.9, zorder=3)
    for k, e in enumerate(sel):
        ax.text(vels[-1] + 0.02 * np.ptp(vels), cont + k * step, f"{np.mod(phases[e], 1):.3f}", fontsize=6.5,
                va="center", ha="left")
    if err is not None:
        from matplotlib.collections import PolyCollection

        band = mag * np.asarray(err, float)[sel]
        polys = [np.concatenate([np.stack([vels, o - b], 1), np.stack([vels[::-1], (o + b)[::-1]], 1)])
                 for o, b in zip(off[:, 0], band, strict=True)]
        axr.add_collection(PolyCollection(polys, facecolor="0.88", linewidth=0, zorder=1))
    axr.hlines(off[:, 0], vels[0], vels[-1], color="0.6", lw=0.5, zorder=2)
    axr.plot(*joined(off + mag * resid[sel]), color="k", lw=0.7, zorder=3)
    axr.set_ylim(-step, step * sel.size)
    ax.set_xlim(vels[0], vels[-1] + 0.12 * np.ptp(vels))
    ax.set_xlabel("velocity (km/s)", fontsize=9)
    ax.set_ylabel("normalised intensity + offset", fontsize=9)
    ax.set_title("observed (dots), model (red), unspotted (dashed)" if spotless is not None
                 else "observed (dots), model (red)", fontsize=8.5)
    axr.set_xlim(vels[0], vels[-1])
    axr.set_xlabel("velocity (km/s)", fontsize=9)
    axr.set_ylabel("offset", fontsize=9)
    axr.set_yticks([])
    axr.set_title(f"residuals (observed - model) x {mag:g}" + (", ±1σ grey" if err is not None else ""),
                  fontsize=8.5)
    for a in (ax, axr):
        a.tick_params(labelsize=8)
    return _save(fig, path, dpi)


def _phase_image(phases, rows, n_bins):
    """Image (n_bins, n_vel) of ``rows`` placed by phase; gaps larger than 3 median spacings stay empty."""
    ph = np.mod(np.asarray(phases, float), 1.0)
    order = np.argsort(ph, kind="stable")
    ph, rows = ph[order], np.asarray(rows, float)[order]
    gaps = np.diff(ph)
    med = float(np.median(gaps[gaps > 0])) if np.any(gaps > 0) else 1.0 / max(ph.size, 1)
    half = 1.5 * med
    mids = 0.5 * (ph[1:] + ph[:-1])
    lo = np.concatenate([[ph[0] - half], np.maximum(mids, ph[1:] - half)])
    hi = np.concatenate([np.minimum(mids, ph[:-1] + half), [ph[-1] + half]])
    centre = (np.arange(n_bins) + 0.5) / n_bins
    j = np.clip(np.searchsorted(lo, centre, side="right") - 1, 0, ph.size - 1)
    ok = (centre >= lo[j]) & (centre <= hi[j])
    img = np.where(ok[:, None], rows[j], np.nan)
    return np.ma.masked_invalid(img)


def plot_dynamic_spectrum(path, vels, phases, obs, model, *, spotless=None, err=None, vsini: float | None = None,
                          dpi: int = 100, n_bins: int = 300) -> Path:
    """Dynamic spectra (rotation phase x velocity): spots show as tracks from blue to red.

    Panels: observed - unspotted and model - unspotted (when ``spotless`` is given), in % of
    the mean intensity, and observed - model (in units of ``err`` when given). Arrays as in
    :func:`plot_profiles`; ``vsini`` (km/s) marks the line edges. Epochs are placed at their
    phase; phase gaps wider than 3 typical spacings stay blank.
    """
    vels, phases, obs, model = _profile_arrays(vels, phases, obs, model)
    panels = []
    if spotless is not None:
        spotless = np.asarray(spotless, float)
        d_obs, d_mod = 100 * (obs - spotless), 100 * (model - spotless)
        lim = max(float(np.percentile(np.abs(d_mod), 99.5)), float(np.percentile(np.abs(d_obs), 98)), 1e-9)
        panels += [("observed - unspotted", d_obs, lim, "% of mean intensity"),
                   ("model - unspotted", d_mod, lim, "% of mean intensity")]
    if err is not None:
        res, unit = (obs - model) / np.asarray(err, float), "σ"
    else:
        res, unit = 100 * (obs - model), "% of mean intensity"
    panels.append(("observed - model", res, max(float(np.percentile(np.abs(res), 99.5)), 1e-9), unit))
    fig = _figure((2.9 * len(panels) + 0.7, 4.8))
    gs = fig.add_gridspec(1, len(panels), left=0.08 if len(panels) > 1 else 0.2, right=0.97, top=0.93,
                          bottom=0.24, wspace=0.1)
    dv = 0.5 * (vels[1] - vels[0])
    for k, (title, data, lim, unit) in enumerate(panels):
        ax = fig.add_subplot(gs[k])
        im = ax.imshow(_phase_image(phases, data, n_bins), extent=(vels[0] - dv, vels[-1] + dv, 1.0, 0.0),
                       aspect="auto", cmap="RdBu_r", vmin=-lim, vmax=lim, interpolation="nearest")
        if vsini is not None:
            for v in (-vsini, vsini):
                ax.axvline(v, color="0.3", lw=0.6, ls=":")
        ax.set_ylim(1.0, 0.0)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("velocity (km/s)", fontsize=8.5)
        if k == 0:
            ax.set_ylabel("rotation phase", fontsize=8.5)
        else:
            ax.tick_params(labelleft=False)
        ax.tick_params(labelsize=7.5)
        if k == 0 and spotless is not None:
            continue  # the first two panels share the second one's colour bar
        shared = k == 1 and spotless is not None
        cax = ax.inset_axes((-0.95, -0.215, 1.9, 0.03) if shared else (0.05, -0.215, 0.9, 0.03))
        cb = fig.colorbar(im, cax=cax, orientation="horizontal")
        cb.ax.tick_params(labelsize=6.5)
        cb.set_label(unit, fontsize=7.5)
    return _save(fig, path, dpi)


def plot_light_curve(path, phases, flux, model, *, err=None, dpi: int = 100) -> Path:
    """Light-curve fit (top) and residuals (bottom) against rotation phase.

    Args:
        phases: (n_obs,) rotation phases in cycles, not wrapped: the model is drawn as one
            curve per rotation (``floor(phases)``). flux, model: (n_obs,) normalised flux.
        err: (n_obs,) 1-sigma errors (optional).
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
    fig = _figure((6.4, 4.6))
    gs = fig.add_gridspec(2, 1, height_ratios=(3, 1.2), left=0.14, right=0.97, top=0.94, bottom=0.11, hspace=0.06)
    ax, axr = fig.add_subplot(gs[0]), fig.add_subplot(gs[1])
    e = None if err is None else np.asarray(err, float)
    ax.errorbar(ph, flux, yerr=e, fmt=".", color="k", ms=3, lw=0.6, elinewidth=0.5, label="observed")
    ax.plot(*_nan_join(zip(xs, ys, strict=True)), color="tab:red", lw=1.1, label="model")
    ax.set_ylabel("normalised flux", fontsize=9)
    ax.tick_params(labelbottom=False, labelsize=8)
    ax.legend(fontsize=8, frameon=False)
    axr.errorbar(ph, flux - model, yerr=e, fmt=".", color="k", ms=3, lw=0.6, elinewidth=0.5)
    axr.axhline(0, color="tab:red", lw=0.8)
    axr.set_xlabel("rotation phase", fontsize=9)
    axr.set_ylabel("residual", fontsize=9)
    axr.tick_params(labelsize=8)
    for a in (ax, axr):
        a.set_xlim(0, 1)
    return _save(fig, path, dpi)


def plot_convergence(path, history: dict, *, regulariser_label: str = "regulariser", dpi: int = 100) -> Path:
    """Loss, reduced chi-square and regulariser against iteration.

    Args:
        history: ``{"loss", "chi2", "regulariser"}`` per-iteration arrays
            (:attr:`InversionResult.history`). regulariser_label: y label of the last panel.
    """
    keys = [("loss", "loss"), ("chi2", "reduced χ²"), ("regulariser", regulariser_label)]
    present = [(k, lab) for k, lab in keys if k in history and len(history[k])]
    if not present:
        raise DopplermapInputError(f"history has no per-iteration values (keys {tuple(history)})")
    fig = _figure((6.0, 1.7 * len(present) + 0.7))
    gs = fig.add_gridspec(len(present), 1, left=0.14, right=0.97, top=0.95, bottom=0.1, hspace=0.08)
    ax0 = None
    for i, (k, lab) in enumerate(present):
        ax = fig.add_subplot(gs[i], sharex=ax0)
        ax0 = ax0 or ax
        y = np.asarray(history[k], float)
        it = np.arange(1, y.size + 1)
        ax.plot(it, y, color="k", lw=1.0, marker="." if y.size < 60 else None, ms=3)
        fin = y[np.isfinite(y)]
        if k in ("loss", "chi2") and fin.size and np.all(fin > 0) and fin.max() > 30 * fin.min():
            ax.set_yscale("log")
        if k == "chi2":
            ax.axhline(1.0, color="tab:red", lw=0.7, ls="--")
        ax.set_ylabel(lab, fontsize=9)
        ax.tick_params(labelsize=8, labelbottom=(i == len(present) - 1))
        ax.grid(alpha=0.3, lw=0.5)
    ax.set_xlabel("iteration", fontsize=9)
    return _save(fig, path, dpi)


# ---------------------------------------------------------------------------- all figures


def plot_result(result, out_dir, *, fmt: str = "png", dpi: int = 100, n_views: int = 6,
                max_profiles: int = 24) -> list[Path]:
    """Draw every figure the result's context allows into ``out_dir``; returns the paths.

    Files: ``map_mollweide``, ``map_rect``, ``orthographic`` (need ``grid``),
    ``profiles``, ``dynamic_spectrum`` (need ``obs`` and ``model``), ``light_curve`` (when
    present), ``convergence`` (when the history is not empty), each ``.{fmt}``.
    """
    from .solvers.result import relative_brightness

    out = Path(out_dir)
    paths = []
    grid, star, obs = result.grid, result.star, result.obs
    inc = None if star is None else float(star.inclination)
    phases = None
    if obs is not None and star is not None:
        phases = np.mod((np.asarray(obs.times, float) - star.t0) / star.period, 1.0)
    phase_lons = None if phases is None else central_meridians(phases)

    def quantities(fssc, fssh):
        q = {"cool": np.asarray(fssc), "hot": np.asarray(fssh), "total": np.asarray(fssc) + np.asarray(fssh)}
        if result.intensities is not None:
            q["brightness"] = relative_brightness(fssc, fssh, result.intensities)
        return q

    if grid is not None:
        rec = quantities(result.fssc, result.fssh)
        tru = quantities(result.truth["fssc"], result.truth["fssh"]) if result.truth is not None else None
        for proj in ("mollweide", "rect"):
            paths.append(plot_maps(out / f"map_{proj}.{fmt}", grid.lat, grid.lon, rec, truth=tru,
                                   lat_bounds=grid.lat_bounds, lon_bounds=grid.lon_bounds, inclination=inc,
                                   phase_lons=phase_lons, projection=proj, dpi=dpi))
        if inc is not None:
            key = "brightness" if "brightness" in rec else "total"
            label = QUANTITIES[key][0]
            cmap = "afmhot" if key == "brightness" else "magma_r"
            paths.append(plot_orthographic(out / f"orthographic.{fmt}", grid.lat, grid.lon, rec[key],
                                           truth=None if tru is None else tru[key], inclination=inc,
                                           phases=np.arange(n_views) / n_views, lat_bounds=grid.lat_bounds,
                                           lon_bounds=grid.lon_bounds, label=label, cmap=cmap, dpi=dpi))
    else:
        log.info("no grid in the result: map figures skipped")
    if obs is not None and result.model is not None:
        ph = phases if phases is not None else np.linspace(0, 1, obs.n_epoch, endpoint=False)
        flux, err = np.asarray(obs.flux), np.asarray(obs.err)
        paths.append(plot_profiles(out / f"profiles.{fmt}", obs.vels, ph, flux, result.model, err=err,
                                   spotless=result.spotless, max_profiles=max_profiles, dpi=dpi))
        paths.append(plot_dynamic_spectrum(out / f"dynamic_spectrum.{fmt}", obs.vels, ph, flux, result.model,
                                           spotless=result.spotless, err=err,
                                           vsini=None if star is None else star.vsini_kms, dpi=dpi))
    if result.light_curve is not None and star is not None:
        lc = result.light_curve
        lph = (np.asarray(lc["times"], float) - star.t0) / star.period  # unwrapped: one curve per rotation
        paths.append(plot_light_curve(out / f"light_curve.{fmt}", lph, lc["flux"], lc["model"],
                                      err=lc.get("err"), dpi=dpi))
    if result.history and len(result.history.get("loss", ())):
        label = {"mem": "entropy term", "mem_spotdipy": "entropy term (SpotDIPy)", "tikhonov": "Tikhonov term"}.get(result.regulariser, "regulariser")
        paths.append(plot_convergence(out / f"convergence.{fmt}", result.history, regulariser_label=label, dpi=dpi))
    return paths
