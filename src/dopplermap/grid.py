"""Surface tessellations of the unit sphere.

A :class:`SurfaceGrid` holds the centres (latitude, longitude, radians), solid angles
(steradian, summing to 4 pi) and neighbour pairs of its cells. Two kinds exist:

* ``latitude_band_grid(n_cell)`` - equal-area cells in latitude bands (exactly equal
  areas: band edges are placed so that each band holds an integer number of equal cells);
* ``healpix_grid(nside)`` - HEALPix (needs ``healpy``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._repr import compact
from .choices import GRID_KINDS, check
from .constants import MAX_SUBDIVIDE
from .errors import DopplermapInputError
from .memory import check_grid_size

__all__ = ["SurfaceGrid", "latitude_band_grid", "healpix_grid", "make_grid", "with_surface", "subdivide", "check_subdivide"]


@dataclasses.dataclass(frozen=True, eq=False)
class SurfaceGrid:
    """A tessellation of the stellar surface.

    Attributes:
        lat: (n_cell,) latitude of the cell centres, rad, in [-pi/2, pi/2].
        lon: (n_cell,) longitude of the cell centres, rad, in [0, 2 pi).
        area: (n_cell,) solid angle of each cell, sr (sums to 4 pi).
        edges: (n_edge, 2) int pairs (i, j), i < j, of cells sharing a border.
        kind: ``"bands"`` or ``"healpix"``.
        lat_bounds: (n_cell, 2) latitude range of each cell (rad), bands only.
        lon_bounds: (n_cell, 2) longitude range of each cell (rad), bands only.
        surface: the star's distorted shape on these cells (:class:`dopplermap.roche.Surface`:
            positions, normals, areas, gravity), or None for the sphere. The maps stay on the
            cells (their solid angles ``area`` weigh the regulariser); the model's geometry
            reads the surface (:func:`with_surface`).
    """

    lat: np.ndarray
    lon: np.ndarray
    area: np.ndarray
    edges: np.ndarray
    kind: str = "bands"
    lat_bounds: np.ndarray | None = None
    lon_bounds: np.ndarray | None = None
    surface: object | None = None

    def __repr__(self) -> str:
        return compact(self, ("kind",), n_cell=self.n_cell, n_edge=int(len(self.edges)))

    @property
    def n_cell(self) -> int:
        return int(self.lat.shape[0])

    def unit_vectors(self) -> np.ndarray:
        """(n_cell, 3) unit vectors of the cell centres (their dot products are the cosines of
        the angles between cells)."""
        lat, lon = np.asarray(self.lat, dtype=float), np.asarray(self.lon, dtype=float)
        return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)

    def neighbours(self, i: int) -> np.ndarray:
        """Indices of the cells that share a border with cell ``i``."""
        e = self.edges
        return np.sort(np.concatenate([e[e[:, 0] == i, 1], e[e[:, 1] == i, 0]]))

    def neighbour_lists(self) -> list[np.ndarray]:
        """Neighbour indices of every cell (a list of arrays)."""
        out: list[list[int]] = [[] for _ in range(self.n_cell)]
        for i, j in self.edges:
            out[i].append(int(j))
            out[j].append(int(i))
        return [np.array(sorted(x), dtype=np.int64) for x in out]


def _band_counts(n_cell: int) -> np.ndarray:
    """Cells per latitude band for nearly square cells of equal area."""
    cell_side = np.sqrt(4.0 * np.pi / n_cell)
    n_band = max(2, int(round(np.pi / cell_side)))
    edges = np.linspace(-np.pi / 2, np.pi / 2, n_band + 1)
    band_area = 2.0 * np.pi * np.diff(np.sin(edges))
    ideal = band_area / (4.0 * np.pi) * n_cell
    counts = np.maximum(1, np.floor(ideal)).astype(np.int64)
    # hand out the remaining cells to the bands that lost most by rounding down
    while counts.sum() < n_cell:
        counts[np.argmax(ideal - counts)] += 1
    while counts.sum() > n_cell:
        counts[np.argmax(np.where(counts > 1, counts - ideal, -np.inf))] -= 1
    return counts


def latitude_band_grid(n_cell: int) -> SurfaceGrid:
    """Equal-area latitude-band grid with ``n_cell`` cells.

    Bands are about as tall as their cells are wide; band edges are chosen so that every
    cell has exactly the solid angle ``4 pi / n_cell``.
    """
    if int(n_cell) != n_cell or n_cell < 8:
        raise DopplermapInputError(f"n_cell must be an integer >= 8, got {n_cell!r}")
    n_cell = int(n_cell)
    check_grid_size(n_cell, "bands")
    counts = _band_counts(n_cell)
    cum = np.concatenate([[0], np.cumsum(counts)])
    sin_edges = -1.0 + 2.0 * cum / n_cell
    sin_edges[-1] = 1.0
    lat_edges = np.arcsin(np.clip(sin_edges, -1.0, 1.0))

    lat, lon, latb, lonb, band_of = [], [], [], [], []
    for b, n in enumerate(counts):
        lo, hi = lat_edges[b], lat_edges[b + 1]
        centre = np.arcsin(0.5 * (np.sin(lo) + np.sin(hi)))  # area-weighted centre
        le = np.linspace(0.0, 2.0 * np.pi, n + 1)
        lat.append(np.full(n, centre))
        lon.append(0.5 * (le[:-1] + le[1:]))
        latb.append(np.tile([lo, hi], (n, 1)))
        lonb.append(np.stack([le[:-1], le[1:]], axis=1))
        band_of.append(np.full(n, b))
    lat = np.concatenate(lat)
    lon = np.concatenate(lon)
    lat_bounds = np.concatenate(latb)
    lon_bounds = np.concatenate(lonb)
    area = np.full(n_cell, 4.0 * np.pi / n_cell)

    pairs = []
    for b, n in enumerate(counts):
        idx = np.arange(cum[b], cum[b + 1])
        if n > 1:  # east-west neighbours in the band, wrapping in longitude
            pairs.append(np.stack([idx, np.roll(idx, -1)], axis=1))
        if b + 1 < len(counts):  # north neighbours: overlapping longitude ranges
            up = np.arange(cum[b + 1], cum[b + 2])
            lo1, hi1 = lon_bounds[idx, 0][:, None], lon_bounds[idx, 1][:, None]
            lo2, hi2 = lon_bounds[up, 0][None, :], lon_bounds[up, 1][None, :]
            overlap = np.minimum(hi1, hi2) - np.maximum(lo1, lo2) > 1e-12
            ii, jj = np.nonzero(overlap)
            pairs.append(np.stack([idx[ii], up[jj]], axis=1))
    edges = np.concatenate(pairs).astype(np.int64)
    edges = np.sort(edges, axis=1)
    edges = np.unique(edges, axis=0)
    return SurfaceGrid(lat=lat, lon=lon, area=area, edges=edges, kind="bands",
                       lat_bounds=lat_bounds, lon_bounds=lon_bounds)


def healpix_grid(nside: int) -> SurfaceGrid:
    """HEALPix grid (RING ordering) with ``12 nside^2`` cells; needs ``healpy``."""
    if int(nside) != nside or nside < 1 or (int(nside) & (int(nside) - 1)) != 0:
        raise DopplermapInputError(f"nside must be a power of 2, got {nside!r}")
    nside = int(nside)
    check_grid_size(12 * nside ** 2, "healpix")  # before importing healpy (slow)
    try:
        import healpy as hp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("healpix grids need healpy: pip install 'dopplermap[healpix]'") from exc
    npix = hp.nside2npix(nside)
    theta, phi = hp.pix2ang(nside, np.arange(npix))
    nb = hp.get_all_neighbours(nside, np.arange(npix))  # (8, npix), -1 where missing
    ii = np.repeat(np.arange(npix)[None, :], 8, axis=0)
    ok = nb >= 0
    edges = np.unique(np.sort(np.stack([ii[ok], nb[ok]], axis=1), axis=1), axis=0)
    return SurfaceGrid(lat=np.pi / 2 - theta, lon=phi, area=np.full(npix, 4 * np.pi / npix),
                       edges=edges.astype(np.int64), kind="healpix")


def make_grid(kind: str = "bands", n_cell: int = 2500, nside: int | None = None) -> SurfaceGrid:
    """Build a grid by name: ``"bands"`` (``n_cell``) or ``"healpix"`` (``nside``)."""
    if check(kind, GRID_KINDS, "grid kind") == "bands":
        return latitude_band_grid(n_cell)
    if nside is None:
        nside = 1 << max(0, int(round(np.log2(np.sqrt(n_cell / 12.0)))))
    return healpix_grid(nside)


def with_surface(grid: SurfaceGrid, surface) -> SurfaceGrid:
    """``grid`` with a distorted shape (:class:`dopplermap.roche.Surface` of the same cells), or
    None for the sphere."""
    if surface is not None and surface.n_cell != grid.n_cell:
        raise DopplermapInputError(f"the surface has {surface.n_cell} cells, the grid {grid.n_cell}")
    return dataclasses.replace(grid, surface=surface)


def check_subdivide(m) -> int:
    """``m`` as an int, or a :class:`DopplermapInputError` unless it is an integer in 1..MAX_SUBDIVIDE."""
    if isinstance(m, bool) or not isinstance(m, (int, np.integer, float)) or int(m) != m or not 1 <= m <= MAX_SUBDIVIDE:
        raise DopplermapInputError(f"subdivide must be an integer in 1..{MAX_SUBDIVIDE}, got {m!r}")
    return int(m)


def subdivide(grid: SurfaceGrid, m: int) -> tuple[SurfaceGrid, np.ndarray]:
    """Each cell of ``grid`` split into ``m x m`` sub-cells of equal area (latitude bands: ``m``
    equal-area rows in latitude, ``m`` equal columns in longitude; HEALPix: the pixel's nested
    children at ``m`` times its nside, ``m`` a power of 2): the cells on which
    :func:`dopplermap.precompute` synthesises the lines when a map cell is integrated over
    sub-cells (``subdivide``). Returns ``(fine, parent)``: the sub-cells as a grid (no
    neighbour pairs: it carries geometry, not a map) and ``(n_fine,)`` the map cell of each.
    ``m = 1`` returns the grid's own cells."""
    m = check_subdivide(m)
    if m == 1:
        return dataclasses.replace(grid, edges=np.zeros((0, 2), np.int64)), np.arange(grid.n_cell)
    if grid.kind == "healpix" and grid.surface is None:
        return _healpix_children(grid, m)
    if grid.kind != "bands" or grid.lat_bounds is None or grid.lon_bounds is None:
        raise DopplermapInputError(f"subdivide needs a latitude-band or HEALPix grid; this grid is {grid.kind!r}")
    if grid.surface is not None:
        raise DopplermapInputError("subdivide: the grid carries a distorted surface (Roche shape) computed on its "
                                   "own cells; sub-cells of a distorted star are not supported")
    t = (np.arange(m) + 0.5) / m
    e = np.arange(m + 1) / m
    s0, s1 = np.sin(grid.lat_bounds[:, 0]), np.sin(grid.lat_bounds[:, 1])
    l0, l1 = grid.lon_bounds[:, 0], grid.lon_bounds[:, 1]
    # (n, m) rows and columns; the centre of a row is its area-weighted latitude, as the grid's own
    lat_c = np.arcsin(s0[:, None] + (s1 - s0)[:, None] * t[None, :])
    lat_e = np.arcsin(np.clip(s0[:, None] + (s1 - s0)[:, None] * e[None, :], -1.0, 1.0))
    lon_c = l0[:, None] + (l1 - l0)[:, None] * t[None, :]
    lon_e = l0[:, None] + (l1 - l0)[:, None] * e[None, :]
    n = grid.n_cell
    lat = np.repeat(lat_c, m, axis=1).reshape(-1)  # (n, m rows, m columns), row-major
    lon = np.tile(lon_c, (1, m)).reshape(-1)
    latb = np.stack([np.repeat(lat_e[:, :-1], m, axis=1), np.repeat(lat_e[:, 1:], m, axis=1)], axis=-1).reshape(-1, 2)
    lonb = np.stack([np.tile(lon_e[:, :-1], (1, m)), np.tile(lon_e[:, 1:], (1, m))], axis=-1).reshape(-1, 2)
    area = np.repeat(np.asarray(grid.area, float) / (m * m), m * m)
    parent = np.repeat(np.arange(n), m * m)
    fine = SurfaceGrid(lat=lat, lon=lon, area=area, edges=np.zeros((0, 2), np.int64), kind="bands",
                       lat_bounds=latb, lon_bounds=lonb)
    return fine, parent


def _healpix_children(grid: SurfaceGrid, m: int) -> tuple[SurfaceGrid, np.ndarray]:
    """The NESTED children of each pixel of a RING-ordered HEALPix ``grid`` at ``m`` times its nside."""
    if m & (m - 1):
        raise DopplermapInputError(f"subdivide on a HEALPix grid must be a power of 2 (a pixel's nested children), "
                                   f"got {m}")
    import healpy as hp  # the grid was made with it

    n = grid.n_cell
    nside = int(round(np.sqrt(n / 12)))
    nest = hp.ring2nest(nside, np.arange(n))
    children = (nest[:, None] * (m * m) + np.arange(m * m)[None, :]).reshape(-1)  # consecutive per pixel
    theta, phi = hp.pix2ang(nside * m, children, nest=True)
    fine = SurfaceGrid(lat=np.pi / 2 - theta, lon=phi, area=np.repeat(np.asarray(grid.area, float) / (m * m), m * m),
                       edges=np.zeros((0, 2), np.int64), kind="healpix")
    return fine, np.repeat(np.arange(n), m * m)
