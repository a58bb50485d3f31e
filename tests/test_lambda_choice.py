"""Choosing lambda: a continuous L-curve corner, a bracketing root finder for the target chi2,
and one criterion for the grid's best point and intervals."""

import json
import math
import types
import warnings

import numpy as np
import pytest
from support.problems import form_problem  # noqa: E402

import dopplermap as dm
from dopplermap import search
from dopplermap.errors import ConvergenceWarning, DopplermapWarning

# ------------------------------------------------------------------ an analytic L-curve


def _tikhonov_sweep(lmbd, b, u, sv):
    """Tikhonov ``min |A x - b|^2 + lmbd |x|^2`` by the SVD ``A = U diag(sv) V'``: the exact
    residual and solution norms (Hansen's L-curve), as a :class:`LambdaSweep`."""
    beta = u.T @ b
    lm = np.atleast_1d(lmbd)[:, None]
    filt = sv**2 / (sv**2 + lm)
    res = np.sum(((1 - filt) * beta) ** 2, axis=1) + (b @ b - beta @ beta)
    norm = np.sum((filt * beta / sv) ** 2, axis=1)
    n = lm.shape[0]
    return search.LambdaSweep(lmbd=np.asarray(lmbd, float), chi2=res / b.size, regulariser=norm, loss=res + lm[:, 0] * norm,
                              iterations=np.zeros(n, int), results=[], floor=0.0, total_time=0.0)


@pytest.fixture(scope="module")
def linear_problem():
    rng = np.random.default_rng(0)
    m = n = 40
    u, _ = np.linalg.qr(rng.normal(size=(m, m)))
    sv = np.logspace(0, -4, n)
    x_true = np.ones(n)
    b_clean = u @ (sv * x_true)
    return u, sv, b_clean, 1e-3 * rng.normal(size=m)


def _true_corner(u, sv, b):
    t = np.linspace(math.log(1e-9), math.log(1e1), 40001)
    fine = _tikhonov_sweep(np.exp(t), b, u, sv)
    kappa = search.lcurve_curvature(fine.lmbd, fine.chi2, fine.regulariser)
    return float(fine.lmbd[int(np.argmax(kappa))])


def test_corner_between_sweep_points_matches_the_analytic_corner(linear_problem):
    u, sv, b_clean, noise = linear_problem
    b = b_clean + noise
    lm = np.logspace(-9, 1, 13)  # a factor 6.8 apart
    sw = _tikhonov_sweep(lm, b, u, sv)
    exact = _true_corner(u, sv, b)
    corner, _ = search.lcurve_corner(sw)
    snapped, _ = search.lcurve_corner(sw, refine=False)
    assert snapped in lm
    assert abs(math.log(corner / exact)) < 0.2 < abs(math.log(snapped / exact))  # well inside a 1.9 log step
    # continuous in the data: a slightly different noise draw moves the corner slightly
    moved, _ = search.lcurve_corner(_tikhonov_sweep(lm, b_clean + 1.01 * noise, u, sv))
    assert 0 < abs(math.log(moved / corner)) < 0.05
    assert search.lcurve_corner(_tikhonov_sweep(lm, b_clean + 1.01 * noise, u, sv), refine=False)[0] == snapped


def test_a_point_that_kept_its_neighbours_map_is_no_corner(linear_problem):
    """A solve at the smallest lambda that stopped at its warm start (the next lambda's map, chi2
    and regulariser equal to 1e-8) is a zero-length step on the L-curve: its one-sided curvature
    is huge, and it must neither be taken as the corner nor push the corner to the boundary."""
    u, sv, b_clean, noise = linear_problem
    lm = np.logspace(-9, 1, 13)
    sw = _tikhonov_sweep(lm, b_clean + noise, u, sv)
    corner, _ = search.lcurve_corner(sw)
    chi2, reg = sw.chi2.copy(), sw.regulariser.copy()
    chi2[0], reg[0] = chi2[1] * (1 - 1e-8), reg[1] * (1 + 1e-8)
    stuck = search.LambdaSweep(lmbd=sw.lmbd, chi2=chi2, regulariser=reg, loss=sw.loss, iterations=sw.iterations,
                               results=[], floor=0.0, total_time=0.0)
    assert search.lcurve_curvature(stuck.lmbd, chi2, reg)[0] > 10 * np.max(search.lcurve_curvature(lm, sw.chi2, sw.regulariser))
    assert search.lcurve_corner(stuck)[0] == pytest.approx(corner, rel=1e-6)


# ------------------------------------------------------------------ the root finder


def _stub_problem():
    """A problem the stubbed solves never look into (its model is built only if asked for)."""
    star, grid, times, vels, comps = dm.demo_setup(n_cell=50, n_epoch=3, n_vel=8)
    flux = np.ones((times.size, vels.size))
    return dm.Problem(grid=grid, star=star, obs=dm.Observations.create(times, vels, flux, 1e-3 * flux),
                      components=comps)


def _fake_invert(chi2_of_lambda, calls):
    def invert(problem, *, lmbd, x0=None):
        calls.append(lmbd)
        c2 = float(chi2_of_lambda(lmbd))
        return types.SimpleNamespace(lmbd=lmbd, chi2=c2, loss=c2, iterations=50, x=np.array([lmbd]))
    return invert


def test_target_chi2_on_a_non_monotone_curve(monkeypatch):
    # chi2 rises with lambda but wiggles (d log chi2 / d log lambda changes sign near the answer)
    def chi2(lm):
        s = math.log(lm)
        return 1.3 * math.exp(0.35 * (s - 0.4) + 0.04 * math.sin(12.0 * s))

    calls = []
    monkeypatch.setattr(search, "invert", _fake_invert(chi2, calls))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        lm, res, trials = search.lambda_for_chi2(_stub_problem(), 1.3, lo=1e-3, hi=1e3, rtol=1e-3, max_solves=12)
    assert abs(res.chi2 / 1.3 - 1) < 1e-3
    assert len(calls) == len(trials) <= 12 and res.lmbd == lm
    s = np.linspace(math.log(lm) - 0.3, math.log(lm) + 0.3, 601)
    assert np.any(np.diff([chi2(math.exp(v)) for v in s]) < 0)  # the curve really is non-monotone there


def test_target_chi2_warns_when_out_of_solves(monkeypatch):
    calls = []
    monkeypatch.setattr(search, "invert", _fake_invert(lambda lm: 0.5 + lm, calls))
    with pytest.warns(DopplermapWarning, match="after 3 solves"):
        search.lambda_for_chi2(_stub_problem(), 1.7, lo=1e-3, hi=1e3, rtol=1e-9, max_solves=3)
    assert len(calls) == 3


# ------------------------------------------------------------------ a small Doppler problem


@pytest.fixture(scope="module")
def doppler():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=200, n_epoch=10, n_vel=20, seed=3)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=300.0, seed=3)
    pre = dm.precompute(grid, star, times, vels, comps)
    rng = np.random.default_rng(9)  # the same data with 1 % of the noise added again
    flux2 = np.asarray(sim.obs.flux) + 0.01 * np.asarray(sim.obs.err) * rng.normal(size=sim.obs.flux.shape)
    obs2 = dm.Observations.create(sim.obs.times, sim.obs.vels, flux2, sim.obs.err)
    lm = np.logspace(-3, 2, 12)
    # L-BFGS-B: at tol 1e-8 "auto" takes Gauss-Newton, whose lower losses at lambda 1e-3 (0.5362 against
    # 0.5406) move this small star's L-curve corner to the sweep's low end; the corner's continuity is
    # what is tested here, on the curve these tests were written for
    problems = [form_problem(pre, o, tol=1e-8, maxiter=2000, solver="lbfgsb") for o in (sim.obs, obs2)]
    sweeps = [search.sweep_lambda(p, lm) for p in problems]
    return problems, lm, sweeps


@pytest.mark.slow
def test_doppler_corner_is_continuous(doppler):
    _, lm, (sw1, sw2) = doppler
    c1, c2 = (search.lcurve_corner(s)[0] for s in (sw1, sw2))
    assert min(abs(math.log(c1 / v)) for v in lm) > 1e-4  # not snapped to a sweep value
    assert 0 < abs(math.log(c2 / c1)) < 0.05  # log spacing of the sweep: 1.05


def test_doppler_target_chi2_in_few_solves(doppler, monkeypatch):
    (p1, p2), lm, sweeps = doppler
    calls = []
    real = search.invert

    def counting(*a, **k):
        calls.append(k["lmbd"])
        return real(*a, **k)

    monkeypatch.setattr(search, "invert", counting)
    found = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        # at tol 1e-8 a solve may end on a line-search failure at the loss's rounding (CPU-dependent);
        # its chi2 is checked below
        warnings.filterwarnings("ignore", "solve stopped on a line-search failure", ConvergenceWarning)
        for p, sw in zip((p1, p2), sweeps, strict=True):
            n0 = len(calls)
            lmt, res, trials = search.lambda_for_chi2(p, 1.1, sweep=sw)
            assert len(calls) - n0 == len(trials) <= 10
            assert abs(res.chi2 / 1.1 - 1) < 5e-3
            found.append(lmt)
        # without a sweep: bracketed from lo/hi (5 decades)
        n0 = len(calls)
        lmt, res, trials = search.lambda_for_chi2(p1, 1.1, lo=1e-3, hi=1e2)
        assert len(calls) - n0 == len(trials) <= 10 and abs(res.chi2 / 1.1 - 1) < 5e-3
    assert min(abs(math.log(found[0] / v)) for v in lm) > 1e-4
    assert abs(math.log(found[1] / found[0])) < 0.05
    assert abs(math.log(lmt / found[0])) < 0.05  # the same answer from either bracket


# ------------------------------------------------------------------ grid: one criterion


def _rows():
    # the least loss (inclination 50) and the least chi2 (inclination 60) disagree
    rows = []
    for p, inc in enumerate((40.0, 50.0, 60.0, 70.0)):
        chi2 = {40.0: 1.10, 50.0: 1.04, 60.0: 1.00, 70.0: 1.06}[inc]
        loss = {40.0: 1.30, 50.0: 1.18, 60.0: 1.20, 70.0: 1.25}[inc]
        rows.append(dict(point=p, inclination=inc, chi2=chi2, chi2_total=chi2 * 100, loss=loss, regulariser=0.1,
                         entropy=0.1, iterations=10, success=1, radius=1.0, logg=float("nan"), status="ok", reason=""))
    return rows


def test_best_point_by_column():
    rows = _rows()
    assert search.best_point(rows, ["inclination"])["inclination"] == 50.0  # the default, least loss
    best = search.best_point(rows, ["inclination"], column="chi2_total")
    assert best["inclination"] == search.delta_chi2_interval(rows, "inclination")["best"] == 60.0
    with pytest.raises(ValueError, match="column"):
        search.best_point(rows, ["inclination"], column="nope")


@pytest.mark.slow  # a whole CLI run (about 9 s)
def test_grid_command_reports_one_criterion(tmp_path, monkeypatch):
    from dopplermap.app.search import save_problem
    from dopplermap.cli import main

    star, grid, times, vels, comps = dm.demo_setup(n_cell=100, n_epoch=6, n_vel=12)
    flux = np.ones((times.size, vels.size)) - 0.3 * np.exp(-0.5 * (vels / 20.0) ** 2)  # a line (the best point is re-solved)
    save_problem(tmp_path / "p.npz", dm.Observations.create(times, vels, flux, 1e-3 + 0 * flux), star, n_cell=100)
    monkeypatch.setattr(search, "grid_search", lambda *a, **k: _rows())
    rc = main(["grid", str(tmp_path / "p.npz"), "--param", "inclination=40,50,60,70", "--out", str(tmp_path / "o"),
               "--delta-chi2", "5"])
    assert rc == 0
    out = json.loads((tmp_path / "o" / "grid.json").read_text())
    assert out["best"]["inclination"] == out["intervals"]["inclination"]["best"] == 60.0
    assert out["intervals"]["inclination"]["lo"] == 50.0 and out["intervals"]["inclination"]["hi"] == 60.0


def test_stalled_warm_start_is_checked_from_the_flat_start(monkeypatch):
    # a warm start that stops at once keeps the previous map; the flat start finds a lower loss
    calls = []

    def invert(problem, *, lmbd, x0=None):
        calls.append((lmbd, x0 is None))
        stalled = x0 is not None and lmbd > 1.0
        loss = lmbd + (0.5 if stalled else 0.0)
        return types.SimpleNamespace(lmbd=lmbd, chi2=loss, loss=loss, regulariser_value=1.0 / lmbd,
                                     iterations=2 if stalled else 40, x=np.array([lmbd]))

    monkeypatch.setattr(search, "invert", invert)
    monkeypatch.setattr(search, "regulariser_floor", lambda *a: 0.0)
    sw = search.sweep_lambda(_stub_problem(), [0.5, 2.0, 4.0])
    assert calls == [(0.5, True), (2.0, False), (2.0, True), (4.0, False), (4.0, True)]
    assert list(sw.loss) == [0.5, 2.0, 4.0] and list(sw.iterations) == [40, 40, 40]


def test_a_point_above_the_next_lambdas_chi2_is_re_solved_from_that_map(monkeypatch):
    # exact minima's chi2 does not fall as lambda grows: the smallest lambda's solve stopped short
    # (chi2 above lambda 2's); re-solved from lambda 2's map it reaches a lower loss, which is kept
    calls = []

    def invert(problem, *, lmbd, x0=None):
        calls.append((lmbd, None if x0 is None else float(x0[0])))
        short = lmbd == 0.5 and x0 is None
        chi2 = 3.0 if short else lmbd
        loss = chi2 + 0.1 * lmbd
        return types.SimpleNamespace(lmbd=lmbd, chi2=chi2, loss=loss, regulariser_value=1.0 / lmbd,
                                     iterations=40, x=np.array([lmbd]))

    monkeypatch.setattr(search, "invert", invert)
    monkeypatch.setattr(search, "regulariser_floor", lambda *a: 0.0)
    sw = search.sweep_lambda(_stub_problem(), [0.5, 2.0, 4.0])
    assert calls == [(0.5, None), (2.0, 0.5), (4.0, 2.0), (0.5, 2.0)]
    assert sw.repaired == 1 and list(sw.chi2) == [0.5, 2.0, 4.0]
    # a re-solve that ends higher is not kept; without warm starts nothing is re-solved
    monkeypatch.setattr(search, "invert", lambda problem, *, lmbd, x0=None: types.SimpleNamespace(
        lmbd=lmbd, chi2=3.0 if lmbd == 0.5 else lmbd, loss=(5.0 if x0 is not None else 3.05) if lmbd == 0.5 else lmbd,
        regulariser_value=1.0, iterations=40, x=np.array([lmbd])))
    sw = search.sweep_lambda(_stub_problem(), [0.5, 2.0, 4.0])
    assert sw.repaired == 1 and sw.chi2[0] == 3.0 and sw.loss[0] == 3.05
    assert search.sweep_lambda(_stub_problem(), [0.5, 2.0, 4.0], warm_start=False).repaired == 0


def test_a_newton_sweep_runs_downwards_and_repairs_from_the_other_neighbour(monkeypatch):
    # Gauss-Newton sweeps go from the largest lambda down, each from the smoother map above; a
    # point whose chi2 lies above the next larger lambda's is re-solved from the next smaller
    # lambda's map (the one it was not started from), or from the flat start at the smallest
    calls = []

    def invert(problem, *, lmbd, x0=None):
        start = None if x0 is None else float(x0[0])
        calls.append((lmbd, start))
        short = {(2.0, 4.0): 5.0, (0.5, 2.0): 6.0}  # these warm starts stop short of the minimum
        chi2 = short.get((lmbd, start), lmbd)
        return types.SimpleNamespace(lmbd=lmbd, chi2=chi2, loss=chi2 + 0.1 * lmbd, regulariser_value=1.0 / lmbd,
                                     iterations=40, x=np.array([lmbd]))

    monkeypatch.setattr(search, "invert", invert)
    monkeypatch.setattr(search, "regulariser_floor", lambda *a: 0.0)
    newton = _stub_problem()
    newton = newton.replace(settings=newton.settings.replace(solver="newton"))
    sw = search.sweep_lambda(newton, [0.5, 2.0, 4.0])
    assert calls == [(4.0, None), (2.0, 4.0), (0.5, 2.0), (0.5, None), (2.0, 0.5)]
    assert sw.repaired == 2 and list(sw.chi2) == [0.5, 2.0, 4.0] and list(sw.lmbd) == [0.5, 2.0, 4.0]
    calls.clear()  # L-BFGS-B keeps the upward order
    search.sweep_lambda(_stub_problem(), [0.5, 2.0, 4.0])
    assert [c[0] for c in calls[:3]] == [0.5, 2.0, 4.0]


def test_a_sweep_whose_solves_stopped_on_one_map_says_so():
    """Neighbouring lambdas whose solves end with chi2 and regulariser equal to the tolerance (the
    relative-reduction test stopped each where it started: LO Peg at tol 1e-5) are one warning
    naming the lambdas; maps that differ, or that are both the flat map at the regulariser's
    floor (where the minima coincide), are not."""
    def res(chi2, reg):
        return types.SimpleNamespace(chi2=chi2, regulariser_value=reg)

    lm = np.array([0.001, 0.002, 0.005, 0.01])
    stuck = [res(0.65715, 5.2573), res(0.65715, 5.2573), res(0.657150001, 5.25730001), res(0.659, 5.04)]
    with pytest.warns(DopplermapWarning, match=r"from lambda 0\.001 to 0\.005 stopped on one map \(2 neighbouring "
                                               r"pair\(s\) with chi2 and regulariser equal to tol 1e-05\)"):
        search._warn_one_map(lm, stuck, 1e-5, floor=-0.003)
    moving = [res(0.6498, 5.9476), res(0.6500, 5.8619), res(0.6504, 5.718), res(0.6528, 5.3957)]
    flat = [res(4.3292, -0.0032903), res(4.3292, -0.0032903), res(4.3292, -0.0032903), res(4.3292, -0.0032903)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        search._warn_one_map(lm, moving, 1e-7, floor=-0.003)
        search._warn_one_map(lm, flat, 1e-5, floor=-0.0032904)


# ------------------------------------------------------------------ solves added around the corner


@pytest.fixture(scope="module")
def demo_sweeps():
    """The demo star's L-curve sampled two ways: the default range at 12 values, and a wider one
    at 20 (its broad curvature peak puts their corners 1.3x apart)."""
    prob = dm.demo_problem(settings=dm.Settings(tol=1e-7, solver="auto"))
    return prob, [search.sweep_lambda(prob, np.logspace(a, 2, n)) for a, n in ((-3, 12), (-4, 20))]


@pytest.mark.slow
def test_solves_near_the_corner_make_it_independent_of_the_sampling(demo_sweeps):
    prob, sweeps = demo_sweeps
    raw = [search.lcurve_corner(s)[0] for s in sweeps]
    refined = [search.refine_corner(prob, s) for s in sweeps]
    corners = [search.lcurve_corner(r)[0] for r in refined]
    assert abs(math.log(raw[1] / raw[0])) > 0.2  # 0.35 against 0.46
    assert abs(math.log(corners[1] / corners[0])) < 0.1
    for s, r, c in zip(sweeps, refined, corners, strict=True):
        assert 0 < r.lmbd.size - s.lmbd.size <= search.CORNER_SOLVES
        assert set(s.lmbd) <= set(r.lmbd) and np.all(np.diff(r.lmbd) > 0)
        i = int(np.argmin(abs(r.lmbd - c)))  # the corner's neighbours now lie within CORNER_RATIO
        assert r.lmbd[min(i + 1, r.lmbd.size - 1)] / r.lmbd[max(i - 1, 0)] <= search.CORNER_RATIO ** 2 * (1 + 1e-9)
        added = [res for v, res in zip(r.lmbd, r.results, strict=True) if v not in s.lmbd]
        assert all(res.lmbd in r.lmbd for res in added) and r.total_time > s.total_time


@pytest.mark.slow
def test_refine_corner_arguments(demo_sweeps):
    prob, (sweep, _) = demo_sweeps
    same = search.refine_corner(prob, sweep, max_solves=0)
    assert np.array_equal(same.lmbd, sweep.lmbd)
    for bad in (dict(ratio=1.0), dict(ratio=float("nan")), dict(max_solves=-1), dict(max_solves=1.5)):
        with pytest.raises(dm.DopplermapInputError):
            search.refine_corner(prob, sweep, **bad)


@pytest.mark.slow
def test_lambda_command_writes_the_solves_near_the_corner(tmp_path, capsys):
    from dopplermap.cli import main

    assert main(["lambda", "--out", str(tmp_path / "a"), "--lmbds", "0.01:10:7", "-q"]) == 0
    choice = json.loads((tmp_path / "a" / "lambda.json").read_text())
    rows = (tmp_path / "a" / "lcurve.csv").read_text().splitlines()[1:]
    assert len(choice["lmbds"]) == 7 and choice["lmbds_added"] and choice["corner_solves_time"] > 0
    assert len(rows) == 7 + len(choice["lmbds_added"])
    assert f"7 solves + {len(choice['lmbds_added'])} near the corner" in capsys.readouterr().out
    assert main(["lambda", "--out", str(tmp_path / "b"), "--lmbds", "0.01:10:7", "-q", "--no-refine-corner"]) == 0
    plain = json.loads((tmp_path / "b" / "lambda.json").read_text())
    assert plain["lmbds_added"] == [] and len((tmp_path / "b" / "lcurve.csv").read_text().splitlines()) == 8
