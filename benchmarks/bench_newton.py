"""Benchmark: projected Gauss-Newton-CG (``solver="newton"``) against scipy L-BFGS-B at tight tolerances.

    PYTHONPATH=src python benchmarks/bench_newton.py [--sizes seed large] [--tols 1e-5 1e-7 1e-8]
        [--out benchmarks/results/newton-cpu2.json]

For each size (``seed``: ``dm.demo_setup()`` defaults, 2500 cells x 150 epochs x 32
velocities; ``large``: 4010 cells x 150 epochs x 41 velocities), one simulated data set
(S/N 500, lambda 1), in one process: L-BFGS-B and Newton at each tolerance, each from the
seed's start. Cost is counted in objective passes: L-BFGS-B's value-and-gradient
evaluations; Newton's loss evaluations, linearisations (with their gradient), Gauss-Newton
products (one linearised forward + one backward pass each) and preconditioner probes, each
counted as one (``result.extra["passes"]``). The headline is the passes (and seconds)
Newton needs to reach L-BFGS-B's tol-1e-8 loss, read from its per-iteration history.
Compile seconds are in-process cold (the persistent cache off), reported apart.

``--compile-only`` instead times the first run of each compiled solver loop at each size:
in a fresh process per source folder of ``--src`` (default this tree's; e.g. a base
version's and this tree's, alternated ``--runs`` times, so both meet the same load), the
Newton program and the device L-BFGS program (``projected_lbfgs``) of that problem at tol
1e-7 are traced and compiled cold (no persistent cache), wall and CPU seconds, then each
solves it once (its solve seconds, iterations and loss).

    python benchmarks/bench_newton.py --compile-only --sizes seed --runs 2 --src /tmp/base/src src
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

from _common import write_json  # benchmarks/ is the script's folder

SIZES = {"seed": dict(n_cell=2500, n_epoch=150, n_vel=32), "large": dict(n_cell=4010, n_epoch=150, n_vel=41)}


def run_size(name, size, tols, lmbd):
    import dopplermap as dm

    star, grid, times, vels, comps = dm.demo_setup(**size)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500.0, seed=1)
    pre = dm.precompute(grid, star, times, vels, comps)
    rows = []
    for tol in tols:
        for solver in ("lbfgsb", "newton"):
            t0 = time.perf_counter()
            res = dm.invert(pre, sim.obs, lmbd=lmbd, tol=tol, maxiter=5000, solver=solver)
            wall = time.perf_counter() - t0
            passes = res.extra["passes"]["total"] if solver == "newton" else res.n_eval
            row = dict(size=name, tol=tol, solver=solver, loss=res.loss, iterations=res.iterations,
                       passes=int(passes), solve_time=res.solve_time, compile_time=res.compile_time, wall=wall,
                       stop_reason=res.stop_reason, cube_dtype=res.cube_dtype,
                       history_loss=[float(v) for v in res.history["loss"]],
                       history_passes=[int(v) for v in res.history.get("passes", [])],
                       pass_detail=res.extra.get("passes"))
            rows.append(row)
            print(f"[{name} {pre.n_epoch}x{pre.n_vel}x{pre.n_cell}] tol {tol:g} {solver:7s} loss {res.loss:.12g} "
                  f"it {res.iterations:5d} passes {passes:5d} solve {res.solve_time:6.2f} s "
                  f"compile {res.compile_time:5.2f} s  {res.stop_reason}", flush=True)
    return rows, dict(n_cell=pre.n_cell, n_epoch=pre.n_epoch, n_vel=pre.n_vel)


def to_target(rows, name):
    """Passes and seconds Newton needs to reach L-BFGS-B's tol-1e-8 loss (its tightest run)."""
    lb = [r for r in rows if r["size"] == name and r["solver"] == "lbfgsb"]
    ref = min(lb, key=lambda r: r["tol"])

    def cold(solver, cube):  # a solver's compile seconds the first time it met this cube dtype
        return max(r["compile_time"] for r in rows if r["size"] == name and r["solver"] == solver
                   and r["cube_dtype"] == cube)

    ref = dict(ref, compile_time=cold("lbfgsb", ref["cube_dtype"]))
    out = []
    for r in rows:
        if r["size"] != name or r["solver"] != "newton":
            continue
        r = dict(r, compile_time=cold("newton", r["cube_dtype"]))
        hit = [i for i, v in enumerate(r["history_loss"]) if v <= ref["loss"]]
        p = r["history_passes"][hit[0]] if hit else None
        frac = p / r["passes"] if p is not None and r["passes"] else None
        out.append(dict(size=name, newton_tol=r["tol"], target=ref["loss"], target_tol=ref["tol"],
                        lbfgsb_passes=ref["passes"], lbfgsb_solve=ref["solve_time"],
                        lbfgsb_wall=ref["solve_time"] + ref["compile_time"],
                        newton_final_loss=r["loss"], reached=bool(hit) or r["loss"] <= ref["loss"],
                        newton_passes_to_target=p, newton_passes=r["passes"],
                        newton_solve_to_target=None if frac is None else r["solve_time"] * frac,
                        newton_solve=r["solve_time"], newton_compile=r["compile_time"],
                        lbfgsb_compile=ref["compile_time"],
                        pass_ratio=None if p is None else ref["passes"] / p,
                        solve_ratio=ref["solve_time"] / r["solve_time"],
                        wall_ratio=(ref["solve_time"] + ref["compile_time"]) / (r["solve_time"] + r["compile_time"])))
    return out


def compile_child(name: str) -> None:
    """One fresh process: cold trace + compile of both compiled loops for size ``name``, one solve each (JSON line)."""
    import json

    import jax
    import numpy as np

    import dopplermap as dm
    from dopplermap.problem import demo_problem
    from dopplermap.solvers import newton, prepare
    from dopplermap.solvers.batch import _compile_solver

    prob = demo_problem(**SIZES[name]) if name in SIZES else None
    if prob is None:  # "demo": the demo star of `dopplermap lambda`
        from dopplermap.app.search import load_problem

        prob = load_problem(None, quiet=True)
    prob = prob.replace(settings=prob.settings.replace(tol=1e-7, maxiter=2000))
    setup = prepare(prob.pre, prob.observations, prob.settings, lightcurve=prob.lightcurve, problem=prob)
    args, kw = newton._program_args(setup)
    out = {}
    t, c = time.perf_counter(), time.process_time()
    fn, _ = newton._compile_newton(*args, **kw)
    out["newton"] = dict(compile=time.perf_counter() - t, compile_cpu=time.process_time() - c)
    t = time.perf_counter()
    r = jax.block_until_ready(fn(*args))
    out["newton"].update(solve=time.perf_counter() - t, iterations=int(r.n_iter), loss=float(r.f))
    xj, lo, hi, _, _, lm, pre, data = args
    t, c = time.perf_counter(), time.process_time()
    fn, _ = _compile_solver(xj, lo, hi, lm, pre, data, regulariser=setup.regulariser, penalty=setup.penalty,
                            maxiter=setup.maxiter, tol=setup.tol)
    out["projected_lbfgs"] = dict(compile=time.perf_counter() - t, compile_cpu=time.process_time() - c)
    t = time.perf_counter()
    r = jax.block_until_ready(fn(xj, lo, hi, lm, pre, data))
    out["projected_lbfgs"].update(solve=time.perf_counter() - t, iterations=int(r.n_iter), loss=float(r.f))
    print(json.dumps(dict(out, size=name, n_param=int(np.size(xj)), version=dm.__version__)))


def compile_runs(sizes, srcs, n_runs) -> None:
    import json
    import subprocess

    print(f"cold compile of the compiled loops (tol 1e-7), fresh processes; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores", flush=True)
    for name in sizes:
        for k in range(n_runs):
            for src in srcs:
                env = dict(os.environ, DOPPLERMAP_CACHE_DIR="off", PYTHONPATH=os.path.abspath(src))
                line = subprocess.run([sys.executable, __file__, "--compile-child", name], env=env, check=True,
                                      capture_output=True, text=True).stdout.strip().splitlines()[-1]
                d = json.loads(line)
                for solver in ("newton", "projected_lbfgs"):
                    e = d[solver]
                    print(f"{name:5s} run {k + 1} {src:>24s} {solver:15s} compile {e['compile']:6.2f} s (CPU "
                          f"{e['compile_cpu']:5.2f} s)  solve {e['solve']:6.2f} s  iterations {e['iterations']:4d}  "
                          f"loss {e['loss']:.12f}  load {os.getloadavg()[0]:.1f}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["seed", "large"], choices=sorted(SIZES) + ["demo"])
    ap.add_argument("--tols", type=float, nargs="+", default=[1e-5, 1e-7, 1e-8])
    ap.add_argument("--lmbd", type=float, default=1.0)
    ap.add_argument("--out", help="JSON output file")
    ap.add_argument("--compile-only", action="store_true", help="time the compiled loops' cold compile instead")
    ap.add_argument("--compile-child", help=argparse.SUPPRESS)
    ap.add_argument("--src", nargs="+", default=["src"], help="with --compile-only: source folders to alternate")
    ap.add_argument("--runs", type=int, default=1, help="with --compile-only: rounds over the source folders")
    args = ap.parse_args(argv)
    if args.compile_child:
        compile_child(args.compile_child)
        return 0
    if args.compile_only:
        compile_runs(args.sizes, args.src, args.runs)
        return 0
    os.environ.setdefault("DOPPLERMAP_CACHE_DIR", "off")  # cold compiles, comparable between solvers
    import jax

    load0 = os.getloadavg()
    rows, shapes, summary = [], {}, []
    for name in args.sizes:
        r, shapes[name] = run_size(name, SIZES[name], sorted(args.tols, reverse=True), args.lmbd)
        rows += r
        summary += to_target(rows, name)
    print("\n| size | Newton tol | reached L-BFGS-B tol-1e-8 loss | passes to it of all (L-BFGS-B) | ratio | "
          "solve s (L-BFGS-B) | cold compile s (L-BFGS-B) |")
    print("|---|---|---|---|---|---|---|")
    for s in summary:
        ratio = f"{s['pass_ratio']:.1f}x" if s["pass_ratio"] else "-"
        print(f"| {s['size']} | {s['newton_tol']:g} | {'yes' if s['reached'] else 'NO'} ({s['newton_final_loss'] - s['target']:+.2e}) | "
              f"{s['newton_passes_to_target']} of {s['newton_passes']} ({s['lbfgsb_passes']}) | {ratio} | "
              f"{s['newton_solve']:.2f} ({s['lbfgsb_solve']:.2f}) | {s['newton_compile']:.2f} ({s['lbfgsb_compile']:.2f}) |")
    out = dict(machine=platform.node(), processor=platform.processor() or platform.machine(), cpu_count=os.cpu_count(),
               backend=jax.default_backend(), jax=jax.__version__, load_start=load0, load_end=os.getloadavg(),
               lmbd=args.lmbd, shapes=shapes, rows=rows, summary=summary)
    print(f"\nmachine {out['machine']} ({out['processor']}, {out['cpu_count']} CPUs, {out['backend']}); "
          f"load average start {load0[0]:.1f}, end {out['load_end'][0]:.1f}")
    if args.out:
        write_json(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
