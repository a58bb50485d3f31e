"""dopplermap.fisher against closed forms, a Monte-Carlo least-squares fit and finite differences."""

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dopplermap.errors import DopplermapInputError
from dopplermap.fisher import fisher_matrix, jacobian, parameter_bound


def _line(n=40, sigma=0.3):
    x = np.linspace(-1.0, 3.0, n)
    return x, np.column_stack([np.ones(n), x]), np.full(n, sigma)  # y = a + b x


def test_straight_line_slope_variance_is_the_textbook_one():
    # y = a + b x: var(b) = sigma^2 / sum (x - xbar)^2 with a marginalised, sigma^2 / sum x^2 with a known
    x, a, sigma = _line()
    f = fisher_matrix(a, sigma)
    b = parameter_bound(f, [1])
    assert b.sd[0] == pytest.approx(0.3 / np.sqrt(np.sum((x - x.mean()) ** 2)), rel=1e-12)
    assert b.conditional_sd[0] == pytest.approx(0.3 / np.sqrt(np.sum(x * x)), rel=1e-12)
    held = parameter_bound(f, [1], held=[True, False])
    assert held.sd[0] == pytest.approx(b.conditional_sd[0], rel=1e-12)
    assert held.n_free == 1


def test_gaussian_prior_on_the_intercept_gives_the_closed_form_schur_complement():
    # prior precision q on a: var(b) = (n/s2 + q) / ((n/s2 + q) Sxx/s2 - (Sx/s2)^2) (2x2 inverse)
    x, a, sigma = _line()
    s2, n, q = sigma[0] ** 2, x.size, 7.0
    f = fisher_matrix(a, sigma)
    b = parameter_bound(f, [1], prior_hessian=np.diag([q, 0.0]))
    faa, fab, fbb = n / s2 + q, x.sum() / s2, np.sum(x * x) / s2
    assert b.sd[0] ** 2 == pytest.approx(faa / (faa * fbb - fab ** 2), rel=1e-12)


def test_marginal_block_equals_inverse_of_full_matrix_and_monte_carlo():
    rng = np.random.default_rng(3)
    m, p = 60, 8
    a = rng.normal(size=(m, p))
    sigma = rng.uniform(0.5, 2.0, m)
    prior = np.diag(rng.uniform(0.1, 1.0, p))
    f = fisher_matrix(a, sigma)
    prior = prior * 20.0  # strong enough that the posterior and the sampling widths differ
    b = parameter_bound(f, [2, 5], prior_hessian=prior, data_fisher=f)
    full = np.linalg.inv(f + prior)
    np.testing.assert_allclose(b.covariance, full[np.ix_([2, 5], [2, 5])], rtol=1e-10)
    sandwich = full @ f @ full
    np.testing.assert_allclose(b.sampling_covariance, sandwich[np.ix_([2, 5], [2, 5])], rtol=1e-10)
    assert np.all(np.diag(b.sampling_covariance) < 0.9 * np.diag(b.covariance))
    # the MAP's scatter over noise draws is the sandwich
    theta = rng.normal(size=p)
    w = 1.0 / sigma ** 2
    lhs = a.T @ (w[:, None] * a) + prior
    draws = []
    for _ in range(4000):
        y = a @ theta + sigma * rng.normal(size=m)
        draws.append(np.linalg.solve(lhs, a.T @ (w * y) + prior @ theta))  # prior centred on the truth
    emp = np.cov(np.array(draws)[:, [2, 5]].T)
    np.testing.assert_allclose(np.sqrt(np.diag(emp)), np.sqrt(np.diag(b.sampling_covariance)), rtol=0.05)
    # without a prior the two are the same
    nb = parameter_bound(f, [2, 5], data_fisher=f)
    np.testing.assert_allclose(nb.sampling_covariance, nb.covariance, rtol=1e-9)


def test_shift_is_the_prior_pull_of_the_linear_gaussian_map():
    # noise-free data, prior N(mu, Q^-1): the MAP is theta - (F + Q)^-1 Q (theta - mu) exactly
    rng = np.random.default_rng(4)
    a = rng.normal(size=(30, 5))
    sigma = np.full(30, 0.2)
    q = np.diag(rng.uniform(1.0, 5.0, 5))
    theta, mu = rng.normal(size=5), rng.normal(size=5)
    f = fisher_matrix(a, sigma)
    grad = q @ (theta - mu)  # gradient of the negative log posterior at theta on noise-free data
    b = parameter_bound(f, [0, 3], prior_hessian=q, gradient=grad)
    w = 1.0 / sigma ** 2
    y = a @ theta
    map_ = np.linalg.solve(a.T @ (w[:, None] * a) + q, a.T @ (w * y) + q @ mu)
    np.testing.assert_allclose(b.shift, (map_ - theta)[[0, 3]], rtol=1e-10, atol=1e-14)


def test_unidentifiable_parameter_is_infinite_and_others_unaffected():
    # columns 0 and 1 identical: a + b is measured, a and b separately are not; c is
    rng = np.random.default_rng(5)
    base = rng.normal(size=(25, 2))
    a = np.column_stack([base[:, 0], base[:, 0], base[:, 1]])
    f = fisher_matrix(a, np.ones(25))
    assert np.isinf(parameter_bound(f, [0]).sd[0])
    c = parameter_bound(f, [2]).sd[0]
    reduced = parameter_bound(fisher_matrix(base, np.ones(25)), [1]).sd[0]
    assert c == pytest.approx(reduced, rel=1e-8)
    # a prior on b makes a measurable again
    assert np.isfinite(parameter_bound(f, [0], prior_hessian=np.diag([0.0, 1.0, 0.0])).sd[0])


def test_a_bound_the_cut_off_makes_too_small_is_warned_about():
    """y = t x + b u + g (u + eps w): the data fix t, b + g and g eps, so sd(t) is that of the
    regression on [x, u, w] for every eps != 0. At eps 1e-9 the direction g - b has eigenvalue
    ~eps^2, below the cut-off: the pseudo-inverse treats it as known, sd(t) comes out as the
    regression on [x, u] alone (too small), and that is warned about. At eps 1e-3 the bound is
    the closed form, with no warning; nuisance columns exactly equal (no information on their
    difference, none on t) give no warning either."""
    import warnings

    from dopplermap.errors import DopplermapWarning

    rng = np.random.default_rng(3)
    x, u, w = rng.normal(size=(3, 50))
    w = x + 0.5 * w  # w shares most of x's direction: fixing g - b or not matters to t
    closed = np.sqrt(np.linalg.inv(fisher_matrix(np.column_stack([x, u, w]), np.ones(50)))[0, 0])
    known = np.sqrt(np.linalg.inv(fisher_matrix(np.column_stack([x, u]), np.ones(50)))[0, 0])
    assert known < 0.9 * closed
    f = fisher_matrix(np.column_stack([x, u, u + 1e-9 * w]), np.ones(50))
    with pytest.warns(DopplermapWarning, match="too small"):
        sd = parameter_bound(f, [0]).sd[0]
    assert sd == pytest.approx(known, rel=1e-6)  # what the pseudo-inverse says
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        f = fisher_matrix(np.column_stack([x, u, u + 1e-3 * w]), np.ones(50))
        assert parameter_bound(f, [0]).sd[0] == pytest.approx(closed, rel=1e-5)
        parameter_bound(fisher_matrix(np.column_stack([x, u, u]), np.ones(50)), [0])


def test_jacobian_matches_finite_differences_of_a_nonlinear_model():
    v = jnp.linspace(-3.0, 3.0, 17)

    def fn(z):  # a Gaussian line: depth, centre, width, and a 2-D output
        prof = 1.0 - z[0] * jnp.exp(-((v - z[1]) / z[2]) ** 2)
        return jnp.stack([prof, prof ** 2 + z[3]])

    x = np.array([0.4, 0.3, 1.2, 0.1])
    j = jacobian(fn, x, chunk=3)  # 4 parameters in chunks of 3: the padded last chunk too
    assert j.shape == (34, 4)
    h = 1e-6
    fd = np.column_stack([(np.asarray(fn(x + h * e)) - np.asarray(fn(x - h * e))).ravel() / (2 * h)
                          for e in np.eye(4)])
    np.testing.assert_allclose(j, fd, rtol=1e-7, atol=1e-9)


def test_bad_input_is_refused():
    f = np.eye(3)
    with pytest.raises(DopplermapInputError, match="index"):
        parameter_bound(f, [1], held=[False, True, False])
    with pytest.raises(DopplermapInputError, match="sigma"):
        fisher_matrix(np.ones((3, 2)), [1.0, 0.0, 1.0])
    with pytest.raises(DopplermapInputError, match="prior_hessian"):
        parameter_bound(f, [0], prior_hessian=np.eye(2))


def test_jacobian_compiles_once_per_function_and_shapes():
    """A second call with the same function (a Gauss-Newton step at a new point) or with other
    data of the same shapes in ``args`` does not trace again; the values are forward mode's."""
    v = jnp.linspace(-3.0, 3.0, 17)
    traces = []

    def fn(z, depth=1.0):
        traces.append(1)  # runs only while JAX traces
        return depth * z[0] * jnp.exp(-((v - z[1]) / z[2]) ** 2) + z[3] * v

    x = np.array([0.4, 0.3, 1.2, 0.1])
    for point in (x, x + 0.05):
        j = jacobian(fn, point, chunk=3)
        want = np.asarray(jax.jacfwd(fn)(jnp.asarray(point)))  # fn is 1-D already
        np.testing.assert_allclose(j, want, rtol=1e-12, atol=1e-12 * np.max(np.abs(want)))
    n_first = len(traces)
    assert n_first >= 1
    jacobian(fn, x + 0.1, chunk=3)
    assert len(traces) == n_first  # same fn, same shapes: the compiled program is reused
    jacobian(fn, x, chunk=3, args=(jnp.asarray(2.0),))
    n_args = len(traces)
    doubled = jacobian(fn, x, chunk=3, args=(jnp.asarray(4.0),))
    assert len(traces) == n_args  # other data as arguments: no new trace
    base = jacobian(fn, x, chunk=3, args=(jnp.asarray(1.0),))
    np.testing.assert_allclose(doubled[:, :3], 4.0 * base[:, :3], rtol=1e-12)  # the data reach the result
    with pytest.raises(DopplermapInputError, match="chunk must be an integer >= 1"):
        jacobian(fn, x, chunk=0)
    # the kept program does not keep the function (and the data it closes over) alive
    gone = weakref.ref(fn)
    del fn
    gc.collect()
    assert gone() is None
