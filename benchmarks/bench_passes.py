"""Benchmark: the work of a solve against lambda, tolerance and size, and plan.solver_passes' estimate of it.

    PYTHONPATH=src python benchmarks/bench_passes.py [--sizes small demo sparse] [--lmbds 1e-3 1e-2 0.1 1 10]
        [--tols 1e-5 1e-6 1e-7 1e-8] [--out benchmarks/results/passes-cpu2.json]

Each size is the built-in demo star (``dm.demo_setup``, S/N 500, maximum entropy) at a
small grid; every (lambda, tol) is solved by L-BFGS-B and by Newton from the flat start, in
one process. Passes: L-BFGS-B's value-and-gradient evaluations; Newton's loss evaluations,
linearisations, Gauss-Newton products and probes (``result.extra["passes"]["total"]``).
Each row prints the measured passes beside ``plan.solver_passes``' estimate.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

from _common import write_json  # benchmarks/ is the script's folder

SIZES = {"small": dict(n_cell=400, n_epoch=20, n_vel=24), "demo": dict(n_cell=1200, n_epoch=30, n_vel=32),
         "sparse": dict(n_cell=1200, n_epoch=8, n_vel=24)}  # few data per cell, as a short campaign


def run_size(name, size, lmbds, tols):
    import dopplermap as dm
    from dopplermap import plan

    star, grid, times, vels, comps = dm.demo_setup(**size)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500.0, seed=1)
    pre = dm.precompute(grid, star, times, vels, comps)
    rows = []
    for lmbd in lmbds:
        for tol in tols:
            for solver in ("lbfgsb", "newton"):
                res = dm.invert(pre, sim.obs, lmbd=lmbd, tol=tol, maxiter=5000, solver=solver)
                passes = res.extra["passes"]["total"] if solver == "newton" else res.n_eval
                est = plan.solver_passes(solver, tol, lmbd, pre.n_epoch * pre.n_vel / pre.n_cell)
                rows.append(dict(size=name, n_cell=pre.n_cell, n_data=pre.n_epoch * pre.n_vel, lmbd=lmbd, tol=tol,
                                 solver=solver, iterations=int(res.iterations), passes=int(passes), estimate=est,
                                 solve_time=res.solve_time, stop_reason=res.stop_reason))
                print(f"[{name} {pre.n_epoch}x{pre.n_vel}x{pre.n_cell}] lmbd {lmbd:g} tol {tol:g} {solver:7s} "
                      f"it {res.iterations:5d} passes {passes:5d} est {est:6.0f} solve {res.solve_time:6.2f} s "
                      f"{res.stop_reason}", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["small"], choices=sorted(SIZES))
    ap.add_argument("--lmbds", nargs="+", type=float, default=[1e-3, 1e-2, 0.1, 1.0, 10.0])
    ap.add_argument("--tols", nargs="+", type=float, default=[1e-5, 1e-6, 1e-7, 1e-8])
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    rows = []
    for name in a.sizes:
        rows += run_size(name, SIZES[name], a.lmbds, a.tols)
    if a.out:
        write_json(a.out, dict(machine=platform.machine(), cpus=os.cpu_count(), load=os.getloadavg(), rows=rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
