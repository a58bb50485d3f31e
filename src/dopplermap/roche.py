"""Distorted stellar surfaces: the Roche model of a rotating star, with or without a companion's tide.

The surface is an equipotential of the Roche potential in the frame that rotates with the
star (Kopal's normalisation; lengths in units of ``a``)::

    Omega(r) = 1/|r| + q (1 / |r - x_hat| - x) + nu (x^2 + y^2) / 2

``q = M_companion / M_star`` (0: a single star), the companion at distance ``a = 1`` on the
x axis, ``nu = F^2 (1 + q)`` with ``F`` the rotation rate in units of the orbital rate
(synchronicity; ``F = 1`` synchronous). For a single star ``a`` is any length unit and ``nu``
is ``omega^2 a^3 / (G M)``; in units of the equatorial radius ``nu = w = omega^2 R_eq^3 / (G M)``
(break-up at ``w = 1``, :mod:`dopplermap.gravity`).

:func:`roche_surface` places each cell of a :class:`~dopplermap.grid.SurfaceGrid` along its
centre's direction (latitude, longitude in the co-rotating frame; the companion towards
longitude 0, so it lies in front of the star at phase 0) on the equipotential, and returns
a :class:`Surface`: positions, outward normals ``-grad Omega / |grad Omega|``, areas
``r^2 dOmega_cell / (n . r_hat)`` (the cell's solid angle projected onto the surface) and
the effective gravity ``|grad Omega|``. Lengths are in units of the star's *reference
radius*: the equatorial radius perpendicular to the line of centres (longitude 90 deg;
the equatorial radius of a single star). ``[star] radius`` (or the radius implied by vsini)
is that radius, and vsini is ``omega R_ref sin i`` (a point towards the companion moves
faster). A sphere (``q = 0``, ``nu = 0``) gives the unit vectors, the cells' solid angles and
unit gravity exactly: the spherical model is the zero-distortion limit.

The star's orbital motion (the centre of mass's radial velocity) is not modelled here:
the per-epoch rv shifts absorb it, or the profiles are given in the star's rest frame.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .errors import DopplermapInputError
from .grid import SurfaceGrid

__all__ = ["Surface", "roche_potential", "roche_gradient", "lagrange_l1", "roche_surface", "rotating_surface",
           "tidal_surface", "surface_radius", "eggleton_radius", "polar_to_equatorial", "radius_ratio_at", "volume_radius",
           "critical_omega_fraction", "fill_from_separation"]

_BISECT = 30  # bisection steps along each ray before the Newton steps


@dataclasses.dataclass(frozen=True, eq=False)
class Surface:
    """Shape of a distorted star, one row per cell, in the co-rotating frame (z: rotation axis).

    Attributes:
        position: (n_cell, 3) cell centres in units of the reference radius (module docstring).
        normal: (n_cell, 3) outward unit normals.
        area: (n_cell,) surface areas in units of the reference radius squared (a sphere's
            are its cells' solid angles).
        gravity: (n_cell,) effective gravity relative to the pole's.
        q, nu, potential: the Roche model (module docstring); ``potential`` the surface's
            ``Omega``. fill: volume-equivalent radius over the Roche lobe's (None: single star).
        omega_kepler: ``omega / sqrt(G M / R_eq^3)`` of a single star (ELR gravity darkening), else None.
    """

    position: np.ndarray
    normal: np.ndarray
    area: np.ndarray
    gravity: np.ndarray
    q: float = 0.0
    nu: float = 0.0
    potential: float = 1.0
    fill: float | None = None
    omega_kepler: float | None = None
    kind: str = "roche"

    def subset(self, cells) -> Surface:
        """The rows of ``cells`` (an index array), the model's parameters unchanged."""
        idx = np.asarray(cells)
        return dataclasses.replace(self, position=self.position[idx], normal=self.normal[idx],
                                   area=self.area[idx], gravity=self.gravity[idx])

    @property
    def n_cell(self) -> int:
        return int(self.area.shape[0])

    @property
    def radius(self) -> np.ndarray:
        """(n_cell,) distance of each cell from the centre, reference radii."""
        return np.linalg.norm(self.position, axis=1)

    @property
    def colatitude(self) -> np.ndarray:
        """(n_cell,) colatitude of each cell's position, rad."""
        return np.arccos(np.clip(self.position[:, 2] / self.radius, -1.0, 1.0))


def roche_potential(r, q: float, nu: float):
    """``Omega`` at points ``r`` (..., 3), units of ``a`` (module docstring)."""
    x, y, z = r[..., 0], r[..., 1], r[..., 2]
    rr = np.sqrt(x * x + y * y + z * z)
    out = 1.0 / rr + 0.5 * nu * (x * x + y * y)
    if q:
        out = out + q * (1.0 / np.sqrt((x - 1.0) ** 2 + y * y + z * z) - x)
    return out


def roche_gradient(r, q: float, nu: float) -> np.ndarray:
    """``grad Omega`` at points ``r`` (..., 3): minus the effective gravity."""
    x, y, z = r[..., 0], r[..., 1], r[..., 2]
    r3 = (x * x + y * y + z * z) ** 1.5
    gx = -x / r3 + nu * x
    gy = -y / r3 + nu * y
    gz = -z / r3
    if q:
        d3 = ((x - 1.0) ** 2 + y * y + z * z) ** 1.5
        gx = gx + q * (-(x - 1.0) / d3 - 1.0)
        gy = gy - q * y / d3
        gz = gz - q * z / d3
    return np.stack([gx, gy, gz], axis=-1)


def lagrange_l1(q: float, nu: float) -> float:
    """Distance of the inner Lagrangian point from the star's centre, units of ``a``."""
    if not q > 0:
        raise DopplermapInputError(f"L1 needs a companion: mass ratio must be > 0, got {q!r}")
    from scipy.optimize import brentq

    def dx(x):  # dOmega/dx on the axis between the stars
        return -1.0 / x**2 + q * (1.0 / (1.0 - x) ** 2 - 1.0) + nu * x

    return float(brentq(dx, 1e-9, 1.0 - 1e-9, xtol=1e-15, rtol=1e-15))


def _ray_limit(q: float, nu: float) -> float:
    """A radius beyond the surface along every ray, inside which ``Omega`` falls once through
    each value above the critical one (the L1 point; or the single star's break-up radius)."""
    lim = math.inf
    if q > 0:
        lim = lagrange_l1(q, nu)
    if nu > 0:
        lim = min(lim, nu ** (-1.0 / 3.0))
    return lim


def surface_radius(directions, q: float, nu: float, potential: float) -> np.ndarray:
    """Distance from the star's centre to the equipotential ``Omega = potential`` along each
    unit vector ``directions`` (n, 3), in units of ``a`` (for a single star in units of
    ``R_eq`` when ``nu = w`` and ``potential = 1 + w / 2``)."""
    _check(q, nu)
    d = np.atleast_2d(np.asarray(directions, dtype=float))
    return _radii(d, q, nu, float(potential), _ray_limit(q, nu))


def _radii(directions, q: float, nu: float, potential: float, r_max: float) -> np.ndarray:
    """Distance along each unit vector (n, 3) to the equipotential ``Omega = potential``:
    bisection to a bracket of 2^-30, then Newton steps kept inside it."""
    # the point mass alone: r = 1/potential, kept exact (the sphere's limit)
    if q == 0 and nu == 0:
        return np.full(directions.shape[0], 1.0 / potential)
    lo = np.full(directions.shape[0], 0.5 / potential)  # Omega >= 1/r there, twice the potential
    hi = np.full(directions.shape[0], r_max if np.isfinite(r_max) else 2.0 / potential)
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        inside = roche_potential(mid[:, None] * directions, q, nu) > potential
        lo = np.where(inside, mid, lo)
        hi = np.where(inside, hi, mid)
    r = 0.5 * (lo + hi)
    for _ in range(3):
        p = r[:, None] * directions
        slope = np.sum(roche_gradient(p, q, nu) * directions, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = r - (roche_potential(p, q, nu) - potential) / slope
        r = np.where(np.isfinite(step) & (step >= lo) & (step <= hi), step, r)
    return r


def _directions(lat, lon) -> np.ndarray:
    cl = np.cos(lat)
    return np.stack([cl * np.cos(lon), cl * np.sin(lon), np.sin(lat)], axis=-1)


def _check(q, nu, sync=None):
    if not (np.isfinite(q) and q >= 0):
        raise DopplermapInputError(f"mass ratio q (companion / star) must be >= 0, got {q!r}")
    if not (np.isfinite(nu) and nu >= 0):
        raise DopplermapInputError(f"rotation parameter nu must be >= 0, got {nu!r}")
    if sync is not None and not (np.isfinite(sync) and sync > 0):
        raise DopplermapInputError(f"synchronicity F must be > 0, got {sync!r}")


def _gauss_sphere(n_theta: int = 96, n_phi: int = 192):
    """Quadrature nodes (unit vectors) and weights (sr) on the sphere: Gauss-Legendre in
    cos(colatitude), uniform in longitude."""
    x, w = np.polynomial.legendre.leggauss(n_theta)
    phi = (np.arange(n_phi) + 0.5) * 2.0 * np.pi / n_phi
    lat = np.arcsin(x)[:, None] + 0.0 * phi[None, :]
    lon = phi[None, :] + 0.0 * lat
    weights = (w[:, None] * (2.0 * np.pi / n_phi)) + 0.0 * lat
    return _directions(lat.ravel(), lon.ravel()), weights.ravel()


def volume_radius(q: float, nu: float, potential: float, *, n_theta: int = 96, n_phi: int = 192) -> float:
    """Volume-equivalent radius ``(3 V / 4 pi)^(1/3)`` of the equipotential, units of ``a``."""
    _check(q, nu)
    d, w = _gauss_sphere(n_theta, n_phi)
    r = _radii(d, q, nu, potential, _ray_limit(q, nu))
    return float((np.sum(w * r**3) / (4.0 * np.pi)) ** (1.0 / 3.0))


def eggleton_radius(q_star: float) -> float:
    """Eggleton's (1983) Roche-lobe volume-equivalent radius over the separation,
    ``0.49 q^(2/3) / (0.6 q^(2/3) + ln(1 + q^(1/3)))``, with ``q_star = M_star / M_companion``
    (the inverse of this module's ``q``); better than 1 % for every mass ratio."""
    q23 = q_star ** (2.0 / 3.0)
    return 0.49 * q23 / (0.6 * q23 + math.log1p(q_star ** (1.0 / 3.0)))


def polar_to_equatorial(omega_fraction: float) -> float:
    """``R_eq / R_p`` of a Roche star rotating at ``omega / omega_crit`` (closed form of the
    equator's cubic: ``3 cos((pi + arccos(f)) / 3) / f``; 1.5 at critical rotation)."""
    f = float(omega_fraction)
    if not 0.0 <= f <= 1.0:
        raise DopplermapInputError(f"omega / omega_crit must be in [0, 1], got {omega_fraction!r}")
    if f < 1e-6:
        return 1.0 + 4.0 * f * f / 27.0  # series: the closed form loses digits near 0
    return 3.0 * math.cos((math.pi + math.acos(f)) / 3.0) / f


def critical_omega_fraction(w: float) -> float:
    """``omega / omega_crit`` of a single star with ``w = omega^2 R_eq^3 / (G M)``:
    ``omega_crit^2 = 8 G M / (27 R_p^3)``, ``R_p = R_eq / (1 + w / 2)``."""
    return math.sqrt(w * 27.0 / 8.0) / (1.0 + 0.5 * w) ** 1.5


def radius_ratio_at(w: float) -> float:
    """``R_eq / R_p`` of a single star with ``w`` (the equipotential through the equator)."""
    return 1.0 + 0.5 * w


def _w_from_fraction(omega_fraction: float) -> float:
    """``w`` of a star rotating at ``omega / omega_crit``: ``w = (8/27) f^2 (R_eq / R_p)^3``."""
    return 8.0 / 27.0 * omega_fraction**2 * polar_to_equatorial(omega_fraction) ** 3


def _surface(grid: SurfaceGrid, q: float, nu: float, potential: float, r_ref: float, *, fill=None,
             omega_kepler=None) -> Surface:
    d = _directions(np.asarray(grid.lat, float), np.asarray(grid.lon, float))
    r = _radii(d, q, nu, potential, _ray_limit(q, nu))
    pos = r[:, None] * d
    grad = roche_gradient(pos, q, nu)
    g = np.linalg.norm(grad, axis=1)
    normal = -grad / g[:, None]
    cos_tilt = np.sum(normal * d, axis=1)
    if not np.all(cos_tilt > 0.05):
        raise DopplermapInputError("the Roche surface is too distorted for a grid of radial cells (a normal "
                                   "tilts by more than 87 deg from its ray); choose a smaller fill or rotation")
    area = np.asarray(grid.area, float) * r * r / cos_tilt
    g_pole = float(np.linalg.norm(roche_gradient(_radii(np.array([[0.0, 0.0, 1.0]]), q, nu, potential,
                                                        _ray_limit(q, nu))[:, None] * np.array([[0.0, 0.0, 1.0]]),
                                                 q, nu)))
    return Surface(position=pos / r_ref, normal=normal, area=area / r_ref**2, gravity=g / g_pole, q=float(q),
                   nu=float(nu), potential=float(potential), fill=fill, omega_kepler=omega_kepler)


def rotating_surface(grid: SurfaceGrid, *, w: float | None = None, omega_fraction: float | None = None) -> Surface:
    """A single rotating star: ``w = omega^2 R_eq^3 / (G M)`` (see
    :func:`dopplermap.gravity.roche_parameter`), or ``omega / omega_crit``; ``w = 0`` is the sphere."""
    if (w is None) == (omega_fraction is None):
        raise DopplermapInputError("give the rotation as w or as omega_fraction (omega / omega_crit), one of them")
    if omega_fraction is not None:
        if not 0.0 <= omega_fraction < 1.0:
            raise DopplermapInputError(f"omega / omega_crit must be in [0, 1), got {omega_fraction!r}")
        w = _w_from_fraction(omega_fraction)
    if not (np.isfinite(w) and 0.0 <= w < 1.0):
        raise DopplermapInputError(f"w = omega^2 R_eq^3 / (G M) must be in [0, 1) (1: break-up), got {w!r}")
    # lengths in R_eq: the equator is at Omega = 1 + w / 2
    return _surface(grid, 0.0, float(w), 1.0 + 0.5 * w, 1.0, omega_kepler=math.sqrt(w))


def tidal_surface(grid: SurfaceGrid, q: float, fill: float, *, sync: float = 1.0) -> Surface:
    """A star in a binary: mass ratio ``q = M_companion / M_star``, filling the fraction ``fill``
    of its Roche lobe (volume-equivalent radii, below 1), rotating ``sync`` times the
    orbital rate (1: synchronous). Lengths in units of the reference radius (module docstring)."""
    _check(q, 0.0, sync)
    if not q > 0:
        raise DopplermapInputError(f"a tidal surface needs a companion: mass ratio must be > 0, got {q!r}")
    if not (np.isfinite(fill) and 0.0 < fill < 1.0):
        raise DopplermapInputError(f"Roche-lobe fill must be in (0, 1) (a cell at L1 has no normal), got {fill!r}")
    nu = sync**2 * (1.0 + q)
    x1 = lagrange_l1(q, nu)
    pot_l1 = float(roche_potential(np.array([x1, 0.0, 0.0]), q, nu))
    r_lobe = volume_radius(q, nu, pot_l1)  # the cusp at L1 needs the finer quadrature
    potential = pot_l1
    if fill < 1.0:
        from scipy.optimize import brentq

        target = fill * r_lobe
        # a smooth surface inside the lobe: a coarser quadrature is exact to ~1e-8
        # the potential of a small star is about 1 / r + q: bracket around it
        potential = brentq(lambda p: volume_radius(q, nu, p, n_theta=48, n_phi=96) - target, pot_l1,
                           1.0 / (0.2 * target) + q + nu, xtol=1e-12, rtol=1e-12)
    r_ref = float(_radii(np.array([[0.0, 1.0, 0.0]]), q, nu, potential, x1)[0])
    return _surface(grid, q, nu, potential, r_ref, fill=float(fill))


def fill_from_separation(q: float, radius_over_a: float, *, sync: float = 1.0) -> float:
    """The Roche-lobe fill (volume-equivalent radii) of a star whose reference radius (module
    docstring) is ``radius_over_a`` of the separation: the equipotential through the point at
    that distance perpendicular to the line of centres, ``q = M_companion / M_star``, rotating
    ``sync`` times the orbital rate."""
    _check(q, 0.0, sync)
    if not q > 0:
        raise DopplermapInputError(f"a separation needs a companion: mass ratio must be > 0, got {q!r}")
    if not (np.isfinite(radius_over_a) and radius_over_a > 0):
        raise DopplermapInputError(f"the star's radius over the separation must be > 0, got {radius_over_a!r}")
    nu = sync**2 * (1.0 + q)
    x1 = lagrange_l1(q, nu)
    pot_l1 = float(roche_potential(np.array([x1, 0.0, 0.0]), q, nu))
    y_lobe = float(_radii(np.array([[0.0, 1.0, 0.0]]), q, nu, pot_l1, x1)[0])
    if radius_over_a >= y_lobe:
        raise DopplermapInputError(f"the star's radius is {radius_over_a:.4g} of the separation, at or beyond its "
                                   f"Roche lobe there ({y_lobe:.4g}, mass ratio {q:g}, synchronicity {sync:g}): "
                                   "it would overflow the lobe; check the radius and the separation")
    potential = float(roche_potential(np.array([0.0, radius_over_a, 0.0]), q, nu))
    return volume_radius(q, nu, potential, n_theta=48, n_phi=96) / volume_radius(q, nu, pot_l1)


def roche_surface(grid: SurfaceGrid, *, w: float | None = None, omega_fraction: float | None = None,
                  q: float = 0.0, fill: float | None = None, sync: float = 1.0) -> Surface:
    """A :class:`Surface` for ``grid``: a single rotating star (``w`` or ``omega_fraction``) or,
    with a mass ratio ``q > 0``, a tidally distorted one (``fill``, ``sync``)."""
    if q:
        if w is not None or omega_fraction is not None:
            raise DopplermapInputError("a tidal surface's rotation is set by its synchronicity (sync); "
                                       "give no w or omega_fraction with a mass ratio")
        if fill is None:
            raise DopplermapInputError("a tidal surface needs its Roche-lobe fill (0 < fill < 1)")
        return tidal_surface(grid, q, fill, sync=sync)
    return rotating_surface(grid, w=w, omega_fraction=omega_fraction)
