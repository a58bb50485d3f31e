"""A 20-refit bootstrap of the demo star, one source tree against another, in fresh processes.

Each process (``PYTHONPATH`` at one tree's ``src``) builds the demo star of ``dopplermap
lambda`` (400 cells, 30 epochs, 24 velocities), inverts it at lambda 1 (tol 1e-6, the CLI's
bootstrap tolerance) and times ``uncertainty.bootstrap(problem, best, n_boot=20)`` with that
tree's defaults twice (the first call compiles or loads the program, the second reuses it); the
trees' processes alternate, so they share the machine's load. ``--cache own`` (default) gives
each tree its own empty persistent compile cache (``DOPPLERMAP_CACHE_DIR``) kept across its
runs, enabled as the CLI does at start-up, so the runs find it as a user's runs do (run 1 a first
run); ``--cache off`` compiles in every process.

    python benchmarks/bench_bootstrap_trees.py --src /tmp/before/src src --runs 3

(``git worktree add /tmp/before <commit>`` makes a before tree.)
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import logging, os, time, warnings
import dopplermap as dm
from dopplermap import uncertainty as U
from dopplermap.app.search import load_problem
warnings.simplefilter("ignore")
seen = []
class Keep(logging.Handler):
    def emit(self, rec):
        if rec.getMessage().startswith("bootstrap:"):
            seen.append(rec.getMessage())
logging.getLogger("dopplermap.uncertainty").addHandler(Keep())
logging.getLogger("dopplermap.uncertainty").setLevel(logging.INFO)
from dopplermap.cache import enable_compilation_cache
enable_compilation_cache()  # as the CLI does at start-up ($DOPPLERMAP_CACHE_DIR, "off" disables it)
prob = load_problem(None, quiet=True, tol=1e-6)
boot = prob.replace(settings=prob.settings.replace(tol=1e-6, maxiter=1000))
best = dm.invert(boot, lmbd=1.0)
for k in (1, 2):
    t, c = time.perf_counter(), time.process_time()
    r = U.bootstrap(boot, best, n_boot=20)
    print(f"call {k}: wall {time.perf_counter() - t:.2f} s, CPU {time.process_time() - c:.2f} s, "
          f"mode {getattr(r, 'mode', '(none recorded)')}, load {os.getloadavg()[0]:.2f}; "
          f"{seen[-1] if seen else ''}", flush=True)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", nargs="+", default=["src"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cache", choices=("own", "off"), default="own")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-boot-")
    caches = {s: (tempfile.mkdtemp(dir=tmp) if args.cache == "own" else "off") for s in args.src}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    for run in range(1, args.runs + 1):
        for src in args.src:
            env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()), DOPPLERMAP_CACHE_DIR=caches[src])
            out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"{src}: exit {out.returncode}\n{out.stderr[-2000:]}")
            for line in out.stdout.splitlines():
                print(f"run {run} {src}: {line}", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
