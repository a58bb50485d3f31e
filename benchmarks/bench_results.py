"""Cost of writing the result folder and figures of the demo.

Runs the demo problem (seed size unless --n-cell), then times, in the same process:
  * with_context (spotless model), save_result without figures, and with figures,
  * wall and CPU seconds, cold (first save in the process: imports astropy and matplotlib)
    and warm (second save),
  * as a load gauge, the CPU/wall ratio of a fixed numpy workload run just before.
Usage: PYTHONPATH=src python benchmarks/bench_results.py [--n-cell 2500]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def gauge() -> tuple[float, float]:
    a = np.random.default_rng(0).random((400, 400))
    c, w = time.process_time(), time.perf_counter()
    for _ in range(20):
        a = np.tanh(a @ a.T / 400)
    return time.process_time() - c, time.perf_counter() - w


def timed(label, fn):
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    dc, dw = time.process_time() - c, time.perf_counter() - w
    print(f"{label:<34} wall {dw:6.2f} s   cpu {dc:6.2f} s")
    return out, dw, dc


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-cell", type=int, default=2500)
    args = ap.parse_args(argv)
    import dopplermap as dm
    from dopplermap.app import save_result, with_context

    star, grid, times, vels, comps = dm.demo_setup(n_cell=args.n_cell)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500, seed=1)
    pre = dm.precompute(grid, star, times, vels, comps)
    res = dm.invert(pre, sim.obs, lmbd=1.0)
    print(f"problem: n_cell {grid.n_cell}, n_epoch {len(times)}, n_vel {len(vels)}; "
          f"solve {res.solve_time:.2f} s, {res.iterations} iterations; python {sys.version.split()[0]}")
    gc, gw = gauge()
    print(f"load gauge: fixed numpy workload cpu {gc:.2f} s, wall {gw:.2f} s (wall/cpu {gw / gc:.2f})")
    tmp = Path(tempfile.mkdtemp())
    try:
        ctx, w0, c0 = timed("with_context (spotless model)", lambda: with_context(
            res, grid=grid, star=star, obs=sim.obs, pre=pre, components=comps,
            truth={"fssc": sim.fssc, "fssh": sim.fssh}, config={"command": "bench"}))
        s1, w1, c1 = timed("save + figures (cold: imports)", lambda: save_result(ctx, tmp / "a", plots=True))
        s2, w2, c2 = timed("save + figures (warm)", lambda: save_result(ctx, tmp / "b", plots=True))
        s3, w3, c3 = timed("save, no figures (warm)", lambda: save_result(ctx, tmp / "c", plots=False))
        print(f"  of which files {s2['write_time']:.2f} s, figures {s2['plot_time']:.2f} s (warm, wall)")
        print(f"demo overhead, cold: wall {w0 + w1:.2f} s, cpu {c0 + c1:.2f} s (target <= 3 s on an idle machine)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
