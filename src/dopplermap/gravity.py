"""Gravity darkening of a rotating star (von Zeipel) on a Roche-model surface.

The Roche potential of a rigidly rotating star of mass ``M`` and angular velocity ``omega``
(colatitude ``theta``) is ``Phi = -G M / r - omega^2 r^2 sin^2(theta) / 2``. The surface is
the equipotential through the equatorial radius ``R_eq``; in units of ``R_eq`` its radius
``x(theta)`` solves ``1/x + w x^2 sin^2(theta) / 2 = 1 + w / 2`` with
``w = omega^2 R_eq^3 / (G M)`` (break-up at ``w = 1``, where ``R_pole = 2/3 R_eq``). Effective gravity
``g = -grad Phi`` and the local temperature ``T = T_pole (g / g_pole)^beta`` (von Zeipel:
``beta = 0.25`` for radiative envelopes, about 0.08 for convective ones).

dopplermap keeps the spherical geometry of the cells (mu, areas and velocities) and applies
gravity darkening as a per-cell continuum-intensity factor ``B_lambda(T_k g^beta...) /
B_lambda(T_k)`` (1 at the pole), which the model multiplies into its weights (see
:func:`dopplermap.broadening.apply_cell_factors`). Off by default; when off nothing is
computed.
"""

from __future__ import annotations

import math

import numpy as np

from .constants import DAY_S, G_SI, M_SUN_KG, R_SUN_KM
from .errors import DopplermapInputError
from .geometry import StarParams
from .grid import SurfaceGrid
from .profiles import planck

__all__ = ["roche_parameter", "roche_radius", "effective_gravity", "gravity_darkening_factors",
           "log_g", "breakup"]

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


def gravity_darkening_factors(grid: SurfaceGrid, star: StarParams, mass: float, temperatures, wavelength_nm: float,
                              beta: float = 0.25) -> np.ndarray:
    """Per-cell continuum-intensity factors of gravity darkening.

    Args:
        grid: surface grid. star: period (days) and radius (or vsini and inclination).
        mass: stellar mass, M_sun. temperatures: polar temperature(s), K: one value, or
            three (photosphere, cool, hot; each component is darkened by the same
            ``(g / g_pole)^beta``). wavelength_nm: band centre, nm. beta: von Zeipel exponent.
    Returns:
        (n_cell,) or (n_cell, 3) factors ``B(T g^beta) / B(T)``, 1 at the pole.
    """
    if not (np.isfinite(beta) and beta >= 0):
        raise DopplermapInputError(f"gravity-darkening beta must be >= 0, got {beta!r}")
    w = roche_parameter(mass, star.period, equatorial_radius_km(star))
    colat = 0.5 * np.pi - np.asarray(grid.lat, dtype=float)
    g = effective_gravity(colat, w) / effective_gravity(np.zeros(1), w)[0]
    temps = np.atleast_1d(np.asarray(temperatures, dtype=float))
    if temps.shape not in ((1,), (3,)) or np.any(temps <= 0):
        raise DopplermapInputError(f"temperatures must be one or three values > 0 K, got {temperatures!r}")
    t_cell = temps[None, :] * g[:, None] ** beta
    fac = planck(wavelength_nm, t_cell) / planck(wavelength_nm, temps[None, :])
    return fac[:, 0] if temps.size == 1 else fac
