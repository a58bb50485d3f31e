"""A 20-refit bootstrap of the demo star, one source tree against another, in fresh processes.

Each process (``PYTHONPATH`` at one tree's ``src``) builds the demo star of ``dopplermap
lambda`` (400 cells, 30 epochs, 24 velocities), inverts it at lambda 1 (tol 1e-6, the CLI's
bootstrap tolerance) and times ``uncertainty.bootstrap(problem, best, n_boot=20)`` with that
tree's defaults twice (the first call compiles, the second reuses the program); the trees'
processes alternate, so they share the machine's load.

    python benchmarks/bench_bootstrap_trees.py --src /tmp/before/src src --runs 2

(``git worktree add /tmp/before <commit>`` makes a before tree.)
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import os, time, warnings
import dopplermap as dm
from dopplermap import uncertainty as U
from dopplermap.app.search import load_problem
warnings.simplefilter("ignore")
prob = load_problem(None, quiet=True, tol=1e-6)
boot = prob.replace(settings=prob.settings.replace(tol=1e-6, maxiter=1000))
best = dm.invert(boot, lmbd=1.0)
for k in (1, 2):
    t, c = time.perf_counter(), time.process_time()
    r = U.bootstrap(boot, best, n_boot=20)
    print(f"call {k}: wall {time.perf_counter() - t:.2f} s, CPU {time.process_time() - c:.2f} s, "
          f"mode {getattr(r, 'mode', '(none recorded)')}, load {os.getloadavg()[0]:.2f}", flush=True)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", nargs="+", default=["src"])
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    for run in range(1, args.runs + 1):
        for src in args.src:
            env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()), DOPPLERMAP_CACHE_DIR="off")
            out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"{src}: exit {out.returncode}\n{out.stderr[-2000:]}")
            for line in out.stdout.splitlines():
                print(f"run {run} {src}: {line}", flush=True)


if __name__ == "__main__":
    main()
