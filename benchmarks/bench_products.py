"""Newton's Gauss-Newton products on the float32 fold against the solve's own float64 cube.

A solve at tol 1e-7 iterates on a float64 cube (its loss must round finer than the tolerance);
the Newton back end takes its CG products on the float32 fold of the same model unless
``options={"products": "float64"}``. Each lambda is solved from the flat start both ways, in
one process, the two alternated, both programs compiled first; printed: iterations, objective
passes, seconds, milliseconds a pass and the final loss.

    PYTHONPATH=src python benchmarks/bench_products.py [--size 2500 150 32] [--lmbds 1,0.1,0.01] [--repeat 2]
"""

import argparse
import os
import time
import warnings

import dopplermap as dm
from dopplermap.app.search import load_problem


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", nargs=3, type=int, default=(2500, 150, 32), metavar=("CELLS", "EPOCHS", "VELS"))
    ap.add_argument("--lmbds", default="1,0.1,0.01")
    ap.add_argument("--tol", type=float, default=1e-7)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    n_cell, n_epoch, n_vel = a.size
    prob = load_problem(None, quiet=True, tol=a.tol, n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel)
    print(f"demo star {n_cell} cells x {n_epoch} epochs x {n_vel} velocities, tol {a.tol}, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    for which in ("float64", "float32"):  # compile both programs first
        r = dm.invert(prob, lmbd=1.0, solver="newton", options=dict(products=which))
        print(f"products {which}: compile {r.compile_time:.2f} s", flush=True)
    for lmbd in (float(v) for v in a.lmbds.split(",")):
        for _ in range(a.repeat):
            for which in ("float64", "float32"):
                t = time.perf_counter()
                r = dm.invert(prob, lmbd=lmbd, solver="newton", options=dict(products=which))
                wall = time.perf_counter() - t
                print(f"lambda {lmbd:g} products {which}: {r.iterations} iterations, {r.n_eval} passes, "
                      f"solve {r.solve_time:.2f} s ({1e3 * r.solve_time / r.n_eval:.2f} ms a pass), call {wall:.2f} s, "
                      f"loss {r.loss:.10f}, load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
