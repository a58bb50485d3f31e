"""Local line profiles, limb-darkening laws and continuum intensities of the components.

Each of the three surface components (photosphere, cool spot, hot spot) has

* a local line profile ``I/Ic(v)`` at disc centre (Gaussian, Voigt or tabulated),
* a limb-darkening law ``I(mu)/I(1)`` (linear, quadratic, square-root or power-2),
* a continuum intensity relative to the photosphere (given, or Planck at T and lambda).

Profiles are evaluated with NumPy once, at set-up; limb darkening is ``jax.numpy`` so the
geometry stays differentiable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from . import _x64  # noqa: F401  (float64 JAX for every numeric module)
from ._repr import compact
from .constants import C_MS, H_PLANCK, K_BOLTZMANN
from .diagnostics import check_spot_contrast, check_wavelength, fields_checked
from .errors import DopplermapInputError
from .limb_darkening import LimbDarkening
from .units import to_unit

__all__ = [
    "LocalProfile", "gaussian", "voigt", "voigt_profile", "tabulated", "LimbDarkening", "planck",
    "intensity_ratio", "Component", "ComponentSet", "COMPONENTS",
]

COMPONENTS = ("phot", "cool", "hot")

VOIGT_TABLE_MIN = 1 << 16
"""Points from which :func:`voigt_profile` reads a table instead of evaluating each point."""
VOIGT_TABLE_TOL = 1e-12
"""Largest error of the table read, as a fraction of the profile's peak."""
_VOIGT_CHUNK = 1 << 14  # points a block: the block's temporaries stay in the cache


def voigt_profile(v, sigma: float, gamma: float) -> np.ndarray:
    """``scipy.special.voigt_profile(v, sigma, gamma)``, for many points read from a table.

    From :data:`VOIGT_TABLE_MIN` points on, the profile is interpolated by cubic Hermite
    polynomials on a uniform grid of exact values and slopes (``scipy.special.wofz``), with a
    spacing ``h`` that bounds the error, ``h^4 max|V4| / 384`` (``V4`` the fourth derivative),
    by :data:`VOIGT_TABLE_TOL` times the peak; ``max|V4|`` is at most that of the Gaussian or
    of the Lorentzian alone, since the Voigt profile is their convolution. Written here, not
    with SciPy's ``CubicHermiteSpline``, because its interval search serves any breakpoints:
    on uniform ones an index is one multiplication (7x faster on a dense model's 3.3M points;
    scipy's direct evaluation is 14x slower: ``benchmarks/RESULTS.md``).
    """
    # scipy.special here, not at the top: with what it loads ~0.25 s of the start of runs that draw no Voigt profile
    from scipy import special

    v = np.asarray(v, dtype=float)
    if v.size < VOIGT_TABLE_MIN or not sigma > 0.0 or not np.all(np.isfinite(v)):
        return special.voigt_profile(v, sigma, gamma)
    peak = special.voigt_profile(0.0, sigma, gamma)
    m4 = 3.0 / (sigma**5 * np.sqrt(2.0 * np.pi))
    if gamma > 0.0:
        m4 = min(m4, 24.0 / (np.pi * gamma**5))
    h = (384.0 * VOIGT_TABLE_TOL * peak / m4) ** 0.25
    lo = float(v.min())
    n = int(np.ceil((float(v.max()) - lo) / h)) + 1  # intervals
    if n > v.size // 8:  # a table as large as the points saves nothing
        return special.voigt_profile(v, sigma, gamma)
    z = (lo + h * np.arange(n + 1) + 1j * gamma) / (sigma * np.sqrt(2.0))
    w = special.wofz(z)
    scale = 1.0 / (sigma * np.sqrt(2.0 * np.pi))
    f = w.real * scale
    d = (-2.0 * z * w + 2j / np.sqrt(np.pi)).real * (scale * h / (sigma * np.sqrt(2.0)))  # slope times h
    # on each interval p(t) = ((c3 t + c2) t + c1) t + c0, t in [0, 1]
    c0, c1, f1, d1 = f[:-1], d[:-1], f[1:], d[1:]
    c2 = 3.0 * (f1 - c0) - 2.0 * c1 - d1
    c3 = 2.0 * (c0 - f1) + c1 + d1
    flat = v.ravel()
    out = np.empty_like(flat)
    m = min(_VOIGT_CHUNK, flat.size)
    x, t, acc, tmp = (np.empty(m) for _ in range(4))
    idx = np.empty(m, np.intp)
    for s in range(0, flat.size, m):
        k = min(m, flat.size - s)
        xs, ts, a, g, ii = x[:k], t[:k], acc[:k], tmp[:k], idx[:k]
        np.subtract(flat[s:s + k], lo, out=xs)
        xs *= 1.0 / h
        ii[:] = xs
        np.clip(ii, 0, n - 1, out=ii)
        np.subtract(xs, ii, out=ts)
        np.take(c3, ii, out=a)
        a *= ts
        np.take(c2, ii, out=g)
        a += g
        a *= ts
        np.take(c1, ii, out=g)
        a += g
        a *= ts
        np.take(c0, ii, out=g)
        np.add(a, g, out=out[s:s + k])
    return out.reshape(v.shape)


@dataclasses.dataclass(frozen=True, eq=False)
class LocalProfile:
    """A local line profile ``I/Ic`` as a function of velocity (km/s).

    Build with :func:`gaussian`, :func:`voigt` or :func:`tabulated`. Outside a tabulated
    range the profile is continuum (1).
    """

    kind: str
    depth: float = 0.0
    fwhm: float = 0.0  # Gaussian FWHM, km/s
    fwhm_lorentz: float = 0.0  # Lorentzian FWHM (Voigt), km/s
    velocity: np.ndarray | None = None  # tabulated, km/s
    intensity: np.ndarray | None = None  # tabulated, I/Ic

    def __repr__(self) -> str:
        return compact(self, ("kind", "depth", "fwhm", "fwhm_lorentz", "velocity", "intensity", "name"))

    def __call__(self, v) -> np.ndarray:
        v = np.asarray(v, dtype=float)
        if self.kind == "gaussian":
            return 1.0 - self.depth * np.exp(-4.0 * np.log(2.0) * (v / self.fwhm) ** 2)
        if self.kind == "voigt":
            sigma = self.fwhm / (2.0 * np.sqrt(2.0 * np.log(2.0)))
            gamma = 0.5 * self.fwhm_lorentz
            from scipy import special  # here: see voigt_profile

            peak = special.voigt_profile(0.0, sigma, gamma)
            return 1.0 - self.depth * voigt_profile(v, sigma, gamma) / peak
        if self.kind == "tabulated":
            # here, not at the top: scipy.interpolate costs ~0.2 s of every run's start, and
            # only tabulated profiles use it
            from scipy.interpolate import CubicSpline

            spline = CubicSpline(self.velocity, self.intensity - 1.0, bc_type="clamped")
            inside = (v >= self.velocity[0]) & (v <= self.velocity[-1])
            return 1.0 + np.where(inside, spline(np.clip(v, self.velocity[0], self.velocity[-1])), 0.0)
        raise DopplermapInputError(f"unknown local-profile kind {self.kind!r}")

    @property
    def half_width(self) -> float:
        """Velocity beyond which the profile is continuum to better than 1e-9, km/s."""
        if self.kind == "gaussian":
            return self.fwhm / (2 * np.sqrt(2 * np.log(2))) * np.sqrt(2 * np.log(max(self.depth, 1e-300) / 1e-9 + 1))
        if self.kind == "voigt":  # Lorentzian wings fall slowly: cap at 60 FWHM
            return 60.0 * max(self.fwhm, self.fwhm_lorentz)
        return float(max(abs(self.velocity[0]), abs(self.velocity[-1])))

    def equivalent_width(self) -> float:
        """Equivalent width in km/s: the integral of ``1 - I/Ic`` over velocity."""
        hw = self.half_width
        v = np.linspace(-hw, hw, 20001)
        return float(np.trapezoid(1.0 - self(v), v))


def gaussian(depth: float, fwhm: float) -> LocalProfile:
    """Gaussian absorption line: ``1 - depth exp(-4 ln2 v^2 / fwhm^2)``; fwhm in km/s (or a Quantity)."""
    fwhm = to_unit(fwhm, "km/s", "fwhm")
    if not 0.0 <= depth < 1.0:
        raise DopplermapInputError(f"line depth must be in [0, 1), got {depth!r}")
    if not fwhm > 0.0:
        raise DopplermapInputError(f"line fwhm must be > 0 km/s, got {fwhm!r}")
    return LocalProfile("gaussian", depth=float(depth), fwhm=float(fwhm))


def voigt(depth: float, fwhm_gauss: float, fwhm_lorentz: float) -> LocalProfile:
    """Voigt absorption line of central depth ``depth``; both FWHMs in km/s (or Quantities)."""
    fwhm_gauss = to_unit(fwhm_gauss, "km/s", "fwhm_gauss")
    fwhm_lorentz = to_unit(fwhm_lorentz, "km/s", "fwhm_lorentz")
    if not 0.0 <= depth < 1.0:
        raise DopplermapInputError(f"line depth must be in [0, 1), got {depth!r}")
    if not (fwhm_gauss > 0.0 and fwhm_lorentz >= 0.0):
        raise DopplermapInputError(f"Voigt widths must be fwhm_gauss > 0, fwhm_lorentz >= 0 km/s, got {fwhm_gauss!r}, {fwhm_lorentz!r}")
    return LocalProfile("voigt", depth=float(depth), fwhm=float(fwhm_gauss), fwhm_lorentz=float(fwhm_lorentz))


def tabulated(velocity: Sequence[float], intensity: Sequence[float], name: str = "tabulated profile") -> LocalProfile:
    """Tabulated profile (velocity km/s ascending, or a Quantity; I/Ic), resampled by a cubic spline."""
    v = np.asarray(to_unit(velocity, "km/s", f"{name}: velocity"), dtype=float)
    i = np.asarray(intensity, dtype=float)
    if v.ndim != 1 or v.shape != i.shape or v.size < 4:
        raise DopplermapInputError(f"{name}: velocity and intensity must be 1-D of equal length >= 4, got {v.shape} and {i.shape}")
    if not (np.all(np.isfinite(v)) and np.all(np.isfinite(i))):
        raise DopplermapInputError(f"{name}: velocity/intensity contain NaN or inf")
    if np.any(np.diff(v) <= 0):
        raise DopplermapInputError(f"{name}: velocity must be strictly increasing")
    return LocalProfile("tabulated", velocity=v, intensity=i)


def planck(wavelength_nm, temperature):
    """Planck spectral radiance B_lambda(T), W m^-3 sr^-1; wavelength in nm, T in K (or Quantities)."""
    lam = np.asarray(to_unit(wavelength_nm, "nm", "wavelength", kind="spectral"), dtype=float) * 1e-9
    t = np.asarray(to_unit(temperature, "K", "temperature", kind="temperature"), dtype=float)
    return 2.0 * H_PLANCK * C_MS**2 / lam**5 / np.expm1(H_PLANCK * C_MS / (lam * K_BOLTZMANN * t))


def intensity_ratio(temperature: float, t_phot: float, wavelength_nm: float) -> float:
    """Continuum intensity at ``temperature`` relative to the photosphere (Planck).

    Temperatures in K and the wavelength in nm, or astropy Quantities (``6000 * u.AA``).
    """
    temperature = to_unit(temperature, "K", "temperature", kind="temperature")
    t_phot = to_unit(t_phot, "K", "t_phot", kind="temperature")
    wavelength_nm = to_unit(wavelength_nm, "nm", "wavelength_nm", kind="spectral")
    for name, val in (("temperature", temperature), ("t_phot", t_phot), ("wavelength_nm", wavelength_nm)):
        if not val > 0:
            raise DopplermapInputError(f"{name} must be > 0, got {val!r}")
    check_wavelength(wavelength_nm, "wavelength_nm")
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = float(planck(wavelength_nm, temperature) / planck(wavelength_nm, t_phot))
    if not np.isfinite(ratio):
        raise DopplermapInputError(f"wavelength_nm = {wavelength_nm:g}: the Planck intensity ratio of {temperature:g} K "
                                   f"to {t_phot:g} K overflows at {wavelength_nm:g} nm; give the wavelength in nm")
    return ratio


@dataclasses.dataclass(frozen=True)
class Component:
    """One surface component: local profile, limb darkening and continuum intensity."""

    profile: LocalProfile
    limb_darkening: LimbDarkening = LimbDarkening()
    intensity: float = 1.0

    def __repr__(self) -> str:
        return compact(self)


@dataclasses.dataclass(frozen=True)
class ComponentSet:
    """Photosphere, cool spot and hot spot, in that order (``COMPONENTS``)."""

    phot: Component
    cool: Component
    hot: Component

    def __repr__(self) -> str:
        return "ComponentSet(" + ", ".join(
            f"{k}={getattr(self, k).profile.kind} I={float(getattr(self, k).intensity):.3g}"
            for k in ("phot", "cool", "hot")) + ")"

    def __post_init__(self):
        check_spot_contrast(tuple(c.intensity for c in self), what="continuum intensities (phot, cool, hot)",
                            where="line components")

    def __iter__(self):
        return iter((self.phot, self.cool, self.hot))

    @classmethod
    def from_temperatures(cls, t_phot: float, t_cool: float, t_hot: float, wavelength_nm: float,
                          profiles: Sequence[LocalProfile], limb_darkening: Sequence[LimbDarkening]):
        """Components with Planck intensity ratios at ``wavelength_nm``."""
        temps = (t_phot, t_cool, t_hot)
        if len(profiles) != 3 or len(limb_darkening) != 3:
            raise DopplermapInputError(f"one local profile and one limb-darkening law per component {COMPONENTS}: "
                                       f"got {len(profiles)} profiles and {len(limb_darkening)} laws")
        comps = [Component(p, ld, intensity_ratio(t, t_phot, wavelength_nm))
                 for p, ld, t in zip(profiles, limb_darkening, temps, strict=True)]
        check_spot_contrast([to_unit(t, "K", "temperature", kind="temperature") for t in temps],
                            what="temperatures (phot, cool, hot)", unit=" K", where="line components")
        with fields_checked():  # the intensities follow the temperatures just checked
            return cls(*comps)
