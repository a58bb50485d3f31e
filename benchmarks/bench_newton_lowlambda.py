"""The Newton solver along ``dopplermap lambda``'s sweep: passes and losses per lambda.

Twelve lambdas 100 .. 1e-3 (log-spaced, high to low), tol 1e-7, each Newton solve warm-started
from the previous lambda's map, on the demo star of ``dopplermap lambda`` (400 cells, 30
epochs, 24 velocities) or with ``--seed-size`` on 2500 cells, 150 epochs, 32 velocities.
Prints iterations, objective passes and loss per lambda, the total passes and the seconds
(compile included). ``--reference`` also refines each lambda below 0.1 from the sweep's map
(Newton at tol 1e-12 with a long CG, alternated with L-BFGS-B at tol 1e-13) and prints the
sweep's loss relative to the lowest loss found: how far above the optimum the sweep stopped.

    PYTHONPATH=src python benchmarks/bench_newton_lowlambda.py [--seed-size] [--reference] [--products float64]

``--products``: the cube of Newton's Gauss-Newton products (``options["products"]``; default
float32, the float32 fold of the model while the solve's own cube is float64).
"""

import argparse
import time
import warnings

import numpy as np

import dopplermap as dm
from dopplermap.app.search import load_problem


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed-size", action="store_true", help="2500 cells, 150 epochs, 32 velocities")
    ap.add_argument("--reference", action="store_true", help="refine each lambda below 0.1 to its optimum")
    ap.add_argument("--products", choices=("float32", "float64"), default="float32")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    size = dict(n_cell=2500, n_epoch=150, n_vel=32) if a.seed_size else {}
    prob = load_problem(None, quiet=True, tol=1e-7, **size)
    x, total, t0 = None, 0, time.perf_counter()
    rows = []
    for lmbd in np.logspace(-3, 2, 12)[::-1]:
        r = dm.invert(prob, lmbd=lmbd, x0=x, solver="newton", options=dict(products=a.products))
        x, total = r.x, total + r.n_eval
        rows.append((lmbd, r))
        print(f"lambda {lmbd:.4g}: iterations {r.iterations} passes {r.n_eval} loss {r.loss:.8f}", flush=True)
    print(f"total passes {total}, {time.perf_counter() - t0:.2f} s")
    if not a.reference:
        return
    for lmbd, r in rows:
        if lmbd >= 0.1:
            continue
        best, xb = r.loss, r.x
        for _ in range(3):
            r2 = dm.invert(prob, lmbd=lmbd, x0=xb, solver="lbfgsb", tol=1e-13, maxiter=20000)
            r3 = dm.invert(prob, lmbd=lmbd, x0=r2.x, solver="newton", tol=1e-12, options=dict(max_cg=300))
            for rr in (r2, r3):
                if rr.loss < best:
                    best, xb = rr.loss, rr.x
        print(f"lambda {lmbd:.4g}: sweep {r.loss:.8f} lowest found {best:.8f} (sweep {(r.loss - best) / best:+.1e} "
              "relative)")


if __name__ == "__main__":
    main()
