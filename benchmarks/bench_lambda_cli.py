"""``dopplermap lambda`` as a user runs it: whole fresh processes, one source tree against another.

Each run is ``python -m dopplermap lambda --lmbds 0.001:100:12 -q`` on the built-in demo star
(400 cells, 30 epochs, 24 velocities, tol 1e-7) in a fresh process, its wall and CPU seconds
(children included) measured from outside, the process's whole life: imports, set-up, compile,
the sweep, the result files. Every tree gets its own fresh, empty compile cache
(``DOPPLERMAP_CACHE_DIR``), so run 1 is a first run and the later runs find the cache as a
user's second and third run would. The trees' processes alternate run by run, so they share
the machine's load.

    python benchmarks/bench_lambda_cli.py --src /tmp/before/src src --runs 3
    python benchmarks/bench_lambda_cli.py --src /tmp/before/src src --runs 2 --size 2500 150 32

(``git worktree add /tmp/before <commit>`` makes a before tree.) ``--out`` writes the rows as
JSON.
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


def one_run(src: str, cache: str, out: str, lmbds: str, extra: list) -> dict:
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()), DOPPLERMAP_CACHE_DIR=cache)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dopplermap", "lambda", "--out", out, "--lmbds", lmbds, "-q", *extra],
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{src}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = json.loads(Path(out, "lambda.json").read_text())
    lines = Path(out, "lcurve.csv").read_text().splitlines()
    head = lines[0].split(",")
    iters = sum(int(row.split(",")[head.index("iterations")]) for row in lines[1:] if row.strip())
    return {"wall_s": wall, "cpu_s": cpu, "summary": summary, "iterations": iters, "stderr": proc.stderr}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", nargs="+", default=["src"], help="source folders (each's PYTHONPATH), alternated")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lmbds", default="0.001:100:12")
    ap.add_argument("--size", nargs=3, type=int, default=None, metavar=("CELLS", "EPOCHS", "VELS"),
                    help="the demo star at this size (default: the command's 400 x 30 x 24)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    extra = [] if args.size is None else ["--n-cell", str(args.size[0]), "--n-epoch", str(args.size[1]),
                                          "--n-vel", str(args.size[2])]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        caches = {s: tempfile.mkdtemp(dir=tmp) for s in args.src}
        print(f"`dopplermap lambda --lmbds {args.lmbds} {' '.join(extra)}` on the demo star; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        for run in range(1, args.runs + 1):
            for src in args.src:
                out = os.path.join(tmp, f"out-{len(rows)}")
                r = one_run(src, caches[src], out, args.lmbds, extra)
                s = r["summary"]
                row = {"src": src, "run": run, "wall_s": round(r["wall_s"], 3), "cpu_s": round(r["cpu_s"], 3),
                       "load": round(os.getloadavg()[0], 2),
                       "sweep_s": round(s["sweep_time"], 3), "iterations": r["iterations"],
                       "mode": s.get("solve_mode"), "corner": round(s["lcurve_corner"], 4),
                       "warnings": r["stderr"].count("warning:")}
                rows.append(row)
                print(f"run {run} {src}: wall {row['wall_s']:.2f} s, CPU {row['cpu_s']:.2f} s, sweep {row['sweep_s']:.2f} s, "
                      f"{row['iterations']} iterations, mode {row['mode']}, corner {row['corner']}, "
                      f"warnings {row['warnings']}, load {row['load']}",
                      flush=True)
    for run in range(1, args.runs + 1):
        these = [r for r in rows if r["run"] == run]
        if len(these) >= 2:
            a, b = these[0], these[-1]
            print(f"run {run}: {a['src']} / {b['src']}: wall {a['wall_s'] / b['wall_s']:.2f}x, "
                  f"CPU {a['cpu_s'] / b['cpu_s']:.2f}x")
    if args.out:
        Path(args.out).write_text(json.dumps({"lmbds": args.lmbds, "args": extra, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
