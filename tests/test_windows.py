"""Maps that change with time (dopplermap.windows): the windowed layout, the temporal
coupling, K = 1 against the static problem, and the inputs refused."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.errors import DopplermapInputError, DopplermapWarning
from dopplermap.objective import ObjectiveData, data_terms, n_windows
from dopplermap.problem import Problem, Settings, demo_problem
from dopplermap.windows import Windows, temporal_difference, window_form


@pytest.fixture(scope="module")
def tiny():
    """A tiny demo star: 200 cells, 12 epochs, 20 velocities."""
    return demo_problem(n_cell=200, n_epoch=12, n_vel=20, snr=400.0, settings=Settings(lmbd=0.5, tol=1e-6))


# one compiled program per shape, shared by the tests
_VALUE_AND_GRAD = jax.jit(jax.value_and_grad(lambda v, p, d: data_terms(v, 0.5, p, d, "mem"), has_aux=True))


def _terms(problem, x, lmbd_time=0.0):
    pre = problem.pre
    data = ObjectiveData.create(pre, problem.obs, lmbd_time=lmbd_time)
    (val, terms), grad = _VALUE_AND_GRAD(jax.numpy.asarray(x), pre, data)
    return float(val), np.asarray(grad), terms


def _a_map(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(1e-3, 0.4, n), rng.uniform(1e-3, 0.3, n)


def test_windows_builders_and_index():
    t = np.array([0.1, 0.5, 1.9, 2.1, 4.0, 6.2])
    w = Windows.count(3, t)
    assert w.n_window == 3 and w.edges[0] == 0.1 and w.edges[-1] >= 6.2
    assert list(w.index(t)) == [0, 0, 0, 0, 1, 2]  # edges 0.1, 2.133, 4.167, 6.2
    r = Windows.rotations(1.0, t, period=2.0, t0=0.0)
    assert r.edges == (0.0, 2.0, 4.0, 6.0, 8.0)
    assert list(r.index(t)) == [0, 0, 0, 1, 2, 3]
    g = Windows.gaps(1.0, t)
    assert g.n_window == 4 and list(g.index(t)) == [0, 0, 1, 1, 2, 3]
    c = Windows.from_cycles([0, 1.5, 4], period=2.0, t0=0.0)
    assert c.edges == (0.0, 3.0, 8.0)
    np.testing.assert_allclose(c.spans, [[0, 3], [3, 8]])


@pytest.mark.parametrize("bad", [(1.0,), (0.0, 0.0), (2.0, 1.0), (0.0, np.nan)])
def test_windows_bad_edges_refused(bad):
    with pytest.raises(DopplermapInputError, match="window edges"):
        Windows(bad)


def test_time_outside_the_windows_refused():
    with pytest.raises(DopplermapInputError, match="1 epochs lie outside the windows"):
        Windows((0.0, 1.0, 2.0)).index([0.5, 2.5])


def test_empty_window_warns(tiny):
    t = np.asarray(tiny.obs.times)
    w = Windows((t.min(), t.min() + 1e-6, t.min() + 2e-6, t.max() + 1.0))
    with pytest.warns(DopplermapWarning, match="hold no epoch"):
        tiny.replace(windows=w).pre  # noqa: B018


def test_one_window_is_the_static_problem(tiny):
    """K = 1: loss and gradient equal the static problem's to 1e-12, and so does the solve."""
    one = tiny.replace(windows=Windows.count(1, tiny.obs.times))
    fc, fh = _a_map(200)
    x = tiny.layout.join(fc, fh, np.full(12, 0.1), np.full(12, 0.01))
    v0, g0, _ = _terms(tiny, x)
    v1, g1, t1 = _terms(one, x)
    assert abs(v1 - v0) <= 1e-12 * abs(v0)
    np.testing.assert_allclose(g1, g0, rtol=0, atol=1e-12 * np.max(np.abs(g0)))
    assert t1.temporal is None
    r0, r1 = dm.invert(tiny), dm.invert(one)
    assert abs(r1.loss - r0.loss) <= 1e-12 * abs(r0.loss)
    assert r1.n_window == 1 and r1.n_cell == r0.n_cell


def test_equal_maps_in_every_window_give_the_static_loss(tiny):
    """The windowed form reads each epoch's window map: with the same map in every window the
    chi-square and (mean) regulariser are the static ones, the coupling is zero, and the
    gradient of each window is the static gradient restricted to that window's epochs (which
    sum to the static one)."""
    t = np.asarray(tiny.obs.times)
    win = tiny.replace(windows=Windows.count(3, t))
    assert n_windows(win.pre) == 3 and win.layout.size == 3 * 2 * 200 + 2 * 12
    fc, fh = _a_map(200, seed=1)
    rv, amp = np.full(12, -0.2), np.full(12, 0.003)
    v0, g0, t0 = _terms(tiny, tiny.layout.join(fc, fh, rv, amp))
    xw = win.layout.join(np.tile(fc, 3), np.tile(fh, 3), rv, amp)
    v3, g3, t3 = _terms(win, xw, lmbd_time=7.0)
    assert abs(v3 - v0) <= 1e-12 * abs(v0)
    assert float(t3.temporal) == 0.0 and abs(float(t3.chi2) - float(t0.chi2)) <= 1e-12 * float(t0.chi2)
    # gradient: the chi-square part of each window's block sums to the static one; the
    # regulariser's part is 1/K of the static one in each window
    gc3 = g3[:600].reshape(3, 200)
    np.testing.assert_allclose(gc3.sum(axis=0), g0[:200], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(g3[1200:], g0[400:], rtol=1e-10, atol=1e-14)
    idx = win.window_index()
    assert set(idx.tolist()) == {0, 1, 2}


def test_temporal_coupling_value_and_weight(tiny):
    t = np.asarray(tiny.obs.times)
    win = tiny.replace(windows=Windows.count(2, t))
    fc, fh = _a_map(200, seed=2)
    gc, gh = _a_map(200, seed=3)
    x = win.layout.join(np.concatenate([fc, gc]), np.concatenate([fh, gh]), np.zeros(12), np.zeros(12))
    area = np.asarray(tiny.grid.area)
    want = np.sum(area / area.sum() * ((gc - fc) ** 2 + (gh - fh) ** 2)) / 2
    v0, _, terms = _terms(win, x, lmbd_time=0.0)
    v5, _, _ = _terms(win, x, lmbd_time=5.0)
    assert float(terms.temporal) == pytest.approx(want, rel=1e-12)
    assert v5 - v0 == pytest.approx(5.0 * want, rel=1e-9)
    assert float(temporal_difference(np.stack([fc, fc]), np.stack([fh, fh]), area)) == 0.0


def test_windowed_solve_returns_k_maps(tiny):
    t = np.asarray(tiny.obs.times)
    win = tiny.replace(windows=Windows.count(2, t), settings=tiny.settings.replace(lmbd_time=1.0))
    res = dm.invert(win)
    assert res.n_window == 2 and res.n_cell == 200 and res.fssc.shape == (400,)
    fc, fh = res.window_maps()
    assert fc.shape == (2, 200) and res.lmbd_time == 1.0 and res.temporal is not None
    one = res.window(1)
    assert one.n_window == 1 and np.array_equal(one.fssc, fc[1]) and one.extra["window"] == 1
    assert res.summary()["window_edges"] == list(win.windows.edges)


def test_newton_refused_with_windows(tiny):
    win = tiny.replace(windows=Windows.count(2, tiny.obs.times))
    with pytest.raises(DopplermapInputError, match="newton"):
        dm.invert(win, solver="newton")
    assert dm.solvers.choose_solver(win.replace(settings=win.settings.replace(solver="auto", tol=1e-8))) == "lbfgsb"


def test_negative_lmbd_time_refused(tiny):
    win = tiny.replace(windows=Windows.count(2, tiny.obs.times))
    with pytest.raises(DopplermapInputError, match="lmbd_time"):
        dm.invert(win, lmbd_time=-1.0)


def test_window_form_index_checked(tiny):
    with pytest.raises(DopplermapInputError, match="window index"):
        window_form(tiny.pre.line, np.zeros(5, int), 2)


def test_problem_windows_type_checked(tiny):
    with pytest.raises(DopplermapInputError, match="windows takes"):
        dataclasses.replace(tiny, windows=(0.0, 1.0))
