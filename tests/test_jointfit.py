import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap import jointfit as J
from dopplermap import search

sys.path.insert(0, str(Path(__file__).parent))
from _search_problem import small_problem  # noqa: E402

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


def test_star_gradient_matches_finite_difference(problem):
    prob, sim = problem
    obs = sim.obs
    model = J.dense_model(prob.grid, obs.times, obs.vels, prob.components)

    def c2(p):
        m = model(jnp.asarray(sim.fssc), jnp.asarray(sim.fssh), jnp.zeros(obs.n_epoch), jnp.zeros(obs.n_epoch),
                  p[0], p[1], p[2], prob.star.period, 0.0)
        return dm.chi2(m, obs)

    p = jnp.array([55.0, 38.0, 0.05])
    g = np.asarray(jax.grad(c2)(p))
    for i, h in enumerate((1e-4, 1e-4, 1e-5)):
        e = np.zeros(3)
        e[i] = h
        fd = (float(c2(p + e)) - float(c2(p - e))) / (2 * h)
        assert g[i] == pytest.approx(fd, rel=1e-4, abs=1e-9)


def test_joint_fit_recovers_inclination_and_vsini(problem):
    prob, sim = problem
    start = prob.star.replace(inclination=52.0, vsini=38.0)
    jf = J.joint_fit(prob.grid, start, sim.obs, prob.components, lmbd=LMBD)
    inc, vsini = jf.star.inclination, jf.star.vsini
    print(f"joint fit: inclination {inc:.2f} deg (true 60), vsini {vsini:.3f} km/s (true 40), "
          f"chi2 {jf.map.chi2:.4f} vs {jf.initial_map.chi2:.4f} at the start, {jf.map.iterations} iterations")
    assert abs(inc - 60.0) < 3.0
    assert abs(vsini - 40.0) < 1.0
    assert jf.map.chi2 < jf.initial_map.chi2
    # the grid search's best point is within one grid step of the joint fit
    axes = {"inclination": [52.0, 58.0, 64.0], "vsini": [39.0, 40.0, 41.0]}
    rows = [dict(p, **search.evaluate_point(prob, p, search.SolveSettings(lmbd=LMBD, tol=1e-7)))
            for p in search.grid_points(axes)]
    best = search.best_point(rows, list(axes))
    print(f"grid best: inclination {best['inclination']}, vsini {best['vsini']}")
    assert abs(best["inclination"] - inc) <= 6.0 and abs(best["vsini"] - vsini) <= 1.0


def test_bad_fit_names(problem):
    prob, sim = problem
    with pytest.raises(ValueError, match="star parameters"):
        J.joint_fit(prob.grid, prob.star, sim.obs, prob.components, fit=("gravity",))
