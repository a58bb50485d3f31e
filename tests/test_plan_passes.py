"""plan.solver_passes: the estimated work of a solve against lambda and tolerance, and the
automatic solver choice it drives."""

import math

import pytest

from dopplermap import plan

LMBDS = [1e-3, 1e-2, 0.1, 1.0]
TOLS = [1e-5, 1e-6, 1e-7, 1e-8]


@pytest.mark.parametrize("solver", ["lbfgsb", "newton"])
def test_passes_grow_as_lambda_falls_and_tol_tightens(solver):
    for tol in TOLS:
        p = [plan.solver_passes(solver, tol, lm) for lm in LMBDS]
        assert all(a > b for a, b in zip(p[:-1], p[1:], strict=True)), (tol, p)  # smaller lambda: more passes
    for lm in LMBDS:
        p = [plan.solver_passes(solver, tol, lm) for tol in TOLS]
        assert all(a < b for a, b in zip(p[:-1], p[1:], strict=True)), (lm, p)  # tighter tol: more passes
    # each digit costs more at a small lambda than at lambda 1 (the loss is less well conditioned)
    def digit(lm):
        return plan.solver_passes(solver, 1e-8, lm) - plan.solver_passes(solver, 1e-7, lm)
    assert digit(1e-3) > digit(1.0)


def test_fewer_data_per_cell_cost_more_passes():
    for s in ("lbfgsb", "newton"):
        p = [plan.solver_passes(s, 1e-7, 1.0, density) for density in (0.1, 0.3, 1.0)]
        assert p[0] > p[1] > p[2]
        assert plan.solver_passes(s, 1e-7, 1.0, 5.0) == p[2]  # more than one datum a cell: no fewer passes
        assert plan.solver_passes(s, 1e-7, 1.0, 0.01) == p[0]  # clipped at DENSITY_PASSES_MIN
    # solve_seconds passes the size's density on
    sparse, dense = dict(n_data=400, n_cell=4000), dict(n_data=4000, n_cell=400)
    per_pass = plan._PASS_SECONDS["lbfgsb"] * 400 * 4000 + plan._PASS_OVERHEAD["lbfgsb"]
    assert plan.solve_seconds("lbfgsb", 1e-7, **sparse) == pytest.approx(plan.solver_passes("lbfgsb", 1e-7, 1.0, 0.1) * per_pass)
    assert plan.solve_seconds("lbfgsb", 1e-7, **dense) == pytest.approx(plan.solver_passes("lbfgsb", 1e-7, 1.0) * per_pass)


def test_passes_are_clipped_outside_the_measured_lambdas():
    lo, hi = plan.LMBD_PASSES_RANGE
    for s in ("lbfgsb", "newton"):
        assert plan.solver_passes(s, 1e-7, 0.0) == plan.solver_passes(s, 1e-7, lo / 10) == plan.solver_passes(s, 1e-7, lo)
        assert plan.solver_passes(s, 1e-7, 100.0) == plan.solver_passes(s, 1e-7, hi)
        assert math.isfinite(plan.solver_passes(s, 1e-12, 0.0))
    # lambda 1 keeps the tolerance-only estimate: linear in the digits beyond 1e-5
    lb = [plan.solver_passes("lbfgsb", t, 1.0) for t in (1e-5, 1e-6, 1e-7)]
    assert lb[2] - lb[1] == pytest.approx(lb[1] - lb[0])


def test_small_lambda_tight_tol_warm_newton_wins():
    """Both programs compiled (a repeated run): at lambda 1e-2, tol 1e-7 L-BFGS-B's estimate
    grows several-fold and warm Newton, cheaper a pass, must win; the estimates must not tie."""
    size = dict(n_data=8 * 47 + 300, n_cell=4000)
    for state in ("memo", "disk"):
        choice = plan.pick_solver({"lbfgsb": state, "newton": state}, tol=1e-7, lmbd=1e-2, **size)
        assert choice.solver == "newton"
        lb, nt = choice.estimates["lbfgsb"], choice.estimates["newton"]
        assert lb[1] + lb[2] > 1.5 * (nt[1] + nt[2])
    # L-BFGS-B's estimated passes at lambda 1e-2 are several times those at lambda 1
    assert plan.solver_passes("lbfgsb", 1e-7, 1e-2) > 3 * plan.solver_passes("lbfgsb", 1e-7, 1.0)


def test_cold_first_run_lbfgsb_wins():
    """An empty compile cache on a small problem at lambda 1: Newton's cold compile is not
    paid back by its shorter solve, L-BFGS-B (also cold) must win."""
    small = dict(n_data=20 * 24, n_cell=400)
    choice = plan.pick_solver({"lbfgsb": "cold", "newton": "cold"}, tol=1e-7, lmbd=1.0, **small)
    assert choice.solver == "lbfgsb" and not choice.repeated
    # even at a small lambda one solve of this size does not repay Newton's cold compile
    assert plan.pick_solver({"lbfgsb": "cold", "newton": "cold"}, tol=1e-7, lmbd=1e-2, **small).solver == "lbfgsb"


def test_a_sweep_weighs_its_lambdas():
    """A sweep's estimate is the mean over its lambdas: its small ones raise it."""
    small = dict(n_data=20 * 24, n_cell=400)
    states = {"lbfgsb": "memo", "newton": "memo"}
    one = plan.pick_solver(states, tol=1e-7, n_solves=3, lmbd=1.0, **small)
    sweep = plan.pick_solver(states, tol=1e-7, n_solves=3, lmbd=(1e-3, 1e-2, 1.0), **small)
    for s in states:
        assert sweep.estimates[s][2] > one.estimates[s][2]
    expected = sum(plan.solve_seconds("lbfgsb", 1e-7, lmbd=v, **small) for v in (1e-3, 1e-2, 1.0))
    assert sweep.estimates["lbfgsb"][2] == pytest.approx(expected)


def test_real_layout_runs_l_bfgs_b_first_and_builds_newton_on_the_second_run():
    """8 LSD profiles x 47 velocities on 4000 cells at lambda 1, tol 1e-7 (0.09 line data a
    cell): a first run (nothing compiled) takes L-BFGS-B, whose cold compile is the shorter;
    once its program is on disk Newton, the faster solve there, is built and then kept."""
    size = dict(n_data=8 * 47, n_cell=4000)
    first = plan.pick_solver({"lbfgsb": "cold", "newton": "cold"}, tol=1e-7, lmbd=1.0, **size)
    again = plan.pick_solver({"lbfgsb": "disk", "newton": "cold"}, tol=1e-7, lmbd=1.0, **size)
    later = plan.pick_solver({"lbfgsb": "disk", "newton": "disk"}, tol=1e-7, lmbd=1.0, **size)
    assert (first.solver, again.solver, later.solver) == ("lbfgsb", "newton", "newton")
    # no tie: warm, Newton's estimate is well under L-BFGS-B's
    lb, nt = later.estimates["lbfgsb"], later.estimates["newton"]
    assert nt[1] + nt[2] < 0.75 * (lb[1] + lb[2])
