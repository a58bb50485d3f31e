"""``dopplermap grid`` as a user runs it, in this process against a local Dask cluster.

Each run is ``python -m dopplermap grid --param inclination=30:90:5 -q`` (13 points) on the
built-in demo star in a fresh process, its wall and CPU seconds (children included: the
cluster's workers) measured from outside, the process's whole life. Two ways: ``here`` (the
default: the points in this process, a point per CPU at a time) and ``local``
(``--scheduler local``: a local Dask cluster, a worker per CPU, each importing dopplermap and
compiling or loading its own programs). Each way gets its own fresh, empty compile cache
(``DOPPLERMAP_CACHE_DIR``), so run 1 is a first run and the later runs find the cache; the two
ways' processes alternate run by run, so they share the machine's load.

    python benchmarks/bench_grid_where.py --runs 2
    python benchmarks/bench_grid_where.py --runs 2 --size 2500 20 32

``--out`` writes the rows as JSON.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WAYS = {"here": [], "local": ["--scheduler", "local"]}


def one_run(cache: str, out: str, extra: list) -> dict:
    env = dict(os.environ, DOPPLERMAP_CACHE_DIR=cache)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dopplermap", "grid", "--out", out, "--param", "inclination=30:90:5",
                           "-q", *extra], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"exit {proc.returncode}\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    best = json.loads(Path(out, "grid.json").read_text())["best"]
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "best_inclination": best["inclination"],
            "best_chi2_total": best["chi2_total"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--size", nargs=3, type=int, default=None, metavar=("CELLS", "EPOCHS", "VELS"),
                    help="the demo star at this size (default: the command's 400 x 30 x 24)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    size = [] if args.size is None else ["--n-cell", str(args.size[0]), "--n-epoch", str(args.size[1]),
                                         "--n-vel", str(args.size[2])]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        caches = {w: tempfile.mkdtemp(dir=tmp) for w in WAYS}
        print(f"`dopplermap grid --param inclination=30:90:5 {' '.join(size)}`; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        for run in range(1, args.runs + 1):
            for way, extra in WAYS.items():
                r = one_run(caches[way], os.path.join(tmp, f"out-{len(rows)}"), [*extra, *size])
                row = {"way": way, "run": run, **r, "load": round(os.getloadavg()[0], 2)}
                rows.append(row)
                print(f"run {run} {way}: wall {row['wall_s']:.2f} s, CPU {row['cpu_s']:.2f} s, best inclination "
                      f"{row['best_inclination']:g} (chi2_total {row['best_chi2_total']:.6f}), load {row['load']}",
                      flush=True)
    for run in range(1, args.runs + 1):
        here, local = (next(r for r in rows if r["run"] == run and r["way"] == w) for w in WAYS)
        print(f"run {run}: the local cluster takes {local['wall_s'] / here['wall_s']:.2f}x the wall of this process")
    if args.out:
        Path(args.out).write_text(json.dumps({"size": args.size, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
