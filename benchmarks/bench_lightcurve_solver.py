"""Light curves alone: Gauss-Newton (``solver="newton"``) against L-BFGS-B on one target.

    python benchmarks/bench_lightcurve_solver.py TARGET.toml [--lmbds 0.1,1]

For each lambda, from the flat start: Gauss-Newton at the target's tolerance, L-BFGS-B at the
same tolerance, and L-BFGS-B at tol 1e-10 / maxiter 20000 (the reference its slow convergence
needs). Each solve is timed as a second call in the process (its programs compiled by a first,
untimed one); printed as a Markdown table with the loss above the lowest found.
"""

from __future__ import annotations

import argparse
import time
import warnings

import dopplermap as dm
from dopplermap.app.search import load_problem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target")
    ap.add_argument("--lmbds", default="0.1,1")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    prob = load_problem(args.target, quiet=True)
    tol = prob.settings.tol
    runs = (("newton", tol, prob.settings.maxiter), ("lbfgsb", tol, prob.settings.maxiter), ("lbfgsb", 1e-10, 20000))
    print("| lambda | solver | tol, maxiter | iterations | loss | above the lowest | time |")
    print("|---|---|---|---|---|---|---|")
    for lm in (float(v) for v in args.lmbds.split(",")):
        rows = []
        for solver, t, mi in runs:
            dm.invert(prob, lmbd=lm, solver=solver, tol=t, maxiter=min(mi, 3))  # compile
            t0 = time.perf_counter()
            r = dm.invert(prob, lmbd=lm, solver=solver, tol=t, maxiter=mi)
            rows.append((solver, t, mi, r, time.perf_counter() - t0))
        low = min(r.loss for *_, r, _ in rows)
        for solver, t, mi, r, dt in rows:
            print(f"| {lm:g} | {solver} | {t:g}, {mi} | {r.iterations} | {r.loss:.6f} | "
                  f"{100 * (r.loss - low) / low:.2g} % | {dt:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
