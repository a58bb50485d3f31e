"""The light-curves-alone back end of ``solver="newton"`` (:mod:`dopplermap.solvers.photometry`).

Its pieces against generic solvers (scipy's SLSQP on each cell's triangle and on a small
bounded subproblem), and the whole solve against a tightly converged L-BFGS-B on a star
simulated by the independent pixel integrator of ``test_lightcurve_only``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize
from test_lightcurve_only import _problem

from dopplermap.solvers import invert
from dopplermap.solvers.photometry import cell_minimum, subproblem

FLOOR = 1e-5


def _pd_block(rng, k):
    a, d = rng.uniform(0.1, 10.0, k), rng.uniform(0.1, 10.0, k)
    c = rng.uniform(-0.9, 0.9, k) * np.sqrt(a * d)
    return a, c, d


def _slsqp(fun, x0, lo, hi, x):
    """argmin over ``lo <= x + v <= hi`` and every cell's ``(x + v)_c + (x + v)_h <= 1``."""
    n = x.size // 2
    cons = {"type": "ineq", "fun": lambda v: 1.0 - (x[:n] + v[:n] + x[n:] + v[n:])}
    best = None
    for start in (x0, np.clip(x + 0.0, lo, hi) - x, np.zeros_like(x0)):
        r = minimize(fun, start, method="SLSQP", bounds=list(zip(lo - x, hi - x, strict=True)), constraints=[cons],
                     options={"ftol": 1e-15, "maxiter": 2000})
        if best is None or r.fun < best.fun:
            best = r
    return best


@pytest.mark.slow
def test_cell_minimum_matches_a_generic_solver():
    rng = np.random.default_rng(3)
    k = 300
    a, c, d = _pd_block(rng, k)
    h1, h2 = rng.normal(size=(2, k)) * np.where(np.arange(k) < k // 2, 0.05, 5.0)  # inside, and beyond
    x1 = rng.uniform(FLOOR, 0.6, k)
    x2 = rng.uniform(FLOOR, 1.0 - x1)
    l1, l2 = np.full(k, FLOOR), np.full(k, FLOOR)
    u1, u2 = np.full(k, 1 - FLOOR), np.full(k, 1 - FLOOR)
    u2[:40] = FLOOR  # a two-temperature map: the hot filling factor held at the floor
    x2[:40] = FLOOR
    def cells(h1, h2, *rest):
        a, c, d, x1, x2, l1, l2, u1, u2 = map(jnp.asarray, rest)
        out = cell_minimum((jnp.asarray(h1), jnp.asarray(h2)), (a, c, d), (x1, x2), (l1, l2), (u1, u2))
        return tuple(map(np.asarray, out))

    v1, v2, m11, m12, m22 = cells(h1, h2, a, c, d, x1, x2, l1, l2, u1, u2)
    interior = edge = 0
    for i in range(k):
        def q(v, i=i):
            return h1[i] * v[0] + h2[i] * v[1] + 0.5 * (a[i] * v[0] ** 2 + 2 * c[i] * v[0] * v[1] + d[i] * v[1] ** 2)

        x = np.array([x1[i], x2[i]])
        ref = _slsqp(q, np.zeros(2), np.array([l1[i], l2[i]]), np.array([u1[i], u2[i]]), x)
        got = q(np.array([v1[i], v2[i]]))
        assert got <= ref.fun + 1e-9 * max(1.0, abs(ref.fun)), (i, got, ref.fun)
        y = x + np.array([v1[i], v2[i]])
        assert l1[i] - 1e-12 <= y[0] <= u1[i] + 1e-12 and l2[i] - 1e-12 <= y[1] <= u2[i] + 1e-12
        assert y.sum() <= 1.0 + 1e-12
        # M = -dv/dh by finite differences on the same piece
        eps = 1e-7
        for j, e in enumerate(((1.0, 0.0), (0.0, 1.0))):
            w1, w2, *_ = cells(h1[i] + eps * e[0], h2[i] + eps * e[1], a[i], c[i], d[i], x1[i], x2[i], l1[i], l2[i],
                               u1[i], u2[i])
            fd = -(np.array([w1, w2]) - np.array([v1[i], v2[i]])) / eps
            col = np.array([m11[i], m12[i]]) if j == 0 else np.array([m12[i], m22[i]])
            np.testing.assert_allclose(fd, col, atol=1e-5 * max(1.0, np.abs(col).max()))
        det = a[i] * d[i] - c[i] ** 2
        interior += bool(np.isclose(m11[i], d[i] / det))
        edge += bool(m11[i] * m22[i] - m12[i] ** 2 < 1e-12 * max(m11[i], m22[i], 1.0) ** 2 and max(m11[i], m22[i]) > 0)
    assert interior > 20 and edge > 20  # both pieces were tested


def test_subproblem_matches_a_generic_solver():
    rng = np.random.default_rng(7)
    n, m = 8, 5
    a, c, d = _pd_block(rng, n)
    jac = rng.normal(size=(m, 2 * n))
    g = rng.normal(scale=3.0, size=2 * n)
    x = np.concatenate([rng.uniform(FLOOR, 0.5, n), rng.uniform(FLOOR, 0.4, n)])
    x[0], x[n] = 0.7, 0.3 - 1e-9  # a cell on the face
    lo, hi = np.full(2 * n, FLOOR), np.full(2 * n, 1 - FLOOR)

    def model(v):
        jv = jac @ v
        return g @ v + 0.5 * (v[:n] @ (a * v[:n] + c * v[n:]) + v[n:] @ (c * v[:n] + d * v[n:])) + jv @ jv

    j = jnp.asarray
    v, nu, its = subproblem(j(g), j(jac), (j(a), j(c), j(d)), j(x), (j(lo), j(hi)), j(np.zeros(m)))
    v = np.asarray(v)
    ref = _slsqp(model, np.zeros(2 * n), lo, hi, x)
    assert model(v) <= ref.fun + 1e-9 * max(1.0, abs(ref.fun))
    np.testing.assert_allclose(v, ref.x, atol=1e-5)
    np.testing.assert_allclose(np.asarray(nu), 2.0 * jac @ v, atol=1e-8)  # the dual's optimum
    assert np.all(x + v >= lo - 1e-12) and np.all(x + v <= hi + 1e-12)
    assert np.all(x[:n] + v[:n] + x[n:] + v[n:] <= 1.0 + 1e-12)
    assert int(its) < 60


@pytest.mark.slow
def test_newton_on_light_curves_alone_reaches_the_minimum():
    """At the default tolerance Gauss-Newton ends at the minimum that L-BFGS-B reaches only at
    tol 1e-12 after thousands of iterations; L-BFGS-B at the default stops above it."""
    prob = _problem([np.linspace(0.0, 2.0 * 1.7, 160)], lmbd=0.1)
    gn = invert(prob, solver="newton")
    ref = invert(prob, solver="lbfgsb", tol=1e-12, maxiter=50000)
    quick = invert(prob, solver="lbfgsb")
    assert gn.success and gn.iterations < 60
    assert gn.loss <= ref.loss * (1 + 1e-5)
    assert quick.loss > gn.loss * (1 + 1e-4)
    np.testing.assert_allclose(gn.fssc, ref.fssc, atol=0.02)
    assert gn.history["loss"].size == gn.iterations and np.all(np.diff(gn.history["loss"]) < 0)


@pytest.mark.slow
def test_newton_on_light_curves_alone_two_temperature_and_two_bands():
    """The hot filling factors held at the floor (``fit_components=("cool",)``), and two bands."""
    prob = _problem([np.linspace(0.0, 1.2 * 1.7, 80), np.linspace(30.0, 30.0 + 1.2 * 1.7, 80)], lmbd=0.1,
                    fit_components=("cool",))
    gn = invert(prob, solver="newton")
    ref = invert(prob, solver="lbfgsb", tol=1e-12, maxiter=50000)
    assert gn.success and np.all(gn.fssh == pytest.approx(FLOOR))
    assert gn.loss <= ref.loss * (1 + 1e-5)
    assert set(gn.chi2_lc_sets) == {"sector1", "sector2"}


@pytest.mark.slow  # 8-10 s: keeps the default suite within 5 minutes on 2 cores
@pytest.mark.parametrize("width", ["posterior", "sandwich"])
def test_laplace_of_light_curves_alone_against_the_dense_hessian(width):
    """The Woodbury widths against the dense inverse: of the same Gauss-Newton Hessian to rounding, and of
    the exact Hessian (``jax.hessian`` of the loss, the normalisation's curvature included): 1 % in the median
    cell, 10 % at most."""
    import jax

    from dopplermap.objective import ObjectiveData, data_terms
    from dopplermap.solvers.photometry import local_model
    from dopplermap.uncertainty import laplace

    prob = _problem([np.linspace(0.0, 1.7, 60)], n_cell=120, lmbd=0.3, tol=1e-9)
    best = invert(prob, solver="newton")
    unc = laplace(prob, best, width=width)
    nc = prob.grid.n_cell
    x = np.concatenate([best.fssc, best.fssh])
    data = ObjectiveData.create(prob.pre, None, lightcurve=prob.lightcurve)
    _, jac, (a, c, d) = local_model(x, best.lmbd, prob.pre, data, "mem", 1e4)
    jac = np.asarray(jac)
    s = np.zeros((2 * nc, 2 * nc))
    i = np.arange(nc)
    s[i, i], s[nc + i, nc + i], s[i, nc + i], s[nc + i, i] = a, d, c, c
    free = ~np.concatenate(unc.at_bound) & np.concatenate([~unc.never_visible] * 2)
    assert free.sum() > 20
    exact = np.asarray(jax.hessian(lambda z: data_terms(z, best.lmbd, prob.pre, data, "mem")[0])(jnp.asarray(x)))
    sd = np.concatenate([unc.sigma_fssc, unc.sigma_fssh])[free]
    scale = 0.5 * 60
    for hess, median, most in ((2 * jac.T @ jac + s, 1e-7, 1e-6), (exact, 0.01, 0.1)):
        binv = np.linalg.inv(hess[np.ix_(free, free)])
        f = 2 * jac[:, free].T @ jac[:, free]
        cov = binv if width == "posterior" else binv @ f @ binv
        rel = np.abs(sd / np.sqrt(np.diag(cov) / scale) - 1.0)
        assert np.median(rel) < median and rel.max() < most, (np.median(rel), rel.max())
    from dopplermap.errors import DopplermapInputError

    for bad in (dict(lmbd=0.0), dict(regulariser="tikhonov")):  # no prior block in every cell: refused in one line
        with pytest.raises(DopplermapInputError, match="light curves alone needs an entropy regulariser"):
            laplace(prob, invert(prob, maxiter=3, **bad), width=width)


def test_the_choice_and_the_estimate_name_gauss_newton():
    """``choose_solver(problem)`` (no solve set up yet) says what ``invert`` will run, and the line printed
    before the solve gives Gauss-Newton's own estimate, which grows as the points squared."""
    from dopplermap.app.target import estimate_line
    from dopplermap.solvers import choose_solver, photometry

    prob = _problem([np.linspace(0.0, 1.7, 60)], n_cell=120, solver="auto")
    assert choose_solver(prob) == "newton" == invert(prob, maxiter=2).solver
    assert choose_solver(prob.replace(settings=prob.settings.replace(regulariser="tikhonov"))) == "lbfgsb"
    est = prob.lightcurve_estimate()
    assert "Gauss-Newton, about" in estimate_line(est, 120, gauss_newton=True)
    assert "of the solve" in estimate_line(est, 120)
    assert photometry.seconds(2000, 2500) == pytest.approx(4 * photometry.seconds(1000, 2500))
