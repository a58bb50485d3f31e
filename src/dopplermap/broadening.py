"""Line broadening of local profiles: instrument, radial-tangential macroturbulence, EW scaling.

* Instrument: a Gaussian of FWHM ``c / R`` (km/s). Convolving the local profile is exact,
  because the disc integration is linear in the local profile.
* Radial-tangential (RT) macroturbulence after Gray (*The Observation and Analysis of
  Stellar Photospheres*): a fraction ``A_R`` of the surface moves radially, ``A_T = 1 - A_R``
  tangentially, each with a Gaussian speed distribution of width ``zeta`` (km/s). At
  ``mu = cos(theta)`` the kernel is::

      K(v; mu) = A_R / (sqrt(pi) zeta mu) exp(-(v / (zeta mu))^2)
               + A_T / (sqrt(pi) zeta sin(theta)) exp(-(v / (zeta sin(theta)))^2)

  It integrates to 1, is even, and has second moment
  ``zeta^2 (A_R mu^2 + A_T (1 - mu^2)) / 2`` (``zeta^2 / 4`` for equal fractions, whatever
  ``mu``); its shape, and so the local profile, depends on ``mu``.
* Equivalent-width scaling (:func:`scale_equivalent_width`), two conventions:
  ``"integrated"`` (default): ``1 - I/Ic`` is multiplied by ``EW_target / EW`` with
  ``EW = integral (1 - I/Ic) dv`` over the whole profile (its table, or where an analytic
  line differs from the continuum by more than 1e-9). ``"gaussian_fit"`` (SpotDIPy's):
  a Gaussian plus a constant, ``a exp(-(v - v0)^2 / 2 s^2) + b``, is fitted to the table
  and the continuum is taken as the table's median ``M``; with ``EW_fit = -a s sqrt(2 pi)``
  the profile becomes ``(I - M) EW_target / (EW_fit M) + 1`` (so the fitted Gaussian of the
  result has area ``EW_target / M``: the target where the table's continuum is 1, as in
  SpotDIPy, whose ``set_eqw`` this follows). Both agree on a Gaussian line
  with continuum 1; on a table whose continuum is not 1 or whose wings are not Gaussian
  they give different depths (SpotDIPy's lines 13-20 % deeper on its synthetic LSD tables).
  Where the EW is imposed is a separate choice (``[line] ew_stage``, :data:`dopplermap.choices.EW_STAGES`):
  ``"intrinsic"`` (default) scales the local line before instrumental broadening;
  ``"broadened"`` scales the instrument-broadened line, SpotDIPy's order (its Gaussian fit
  then sees the broadened table; for an integrated EW the two orders agree, since a
  unit-area convolution keeps the integral). Each component may have its own EW.
* Equivalent widths in wavelength units (SpotDIPy's ``eqw`` is in Angstrom) are converted
  with the line's rest wavelength ``lambda0``: ``EW_v = c EW_lambda / lambda0``
  (:func:`equivalent_width_kms`; e.g. 0.1 A at 6000 A is 4.997 km/s). This is the
  first-order Doppler relation ``dv = c dlambda / lambda0``, exact for the integral of a
  narrow line to ``EW / lambda0`` (~1e-5).

Convolutions are done once, at set-up, with NumPy on a fine uniform velocity grid in
Fourier space, where a Gaussian of standard deviation ``s`` is the multiplier
``exp(-2 pi^2 s^2 k^2)``; a width of 0 (the RT halves at ``mu = 0`` and ``mu = 1``) is the
identity, so no delta-function special case is needed.

A mu-dependent local profile is a :class:`MuProfile`: a table ``depth[mu_node, u_j]`` on
uniform nodes in ``mu`` (default 65 over [0, 1]) and a fine uniform velocity grid,
evaluated by cubic Lagrange interpolation in both (NumPy, no compilation);
``profile(v, mu)`` broadcasts. It has ``mu_dependent = True``, so a component holding it
goes straight into :func:`dopplermap.precompute`: the binned method separates it into a
few mu-basis templates (see :mod:`dopplermap.model`), the dense method evaluates each
cell's profile at its mu; :func:`dopplermap.forward` and :func:`dopplermap.invert` use
either unchanged. :func:`replace_profiles` swaps the profiles of a component set.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from ._linops import lagrange_weights
from .choices import EW_METHODS, EW_STAGES, EW_UNITS, check
from .constants import C_KMS
from .diagnostics import fields_checked
from .errors import DopplermapInputError
from .profiles import ComponentSet, LocalProfile, gaussian, tabulated, voigt
from .units import _is_quantity, to_unit

__all__ = [
    "instrumental_fwhm", "gaussian_kernel", "rt_macroturbulence", "rt_second_moment",
    "instrumental_broaden", "scale_equivalent_width", "gaussian_fit_ew", "MuProfile", "mu_dependent_profile",
    "mu_profile_table", "replace_profiles", "apply_cell_factors", "equivalent_width_kms", "line_profiles",
]

_FWHM_TO_SIGMA = 1.0 / (2.0 * math.sqrt(2.0 * math.log(2.0)))
DEFAULT_DV = 0.05  # km/s, fine grid of the convolutions
DEFAULT_N_MU = 65


def instrumental_fwhm(resolving_power: float) -> float:
    """FWHM (km/s) of the instrumental Gaussian for resolving power ``R``: ``c / R``."""
    if not (np.isfinite(resolving_power) and resolving_power > 0):
        raise DopplermapInputError(f"resolving_power must be a finite number > 0, got {resolving_power!r}")
    return C_KMS / float(resolving_power)


def gaussian_kernel(v, fwhm: float) -> np.ndarray:
    """Unit-area Gaussian of FWHM ``fwhm`` (km/s) at velocities ``v`` (km/s); units 1/(km/s)."""
    s = fwhm * _FWHM_TO_SIGMA
    v = np.asarray(v, dtype=float)
    return np.exp(-0.5 * (v / s) ** 2) / (s * math.sqrt(2.0 * math.pi))


def _check_rt(zeta, radial_fraction):
    if not (np.isfinite(zeta) and zeta >= 0):
        raise DopplermapInputError(f"macroturbulence zeta must be >= 0 km/s, got {zeta!r}")
    if not (0.0 <= radial_fraction <= 1.0):
        raise DopplermapInputError(f"radial_fraction must be in [0, 1], got {radial_fraction!r}")


def rt_macroturbulence(v, zeta: float, mu, radial_fraction: float = 0.5) -> np.ndarray:
    """Gray's radial-tangential macroturbulence kernel K(v; mu), 1/(km/s).

    Args:
        v: velocities, km/s. zeta: width zeta_RT, km/s (> 0). mu: cos(theta), in (0, 1)
            (at 0 or 1 one half of the kernel is a delta function, which a function of
            ``v`` cannot represent; :class:`MuProfile` handles those limits).
        radial_fraction: A_R (A_T = 1 - A_R); 0.5 = equal fractions.
    """
    _check_rt(zeta, radial_fraction)
    mu = np.asarray(mu, dtype=float)
    if np.any((mu <= 0) | (mu >= 1)) or not zeta > 0:
        raise DopplermapInputError(f"rt_macroturbulence needs 0 < mu < 1 and zeta > 0, got mu={mu!r}, zeta={zeta!r}")
    v = np.asarray(v, dtype=float)
    a_r = zeta * mu
    a_t = zeta * np.sqrt(1.0 - mu * mu)
    return (radial_fraction / (math.sqrt(math.pi) * a_r) * np.exp(-(v / a_r) ** 2)
            + (1.0 - radial_fraction) / (math.sqrt(math.pi) * a_t) * np.exp(-(v / a_t) ** 2))


def rt_second_moment(zeta: float, mu, radial_fraction: float = 0.5):
    """Analytic second moment of the RT kernel, (km/s)^2: ``zeta^2 (A_R mu^2 + A_T (1-mu^2)) / 2``."""
    mu = np.asarray(mu, dtype=float)
    return 0.5 * zeta**2 * (radial_fraction * mu**2 + (1.0 - radial_fraction) * (1.0 - mu**2))


def _fine_grid(half_width: float, pad: float, dv: float):
    """Uniform grid covering +-(half_width + pad) with an FFT-friendly length."""
    from scipy import fft as sfft  # SciPy here, not at the top: runs with tabulated local profiles need none of it

    u_max = half_width + pad
    n = sfft.next_fast_len(int(math.ceil(2.0 * u_max / dv)) + 1, real=True)
    u = (np.arange(n) - (n - 1) / 2.0) * dv
    return u


def _gauss_multiplier(k, sigma):
    return np.exp(-2.0 * math.pi**2 * np.asarray(sigma, dtype=float) ** 2 * k**2)


def _rt_multiplier(k, zeta, mu, radial_fraction):
    """Fourier transform of the RT kernel at frequencies ``k`` (cycles per km/s), mu (n_mu,)."""
    mu = np.clip(np.asarray(mu, dtype=float), 0.0, 1.0)[:, None]
    s_r = zeta * mu / math.sqrt(2.0)
    s_t = zeta * np.sqrt(1.0 - mu * mu) / math.sqrt(2.0)
    return radial_fraction * _gauss_multiplier(k, s_r) + (1.0 - radial_fraction) * _gauss_multiplier(k, s_t)


def _convolved_depths(profile: LocalProfile, multipliers_fn, pad: float, dv: float):
    """Depth ``1 - I/Ic`` of ``profile`` convolved with kernels given in Fourier space.

    Returns (u (n_u,), depth (n_kernel, n_u)).
    """
    from scipy import fft as sfft

    u = _fine_grid(profile.half_width, pad, dv)
    depth = 1.0 - profile(u)
    k = sfft.rfftfreq(u.size, d=dv)
    spec = sfft.rfft(depth)
    mult = np.atleast_2d(multipliers_fn(k))
    out = sfft.irfft(spec[None, :] * mult, n=u.size, axis=-1)
    return u, out


def instrumental_broaden(profile: LocalProfile, resolving_power: float, *, dv: float = DEFAULT_DV) -> LocalProfile:
    """Local profile convolved with the instrumental Gaussian of FWHM ``c / R``.

    Gaussian and Voigt profiles stay analytic (widths add in quadrature, the depth drops so
    that the equivalent width is kept); tabulated ones are convolved on a grid of step ``dv``.
    """
    fwhm_i = instrumental_fwhm(resolving_power)
    if profile.kind == "gaussian":
        fwhm = math.hypot(profile.fwhm, fwhm_i)
        return gaussian(profile.depth * profile.fwhm / fwhm, fwhm)
    if profile.kind == "voigt":
        s0 = profile.fwhm * _FWHM_TO_SIGMA
        s1 = math.hypot(s0, fwhm_i * _FWHM_TO_SIGMA)
        g = 0.5 * profile.fwhm_lorentz
        from scipy import special

        ratio = special.voigt_profile(0.0, s1, g) / special.voigt_profile(0.0, s0, g)
        return voigt(profile.depth * ratio, s1 / _FWHM_TO_SIGMA, profile.fwhm_lorentz)
    sig = fwhm_i * _FWHM_TO_SIGMA
    u, d = _convolved_depths(profile, lambda k: _gauss_multiplier(k, sig), 10.0 * sig, dv)
    return tabulated(u, 1.0 - d[0], name="instrument-broadened profile")


def gaussian_fit_ew(velocity, intensity) -> tuple[float, float]:
    """SpotDIPy's equivalent width of a tabulated line: ``(EW_fit km/s, median continuum)``.

    A Gaussian plus a constant is least-squares fitted (scipy ``curve_fit``, started from
    the moments of ``median - I``); ``EW_fit = -a s sqrt(2 pi)`` is its area (not divided by
    the continuum, as in SpotDIPy).
    """
    v, i = np.asarray(velocity, dtype=float), np.asarray(intensity, dtype=float)
    med = float(np.median(i))
    d = np.clip(med - i, 0.0, None)
    if not d.sum() > 0:
        raise DopplermapInputError("cannot fit a Gaussian to a profile with no absorption below its median")
    v0 = float(np.sum(v * d) / d.sum())
    s0 = float(np.sqrt(np.sum(d * (v - v0) ** 2) / d.sum()))

    def model(x, a, c, s, b):
        return a * np.exp(-((x - c) ** 2) / (2.0 * s * s)) + b

    # scipy.optimize here, not at the top: it costs ~0.2 s of the start of runs that fit no Gaussian
    from scipy import optimize

    try:
        (a, _c, s, _b), _ = optimize.curve_fit(model, v, i, p0=[-float(d.max()), v0, s0, med],
                                               bounds=([-np.inf, -np.inf, 0.0, -np.inf], [np.inf] * 4))
    except (RuntimeError, ValueError) as exc:
        raise DopplermapInputError(f"Gaussian fit of the local profile failed ({exc})") from None
    return float(-a * s * math.sqrt(2.0 * math.pi)), med


def _table(profile: LocalProfile):
    if profile.kind == "tabulated":
        return profile.velocity, profile.intensity
    hw = profile.half_width
    v = np.linspace(-hw, hw, 4001)
    return v, profile(v)


def scale_equivalent_width(profile: LocalProfile, ew: float, method: str = "integrated") -> LocalProfile:
    """Profile scaled so that its equivalent width is ``ew`` (km/s) in the convention ``method``.

    ``"integrated"``: ``1 - I/Ic`` times ``ew / EW``; ``"gaussian_fit"``: SpotDIPy's Gaussian
    fit against the median continuum (see the module docstring). On a Gaussian line with
    continuum 1 they coincide, and the analytic profile is kept. ``ew`` may be a velocity
    Quantity; a width in wavelength goes through :func:`equivalent_width_kms` first.
    """
    ew = to_unit(ew, "km/s", "equivalent width")
    if not (np.isfinite(ew) and ew > 0):
        raise DopplermapInputError(f"equivalent width must be > 0 km/s, got {ew!r}")
    check(method, EW_METHODS, "ew_method")
    if method == "gaussian_fit" and profile.kind != "gaussian":
        v, i = _table(profile)
        ew_fit, med = gaussian_fit_ew(v, i)
        inten = (i - med) * (ew / (ew_fit * med)) + 1.0
        if np.min(inten) < 0.0:
            raise DopplermapInputError(f"equivalent width {ew!r} km/s (Gaussian fit) scales the line below zero "
                                       f"intensity (fitted EW {ew_fit:.4g} km/s)")
        return tabulated(v, inten, name="EW-scaled profile (Gaussian fit)")
    if profile.kind == "gaussian":
        depth = ew / (profile.fwhm * _FWHM_TO_SIGMA * math.sqrt(2.0 * math.pi))
        if depth >= 1.0:
            raise DopplermapInputError(f"equivalent width {ew!r} km/s needs a Gaussian depth {depth:.3f} >= 1 at FWHM {profile.fwhm} km/s")
        return gaussian(depth, profile.fwhm)
    if profile.kind == "voigt":
        sigma = profile.fwhm * _FWHM_TO_SIGMA
        from scipy import special

        depth = ew * special.voigt_profile(0.0, sigma, 0.5 * profile.fwhm_lorentz)
        if depth >= 1.0:
            raise DopplermapInputError(f"equivalent width {ew!r} km/s needs a Voigt depth {depth:.3f} >= 1")
        return voigt(depth, profile.fwhm, profile.fwhm_lorentz)
    ew0 = profile.equivalent_width()
    if not ew0 > 0:
        raise DopplermapInputError(f"cannot scale a profile with equivalent width {ew0!r} km/s (no absorption)")
    scale = ew / ew0
    inten = 1.0 - scale * (1.0 - profile.intensity)
    if np.min(inten) < 0.0:
        raise DopplermapInputError(f"equivalent width {ew!r} km/s scales the line below zero intensity (scale {scale:.3f})")
    return tabulated(profile.velocity, inten, name="EW-scaled profile")


def equivalent_width_kms(ew, wavelength_nm=None, unit: str = "km/s", name: str = "equivalent_width"):
    """An equivalent width in km/s: ``EW_v = c EW_lambda / lambda0`` for a width in wavelength.

    ``ew``: a number in ``unit`` (``"km/s"`` or ``"angstrom"``, :data:`~dopplermap.choices.EW_UNITS`)
    or an astropy Quantity (a velocity, or a length such as ``0.1 * u.AA``), or a sequence of
    them (one per component). ``wavelength_nm``: the line's rest wavelength (nm, or a
    Quantity), needed for a width in wavelength. Returns a float, or a tuple for a sequence.
    """
    check(unit, EW_UNITS, f"{name} unit")
    if isinstance(ew, (list, tuple)):
        return tuple(equivalent_width_kms(x, wavelength_nm, unit, f"{name}[{i}]") for i, x in enumerate(ew))
    in_wavelength = unit == "angstrom"
    if _is_quantity(ew):
        if ew.unit.physical_type == "length":
            ew, in_wavelength = to_unit(ew, "Angstrom", name), True
        else:
            ew, in_wavelength = to_unit(ew, "km/s", name), False
    ew = float(ew)
    if not (math.isfinite(ew) and ew > 0):
        raise DopplermapInputError(f"{name} must be > 0, got {ew!r}")
    if not in_wavelength:
        return ew
    if wavelength_nm is None:
        raise DopplermapInputError(f"{name} is in Angstrom: give the line's wavelength (wavelength_nm) to convert it to km/s")
    lam = float(to_unit(wavelength_nm, "nm", "wavelength_nm", kind="spectral"))
    if not (math.isfinite(lam) and lam > 0):
        raise DopplermapInputError(f"wavelength_nm must be > 0 to convert {name}, got {lam!r}")
    return C_KMS * ew / (10.0 * lam)


def line_profiles(profiles: Sequence[LocalProfile], *, equivalent_width=None, ew_method: str = "integrated",
                  ew_stage: str = "intrinsic", resolving_power: float | None = None, macroturbulence: float = 0.0,
                  radial_fraction: float = 0.5) -> list:
    """The components' local profiles as the model uses them: EW-scaled and broadened.

    ``equivalent_width``: None (keep the depths), one EW in km/s for every component, or one
    per component (phot, cool, hot). ``ew_stage``: ``"intrinsic"`` scales before the
    instrumental broadening, ``"broadened"`` after it (SpotDIPy's order; the module
    docstring). Macroturbulence (mu-dependent, RT) is applied last.
    """
    check(ew_stage, EW_STAGES, "ew_stage")
    profiles = list(profiles)
    ews = None
    if equivalent_width is not None:
        ews = (list(equivalent_width) if isinstance(equivalent_width, (list, tuple)) else
               [equivalent_width] * len(profiles))
        if len(ews) != len(profiles):
            raise DopplermapInputError(f"equivalent_width: give one value or one per component ({len(profiles)}), "
                                       f"got {len(ews)}")
    instrument_first = ews is not None and ew_stage == "broadened" and resolving_power is not None
    if instrument_first:
        profiles = [instrumental_broaden(p, resolving_power) for p in profiles]
    if ews is not None:
        profiles = [scale_equivalent_width(p, ew, ew_method) for p, ew in zip(profiles, ews, strict=True)]
    r = None if instrument_first else resolving_power
    if macroturbulence > 0:
        return [mu_dependent_profile(p, macroturbulence, resolving_power=r, radial_fraction=radial_fraction)
                for p in profiles]
    if r is not None:
        return [instrumental_broaden(p, r) for p in profiles]
    return profiles


def _stencil(x, n):
    """Four-point stencil start (clipped so that all taps lie in [0, n)) and offset t."""
    j0 = np.clip(np.floor(x).astype(np.int64), 1, n - 3)
    return j0 - 1, x - j0


_EVAL_CHUNK = 1 << 14  # points per block of MuProfile evaluation: its ~15 temporaries then stay in cache


def _table_positions(v, u0, du, n_u):
    """Fractional table positions of ``v``, an all-continuum output, and the points inside."""
    x = (v - u0) / du
    return x, np.ones(v.shape, dtype=float), np.flatnonzero((x >= 0.0) & (x <= n_u - 1))


def _table_eval(depth, u0, du, v, mu):
    """Bicubic Lagrange interpolation of ``1 - depth`` at (v, mu) (1-D, same length);
    continuum outside the table (those points cost nothing). NumPy: no compilation per shape."""
    n_mu, n_u = depth.shape
    flat = depth.reshape(-1)
    x_all, out, idx = _table_positions(v, u0, du, n_u)
    for i0 in range(0, idx.size, _EVAL_CHUNK):
        sl = idx[i0:i0 + _EVAL_CHUNK]
        jv, tv = _stencil(x_all[sl], n_u)
        jm, tm = _stencil(np.clip(mu[sl], 0.0, 1.0) * (n_mu - 1), n_mu)
        wv = lagrange_weights(tv)
        wm = lagrange_weights(tm)
        base = jm * n_u + jv
        acc = np.zeros(sl.shape)
        for a in range(4):
            row = wv[:, 0] * flat[base + a * n_u]
            for b in range(1, 4):
                row += wv[:, b] * flat[base + (a * n_u + b)]
            acc += wm[:, a] * row
        out[sl] = 1.0 - acc
    return out


def _mu_rows(depth, mu):
    """(m, n_u) table rows interpolated (cubic) to each of the m values ``mu``."""
    n_mu = depth.shape[0]
    jm, tm = _stencil(np.clip(mu, 0.0, 1.0) * (n_mu - 1), n_mu)
    wm = lagrange_weights(tm)
    return sum(wm[:, a, None] * depth[jm + a] for a in range(4))


def _rows_eval(rows, u0, du, v, ridx):
    """``1 - rows[ridx, .]`` interpolated (cubic) at velocities ``v`` (1-D, same length)."""
    n_u = rows.shape[1]
    flat = rows.reshape(-1)
    x_all, out, idx = _table_positions(v, u0, du, n_u)
    for i0 in range(0, idx.size, _EVAL_CHUNK):
        sl = idx[i0:i0 + _EVAL_CHUNK]
        jv, tv = _stencil(x_all[sl], n_u)
        wv = lagrange_weights(tv)
        base = ridx[sl] * n_u + jv
        acc = wv[:, 0] * flat[base]
        for b in range(1, 4):
            acc += wv[:, b] * flat[base + b]
        out[sl] = 1.0 - acc
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class MuProfile:
    """A local profile ``I/Ic(v, mu)`` tabulated on uniform nodes of ``mu`` and velocity.

    Attributes:
        u0, du: first node and step of the velocity grid, km/s.
        depth: (n_mu, n_u) ``1 - I/Ic`` at ``mu = linspace(0, 1, n_mu)``.
        zeta, radial_fraction, fwhm_instrument: the broadening it holds (for reports).
    Outside the velocity grid the profile is continuum (1).
    """

    u0: float
    du: float
    depth: np.ndarray
    zeta: float = 0.0
    radial_fraction: float = 0.5
    fwhm_instrument: float = 0.0
    kind: str = "mu"
    mu_dependent = True  # class constant (not a field): dopplermap.model calls profile(v, mu)

    @property
    def n_mu(self) -> int:
        return int(self.depth.shape[0])

    @property
    def mu_nodes(self) -> np.ndarray:
        return np.linspace(0.0, 1.0, self.n_mu)

    @property
    def velocity(self) -> np.ndarray:
        return self.u0 + self.du * np.arange(self.depth.shape[1])

    @property
    def half_width(self) -> float:
        u = self.velocity
        return float(max(abs(u[0]), abs(u[-1])))

    def __call__(self, v, mu) -> np.ndarray:
        """``I/Ic`` at velocities ``v`` (km/s) and ``mu`` (clipped to [0, 1]), broadcast together."""
        v = np.asarray(v, dtype=float)
        mu = np.asarray(mu, dtype=float)
        shape = np.broadcast_shapes(v.shape, mu.shape)
        n = math.prod(shape)
        depth = np.asarray(self.depth, dtype=float)
        if mu.size * depth.shape[1] < 3 * n:
            # few distinct mu (a scalar, or mu along other axes than v): interpolate the
            # table in mu once per mu value, then in velocity only (4 taps, not 16)
            rows = _mu_rows(depth, mu.reshape(-1))
            ridx = np.broadcast_to(np.arange(mu.size).reshape(mu.shape), shape).reshape(-1)
            vb = np.broadcast_to(v, shape).reshape(-1)
            return _rows_eval(rows, self.u0, self.du, vb, ridx).reshape(shape)
        vb, mb = (np.broadcast_to(a, shape).reshape(-1) for a in (v, mu))
        return _table_eval(depth, self.u0, self.du, vb, mb).reshape(shape)

    def equivalent_width(self, mu: float = 1.0) -> float:
        """Equivalent width at ``mu``, km/s."""
        return float(np.trapezoid(self.depth_at(mu), dx=self.du))

    def depth_at(self, mu: float) -> np.ndarray:
        return 1.0 - self(self.velocity, mu)


def _rt_and_instrument(zeta, radial_fraction, sigma_inst, mu_nodes):
    def mult(k):
        m = _gauss_multiplier(k, sigma_inst)[None, :]
        if zeta > 0:
            m = m * _rt_multiplier(k, zeta, mu_nodes, radial_fraction)
        else:
            m = np.broadcast_to(m, (len(mu_nodes), k.size))
        return m
    return mult


def mu_dependent_profile(profile: LocalProfile, zeta: float, *, resolving_power: float | None = None,
                         radial_fraction: float = 0.5, n_mu: int = DEFAULT_N_MU, dv: float = DEFAULT_DV) -> MuProfile:
    """Local profile broadened by RT macroturbulence (width ``zeta`` km/s) and the instrument.

    Args:
        profile: intrinsic local profile (disc centre, no macroturbulence).
        zeta: zeta_RT, km/s (>= 0). resolving_power: instrument R (None = no instrument).
        radial_fraction: A_R (0.5 = equal radial and tangential fractions).
        n_mu: uniform mu nodes over [0, 1] (>= 4). dv: velocity step of the table, km/s.
    """
    _check_rt(zeta, radial_fraction)
    if int(n_mu) != n_mu or n_mu < 4:
        raise DopplermapInputError(f"n_mu must be an integer >= 4, got {n_mu!r}")
    if not dv > 0:
        raise DopplermapInputError(f"dv must be > 0 km/s, got {dv!r}")
    fwhm_i = instrumental_fwhm(resolving_power) if resolving_power is not None else 0.0
    sigma_inst = fwhm_i * _FWHM_TO_SIGMA
    mu_nodes = np.linspace(0.0, 1.0, int(n_mu))
    pad = 10.0 * math.hypot(sigma_inst, zeta / math.sqrt(2.0)) + 4.0 * dv
    u, d = _convolved_depths(profile, _rt_and_instrument(zeta, radial_fraction, sigma_inst, mu_nodes), pad, dv)
    return MuProfile(u0=float(u[0]), du=float(dv), depth=np.ascontiguousarray(d), zeta=float(zeta),
                     radial_fraction=float(radial_fraction), fwhm_instrument=fwhm_i)


def mu_profile_table(profile: LocalProfile, mu_nodes, vels, zeta: float, *, resolving_power: float | None = None,
                     radial_fraction: float = 0.5, dv: float = DEFAULT_DV) -> np.ndarray:
    """``I/Ic`` of the broadened local profile: (n_mu, n_v) at the given mu nodes and velocities.

    ``mu`` is exact at each node (one convolution per node); velocities are interpolated
    (cubic) from a grid of step ``dv``. This is the per-mu template table a model with
    mu-dependent local profiles needs.
    """
    _check_rt(zeta, radial_fraction)
    mu_nodes = np.atleast_1d(np.asarray(mu_nodes, dtype=float))
    vels = np.asarray(vels, dtype=float)
    if np.any((mu_nodes < 0) | (mu_nodes > 1)):
        raise DopplermapInputError(f"mu nodes must lie in [0, 1], got range [{mu_nodes.min()}, {mu_nodes.max()}]")
    fwhm_i = instrumental_fwhm(resolving_power) if resolving_power is not None else 0.0
    sigma_inst = fwhm_i * _FWHM_TO_SIGMA
    pad = 10.0 * math.hypot(sigma_inst, zeta / math.sqrt(2.0)) + 4.0 * dv
    u, d = _convolved_depths(profile, _rt_and_instrument(zeta, radial_fraction, sigma_inst, mu_nodes), pad, dv)
    x = (vels - u[0]) / dv
    inside = (x >= 0) & (x <= u.size - 1)
    j, t = _stencil(np.clip(x, 0.0, u.size - 1.0), u.size)
    w = lagrange_weights(t)
    out = sum(w[:, b][None, :] * d[:, j + b] for b in range(4))
    return 1.0 - np.where(inside[None, :], out, 0.0)


def apply_cell_factors(pre, factors):
    """Multiply the model's per-cell weights by ``factors`` (n_cell,) or (n_cell, 3).

    Used for gravity darkening (see :mod:`dopplermap.gravity`), on the binned and dense
    forms (:meth:`dopplermap.forms.Form.with_cell_factors`; the folded ones hold weight
    differences and refuse).
    Returns a new :class:`~dopplermap.model.Precomputed`.
    """
    return dataclasses.replace(pre, line=pre.line.with_cell_factors(factors))


def replace_profiles(components: ComponentSet, profiles: Sequence[LocalProfile | MuProfile | None]) -> ComponentSet:
    """``components`` with the local profiles of phot, cool, hot replaced (None keeps one).

    With :class:`MuProfile` profiles the result goes straight into :func:`dopplermap.precompute`
    (either method): the model evaluates each cell's profile at its own mu.
    """
    if len(profiles) != 3:
        raise DopplermapInputError(f"profiles needs 3 entries (phot, cool, hot), got {len(profiles)}")
    with fields_checked():  # the intensities are the given set's, checked when it was built
        return ComponentSet(*[c if p is None else dataclasses.replace(c, profile=p)
                              for c, p in zip(components, profiles, strict=True)])
