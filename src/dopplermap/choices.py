"""Every named choice of the package, each spelt out once.

The engine's registries (synthesis forms, solver back ends, regularisers, rv shifts), the
TOML validation and the CLI's options all read their lists here; ``tests/test_choices.py``
pins each registry to its list. Nothing but the standard library (and the package's own
errors) is imported, so that parsing a config and ``dopplermap --help`` load no JAX.
"""

from __future__ import annotations

import difflib
import math

from .errors import DopplermapInputError

__all__ = ["FORMS", "SYNTHESIS_METHODS", "RV_SHIFTS", "LIMB_WEIGHTS", "GRID_READOUTS", "GRID_PARAMETERS", "TIME_COUPLINGS", "SOLVERS",
           "SOLVER_CHOICES", "REGULARISER_LABELS",
           "REGULARISERS", "WEIGHTED_REGULARISERS", "SPOT_COMPONENTS", "UNCERTAINTY_METHODS", "EW_METHODS", "EW_STAGES",
           "EW_UNITS", "STAR_SHAPES", "GRAVITY_LAWS", "PASSBANDS", "ATMOSPHERE_PASSBANDS", "uncertainty_choice", "uncertainty_title",
           "LINE_PROFILES", "GRID_KINDS", "PROFILE_FORMATS", "PROFILE_WRITE_FORMATS", "LIGHTCURVE_FORMATS",
           "LIGHTCURVE_WRITE_FORMATS", "LIGHTCURVE_UNITS", "QUALITY_BITMASKS", "BIN_UNITS", "FIGURE_FORMATS", "MAP_PROJECTIONS", "RESULT_PLOT_KINDS",
           "SIMULATION_FORMATS", "ERROR_SCALES",
           "BATCH_MODES", "MANY_MODES", "MEMBER_SOLVERS", "BATCH_FORMS", "CUBE_DTYPES", "check", "check_error_scale", "did_you_mean"]

# the synthesis forms precompute builds (dopplermap.forms.FORMS)
FORMS = ("dense", "binned")
# precompute(method=...) and [inversion] method: "auto" picks a form by size (dopplermap.plan)
SYNTHESIS_METHODS = ("auto", *FORMS)
# precompute(rv_shift=...) and [inversion] rv_shift: the seed's interpolation, or the exact shift (binned)
RV_SHIFTS = ("interpolate", "exact")
# [map] time_coupling: the penalty on the change between neighbouring time windows' maps (dopplermap.windows)
TIME_COUPLINGS = ("quadratic", "relative_entropy")
# precompute(limb=...), cell_geometry(limb=...): the cell-averaged projected area at the limb, or max(mu, 0)
LIMB_WEIGHTS = ("smooth", "sharp")
# grid --readout: each point solved at the working lambda, or profiled (dopplermap.search.PROFILE_READOUT),
# or refitted on the regularised best map's spotted cells (dopplermap.search.SUPPORT_READOUT)
GRID_READOUTS = ("regularised", "profiled", "support")
# the parameters a grid search (dopplermap.search.apply_parameters) and a calibration vary, with their units
GRID_PARAMETERS = {
    "inclination": "deg", "vsini": "km/s", "domega": "rad/day", "period": "day",
    "t_cool": "K", "t_hot": "K", "macro_gauss": "km/s (Gaussian zeta)",
    "ew_scale": "factor on the local lines' depth (equivalent width)",
    "ld_linear": "the linear limb-darkening coefficient u of every component's lines",
}
# the solver back ends (dopplermap.solvers)
SOLVERS = ("lbfgsb", "projected_lbfgs", "newton")
# solver=... and [inversion] solver: "auto" picks a back end by tolerance (dopplermap.solvers.choose_solver)
SOLVER_CHOICES = ("auto", *SOLVERS)
# regulariser=... and [inversion] regulariser (dopplermap.regularisers), with the label figures give
# its value: kept here, not in the registry, because figures are drawn in a process without JAX
REGULARISER_LABELS = {"mem": "entropy term", "mem_spotdipy": "entropy term (SpotDIPy)", "tikhonov": "Tikhonov term",
                      "none": "regulariser"}
REGULARISERS = tuple(REGULARISER_LABELS)
# the regularisers a lambda weighs: what a lambda search can sweep
WEIGHTED_REGULARISERS = tuple(r for r in REGULARISERS if r != "none")
# fit_components=... and [inversion] fit_components: the spot components, in the layout's order
SPOT_COMPONENTS = ("cool", "hot")
# [uncertainty] methods and --uncertainty: Laplace posterior, Laplace sandwich, bootstrap over epochs
UNCERTAINTY_METHODS = ("laplace", "sandwich", "bootstrap")


def uncertainty_choice(method: str) -> str:
    """The :data:`UNCERTAINTY_METHODS` name of an ``Uncertainty.method`` (``"laplace-posterior-dense"``
    -> ``"laplace"``, ``"laplace-sandwich-hutchinson"`` -> ``"sandwich"``): file names use it."""
    if method.startswith("laplace-"):
        return "sandwich" if method.split("-")[1] == "sandwich" else "laplace"
    return method


def uncertainty_title(method: str) -> str:
    """A short readable name of an ``Uncertainty.method`` for titles and captions
    (``"laplace-posterior-dense"`` -> ``"Laplace (exact diagonal)"``)."""
    if method.startswith("laplace-"):
        _, width, diagonal = (method.split("-") + ["", ""])[:3]
        how = {"dense": "exact diagonal", "lowrank": "exact low-rank diagonal",
               "hutchinson": "Hutchinson diagonal"}.get(diagonal, diagonal)
        kind = "Laplace sandwich" if width == "sandwich" else "Laplace"
        return f"{kind} ({how})" if how else kind
    return {"laplace": "Laplace", "sandwich": "Laplace sandwich"}.get(method, method)
# [line] ew_method: the equivalent-width convention (dopplermap.broadening.scale_equivalent_width)
EW_METHODS = ("integrated", "gaussian_fit")
# [line] ew_stage: where the EW is imposed: on the intrinsic local line (before instrumental
# broadening, the default) or on the instrument-broadened one (SpotDIPy's order)
EW_STAGES = ("intrinsic", "broadened")
# [line] ew_unit: the unit of [line] equivalent_width (Angstrom is converted with the line's wavelength)
EW_UNITS = ("km/s", "angstrom")
# [line] profile: the local line profile's shape
LINE_PROFILES = ("gaussian", "voigt", "tabulated")
# [star] shape: the sphere, or a Roche equipotential (rotation, a companion's tide; dopplermap.roche)
STAR_SHAPES = ("sphere", "roche")
# [gravity_darkening] law: von Zeipel's beta, or Espinosa Lara & Rieutord (2011) (dopplermap.gravity)
GRAVITY_LAWS = ("von_zeipel", "elr")
# the photometric bands of the shipped limb-darkening table (limb_darkening = "atmosphere"; dopplermap.atmosphere)
ATMOSPHERE_PASSBANDS = ("TESS", "Kepler", "Gaia_G", "Gaia_BP", "Gaia_RP")
# [lightcurve] passband: the bands whose response curve ships (spot contrasts, gravity darkening)
PASSBANDS = (*ATMOSPHERE_PASSBANDS, "Bessell_U", "Bessell_B", "Bessell_V", "Bessell_R", "Bessell_I")
# [grid] kind and make_grid(kind=...)
GRID_KINDS = ("bands", "healpix")
# [data] format and read_lsd(fmt=...): the line-profile files read
PROFILE_FORMATS = ("auto", "donati", "text", "fits")
# write_lsd(fmt=...)
PROFILE_WRITE_FORMATS = ("donati", "text", "csv", "fits")
# [data] lightcurve_format, [[lightcurves]] format and read_lightcurve(fmt=...)
LIGHTCURVE_FORMATS = ("auto", "text", "fits")
# write_lightcurve(fmt=...)
LIGHTCURVE_WRITE_FORMATS = ("csv", "text", "fits")
# the light curve's unit: fluxes, or magnitudes converted to flux
LIGHTCURVE_UNITS = ("flux", "mag")
# [data] lightcurve_quality_bitmask, [[lightcurves]] quality_bitmask, read_lightcurve(quality_bitmask=...):
# the mission quality-flag presets (dopplermap.io.quality; an integer bit mask is allowed too)
QUALITY_BITMASKS = ("none", "default", "hard", "hardest")
# the light curve's bin width: in days or in rotation phase
BIN_UNITS = ("d", "phase")
# dopplermap plot --format
FIGURE_FORMATS = ("png", "pdf", "svg")
# the maps' projection=... (plot._plot_maps): the map projections, each drawn into a result folder
MAP_PROJECTIONS = ("mollweide", "rect")
# what InversionResult.plot(kind=...) draws (dopplermap.plot.plot_result_kind)
RESULT_PLOT_KINDS = ("map", "maps", "orthographic", "polar", "profiles", "dynamic_spectrum", "light_curve",
                     "convergence")
# [data] error_scale (besides a number): "auto" (the continuum where the window has enough, else
# "residuals"), the continuum's scatter, or sqrt(chi2) of a fit (dopplermap.errorscale)
ERROR_SCALES = ("auto", "continuum", "residuals")
# dopplermap simulate --format: a problem.npz, or the seed's pickles
SIMULATION_FORMATS = ("npz", "seed-pickle")
# invert_batch(mode=...): the members together (vmap) or one after another; "auto" by device (dopplermap.plan)
BATCH_MODES = ("auto", "vmap", "sequential")
# many solves of one shape (lambda sweep, bootstrap, calibration; dopplermap.solvers.solve_many): the
# members together (vmap), one compiled device solve after another, or each through invert() with the
# problem's own solver; "auto" by device and size (dopplermap.plan.many_mode)
MANY_MODES = ("auto", "vmap", "sequential", "invert")
# solve_many / invert_batch(solver=...): the compiled solve of members one after another; "auto" counts compiles (dopplermap.plan)
MEMBER_SOLVERS = ("auto", "projected_lbfgs", "newton")
# invert_batch(form=...): the model form a batch iterates on; "auto" by device and size (dopplermap.plan)
BATCH_FORMS = ("auto", "folded", "blocked")
# cube_dtype=...: the dtype of the folded cube a solve iterates on; "auto" by tolerance, None: the model as is
CUBE_DTYPES = ("auto", "float32", "float64", None)


def did_you_mean(name, allowed, shown=repr) -> str:
    """``"; did you mean X?"`` with the allowed spelling nearest a mistyped ``name`` (difflib's
    ratio >= 0.75: ``fwmh`` -> ``fwhm``, ``inclinaton`` -> ``inclination``), else ``""``."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [a for a in allowed if isinstance(a, str)], n=1, cutoff=0.75)
    return f"; did you mean {shown(close[0])}?" if close else ""


def check(value, allowed: tuple, where: str):
    """``value`` if it is one of ``allowed``; else :class:`DopplermapInputError` naming ``where``
    (the option, with its file or section), the value and the allowed values."""
    if not isinstance(value, (str, type(None))) or value not in allowed:
        raise DopplermapInputError(f"{where} must be one of {', '.join(map(repr, allowed))}, got {value!r}"
                                   f"{did_you_mean(value, allowed)}")
    return value


def check_error_scale(value, where: str):
    """An error scale (``[data] error_scale``): a finite number > 0 (as a float) or one of
    :data:`ERROR_SCALES`; else :class:`DopplermapInputError` naming ``where`` and the value."""
    if isinstance(value, str) and value in ERROR_SCALES:
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0:
        return float(value)
    raise DopplermapInputError(f"{where} must be a number > 0 or one of {', '.join(map(repr, ERROR_SCALES))}, "
                               f"got {value!r}")
