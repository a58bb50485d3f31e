"""A lambda sweep's direction: the same warm-started solves from the smallest lambda up and
from the largest down, in one process.

Each direction chains ``search._warm_solve`` (the sweep's own solve: a stalled warm start is
checked from the flat start) through ``--lmbds`` with every solve started from the previous
lambda's map, without the order repair, the directions alternated ``--repeat`` times (the
first pass compiles). Prints each pass's seconds and iterations and, per lambda, the
iterations and the loss of each direction (``lower`` names the direction whose loss is the
lower by more than 1e-7 relative).

    PYTHONPATH=src python benchmarks/bench_sweep_order.py                      # demo star, solver auto
    PYTHONPATH=src python benchmarks/bench_sweep_order.py --solver lbfgsb
    PYTHONPATH=src python benchmarks/bench_sweep_order.py --size 2500 150 32 --repeat 1
    PYTHONPATH=src python benchmarks/bench_sweep_order.py --problem lopeg.toml  # a target
"""

import argparse
import os
import time
import warnings

import numpy as np

from dopplermap import DopplermapWarning, search
from dopplermap.app.search import LAMBDA_TOL, load_problem


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default=None, help="a target .toml or .npz (default: the demo star)")
    ap.add_argument("--size", nargs=3, type=int, default=(400, 30, 24), metavar=("CELLS", "EPOCHS", "VELS"))
    ap.add_argument("--solver", default="auto")
    ap.add_argument("--lmbds", default="0.001:100:12", help="start:stop:count, log-spaced")
    ap.add_argument("--tol", type=float, default=LAMBDA_TOL)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    warnings.simplefilter("ignore", DopplermapWarning)  # reduced chi2 far from 1 is a sweep's point

    a, b, n = args.lmbds.split(":")
    lm = np.logspace(np.log10(float(a)), np.log10(float(b)), int(n))
    prob = load_problem(args.problem, n_cell=args.size[0], n_epoch=args.size[1], n_vel=args.size[2], tol=args.tol)
    prob = prob.replace(settings=prob.settings.replace(tol=args.tol, solver=args.solver))
    prob = search._sweep_solver(prob, lm.size, lm)
    name = args.problem or "demo star {} x {} x {}".format(*args.size)
    print(f"{name}: {lm.size} lambdas {a}..{b}, tol {args.tol:g}, "
          f"solver {prob.settings.solver}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    out = {}
    for rep in range(args.repeat):
        for way in ("up", "down"):
            seq = lm if way == "up" else lm[::-1]
            start, t, res = None, time.perf_counter(), {}
            for v in seq:
                r = search._warm_solve(prob, float(v), start, None)
                start, res[float(v)] = r.x, r
            wall = time.perf_counter() - t
            out[way] = res
            print(f"pass {rep + 1} {way:>4}: {wall:.3f} s, {sum(r.iterations for r in res.values())} iterations, "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    print("| lambda | iterations up | iterations down | loss up | loss down | lower |")
    print("|---|---|---|---|---|---|")
    for v in lm:
        u, d = out["up"][float(v)], out["down"][float(v)]
        rel = (u.loss - d.loss) / abs(d.loss)
        lower = "down" if rel > 1e-7 else "up" if rel < -1e-7 else "equal"
        print(f"| {v:.4g} | {u.iterations} | {d.iterations} | {u.loss:.8g} | {d.loss:.8g} | {lower} ({abs(rel):.1e}) |")


if __name__ == "__main__":
    main()
