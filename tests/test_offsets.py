"""The Gaussian prior on the per-epoch continuum offsets (``offset_sigma``).

The term is checked against a NumPy transcription of its formula, its gradient against
finite differences, the default against the objective's other terms bit for bit, the three
solvers against each other, and what it is for: on a star whose profiles are simulated on a
finer grid with SpotDIPy-scaled local lines the offsets stay below 0.01 while chi2 stays ~1
and the map is not worse.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.helpers import write_lsd_set

import dopplermap as dm
from dopplermap import uncertainty
from dopplermap.broadening import scale_equivalent_width
from dopplermap.config import load_config, parse_config
from dopplermap.errors import DopplermapInputError
from dopplermap.lightcurve import LightCurveBand, precompute_lightcurve
from dopplermap.objective import (
    LineSets,
    chi2,
    objective_terms,
    offset_sigmas,
    sum_excess,
)
from dopplermap.problem import Settings, from_config
from dopplermap.regularisers import seed_entropy


@pytest.fixture(scope="module")
def star():
    """A small spotted star with true offsets of a few 1e-3 (dense model, 120 cells, 8 epochs)."""
    star, grid, times, vels, comps = dm.demo_setup(n_cell=120, n_epoch=8, n_vel=24, seed=4)
    amp = np.random.default_rng(4).normal(0.0, 0.004, times.size)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=400, amp=amp, seed=4, method="dense")
    pre = dm.precompute(grid, star, times, vels, comps, method="dense")
    return pre, sim


@pytest.fixture(scope="module")
def lightcurve(star):
    """A flat light curve of the same star (20 points), for the joint-fit weighting."""
    pre, sim = star
    band = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, 550.0, [dm.LimbDarkening("linear", (0.6,))] * 3)
    return precompute_lightcurve(sim.grid, sim.star, np.linspace(0, 3, 20), np.ones(20), np.full(20, 1e-3), band)


def _point(pre, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.uniform(1e-3, 0.4, 2 * pre.n_cell), rng.normal(0.0, 0.3, pre.n_epoch),
                           rng.normal(0.0, 0.01, pre.n_epoch)])


def test_term_is_the_formula(star, lightcurve):
    """offset_prior = sum_e (amp_e / sigma)^2 / (n_epoch n_vel), added to the loss as it is."""
    pre, sim = star
    x = _point(pre)
    amp = x[-pre.n_epoch:]
    n = sim.obs.flux.size
    plain, t0 = objective_terms(jnp.asarray(x), 0.8, pre, sim.obs)
    for sigma in (0.007, np.linspace(0.004, 0.02, pre.n_epoch)):
        with_prior, t = objective_terms(jnp.asarray(x), 0.8, pre, sim.obs, offset_sigma=sigma)
        want = np.sum((amp / sigma) ** 2) / n
        assert float(t.offset_prior) == pytest.approx(want, rel=1e-12)
        assert float(with_prior - plain) == pytest.approx(want, rel=1e-9)
        assert float(t.chi2) == float(t0.chi2)  # chi2 stays the data's
    # a joint fit multiplies it with the line chi-square by line_weight
    a = objective_terms(jnp.asarray(x), 0.8, pre, sim.obs, "mem", 1e4, lightcurve=lightcurve, line_weight=0.3,
                        lc_weight=2.0)[0]
    b = objective_terms(jnp.asarray(x), 0.8, pre, sim.obs, "mem", 1e4, lightcurve=lightcurve, line_weight=0.3,
                        lc_weight=2.0, offset_sigma=0.007)[0]
    assert float(b - a) == pytest.approx(0.3 * np.sum((amp / 0.007) ** 2) / n, rel=1e-9)


@pytest.mark.slow
def test_several_sets_each_their_sigma_and_weight(star):
    """Each set's epochs get that set's sigma (None: no prior), weighted and pooled like chi2."""
    pre, sim = star
    k = 5
    pa = dm.precompute(sim.grid, sim.star, sim.obs.times[:k], sim.obs.vels, sim.components, method="dense")
    pb = dm.precompute(sim.grid, sim.star, sim.obs.times[k:], sim.obs.vels, sim.components, method="dense")
    oa = dm.Observations.create(sim.obs.times[:k], sim.obs.vels, sim.obs.flux[:k], sim.obs.err[:k])
    ob = dm.Observations.create(sim.obs.times[k:], sim.obs.vels, sim.obs.flux[k:], sim.obs.err[k:])
    sets = LineSets.create([pa, pb], weights=[0.5, 2.0], names=["a", "b"])
    x = _point(pre, seed=1)
    amp = x[-pre.n_epoch:]
    n = sim.obs.flux.size
    sigma = offset_sigmas(sets, (0.006, None))
    assert np.all(sigma[:k] == 0.006) and np.all(np.isinf(sigma[k:]))
    plain, _ = objective_terms(jnp.asarray(x), 0.8, sets, (oa, ob))
    val, t = objective_terms(jnp.asarray(x), 0.8, sets, (oa, ob), offset_sigma=sigma)
    pa_sum = np.sum((amp[:k] / 0.006) ** 2)
    assert float(t.offset_prior) == pytest.approx(pa_sum / n, rel=1e-12)
    assert float(val - plain) == pytest.approx(0.5 * pa_sum / n, rel=1e-9)
    both = offset_sigmas(sets, (0.006, 0.01))
    _, t2 = objective_terms(jnp.asarray(x), 0.8, sets, (oa, ob), offset_sigma=both)
    assert float(t2.offset_prior) == pytest.approx((pa_sum + np.sum((amp[k:] / 0.01) ** 2)) / n, rel=1e-12)
    assert offset_sigmas(sets, (None, None)) is None and offset_sigmas(sets, 0.01).tolist() == [0.01] * pre.n_epoch


def test_gradient_matches_finite_differences(star):
    pre, sim = star
    x = _point(pre, seed=2)
    sigma = 0.005

    f = jax.jit(lambda v: objective_terms(v, 0.8, pre, sim.obs, offset_sigma=sigma)[0])
    g = np.asarray(jax.jit(jax.grad(f))(jnp.asarray(x)))
    g0 = np.asarray(jax.jit(jax.grad(lambda v: objective_terms(v, 0.8, pre, sim.obs)[0]))(jnp.asarray(x)))
    amp = x[-pre.n_epoch:]
    # the prior's own gradient, 2 amp / (sigma^2 n), on the offsets only
    assert np.allclose(g - g0, np.concatenate([np.zeros(x.size - pre.n_epoch),
                                               2 * amp / (sigma**2 * sim.obs.flux.size)]), rtol=1e-9, atol=1e-12)
    h = 1e-6
    for d in (np.eye(x.size)[-2], np.random.default_rng(5).normal(size=x.size)):
        fd = (float(f(jnp.asarray(x + h * d))) - float(f(jnp.asarray(x - h * d)))) / (2 * h)
        assert g @ d == pytest.approx(fd, rel=1e-6)


def test_default_is_the_loss_without_a_prior(star):
    """No offset_sigma: no term (None everywhere) and the loss is chi2 + lambda reg + penalty exactly."""
    pre, sim = star
    x = jnp.asarray(_point(pre, seed=3))
    val, t = objective_terms(x, 0.8, pre, sim.obs)
    fssc, fssh, rv, amp = dm.Layout(pre.n_cell, pre.n_epoch).split(x)
    want = chi2(dm.forward(fssc, fssh, rv, amp, pre), sim.obs) + 0.8 * seed_entropy(fssc, fssh, pre.cell_area) \
        + 1e4 * sum_excess(fssc, fssh)
    assert t.offset_prior is None and float(val) == float(want)
    res = dm.invert(pre, sim.obs, lmbd=1.0, tol=1e-6)
    assert res.offset_prior is None and res.summary()["offset_prior"] is None
    assert Settings().offset_sigma is None


@pytest.mark.parametrize("bad", [0.0, -0.01, float("nan"), float("inf"), "0.01", True])
def test_bad_sigma_is_refused_in_one_line(star, bad):
    pre, sim = star
    with pytest.raises(DopplermapInputError, match="offset_sigma must be a finite number > 0") as e:
        dm.invert(pre, sim.obs, offset_sigma=bad, maxiter=1)
    assert repr(bad) in str(e.value) and "\n" not in str(e.value)


TARGET = """
[star]
inclination = 60.0
vsini = 40.0
period = 2.0

[temperatures]
phot = 5000.0
cool = 3800.0
hot = 6000.0

[[lines]]
name = "a"
offset_sigma = 0.004
[lines.data]
profiles = ["a/*.lsd"]
times_table = "a.csv"
[lines.line]
wavelength_nm = 600.0
depth = [0.50, 0.60, 0.42]
fwhm = 9.0

[[lines]]
name = "b"
[lines.data]
profiles = ["b/*.lsd"]
times_table = "b.csv"
[lines.line]
wavelength_nm = 600.0
depth = [0.50, 0.60, 0.42]
fwhm = 9.0

[grid]
n_cell = 100

[inversion]
offset_sigma = 0.01
"""


def _tables():
    import tomllib

    return tomllib.loads(TARGET)


@pytest.mark.parametrize("where, value, match", [
    ("inversion", -0.01, r"t.toml: \[inversion\] offset_sigma must be > 0, got -0.01"),
    ("inversion", 0.0, r"\[inversion\] offset_sigma must be > 0, got 0.0"),
    ("inversion", float("inf"), r"\[inversion\] offset_sigma must be finite, got inf"),
    ("inversion", "small", r"\[inversion\] offset_sigma must be a number, got 'small'"),
    ("lines", 0.0, r"\[\[lines\]\] 2 \('b'\) offset_sigma must be > 0, got 0.0"),
    ("lines", "x", r"\[\[lines\]\] 2 offset_sigma must be a number, got 'x'"),
])
def test_bad_sigma_in_the_target_file_names_the_key(where, value, match):
    t = _tables()
    (t["inversion"] if where == "inversion" else t["lines"][1])["offset_sigma"] = value
    with pytest.raises(DopplermapInputError, match=match) as e:
        parse_config(t, source="t.toml")
    assert "\n" not in str(e.value)


def test_target_file_sigma_per_set_falls_back_to_the_inversion_one(tmp_path):
    star, grid, times, vels, comps = dm.demo_setup(n_cell=100, n_epoch=6, n_vel=24, seed=1)
    for name, sl in (("a", slice(0, 4)), ("b", slice(4, 6))):
        write_lsd_set(tmp_path, name, dm.simulate(grid, star, times[sl], vels, comps, dm.DEMO_SPOTS, snr=400, seed=1).obs)
    (tmp_path / "target.toml").write_text(TARGET)
    prob = from_config(load_config(tmp_path / "target.toml"))
    assert prob.settings.offset_sigma == (0.004, 0.01)
    assert offset_sigmas(prob.pre, prob.settings.offset_sigma).tolist() == [0.004] * 4 + [0.01] * 2
    with warnings.catch_warnings():  # a short solve (the term is what is checked): not converged
        warnings.simplefilter("ignore", dm.DopplermapWarning)
        res = dm.invert(prob, maxiter=40)  # the solver's term carries each set's sigma
    n = sum(o.flux.size for o in prob.observations)
    want = (np.sum((res.amp[:4] / 0.004) ** 2) + np.sum((res.amp[4:] / 0.01) ** 2)) / n
    assert res.offset_prior == pytest.approx(want, rel=1e-9) and res.summary()["offset_prior"] == res.offset_prior
    t = _tables()
    del t["inversion"]["offset_sigma"], t["lines"][0]["offset_sigma"]
    assert parse_config(t, source="t.toml").inversion.offset_sigma is None


_TIGHT = dict(lmbd=1.0, tol=1e-10, maxiter=5000, cube_dtype="float64", fit_rv=False)


@pytest.fixture(scope="module")
def solved(star):
    """The star solved with offset_sigma 0.003 by each solver, tightly (rv held: its interpolation
    kinks stall the L-BFGS solvers at ~1e-5 of the loss with or without a prior)."""
    pre, sim = star
    return {s: dm.invert(pre, sim.obs, offset_sigma=0.003, solver=s, **_TIGHT)
            for s in ("lbfgsb", "projected_lbfgs", "newton")}


@pytest.mark.slow
def test_three_solvers_agree_with_the_prior(star, solved):
    """Newton takes the prior as pseudo-data residuals, the L-BFGS solvers as a loss term: same optimum."""
    pre, sim = star
    res = solved
    ref = res["lbfgsb"]
    assert ref.offset_prior > 0
    for s, r in res.items():
        assert r.loss == pytest.approx(ref.loss, rel=1e-7), s
        assert r.offset_prior == pytest.approx(ref.offset_prior, rel=1e-3), s
        assert np.max(np.abs(r.amp - ref.amp)) < 1e-5, s
    # the prior pulls the offsets towards 0: smaller than with a (practically) flat one
    free = dm.invert(pre, sim.obs, offset_sigma=1e3, **_TIGHT)
    assert np.sum(ref.amp**2) < 0.1 * np.sum(free.amp**2)


def test_prior_keeps_the_offsets_below_001_on_a_spotdipy_scaled_star():
    """What the prior is for: gaussian_fit local lines, profiles simulated on a 4x
    finer grid, true offsets 0. Without the prior the offsets reach ~0.02 (a uniform cool layer
    and a negative offset fit almost equally well); with sigma = 0.005 (the continuum of a
    normalised LSD profile known to +-0.5 %) they stay below 0.01, chi2 ~ 1, map no worse."""
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=12, n_vel=30, seed=2)
    v_tab = np.linspace(-40.0, 40.0, 161)
    table = dm.tabulated(v_tab, 0.985 - 0.45 * np.exp(-v_tab**2 / 32.0) - 0.05 / (1.0 + (v_tab / 3.0) ** 2))
    lines = dm.ComponentSet(*[dm.Component(scale_equivalent_width(table, ew, "gaussian_fit"), c.limb_darkening,
                                           c.intensity) for c, ew in zip(comps, (6.0, 7.0, 5.0), strict=True)])
    sim = dm.simulate(dm.latitude_band_grid(1200), star, times, vels, lines, dm.DEMO_SPOTS, snr=500, seed=2,
                      method="dense")
    truth, _ = dm.spot_map(grid, dm.DEMO_SPOTS)
    pre = dm.precompute(grid, star, times, vels, lines, method="dense")
    free = dm.invert(pre, sim.obs, lmbd=1.0, tol=1e-7)
    prior = dm.invert(pre, sim.obs, lmbd=1.0, tol=1e-7, offset_sigma=0.005)
    assert np.max(np.abs(free.amp)) > 0.015  # the problem the prior solves
    assert np.max(np.abs(prior.amp)) < 0.01
    assert 0.85 < prior.chi2 < 1.15
    assert np.corrcoef(prior.fssc, truth)[0, 1] >= np.corrcoef(free.fssc, truth)[0, 1]


def test_uncertainty_maps_say_they_leave_the_prior_out(star, solved):
    pre, sim = star
    res = solved["lbfgsb"]
    problem = dm.Problem(grid=None, star=None, obs=sim.obs, components=None, form=pre)
    with pytest.warns(dm.DopplermapWarning, match="offset prior"), pytest.raises(DopplermapInputError, match="diagonal"):
        uncertainty.laplace(problem, res, diagonal="none")  # warns first, then refuses the diagonal


def test_newton_residuals_hold_the_prior_exactly(star, lightcurve):
    """|R|^2 + S of the Gauss-Newton form is the objective with the prior, alone and in a joint fit."""
    from dopplermap.objective import ObjectiveData
    from dopplermap.solvers import newton

    pre, sim = star
    x = jnp.asarray(_point(pre, seed=6))
    sigma = jnp.asarray(np.linspace(0.003, 0.02, pre.n_epoch))
    for lc in (None, lightcurve):
        data = ObjectiveData.create(pre, sim.obs, lightcurve=lc, line_weight=0.8, lc_weight=0.3).replace(
            offset_sigma=sigma)
        r = newton.line_residuals(x, 0.7, pre, data)
        ours = float(jnp.vdot(r, r) + newton.smooth_terms(x, 0.7, pre, data))
        extra = {} if lc is None else dict(lightcurve=lc, line_weight=0.8, lc_weight=0.3)
        theirs = float(objective_terms(x, 0.7, pre, sim.obs, "mem", 1e4, **extra, offset_sigma=sigma)[0])
        assert ours == pytest.approx(theirs, rel=1e-12), lc is None
