
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.problems import small_problem  # noqa: E402

import dopplermap as dm
from dopplermap import jointfit as J
from dopplermap import search
from dopplermap.problem import Settings

LMBD = 0.03


@pytest.fixture(scope="module")
def problem():
    return small_problem(n_cell=300, n_epoch=24, snr=1000.0)


def test_dense_model_equals_precomputed_dense(problem):
    prob, sim = problem
    obs = sim.obs
    model = J.dense_model(prob.grid, obs.times, obs.vels, prob.components)
    pre = dm.precompute(prob.grid, prob.star, obs.times, obs.vels, prob.components, method="dense")
    got = model(jnp.asarray(sim.fssc), jnp.asarray(sim.fssh), jnp.asarray(sim.rv) + 0.3, jnp.asarray(sim.amp),
                60.0, 40.0, 0.0, prob.star.period, 0.0)
    ref = dm.forward(sim.fssc, sim.fssh, sim.rv + 0.3, sim.amp, pre)
    np.testing.assert_allclose(got, ref, atol=1e-12)


@pytest.mark.slow
def test_star_gradient_matches_finite_difference(problem):
    prob, sim = problem
    obs = sim.obs
    model = J.dense_model(prob.grid, obs.times, obs.vels, prob.components)

    @jax.jit  # compiled once for the six evaluations (op by op they take several times longer)
    def c2(p):
        m = model(jnp.asarray(sim.fssc), jnp.asarray(sim.fssh), jnp.zeros(obs.n_epoch), jnp.zeros(obs.n_epoch),
                  p[0], p[1], p[2], prob.star.period, 0.0)
        return dm.objective.chi2(m, obs)

    p = jnp.array([55.0, 38.0, 0.05])
    g = np.asarray(jax.grad(c2)(p))
    for i, h in enumerate((1e-4, 1e-4, 1e-5)):
        e = np.zeros(3)
        e[i] = h
        fd = (float(c2(p + e)) - float(c2(p - e))) / (2 * h)
        assert g[i] == pytest.approx(fd, rel=1e-4, abs=1e-9)


@pytest.mark.slow
def test_joint_fit_recovers_inclination_and_vsini(problem):
    prob, sim = problem
    start = prob.star.replace(inclination=52.0, vsini=38.0)
    jf = J.joint_fit(prob.replace(star=start, obs=sim.obs, settings=Settings(lmbd=LMBD)))
    inc, vsini = jf.star.inclination, jf.star.vsini
    print(f"joint fit: inclination {inc:.2f} deg (true 60), vsini {vsini:.3f} km/s (true 40), "
          f"chi2 {jf.map.chi2:.4f} vs {jf.initial_map.chi2:.4f} at the start, {jf.map.iterations} iterations")
    assert abs(inc - 60.0) < 3.0
    assert abs(vsini - 40.0) < 1.0
    assert jf.map.chi2 < jf.initial_map.chi2
    # the grid search's best point is within one grid step of the joint fit
    axes = {"inclination": [52.0, 58.0, 64.0], "vsini": [39.0, 40.0, 41.0]}
    rows = [dict(p, **search.evaluate_point(prob.replace(settings=Settings(lmbd=LMBD, tol=1e-7)), p))
            for p in search.grid_points(axes)]
    best = search.best_point(rows, list(axes))
    print(f"grid best: inclination {best['inclination']}, vsini {best['vsini']}")
    assert abs(best["inclination"] - inc) <= 6.0 and abs(best["vsini"] - vsini) <= 1.0


def test_bad_fit_names(problem):
    prob, sim = problem
    with pytest.raises(ValueError, match="star parameters"):
        J.joint_fit(prob.replace(obs=sim.obs), fit=("gravity",))


def test_limb_kink_distance_finds_the_limb_crossings(problem):
    """The crossings where some cell's mu changes sign, found by brute force on a fine
    inclination grid, are where limb_kink_distance says they are; a fitted inclination on one
    is reported with a warning (the gradient fit stalls on these kinks)."""
    from dopplermap.geometry import cell_geometry

    prob, sim = problem
    times = np.asarray(sim.obs.times)
    star = prob.star
    incs = np.linspace(50.0, 51.0, 2001)  # 5e-4 deg apart
    mus = np.stack([cell_geometry((prob.grid.lat, prob.grid.lon, prob.grid.area), times, (i, 1.0, star.period, star.t0, star.domega), xp=np).mu for i in incs])
    flips = np.flatnonzero(np.any(np.sign(mus[1:]) != np.sign(mus[:-1]), axis=(1, 2)))
    assert flips.size > 3
    for k in flips[:5]:
        between = 0.5 * (incs[k] + incs[k + 1])
        assert J.limb_kink_distance(prob.grid, times, star.replace(inclination=between)) <= 2.6e-4
    calm = [i for i in range(len(incs) - 40) if not np.any((flips >= i - 40) & (flips <= i + 40))]
    if calm:  # 40 steps (0.02 deg) from every flip
        assert J.limb_kink_distance(prob.grid, times, star.replace(inclination=incs[calm[0]])) > 0.015
    # exactly on a crossing: mu of that cell is zero there
    b = cell_geometry((prob.grid.lat, prob.grid.lon, prob.grid.area), times, (0.0, 1.0, star.period, star.t0, star.domega), xp=np).mu
    a = cell_geometry((prob.grid.lat, prob.grid.lon, prob.grid.area), times, (90.0, 1.0, star.period, star.t0, star.domega), xp=np).mu
    crossing = np.degrees(np.arctan2(-b, a)) % 180.0
    e, c = np.unravel_index(np.argmin(np.abs(crossing - 50.5)), b.shape)
    i0 = float(crossing[e, c])
    assert J.limb_kink_distance(prob.grid, times, star.replace(inclination=i0)) < 1e-9
    mu0 = cell_geometry((prob.grid.lat, prob.grid.lon, prob.grid.area), times, (i0, 1.0, star.period, star.t0, star.domega), xp=np).mu[e, c]
    assert abs(mu0) < 1e-12


def _crossing_chi2(limb):
    """chi2(inclination) of a small dense model against data made at 57 deg, and an inclination
    near 55 deg where a cell crosses the limb (mu = 0) at some epoch."""
    from dopplermap.geometry import cell_geometry

    star, grid, times, vels, comps = dm.demo_setup(n_cell=120, n_epoch=6, n_vel=20, seed=2)
    sim = dm.simulate(grid, star.replace(inclination=57.0), times, vels, comps, dm.DEMO_SPOTS, snr=500, seed=2)
    model = J.dense_model(grid, times, vels, comps, limb=limb)
    zero = jnp.zeros(len(times))

    def c2(inc):
        return dm.objective.chi2(model(jnp.asarray(sim.fssc), jnp.asarray(sim.fssh), zero, zero, inc, star.vsini,
                                       0.0, star.period, star.t0), sim.obs)

    b = cell_geometry((grid.lat, grid.lon, grid.area), times, (0.0, 1.0, star.period, star.t0), xp=np).mu
    a = cell_geometry((grid.lat, grid.lon, grid.area), times, (90.0, 1.0, star.period, star.t0), xp=np).mu
    crossing = np.degrees(np.arctan2(-b, a)) % 180.0
    return jax.jit(c2), float(crossing.flat[np.argmin(np.abs(crossing - 55.0))])


def test_smooth_limb_model_is_differentiable_where_a_cell_crosses_the_limb():
    smooth, i0 = _crossing_chi2("smooth")
    assert abs(i0 - 55.0) < 1.0
    g = float(jax.grad(smooth)(i0))
    h = 1e-4
    left = (float(smooth(i0)) - float(smooth(i0 - h))) / h
    right = (float(smooth(i0 + h)) - float(smooth(i0))) / h
    assert g == pytest.approx(0.5 * (left + right), rel=1e-4)
    assert right == pytest.approx(left, rel=1e-3)
    # the sharp limb max(mu, 0) at the same point: the one-sided slopes differ (a kink)
    sharp, _ = _crossing_chi2("sharp")
    left = (float(sharp(i0)) - float(sharp(i0 - h))) / h
    right = (float(sharp(i0 + h)) - float(sharp(i0))) / h
    assert abs(right - left) > 1e-3 * abs(left)


def test_joint_fit_warns_when_it_stops_on_a_limb_kink(problem, monkeypatch):
    prob, sim = problem
    x0 = np.concatenate([sim.fssc, sim.fssh, np.zeros(sim.obs.n_epoch), np.zeros(sim.obs.n_epoch)])
    monkeypatch.setattr(J, "limb_kink_distance", lambda *a: 0.0)
    with pytest.warns(dm.DopplermapWarning, match="crosses the limb"):
        jf = J.joint_fit(prob.replace(obs=sim.obs, settings=Settings(lmbd=LMBD)), x0=x0, maxiter=2, limb="sharp")
    assert jf.limb_kink_deg == 0.0 and not jf.map.success  # a kink is never reported as an optimum
    monkeypatch.undo()
    assert J.limb_kink_distance(prob.grid, sim.obs.times, jf.star) > 0.0


def test_joint_fit_with_the_smooth_limb_has_no_kink_to_warn_about(problem, monkeypatch, recwarn):
    prob, sim = problem
    x0 = np.concatenate([sim.fssc, sim.fssh, np.zeros(sim.obs.n_epoch), np.full(sim.obs.n_epoch, 0.002)])
    monkeypatch.setattr(J, "limb_kink_distance", lambda *a: 0.0)  # even on a crossing of mu = 0
    jf = J.joint_fit(prob.replace(obs=sim.obs, settings=Settings(lmbd=LMBD, offset_sigma=0.01)), x0=x0, maxiter=2)
    assert not [w for w in recwarn if "limb" in str(w.message)]
    assert jf.limb_kink_deg is None
    # the offset prior is in the fit: its term is sum (amp / sigma)^2 over the data points
    amp = jf.map.amp
    assert jf.map.offset_prior == pytest.approx(float(np.sum((amp / 0.01) ** 2)) / sim.obs.flux.size, rel=1e-9)
    assert jf.map.offset_prior > 0.0
    # the reported map is the dense model's at the fitted star (invert's finish), and knows that star
    pre = dm.precompute(prob.grid, jf.star, sim.obs.times, sim.obs.vels, prob.components, method="dense")
    model = dm.forward(jf.map.fssc, jf.map.fssh, jf.map.rv, jf.map.amp, pre)
    assert jf.map.chi2 == pytest.approx(float(dm.objective.chi2(model, sim.obs)), rel=1e-10)
    np.testing.assert_allclose(jf.map.model, model, rtol=0, atol=1e-12)
    assert jf.map.star == jf.star and jf.map.grid is prob.grid


def test_joint_fit_checks_its_settings_as_invert_does(problem):
    """The joint fit's settings pass invert's checks (its prepare), also with a given start."""
    prob, sim = problem
    x0 = np.concatenate([sim.fssc, sim.fssh, np.zeros(2 * sim.obs.n_epoch)])
    for settings, what in ((Settings(lmbd=-1.0), "lmbd"), (Settings(offset_sigma=0.0), "offset_sigma"),
                           (Settings(regulariser="entropy"), "regulariser")):
        with pytest.raises(dm.DopplermapInputError, match=what) as exc:
            J.joint_fit(prob.replace(obs=sim.obs, settings=settings), x0=x0)
        assert "\n" not in str(exc.value)
    with pytest.raises(dm.DopplermapInputError, match="x0 must have shape"):
        J.joint_fit(prob.replace(obs=sim.obs), x0=x0[:-1])


def test_joint_fit_refuses_what_its_dense_model_does_not_fit(problem):
    from dopplermap.problem import LightCurveData, LineData, Problem

    prob, sim = problem
    sets = (LineData(obs=sim.obs, components=prob.components, name="a"),
            LineData(obs=sim.obs, components=prob.components, name="b"))
    several = Problem(grid=prob.grid, star=prob.star, obs=None, components=None, lines=sets)
    n = 5
    lc = prob.replace(lightcurve_data=LightCurveData(times=np.linspace(0.0, 1.0, n), flux=np.ones(n),
                                                     err=np.full(n, 1e-3), band=None))
    given = Problem(grid=prob.grid, star=None, obs=sim.obs, components=None, form=prob.pre)
    for p, what in ((several, "several line data sets"), (lc, "a light curve"), (given, "a given synthesis form")):
        with pytest.raises(dm.DopplermapInputError, match=what) as exc:
            J.joint_fit(p)
        assert "\n" not in str(exc.value)
