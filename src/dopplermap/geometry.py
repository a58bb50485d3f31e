"""Star parameters and the per-epoch geometry of every surface cell.

Conventions (see ``docs/conventions.md``): the rotation axis is z, the observer lies in
the x-z plane at ``inclination`` from the visible (north) pole. Longitude 0 faces the
observer at phase 0; the star rotates prograde, so a cell's rotation angle is
``alpha = lon + Omega(lat) (t - t0)`` and the central-meridian longitude at phase ``phi``
is ``-2 pi phi`` (mod 2 pi). A positive line-of-sight velocity is a redshift (receding).
Differential rotation is solar-like: ``Omega(lat) = Omega_eq - dOmega sin^2(lat)``.
All functions here are pure ``jax.numpy`` and differentiable in the star parameters.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from . import (
    _x64,  # noqa: F401  (float64 JAX for every numeric module)
    choices,
)
from ._repr import compact
from .constants import DAY_S, R_SUN_KM
from .diagnostics import check_inclination, check_radius
from .errors import DopplermapInputError
from .units import to_days, to_epoch, to_unit

__all__ = ["StarParams", "rotation_phase", "Rotation", "cell_geometry", "CellGeometry", "limb_weight", "limb_half_width", "LIMB_WEIGHTS"]

LIMB_WEIGHTS = {"smooth": True, "sharp": False}
"""``cell_geometry(limb=...)`` (:data:`dopplermap.choices.LIMB_WEIGHTS`): whether a cell's projected area
is averaged over the cell where the limb cuts it."""


@dataclasses.dataclass(frozen=True)
class StarParams:
    """Rotation and orientation of the star.

    Attributes:
        inclination: angle between rotation axis and line of sight, deg, in (0, 90].
        vsini: projected equatorial velocity, km/s (> 0). Give it, or ``radius``.
        period: equatorial rotation period, days (> 0).
        t0: reference time of phase 0, days (same time scale as the epochs).
        domega: differential-rotation shear dOmega, rad/day (0 = rigid rotation).
        radius: equatorial radius, solar radii; used when ``vsini`` is None.
        name: the star's name (``[star] name``), or None: a label for figures, reports and the
            FITS keyword OBJECT; no computation reads it, and fingerprints leave it out.

    Each may also be an astropy Quantity (``vsini=40000 * u.m / u.s``, ``inclination=1 * u.rad``,
    ``domega=0.02 * u.rad / u.d``) and ``t0`` an astropy ``Time`` (taken to BJD_TDB, see
    :mod:`dopplermap.units`); they are converted to the units above.
    """

    inclination: float = 60.0
    vsini: float | None = 40.0
    period: float = 1.0
    t0: float = 0.0
    domega: float = 0.0
    radius: float | None = None
    name: str | None = dataclasses.field(default=None, compare=False, metadata={"fingerprint": False})

    def __post_init__(self):
        conv = {"inclination": lambda x: to_unit(x, "deg", "inclination"),
                "vsini": lambda x: to_unit(x, "km/s", "vsini"),
                "period": lambda x: to_days(x, "period"),
                "t0": lambda x: to_epoch(x, "t0"),
                "domega": lambda x: to_unit(x, "rad/d", "domega"),
                "radius": lambda x: to_unit(x, "R_sun", "radius")}
        for name, f in conv.items():
            v = getattr(self, name)
            if v is not None and not isinstance(v, (int, float)):
                object.__setattr__(self, name, f(v))  # frozen: convert Quantity/Time once, at construction
        if self.name is not None:
            object.__setattr__(self, "name", str(self.name).strip() or None)
        check_star(self)
        warn_star(self)

    def __repr__(self) -> str:
        return compact(self, ("name", "inclination", "vsini", "period", "t0", "domega", "radius"))

    @property
    def omega_eq(self) -> float:
        """Equatorial angular velocity, rad/day."""
        return 2.0 * math.pi / self.period

    @property
    def radius_rsun(self) -> float:
        """Equatorial radius in R_sun: ``radius``, or the one implied by ``P vsini / (2 pi sin i)``."""
        if self.radius is not None:
            return self.radius
        return self.period * DAY_S * self.vsini / (2.0 * math.pi * R_SUN_KM * math.sin(math.radians(self.inclination)))

    @property
    def vsini_kms(self) -> float:
        """vsini in km/s, from ``vsini`` or from ``radius``, ``period`` and ``inclination``."""
        if self.vsini is not None:
            return self.vsini
        veq = 2.0 * math.pi * self.radius * R_SUN_KM / (self.period * DAY_S)
        return veq * math.sin(math.radians(self.inclination))

    def replace(self, **changes) -> StarParams:
        return dataclasses.replace(self, **changes)


def _is_concrete(x) -> bool:
    return isinstance(x, (int, float, np.floating, np.integer))


def check_star(star: StarParams) -> None:
    """Raise ``ValueError`` naming the field for any out-of-range star parameter."""
    inc = star.inclination
    if _is_concrete(inc) and not (0.0 < float(inc) <= 90.0):
        raise DopplermapInputError(f"inclination must be in (0, 90] deg, got {inc!r}")
    if star.vsini is None and star.radius is None:
        raise DopplermapInputError("give either vsini (km/s) or radius (R_sun), got neither")
    if _is_concrete(star.vsini) and not float(star.vsini) > 0.0:
        raise DopplermapInputError(f"vsini must be > 0 km/s, got {star.vsini!r}")
    if _is_concrete(star.radius) and not float(star.radius) > 0.0:
        raise DopplermapInputError(f"radius must be > 0 R_sun, got {star.radius!r}")
    if _is_concrete(star.period) and not float(star.period) > 0.0:
        raise DopplermapInputError(f"period must be > 0 days, got {star.period!r}")
    for name in ("inclination", "period", "t0", "domega"):
        v = getattr(star, name)
        if _is_concrete(v) and not math.isfinite(float(v)):
            raise DopplermapInputError(f"{name} must be finite, got {v!r}")


def warn_star(star: StarParams) -> None:
    """Warn about legal star parameters that look like a unit mistake: an inclination that
    could be in radians, a radius (given or implied) outside the range of stars."""
    check_inclination(star.inclination)
    if all(_is_concrete(getattr(star, k)) for k in ("inclination", "period")) and \
            _is_concrete(star.radius if star.radius is not None else star.vsini):
        how = "given" if star.radius is not None else (
            f"implied by P vsini / (2 pi sin i) with P = {star.period:g} d, vsini = {star.vsini:g} km/s, "
            f"i = {star.inclination:g} deg")
        check_radius(star.radius_rsun, "star", how)


def rotation_phase(times, t0: float, period: float):
    """Rotation phase in cycles (not wrapped): ``(times - t0) / period`` (Times and Quantities accepted)."""
    times, t0, period = to_epoch(times, "times"), to_epoch(t0, "t0"), to_days(period, "period")
    return (jnp.asarray(times) - t0) / period


@dataclasses.dataclass(frozen=True)
class CellGeometry:
    """Per-epoch, per-cell geometry; every array is (n_epoch, n_cell).

    Attributes:
        mu: cosine of the angle between the surface normal and the line of sight
            (<= 0 for cells on the far side).
        v_los: line-of-sight velocity, km/s, positive = receding (redshift).
        visible: the cells with a projected area > 0 (``mu > -h`` for the smooth limb,
            ``mu > 0`` for the sharp one).
        proj_area: projected solid angle ``area * limb_weight(mu, h)``, sr.
        ld_mu: the ``mu`` at which to evaluate limb darkening: ``mu`` clipped to [0, 1]
            (sharp limb), or the limb weight (smooth: ``mu`` away from the limb, in [0, h]
            within ``h`` of it), so that the weight ``LD(ld_mu) proj_area`` is as smooth
            in the inclination as ``proj_area``.
    """

    mu: jnp.ndarray
    v_los: jnp.ndarray
    visible: jnp.ndarray
    proj_area: jnp.ndarray
    ld_mu: jnp.ndarray


def limb_half_width(area, *, xp=jnp):
    """Half-range ``h`` of ``mu`` across a cell at the limb: half the side of a square cell of
    solid angle ``area`` (``h = sqrt(area) / 2``).

    At the limb ``|grad mu| = 1`` on the unit sphere, so ``mu`` runs over the cell's extent
    along the limb normal; a uniform spread over ``[-h, h]`` has the second moment
    ``h^2 / 3 = side^2 / 12`` of a square of that side in any direction.
    """
    return 0.5 * xp.sqrt(xp.asarray(area))


def limb_weight(mu, h, *, xp=jnp):
    """Cell-averaged ``max(mu, 0)``: ``(mu + h)^2 / (4 h)`` for ``|mu| < h``, ``max(mu, 0)`` outside.

    The mean of ``max(m, 0)`` for ``m`` uniform on ``[mu - h, mu + h]``: the projected area of a
    cell that the limb cuts, once differentiable in ``mu`` (so in the inclination), where
    ``max(mu, 0)`` has a kink at every limb crossing.
    """
    m = xp.clip(mu, -h, h)
    return xp.where(mu >= h, mu, (m + h) ** 2 / (4.0 * h))  # mu itself inside the disc, to the bit


class Rotation(NamedTuple):
    """The rotation :func:`cell_geometry` turns the cells with: inclination (deg), vsini
    (km/s), period (days), t0 (days), domega (rad/day). A plain tuple of 3-5 of them does
    too; the values may be traced (a fit of the inclination)."""

    inclination: object
    vsini: object
    period: object
    t0: object = 0.0
    domega: object = 0.0

    @classmethod
    def of(cls, star: StarParams) -> Rotation:
        """A star's rotation."""
        return cls(star.inclination, star.vsini_kms, star.period, star.t0, star.domega)


def cell_geometry(cells, times, rotation, *, xp=jnp, limb: str = "smooth", surface=None):
    """Geometry of every cell at every epoch (pure array code, differentiable with jax).

    Args:
        cells: ``(lat, lon, area)``: (n_cell,) rad, rad, sr (a tuple, or an object with those
            attributes such as a :class:`~dopplermap.grid.SurfaceGrid`).
        times: (n_epoch,) days.
        rotation: :class:`Rotation` (inclination deg, vsini km/s, period days, t0 days, domega
            rad/day), or a tuple of its first 3-5 fields.
        xp: array module, ``jax.numpy`` (default, differentiable) or ``numpy`` (set-up
            code: no compilation).
        surface: a distorted surface (:class:`dopplermap.roche.Surface`: cell positions,
            normals and areas in the co-rotating frame), or None for the sphere. Its cells
            rotate rigidly (``domega`` must be 0): ``mu`` is the rotated normal's component
            towards the observer, ``v_los = vsini y'`` with ``y'`` the rotated position's
            component along the direction of motion of the approaching limb (in reference
            radii), and the projected area uses the surface's areas instead of ``area``.
        limb: ``"smooth"`` (default): the projected area of a cell is ``area *``
            :func:`limb_weight` with ``h`` from :func:`limb_half_width`, so cells whose centre
            has just set still count with the part of them in view, and the model is
            differentiable in the inclination; ``"sharp"``: ``area * max(mu, 0)`` (the seed's,
            with a kink at every limb crossing).
    Returns:
        :class:`CellGeometry` with (n_epoch, n_cell) arrays.
    """
    lat, lon, area = (cells.lat, cells.lon, cells.area) if hasattr(cells, "lat") else cells
    inclination, vsini, period, t0, domega = Rotation(*rotation)
    if surface is not None:
        return _surface_geometry(surface, times, inclination, vsini, period, t0, domega, xp, limb)
    lat = xp.asarray(lat)[None, :]
    lon = xp.asarray(lon)[None, :]
    dt = (xp.asarray(times) - t0)[:, None]
    inc = xp.deg2rad(inclination)
    omega_eq = 2.0 * xp.pi / period
    omega = omega_eq - domega * xp.sin(lat) ** 2
    alpha = lon + omega * dt
    coslat = xp.cos(lat)
    mu = xp.sin(inc) * coslat * xp.cos(alpha) + xp.cos(inc) * xp.sin(lat)
    v_los = vsini * (omega / omega_eq) * coslat * xp.sin(alpha)
    return _limbed(mu, v_los, xp.asarray(area)[None, :], limb, xp)


def _limbed(mu, v_los, area, limb: str, xp) -> CellGeometry:
    """The geometry with its limb weights (``limb`` of :func:`cell_geometry`); ``area`` (1, n_cell)."""
    if LIMB_WEIGHTS[choices.check(limb, choices.LIMB_WEIGHTS, "limb")]:
        h = limb_half_width(area, xp=xp)
        ld_mu = limb_weight(mu, h, xp=xp)
        proj_area = area * ld_mu
        visible = mu > -h
    else:
        ld_mu = xp.clip(mu, 0.0, 1.0)
        proj_area = area * xp.maximum(mu, 0.0)
        visible = mu > 0.0
    return CellGeometry(mu=mu, v_los=v_los, visible=visible, proj_area=proj_area, ld_mu=ld_mu)


def _surface_geometry(surface, times, inclination, vsini, period, t0, domega, xp, limb):
    if _is_concrete(domega) and float(domega) != 0.0:
        raise DopplermapInputError(f"a distorted (Roche) surface rotates rigidly: domega must be 0, got {domega!r}")
    pos, nrm = xp.asarray(surface.position), xp.asarray(surface.normal)
    alpha = (2.0 * xp.pi / period) * (xp.asarray(times) - t0)[:, None]  # (E, 1)
    ca, sa = xp.cos(alpha), xp.sin(alpha)
    inc = xp.deg2rad(inclination)
    # a rotation by alpha about z: x' = x cos a - y sin a, y' = x sin a + y cos a
    nx = nrm[None, :, 0] * ca - nrm[None, :, 1] * sa
    mu = xp.sin(inc) * nx + xp.cos(inc) * nrm[None, :, 2]
    yp = pos[None, :, 0] * sa + pos[None, :, 1] * ca
    v_los = vsini * yp
    # the limb band from the cell's area in reference radii squared (a solid angle on the sphere)
    return _limbed(mu, v_los, xp.asarray(surface.area)[None, :], limb, xp)
