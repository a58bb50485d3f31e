"""The conformance matrix's problems, forms, solvers and its one reference.

Laid out like optimistix's ``tests/helpers.py``: tables of what is tested (``FORMS``,
``SOLVERS``, ``SCENARIOS``) that ``tests/test_conformance.py`` crosses, and one reference
every cell is compared with: scipy's L-BFGS-B run to a tight tolerance (``ftol = 0``,
projected gradient ``1e-11``, then once more from its own end point) on the exact dense
model in float64, itself checked against a NumPy transcription of the model's formula.

Sizes are small (300 cells, 10 epochs, 20 velocities) so the matrix stays cheap; most of
its time is compilation, shared where shapes agree (plain and mu-dependent dense models
have the same shapes, and ``compiled_value_and_grad`` is the solvers' own cache).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import Bounds, minimize

import dopplermap as dm
from dopplermap import model, objective, search
from dopplermap.broadening import mu_dependent_profile, replace_profiles
from dopplermap.constants import FILL_MAX, FILL_MIN
from dopplermap.io.lsd import write_lsd
from dopplermap.lightcurve import LightCurveBand, precompute_lightcurve, simulate_lightcurve
from dopplermap.objective import DEFAULT_PENALTY, ObjectiveData
from dopplermap.solvers import invert_batch
from dopplermap.solvers.program import compiled_value_and_grad

N_CELL, N_EPOCH, N_VEL = 300, 10, 20
ZETA = 4.0  # km/s radial-tangential macroturbulence of the mu-dependent scenario
BINNED_TOL = 1e-10  # synthesis_tol of the binned form (continuum units)
BINNED_TOL_MU = 1e-7  # with mu-dependent profiles: the default (tighter ones need many more mu-basis columns)
LMBD, LMBD2 = 1.0, 3.0  # every solver solves LMBD; the two-member batch adds LMBD2
SOLVE_KW = dict(tol=1e-10, maxiter=5000)

SCENARIOS = ("plain", "lightcurve", "mu_dependent", "padded")
"""plain: Gaussian local profiles; lightcurve: joint fit with a light curve; mu_dependent:
radial-tangential macroturbulence (``broadening.mu_dependent_profile``); padded: the
mu-dependent model padded by ``search.pad_precomputed`` as a grid search does (dense forms
padded before folding/blocking, the binned model itself)."""


# ------------------------------------------------------------------------------ problems


@dataclasses.dataclass(frozen=True, eq=False)
class Scenario:
    name: str
    dense: model.Precomputed  # the exact model
    binned: model.Precomputed
    obs: objective.Observations
    lightcurve: object = None
    padded: bool = False


@functools.cache
def scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise KeyError(name)
    if name == "padded":  # the mu-dependent problem, padded where its forms are built
        return dataclasses.replace(scenario("mu_dependent"), name=name, padded=True)
    star, grid, times, vels, comps = dm.demo_setup(n_cell=N_CELL, n_epoch=N_EPOCH, n_vel=N_VEL, seed=4)
    mu_dep = name == "mu_dependent"
    if mu_dep:
        comps = replace_profiles(comps, [mu_dependent_profile(c.profile, ZETA) for c in comps])
    rng = np.random.default_rng(7)
    # rv away from 0: the linear-interpolation shift has a kink wherever rv is a multiple of
    # the velocity step, and a minimum sitting on one is not smooth (no tight reference)
    rv, amp = rng.uniform(1.0, 2.5, N_EPOCH), rng.normal(0.0, 0.003, N_EPOCH)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=300.0, rv=rv, amp=amp, seed=5,
                      method="dense")
    dense = dm.precompute(grid, star, times, vels, comps, method="dense")
    binned = dm.precompute(grid, star, times, vels, comps, method="binned",
                           synthesis_tol=BINNED_TOL_MU if mu_dep else BINNED_TOL)
    lc = None
    if name == "lightcurve":
        band = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, 550.0, [dm.LimbDarkening("linear", (0.7,))] * 3)
        t_lc = np.linspace(0.0, 2.0 * star.period, 40, endpoint=False)
        flux, err, _ = simulate_lightcurve(grid, star, t_lc, band, sim.fssc, sim.fssh, sigma=1e-3, seed=6)
        lc = precompute_lightcurve(grid, star, t_lc, flux, err, band)
    return Scenario(name, dense, binned, sim.obs, lc)


def random_point(scn: Scenario, seed: int = 0) -> np.ndarray:
    """A spotted interior map with non-zero rv and amp: (2 n_cell + 2 n_epoch,)."""
    rng = np.random.default_rng(seed)
    n, e = scn.dense.n_cell, scn.dense.n_epoch
    return np.concatenate([rng.uniform(0.01, 0.5, n), rng.uniform(0.01, 0.3, n), rng.normal(0, 0.5, e),
                           rng.normal(0, 0.01, e)])


# ------------------------------------------------------------------------------ forms


def _pad(pre):
    return search.pad_precomputed(pre)


FORMS = {
    "dense": lambda dense: dense,
    "folded": lambda dense: model.solve_form(dense, "float64"),
    "blocked": lambda dense: model.solve_form(dense, "float64", blocked=True),
}
"""Forms built from the dense model (``binned`` is precomputed on its own, see :func:`build_form`)."""

FORM_NAMES = (*FORMS, "binned")

EXACT_FORMS = ("dense", "folded", "blocked")
"""Exact rearrangements of the dense model in float64: the same loss to ``LOSS_RTOL`` and
gradient to ``GRAD_RTOL`` (of max |grad|) at the same x."""
LOSS_RTOL, GRAD_RTOL = 1e-12, 1e-11

PROFILE_ATOL = {"folded_float32": 1e-6, "binned": 3 * BINNED_TOL, "binned_mu": 3 * BINNED_TOL_MU}
"""Approximate forms: the largest difference allowed between their model profiles and the
exact ones (mean-normalised, continuum ~1). The float32 cube rounds the profiles to ~2e-7
(the model docstring); the binned model promises ``synthesis_tol`` before the mean
normalisation and the rv shift (which scale it by ~1/mean, about 1.1 here)."""

APPROX_GRAD_RTOL = {"folded_float32": 1e-4, "binned": 1e-6}
"""Their gradients, relative to max |grad| (measured: float32 up to 1.5e-5, binned 7e-8)."""


def build_form(form: str, scn: Scenario) -> model.Precomputed:
    """The model of ``form`` for a scenario (padded as a grid search pads it, if the scenario says so)."""
    if form == "binned":
        return _pad(scn.binned) if scn.padded else scn.binned
    if form == "folded_float32":
        return model.solve_form(_pad(scn.dense) if scn.padded else scn.dense, "float32")
    return FORMS[form](_pad(scn.dense) if scn.padded else scn.dense)


def value_and_grad(pre: model.Precomputed, scn: Scenario, x, lmbd: float = LMBD):
    """Loss, gradient and model profiles of ``pre`` at ``x`` through the solvers' own compiled objective."""
    xj = jnp.asarray(x, dtype=jnp.float64)
    lm = jnp.asarray(lmbd, dtype=jnp.float64)
    data = ObjectiveData.create(pre, scn.obs, lightcurve=scn.lightcurve)
    fn, _ = compiled_value_and_grad(xj, lm, pre, data, "mem", float(DEFAULT_PENALTY))
    val, grad, aux = fn(xj, lm, pre, data)
    return float(val), np.asarray(grad), np.asarray(aux.model)


# ------------------------------------------------------------------------------ solvers


def _invert(solver):
    def run(pre, scn, lmbds):
        return [dm.invert(pre, scn.obs, lmbd=lm, solver=solver, lightcurve=scn.lightcurve, cube_dtype=None, **SOLVE_KW)
                for lm in lmbds]
    return run


def _batch(mode):
    def run(pre, scn, lmbds):
        kw = {} if scn.lightcurve is None else {"lightcurve": scn.lightcurve}
        return invert_batch(pre, scn.obs, lmbds=list(lmbds), mode=mode, cube_dtype=None, **kw, **SOLVE_KW)
    return run


SOLVERS = {
    "lbfgsb": (_invert("lbfgsb"), (LMBD,)),
    "projected_lbfgs": (_invert("projected_lbfgs"), (LMBD,)),
    "newton": (_invert("newton"), (LMBD,)),
    # one member: the member-by-member path (the CPU policy for binned models); it runs the very
    # compiled solve of projected_lbfgs, so it costs no compilation of its own
    "batch1": (_batch("sequential"), (LMBD,)),
    "batch2": (_batch("vmap"), (LMBD, LMBD2)),
}
"""``name: (run(pre, scenario, lmbds) -> [InversionResult], lambdas)``. Every solve is given
the form as it is (``cube_dtype=None``), so the form axis is the model the solver iterates on."""

SOLVE_RTOL = {"plain": 1e-7, "mu_dependent": 1e-7, "padded": 1e-7, "lightcurve": 1e-6}
"""Relative distance of a solved loss from the reference optimum on the exact forms: the
solvers stop at ``tol = 1e-10`` within ~1e-8 of it (measured 0.4-1e-8), except projected
L-BFGS on the joint fit, which stops up to 3.2e-7 above it (measured; scipy's L-BFGS-B
within 1e-7). A binned solve may lie further, by twice the loss change its profile error
can cause (:func:`loss_bound`)."""


# ------------------------------------------------------------------------------ the reference


@functools.partial(jax.jit, static_argnames=("with_lc",))
def _exact_vg(x, lmbd, pre, obs, lc, with_lc):
    extra = dict(lightcurve=lc, line_weight=1.0, lc_weight=1.0) if with_lc else {}
    return jax.value_and_grad(objective.loss)(x, lmbd, pre, obs, "mem", DEFAULT_PENALTY, **extra)


def exact_value_and_grad(scn: Scenario, x, lmbd: float = LMBD):
    """Loss and gradient of the exact dense model (float64, its own compilation)."""
    v, g = _exact_vg(jnp.asarray(x, dtype=jnp.float64), jnp.asarray(lmbd, dtype=jnp.float64), scn.dense, scn.obs,
                     scn.lightcurve, scn.lightcurve is not None)
    return float(v), np.asarray(g, dtype=np.float64)


def exact_profiles(scn: Scenario, x) -> np.ndarray:
    """(n_epoch, n_vel) model profiles of the exact dense model at ``x``."""
    n, e = scn.dense.n_cell, scn.dense.n_epoch
    x = jnp.asarray(x, dtype=jnp.float64)
    return np.asarray(model.forward_jit(x[:n], x[n:2 * n], x[2 * n:2 * n + e], x[2 * n + e:], scn.dense))


def loss_bound(scn: Scenario, x, profile_error: float, lmbd: float = LMBD) -> float:
    """Largest loss change that model profiles off by at most ``profile_error`` can cause at ``x``:
    with normalised residuals r and changes d, ``|mean((r + d)^2 - r^2)| <= 2 sqrt(chi2) D + D^2``,
    ``D = profile_error / min(err)`` (the regulariser does not depend on the form)."""
    r = (np.asarray(scn.obs.flux) - exact_profiles(scn, x)) / np.asarray(scn.obs.err)
    d = profile_error / float(np.min(np.asarray(scn.obs.err)))
    return 2.0 * math.sqrt(float(np.mean(r * r))) * d + d * d


def feasible_bounds(scn: Scenario) -> Bounds:
    n, e = scn.dense.n_cell, scn.dense.n_epoch
    lo = np.concatenate([np.full(2 * n, FILL_MIN), np.full(2 * e, -np.inf)])
    hi = np.concatenate([np.full(2 * n, FILL_MAX), np.full(2 * e, np.inf)])
    return Bounds(lo, hi)


@dataclasses.dataclass(frozen=True)
class Reference:
    x: np.ndarray
    loss: float
    restart_gain: float  # relative loss gained by the second run: how far from converged the first was


@functools.cache
def reference(name: str, lmbd: float = LMBD) -> Reference:
    """scipy L-BFGS-B to a tight tolerance on the exact dense model of scenario ``name``.

    ``ftol = 0`` and a projected-gradient tolerance of 1e-11: the run ends where float64 no
    longer resolves a decrease (a line search failure), then once more from there with a
    fresh memory. The padded scenario has the optimum of the mu-dependent one (padding adds
    only zero-weight slots), so it shares that reference.
    """
    scn = scenario("mu_dependent" if name == "padded" else name)
    bounds = feasible_bounds(scn)
    n, e = scn.dense.n_cell, scn.dense.n_epoch
    x = np.concatenate([np.full(2 * n, FILL_MIN), np.zeros(2 * e)])
    opts = dict(ftol=0.0, gtol=1e-11, maxiter=20000, maxfun=40000, maxcor=30)
    losses = []
    for _ in range(2):
        res = minimize(lambda z: exact_value_and_grad(scn, z, lmbd), x, jac=True, method="L-BFGS-B",
                       bounds=bounds, options=opts)
        x = res.x
        losses.append(float(res.fun))
    return Reference(x=x, loss=exact_value_and_grad(scn, x, lmbd)[0],
                     restart_gain=(losses[0] - losses[1]) / abs(losses[1]))


def numpy_loss(scn: Scenario, x, lmbd: float = LMBD) -> float:
    """The dense model's loss transcribed from the formulas of ``dopplermap.model`` and
    ``dopplermap.objective`` in NumPy (line part only): per epoch, the sum over visible
    cells and components of ``weight * f_k * L_k``, divided by the sum of the weights,
    shifted by ``np.interp(v, v + rv, .)``, plus amp, divided by its mean; reduced chi2,
    the seed's entropy and the ``fssc + fssh <= 1`` penalty."""
    line, obs = scn.dense.line, scn.obs
    n, e = line.n_cell, line.n_epoch
    fc, fh, rv, amp = x[:n], x[n:2 * n], x[2 * n:2 * n + e], x[2 * n + e:]
    fill = np.stack([1.0 - fc - fh, fc, fh], axis=1)  # (n_cell, 3)
    vels = np.asarray(line.vels)
    weight, local, cell = np.asarray(line.weight), np.asarray(line.local), np.asarray(line.cell)
    flux, err = np.asarray(obs.flux), np.asarray(obs.err)
    chi = 0.0
    for i in range(e):
        a = weight[i] * fill[cell[i]]  # (n_slot, 3); padding slots have weight 0
        raw = np.einsum("sk,skv->v", a, local[i]) / a.sum()
        prof = np.interp(vels, vels + rv[i], raw) + amp[i]
        prof = prof / prof.mean()
        chi += np.sum(((flux[i] - prof) / err[i]) ** 2)
    chi /= flux.size
    area = np.asarray(scn.dense.cell_area)
    w = area / area.max()
    s = fc + fh
    m = FILL_MIN
    ent = np.sum(w * (fc * np.log(fc / m) + fh * np.log(fh / m) + s * np.log(s / (1.0 - m)))) / n
    pen = DEFAULT_PENALTY * np.sum(np.maximum(s - 1.0, 0.0) ** 2)
    return float(chi + lmbd * ent + pen)


def write_lsd_set(root, name: str, obs) -> None:
    """The epochs of ``obs`` as 3-column Donati LSD files in ``root/name/`` and their times
    table ``root/name.csv`` (columns file, bjd): one line data set of a target file."""
    (root / name).mkdir()
    rows = []
    for k, t in enumerate(np.asarray(obs.times)):
        fname = f"{name}_{k:02d}.lsd"
        write_lsd(root / name / fname, obs.vels, obs.flux[k], obs.err[k], columns=3)
        rows.append(f"{fname},{t:.8f}")
    (root / f"{name}.csv").write_text("file,bjd\n" + "\n".join(rows) + "\n")
