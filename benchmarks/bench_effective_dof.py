"""Cost of :func:`dopplermap.uncertainty.effective_dof` (what ``dopplermap lambda`` reports at the
L-curve corner and the target chi-square), optionally for several source trees on the same map.

The demo star at the seed size (2,500 cells x 150 epochs x 32 velocities) or the test size
(400 x 30 x 24), solved once at lambda 0.345 to tol 1e-9 (cached in ``--cache``); then for each
``--src`` tree, in its own process, ``--repeat`` calls (the first one compiles), wall and CPU
seconds and the traces, and with ``--profile`` the cProfile lines of the last call.

    PYTHONPATH=src python benchmarks/bench_effective_dof.py --size seed --src src --src ../main/src
    (--blas-threads 1: every OpenBLAS call on one thread, in both trees)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pickle
import pstats
import subprocess
import sys
import time
from pathlib import Path

SIZES = {"seed": (2500, 150, 32), "demo": (400, 30, 24)}


def solve(size: str, cache: Path):
    from dopplermap import invert
    from dopplermap.app.search import load_problem

    n_cell, n_epoch, n_vel = SIZES[size]
    prob = load_problem(None, quiet=True, tol=1e-7, n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel)
    if cache.exists():
        with open(cache, "rb") as fh:
            return prob, pickle.load(fh)
    best = invert(prob.replace(settings=prob.settings.replace(tol=1e-9)), lmbd=0.345)
    with open(cache, "wb") as fh:
        pickle.dump(best, fh)
    return prob, best


def one_tree(args) -> None:
    sys.path.insert(0, str(Path(args.one).resolve()))
    from dopplermap import uncertainty

    prob, best = solve(args.size, Path(args.cache))
    for i in range(args.repeat):
        prof = cProfile.Profile() if args.profile and i == args.repeat - 1 else None
        w0, c0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        dof = uncertainty.effective_dof(prob, best)
        if prof:
            prof.disable()
        row = {"src": args.one, "size": args.size, "call": i, "wall_s": time.perf_counter() - w0,
               "cpu_s": time.process_time() - c0, "p_eff": dof.p_eff, "tr_a2": dof.tr_a2, "nu": dof.nu,
               "n_free": dof.n_free, "n": dof.n, "load": os.getloadavg()[0],
               "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}
        print(json.dumps(row), flush=True)
        if prof:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
            print(out.getvalue(), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="seed")
    ap.add_argument("--src", action="append", help="source tree to import dopplermap from (repeatable)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="cProfile of the last call of each tree")
    ap.add_argument("--cache", default=None, help="pickle of the solved map (default /tmp/effdof_<size>.pkl)")
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="OPENBLAS_NUM_THREADS for the trees' processes (default: OpenBLAS's own)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.cache = args.cache or f"/tmp/effdof_{args.size}.pkl"
    if args.one:
        return one_tree(args)
    for src in args.src or ["src"]:
        cmd = [sys.executable, __file__, "--one", src, "--size", args.size, "--repeat", str(args.repeat),
               "--cache", args.cache] + (["--profile"] if args.profile else [])
        env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
        if args.blas_threads:
            env["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)
        subprocess.run(cmd, check=True, env=env)


if __name__ == "__main__":
    main()
