import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support.cluster import kill_one_worker
from support.problems import form_problem, small_problem  # noqa: E402

import dopplermap as dm
from dopplermap import plot, search
from dopplermap.app.demo import recovery_correlation
from dopplermap.broadening import replace_profiles
from dopplermap.problem import Settings

AXES = {"inclination": [45.0, 52.5, 60.0, 67.5], "vsini": [37.0, 38.5, 40.0, 41.5]}
SETTINGS = Settings(lmbd=0.5, tol=1e-5)


@pytest.fixture(scope="module")
def problem():
    return small_problem()


@pytest.fixture(scope="module")
def local_table(problem, tmp_path_factory):
    prob, _ = problem
    path = tmp_path_factory.mktemp("grid") / "local.csv"
    rows = search.grid_search(prob.replace(settings=SETTINGS), AXES, path)
    return path, rows


def test_lambda_sweep_corner_near_best_recovery(problem):
    prob, sim = problem
    pre = dm.precompute(prob.grid, prob.star, sim.obs.times, sim.obs.vels, prob.components)
    lm = np.logspace(-2.5, 1.5, 11)
    sw = search.sweep_lambda(form_problem(pre, sim.obs, tol=1e-6, maxiter=2000), lm)
    assert np.all(np.diff(sw.regulariser) < 0.05)  # regularisation falls as lambda grows (noise aside)
    assert sw.chi2[-1] > sw.chi2[0]
    corner, kappa = search.lcurve_corner(sw)
    corr = [recovery_correlation(sim.fssc, r.fssc, prob.grid.lat, prob.star.inclination) for r in sw.results]
    best = sw.lmbd[int(np.argmax(corr))]
    print(f"L-curve corner lambda {corner:.4g}; best-recovery lambda {best:.4g}")
    assert 1 / 3 <= corner / best <= 3
    i = int(np.argmin(np.abs(sw.lmbd - corner)))
    assert 0 < i < len(lm) - 1 and kappa[i] > 0
    # a sweep cut short of the corner is refused
    short = search.LambdaSweep(sw.lmbd[6:], sw.chi2[6:], sw.regulariser[6:], sw.loss[6:], sw.iterations[6:],
                               sw.results[6:], sw.floor, 0.0)
    with pytest.raises(ValueError, match="sweep"):
        search.lcurve_corner(short)


def test_lcurve_curvature_of_an_ideal_L():
    # hyperbola-like L-curve y = 1/x smoothed: corner where log-log slope is -1 region; use a sharp analytic L
    t = np.linspace(-5, 5, 41)
    lm = np.exp(t)
    chi2 = 1.0 + np.exp(t)  # flat then rising
    reg = 1.0 + np.exp(-t)  # falling then flat
    kappa = search.lcurve_curvature(lm, chi2, reg)
    assert abs(t[np.argmax(kappa)]) <= 0.5  # symmetric problem: corner at lambda = 1


def test_lambda_for_chi2_brackets_and_hits(problem):
    prob, sim = problem
    pre = dm.precompute(prob.grid, prob.star, sim.obs.times, sim.obs.vels, prob.components)
    lm, res, trials = search.lambda_for_chi2(form_problem(pre, sim.obs, tol=1e-6, maxiter=2000), 1.0, lo=1e-2,
                                             hi=10.0, rtol=5e-3)
    assert abs(res.chi2 - 1.0) < 5e-3
    assert 1e-2 < lm < 10.0
    with pytest.raises(ValueError, match="not reached"):
        search.lambda_for_chi2(form_problem(pre, sim.obs, tol=1e-5, maxiter=2000), 1e-3, lo=1e-2, hi=1e-1)


@pytest.mark.parametrize("method", ["binned", "dense"])
def test_pad_precomputed_keeps_model(problem, method):
    prob, sim = problem
    pre = dm.precompute(prob.grid, prob.star, sim.obs.times, sim.obs.vels, prob.components, method=method)
    n_bin = pre.line.kernel.shape[0] + 50 if method == "binned" else None
    big = search.pad_precomputed(pre, n_slot=pre.line.cell.shape[1] + 37, n_bin=n_bin)
    rng = np.random.default_rng(0)
    f1, f2 = rng.uniform(0, 0.5, (2, pre.n_cell))
    rv, amp = rng.normal(0, 0.3, (2, pre.n_epoch)) * [[1.0], [0.01]]
    np.testing.assert_allclose(dm.forward(f1, f2, rv, amp, big), dm.forward(f1, f2, rv, amp, pre), atol=1e-13)


def test_grid_points_run_on_threads_with_the_results_they_get_alone(problem, tmp_path, monkeypatch):
    """In this process the points run a thread per CPU (two here), each with the row it gets
    one point at a time."""
    import threading

    from dopplermap import plan
    from dopplermap.errors import collect_warnings, warn

    prob, _ = problem
    axes = {"inclination": [45.0, 60.0], "vsini": [38.5, 40.0]}
    real, threads = search.evaluate_point, []

    def recorded(*a, **kw):
        threads.append(threading.current_thread().name)
        warn(f"a point's warning from {threads[-1]}")
        return real(*a, **kw)

    monkeypatch.setattr(search, "evaluate_point", recorded)
    monkeypatch.setattr(plan, "member_threads", lambda n: min(n, 2))
    with collect_warnings() as seen:  # as the commands list them in their summary
        together = search.grid_search(prob.replace(settings=SETTINGS), axes, tmp_path / "t.csv")
    assert len(threads) == 4 and sum(t.startswith("dopplermap-point") for t in threads) == 3  # the first alone
    assert sorted(seen) == sorted(set(f"a point's warning from {t}" for t in threads))  # the points' threads' too
    monkeypatch.setattr(plan, "member_threads", lambda n: 1)
    alone = search.grid_search(prob.replace(settings=SETTINGS), axes, tmp_path / "a.csv")
    assert [r["chi2"] for r in together] == [r["chi2"] for r in alone]
    assert [r["loss"] for r in together] == [r["loss"] for r in alone]


def test_grid_command_solves_in_this_process_unless_asked(npz, tmp_path, monkeypatch, capsys):
    """No local Dask cluster by default (its workers each start and compile: slower on one
    machine); --workers alone asks for one, and beside sync or an address it is refused."""
    from dopplermap.app.output import Scheduling
    from dopplermap.cli import main

    def no_cluster(self):
        raise AssertionError("a Dask cluster was started")

    monkeypatch.setattr(search.Cluster, "connect", no_cluster)
    monkeypatch.setattr(search, "chi2_jitter", lambda *a, **k: 0.0)  # not what is tested here: their solves
    monkeypatch.setattr(search, "model_grid_error", lambda *a, **k: 0.0)
    assert main(["grid", str(npz), "--out", str(tmp_path / "g"), "--param", "vsini=38", "-q"]) == 0
    assert len(search.read_table(tmp_path / "g" / "grid.csv")) == 1
    assert json.loads((tmp_path / "g" / "grid.json").read_text())["where"].startswith("this process, ")
    assert Scheduling().cluster() is None and Scheduling("sync").cluster() is None
    assert Scheduling(workers=3).cluster() == search.Cluster("local", 3)
    assert Scheduling("local").cluster() == search.Cluster("local")
    capsys.readouterr()
    assert main(["grid", str(npz), "--out", str(tmp_path / "h"), "--param", "vsini=38", "--scheduler", "sync",
                 "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workers 2" in err[0] and "--scheduler local" in err[0]
    assert not (tmp_path / "h").exists()


def test_grid_best_point_within_one_step(local_table):
    path, rows = local_table
    assert len(rows) == 16
    best = search.best_point(rows, list(AXES))
    assert abs(best["inclination"] - 60.0) <= 7.5 + 1e-9
    assert abs(best["vsini"] - 40.0) <= 1.5 + 1e-9
    iv = search.delta_chi2_interval(rows, "vsini")
    assert iv["lo"] <= 40.0 <= iv["hi"] and "un-reduced" in iv["note"]
    n_data = 20 * 24
    assert all(abs(r["chi2_total"] - r["chi2"] * n_data) < 1e-9 * r["chi2_total"] for r in rows)
    from dopplermap.style import save_figure

    save_figure(plot.plot_grid(rows, list(AXES)), path.with_suffix(".png"))
    assert path.with_suffix(".png").stat().st_size > 0


@pytest.mark.slow
def test_dask_two_workers_identical_to_local(problem, local_table, tmp_path):
    from dask.distributed import LocalCluster

    prob, _ = problem
    path, _ = local_table
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        where = search.Cluster(cluster.scheduler_address)
        out = tmp_path / "dask.csv"
        search.grid_search(prob.replace(settings=SETTINGS), AXES, out, cluster=where)
        killed = []

        def kill_a_worker(n, total, row):  # a worker dies after the first points: its point runs again
            if n == 3 and not killed:
                killed.append(kill_one_worker(cluster.scheduler_address))

        survived = tmp_path / "killed.csv"
        search.grid_search(prob.replace(settings=SETTINGS), AXES, survived, cluster=where, progress=kill_a_worker)
    assert killed
    assert out.read_text() == path.read_text()
    assert survived.read_text() == path.read_text()


KILL_SCRIPT = """
from support.problems import small_problem
from dopplermap import search
from dopplermap.problem import Settings
prob, _ = small_problem()
search.grid_search(prob.replace(settings=Settings(lmbd=0.5, tol=1e-5)), {axes!r}, {out!r})
"""


@pytest.mark.slow
def test_kill_and_resume(problem, local_table, tmp_path):
    prob = problem[0].replace(settings=SETTINGS)
    path, _ = local_table
    out = tmp_path / "killed.csv"
    script = KILL_SCRIPT.format(axes=AXES, out=str(out))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1] / "src"), str(Path(__file__).parent)]))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if out.exists() and len(out.read_text().splitlines()) - 1 >= 8:
                break
            time.sleep(0.05)
        proc.kill()
    finally:
        proc.wait()
    n_before = len(search.read_table(out))
    assert 8 <= n_before < 16
    with pytest.raises(ValueError, match="resume"):
        search.grid_search(prob, AXES, out)
    rows = search.grid_search(prob, AXES, out, resume=True)
    assert len(rows) == 16 and sorted(r["point"] for r in rows) == list(range(16))
    assert out.read_text() == path.read_text()
    # resuming a finished table does nothing
    search.grid_search(prob, AXES, out, resume=True)
    assert out.read_text() == path.read_text()
    # a different grid is refused
    with pytest.raises(ValueError, match="not the same search"):
        search.grid_search(prob, {"inclination": [50.0, 60.0], "vsini": [40.0]}, out, resume=True)


def test_bad_parameters(problem, tmp_path):
    prob, _ = problem
    with pytest.raises(ValueError, match="unknown grid parameter"):
        search.grid_search(prob, {"gravity": [1.0]}, tmp_path / "x.csv")
    with pytest.raises(ValueError, match="inclination"):
        search.grid_search(prob, {"inclination": [120.0]}, tmp_path / "y.csv")
    with pytest.raises(ValueError, match="t_phot"):
        search.apply_parameters(search.Problem(prob.grid, prob.star, prob.obs, prob.components), {"t_cool": 4000.0})


def test_parameters_change_the_model(problem):
    prob, _ = problem
    star, comps = search.apply_parameters(prob, {"t_cool": 3500.0, "macro_gauss": 3.0, "ew_scale": 1.2})
    assert comps.cool.intensity == pytest.approx(dm.intensity_ratio(3500.0, 5000.0, 600.0))
    # the Gaussian broadening keeps the equivalent width; ew_scale scales it
    ew0 = prob.components.phot.profile.equivalent_width()
    assert comps.phot.profile.equivalent_width() == pytest.approx(1.2 * ew0, rel=1e-6)
    assert comps.phot.profile.fwhm > prob.components.phot.profile.fwhm


def test_ld_linear_sets_every_component_s_law_and_refuses_what_it_cannot(problem):
    prob, _ = problem
    _, comps = search.apply_parameters(prob, {"ld_linear": 0.35})
    assert all(c.limb_darkening == dm.LimbDarkening("linear", (0.35,)) for c in comps)
    for bad in (-0.1, 1.2):
        with pytest.raises(dm.DopplermapInputError, match=r"ld_linear .* must lie in \[0, 1\]"):
            search.apply_parameters(prob, {"ld_linear": bad})
    quad = dm.ComponentSet(*(dataclasses.replace(c, limb_darkening=dm.LimbDarkening("quadratic", (0.4, 0.2)))
                             if name == "cool" else c for name, c in zip(("phot", "cool", "hot"), prob.components, strict=True)))
    with pytest.raises(dm.DopplermapInputError, match="ld_linear sets the linear law's coefficient.*cool 'quadratic'"):
        search.apply_parameters(prob.replace(components=quad), {"ld_linear": 0.5})


def test_grid_points_warn_about_spot_contrast_only_where_it_changes(problem):
    """A problem whose hot spot is not fitted may give it the photosphere's intensity (as
    ``import-zdipy`` writes): its grid points do not warn about that again at every point; a
    point's own t_hot at or below the photosphere warns, naming the point, only when the hot
    spot is fitted."""
    import warnings

    prob, _ = problem
    phot, cool, hot = prob.components
    with pytest.warns(dm.DopplermapWarning, match="hot spot's 1 is not above"):
        flat = dm.ComponentSet(phot, cool, dataclasses.replace(hot, intensity=phot.intensity))
    cool_only = prob.replace(components=flat, settings=prob.settings.replace(fit_components=("cool",)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", dm.DopplermapWarning)
        search.apply_parameters(cool_only, {"inclination": 50.0, "macro_gauss": 2.0, "ew_scale": 1.1})
        replace_profiles(flat, [None, None, None])
        search.apply_parameters(cool_only, {"t_hot": 5000.0, "t_cool": 4000.0})  # the hot spot is not fitted
    with pytest.warns(dm.DopplermapWarning, match=r"grid point \{'t_hot': 4800.0\}.*hot spot's"):
        search.apply_parameters(prob, {"t_hot": 4800.0})


def test_the_old_name_of_the_gaussian_broadening_is_read_as_the_new_one(problem, tmp_path):
    """``macroturbulence`` (the grid's Gaussian broadening, not [line]'s radial-tangential one)
    is read as ``macro_gauss``, with a warning naming it, wherever a grid parameter is read."""
    prob, _ = problem
    with pytest.warns(dm.DopplermapWarning, match="'macroturbulence' is now called 'macro_gauss'"):
        _, old = search.apply_parameters(prob, {"macroturbulence": 3.0})
    _, new = search.apply_parameters(prob, {"macro_gauss": 3.0})
    assert old.phot.profile.fwhm == new.phot.profile.fwhm > prob.components.phot.profile.fwhm
    with pytest.warns(dm.DopplermapWarning, match="macro_gauss"):
        points = search.grid_points({"macroturbulence": [0.0, 2.0]})
    assert points == [{"macro_gauss": 0.0}, {"macro_gauss": 2.0}]
    with pytest.warns(dm.DopplermapWarning, match="macro_gauss"), pytest.raises(ValueError, match="macro_gauss"):
        search.grid_search(prob, {"macroturbulence": [-1.0, 2.0]}, tmp_path / "t.csv")
    assert "macroturbulence" not in search.GRID_PARAMETERS
    from dopplermap.app.search import _axes

    with pytest.warns(dm.DopplermapWarning, match="macro_gauss"):
        assert list(_axes(["macroturbulence=0,2"])) == ["macro_gauss"]  # --param


@pytest.fixture
def npz(problem, tmp_path):
    """The small problem saved as the CLI's searches read it."""
    from dopplermap.app.search import save_problem

    prob, sim = problem
    return save_problem(tmp_path / "p.npz", sim.obs, prob.star, n_cell=prob.grid.n_cell)


@pytest.mark.slow
def test_cli_grid_and_lambda(npz, tmp_path, capsys):
    from dopplermap.cli import main

    out = tmp_path / "g"
    rc = main(["grid", str(npz), "--out", str(out), "--param", "vsini=38:40:2", "--lmbd", "0.5",
               "--scheduler", "sync"])
    assert rc == 0
    assert len(search.read_table(out / "grid.csv")) == 2 and (out / "grid.png").exists()
    assert (out / "landscape.png").exists()  # one parameter: its chi2 landscape
    summary = json.loads((out / "grid.json").read_text())
    assert "un-reduced" in (out / "grid.json").read_text()
    assert summary["readout"] == "regularised" and summary["lmbd"] == 0.5
    assert 0.0 <= summary["chi2_jitter"] < 0.1  # against a converged solve at the best point: Gauss-Newton's
    # the grid's discretisation error at the best point, warned about above the intervals' Delta chi2
    assert summary["model_error_chi2"] > 0
    assert ("discretisation error" in capsys.readouterr().err) == (summary["model_error_chi2"] > 1.0)
    rc = main(["lambda", str(npz), "--out", str(tmp_path / "l"), "--lmbds", "0.01,0.1,1,10,100", "--tol", "1e-6"])
    assert rc == 0 and (tmp_path / "l" / "lcurve.csv").exists() and (tmp_path / "l" / "lcurve.png").exists()
    # the corner's map, solved, with its chi2 per point and per residual degree of freedom
    choice = json.loads((tmp_path / "l" / "lambda.json").read_text())
    dof = choice["corner_dof"]
    assert dof["chi2"] == pytest.approx(choice["corner_chi2"]) and 0.0 < dof["p_eff"] < dof["n"]
    assert dof["chi2_nu"] == pytest.approx(dof["chi2"] * dof["n"] / dof["nu"]) and dof["chi2_nu"] > dof["chi2"]
    assert f"{dof['chi2_nu']:.4g} per residual dof" in capsys.readouterr().out
    assert main(["grid", str(npz), "--out", str(out), "--param", "vsini=38:40:2", "--scheduler", "sync"]) == 2
    assert "resume" in capsys.readouterr().err
    assert main(["grid", str(tmp_path / "missing.npz"), "--out", str(out), "--param", "vsini=38"]) == 2
    assert main(["grid", "--out", str(out), "--param", "vsini"]) == 2


@pytest.mark.slow
def test_cli_grid_profiled_readout(npz, tmp_path):
    """The profiled read-out: lambda 100 times smaller, solved tightly."""
    from dopplermap.cli import main

    assert main(["grid", str(npz), "--out", str(tmp_path / "p"), "--param", "vsini=40", "--lmbd", "0.5",
                 "--scheduler", "sync", "--readout", "profiled", "-q"]) == 0
    profiled = json.loads((tmp_path / "p" / "grid.json").read_text())
    assert profiled["readout"] == "profiled" and profiled["lmbd"] == pytest.approx(0.005)
    assert profiled["tol"] == search.PROFILE_READOUT.tol
    # read on chi2_total + the solve's effective parameters, written beside chi2_total
    assert profiled["column"] == "chi2_dof"
    row = search.read_table(tmp_path / "p" / "grid.csv")[0]
    assert row["chi2_dof"] == pytest.approx(row["chi2_total"] + row["dof"]) and row["dof"] > 0


def test_cli_lambda_keeps_the_sweep_when_the_target_chi2_is_out_of_reach(npz, tmp_path, capsys):
    """An unreachable --target-chi2 fails (exit 2, one line) after writing the sweep it paid for."""
    from dopplermap.cli import main

    out = tmp_path / "l"
    rc = main(["lambda", str(npz), "--out", str(out), "--lmbds", "0.1,1,10", "--tol", "1e-6",
               "--target-chi2", "1e-4"])
    err = capsys.readouterr().err
    assert rc == 2 and "target chi2 0.0001 not reached" in err and str(out) in err
    choice = json.loads((out / "lambda.json").read_text())
    assert choice["target_lambda"] is None and "not reached" in choice["target_message"]
    assert len((out / "lcurve.csv").read_text().splitlines()) == 1 + 3


def test_analyses_take_a_problem_first(problem, tmp_path):
    """A bare precomputed model or a loose part in the Problem's place is a one-line error naming Problem."""
    from dopplermap import calibrate, jointfit

    prob, sim = problem
    calls = (lambda part: search.grid_search(part, AXES, tmp_path / "t.csv"),
             lambda part: calibrate.calibrate_parameter(part, "inclination", [50.0, 60.0, 70.0]),
             jointfit.joint_fit, lambda part: search.evaluate_point(part, {"inclination": 60.0}))
    for part in (prob.pre, prob.grid, sim.obs):
        for call in calls:
            with pytest.raises(dm.DopplermapInputError, match=r"takes a dopplermap\.problem\.Problem first") as exc:
                call(part)
            assert "\n" not in str(exc.value)
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("name", ["search.grid_search", "search.evaluate_point", "calibrate.calibrate_parameter",
                                  "jointfit.joint_fit"])
def test_analysis_signatures_are_short(name):
    import importlib
    import inspect

    module, func = name.split(".")
    params = inspect.signature(getattr(importlib.import_module(f"dopplermap.{module}"), func)).parameters
    assert len(params) <= 8, (name, list(params))
    assert next(iter(params)) == "problem"


def test_param_takes_float_steps_counts_and_lists():
    from dopplermap.app.search import _axes

    axes = _axes(["vsini=38:42:0.5", "domega=0:0.1:0.01", "inclination=5:85:n9", "t_cool=3500,3800"])
    np.testing.assert_array_equal(axes["vsini"], 38.0 + 0.5 * np.arange(9))
    # eleven values whose last is the stop itself, not 0.09999999999999999 or 0.1 + a step
    assert axes["domega"].size == 11 and axes["domega"][-1] == 0.1
    np.testing.assert_allclose(axes["domega"], np.arange(11) / 100, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(axes["inclination"], [5, 15, 25, 35, 45, 55, 65, 75, 85])
    np.testing.assert_array_equal(axes["t_cool"], [3500.0, 3800.0])
    assert _axes(["domega=0:0.3:0.1"])["domega"].tolist() == [0.0, 0.1, 0.2, 0.3]  # 0.3 / 0.1 = 2.9999999999999996
    assert _axes(["domega=0:1:0.3"])["domega"].tolist() == [0.0, 0.3, 0.6, 0.9]  # the stop only when on a step
    np.testing.assert_allclose(_axes(["domega=0:1:n4"])["domega"], [0, 1 / 3, 2 / 3, 1])
    for bad, pattern in (("vsini=38:42:0", "step > 0"), ("vsini=42:38:0.5", "start <= stop"),
                         ("vsini=38:42:n1", "N >= 2"), ("vsini=38:42:n2.5", "whole number"),
                         ("vsini=38:42:nx", "start:stop:nN"), ("vsini=38:42", "start:stop:step"),
                         ("vsini=38:42:0.5:1", "start:stop:step"), ("vsini=38:inf:1", "finite")):
        with pytest.raises(dm.DopplermapInputError, match=pattern):
            _axes([bad])
    # the count is checked before an array is made
    with pytest.raises(dm.DopplermapInputError, match="4e\\+06 points"):
        _axes(["vsini=0:4:0.000001"], max_points=1000)


def test_repeated_param_is_refused(tmp_path, capsys):
    from dopplermap.cli import main

    out = tmp_path / "g"
    assert main(["grid", "--out", str(out), "--param", "vsini=38,40", "--param", "inclination=60",
                 "--param", "vsini=41"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error:") and "--param vsini is given twice" in err[-1]
    assert "'vsini=38,40'" in err[-1] and "'vsini=41'" in err[-1]
    assert not out.exists()


def test_a_warm_solve_that_does_not_move_its_loss_is_redone_cold(monkeypatch):
    from types import SimpleNamespace

    def result(loss, iterations):
        return SimpleNamespace(iterations=iterations, history={"loss": np.asarray(loss)}, loss=loss[-1])

    moved, still = result([5.0, 4.0, 3.0, 2.9, 2.8], 5), result([3.0, 3.0, 3.0, 3.0, 3.0 - 1e-9], 5)
    assert not search._stalled(moved, 1e-5)
    assert search._stalled(still, 1e-5)  # more than STALL_ITERATIONS, but the loss stood still
    assert search._stalled(result([3.0, 2.0], 2), 1e-5)
    calls = []
    cold_result = result([4.0, 2.0], 9)

    def fake_invert(problem, *, lmbd, x0):
        calls.append(x0)
        return still if x0 == "warm" else cold_result

    monkeypatch.setattr(search, "invert", fake_invert)
    problem = SimpleNamespace(settings=SimpleNamespace(tol=1e-5))
    assert search._warm_solve(problem, 0.1, "warm", "cold") is cold_result  # lower loss kept
    assert calls == ["warm", "cold"]
    calls.clear()
    monkeypatch.setattr(search, "invert", lambda problem, *, lmbd, x0: calls.append(x0) or moved)
    assert search._warm_solve(problem, 0.1, "warm", "cold") is moved and calls == ["warm"]


@pytest.mark.slow
def test_cli_grid_support_readout(npz, tmp_path):
    """The support read-out: a regularised pass, then every point refitted on its best map's
    spotted cells, read on chi2_support; with --calibrate that read-out is what is calibrated."""
    from dopplermap.cli import main

    out = tmp_path / "s"
    assert main(["grid", str(npz), "--out", str(out), "--param", "inclination=50:70:10", "--param", "vsini=40",
                 "--lmbd", "0.5", "--scheduler", "sync", "--readout", "support", "-q"]) == 0
    summary = json.loads((out / "grid.json").read_text())
    assert summary["readout"] == "support" and summary["column"] == "chi2_support"
    support = summary["support"]
    assert 0 < support["cool_cells"] < 400 and support["at"]["inclination"] in (50.0, 60.0, 70.0)
    first = search.read_table(out / "grid-regularised.csv")
    rows = search.read_table(out / "grid.csv")
    # the same regularised solves in both tables, the refit beside them in grid.csv
    assert [r["chi2_total"] for r in rows] == pytest.approx([r["chi2_total"] for r in first], rel=1e-6)
    assert all(np.isfinite(r["chi2_support"]) for r in rows)
    assert all(np.isnan(r["chi2_support"]) for r in first)
    assert summary["best"]["inclination"] == min(rows, key=lambda r: r["chi2_support"])["inclination"]
    assert main(["grid", str(npz), "--out", str(tmp_path / "c"), "--param", "inclination=50:70:10", "--param",
                 "vsini=40", "--lmbd", "0.5", "--readout", "support", "--calibrate", "4", "--scheduler", "sync",
                 "-q"]) == 0
    calibrated = json.loads((tmp_path / "c" / "grid.json").read_text())["calibrated"]["inclination"]
    assert calibrated["readout"] == "support" and calibrated["column"] == "chi2_support"
    assert calibrated["n_solves"] == 3 + 2 * 3 * 13 and 50.0 <= calibrated["estimate"] <= 70.0
    assert (tmp_path / "c" / "calibrate-inclination.jsonl").read_text().count("chi2_support") == 4


def test_cli_grid_warns_when_its_landscape_is_solver_noise(npz, tmp_path, monkeypatch, capsys):
    """A chi2_jitter above a tenth of the intervals' Delta chi2 is one warning naming both (not for
    the support read-out, whose column is not the regularised solves')."""
    from dopplermap.cli import main

    monkeypatch.setattr(search, "chi2_jitter", lambda problem, params, **kw: 0.35)
    args = ["grid", str(npz), "--param", "vsini=38:40:2", "--lmbd", "0.5", "--scheduler", "sync", "-q"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "moves by 0.35 between the grid's solve and one converged" in err and "Delta chi2 1:" in err
    assert main([*args, "--out", str(tmp_path / "b"), "--delta-chi2", "4"]) == 0
    assert "chi2_jitter" not in capsys.readouterr().err
    # the support read-out reads refits converged to tol 1e-10, not the regularised solves
    assert main([*args, "--out", str(tmp_path / "c"), "--readout", "support"]) == 0
    assert "chi2_jitter" not in capsys.readouterr().err


def test_grid_resolves_the_automatic_solver_once_and_for_accuracy(problem, tmp_path, monkeypatch):
    """solver "auto" is decided once for the grid's points, Gauss-Newton where it is a candidate
    (L-BFGS-B otherwise, e.g. above its tolerance), and every point solves with it."""
    prob, _ = problem
    used = []
    real = search.invert

    def spy(*args, **kwargs):
        used.append(kwargs.get("solver"))
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "invert", spy)
    axes = {"inclination": [50.0, 60.0], "vsini": [40.0]}
    tight = prob.replace(settings=prob.settings.replace(solver="auto", tol=1e-6, lmbd=0.5))
    search.grid_search(tight, axes, tmp_path / "t.csv")
    assert used == ["newton", "newton"]
    used.clear()
    loose = prob.replace(settings=prob.settings.replace(solver="auto", tol=1e-4, lmbd=0.5))
    search.grid_search(loose, axes, tmp_path / "l.csv")
    assert used == ["lbfgsb", "lbfgsb"]
    used.clear()
    given = prob.replace(settings=prob.settings.replace(solver="lbfgsb", tol=1e-6, lmbd=0.5))
    search.grid_search(given, axes, tmp_path / "g.csv")
    assert used == ["lbfgsb", "lbfgsb"]


@pytest.mark.slow
def test_chi2_jitter_takes_the_grids_own_solve(monkeypatch):
    """Given the grid's recorded chi2_total at the point, chi2_jitter solves only the reference and
    gives what it gives solving both (the grid's solve is the same solve)."""
    from dopplermap.problem import demo_problem

    p = demo_problem(n_cell=100, n_epoch=8, n_vel=20)
    params = {"inclination": 60.0}
    both = search.chi2_jitter(p, params)
    own = search.evaluate_point(p, params)["chi2_total"]
    calls = []
    plain = search.evaluate_point
    monkeypatch.setattr(search, "evaluate_point", lambda problem, params, **kw: calls.append(problem.settings.tol)
                        or plain(problem, params, **kw))
    assert search.chi2_jitter(p, params, chi2_total=own) == both and len(calls) == 1
    assert calls[0] == search.JITTER_REFERENCE["tol"] != p.settings.tol
    assert math.isnan(search.chi2_jitter(p, params, chi2_total=math.nan))


def test_chi2_jitter_reference_is_gauss_newton_whatever_the_compile_state(monkeypatch):
    """The reference solve of chi2_jitter is Gauss-Newton wherever it fits the model, even where
    the time estimate (a cold Newton program) prefers L-BFGS-B, which at tol 1e-12 stops above
    the minimum (benchmarks/RESULTS.md, "The grid's solver on real data")."""
    from dopplermap import plan
    from dopplermap.problem import demo_problem

    p = demo_problem(n_cell=100, n_epoch=8, n_vel=20)
    dear = {**plan.COMPILE_SECONDS, "newton": {**plan.COMPILE_SECONDS["newton"], "cold": 1e6, "disk": 1e6}}
    monkeypatch.setattr(plan, "COMPILE_SECONDS", dear)  # the estimate now always prefers L-BFGS-B
    solvers = []
    plain = search.evaluate_point
    monkeypatch.setattr(search, "evaluate_point", lambda problem, params, **kw: solvers.append(problem.settings.solver)
                        or plain(problem, params, **kw))
    search.chi2_jitter(p, {"inclination": 60.0}, chi2_total=1.0)
    assert solvers == ["newton"]


@pytest.mark.slow
def test_demo_sweep_chi2_rises_with_lambda_at_the_noise_fitting_end():
    # the command's demo star and 12 lambdas: exact minima's chi2 never falls as lambda grows.
    # Swept upwards, lambda 1e-3's solve from the flat start stopped on its relative-reduction
    # test with chi2 above lambda 2.8e-3's (the order repair re-solved it); Gauss-Newton's sweep
    # now runs downwards, and its low end comes out in order and no higher in loss
    from dopplermap.app.search import load_problem

    prob = load_problem(None, quiet=True, tol=1e-7)
    lm = np.logspace(-3, 2, 12)
    sw = search.sweep_lambda(prob, lm)
    assert sw.results[0].solver == "newton"
    assert np.all(sw.chi2[:-1] <= sw.chi2[1:] * (1 + search.SWEEP_ORDER_RTOL))
    flat = dm.invert(prob.replace(settings=prob.settings.replace(solver="newton")), lmbd=lm[0])  # the upward start
    assert sw.loss[0] <= flat.loss * (1 + 1e-6)


def test_a_mistyped_grid_parameter_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    """``--param inclinaton=...``: one line with the nearest known name, before the problem is read
    (a target's error scale costs four solves)."""
    from dopplermap.app import search as app_search
    from dopplermap.cli import main

    monkeypatch.setattr(app_search, "load_problem", lambda *a, **k: pytest.fail("the problem was read"))
    assert main(["grid", "--param", "inclinaton=40,50", "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown grid parameter 'inclinaton'; did you mean 'inclination'?" in err
    assert not (tmp_path / "g").exists()


def test_a_joint_fit_s_grid_rows_carry_the_light_curve_s_chi2():
    """chi2_lc: a joint problem's light-curve chi2 at each point (its map's, as invert gives it);
    NaN without a light curve; kept through a point's saved solve (and absent in older files)."""
    from dopplermap.lightcurve import LightCurveBand, simulate_lightcurve
    from dopplermap.problem import LightCurveData

    prob, sim = small_problem(n_cell=100, n_epoch=8, n_vel=20)
    band = LightCurveBand((dm.LimbDarkening("linear", (0.6,)),) * 3, (1.0, 0.3, 1.4))
    t = np.linspace(0.0, 4.0, 60)
    flux, err, _ = simulate_lightcurve(prob.grid, prob.star, t, band, sim.fssc, sim.fssh, sigma=2e-3, seed=3)
    joint = prob.replace(lightcurve_data=LightCurveData(times=t, flux=flux, err=err, band=band),
                         settings=Settings(lmbd=0.5, tol=1e-6))
    from dopplermap.lightcurve import chi2_lightcurve

    row = search.evaluate_point(joint, {"inclination": 55.0}, keep=True)
    point = joint.replace(star=joint.star.replace(inclination=55.0))  # its light curve's model at that point
    own = float(chi2_lightcurve(row["solve"].fssc, row["solve"].fssh, point.lightcurve))
    assert row["chi2_lc"] == pytest.approx(own, rel=1e-9) and 0.3 < row["chi2_lc"] < 3.0
    assert row["chi2_total"] == pytest.approx(row["chi2"] * sim.obs.n_epoch * sim.obs.n_vel)
    back = search.PointSolve.from_json(json.loads(json.dumps(row["solve"].to_json())))
    assert back.chi2_lc == row["chi2_lc"]
    old = {k: v for k, v in row["solve"].to_json().items() if k != "chi2_lc"}
    assert math.isnan(search.PointSolve.from_json(old).chi2_lc)
    assert math.isnan(search.evaluate_point(prob.replace(settings=joint.settings), {"inclination": 55.0})["chi2_lc"])
