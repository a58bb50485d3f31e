"""The inclination read-out of ``grid``: regularised (old) against profiled (new), and the chi2
jitter between two solvers at one grid point.

    PYTHONPATH=src python benchmarks/bench_readout.py [--stars 0,4,7] [--readouts old,profiled_dof]
        [--cells 2500] [--procs N [--stop-after S]] [--jitter K [--tols ...]] [--sharp]
        [--out benchmarks/results/readout-cpu2.json]
    PYTHONPATH=src python benchmarks/bench_readout.py --tables a.json b.json   # merged tables

Stars are :mod:`bench_calibration`'s (simulated by its independent disc integrator). For each,
the inclination is profiled over :data:`bench_calibration.INC_GRID` with vsini held at the truth,
every point solved from the flat start (:func:`dopplermap.search.evaluate_point`), and read by
:func:`bench_calibration.continuous_interval` (Delta chi2 <= 1 / 4):

* ``old``: the problem's working settings (lambda 1, tol 1e-5), what ``grid`` reported;
* ``tight``: the working lambda solved as the profiled read-out is (Gauss-Newton, tol 1e-10);
* ``lambda0.1``: the same at a tenth of the working lambda;
* ``profiled``: :data:`dopplermap.search.PROFILE_READOUT` (lambda 1/100 of the working one,
  tight tolerance, the map's bounds active as in every solve), read on ``chi2_total``;
* ``X_dof`` (``profiled_dof``, ``lambda0.1_dof``): X's solves with their influence matrix
  counted, read three ways: ``X`` (``chi2_total``), ``X_dof`` (``chi2_total + tr A``, what
  ``grid --readout profiled`` reads) and ``X_nu`` (``chi2_total + 2 tr A - tr A'A``).

``--procs N`` spreads the points (stars x read-outs x inclinations) over N spawned worker
processes, each single-threaded on the CPU (:data:`WORKER_ENV`, :data:`WORKER_XLA_FLAGS`,
``JAX_PLATFORMS=cpu`` unless set), sharing one persistent compilation cache; each star is
written to ``--out`` as soon as its points are in, and ``--stop-after S`` ends the run after S
seconds with the stars finished so far. The run prints the per-star and summary tables
(mean absolute error, bias, coverage per read-out) that RESULTS.md shows; ``--tables`` prints
them for result files of a run split over several commands.

``--support support,support_truth,...``: the support refit (:func:`support_star`,
:func:`dopplermap.search.solve_on_support`) beside the old read-out from the same regularised
solves, a star a worker with ``--procs`` (``--support-polish``: its refits also swept from their
neighbours' refits). ``--tables ... --every 2``: stored profiles read again on every second node.
``--debias K``: the support read-out with a parametric-bootstrap bias correction
(:func:`debias_star`; ``--debias-at truth|draws``: its controls), a star a worker with ``--procs``.

``--joint K,...``: :func:`dopplermap.jointfit.joint_fit` of inclination and vsini from 45 deg and
vsini + 2 km/s with each limb weight. ``--sharp``: only the old read-out, on the sharp limb weight ``max(mu, 0)`` (the model before the
smooth limb). ``--jitter K``: star K at its true star, chi2_total from three solvers (L-BFGS-B, the projected
L-BFGS, Gauss-Newton) at each read-out's settings, and with ``--tols`` the two L-BFGS solvers at
each tol: the grid's landscape noise. Results: benchmarks/RESULTS.md, topic
"Stellar parameters: calibration", "Profiled read-out, smooth limb and chi2 jitter".
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_calibration as B  # noqa: E402
from _common import write_json  # noqa: E402

OLD = dict(lmbd=1.0, tol=1e-5, maxiter=1000)
READOUTS = ("old", "tight", "lambda0.1", "profiled")
SHARP = ("old_sharp",)  # --sharp: the old read-out on the sharp limb max(mu, 0)


def _settings(problem, which):
    from dopplermap.search import PROFILE_READOUT

    old = problem.settings.replace(**OLD)
    which = which.removesuffix("_dof")
    if which in ("old", "old_sharp"):
        return old
    profiled = PROFILE_READOUT.settings(old)
    if which == "tight":  # the working lambda, solved as the profiled read-out is
        return old.replace(**dict(profiled, lmbd=old.lmbd))
    if which.startswith("lambda"):  # "lambda0.1": solved as the profiled read-out, at that lambda
        return old.replace(**dict(profiled, lmbd=float(which[len("lambda"):]) * old.lmbd))
    return old.replace(**profiled)


@contextlib.contextmanager
def _limb(which):
    """The problem's precompute with the sharp limb for ``old_sharp`` (the problem has no limb setting)."""
    import dopplermap.problem as P

    plain = P.precompute
    if which == "old_sharp":
        P.precompute = functools.partial(plain, limb="sharp")
    try:
        yield
    finally:
        P.precompute = plain


def _point(s, which, inc):
    """One point of a read-out's profile: star ``s`` at inclination ``inc`` (vsini at the truth),
    solved from the flat start with the read-out's settings; the fields the tables read. For a
    ``_dof`` read-out the solve of :func:`dopplermap.search.evaluate_point` with its influence
    matrix counted (:func:`dopplermap.search.influence`: ``dof = tr A``, ``tr_a2 = tr A'A``)."""
    from dopplermap.search import apply_parameters, evaluate_point, influence, pad_precomputed
    from dopplermap.solvers import invert

    p = s["problem"]
    p = p.replace(settings=_settings(p, which))
    params = {"inclination": float(inc), "vsini": s["vsini"]}
    t0 = time.perf_counter()
    with warnings.catch_warnings(), _limb(which):
        warnings.simplefilter("ignore")
        if which.endswith("_dof"):
            star, comps = apply_parameters(p, params)
            point = p.replace(star=star, components=comps)
            res = invert(pad_precomputed(point.pre), point.obs, **point.invert_kwargs())
            eff = influence(point, res)
            r = dict(chi2_total=float(res.chi2) * point.obs.n_epoch * point.obs.n_vel, dof=float(eff.p_eff),
                     tr_a2=float(eff.tr_a2), iterations=res.iterations, success=res.success)
        else:
            r = dict(evaluate_point(p, params), tr_a2=math.nan)
    return dict(chi2_total=float(r["chi2_total"]), dof=float(r["dof"]), tr_a2=float(r["tr_a2"]),
                iterations=int(r["iterations"]), success=bool(r["success"]), lmbd=p.settings.lmbd,
                tol=p.settings.tol, maxiter=p.settings.maxiter, wall_s=time.perf_counter() - t0)


# the columns a read-out reads: chi2_total; + tr A (Mallows' Cp); + 2 tr A - tr A'A (N - nu: the
# expected drop of a linear fit's chi2 by the noise, which tr A alone is where A is a projection)
_COLUMNS = {"": lambda r: r["chi2_total"], "_dof": lambda r: r["chi2_total"] + r["dof"],
            "_nu": lambda r: r["chi2_total"] + 2.0 * r["dof"] - r["tr_a2"]}


def _profile_row(s, which, incs, points, wall_s):
    """A read-out's result on star ``s`` from its points (:func:`_point`, in the order of ``incs``);
    ``_dof`` read-outs read ``chi2_total + dof``, ``_nu`` ones ``chi2_total + 2 dof - tr_a2`` (:data:`_COLUMNS`)."""
    column = _COLUMNS[next((c for c in ("_dof", "_nu") if which.endswith(c)), "")]
    prof = np.array([column(r) for r in points])
    return dict(read(incs, prof, s["inc"]), iterations=[r["iterations"] for r in points],
                unconverged=int(sum(not r["success"] for r in points)),
                lmbd=points[0]["lmbd"], tol=points[0]["tol"], chi2_total=[r["chi2_total"] for r in points],
                dof=[r["dof"] for r in points], tr_a2=[r["tr_a2"] for r in points],
                success=[r["success"] for r in points], point_wall_s=[r["wall_s"] for r in points], wall_s=wall_s)


def profile(s, which, incs=B.INC_GRID):
    t0 = time.perf_counter()
    points = [_point(s, which, inc) for inc in incs]
    return _profile_row(s, which, incs, points, time.perf_counter() - t0)


def read(incs, prof, truth):
    """Best value and Delta chi2 <= 1 / 4 intervals of one profile, against the truth."""
    prof = np.asarray(prof, float)
    best, lo, hi = B.continuous_interval(incs, prof, 1.0)
    _, lo95, hi95 = B.continuous_interval(incs, prof, 4.0)
    return dict(best=best, lo68=lo, hi68=hi, lo95=lo95, hi95=hi95, err=best - truth,
                in68=bool(lo <= truth <= hi), in95=bool(lo95 <= truth <= hi95), profile=prof.tolist())


def jitter(s, which):
    """chi2_total at the true star from each solver, from the flat start; ``jitter``: the
    spread of the read-out's own solver and the other back ends at its settings."""
    from dopplermap.search import evaluate_point

    p = s["problem"]
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for solver in ("newton", "lbfgsb", "projected_lbfgs"):
            q = p.replace(settings=_settings(p, which).replace(solver=solver))
            out[solver] = float(evaluate_point(q, {"inclination": s["inc"], "vsini": s["vsini"]})["chi2_total"])
    return dict(out, settings=str(_settings(p, which)))


def jitter_tols(s, tols, lmbd=1.0):
    """chi2_total at the true star from each solver at each tol (lambda ``lmbd``); ``spread``:
    the two L-BFGS solvers' difference."""
    from dopplermap.search import evaluate_point

    p = s["problem"]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for tol in tols:
            row = {"tol": tol}
            for solver in ("lbfgsb", "projected_lbfgs", "newton"):
                q = p.replace(settings=p.settings.replace(lmbd=lmbd, tol=tol, maxiter=20000, solver=solver))
                row[solver] = float(evaluate_point(q, {"inclination": s["inc"], "vsini": s["vsini"]})["chi2_total"])
            row["spread"] = abs(row["lbfgsb"] - row["projected_lbfgs"])
            print("jitter", row, flush=True)
            out.append(row)
    return out


def joint(s, limb, start_inc=45.0, dvsini=2.0):
    """joint_fit of inclination and vsini from ``start_inc`` and vsini + ``dvsini`` with one limb weight."""
    from dopplermap.jointfit import joint_fit

    p = s["problem"]
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = joint_fit(p.replace(star=p.star.replace(inclination=start_inc, vsini=s["vsini"] + dvsini)), limb=limb)
    return dict(inc=float(r.star.inclination), vsini=float(r.star.vsini), success=bool(r.map.success),
                kink_warning=any("crosses the limb" in str(w.message) for w in caught),
                iterations=int(r.map.iterations), wall_s=time.perf_counter() - t0)


def model_error(k, cells=(300, 1200, 2500)):
    """The surface grid's discretisation error in chi2 units at star ``k``'s truth on each grid
    (:func:`dopplermap.search.model_grid_error`: the unspotted star against 4x the cells)."""
    from dopplermap.search import model_grid_error

    out = {}
    for n in cells:
        s = B.make_star(k, n_cell=n)
        out[n] = model_grid_error(s["problem"], {"inclination": s["inc"], "vsini": s["vsini"]})
    return out


def dof_control(k, incs, cells=B.N_CELL, seeds=()):
    """The profiled read-out's solves on star ``k``'s noisy and noise-free profiles at ``incs``:
    ``chi2_total`` and the influence matrix's ``tr A`` (``dof``) and ``tr A'A`` of each; for a
    linear model the noisy chi2 is the noise-free one plus ``N - 2 tr A + tr A'A`` in expectation
    (``N - tr A`` where ``A`` is a projection). ``seeds``: the same with other noise draws
    (``noisy_<seed>``), since one draw's absorbed noise scatters about that expectation."""
    out = {}
    for tag, kw in [("noisy", {}), ("noise_free", dict(noise=False))] + [(f"noisy_{q}", dict(noise_seed=q)) for q in seeds]:
        s = B.make_star(k, n_cell=cells, **kw)
        rows = [_point(s, "profiled_dof", i) for i in incs]
        out[tag] = {f: [r[f] for r in rows] for f in ("chi2_total", "dof", "tr_a2")}
        print("dof control", tag, out[tag], flush=True)
    out["n_data"] = s["n_epoch"] * B.N_VEL
    return out


def rv_control(k, incs, cells=B.N_CELL):
    """Star ``k``'s profiled solves at two inclinations, each from the flat start and warm-started
    from the other's solution, then with rv held at the regularised (lambda 1) fit's and at the
    truth: chi2_total and the rms rv error of each (multiple minima in rv show as chi2 that a
    warm start lowers)."""
    from dopplermap.search import apply_parameters, pad_precomputed
    from dopplermap.solvers import invert

    s = B.make_star(k, n_cell=cells)
    p0 = s["problem"]
    p = p0.replace(settings=_settings(p0, "profiled"))
    e = p.obs.n_epoch

    def solve(prob, inc, x0=None):
        star, comps = apply_parameters(prob, {"inclination": inc, "vsini": s["vsini"]})
        pt = prob.replace(star=star, components=comps)
        r = invert(pad_precomputed(pt.pre), pt.obs, **pt.invert_kwargs(), x0=x0)
        return r, dict(chi2_total=float(r.chi2 * e * pt.obs.n_vel), iterations=int(r.iterations),
                       rv_rms_err=float(np.sqrt(np.mean((np.asarray(r.rv) - s["rv"]) ** 2))))

    def x(r, rv=None):
        return np.concatenate([r.fssc, r.fssh, r.rv if rv is None else rv, r.amp])

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        flat = {inc: solve(p, inc) for inc in incs}
        a, b = incs
        for inc, other in ((a, b), (b, a)):
            out[f"{inc:g}"] = {"flat": flat[inc][1], f"warm from {other:g}": solve(p, inc, x(flat[other][0]))[1]}
            held = p.replace(settings=p.settings.replace(fit_rv=False))
            reg, row = solve(p0.replace(settings=p0.settings.replace(tol=1e-6)), inc)
            out[f"{inc:g}"]["lambda 1"] = row
            out[f"{inc:g}"]["rv held at lambda 1's"] = solve(held, inc, x(reg))[1]
            out[f"{inc:g}"]["rv held at the truth"] = solve(held, inc, x(reg, s["rv"]))[1]
    out["n_data"] = e * p.obs.n_vel
    return out


# ------------------------------------------------------------------ worker processes (--procs)

WORKER_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
WORKER_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
_WORKER_STARS: dict = {}  # a worker's simulated stars, by (k, cells, noise)


def _worker_env():
    """Single-threaded workers on the CPU: set before a spawned worker imports JAX. JAX_PLATFORMS
    defaults to cpu (float64 solves; an accelerator in the machine is one chip for one process)."""
    import os

    os.environ.update(WORKER_ENV)
    flags = os.environ.get("XLA_FLAGS", "")
    if WORKER_XLA_FLAGS not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {WORKER_XLA_FLAGS}".strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _worker_init(cache_dir):
    _worker_env()
    if cache_dir:  # one persistent compilation cache for all workers: a shape compiled once is loaded after
        from dopplermap.cache import enable_compilation_cache

        enable_compilation_cache(cache_dir)


def _make_star(k, cells, noise):
    """Star ``k`` simulated on ``cells``: ``noise`` True (its own noise draw), False (noise-free)
    or an int ``q`` (another draw of the same noise, seed ``1000 k + q``: ``--noise-seed``)."""
    if isinstance(noise, bool):
        return B.make_star(k, n_cell=cells, noise=noise)
    return B.make_star(k, n_cell=cells, noise_seed=1000 * k + int(noise))


def _worker_point(k, cells, noise, which, inc):
    """:func:`_point` in a worker; the star is simulated once per worker (the last three kept)."""
    key = (k, cells, noise)
    if key not in _WORKER_STARS:
        while len(_WORKER_STARS) >= 3:
            _WORKER_STARS.pop(next(iter(_WORKER_STARS)))
        _WORKER_STARS[key] = _make_star(k, cells, noise)
    return _point(_WORKER_STARS[key], which, inc)


def _truth(k):
    """Star ``k``'s truth and data sizes without simulating it (the parent process reads only these)."""
    inc, vsini, n_epoch, _, snr = B.STARS[k]
    return dict(k=k, inc=inc, vsini=vsini, n_epoch=n_epoch, snr=snr)


def run_parallel(ks, readouts, incs, cells, noise, procs, res, out=None, stop_after=None):
    """The stars ``ks`` x ``readouts`` x ``incs`` as single-point tasks over ``procs`` spawned
    single-threaded workers. A star's row goes into ``res["stars"]`` (and ``out``, rewritten) as
    soon as all its points are in, in the order the stars finish; every finished point is kept
    in ``res["points"]``. After ``stop_after`` seconds the tasks not started are dropped and
    the workers ended, so a run cut off at a time limit keeps every star it finished."""
    import concurrent.futures as cf
    import multiprocessing as mp
    import tempfile

    _worker_env()  # inherited by the spawned workers
    cache_dir = tempfile.mkdtemp(prefix="bench-readout-xla-")
    t0 = time.perf_counter()
    pending = {k: {w: [None] * len(incs) for w in readouts} for k in ks}
    walls = {k: 0.0 for k in ks}
    res.setdefault("points", [])
    ex = cf.ProcessPoolExecutor(max_workers=procs, mp_context=mp.get_context("spawn"),
                                initializer=_worker_init, initargs=(cache_dir,))
    # one point of each star first: each star's programs are compiled once, by one worker, into
    # the shared cache, from which the other workers load them; then star by star, so that the
    # first stars finish first
    tasks = [(k, w, j) for k in ks for w in readouts for j in range(len(incs))]
    first = {(k, readouts[0], len(incs) // 2) for k in ks}
    futs = {ex.submit(_worker_point, k, cells, noise, w, float(incs[j])): (k, w, j)
            for k, w, j in sorted(tasks, key=lambda t: t not in first)}
    left = set(futs)
    try:
        while left:
            timeout = None if stop_after is None else max(stop_after - (time.perf_counter() - t0), 0.0)
            done, left = cf.wait(left, timeout=timeout, return_when=cf.FIRST_COMPLETED)
            if not done:
                print(f"stopped after {time.perf_counter() - t0:.0f} s: {len(left)} points not done", flush=True)
                res["stopped"] = dict(after_s=time.perf_counter() - t0, points_left=len(left))
                break
            for f in done:
                k, which, j = futs[f]
                pt = f.result()
                pending[k][which][j] = pt
                walls[k] += pt["wall_s"]
                res["points"].append(dict(k=k, readout=which, inc=float(incs[j]), **pt))
                if all(p is not None for w in readouts for p in pending[k][w]):
                    row = _star_row(_truth(k), readouts, incs, pending.pop(k), cells, noise, walls[k])
                    row["finished_s"] = time.perf_counter() - t0
                    res["stars"].append(row)
                    _print_star(row, readouts)
            if out:
                write_json(out, res)
    finally:
        _shutdown(ex)
    res["procs"] = procs
    res["wall_s"] = time.perf_counter() - t0
    return res


def _shutdown(ex):
    """Stop a pool at once: queued work cancelled, running workers ended (a run past its limit)."""
    ex.shutdown(wait=False, cancel_futures=True)
    for proc in list((getattr(ex, "_processes", None) or {}).values()):
        if proc.is_alive():
            proc.terminate()


POLISHED = ("profiled", "profiled_dof", "profiled_nu", "polished", "polished_dof", "polished_nu")


def _worker_polish(k, incs, cells, max_sweeps, stop_at):
    return polish_control(k, np.asarray(incs), cells, max_sweeps=max_sweeps, stop_at=stop_at, quiet=True)


def run_polish_parallel(ks, incs, cells, procs, res, out=None, stop_after=None, max_sweeps=4):
    """:func:`polish_control` of each star in its own worker (a star's sweeps are serial): rows
    with the flat-start read-outs (``profiled``, ``_dof``, ``_nu``) and the polished ones
    (``polished``, ``polished_dof``, ``polished_nu``), written as each star finishes. Sweeps stop
    120 s before ``stop_after`` so that every star can still count its points."""
    _worker_env()
    t0, wall0 = time.perf_counter(), time.time()
    stop_at = None if stop_after is None else wall0 + stop_after - 120.0
    # the largest stars (most epochs) first: they set the wall time
    order = sorted(ks, key=lambda k: -B.STARS[k][2])

    def row_of(k, pc):
        s = _truth(k)
        row = dict(k=k, inc=s["inc"], vsini=s["vsini"], n_epoch=s["n_epoch"], snr=s["snr"], n_cell=cells, noise=True,
                   wall_s=pc["wall_s"], n_solves=pc["n_solves"], sweeps=pc["sweeps"],
                   improved_per_sweep=pc["improved_per_sweep"])
        for name in POLISHED:
            tag, base = ("polished", name.replace("polished", "profiled")) if name.startswith("polished") else ("flat", name)
            row[name] = pc[f"{tag}_{base}"]
        row["points"] = {"flat": pc["flat_points"], "polished": pc["polished_points"]}
        return row

    jobs = {k: (_worker_polish, (k, [float(v) for v in incs], cells, max_sweeps, stop_at)) for k in order}
    return _star_pool(jobs, row_of, POLISHED, procs, res, out, stop_after, t0)


def _star_pool(jobs, row_of, shown, procs, res, out, stop_after, t0):
    """Each star's ``jobs[k] = (fn, args)`` in ``procs`` spawned single-threaded workers, a star a
    worker; ``row_of(k, result)`` is its row, written to ``out`` as it finishes; after
    ``stop_after`` seconds the stars not finished are dropped."""
    import concurrent.futures as cf
    import multiprocessing as mp
    import tempfile

    ex = cf.ProcessPoolExecutor(max_workers=procs, mp_context=mp.get_context("spawn"), initializer=_worker_init,
                                initargs=(tempfile.mkdtemp(prefix="bench-readout-xla-"),))
    futs = {ex.submit(fn, *args): k for k, (fn, args) in jobs.items()}
    try:
        for f in cf.as_completed(futs, timeout=stop_after):
            row = dict(row_of(futs[f], f.result()), finished_s=time.perf_counter() - t0)
            res["stars"].append(row)
            _print_star(row, shown)
            if out:
                write_json(out, res)
    except cf.TimeoutError:
        res["stopped"] = dict(after_s=time.perf_counter() - t0)
        print(f"stopped after {time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        _shutdown(ex)
    res["procs"] = procs
    res["wall_s"] = time.perf_counter() - t0
    return res


def _star_row(s, readouts, incs, points, cells, noise, wall_s):
    """A star's row: each read-out's profile (``points[which]``), and for ``_dof`` read-outs the
    same solves read without the correction too."""
    row = dict(k=s["k"], inc=s["inc"], vsini=s["vsini"], n_epoch=s["n_epoch"], snr=s["snr"], n_cell=cells,
               noise=noise, wall_s=wall_s)
    for which in readouts:
        w = sum(p["wall_s"] for p in points[which])
        if which.endswith("_dof"):  # the same solves read three ways
            base = which.removesuffix("_dof")
            for name in (base, which, base + "_nu"):
                row[name] = _profile_row(s, name, incs, points[which], w)
        else:
            row[which] = _profile_row(s, which, incs, points[which], w)
    return row


def _print_star(row, readouts):
    for which in (readouts if readouts == POLISHED else _read_names(readouts)):
        r = row[which]
        print(f"star {row['k']} (i={row['inc']:.0f}) {which:12s}: {r['best']:6.2f} [{r['lo68']:.2f}, {r['hi68']:.2f}] "
              f"95% [{r['lo95']:.2f}, {r['hi95']:.2f}]  {r['wall_s']:.0f}s, {r['unconverged']} unconverged", flush=True)


def _read_names(readouts):
    """The read-outs a run reports: each ``_dof`` one also read without its correction and with ``_nu``'s."""
    return [w for r in readouts for w in ((r.removesuffix("_dof"), r, r.removesuffix("_dof") + "_nu")
                                            if r.endswith("_dof") else (r,))]


def polish_control(k, incs, cells=B.N_CELL, which="profiled_dof", max_sweeps=6, stop_at=None, quiet=False):
    """Star ``k``'s profile of ``which`` from the flat start at every inclination, then swept up
    and down the inclinations with each point also started from its neighbour's solution, the
    lower loss kept, until a pair of sweeps improves no point (at most ``max_sweeps`` sweeps, none
    begun after the wall-clock time ``stop_at``): whether the flat start's local minima (in rv
    and the map's normalisation) move the read-out. Both profiles read as the run's read-outs are."""
    from dopplermap.search import apply_parameters, influence, pad_precomputed
    from dopplermap.solvers import invert

    s = B.make_star(k, n_cell=cells)
    p = s["problem"]
    p = p.replace(settings=_settings(p, which))
    points = []
    for inc in incs:
        star, comps = apply_parameters(p, {"inclination": float(inc), "vsini": s["vsini"]})
        points.append(p.replace(star=star, components=comps))

    def solve(j, x0=None):
        pt = points[j]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return invert(pad_precomputed(pt.pre), pt.obs, **pt.invert_kwargs(), x0=x0)

    def x(r):
        return np.concatenate([r.fssc, r.fssh, r.rv, r.amp])

    def counted(j, r):
        eff = influence(points[j], r)
        n = points[j].obs.n_epoch * points[j].obs.n_vel
        return dict(chi2_total=float(r.chi2) * n, dof=float(eff.p_eff), tr_a2=float(eff.tr_a2), loss=float(r.loss),
                    iterations=int(r.iterations), success=bool(r.success), maxiter=p.settings.maxiter,
                    rv_rms_err=float(np.sqrt(np.mean((np.asarray(r.rv) - s["rv"]) ** 2))), lmbd=p.settings.lmbd,
                    tol=p.settings.tol, wall_s=0.0)

    t0 = time.perf_counter()
    sols = [solve(j) for j in range(len(incs))]
    flat_sols = list(sols)
    flat = [counted(j, r) for j, r in enumerate(sols)]
    n_solves, sweeps, moved, improved = len(incs), 0, True, []
    while moved and sweeps < max_sweeps:  # pairs of sweeps (up, then down) until a pair improves no point
        moved = False
        for step in (1, -1):
            if sweeps >= max_sweeps or (stop_at is not None and time.time() > stop_at):
                break
            n_better = 0
            for j in range(1, len(incs)) if step == 1 else range(len(incs) - 2, -1, -1):
                r = solve(j, x(sols[j - step]))
                n_solves += 1
                if float(r.loss) < float(sols[j].loss) - 1e-12:
                    sols[j], moved, n_better = r, True, n_better + 1
            sweeps += 1
            improved.append(n_better)
    polished = [flat[j] if sols[j] is flat_sols[j] else counted(j, r) for j, r in enumerate(sols)]
    out = {"n_solves": n_solves, "sweeps": sweeps, "improved_per_sweep": improved, "wall_s": time.perf_counter() - t0,
           "incs": list(map(float, incs))}
    for tag, pts in (("flat", flat), ("polished", polished)):
        for name in ("profiled", "profiled_dof", "profiled_nu"):
            out[f"{tag}_{name}"] = _profile_row(s, name, incs, pts, 0.0)
        out[f"{tag}_points"] = pts
    for tag in ("flat", "polished") if not quiet else ():
        for name in ("profiled", "profiled_dof", "profiled_nu"):
            r = out[f"{tag}_{name}"]
            print(f"star {k} (i={s['inc']:.0f}) {tag:8s} {name:12s}: {r['best']:6.2f} [{r['lo68']:.2f}, {r['hi68']:.2f}] "
                  f"95% [{r['lo95']:.2f}, {r['hi95']:.2f}]", flush=True)
    print(f"star {k} chi2 flat - polished:", np.round(np.array([f["chi2_total"] - q["chi2_total"] for f, q in zip(flat, polished, strict=True)]), 2),
          flush=True)
    return out


def restart_control(k, incs, cells=B.N_CELL, rounds=4):
    """Star ``k``'s profiled solves at ``incs``, each restarted from its own solution while it
    stops unconverged (the Gauss-Newton cap, ``NEWTON_MAXITER``): how far from the minimum a
    capped solve stops (chi2_total, tr A and rv error of each round)."""
    from dopplermap.search import apply_parameters, influence, pad_precomputed
    from dopplermap.solvers import invert

    s = B.make_star(k, n_cell=cells)
    p = s["problem"]
    p = p.replace(settings=_settings(p, "profiled_dof"))
    out = {}
    for inc in incs:
        star, comps = apply_parameters(p, {"inclination": float(inc), "vsini": s["vsini"]})
        pt = p.replace(star=star, components=comps)
        x0, rows = None, []
        for _ in range(rounds):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = invert(pad_precomputed(pt.pre), pt.obs, **pt.invert_kwargs(), x0=x0)
            rows.append(dict(iterations=int(r.iterations), success=bool(r.success),
                             chi2_total=float(r.chi2) * pt.obs.n_epoch * pt.obs.n_vel,
                             dof=float(influence(pt, r).p_eff),
                             rv_rms_err=float(np.sqrt(np.mean((np.asarray(r.rv) - s["rv"]) ** 2)))))
            print("restart", k, inc, rows[-1], flush=True)
            if r.success:
                break
            x0 = np.concatenate([r.fssc, r.fssh, r.rv, r.amp])
        out[f"{float(inc):g}"] = rows
    return out


# ------------------------------------------------------------------ the support refit (--support)

SUPPORT_ROUNDS = 4
"""``support_iter``: most rounds of support taken again at the refit's best node."""

SUPPORT_VARIANTS = ("support", "support_d0", "support_t0.1", "support_d10", "support_union", "support_truth")
"""The support refits a ``--support`` run reads beside ``old`` (:func:`support_spec`)."""


def support_spec(name):
    """A support read-out's settings from its name: ``support`` is
    :data:`dopplermap.search.SUPPORT_READOUT` (threshold 0.05, grown by 5 deg, from the
    regularised map at the best node, lambda 0); ``_t<fill>``, ``_d<deg>`` and ``_l<lambda>``
    change the threshold, the growth and the refit's lambda; ``_union``: the support of the
    regularised maps at every node together; ``_iter``: the support taken again from the
    regularised map at the refit's best node while that node moves (at most
    :data:`SUPPORT_ROUNDS` rounds); ``_truth``: the true spotted cells (fill > 0.01, not grown),
    the oracle control."""
    from dopplermap.search import SUPPORT_READOUT

    spec = dict(threshold=SUPPORT_READOUT.threshold, dilate_deg=SUPPORT_READOUT.dilate_deg, lmbd=SUPPORT_READOUT.lmbd,
                source="best")
    for part in name.split("_")[1:]:
        if part in ("union", "truth", "iter"):
            spec["source"] = part
        elif part[0] == "t":
            spec["threshold"] = float(part[1:])
        elif part[0] == "d":
            spec["dilate_deg"] = float(part[1:])
        elif part[0] == "l":
            spec["lmbd"] = float(part[1:])
        else:
            raise SystemExit(f"--support: unknown part {part!r} of read-out {name!r}")
    if spec["source"] == "truth":
        spec.update(threshold=0.01, dilate_deg=0.0)
    return spec


def support_star(k, incs, cells=B.N_CELL, variants=SUPPORT_VARIANTS, noise=True, polish=False, star=None, keep=None):
    """Star ``k``: the old read-out's solves (lambda 1, L-BFGS-B, tol 1e-5, each from the flat
    start) at every inclination, then each support read-out of ``variants``
    (:func:`support_spec`) refitted at every inclination by
    :func:`dopplermap.search.solve_on_support`, started from the regularised solve at that
    inclination. The star's row: ``old`` and each variant read on ``chi2_total``. ``polish``:
    each variant's refits then swept up and down the inclinations, each point also started from
    its neighbour's refit, the lower chi2 kept (``<variant>_polished``; ``chi2_drop``: how far
    each point fell): whether the refits from the regularised starts end in local minima.
    ``star``: the star to read (a :func:`bench_calibration.make_star` dict, default star ``k``
    simulated); ``keep``: a dict that receives each variant's support masks and refits
    (``keep[name] = (sc, sh, fits)``) and the problem (``keep["problem"]``)."""
    from dopplermap.search import SupportReadout, apply_parameters, pad_precomputed, solve_on_support, support_mask
    from dopplermap.solvers import invert

    s = _make_star(k, cells, noise) if star is None else star
    p = s["problem"]
    p = p.replace(settings=_settings(p, "old"))
    if keep is not None:
        keep["problem"] = p
    params = [{"inclination": float(inc), "vsini": s["vsini"]} for inc in incs]
    t0 = time.perf_counter()
    regs, old = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for q in params:
            t1 = time.perf_counter()
            star, comps = apply_parameters(p, q)
            pt = p.replace(star=star, components=comps)
            r = invert(pad_precomputed(pt.pre), pt.obs, **pt.invert_kwargs())
            regs.append(r)
            old.append(_support_point(p, r, time.perf_counter() - t1))
    n_data = p.obs.n_epoch * p.obs.n_vel
    best = int(np.argmin([r.chi2 for r in regs]))
    row = dict(k=k, inc=s["inc"], vsini=s["vsini"], n_epoch=s["n_epoch"], snr=s["snr"], n_cell=cells, noise=noise,
               best_node=float(incs[best]), n_data=n_data)
    row["old"] = _profile_row(s, "old", incs, old, sum(o["wall_s"] for o in old))
    for name in variants:
        spec = support_spec(name)
        if spec["source"] == "truth":
            fc, fh = s["truth_fssc"], s["truth_fssh"]
        elif spec["source"] == "union":
            fc, fh = np.max([r.fssc for r in regs], axis=0), np.max([r.fssh for r in regs], axis=0)
        else:
            fc, fh = regs[best].fssc, regs[best].fssh
        readout = SupportReadout(threshold=spec["threshold"], dilate_deg=spec["dilate_deg"], lmbd=spec["lmbd"])
        at, rounds = best, []
        while True:
            sc = support_mask(p.grid, fc, spec["threshold"], spec["dilate_deg"])
            sh = support_mask(p.grid, fh, spec["threshold"], spec["dilate_deg"])
            pts, fits = [], []
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for q, r0 in zip(params, regs, strict=True):
                    t1 = time.perf_counter()
                    x0 = np.concatenate([r0.fssc, r0.fssh, r0.rv, r0.amp])
                    r = solve_on_support(p, q, sc, sh, x0, readout=readout)
                    fits.append(r)
                    pts.append(_support_point(p, r, time.perf_counter() - t1))
            rounds.append(float(incs[at]))
            moved = int(np.argmin([r.chi2 for r in fits]))
            if spec["source"] != "iter" or moved == at or len(rounds) >= SUPPORT_ROUNDS or float(incs[moved]) in rounds:
                break
            at, fc, fh = moved, regs[moved].fssc, regs[moved].fssh
            if polish:
                best_fits = list(fits)
                for step in (1, -1):
                    for j in range(1, len(params)) if step == 1 else range(len(params) - 2, -1, -1):
                        f0 = best_fits[j - step]
                        r = solve_on_support(p, params[j], sc, sh, np.concatenate([f0.fssc, f0.fssh, f0.rv, f0.amp]),
                                             readout=readout)
                        if r.chi2 < best_fits[j].chi2:
                            best_fits[j] = r
                polished = [_support_point(p, r, 0.0) for r in best_fits]
                row[name + "_polished"] = dict(_profile_row(s, name, incs, polished, 0.0), chi2_drop=[
                    a["chi2_total"] - b["chi2_total"] for a, b in zip(pts, polished, strict=True)])
                print(f"star {k} {name} polished: chi2 drop {np.round(row[name + '_polished']['chi2_drop'], 3)}; "
                      f"best {row[name + '_polished']['best']:.2f}", flush=True)
        if keep is not None:
            keep[name] = (sc, sh, fits)
        row[name] = dict(_profile_row(s, name, incs, pts, sum(o["wall_s"] for o in pts)), support_nodes=rounds,
                         support_cool=int(sc.sum()),
                         support_hot=int(sh.sum()), **{f"spec_{a}": b for a, b in spec.items()})
        print(f"star {k} (i={s['inc']:.0f}) {name:16s}: {row[name]['best']:6.2f} [{row[name]['lo68']:.2f}, "
              f"{row[name]['hi68']:.2f}]  cells {int(sc.sum())}+{int(sh.sum())}, {row[name]['wall_s']:.0f}s, "
              f"{row[name]['unconverged']} unconverged", flush=True)
    row["wall_s"] = time.perf_counter() - t0
    return row


def _support_point(p, r, wall_s):
    """A solve's fields as :func:`_profile_row` reads them (no influence matrix counted)."""
    return dict(chi2_total=float(r.chi2) * p.obs.n_epoch * p.obs.n_vel, dof=math.nan, tr_a2=math.nan,
                iterations=int(r.iterations), success=bool(r.success), lmbd=float(r.lmbd), tol=math.nan, wall_s=wall_s)


def _worker_support(k, incs, cells, variants, noise, polish=False):
    return support_star(k, np.asarray(incs), cells, variants, noise, polish)


def run_support(ks, incs, cells, variants, procs, res, out=None, stop_after=None, noise=True, polish=False):
    """:func:`support_star` of each star, in ``procs`` spawned single-threaded workers (a star a
    worker, the most epochs first) or in this process (``procs`` 1); each star's row is written to
    ``out`` as it finishes; after ``stop_after`` seconds the stars not finished are dropped."""
    t0 = time.perf_counter()
    order = sorted(ks, key=lambda k: -B.STARS[k][2])
    if procs <= 1:
        for k in order:
            res["stars"].append(support_star(k, incs, cells, variants, noise, polish))
            _print_star(res["stars"][-1], ("old",) + tuple(variants))
            if out:
                write_json(out, res)
        return res
    _worker_env()
    jobs = {k: (_worker_support, (k, [float(v) for v in incs], cells, tuple(variants), noise, polish)) for k in order}
    return _star_pool(jobs, lambda k, row: row, ("old",) + tuple(variants), procs, res, out, stop_after, t0)


def debias_star(k, incs, cells=B.N_CELL, n_sims=6, noise=True, name="support", at="i_hat"):
    """A parametric-bootstrap bias correction of star ``k``'s support read-out ``name``: the
    read-out on the star's data gives ``i_hat``; the map is refitted on the same support at
    ``i_hat`` (:func:`dopplermap.search.solve_on_support`, started from the refit at the node
    nearest it) and its fitted profiles (dopplermap's forward model) plus Gaussian noise with the
    star's errors (seeds ``1000 k + j``) make ``n_sims`` data sets, each read by the same full
    read-out (:func:`support_star`: regularised pass, support, refits, parabola): ``i_k``. Bias
    ``b = mean(i_k) - i_hat``; corrected ``i_c = i_hat - b``, with ``sd = sd(i_k)`` as its spread.
    Controls (``at``): ``"truth"``, the same simulations from the refit at the true inclination
    (the read-out's bias where the star is, which the correction at ``i_hat`` stands in for);
    ``"draws"``, the benchmark's own simulator at the truth with other noise draws (the read-out's
    real sampling distribution); ``b`` is then ``mean(i_k)`` minus the centre."""
    import dopplermap as dm
    from dopplermap.search import SupportReadout, solve_on_support

    t0 = time.perf_counter()
    s = _make_star(k, cells, noise)
    keep = {}
    row = support_star(k, incs, cells, (name,), noise, star=s, keep=keep)
    p, (sc, sh, fits) = keep["problem"], keep[name]
    spec = support_spec(name)
    i_hat = float(row[name]["best"])
    centre = i_hat if at == "i_hat" else float(s["inc"])
    j = int(np.argmin(np.abs(np.asarray(incs) - centre)))
    f0 = fits[j]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = solve_on_support(p, {"inclination": centre, "vsini": s["vsini"]}, sc, sh,
                               np.concatenate([f0.fssc, f0.fssh, f0.rv, f0.amp]),
                               readout=SupportReadout(threshold=spec["threshold"], dilate_deg=spec["dilate_deg"],
                                                      lmbd=spec["lmbd"]))
    obs = p.obs
    model, err = np.asarray(fit.model), np.asarray(obs.err)
    sims = []
    for q in range(n_sims):
        rng = np.random.default_rng(1000 * k + q)
        sim_obs = dm.Observations.create(np.asarray(obs.times), np.asarray(obs.vels),
                                         model + rng.normal(size=model.shape) * err, err,
                                         source=f"calibration star {k}, bootstrap {q}")
        sim = dict(s, problem=s["problem"].replace(obs=sim_obs)) if at != "draws" else \
            B.make_star(k, n_cell=cells, noise_seed=1000 * k + q)
        r = support_star(k, incs, cells, (name,), noise, star=sim)
        sims.append(dict(best=float(r[name]["best"]), lo68=float(r[name]["lo68"]), hi68=float(r[name]["hi68"]),
                         old_best=float(r["old"]["best"]), unconverged=int(r[name]["unconverged"])))
        print(f"star {k} bootstrap {q}: {sims[-1]['best']:.2f} (from {at} {centre:.2f})", flush=True)
    i_k = np.array([x["best"] for x in sims])
    b = float(np.mean(i_k) - centre)
    sd = float(np.std(i_k, ddof=1)) if n_sims > 1 else math.nan
    i_c = i_hat - b
    row["debias"] = dict(at=at, centre=centre, i_hat=i_hat, i_k=i_k.tolist(), bias=b, sd=sd, i_c=i_c, err_hat=i_hat - s["inc"],
                         err_c=i_c - s["inc"], in_c_sd=bool(abs(i_c - s["inc"]) <= sd),
                         in_c_2sd=bool(abs(i_c - s["inc"]) <= 2 * sd), fit_chi2=float(fit.chi2),
                         fit_success=bool(fit.success), node=float(incs[j]), n_sims=n_sims, sims=sims,
                         seeds=[1000 * k + q for q in range(n_sims)], wall_s=time.perf_counter() - t0)
    print(f"star {k} (i={s['inc']:.0f}) debias: i_hat {i_hat:.2f}, i_k {np.round(i_k, 1)}, b {b:+.2f}, "
          f"i_c {i_c:.2f} +- {sd:.2f}, {row['debias']['wall_s']:.0f}s", flush=True)
    row["wall_s"] = time.perf_counter() - t0
    return row


def _worker_debias(k, incs, cells, n_sims, noise, at):
    return debias_star(k, np.asarray(incs), cells, n_sims, noise, at=at)


def run_debias(ks, incs, cells, n_sims, procs, res, out=None, stop_after=None, noise=True, at="i_hat"):
    """:func:`debias_star` of each star, a star a worker (in the order of ``ks``) or in this
    process (``procs`` 1), each written to ``out`` as it finishes; after ``stop_after`` seconds
    the stars not finished are dropped."""
    t0 = time.perf_counter()
    res["n_sims"], res["debias_at"] = n_sims, at
    if procs <= 1:
        for k in ks:
            res["stars"].append(debias_star(k, incs, cells, n_sims, noise, at=at))
            if out:
                write_json(out, res)
        return res
    _worker_env()
    jobs = {k: (_worker_debias, (k, [float(v) for v in incs], cells, n_sims, noise, at)) for k in ks}
    return _star_pool(jobs, lambda k, row: row, ("old", "support"), procs, res, out, stop_after, t0)


def debias_markdown(rows):
    """The per-star table and the summary of ``i_hat`` and ``i_c`` against the truth."""
    out = ["| star | truth | i_hat | i_k (bootstrap) | b | i_c +- sd | i_c - truth |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        d = r["debias"]
        out.append(f"| {r['k']} | {r['inc']:g} | {d['i_hat']:.1f} | {', '.join(f'{v:.1f}' for v in d['i_k'])} | "
                   f"{d['bias']:+.1f} | {d['i_c']:.1f} +- {d['sd']:.1f} | {d['err_c']:+.1f} |")
    eh = np.array([r["debias"]["err_hat"] for r in rows])
    ec = np.array([r["debias"]["err_c"] for r in rows])
    n = len(rows)
    out += ["", "| estimate | stars | mean abs error | bias | truth within 1 sd | within 2 sd |", "|---|---|---|---|---|---|",
            f"| i_hat (support) | {n} | {np.mean(np.abs(eh)):.1f} deg | {np.mean(eh):+.1f} deg | | |",
            f"| i_c (debiased) | {n} | {np.mean(np.abs(ec)):.1f} deg | {np.mean(ec):+.1f} deg | "
            f"{sum(r['debias']['in_c_sd'] for r in rows)}/{n} | {sum(r['debias']['in_c_2sd'] for r in rows)}/{n} |"]
    return "\n".join(out)


def summary(rows, which):
    err = np.array([r[which]["err"] for r in rows])
    return dict(n_stars=len(rows), mean_abs_err=float(np.mean(np.abs(err))), bias=float(np.mean(err)),
                cover68=float(np.mean([r[which]["in68"] for r in rows])),
                cover95=float(np.mean([r[which]["in95"] for r in rows])),
                mean_width68=float(np.mean([r[which]["hi68"] - r[which]["lo68"] for r in rows])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stars", default=",".join(map(str, B.QUICK)))
    ap.add_argument("--jitter", type=int, default=None, help="star K: two solvers' chi2 at its truth")
    ap.add_argument("--tols", default=None, help="with --jitter: also every solver at these tols")
    ap.add_argument("--sharp", action="store_true", help="only the old read-out on the sharp limb")
    ap.add_argument("--joint", default=None, help="stars K,...: joint_fit with the smooth and the sharp limb")
    ap.add_argument("--readouts", default=",".join(READOUTS), help="which read-outs to profile")
    ap.add_argument("--cells", type=int, default=B.N_CELL, help="the inversion grid's cells (the simulation is fixed)")
    ap.add_argument("--noise-free", action="store_true", help="the simulation without its noise (same errors)")
    ap.add_argument("--noise-seed", type=int, default=None,
                    help="another noise draw of each star (seed 1000 k + Q) instead of its own")
    ap.add_argument("--incs", default=None, help="inclinations to profile over (default INC_GRID)")
    ap.add_argument("--model-error", default=None, help="stars K,...: the grid's discretisation error in chi2")
    ap.add_argument("--dof-control", default=None, help="star K: noisy and noise-free chi2 and dof at --incs")
    ap.add_argument("--restart-control", default=None, help="star K: capped solves at --incs restarted from their solution")
    ap.add_argument("--noise-seeds", default=None, help="with --dof-control: also these noise draws")
    ap.add_argument("--rv-control", default=None, help="star K: flat, warm and rv-held solves at two of --incs")
    ap.add_argument("--polish-control", default=None,
                    help="stars K,...: the profile from flat starts against neighbour warm starts (lowest loss)")
    ap.add_argument("--polish", action="store_true",
                    help="with --procs: each star's profile from flat starts and polished (--polish-control), a star a worker")
    ap.add_argument("--sweeps", type=int, default=4, help="with --polish: at most this many sweeps")
    ap.add_argument("--support", default=None,
                    help="read-outs support[_t<fill>][_d<deg>][_l<lambda>][_union|_truth],...: the support refit beside old "
                         "(\"default\": SUPPORT_VARIANTS), a star a worker with --procs")
    ap.add_argument("--support-polish", action="store_true",
                    help="with --support: each refit profile also swept from its neighbours' refits (local minima)")
    ap.add_argument("--debias", type=int, default=None,
                    help="K: the support read-out with a parametric-bootstrap bias correction from K simulated sets, "
                         "a star a worker with --procs (stars in the order given)")
    ap.add_argument("--debias-at", default="i_hat", choices=("i_hat", "truth", "draws"),
                    help="with --debias: simulate at i_hat (the correction), at the truth, or the benchmark's "
                         "own noise draws at the truth (controls)")
    ap.add_argument("--procs", type=int, default=1, help="spread stars x inclinations over N worker processes")
    ap.add_argument("--stop-after", type=float, default=None,
                    help="with --procs: stop after this many seconds, keeping the stars finished")
    ap.add_argument("--tables", nargs="+", default=None, help="result files: print their merged tables and stop")
    ap.add_argument("--every", type=int, default=1, help="with --tables: read every K-th inclination of each profile")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    noise = (not args.noise_free) if args.noise_seed is None else args.noise_seed
    if args.tables:
        return tables(args.tables, args.readouts.split(",") if args.readouts != ",".join(READOUTS) else None,
                      args.every)
    readouts = SHARP if args.sharp else tuple(args.readouts.split(","))
    incs = B.INC_GRID if args.incs is None else np.array([float(x) for x in args.incs.split(",")])
    import os

    res = {"stars": [], "machine": B.platform.platform(), "cpu_count": os.cpu_count(),
           "loadavg_start": os.getloadavg()[0], "n_cell": args.cells, "incs": [float(v) for v in incs],
           "noise": noise}
    for k in [int(x) for x in (args.model_error or "").split(",") if x]:
        res.setdefault("model_error", {})[k] = model_error(k)
        print("model error chi2", k, res["model_error"][k], flush=True)
    if args.dof_control is not None:
        res["dof_control"] = dof_control(int(args.dof_control), incs, args.cells,
                                         [int(q) for q in (args.noise_seeds or "").split(",") if q])
        print("dof control", res["dof_control"], flush=True)
    if args.restart_control is not None:
        res["restart_control"] = restart_control(int(args.restart_control), incs, args.cells)
    if args.rv_control is not None:
        res["rv_control"] = rv_control(int(args.rv_control), [float(v) for v in incs[:2]], args.cells)
        print("rv control", res["rv_control"], flush=True)
    for k in [int(x) for x in (args.polish_control or "").split(",") if x]:
        res.setdefault("polish_control", {})[k] = polish_control(k, incs, args.cells)
        if args.out:
            write_json(args.out, res)
    if args.jitter is not None:
        s = B.make_star(args.jitter)
        res["jitter"] = {w: jitter(s, w) for w in READOUTS}
        print("jitter", res["jitter"], flush=True)
        if args.tols:
            res["jitter_tols"] = jitter_tols(s, [float(t) for t in args.tols.split(",")])
    for k in [int(x) for x in (args.joint or "").split(",") if x]:
        s = B.make_star(k)
        res.setdefault("joint", {})[k] = {limb: joint(s, limb) for limb in ("smooth", "sharp")}
        print("joint", k, res["joint"][k], flush=True)
    ks = [int(x) for x in args.stars.split(",") if x]
    if args.polish:
        run_polish_parallel(ks, incs, args.cells, args.procs, res, args.out, args.stop_after, args.sweeps)
        readouts = POLISHED
        ks = []
    if args.debias:
        run_debias(ks, incs, args.cells, args.debias, args.procs, res, args.out, args.stop_after, noise,
                   args.debias_at)
        rows = sorted(res["stars"], key=lambda r: r["k"])
        if rows:
            print(debias_markdown(rows), flush=True)
            eh = np.array([r["debias"]["err_hat"] for r in rows])
            ec = np.array([r["debias"]["err_c"] for r in rows])
            res["summary_debias"] = dict(n_stars=len(rows), mae_hat=float(np.mean(np.abs(eh))), bias_hat=float(np.mean(eh)),
                                         mae_c=float(np.mean(np.abs(ec))), bias_c=float(np.mean(ec)),
                                         cover_sd=float(np.mean([r["debias"]["in_c_sd"] for r in rows])),
                                         cover_2sd=float(np.mean([r["debias"]["in_c_2sd"] for r in rows])))
        if args.out:
            write_json(args.out, res)
        return
    if args.support:
        variants = SUPPORT_VARIANTS if args.support == "default" else tuple(args.support.split(","))
        for v in variants:
            support_spec(v)
        run_support(ks, incs, args.cells, variants, args.procs, res, args.out, args.stop_after, noise,
                    args.support_polish)
        readouts = ("old",) + variants
        ks = []
    if args.procs > 1 and ks:
        run_parallel(ks, readouts, incs, args.cells, noise, args.procs, res, args.out, args.stop_after)
    for k in ks if args.procs <= 1 else ():
        s = _make_star(k, args.cells, noise)
        t0 = time.perf_counter()
        points = {which: [_point(s, which, inc) for inc in incs] for which in readouts}
        row = _star_row(s, readouts, incs, points, args.cells, noise, time.perf_counter() - t0)
        _print_star(row, readouts)
        res["stars"].append(row)
        if args.out:
            write_json(args.out, res)
    finish(res, readouts)
    if args.out:
        write_json(args.out, res)


def finish(res, readouts):
    """Each read-out's summary over the finished stars (``summary_<read-out>``), printed as the
    tables of benchmarks/RESULTS.md."""
    rows = sorted(res["stars"], key=lambda r: r["k"])
    if not rows:
        return
    names = readouts if readouts == POLISHED else _read_names(readouts)
    for which in names:
        res[f"summary_{which}"] = summary(rows, which)
    print(markdown(rows, names), flush=True)


def markdown(rows, names):
    """The per-star table (best [68 %] (95 %)) and the summary table, as in benchmarks/RESULTS.md."""
    def cell(r):
        return f"{r['best']:.1f} [{r['lo68']:.1f}, {r['hi68']:.1f}] ({r['lo95']:.1f}-{r['hi95']:.1f})"

    out = ["| star | truth | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    out += [f"| {r['k']} | {r['inc']:g} | " + " | ".join(cell(r[w]) for w in names) + " |" for r in rows]
    out += ["", "| read-out | stars | mean abs error | bias | 68 % coverage | 95 % coverage | mean 68 % width "
            "| solves unconverged |", "|---|---|---|---|---|---|---|---|"]
    for w in names:
        s = summary(rows, w)
        n = s["n_stars"]
        out.append(f"| {w} | {n} | {s['mean_abs_err']:.1f} deg | {s['bias']:+.1f} deg | {round(s['cover68'] * n)}/{n} "
                   f"| {round(s['cover95'] * n)}/{n} | {s['mean_width68']:.1f} deg | {sum(r[w].get('unconverged', 0) for r in rows)} |")
    return "\n".join(out)


def tables(paths, readouts=None, every=1):
    """Merge result files (stars of a split run; a star in several files: the last one's) and
    print the tables. ``every``: each profile read again at every ``every``-th of the run's
    inclinations from the first (``--every 2``: a 5-deg run read on 10-deg nodes)."""
    import json

    stars = {}
    for path in paths:
        with open(path) as fh:
            res = json.load(fh)
        incs = np.asarray(res["incs"])
        for row in res["stars"]:
            if every > 1:
                row = dict(row)
                for w, r in list(row.items()):
                    if isinstance(r, dict) and "profile" in r:
                        row[w] = dict(r, **read(incs[::every], np.asarray(r["profile"])[::every], row["inc"]))
            stars[row["k"]] = row
    rows = list(stars.values())
    names = readouts or [w for w in rows[0] if isinstance(rows[0][w], dict) and "best" in rows[0][w]
                         and all(w in r for r in rows)]
    print(markdown(sorted(rows, key=lambda r: r["k"]), names))


if __name__ == "__main__":
    main()
