"""Fit inclination, vsini and dOmega jointly with the map, by gradient.

:func:`precompute` sorts cells into velocity bins with NumPy, which is not
differentiable in the star parameters. This module uses a dense synthesis built directly
on :func:`dopplermap.geometry.cell_geometry` (pure JAX): every cell at every epoch,
weighted by ``I_k LD_k(mu) area w(mu) f_k`` (``w`` the limb weight: by default the
cell-averaged projected area :func:`dopplermap.geometry.limb_weight`, smooth in the
inclination; ``limb="sharp"``: ``max(mu, 0)``), times the local profile
``L_k(v - v_los)`` evaluated in JAX (Gaussian profiles exactly, other kinds by linear
interpolation of a fine table). The whole model - geometry, weights, profiles, rv shift -
is then differentiable in ``(fssc, fssh, rv, amp, inclination, vsini, domega)``, and one
L-BFGS-B run fits all of them. The objective is the package's (:func:`dopplermap.objective.data_terms`
on the dense model as a form): reduced chi-square + ``lambda`` x regulariser (+ the
``fssc + fssh <= 1`` penalty, + the offset prior with ``offset_sigma``), set up and reported by
the door of :func:`dopplermap.invert` (:func:`dopplermap.solvers.prepare` and
:func:`dopplermap.solvers.finish`).

Cost: ``3 n_epoch n_cell n_vel`` profile evaluations per call, mapped over epochs in
batches to bound memory.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np

from .choices import LIMB_WEIGHTS, SPOT_COMPONENTS, check
from .diagnostics import check_result
from .errors import DopplermapInputError, warn
from .forms.base import shift_profiles
from .geometry import StarParams, cell_geometry
from .grid import SurfaceGrid
from .model import Precomputed, apply_nuisance, precompute
from .objective import DEFAULT_PENALTY, data_terms
from .problem import Problem, Settings, require_problem
from .profiles import ComponentSet, LocalProfile
from .result import Outcome
from .solvers import InversionResult, finish, invert, prepare
from .solvers._common import RawSolve
from .solvers.scipy_lbfgsb import LBFGSOptions, lbfgsb

__all__ = ["JointFitResult", "joint_fit", "dense_model", "limb_kink_distance", "STAR_PARAMETERS", "LIMB_KINK_DEG"]

# fitted star parameters: bounds and the scale of one optimiser unit
STAR_PARAMETERS = {"inclination": ((1.0, 90.0), 1.0), "vsini": ((0.1, None), 1.0), "domega": ((-2.0, 2.0), 0.1)}

LIMB_KINK_DEG = 1e-3
"""With the sharp limb, a fitted inclination this close (deg) to a limb crossing is reported as stalled there."""


def limb_kink_distance(grid: SurfaceGrid, times, star: StarParams) -> float:
    """Degrees from ``star.inclination`` to the nearest inclination at which some cell
    crosses the limb (``mu = 0``) at some epoch.

    With the sharp limb (``limb="sharp"``) the model weighs a cell by ``max(mu, 0)``, so the loss
    has a kink in the inclination at every such crossing, where a gradient fit (L-BFGS-B) often
    stops; the smooth limb weight has none (its curvature only steps at ``mu = +-h``). ``mu = a sin i + b cos i``
    with ``a = mu(90 deg)`` and ``b = mu(0)`` (both from :func:`dopplermap.geometry.cell_geometry`),
    so the crossings are ``i = arctan(-b / a)`` modulo 180 deg.
    """
    def mu(inc):
        return cell_geometry((grid.lat, grid.lon, grid.area), np.asarray(times, dtype=float), (inc, 1.0, star.period, star.t0, star.domega), xp=np).mu

    crossings = np.degrees(np.arctan2(-mu(0.0), mu(90.0))) % 180.0
    return float(np.min(np.abs(crossings - float(star.inclination))))


def _profile_fn(profile: LocalProfile):
    """A JAX function ``v -> I/Ic`` for a local profile."""
    if profile.kind == "gaussian":
        depth, fwhm = profile.depth, profile.fwhm
        c = 4.0 * np.log(2.0) / fwhm**2
        return lambda v: 1.0 - depth * jnp.exp(-c * v * v)
    hw = profile.half_width
    h = min(0.01, hw / 4000.0)
    v = np.arange(-hw, hw + h, h)
    table = jnp.asarray(profile(v))
    vt = jnp.asarray(v)
    return lambda x: jnp.interp(x, vt, table, left=1.0, right=1.0)


def _dense_profiles(grid: SurfaceGrid, times, vels, components: ComponentSet, *, batch: int, limb: str):
    """``raw(fssc, fssh, inclination, vsini, domega, period, t0) -> (n_epoch, n_vel)``: the
    disc-integrated profiles before the rv shift, the offsets and the normalisation."""
    check(limb, LIMB_WEIGHTS, "limb")
    lat, lon, area = (jnp.asarray(a) for a in (grid.lat, grid.lon, grid.area))
    times = jnp.asarray(np.asarray(times, dtype=float))
    vels = jnp.asarray(np.asarray(vels, dtype=float))
    comps = list(components)
    profs = [_profile_fn(c.profile) for c in comps]

    def raw(fssc, fssh, inclination, vsini, domega, period, t0):
        geo = cell_geometry((lat, lon, area), times, (inclination, vsini, period, t0, domega), limb=limb)
        fill = (1.0 - fssc - fssh, fssc, fssh)

        def one_epoch(args):
            mu, vlos, parea = args  # (n_cell,); mu: where the limb darkening is evaluated
            dv = vels[None, :] - vlos[:, None]  # (n_cell, n_vel)
            num = jnp.zeros(vels.shape, mu.dtype)
            norm = jnp.zeros((), mu.dtype)
            for comp, prof, f in zip(comps, profs, fill, strict=False):
                a = comp.intensity * comp.limb_darkening(mu) * parea * f
                num = num + a @ prof(dv)
                norm = norm + a.sum()
            return num / norm

        return jax.lax.map(one_epoch, (geo.ld_mu, geo.v_los, geo.proj_area), batch_size=batch)

    return raw


def dense_model(grid: SurfaceGrid, times, vels, components: ComponentSet, *, batch: int = 8, limb: str = "smooth"):
    """``model(fssc, fssh, rv, amp, inclination, vsini, domega, period, t0) -> (n_epoch, n_vel)``.

    Differentiable (reverse mode) in every argument; angles in deg, velocities km/s,
    domega rad/day, period and t0 days. ``limb``: the limb weight
    (:func:`dopplermap.geometry.cell_geometry`); ``"smooth"`` is also smooth in the inclination.
    """
    raw = _dense_profiles(grid, times, vels, components, batch=batch, limb=limb)
    v = jnp.asarray(np.asarray(vels, dtype=float))

    def model(fssc, fssh, rv, amp, inclination, vsini, domega, period, t0):
        return apply_nuisance(raw(fssc, fssh, inclination, vsini, domega, period, t0), v, rv, amp)

    return model


@dataclasses.dataclass(frozen=True)
class _StarForm:
    """The dense model at star parameters that are (traced) arguments, as a synthesis form: the
    package's objective (:func:`dopplermap.objective.data_terms`) reads it as any other form
    (``shifted_profiles``), so the joint fit's loss is every solve's loss, plus the star."""

    raw: object  # _dense_profiles(...)
    vels: jax.Array
    star: tuple  # (inclination, vsini, domega, period, t0)
    n_cell: int
    n_epoch: int

    @property
    def n_vel(self) -> int:
        return int(self.vels.shape[0])

    def shifted_profiles(self, fssc, fssh, rv):
        return shift_profiles(self.vels, rv, self.raw(fssc, fssh, *self.star))


@dataclasses.dataclass
class JointFitResult:
    """Joint fit of the star parameters and the map.

    Attributes:
        star: :class:`StarParams` with the fitted values. fitted: names of the fitted
            parameters. start: the starting values. map: :class:`InversionResult` of the
            joint solve (its ``chi2``, ``loss`` from the dense model).
        initial_map: the map solved at the starting star (warm start).
        time: wall seconds (both stages).
    """

    star: StarParams
    fitted: tuple
    start: dict
    map: InversionResult
    initial_map: InversionResult
    time: float
    limb_kink_deg: float | None = None  # fitted inclination's distance to a limb kink (None: not fitted)


def _fittable(problem: Problem) -> None:
    """Refuse in one line what the dense model does not fit (it would be silently left out)."""
    st = problem.settings
    reasons = ((problem.multi, "several line data sets ([[lines]])"),
               (problem.lightcurve_data is not None, "a light curve"),
               (problem.form is not None, "a given synthesis form (the seed's files)"),
               (problem.gravity is not None, "gravity darkening"),
               (problem.grid is not None and problem.grid.surface is not None, "a distorted (Roche) surface"),
               (problem.rv_shift != "interpolate", f"rv_shift {problem.rv_shift!r}"),
               (tuple(st.fit_components) != SPOT_COMPONENTS, f"fit_components {tuple(st.fit_components)!r}"),
               (st.line_weight != 1.0, f"line_weight {st.line_weight!r}"),
               (problem.windows is not None, "time windows (one map per window)"),
               (problem.subdivide != 1, f"subdivide = {problem.subdivide} (cells integrated over sub-cells)"))
    refused = [what for bad, what in reasons if bad]
    if refused:
        raise DopplermapInputError(f"{problem.source}: joint_fit fits one line data set with its own dense model "
                                   f"of the star; this problem has {refused[0]}")


def _form_problem(problem: Problem, star: StarParams, settings: Settings, *, method: str, limb: str) -> Problem:
    """``problem`` at ``star``, with its form built here (the form carries the ``limb`` weight),
    for :func:`dopplermap.invert`'s door: its ``prepare`` and ``finish``."""
    obs = problem.obs
    form = precompute(problem.grid, star, np.asarray(obs.times), np.asarray(obs.vels), problem.components,
                      method=method, limb=limb)
    return Problem(grid=problem.grid, star=None, obs=obs, components=None, form=form, settings=settings,
                   source=problem.source)


def joint_fit(problem: Problem, *, fit=("inclination", "vsini"), x0=None, batch: int = 8, tol: float = 1e-9,
              maxiter: int = 3000, penalty: float = DEFAULT_PENALTY, limb: str = "smooth") -> JointFitResult:
    """Fit the parameters named in ``fit`` (of ``STAR_PARAMETERS``) together with the map.

    The solve goes through the door of :func:`dopplermap.invert`: its ``prepare`` checks the
    settings and builds the start, the map's bounds and the objective data (with the offset
    prior), the loss is the package's (:func:`dopplermap.objective.data_terms`) on a form whose
    star parameters are part of the fitted vector, scipy's L-BFGS-B (the ``"lbfgsb"`` back
    end's driver) minimises it, and ``finish`` reports the map evaluated in float64 on the
    dense model at the fitted star, with the solve warnings of every inversion.

    Args:
        problem: the grid, star, observations and local lines, and the settings lmbd,
            regulariser, fit_rv, fit_amp and offset_sigma (as :func:`dopplermap.invert`);
            ``problem.star`` holds the starting values (and the fixed period, t0 and any
            parameter not fitted): give it the values you trust most, e.g. the calibrated
            ones (``problem.replace(star=dopplermap.calibrate.calibrated_star(star, cals))``).
            One line data set without a light curve, gravity darkening or a given form:
            anything else is refused.
        fit: star parameters to fit.
        x0: starting ``[fssc, fssh, rv, amp]``; default: the map inverted (binned model,
            L-BFGS-B to tol 1e-7) at the starting star.
        tol, maxiter: the joint L-BFGS-B's own stopping rule, not the problem's (a map
            solve's, Settings' 1e-5 and 1000): the joint fit keeps the tighter defaults its
            results in benchmarks/RESULTS.md were measured with.
        batch: epochs per step of the dense model (bounds its memory).
        limb: the model's limb weight, ``"smooth"`` (default: differentiable in the
            inclination) or ``"sharp"`` (``max(mu, 0)``: a fitted inclination on one of its
            kinks is warned about, and ``map.success`` is False there).
    """
    _fittable(require_problem(problem, "joint_fit"))
    grid, star, obs, components = problem.grid, problem.star, problem.obs, problem.components
    fit = tuple(fit)
    bad = [p for p in fit if p not in STAR_PARAMETERS]
    if bad or not fit:
        raise DopplermapInputError(f"fit must name star parameters among {sorted(STAR_PARAMETERS)}, got {list(fit)!r}")
    check(limb, LIMB_WEIGHTS, "limb")
    if star.vsini is None:
        raise DopplermapInputError("joint_fit needs star.vsini (km/s), got None (radius given instead)")
    # the problem's objective settings; the stopping rule and the back end are the joint fit's
    settings = problem.settings.replace(tol=tol, maxiter=maxiter, solver="lbfgsb")
    t_start = time.perf_counter()
    start_problem = _form_problem(problem, star, settings, method="binned", limb=limb)
    if x0 is None:
        init = invert(start_problem.replace(settings=settings.replace(tol=1e-7)), penalty=penalty)
        init = dataclasses.replace(init, grid=grid, star=star, intensities=problem.intensities)
        x0 = init.x
    else:
        init = None
    setup = prepare(start_problem.pre, obs, settings, x0=x0, penalty=penalty, problem=start_problem)
    lay = setup.layout
    raw_model = _dense_profiles(grid, obs.times, obs.vels, components, batch=batch, limb=limb)
    vels = jnp.asarray(np.asarray(obs.vels, dtype=float))
    cells = setup.exact_pre
    scales = np.array([STAR_PARAMETERS[p][1] for p in fit])
    start = {p: float(getattr(star, p)) for p in fit}
    fixed = {p: float(getattr(star, p)) for p in STAR_PARAMETERS if p not in fit}

    def terms(z, lm):
        sp = dict(fixed, **{p: z[lay.size + i] * scales[i] for i, p in enumerate(fit)})
        form = _StarForm(raw_model, vels, (sp["inclination"], sp["vsini"], sp["domega"], star.period, star.t0),
                         n_cell=lay.n_cell, n_epoch=lay.n_epoch)
        pre = Precomputed(line=form, cell_area=cells.cell_area, edges=cells.edges)
        return data_terms(z[:lay.size], lm, pre, setup.data, setup.regulariser, setup.penalty)

    vg = jax.jit(jax.value_and_grad(terms, has_aux=True))
    lm = jnp.asarray(setup.lmbd)

    def fn(z):
        (val, aux), g = vg(jnp.asarray(z), lm)
        return val, g, aux

    star_lo = [(STAR_PARAMETERS[p][0][0] if STAR_PARAMETERS[p][0][0] is not None else -np.inf) / s
               for p, s in zip(fit, scales, strict=True)]
    star_hi = [(STAR_PARAMETERS[p][0][1] if STAR_PARAMETERS[p][0][1] is not None else np.inf) / s
               for p, s in zip(fit, scales, strict=True)]
    lo, hi = np.concatenate([setup.lower, star_lo]), np.concatenate([setup.upper, star_hi])
    z0 = np.clip(np.concatenate([setup.x0, [start[p] / s for p, s in zip(fit, scales, strict=True)]]), lo, hi)

    t0 = time.perf_counter()
    res, history = lbfgsb(fn, z0, lo, hi, options=LBFGSOptions.at(setup.tol, setup.maxiter))
    solve_time = time.perf_counter() - t0
    z = np.asarray(res.x)
    new_star = star.replace(**{p: float(z[lay.size + i] * scales[i]) for i, p in enumerate(fit)})
    raw = RawSolve(x=z[:lay.size], iterations=int(res.nit), n_eval=int(res.nfev),
                   outcome=Outcome.from_scipy(res.message, int(res.status)), stop_reason=str(res.message),
                   history=history, compile_time=0.0, solve_time=solve_time, extra={"restarts": int(res.restarts)})
    # the reported map: the same door's finish, on the dense model at the fitted star
    fitted = _form_problem(problem, new_star, settings, method="dense", limb=limb)
    result = finish(prepare(fitted.pre, obs, settings, x0=raw.x, penalty=penalty, problem=fitted), raw,
                    "lbfgsb-joint")
    kink = None
    if "inclination" in fit and limb == "sharp":
        kink = limb_kink_distance(grid, obs.times, new_star)
    stalled = kink is not None and kink < LIMB_KINK_DEG
    result = dataclasses.replace(result, grid=grid, star=new_star, intensities=problem.intensities,
                                 success=result.success and not stalled)
    check_result(result, obs, tol=setup.tol, maxiter=setup.maxiter)
    if stalled:
        warn(f"joint_fit: the fitted inclination {new_star.inclination:.4f} deg is {kink:.1e} deg from an "
             "inclination where a surface cell crosses the limb at an epoch; the sharp limb weight max(mu, 0) "
             "has a kink there, where the gradient fit stalls, so this is probably not the optimum: fit with "
             "limb='smooth' (the default), or profile the inclination (dopplermap grid, or grid --calibrate N)")
    return JointFitResult(star=new_star, fitted=fit, start=start, map=result, initial_map=init,
                          time=time.perf_counter() - t_start, limb_kink_deg=kink)
