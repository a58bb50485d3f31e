"""Checks of the data before a solve and of a result after it.

:func:`check_observations` refuses data with no line at all and warns
(:class:`~dopplermap.errors.DopplermapWarning`) about one epoch, duplicate epochs, profiles
whose means are far from 1 (the model's profiles are mean-normalised) and epochs without a
line. :func:`check_result` warns when a solve stopped before meeting its tolerance
(:class:`~dopplermap.errors.ConvergenceWarning`), when nuisances ran away, and when the
reduced chi-square is far from 1. Every message says what to check.

The value checks below warn about legal values that are most likely a unit or a sign
mistake; the layer that first holds a value calls its check, so the CLI and the Python API
see the same warning:

* :func:`check_inclination`: an inclination in (0, pi/2] deg (radians given as degrees?);
* :func:`check_radius`: a radius (given, or implied by P vsini / (2 pi sin i)) outside
  0.1-100 solar radii;
* :func:`check_wavelength`: a wavelength that is not optical/infrared in nm but would be
  in Angstrom or in micrometres;
* :func:`check_spot_contrast`: a cool spot not cooler (darker) than the photosphere, or a
  hot spot not hotter (brighter);
* :func:`check_phase_span`: epochs more than 1e5 rotations from t0.
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import numpy as np

from .constants import FLOAT32_MIN_TOL
from .errors import ConvergenceWarning, DopplermapInputError, warn

__all__ = ["check_observations", "check_result", "check_velocity_window", "check_inclination", "check_radius",
           "check_wavelength", "check_spot_contrast", "check_phase_span", "fields_checked", "CHI2_HIGH",
           "CHI2_LOW", "AMP_MAX", "STILL_FALLING", "INTERVAL_CHI2_LOW", "INTERVAL_CHI2_HIGH", "RADIUS_RANGE", "WAVELENGTH_RANGE_NM",
           "MAX_ROTATIONS"]

CHI2_HIGH = 4.0
"""Reduced chi-square above which a fit is flagged as not matching the data."""
CHI2_LOW = 0.5
"""Reduced chi-square below which the errors look overestimated (LSD profiles' often are)."""
INTERVAL_CHI2_LOW, INTERVAL_CHI2_HIGH = 0.5, 2.0
"""Reduced chi-square at a grid's best point outside which its Delta chi2 intervals are
flagged: the errors are then off by more than a factor sqrt(2), and so is the width of the
intervals read on them."""
AMP_MAX = 0.5
"""Largest plausible additive offset ``amp`` (in units of the mean-normalised profile)."""
STILL_FALLING = (100, 0.01)
"""``(k, fraction)``: a fit of light curves alone that stopped on its tolerance while its loss
fell by more than ``fraction`` over its last ``k`` iterations is warned about as not converged
(L-BFGS-B's stop on one short step; RESULTS.md, "Light curves alone: ...")."""


def _epochs(idx, limit: int = 5) -> str:
    idx = [int(i) for i in idx]
    return ", ".join(map(str, idx[:limit])) + (f" ... ({len(idx)} in all)" if len(idx) > limit else "")


def _check_still_falling(res, tol: float) -> None:
    loss = np.asarray(getattr(res, "history", {}).get("loss", ()), dtype=float)
    k, fraction = STILL_FALLING
    if loss.size <= k or not np.all(np.isfinite(loss[-k - 1:])):
        return
    drop = (loss[-k - 1] - loss[-1]) / max(abs(loss[-1]), 1e-300)
    if drop > fraction:
        warn(f"light curves alone: the solve stopped on its tolerance (tol={tol:g}) while the loss was still falling, "
             f"by {100 * drop:.2g} % over its last {k} iterations: the map is not converged (L-BFGS-B converges slowly "
             "on a light curve alone; its minimum can lie far lower); solve with solver=\"newton\", which ends at the "
             "minimum (the default \"auto\" takes it where it applies: one static map, an entropy regulariser), or "
             "lower tol (1e-10) and raise maxiter (20000)",
             category=ConvergenceWarning)


def check_observations(obs, source: str = "observations") -> None:
    """Refuse data without any line; warn about suspect but legal observations."""
    flux = np.asarray(obs.flux, dtype=float)
    err = np.asarray(obs.err, dtype=float)
    times = np.asarray(obs.times, dtype=float)
    n_epoch, n_vel = flux.shape
    mean = flux.mean(axis=1)
    # chi-square of a constant per epoch: ~1 for a profile that is noise about its mean
    flat_chi2 = (((flux - mean[:, None]) / err) ** 2).sum(axis=1)
    dof = max(n_vel - 1, 1)
    total = flat_chi2.sum() / (n_epoch * dof)
    if total < 1.0 + 5.0 * np.sqrt(2.0 / (n_epoch * dof)):
        raise DopplermapInputError(
            f"{source}: no line in any profile: every profile is flat within its errors (chi2 of a constant "
            f"{total:.3g} per point); check that the files hold line profiles (not a continuum or an error "
            "column), the velocity window and the error scale")
    flat = np.nonzero(flat_chi2 / dof < 1.0 + 5.0 * np.sqrt(2.0 / dof))[0]
    if flat.size:
        warn(f"{source}: epoch(s) {_epochs(flat)} show no line (flat within their errors); check those files "
             "and their velocity grid")
    if n_epoch == 1:
        warn(f"{source}: only one epoch: one profile sees the star at one phase, so the map is not constrained "
             "in longitude; add epochs that cover the rotation")
    order = np.argsort(times, kind="stable")
    same = np.nonzero(np.diff(times[order]) <= 1e-6)[0]
    if same.size:
        pairs = [(int(order[i]), int(order[i + 1])) for i in same]
        text = ", ".join(f"{a} and {b}" for a, b in pairs[:3]) + (" ..." if len(pairs) > 3 else "")
        warn(f"{source}: duplicate epochs: epochs {text} have the same time (a file listed twice weighs double); "
             "check the file list and the times")
    sigma_mean = np.sqrt((err ** 2).sum(axis=1)) / n_vel
    off = np.abs(mean - 1.0)
    far = np.nonzero((off > 5.0 * sigma_mean) & (off > 1e-3))[0]
    if far.size:
        e = int(far[np.argmax(off[far])])
        warn(f"{source}: {far.size} of {n_epoch} profiles have means far from 1 (epoch {e}: {mean[e]:.4g}), "
             "but the model's profiles are normalised to mean 1: normalise the data (Observations.create(..., "
             "normalise=True), or divide each profile and its errors by its mean)")


def _half_span(vels) -> float:
    # on the host: indexing a device array compiles a slice per shape
    v = np.asarray(vels)
    return 0.5 * float(v[-1] - v[0])


def check_result(res, obs, *, tol: float, maxiter: int) -> None:
    """Warn about a solve that did not converge, runaway nuisances and a chi2 far from 1."""
    reason = str(res.stop_reason)
    up = reason.upper()
    outcome = getattr(res, "outcome", None)
    if outcome is None:  # a result from elsewhere: read the solver's words
        outcome = ("max_iterations" if "ITERATION" in up or "MAXITER" in up else
                   "line_search_failed" if "LNSRCH" in up or "LINE SEARCH" in up or "ABNORMAL" in up else "other")
    if not res.success:
        if outcome == "max_iterations":
            warn(f"solve stopped on the iteration limit (maxiter={maxiter}) before meeting tol={tol:g}: the map is "
                 "not converged; raise maxiter, or check the data and the starting point", category=ConvergenceWarning)
        elif outcome == "line_search_failed":
            said = reason.strip().rstrip(":").strip() or "no reason given"  # scipy's "ABNORMAL: " says no more
            # a float32 cube rounds the loss near 1e-7 relative: a tol below 1e-6 can ask for less than that
            rounding = ("tol may be below the rounding of the loss (with a float32 cube use tol >= 1e-6 or "
                        "cube_dtype='float64')" if tol < FLOAT32_MIN_TOL else
                        "the loss may have reached its rounding (a float32 cube's; cube_dtype='float64' rounds finer)")
            warn(f"solve stopped on a line-search failure ({said}) before meeting tol={tol:g}: {rounding}, or the "
                 "problem is badly scaled; check the chi2 and the data", category=ConvergenceWarning)
        else:
            warn(f"solve did not meet its tolerance tol={tol:g} ({reason}); check the data and the settings",
                 category=ConvergenceWarning)
    elif obs is None:  # light curves alone: a short step can stop the solve far above its minimum
        _check_still_falling(res, tol)
    rv = np.asarray(res.rv, dtype=float)
    if obs is None:  # light curves alone: no rv
        half_span = np.zeros(0)
    elif isinstance(obs, (tuple, list)):  # several line data sets: rv holds them set after set
        half_span = np.concatenate([np.full(np.shape(o.flux)[0], _half_span(o.vels)) for o in obs])
    else:
        half_span = np.full(rv.shape, _half_span(obs.vels))
    big = np.nonzero(np.abs(rv) > half_span)[0]
    if big.size:
        e = int(big[np.argmax(np.abs(rv[big]))])
        warn(f"radial-velocity offsets ran away: |rv| up to {abs(rv[e]):.3g} km/s (epoch {e}) at {big.size} epoch(s), "
             f"more than half the velocity span ({half_span[e]:.3g} km/s); the line is not where the model puts it: "
             "check the systemic velocity, the velocity units (km/s) and vsini")
    amp = np.asarray(res.amp, dtype=float)
    big = np.nonzero(np.abs(amp) > AMP_MAX)[0]
    if big.size:
        e = int(big[np.argmax(np.abs(amp[big]))])
        warn(f"additive offsets ran away: |amp| up to {abs(amp[e]):.3g} (epoch {e}) at {big.size} epoch(s), beyond "
             f"{AMP_MAX} of the continuum; the line depth or the normalisation does not match the data: check the "
             "local line profile (depth, equivalent width) and the profiles' normalisation")
    named = [] if obs is None else [("line profiles", res.chi2)]  # light curves alone: chi2 is chi2_lc
    named += [("light curve", getattr(res, "chi2_lc", None))]
    named += [(f"line data set {k!r}", v) for k, v in (getattr(res, "chi2_sets", None) or {}).items()]
    named += [(f"light curve {k!r}", v) for k, v in (getattr(res, "chi2_lc_sets", None) or {}).items()]
    for name, chi2 in named:
        if chi2 is None or not np.isfinite(chi2):
            continue
        lines = name.startswith("line")
        if chi2 > CHI2_HIGH:
            causes = ("the errors may be too small (mis-scaled), the star or line parameters wrong (vsini, inclination, "
                      "line depth), the data not normalised like the model" if lines else
                      "the errors may be too small (a pipeline's errors leave out red noise and systematics), the star's "
                      "parameters wrong (inclination, limb darkening, the spots' temperatures), the curve holding what a "
                      "map cannot make (transits, flares, instrumental trends)")
            warn(f"reduced chi2 of the {name} is {chi2:.4g}, far above 1: the model does not fit to within the errors; "
                 f"{causes}, or lambda too large")
        elif chi2 < CHI2_LOW:
            why = ("LSD codes often overestimate them: set error_scale = \"auto\" in the target's [data] (or [[lines]] "
                   "data) table to scale them to the profiles' scatter (dopplermap.search.apply_error_scale in Python)"
                   if lines else "check the light curve's errors and how its points were binned")
            warn(f"reduced chi2 of the {name} is {chi2:.4g}, far below 1: the errors look too large ({why}), or the "
                 "map fits the noise (lambda too small)")


def check_velocity_window(vels, vsini_kms: float, source: str = "observations") -> None:
    """Warn when the velocity grid cannot be in km/s for this vsini: a window hundreds of
    times wider than the line (velocities in m/s?) or narrower than the line itself."""
    vels = np.asarray(vels, dtype=float)
    if vels.size < 2 or vsini_kms is None or not np.isfinite(vsini_kms) or vsini_kms <= 0:
        return
    half = 0.5 * float(vels[-1] - vels[0])
    if half > 20.0 * vsini_kms + 100.0:
        warn(f"{source}: the velocity grid spans +-{half:.4g} km/s, {half / vsini_kms:.0f} x vsini = {vsini_kms:g} km/s: "
             "are the velocities in m/s? check the velocity units and vsini")
    elif half < 0.5 * vsini_kms:
        warn(f"{source}: the velocity grid spans only +-{half:.4g} km/s, less than half of vsini = {vsini_kms:g} km/s, "
             "so the line does not fit in it: check the velocity units (km/s), the velocity window and vsini")


RADIUS_RANGE = (0.1, 100.0)
"""Stellar radii (R_sun) outside which a radius is flagged: below the smallest M dwarfs, above
the largest giants Doppler imaging maps."""
WAVELENGTH_RANGE_NM = (100.0, 3000.0)
"""Wavelengths (nm) of the lines and bands Doppler imaging uses: near UV to the K band."""
MAX_ROTATIONS = 1e5
"""Epochs further than this many rotations from t0 are flagged (t0 in another time scale)."""

# Set while a caller that has checked the same values under their field names builds its
# objects, so that the checks of the objects do not repeat them without the names.
_FIELDS_CHECKED = contextvars.ContextVar("fields_checked", default=False)


@contextlib.contextmanager
def fields_checked():
    """Skip :func:`check_wavelength` and :func:`check_spot_contrast` inside the block: the
    caller (the target configuration) checked the values it passes on, naming their fields."""
    token = _FIELDS_CHECKED.set(True)
    try:
        yield
    finally:
        _FIELDS_CHECKED.reset(token)


def _concrete(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and math.isfinite(float(x))


def check_inclination(inclination, where: str = "star") -> None:
    """Warn about an inclination in (0, pi/2] deg: legal, but every such value is also an
    inclination in radians, and one that small sees the star pole-on."""
    if not _concrete(inclination):
        return
    i = float(inclination)
    if 0.0 < i <= math.pi / 2:
        warn(f"{where}: inclination {i:g} deg is almost pole-on (below {math.pi / 2:.4g} deg): is it in radians? "
             f"({i:g} rad = {math.degrees(i):.4g} deg); give it in degrees")


def check_radius(radius_rsun, where: str = "star", how: str = "given") -> None:
    """Warn when a stellar radius (R_sun) lies outside :data:`RADIUS_RANGE`; ``how`` says
    where it comes from (given, or the formula that implied it)."""
    if not _concrete(radius_rsun):
        return
    r = float(radius_rsun)
    lo, hi = RADIUS_RANGE
    if lo <= r <= hi:
        return
    hint = ("check vsini (km/s), the period (days) and the inclination (degrees)" if how != "given"
            else "give the radius in solar radii (not km)" if r > hi else "give the radius in solar radii")
    warn(f"{where}: radius {r:.4g} R_sun ({how}) is outside {lo:g}-{hi:g} R_sun, the range of stars: {hint}")


def check_wavelength(wavelength_nm, where: str = "wavelength") -> None:
    """Warn about a wavelength (nm) outside :data:`WAVELENGTH_RANGE_NM` that would lie inside it
    read as Angstrom (x 0.1) or micrometres (x 1000)."""
    if _FIELDS_CHECKED.get() or not _concrete(wavelength_nm):
        return
    w = float(wavelength_nm)
    lo, hi = WAVELENGTH_RANGE_NM
    if lo <= w <= hi:
        return
    for factor, unit in ((0.1, "Angstrom"), (1000.0, "micrometres")):
        if lo <= w * factor <= hi:
            warn(f"{where}: {w:g} nm is outside the optical/infrared {lo:g}-{hi:g} nm, but {w:g} {unit} = "
                 f"{w * factor:g} nm is inside: is it in {unit}? give the wavelength in nm")
            return


def check_spot_contrast(values, *, what: str = "intensity", unit: str = "", where: str = "components",
                        fitted=("cool", "hot")) -> None:
    """Warn when (phot, cool, hot) ``values`` (temperatures or continuum intensities) put the cool
    spot at or above the photosphere, or the hot spot at or below it; only for the ``fitted``
    spot components (one not fitted has no filling factor: its value is never used)."""
    if _FIELDS_CHECKED.get() or len(values) != 3 or not all(_concrete(v) for v in values):
        return
    phot, cool, hot = (float(v) for v in values)
    bad = []
    if cool >= phot and "cool" in fitted:
        bad.append(f"the cool spot's {cool:g}{unit} is not below the photosphere's {phot:g}{unit}")
    if hot <= phot and "hot" in fitted:
        bad.append(f"the hot spot's {hot:g}{unit} is not above the photosphere's {phot:g}{unit}")
    if bad:
        swap = " (cool and hot swapped?)" if cool > phot > hot else ""
        warn(f"{where}: {what}: {' and '.join(bad)}{swap}: a cool spot is darker than the photosphere and a hot "
             f"spot brighter; check the order (phot, cool, hot) and the values")


def check_phase_span(times, t0, period, where: str = "epochs") -> None:
    """Warn when epochs lie more than :data:`MAX_ROTATIONS` rotations from t0: t0 is then almost
    surely in another time scale than the epochs (t0 = 0 with BJD epochs), and every phase
    hangs on the period to better than 1 / rotations."""
    t = np.asarray(times, dtype=float)
    if t.size == 0 or not (_concrete(t0) and _concrete(period)) or not float(period) > 0:
        return
    far = float(np.max(np.abs(t - float(t0))))
    n = far / float(period)
    if n > MAX_ROTATIONS:
        warn(f"{where}: epochs lie up to {n:.3g} rotations ({far:.6g} d) from t0 = {float(t0):.10g}: is t0 in the "
             f"epochs' time scale (t0 = 0 with BJD epochs?); a relative period error of 1e-6 shifts their phases by "
             f"{n * 1e-6:.2g} rotations: give t0 near the epochs")
