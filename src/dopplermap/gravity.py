"""Gravity darkening of a rotating star (von Zeipel) on a Roche-model surface.

The Roche potential of a rigidly rotating star of mass ``M`` and angular velocity ``omega``
(colatitude ``theta``) is ``Phi = -G M / r - omega^2 r^2 sin^2(theta) / 2``. The surface is
the equipotential through the equatorial radius ``R_eq``; in units of ``R_eq`` its radius
``x(theta)`` solves ``1/x + w x^2 sin^2(theta) / 2 = 1 + w / 2`` with
``w = omega^2 R_eq^3 / (G M)`` (break-up at ``w = 1``, where ``R_pole = 2/3 R_eq``). Effective gravity
``g = -grad Phi`` and the local temperature ``T = T_pole (g / g_pole)^beta`` (von Zeipel:
``beta = 0.25`` for radiative envelopes, about 0.08 for convective ones).

On a spherical grid dopplermap keeps the spherical geometry of the cells (mu, areas and
velocities); on a grid with a distorted surface (:mod:`dopplermap.roche`) the geometry is the
surface's and the gravity its cells'. Either way gravity darkening is a per-cell
continuum-intensity factor ``B_lambda(T_k t) / B_lambda(T_k)`` with ``t = T / T_pole`` (1 at
the pole), which the model multiplies into its weights (see
:func:`dopplermap.broadening.apply_cell_factors`). Two laws (:data:`dopplermap.choices.GRAVITY_LAWS`):

* ``"von_zeipel"``: ``t = (g / g_pole)^beta``;
* ``"elr"`` (Espinosa Lara & Rieutord 2011, A&A 533, A43), for a single rotating star:
  ``t = (g / g_pole)^(1/4) sqrt(tan(vartheta) / tan(theta)) exp(-omega^2 r_p^3 / 6)``, where
  ``cos(vartheta) + ln tan(vartheta / 2) = omega^2 r^3 cos^3(theta) / 3 + cos(theta) + ln tan(theta / 2)``,
  ``omega = Omega / sqrt(G M / R_eq^3)`` (so ``omega^2 = w``), ``r`` the radius in units of
  ``R_eq`` and ``r_p`` the polar one. Its limits: the flux over gravity is
  ``exp(2 omega^2 r_p^3 / 3)`` at the pole and ``(1 - omega^2)^(-2/3)`` at the equator (times
  the same constant), and ``beta = 1/4`` as ``omega -> 0``.

Off by default; when off nothing is computed.
"""

from __future__ import annotations

import math

import numpy as np

from .choices import GRAVITY_LAWS, check
from .constants import DAY_S, G_SI, M_SUN_KG, R_SUN_KM
from .errors import DopplermapInputError
from .geometry import StarParams
from .grid import SurfaceGrid
from .profiles import planck
from .roche import Surface, roche_surface

__all__ = ["roche_parameter", "roche_radius", "effective_gravity", "gravity_darkening_factors",
           "log_g", "breakup", "elr_flux_ratio", "temperature_ratio", "star_surface"]

W_BREAKUP = 1.0  # omega^2 R_eq = G M / R_eq^2: centrifugal force equals gravity at the equator


def equatorial_radius_km(star: StarParams) -> float:
    """Equatorial radius (km) from ``star.radius`` or from vsini, period and inclination
    (:attr:`StarParams.radius_rsun`)."""
    return float(star.radius_rsun) * R_SUN_KM


def log_g(mass: float, radius: float) -> float:
    """Surface gravity ``log10(G M / R^2)`` in cgs (``g`` in cm s^-2) of a star of ``mass``
    (M_sun) and ``radius`` (R_sun): the Sun's is 4.44."""
    from astropy import constants as const
    from astropy import units as u

    g = const.G * (mass * u.M_sun) / (radius * u.R_sun) ** 2
    return float(np.log10(g.to(u.cm / u.s**2).value))


def _roche_w(mass: float, period: float, r_eq_km: float) -> float:
    if not (np.isfinite(mass) and mass > 0):
        raise DopplermapInputError(f"mass must be > 0 M_sun, got {mass!r}")
    if not (np.isfinite(period) and period > 0):
        raise DopplermapInputError(f"period must be > 0 days, got {period!r}")
    omega = 2.0 * math.pi / (period * DAY_S)
    r = r_eq_km * 1e3
    return omega**2 * r**3 / (G_SI * mass * M_SUN_KG)


def _breakup_message(w: float, mass: float, period: float, r_eq_km: float) -> str:
    return (f"star rotates at or beyond break-up: omega^2 R_eq^3 / (G M) = {w:.3f} >= 1 "
            f"(mass {mass} M_sun, period {period} d, R_eq {r_eq_km / R_SUN_KM:.3f} R_sun)")


def breakup(star: StarParams, mass: float) -> str | None:
    """Why a star of ``mass`` (M_sun) with these rotation parameters cannot exist (it would
    rotate at or beyond break-up), or None: a physical check of one set of parameters."""
    r_eq = equatorial_radius_km(star)
    w = _roche_w(mass, star.period, r_eq)
    return _breakup_message(w, mass, star.period, r_eq) if w >= W_BREAKUP else None


def roche_parameter(mass: float, period: float, r_eq_km: float) -> float:
    """``w = omega^2 R_eq^3 / (G M)``; mass in M_sun, period in days, R_eq in km."""
    w = _roche_w(mass, period, r_eq_km)
    if w >= W_BREAKUP:
        raise DopplermapInputError(_breakup_message(w, mass, period, r_eq_km))
    return w


def roche_radius(colatitude, w: float, iterations: int = 40) -> np.ndarray:
    """Surface radius in units of R_eq at ``colatitude`` (rad) for Roche parameter ``w``."""
    s2 = np.sin(np.asarray(colatitude, dtype=float)) ** 2
    rhs = 1.0 + 0.5 * w
    x = np.full_like(s2, 1.0 / rhs)  # polar value; the root lies in [1/rhs, 1]
    for _ in range(iterations):
        f = 1.0 / x + 0.5 * w * x * x * s2 - rhs
        df = -1.0 / (x * x) + w * x * s2
        x = np.clip(x - f / df, 1.0 / rhs, 1.0)
    return x


def effective_gravity(colatitude, w: float) -> np.ndarray:
    """|g| in units of G M / R_eq^2 on the Roche surface."""
    th = np.asarray(colatitude, dtype=float)
    x = roche_radius(th, w)
    s, c = np.sin(th), np.cos(th)
    g_r = -1.0 / (x * x) + w * x * s * s
    g_t = w * x * s * c
    return np.hypot(g_r, g_t)


def elr_flux_ratio(colatitude, radius, omega2: float) -> np.ndarray:
    """``(tan(vartheta) / tan(theta))^2``: ELR's flux over ``g`` at colatitude ``theta``
    (rad; the star's north-south symmetry folds it into [0, pi/2]) and radius ``r``
    (units of R_eq), for ``omega^2 = w`` (module docstring); its limits at the pole and
    equator are taken where the root loses digits."""
    th = np.asarray(colatitude, dtype=float)
    th = np.minimum(np.abs(th), np.pi - np.abs(th)) + 0.0 * np.asarray(radius, dtype=float)
    r = np.asarray(radius, dtype=float) + 0.0 * th
    if not (np.isfinite(omega2) and 0.0 <= omega2 < 1.0):
        raise DopplermapInputError(f"ELR gravity darkening needs 0 <= omega^2 < 1, got {omega2!r}")
    a = omega2 * r**3 / 3.0
    c = np.cos(th)
    out = np.empty_like(th)
    pole, equator = th < 1e-4, c < 1e-4
    mid = ~(pole | equator)

    def f(x):
        return np.cos(x) + np.log(np.tan(0.5 * x))

    rhs = a[mid] * c[mid] ** 3 + f(th[mid])
    lo, hi = th[mid].copy(), np.full(rhs.shape, 0.5 * np.pi)  # f rises on (0, pi/2]: vartheta in [theta, pi/2]
    for _ in range(60):
        m = 0.5 * (lo + hi)
        below = f(m) < rhs
        lo, hi = np.where(below, m, lo), np.where(below, hi, m)
    vt = 0.5 * (lo + hi)
    out[mid] = (np.tan(vt) / np.tan(th[mid])) ** 2
    out[pole] = np.exp(2.0 * a[pole])  # vartheta / theta -> exp(omega^2 r^3 / 3)
    out[equator] = (1.0 - 3.0 * a[equator]) ** (-2.0 / 3.0)  # (pi/2 - vartheta) / (pi/2 - theta) -> (1 - omega^2 r^3)^(1/3)
    return out


def temperature_ratio(grid: SurfaceGrid, star: StarParams | None = None, mass: float | None = None, *,
                      beta: float = 0.25, law: str = "von_zeipel") -> np.ndarray:
    """(n_cell,) ``T / T_pole`` of gravity darkening by ``law`` (module docstring).

    A grid with a distorted surface (:mod:`dopplermap.roche`) gives its own gravity (and, for
    ELR, its rotation); a spherical grid takes it from the Roche model of ``star`` and ``mass``.
    """
    check(law, GRAVITY_LAWS, "gravity-darkening law")
    if not (np.isfinite(beta) and beta >= 0):
        raise DopplermapInputError(f"gravity-darkening beta must be >= 0, got {beta!r}")
    surf = grid.surface
    if surf is not None:
        g = np.asarray(surf.gravity, dtype=float)
        w = None if surf.omega_kepler is None else surf.omega_kepler**2
        colat, r = surf.colatitude, surf.radius
    else:
        if mass is None or star is None:
            raise DopplermapInputError("gravity darkening on a spherical grid needs the star and its mass (M_sun)")
        w = roche_parameter(mass, star.period, equatorial_radius_km(star))
        colat = 0.5 * np.pi - np.asarray(grid.lat, dtype=float)
        g = effective_gravity(colat, w) / effective_gravity(np.zeros(1), w)[0]
        r = roche_radius(colat, w)
    if law == "von_zeipel":
        return g**beta
    if w is None:
        raise DopplermapInputError("ELR gravity darkening (Espinosa Lara & Rieutord 2011) is for single rotating "
                                   "stars; use von Zeipel's beta for a tidally distorted one")
    r_pole = 1.0 / (1.0 + 0.5 * w)
    return (g * elr_flux_ratio(colat, r, w)) ** 0.25 * math.exp(-w * r_pole**3 / 6.0)


def gravity_darkening_factors(grid: SurfaceGrid, star: StarParams, mass: float | None, temperatures,
                              wavelength_nm: float, beta: float = 0.25, law: str = "von_zeipel") -> np.ndarray:
    """Per-cell continuum-intensity factors of gravity darkening.

    Args:
        grid: surface grid (with a distorted surface its gravity is used). star: period
            (days) and radius (or vsini and inclination). mass: stellar mass, M_sun (a
            spherical grid's Roche model). temperatures: polar temperature(s), K: one value,
            or three (photosphere, cool, hot; each component is darkened by the same
            ``T / T_pole``). wavelength_nm: band centre, nm. beta: von Zeipel exponent.
            law: ``"von_zeipel"`` or ``"elr"`` (module docstring).
    Returns:
        (n_cell,) or (n_cell, 3) factors ``B(T t) / B(T)``, 1 at the pole.
    """
    t = temperature_ratio(grid, star, mass, beta=beta, law=law)
    temps = np.atleast_1d(np.asarray(temperatures, dtype=float))
    if temps.shape not in ((1,), (3,)) or np.any(temps <= 0):
        raise DopplermapInputError(f"temperatures must be one or three values > 0 K, got {temperatures!r}")
    t_cell = temps[None, :] * t[:, None]
    fac = planck(wavelength_nm, t_cell) / planck(wavelength_nm, temps[None, :])
    return fac[:, 0] if temps.size == 1 else fac


def star_surface(grid: SurfaceGrid, star: StarParams, *, mass: float | None = None, q: float = 0.0,
                 fill: float | None = None, sync: float = 1.0) -> Surface:
    """The Roche surface of ``star`` on ``grid`` (:mod:`dopplermap.roche`): a single star's
    rotation ``w`` from ``mass`` (M_sun), its period and equatorial radius; with a companion
    (``q = M_companion / M_star > 0``) the tide of a star filling ``fill`` of its Roche lobe,
    rotating ``sync`` times the orbital rate."""
    if q:
        return roche_surface(grid, q=q, fill=fill, sync=sync)
    if mass is None:
        raise DopplermapInputError("a rotating Roche surface needs the star's mass (M_sun)")
    return roche_surface(grid, w=roche_parameter(mass, star.period, equatorial_radius_km(star)))
