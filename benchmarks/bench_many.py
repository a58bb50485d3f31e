"""Many solves of one shape on CPU: a 12-value lambda sweep and a 20-refit bootstrap, each in
every mode of :func:`dopplermap.solvers.solve_many`, in one process (same load for all).

The problem is the demo star of ``dopplermap lambda`` (400 cells, 30 epochs, 24 velocities)
or, with ``--n-cell/--n-epoch``, a larger one. The sweep runs at the command's tol 1e-7 with
the problem's solver (L-BFGS-B, as ``dopplermap lambda`` on the demo star) and with Newton;
the bootstrap at the CLI's tol 1e-6 from the map at lambda 1. Each mode runs twice: the first
time with its compile, the second reusing it. ``bootstrap 8-member vmap calls`` is the
previous default (resamples solved 8 at a time, the last call padded).

    PYTHONPATH=src python benchmarks/bench_many.py [--n-cell 2500 --n-epoch 60]

``--runs 3`` instead times the sweep as repeated runs of a user's process would see it: each
run a fresh process with the persistent compile cache on (a fresh temporary folder for each
solver setting, so run 1 is a first run on an empty cache), solver ``"lbfgsb"`` (the demo
star's solver before) against ``"auto"``; the sweep's own seconds (wall and CPU: on a
shared machine the CPU seconds move less with the load), its compile seconds, and the
process's. ``--src A B ...`` runs each setting's processes with ``PYTHONPATH`` at each of
these source folders in turn (e.g. a base version's and this tree's), alternated run by run,
each with its own fresh cache: a before/after comparison under one load. ``--solvers``
picks the settings (default ``lbfgsb auto``).

    PYTHONPATH=src python benchmarks/bench_many.py --runs 3
    python benchmarks/bench_many.py --runs 3 --src /tmp/base/src src --solvers auto

``--perturbed N`` runs the 12-value Newton sweep (tol 1e-7) in one process from the flat
start and from N starts that differ from it in the last bits (each value times ``1 + k
1e-15``, k = 1..N): the sweep's iterations and losses at the small lambdas move with
rounding alone, so a change that rounds differently is judged against this spread.

    PYTHONPATH=src python benchmarks/bench_many.py --perturbed 7

``--calibration VALUES SIM [TRIALS [OVERSAMPLE [REF]]]`` times ``calibrate_parameter`` as in
``grid --calibrate SIM`` over inclinations 40, 42.5, ... (the first VALUES of 13 values 40-70)
on a 20-epoch, 2500-cell star (the demo star at that size, tol 1e-6 as ``grid``), TRIALS of
the values as trials (default all), data sets simulated on OVERSAMPLE x the cells (default 1):
once with every solve from the flat start and once warm-started (each data set from its
solution at the value before), on the same data sets, in this process; it prints both
calibrations, their Monte Carlo errors, the per-data-set differences and both extrapolated
to the 13 x (1 + 13 x 16) + 13 + 13 solves of the full ``grid --calibrate 16``; with REF, the
profiles of the first REF data sets solved to tol 1e-9 as well (which start stops nearer the
minimum).

    PYTHONPATH=src python benchmarks/bench_many.py --calibration 13 4 3
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

import dopplermap as dm
from dopplermap import search
from dopplermap import uncertainty as U
from dopplermap.app.search import load_problem


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def old_bootstrap(problem, best, n_boot, seed=0, chunk=8):
    """The previous default bootstrap: error sets solved 8 at a time (vmap, the last call padded)."""
    pre, obs, st = problem.pre, problem.obs, problem.settings
    rng = np.random.default_rng(seed)
    n_e = pre.n_epoch
    draws = [rng.integers(0, n_e, n_e) for _ in range(n_boot)]
    x0 = np.concatenate([best.fssc, best.fssh, best.rv, best.amp])
    err = np.asarray(obs.err, float)
    out = []
    for s in range(0, n_boot, chunk):
        idx = draws[s:s + chunk]
        n = len(idx)
        idx = idx + [idx[0]] * (chunk - n)
        w = np.stack([np.bincount(i, minlength=n_e) for i in idx]).astype(float)
        with np.errstate(divide="ignore"):
            err_b = err[None] / np.sqrt(w)[:, :, None]
        rs = dm.invert_batch(pre, obs, lmbd=best.lmbd, flux=np.broadcast_to(np.asarray(obs.flux), err_b.shape),
                             err=err_b, regulariser=best.regulariser, x0=x0, tol=st.tol, maxiter=st.maxiter,
                             mode="vmap")
        out.extend(rs[:n])
    return np.array([[r.fssc, r.fssh] for r in out])


def one_sweep(solver: str):
    """One run as a fresh process: the compile cache on, the 12-value sweep, its seconds (stdout)."""
    from dopplermap.cache import enable_compilation_cache

    enable_compilation_cache()  # $DOPPLERMAP_CACHE_DIR, set by the parent
    warnings.simplefilter("ignore")
    prob = load_problem(None, quiet=True, tol=1e-7)
    prob = prob.replace(settings=prob.settings.replace(solver=solver, maxiter=2000))
    t, c = time.perf_counter(), time.process_time()
    sw = search.sweep_lambda(prob, np.logspace(-3, 2, 12))
    dt, dc = time.perf_counter() - t, time.process_time() - c
    solver_used = sorted({r.solver for r in sw.results})
    compile_s = sum(r.compile_time for r in sw.results)
    print(f"{dt:.3f} {dc:.3f} {compile_s:.3f} {int(sw.iterations.sum())} {'+'.join(solver_used)} {sw.loss.tolist()}")


def perturbed_sweeps(n: int):
    """The Newton sweep from the flat start and from ``n`` starts perturbed in the last bits."""
    from dopplermap.solvers import prepare

    warnings.simplefilter("ignore")
    prob = load_problem(None, quiet=True, tol=1e-7)
    prob = prob.replace(settings=prob.settings.replace(solver="newton", maxiter=2000))
    setup = prepare(prob.pre, prob.observations, prob.settings, lightcurve=prob.lightcurve, problem=prob)
    flat = np.asarray(setup.x0)
    lm = np.logspace(-3, 2, 12)
    print(f"12-value Newton sweep, demo star, tol 1e-7, from the flat start and {n} perturbed ones; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    its, ref = [], None
    for k in range(n + 1):
        x0 = np.clip(flat * (1.0 + k * 1e-15), setup.lower, setup.upper)
        sw, t = timed(lambda x0=x0: search.sweep_lambda(prob, lm, x0=x0))
        ref = sw if ref is None else ref
        its.append(int(sw.iterations.sum()))
        d = np.abs(sw.loss / ref.loss - 1)
        print(f"start x (1 + {k}e-15): iterations {its[-1]:4d} (lambda <= 0.01: {sw.iterations[lm <= 0.011].tolist()})  "
              f"max |loss / flat start's - 1| lambda <= 0.01 {d[lm <= 0.011].max():.1e}, lambda >= 0.1 "
              f"{d[lm >= 0.1].max():.1e}  {t:.2f} s", flush=True)
    print(f"iterations: mean {np.mean(its):.1f}, min {min(its)}, max {max(its)}")


def process_runs(n_runs: int, srcs=(None,), solvers=("lbfgsb", "auto")):
    print(f"12-value sweep, demo star, tol 1e-7, {n_runs} runs as fresh processes; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    ref = None
    for solver in solvers:
        with tempfile.TemporaryDirectory() as top:
            caches = [os.path.join(top, str(i)) for i in range(len(srcs))]  # one fresh cache per source tree
            for k in range(n_runs):
                for src, cache in zip(srcs, caches, strict=True):
                    env = dict(os.environ, DOPPLERMAP_CACHE_DIR=cache)
                    if src is not None:
                        env["PYTHONPATH"] = os.path.abspath(src)
                    t = time.perf_counter()
                    out = subprocess.run([sys.executable, __file__, "--one-sweep", solver], env=env, check=True,
                                         capture_output=True, text=True).stdout.split(maxsplit=5)
                    wall = time.perf_counter() - t
                    loss = np.array(eval(out[5]))  # noqa: S307  (our own child's list of floats)
                    ref = loss if ref is None else ref
                    tree = "" if src is None else f"{src:>24s}  "
                    print(f"{tree}solver {solver:6s} run {k + 1}: sweep {float(out[0]):6.2f} s (CPU {float(out[1]):6.2f} s, "
                          f"compile {float(out[2]):5.2f} s)  process {wall:6.2f} s  solver used {out[4]:7s} iterations "
                          f"{out[3]:>5s}  max |loss / first's - 1| {np.max(np.abs(loss / ref - 1)):.1e}  load "
                          f"{os.getloadavg()[0]:.1f}", flush=True)


def _belt_mc(c, n_boot=400, seed=0):
    """Monte Carlo error of a calibration's estimate and sets: their spread over resamples
    (with replacement) of each trial's simulated estimates."""
    from dopplermap.calibrate import belt_estimate

    rng = np.random.default_rng(seed)
    keys = ("estimate", "lo68", "hi68", "lo95", "hi95")
    out = []
    for _ in range(n_boot):
        sims = np.stack([row[rng.integers(0, row.size, row.size)] for row in c.sims])
        b = belt_estimate(c.trials, sims, c.raw)
        out.append([b[k] for k in keys])
    return dict(zip(keys, np.std(out, axis=0, ddof=1), strict=True))


def calibration_compare(n_values: int, n_sim: int, n_trials: int, oversample: int, n_ref: int = 0):
    """``calibrate_parameter`` with every solve from the flat start against warm starts (each
    data set from its solution at the grid value before), on the same data sets, in one process."""
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter, calibration_cost, grid_value_task
    from dopplermap.problem import demo_problem

    warnings.simplefilter("ignore")
    prob = demo_problem(n_cell=2500, n_epoch=20, n_vel=32)
    prob = prob.replace(settings=prob.settings.replace(tol=1e-6, solver="auto"))
    st = prob.settings
    vals = np.linspace(40.0, 70.0, 13)[:n_values]  # the full calibration's 2.5 deg spacing
    idx = np.unique(np.round(np.linspace(0, n_values - 1, n_trials)).astype(int))
    trials = vals[idx]
    fixed = {"vsini": prob.star.vsini}
    print(f"calibration: n_cell 2500 n_epoch 20 n_vel 32, tol {st.tol}, {vals.size} values {vals[0]:g}..{vals[-1]:g}, "
          f"{trials.size} trials x {n_sim} sets, sim_oversample {oversample}; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores", flush=True)
    kw = dict(lmbd=st.lmbd, regulariser=st.regulariser, tol=st.tol, maxiter=st.maxiter, fit_rv=st.fit_rv,
              fit_amp=st.fit_amp, offset_sigma=st.offset_sigma)
    err = np.asarray(prob.obs.err, float)
    _, t = timed(lambda: grid_value_task(prob, "inclination", fixed, vals[0], np.asarray(prob.obs.flux)[None], err, kw,
                                         "sequential"))
    print(f"compile and one solve: {t:.1f} s", flush=True)
    runs = {}
    for warm in (False, True):
        marks = []

        def progress(stage, i, n, marks=marks):
            marks.append((stage, time.perf_counter()))

        t0 = time.perf_counter()
        c = calibrate_parameter(prob, "inclination", vals, fixed=fixed, trials=trials, progress=progress,
                                options=CalibrationOptions(n_sim=n_sim, seed=0, sim_oversample=oversample,
                                                           warm_start=warm))
        t_end = time.perf_counter()
        t_sets = max(tt for s, tt in marks if s == "trial") - t0
        per_value = np.diff([t0 + t_sets] + [tt for s, tt in marks if s == "grid"])
        runs[warm] = (c, t_end - t0, t_sets, per_value)
        mc = _belt_mc(c)
        members = c.sims.size + 1
        print(f"{'warm' if warm else 'cold'}: {t_end - t0:.1f} s = data sets {t_sets:.1f} s ({trials.size} trial maps) + "
              f"grid {t_end - t0 - t_sets:.1f} s ({vals.size} x {members} solves, {c.iterations} iterations, "
              f"{(t_end - t0 - t_sets) / (vals.size * members):.3f} s a solve; first value {per_value[0]:.1f} s, "
              f"later values {per_value[1:].mean():.1f} s each); mode {c.mode}; load average {os.getloadavg()[0]:.1f}",
              flush=True)
        print(f"   estimate {c.estimate:.3f} 68 % [{c.lo68:.3f}, {c.hi68:.3f}] 95 % [{c.lo95:.3f}, {c.hi95:.3f}] raw "
              f"{c.raw:.3f}; Monte Carlo error (resampled simulations): " +
              " ".join(f"{k} {v:.3f}" for k, v in mc.items()), flush=True)
    (cold, tc, sc, _), (warm, _, _, pw) = runs[False], runs[True]
    d2 = warm.member_profiles["chi2_total"] - cold.member_profiles["chi2_total"]
    dl = warm.member_profiles["loss"] - cold.member_profiles["loss"]
    de = np.abs(np.concatenate([[warm.raw - cold.raw], (warm.sims - cold.sims).ravel()]))
    print(f"warm - cold, per data set and grid value: chi2_total max |d| {np.abs(d2).max():.3f}, median |d| "
          f"{np.median(np.abs(d2)):.3f} (the plain read-out's interval threshold: Delta chi2 = 1); loss (n_data x "
          f"objective) max |d| {np.abs(dl).max():.3f}, lower warm {np.mean(dl < 0):.2f} of solves; profile's change "
          f"per grid step median {np.median(np.abs(np.diff(cold.member_profiles['chi2_total'], axis=0))):.2f}", flush=True)
    print(f"   base estimates (profile minima) max |d| {de.max():.3f} deg, median {np.median(de):.4f}, > 0.5 deg on "
          f"{np.mean(de > 0.5):.3f} of data sets; the trials' spread (half 68 % width) median "
          f"{np.median(cold.spread):.2f} deg", flush=True)
    print(f"   estimate {warm.estimate - cold.estimate:+.3f}, lo68 {warm.lo68 - cold.lo68:+.3f}, hi68 "
          f"{warm.hi68 - cold.hi68:+.3f}, lo95 {warm.lo95 - cold.lo95:+.3f}, hi95 {warm.hi95 - cold.hi95:+.3f} deg",
          flush=True)
    if n_ref:  # which stops nearer the minimum: the first n_ref data sets solved to tol 1e-9
        from dopplermap.calibrate import _simulated_sets, profile_minimum  # the calibration's own data sets
        from dopplermap.search import apply_parameters

        def at(value):
            star, comps = apply_parameters(prob, dict(fixed, inclination=float(value)))
            return prob.replace(star=star, components=comps)

        o = CalibrationOptions(n_sim=n_sim, seed=0, sim_oversample=oversample)
        flux = _simulated_sets(prob, at, trials, kw, 0.1 * st.lmbd, err, o, None)[:n_ref]
        ref = np.stack([grid_value_task(prob, "inclination", fixed, gv, flux, err, dict(kw, tol=1e-9, maxiter=5000),
                                        "sequential")[0] * flux[0].size for gv in vals])
        for tag, c in (("cold", cold), ("warm", warm)):
            d = c.member_profiles["chi2_total"][:, :n_ref] - ref
            e = [profile_minimum(vals, c.member_profiles["chi2_total"][:, m]) - profile_minimum(vals, ref[:, m])
                 for m in range(n_ref)]
            print(f"   {tag} - tol 1e-9 (first {n_ref} data sets): chi2_total rms {np.sqrt(np.mean(d ** 2)):.3f} max |d| "
                  f"{np.abs(d).max():.3f}; base estimates max |d| {np.max(np.abs(e)):.3f} deg, mean d "
                  f"{np.mean(e):+.3f}", flush=True)
    # the full grid --calibrate 16 over 13 values: 13 trial maps + 13 x 209 members (+ the grid's 13 points)
    full = calibration_cost(13, 13, 16)
    per_trial = sc / trials.size
    members = cold.sims.size + 1
    cold_solve = (tc - sc) / (vals.size * members)
    first, later = pw[0] / members, pw[1:].mean() / members
    m = full["members"]
    est_cold = 13 * per_trial + (13 * m + 13) * cold_solve
    est_warm = 13 * per_trial + (m + 13) * first + 12 * m * later
    print(f"extrapolated to grid --calibrate 16 over 13 values ({full['total'] + 13} solves): cold {est_cold / 60:.1f} "
          f"min, warm {est_warm / 60:.1f} min (trial map {per_trial:.2f} s, cold solve {cold_solve:.3f} s, warm "
          f"solve {later:.3f} s); load average {os.getloadavg()[0]:.1f}", flush=True)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--calibration":
        n = [int(a) for a in sys.argv[2:]]
        return calibration_compare(n[0], n[1], n[2] if len(n) > 2 else n[0], n[3] if len(n) > 3 else 1,
                                   n[4] if len(n) > 4 else 0)
    if len(sys.argv) == 3 and sys.argv[1] == "--one-sweep":
        return one_sweep(sys.argv[2])
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=0, help="time the sweep as this many fresh processes instead")
    ap.add_argument("--src", nargs="+", default=None, help="with --runs: source folders to alternate (PYTHONPATH)")
    ap.add_argument("--solvers", nargs="+", default=["lbfgsb", "auto"], help="with --runs: solver settings")
    ap.add_argument("--n-cell", type=int, default=None)
    ap.add_argument("--n-epoch", type=int, default=None)
    ap.add_argument("--skip-vmap-sweep", action="store_true")
    ap.add_argument("--perturbed", type=int, default=0, help="the Newton sweep from this many perturbed starts")
    a = ap.parse_args()
    if a.perturbed:
        return perturbed_sweeps(a.perturbed)
    if a.runs:
        return process_runs(a.runs, tuple(a.src) if a.src else (None,), tuple(a.solvers))
    warnings.simplefilter("ignore")
    size = {k: v for k, v in (("n_cell", a.n_cell), ("n_epoch", a.n_epoch)) if v is not None}
    prob = load_problem(None, quiet=True, **size)
    obs = prob.obs
    print(f"n_cell {prob.grid.n_cell} n_epoch {obs.n_epoch} n_vel {obs.n_vel}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    lm = np.logspace(-3, 2, 12)
    # L-BFGS-B as the demo star solved before its solver became "auto" (the --runs comparison)
    sweep = prob.replace(settings=prob.settings.replace(tol=1e-7, maxiter=2000, solver="lbfgsb"))
    runs = [("invert (L-BFGS-B)", sweep, "invert"), ("invert (Newton)",
            sweep.replace(settings=sweep.settings.replace(solver="newton")), "invert"),
            ("sequential (device solve)", sweep, "sequential")]
    if not a.skip_vmap_sweep:
        runs.append(("vmap (12 together)", sweep, "vmap"))
    ref = None
    for name, p, mode in runs:
        for k in range(2):
            sw, t = timed(lambda p=p, mode=mode: search.sweep_lambda(p, lm, mode=mode))
            ref = sw if ref is None else ref
            dl = np.max(np.abs(sw.loss / ref.loss - 1))
            print(f"sweep {name:34s} run {k + 1}: {t:7.2f} s  iterations {int(sw.iterations.sum()):6d}  "
                  f"max |loss / default's - 1| {dl:.1e}", flush=True)
    boot = prob.replace(settings=prob.settings.replace(tol=1e-6, maxiter=1000))
    best = dm.invert(boot, lmbd=1.0)
    print(f"bootstrap: best map at lambda 1, chi2 {best.chi2:.4f}; load average {os.getloadavg()[0]:.1f}", flush=True)
    ref = None
    for name, fn in (("8-member vmap calls (previous default)", lambda: old_bootstrap(boot, best, 20)),
                     ("vmap, 20 together", lambda: U.bootstrap(boot, best, n_boot=20, mode="vmap").samples),
                     ("sequential (device solve)", lambda: U.bootstrap(boot, best, n_boot=20, mode="sequential").samples),
                     ("resample (invert each)", lambda: U.bootstrap(boot, best, n_boot=20, mode="resample").samples)):
        for k in range(2):
            s, t = timed(fn)
            ref = s if ref is None else ref
            sd, sd0 = s.std(axis=0, ddof=1), ref.std(axis=0, ddof=1)
            seen = np.isfinite(sd0).all(axis=0) & (sd0 > 0).all(axis=0)
            r = np.corrcoef(sd[:, seen].ravel(), sd0[:, seen].ravel())[0, 1]
            print(f"bootstrap {name:40s} run {k + 1}: {t:7.2f} s  sigma maps' correlation with the first {r:.5f}",
                  flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
