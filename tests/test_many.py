"""Many solves of one shape (dopplermap.solvers.solve_many): the modes agree, the vmapped calls
are sized to the memory budget, and the searches built on it say how they ran."""

import os
import warnings

import numpy as np
import pytest
from support.problems import small_problem

import dopplermap as dm
from dopplermap import plan, search
from dopplermap.solvers import solve_many

TOL = 1e-9
LMBDS = [1.0, 3.0, 10.0]


@pytest.fixture(scope="module")
def tiny():
    # maps only (no rv, amp) and lambdas where every solver converges: the modes must then
    # reach the same minimum to the tolerance
    prob, sim = small_problem(n_cell=150, n_epoch=8, n_vel=20, inclination=55.0, snr=200.0)
    return prob.replace(settings=prob.settings.replace(tol=TOL, maxiter=5000, fit_rv=False, fit_amp=False))


def _rel(a, b):
    return abs(a - b) / abs(b)


@pytest.mark.slow  # a vmapped compile
def test_modes_agree_and_calls_are_sized_to_the_budget(tiny):
    lm = LMBDS
    seq = solve_many(tiny, lmbds=lm, mode="sequential")
    one = [dm.invert(tiny, lmbd=m, solver="lbfgsb") for m in lm]
    per = plan.member_bytes(tiny.obs.n_epoch * tiny.obs.n_vel, 2 * tiny.grid.n_cell + 2 * tiny.obs.n_epoch)
    chunked = solve_many(tiny, lmbds=lm, mode="vmap", budget=2 * per)  # two members a call
    assert (seq.mode, chunked.mode, chunked.chunk, chunked.n_calls) == ("sequential", "vmap", 2, 2)
    for a, b, c in zip(seq.results, one, chunked.results, strict=True):
        assert a.lmbd == b.lmbd == c.lmbd
        # the same minimum, to the solver tolerance (Tikhonov: a convex objective)
        assert _rel(a.loss, b.loss) < 100 * TOL and _rel(c.loss, b.loss) < 100 * TOL
    assert "2 call(s) of 2" in chunked.describe()
    # a start per member, through the padded vmapped calls: each member from its own solution
    again = solve_many(tiny, lmbds=lm, mode="vmap", budget=2 * per, x0=np.stack([r.x for r in seq.results]))
    for a, b in zip(again.results, seq.results, strict=True):
        assert _rel(a.loss, b.loss) < 100 * TOL and a.iterations < 0.2 * b.iterations


def test_sequential_agrees_with_invert_warm_started_or_not(tiny):
    lm = LMBDS
    one = [dm.invert(tiny, lmbd=m, solver="lbfgsb") for m in lm]
    cold = solve_many(tiny, lmbds=lm, mode="sequential")
    warm = solve_many(tiny, lmbds=lm, mode="sequential", warm_start=True)
    assert (cold.mode, warm.mode) == ("sequential", "sequential")
    for a, b, c in zip(warm.results, cold.results, one, strict=True):
        assert _rel(a.loss, c.loss) < 100 * TOL and _rel(b.loss, c.loss) < 100 * TOL
    # the chain's first member starts where the cold ones do; the next ones from its map
    assert warm.results[0].iterations == cold.results[0].iterations
    assert [r.iterations for r in warm.results[1:]] != [r.iterations for r in cold.results[1:]]
    with pytest.raises(dm.DopplermapInputError, match="mode='sequential'"):
        dm.invert_batch(tiny, lmbds=lm, mode="vmap", warm_start=True)


def test_a_start_per_member(tiny):
    """``x0`` of shape (n_members, n_param): each member starts from its own row. Started at
    their own solutions, the members stop at once at the same minimum; rows of the wrong
    shape, or held rv differing between rows, are refused."""
    rng = np.random.default_rng(0)
    obs = tiny.obs
    flux = np.asarray(obs.flux)[None] + np.asarray(obs.err)[None] * rng.standard_normal((3, *obs.flux.shape))
    cold = solve_many(tiny, flux=flux, err=obs.err, mode="sequential")
    starts = np.stack([r.x for r in cold.results])
    again = solve_many(tiny, flux=flux, err=obs.err, mode="sequential", x0=starts)
    for a, b in zip(again.results, cold.results, strict=True):
        assert _rel(a.loss, b.loss) < 100 * TOL
        assert a.iterations < 0.2 * b.iterations
    # the rows are the members' own: swapped starts cost more iterations than their own
    swapped = solve_many(tiny, flux=flux, err=obs.err, mode="sequential", x0=starts[::-1])
    assert swapped.results[0].iterations > again.results[0].iterations
    with pytest.raises(dm.DopplermapInputError, match="shape"):
        solve_many(tiny, flux=flux, err=obs.err, mode="sequential", x0=starts[:2])
    held = starts.copy()
    held[1, 2 * tiny.grid.n_cell] += 0.1  # rv is held (fit_rv off): one value for the batch
    with pytest.raises(dm.DopplermapInputError, match="held rv"):
        solve_many(tiny, flux=flux, err=obs.err, mode="sequential", x0=held)


def test_sweep_modes_agree_and_say_which_ran(tiny, monkeypatch):
    lm = LMBDS[::-1]
    ref = search.sweep_lambda(tiny, lm, mode="invert")
    sw = search.sweep_lambda(tiny, lm, mode="sequential")
    assert (ref.mode, sw.mode) == ("invert", "sequential")
    # invert runs the problem's L-BFGS-B, sequential the device solver: the same minima
    assert np.all(np.abs(sw.loss / ref.loss - 1) < 100 * TOL)
    # its parts trade along the flat valley of the minimum: to about the tolerance's square root
    assert np.all(np.abs(sw.chi2 / ref.chi2 - 1) < 3 * TOL ** 0.5)
    # "auto": below the size where a CPU batch pays, invert, as before
    monkeypatch.setattr(plan, "on_accelerator", lambda: False)
    assert search.sweep_lambda(tiny, lm[:1]).mode == "invert"
    # nor from it: on CPU a sweep's lockstep batch lost to warm-started solves even at the seed size
    monkeypatch.setattr(plan, "VMAP_MIN_CPU_WORK", 1)
    assert search._sweep_mode(tiny, "auto") == "invert"
    monkeypatch.setattr(plan, "on_accelerator", lambda: True)
    assert search._sweep_mode(tiny, "auto") == "vmap"
    with pytest.raises(dm.DopplermapInputError, match="mode"):
        search.sweep_lambda(tiny, lm, mode="together")


def test_many_mode_decides_by_device_size_and_fit(monkeypatch):
    monkeypatch.setattr(plan, "on_accelerator", lambda: False)
    big = plan.VMAP_MIN_CPU_WORK
    assert plan.many_mode("auto", n_data=big, n_cell=1, blocked_fits=True) == "vmap"
    assert plan.many_mode("auto", n_data=big - 1, n_cell=1, blocked_fits=True) == "sequential"
    assert plan.many_mode("auto", n_data=big, n_cell=10, blocked_fits=False) == "sequential"
    assert plan.many_mode("sequential", n_data=big, n_cell=10, blocked_fits=True) == "sequential"
    monkeypatch.setattr(plan, "on_accelerator", lambda: True)
    assert plan.many_mode("auto", n_data=10, n_cell=10, blocked_fits=False) == "vmap"


def test_batch_chunk_fits_the_budget(monkeypatch):
    assert plan.batch_chunk(10, 100, budget=1000) == 10
    assert plan.batch_chunk(50, 100, budget=1000) == 10
    assert plan.batch_chunk(50, 5000, budget=1000) == 1  # one member even when it alone is over
    monkeypatch.setenv("DOPPLERMAP_MAX_MEMORY", "4000")  # the user's limit, a quarter of it a call
    assert plan.batch_chunk(50, 100) == int(plan.BATCH_MEMORY_FRACTION * 4000) // 100


def test_auto_solver_counts_a_cold_compile():
    """The shorter of compile plus solve: a cold Newton compile loses to L-BFGS-B on a small
    problem and wins on a large one; compiled (in this process or in the persistent cache),
    Newton's fewer, cheaper passes win at any size; several solves share one compile."""
    small, large = dict(n_data=30 * 24, n_cell=400), dict(n_data=150 * 32, n_cell=20_000)
    cold = {"newton": "cold", "lbfgsb": "memo"}
    assert plan.pick_solver(cold, tol=1e-7, **small).solver == "lbfgsb"
    assert plan.pick_solver(cold, tol=1e-7, **large).solver == "newton"
    for state in ("memo", "disk"):
        assert plan.pick_solver({"newton": state, "lbfgsb": state}, tol=1e-7, **small).solver == "newton"
    # a cold Newton compile paid once for a sweep of many solves
    assert plan.pick_solver(cold, tol=1e-7, n_solves=200, **small).solver == "newton"
    # the estimate: each candidate's compile state and seconds, printed with -v
    choice = plan.pick_solver(cold, tol=1e-7, **small)
    assert choice.estimates["newton"][:2] == ("cold", plan.COMPILE_SECONDS["newton"]["cold"])
    line = choice.describe()
    assert line.startswith("solver auto: lbfgsb") and "newton" in line and "(cold)" in line
    # more digits of tolerance cost L-BFGS-B more passes than Newton
    assert (plan.solver_passes("lbfgsb", 1e-8) - plan.solver_passes("lbfgsb", 1e-6)
            > plan.solver_passes("newton", 1e-8) - plan.solver_passes("newton", 1e-6))


def test_auto_solver_builds_the_warm_winner_on_a_repeated_run(monkeypatch):
    """A first run (nothing cached) counts Newton's cold compile in full and takes L-BFGS-B on
    a small problem; once L-BFGS-B's program of the shape is on disk (a repeated run) the cold
    compile counts 1/REPEAT_RUNS, so Newton, the faster one compiled, is built on that run and
    wins from the cache after it. Where Newton would not win even compiled, nothing changes."""
    small = dict(n_data=30 * 24, n_cell=400)  # six solves: a cold Newton compile is not repaid on a first run
    first = plan.pick_solver({"newton": "cold", "lbfgsb": "cold"}, tol=1e-7, n_solves=6, **small)
    again = plan.pick_solver({"newton": "cold", "lbfgsb": "disk"}, tol=1e-7, n_solves=6, **small)
    later = plan.pick_solver({"newton": "disk", "lbfgsb": "disk"}, tol=1e-7, n_solves=6, **small)
    assert (first.solver, again.solver, later.solver) == ("lbfgsb", "newton", "newton")
    assert not first.repeated and again.repeated
    assert "ran before" in again.describe() and "ran before" not in later.describe()
    # the rule follows the estimates: the cold compile must be paid back within REPEAT_RUNS runs
    newton_s = 6 * plan.solve_seconds("newton", 1e-7, **small)
    lbfgsb_s = 6 * plan.solve_seconds("lbfgsb", 1e-7, **small)
    assert (plan.COMPILE_SECONDS["newton"]["cold"] / plan.REPEAT_RUNS + newton_s
            < plan.COMPILE_SECONDS["lbfgsb"]["disk"] + lbfgsb_s)
    # one solve whose saving does not repay a tenth of the compile (a dearer compile than
    # this machine's): L-BFGS-B stays; six solves repay it
    dear = {**plan.COMPILE_SECONDS, "newton": {**plan.COMPILE_SECONDS["newton"], "cold": 10.0}}
    monkeypatch.setattr(plan, "COMPILE_SECONDS", dear)
    assert plan.pick_solver({"newton": "cold", "lbfgsb": "disk"}, tol=1e-7, **small).solver == "lbfgsb"
    assert plan.pick_solver({"newton": "cold", "lbfgsb": "disk"}, tol=1e-7, n_solves=6, **small).solver == "newton"
    # in-process reuse (memo) alone is no repeated run
    assert plan.pick_solver({"newton": "cold", "lbfgsb": "memo"}, tol=1e-7, n_solves=6, **small).repeated is False
    # a Newton loop that reports progress to the host is never stored: its compile is not spread
    assert plan.pick_solver({"newton": "cold", "lbfgsb": "disk"}, tol=1e-7, n_solves=6, unkept=("newton",),
                            **small).solver == "lbfgsb"


@pytest.mark.slow  # a whole CLI run (about 9 s)
def test_auto_solver_sees_where_the_newton_program_is(tiny, caplog):
    """invert's "auto" finds the Newton program of this shape compiled in this process, and
    logs its choice with the estimates (what -v prints)."""
    import logging

    from dopplermap.solvers import prepare, solver_choice

    p = tiny.replace(settings=tiny.settings.replace(solver="auto", tol=1e-7))
    setup = prepare(p.pre, p.obs, p.settings, problem=p)
    before = solver_choice(settings=p.settings, pre=p.pre, setup=setup)
    dm.invert(p, solver="newton")
    after = solver_choice(settings=p.settings, pre=p.pre, setup=setup)
    assert before.estimates["newton"][0] in ("cold", "disk") and after.estimates["newton"][0] == "memo"
    with caplog.at_level(logging.INFO, logger="dopplermap.solvers"):
        assert after.solver == "newton" and dm.invert(p).solver == "newton"
    assert any(r.getMessage().startswith("solver auto: newton (estimated newton 0.0 s compile (memo)")
               for r in caplog.records)


@pytest.mark.slow  # a local Dask cluster
def test_sweep_and_bootstrap_on_a_two_worker_cluster_equal_this_process(tiny, monkeypatch):
    """A lambda sweep and a bootstrap spread over a local 2-worker cluster, in tasks of a few
    members: the same solves as in this process (each member from the same start), so the
    same maps."""
    from dask.distributed import LocalCluster

    from dopplermap import search
    from dopplermap import uncertainty as U

    lm = [0.3, 1.0, 3.0]
    here = search.sweep_lambda(tiny, lm, warm_start=False, mode="sequential", member_solver="newton")  # downwards
    best = dm.invert(tiny, lmbd=1.0)
    boot_here = U.bootstrap(tiny, best, n_boot=5, mode="sequential")
    monkeypatch.setattr(search, "SWEEP_TASK_LAMBDAS", 2)  # 2 tasks
    monkeypatch.setattr(U, "BOOTSTRAP_TASK", 2)  # 3 tasks
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        where = search.Cluster(cluster.scheduler_address)
        there = search.sweep_lambda(tiny, lm, warm_start=False, mode="sequential", member_solver="newton", cluster=where)
        boot_there = U.bootstrap(tiny, best, n_boot=5, mode="sequential", cluster=where)
    np.testing.assert_allclose(there.loss, here.loss, rtol=1e-10)
    for a, b in zip(there.results, here.results, strict=True):
        np.testing.assert_allclose(a.fssc, b.fssc, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(boot_there.samples, boot_here.samples, rtol=1e-9, atol=1e-12)
    with pytest.raises(dm.DopplermapInputError, match="resample"):
        U.bootstrap(tiny, best, n_boot=5, mode="resample", cluster=search.Cluster("tcp://127.0.0.1:1"))


def test_invert_scheduler_needs_a_bootstrap(tmp_path, capsys):
    """--scheduler spreads the bootstrap's refits: without a bootstrap to spread it is refused
    with one line before any work (never silently ignored)."""
    from dopplermap.cli import main

    p = tmp_path / "target.toml"
    assert main(["init", str(p)]) == 0
    capsys.readouterr()
    assert main(["invert", str(p), "--out", str(tmp_path / "r"), "--scheduler", "local"]) == 2
    err = capsys.readouterr().err
    assert "--scheduler spreads the bootstrap's refits" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()
    assert main(["invert", str(p), "--out", str(tmp_path / "r"), "--workers", "2"]) == 2  # a local cluster's size
    err = capsys.readouterr().err
    assert "--workers spreads the bootstrap's refits" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_lambda_refuses_an_unreachable_scheduler_before_any_work(tmp_path, capsys):
    from dopplermap.cli import main

    out = tmp_path / "l"
    assert main(["lambda", "--out", str(out), "--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "0.5"]) == 2
    err = capsys.readouterr().err
    assert "--scheduler tcp://127.0.0.1:9: could not connect" in err and "Traceback" not in err
    assert not out.exists()


def test_a_session_s_workers_keep_the_shared_problem_through_a_crash():
    """Every worker of a :class:`cluster.Session` holds the shared object, and so does each worker
    a nanny starts after a crash: a task submitted after every worker died still finds it (a
    scattered copy would be gone with them), and the session's end removes it from the workers."""
    import operator
    import os

    from dask.distributed import Client, LocalCluster

    from dopplermap.cluster import Cluster, Session

    shared = {"flux": np.arange(6.0)}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        with Session(Cluster(lc.scheduler_address), shared) as session:
            before = session.client.run(os.getpid)
            assert session.result(session.submit(operator.getitem, "flux"), timeout=60)[3] == 3.0
            try:
                session.client.run(os._exit, 1)  # every worker dies; the nannies start new ones
            except Exception:  # noqa: BLE001 - the workers' connections drop with them
                pass
            got = [session.result(session.submit(operator.getitem, "flux"), timeout=120) for _ in range(4)]
            after = session.client.run(os.getpid)
            assert set(after.values()).isdisjoint(before.values())
            assert all(np.array_equal(g, shared["flux"]) for g in got)
            name = session.name
        with Client(lc.scheduler_address) as c:
            assert not any(name in plugins for plugins in c.run(lambda dask_worker: list(dask_worker.plugins)).values())


def test_a_worker_s_warnings_follow_this_process_s_filters_and_reach_its_summary():
    """A task's warnings on a worker process are raised again in the client, where the run's
    summary collects them, and the client's filters hold on the worker (a grid ignores a
    point's chi2 far from 1 there as it does in this process)."""
    from dask.distributed import LocalCluster

    from dopplermap.cluster import Cluster, run_tasks
    from dopplermap.errors import DopplermapWarning, collect_warnings

    def warns_twice(shared, where):  # local: pickled by value for the worker
        warnings.warn(f"reduced chi2 of {where} is far from 1", DopplermapWarning, stacklevel=2)
        warnings.warn(f"{where}: a suspicious value", DopplermapWarning, stacklevel=2)
        return shared + 1

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as lc:
        with collect_warnings() as seen:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="reduced chi2", category=DopplermapWarning)
                out = run_tasks(Cluster(lc.scheduler_address), warns_twice, 41, [("point 0",), ("point 1",)])
    assert out == [42, 42]
    assert list(seen) == ["point 0: a suspicious value", "point 1: a suspicious value"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")
def test_the_local_cluster_counts_the_cpus_this_job_may_use():
    """A batch job given 1 CPU of a bigger node (its affinity) gets a 1-worker local cluster,
    not one worker per CPU of the node."""
    from dopplermap.cluster import usable_cpus
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert usable_cpus() == 1
    finally:
        os.sched_setaffinity(0, before)
    assert usable_cpus() == len(before)


def test_members_through_newton_reach_the_same_minima(tiny):
    """``solver="newton"``: the sequential members through one compiled Newton program reach the
    minima the projected L-BFGS members reach (a convex objective at these lambdas), each started
    from its own solution stops at once, and a vmapped batch refuses Newton."""
    rng = np.random.default_rng(1)
    obs = tiny.obs
    flux = np.asarray(obs.flux)[None] + np.asarray(obs.err)[None] * rng.standard_normal((3, *obs.flux.shape))
    lb = solve_many(tiny, flux=flux, err=obs.err, mode="sequential", solver="projected_lbfgs")
    nt = solve_many(tiny, flux=flux, err=obs.err, mode="sequential", solver="newton")
    assert {r.solver for r in lb.results} == {"projected_lbfgs"} and {r.solver for r in nt.results} == {"newton"}
    assert "(newton)" in nt.describe()
    for a, b in zip(nt.results, lb.results, strict=True):
        assert a.outcome.converged
        # as low as L-BFGS's or lower (its relative-reduction test stops it ~1e-7 short here)
        assert a.loss <= b.loss * (1 + 100 * TOL) and _rel(a.loss, b.loss) < 1e-6
    # the members are the data sets' own: each differs from the others, not a copy of the first
    assert len({round(r.chi2, 6) for r in nt.results}) == 3
    again = solve_many(tiny, flux=flux, err=obs.err, mode="sequential", solver="newton",
                       x0=np.stack([r.x for r in nt.results]))
    for a, b in zip(again.results, nt.results, strict=True):
        assert _rel(a.loss, b.loss) < 100 * TOL and a.iterations < b.iterations
    chain = solve_many(tiny, lmbds=LMBDS, mode="sequential", solver="newton", warm_start=True)
    ref = [dm.invert(tiny, lmbd=m, solver="lbfgsb") for m in LMBDS]
    for a, b in zip(chain.results, ref, strict=True):
        assert a.lmbd == b.lmbd and a.loss <= b.loss * (1 + 100 * TOL) and _rel(a.loss, b.loss) < 1e-6
    with pytest.raises(dm.DopplermapInputError, match="mode='sequential'"):
        dm.invert_batch(tiny, flux=flux, err=obs.err, mode="vmap", solver="newton")
    with pytest.raises(dm.DopplermapInputError, match="solver"):
        solve_many(tiny, flux=flux, err=obs.err, mode="sequential", solver="bfgs")


def test_the_members_solver_counts_compile_and_solves():
    """``plan.pick_member_solver``: with both programs cold a few small members go to the cheaper
    compile (projected L-BFGS), many or large members to Newton's cheaper solves; a compiled Newton
    program wins; once a program is on disk a cold compile counts a tenth (a repeated run)."""
    small = dict(n_data=720, n_cell=400)
    cold = {"projected_lbfgs": "cold", "newton": "cold"}
    assert plan.pick_member_solver(cold, n_members=20, **small).solver == "projected_lbfgs"
    assert plan.pick_member_solver(cold, n_members=400, **small).solver == "newton"
    assert plan.pick_member_solver(cold, n_members=20, n_data=4800, n_cell=2500).solver == "newton"
    memo = {"projected_lbfgs": "memo", "newton": "memo"}
    assert plan.pick_member_solver(memo, n_members=2, **small).solver == "newton"
    lb_compiled = {"projected_lbfgs": "memo", "newton": "cold"}
    assert plan.pick_member_solver(lb_compiled, n_members=20, **small).solver == "projected_lbfgs"
    repeated = {"projected_lbfgs": "disk", "newton": "cold"}
    pick = plan.pick_member_solver(repeated, n_members=20, **small)
    assert pick.solver == "newton" and pick.repeated
    est = pick.estimates
    assert est["newton"][2] < est["projected_lbfgs"][2]  # the solves alone: Newton's are cheaper


def test_newton_members_refuse_a_model_it_cannot_fit_and_auto_falls_back():
    """A model with the exact rv shift (Newton's rv search scores moves with the interpolating
    one): ``solver="newton"`` is refused in one line naming the alternative; ``"auto"`` runs the
    members through projected L-BFGS."""
    prob, sim = small_problem(n_cell=120, n_epoch=6, n_vel=20, snr=200.0)
    exact = dm.precompute(prob.grid, prob.star, sim.obs.times, sim.obs.vels, prob.components, method="binned",
                          rv_shift="exact")
    flux = np.stack([np.asarray(sim.obs.flux)] * 2)
    with pytest.raises(dm.DopplermapInputError, match="solver 'newton' needs the interpolating rv shift.*"
                                                      "projected_lbfgs"):
        solve_many(exact, sim.obs, flux=flux, err=sim.obs.err, mode="sequential", solver="newton", lmbd=1.0)
    auto = solve_many(exact, sim.obs, flux=flux, err=sim.obs.err, mode="sequential", lmbd=1.0, tol=1e-5)
    assert {r.solver for r in auto.results} == {"projected_lbfgs"}
    assert dm.solvers.sequential_solver(exact, sim.obs, n_members=2, lmbd=1.0) == "projected_lbfgs"


def test_run_members_runs_them_side_by_side_in_order():
    """Two members that each wait for the other finish only if they run at the same time; the
    results come back in the members' order, whichever finishes first."""
    import threading
    import time

    from dopplermap.solvers._common import run_members

    meet = threading.Barrier(2, timeout=10)

    def member(i):
        meet.wait()  # one after another, the first would wait alone and break the barrier
        time.sleep(0.05 * (3 - i))  # the later member finishes first
        return i * i

    assert run_members(member, 2, threads=2) == [0, 1]
    assert run_members(lambda i: i + 1, 3, threads=1) == [1, 2, 3]


def test_run_members_stops_starting_members_after_an_error():
    """A member that fails (or Ctrl-C) ends the batch: the members running finish, the ones not
    yet started never start, and the error reaches the caller."""
    import time

    from dopplermap.solvers._common import run_members

    ran = []

    def member(i):
        if i == 0:
            raise ValueError("member 0 failed")
        time.sleep(0.2)
        ran.append(i)
        return i

    with pytest.raises(ValueError, match="member 0 failed"):
        run_members(member, 8, threads=2)
    assert len(ran) <= 2, ran  # the one running beside member 0, and perhaps the next it picked up


@pytest.mark.parametrize("solver", ["projected_lbfgs", "newton"])
def test_independent_members_on_threads_equal_one_after_another(tiny, monkeypatch, solver):
    """Members that do not chain run on a thread per CPU, and each gets exactly what it gets alone
    (the same compiled program on the same inputs); a chain, or a Dask task
    (:func:`dopplermap.plan.members_in_one_thread`), runs them one after another."""
    monkeypatch.setattr(plan, "usable_cpus", lambda: 2)
    rng = np.random.default_rng(3)
    obs = tiny.obs
    flux = np.asarray(obs.flux)[None] + np.asarray(obs.err)[None] * rng.standard_normal((4, *obs.flux.shape))
    threaded = solve_many(tiny, flux=flux, err=obs.err, mode="sequential", solver=solver)
    with plan.members_in_one_thread():
        assert plan.member_threads(4) == 1
        alone = solve_many(tiny, flux=flux, err=obs.err, mode="sequential", solver=solver)
    assert (threaded.threads, alone.threads) == (2, 1)
    assert "2 at a time (threads)" in threaded.describe() and "one after another" in alone.describe()
    for a, b in zip(threaded.results, alone.results, strict=True):
        assert np.array_equal(a.x, b.x) and a.iterations == b.iterations
    assert len({round(r.chi2, 8) for r in threaded.results}) == 4  # each its own data set, in order
    chain = solve_many(tiny, lmbds=LMBDS, mode="sequential", solver=solver, warm_start=True)
    assert chain.threads == 1


def test_a_dask_task_solves_its_members_in_one_thread(monkeypatch):
    """On a worker the cluster has given each task its share of the machine: a task's members
    run one after another."""
    from dopplermap import _dask

    class Worker:
        plugins = {"shared": _dask.Shared("shared", 8)}

    monkeypatch.setattr(plan, "usable_cpus", lambda: 4)
    monkeypatch.setattr(_dask, "get_worker", lambda: Worker())
    assert plan.member_threads(8) == 4
    value, caught = _dask.call(lambda n: plan.member_threads(n), "shared", [])
    assert (value, caught) == (1, [])
    assert plan.member_threads(8) == 4  # only inside the task
