"""Scaling of value-and-gradient time and peak memory with n_cell, n_epoch, n_vel.

Each size runs in a fresh process (peak RSS = ru_maxrss of that child; on GPU also the
device's peak bytes). Doubling series from the seed size (2500 cells, 150 epochs, 32 vels):
n_cell to 40k, n_epoch to 1200, n_vel to 128, plus the 20k x 600 x 64 memory check.
Prints a table with the growth factor per doubling. ``--method binned`` (default: the
memory-light model, the same method at every size) or ``auto`` (what ``precompute`` picks:
dense, folded to float32 as the solvers use it, up to 512 MiB of cube; binned beyond).

    PYTHONPATH=src python benchmarks/bench_scaling.py [--out benchmarks/results/scaling-cpu2.json] [--quick] [--method auto]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np
from _common import write_json  # benchmarks/ is the script's folder

BASE = (2500, 150, 32)


def child(n_cell, n_epoch, n_vel, method="binned"):
    import jax
    import jax.numpy as jnp

    import dopplermap as dm
    from dopplermap.objective import Layout, ObjectiveData, Observations
    from dopplermap.solvers.program import compiled_value_and_grad
    star, grid, times, vels, comps = dm.demo_setup(n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel)
    t0 = time.perf_counter()
    pre = dm.solve_form(dm.precompute(grid, star, times, vels, comps, method=method))
    pre_t = time.perf_counter() - t0
    lay = Layout(pre.n_cell, pre.n_epoch)
    x = jnp.asarray(lay.initial(0.05))
    flux = np.ones((n_epoch, n_vel))
    obs = Observations.create(times, vels, flux, np.full_like(flux, 0.002))
    data = ObjectiveData(obs=obs)
    fn, timing = compiled_value_and_grad(x, jnp.asarray(1.0), pre, data)
    jax.block_until_ready(fn(x, 1.0, pre, data))
    ts = []
    for _ in range(10):
        t1 = time.perf_counter()
        jax.block_until_ready(fn(x, 1.0, pre, data))
        ts.append(time.perf_counter() - t1)
    stats = jax.devices()[0].memory_stats() or {}
    return {"n_cell": pre.n_cell, "n_epoch": n_epoch, "n_vel": n_vel, "method": pre.line.kind, "vg_ms": 1e3 * min(ts),
            "precompute_s": pre_t, "compile_s": timing["compile"] + timing["trace_lower"],
            "model_MB": pre.line.nbytes() / 1e6,
            "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "device_peak_MB": stats.get("peak_bytes_in_use", 0) / 1e6}


def run(size, method="binned"):
    p = subprocess.run([sys.executable, __file__, "--child", *map(str, size), "--method", method],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return {"n_cell": size[0], "n_epoch": size[1], "n_vel": size[2], "error": p.stderr[-400:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true", help="two doublings per axis only")
    ap.add_argument("--child", nargs=3, type=int)
    ap.add_argument("--method", choices=["binned", "auto"], default="binned")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, method=args.method)))
        return
    k = 2 if args.quick else 4
    series = {"n_cell": [(BASE[0] * 2**i, BASE[1], BASE[2]) for i in range(k + 1)],
              "n_epoch": [(BASE[0], BASE[1] * 2**i, BASE[2]) for i in range(1, min(k, 3) + 1)],
              "n_vel": [(BASE[0], BASE[1], BASE[2] * 2**i) for i in range(1, min(k, 2) + 1)]}
    rows = {}
    results = {"series": {}, "target": None}
    for axis, sizes in series.items():
        res = []
        for s in sizes:
            if s not in rows:
                rows[s] = run(s, args.method)
            res.append(rows[s])
        results["series"][axis] = res
    results["target"] = run((20000, 600, 64), args.method)
    base = rows[BASE]
    hdr = f"{'series':8s} {'n_cell':>7s} {'n_epoch':>7s} {'n_vel':>5s} {'vg ms':>9s} {'x/doubling':>10s} " \
          f"{'size ratio':>10s} {'RSS MB':>8s} {'dev MB':>8s} {'model MB':>9s}"
    print(hdr)
    for axis, res in results["series"].items():
        prev = base if axis != "n_cell" else None
        for r in res:
            if "error" in r:
                print(axis, r)
                continue
            growth = r["vg_ms"] / prev["vg_ms"] if prev else float("nan")
            ratio = r["n_cell"] * r["n_epoch"] * r["n_vel"] / (base["n_cell"] * base["n_epoch"] * base["n_vel"])
            print(f"{axis:8s} {r['n_cell']:7d} {r['n_epoch']:7d} {r['n_vel']:5d} {r['vg_ms']:9.2f} {growth:10.2f} "
                  f"{ratio:10.1f} {r['peak_rss_MB']:8.0f} {r['device_peak_MB']:8.0f} {r['model_MB']:9.1f}")
            prev = r
    t = results["target"]
    if "error" not in t:
        ratio = t["n_cell"] * t["n_epoch"] * t["n_vel"] / (base["n_cell"] * base["n_epoch"] * base["n_vel"])
        t["time_ratio_vs_seed"] = t["vg_ms"] / base["vg_ms"]
        t["size_ratio_vs_seed"] = ratio
        print(f"target 20k x 600 x 64: vg {t['vg_ms']:.1f} ms ({t['time_ratio_vs_seed']:.1f}x seed for "
              f"{ratio:.0f}x the size), peak RSS {t['peak_rss_MB']:.0f} MB, device peak {t['device_peak_MB']:.0f} MB")
    else:
        print("target", t)
    if args.out:
        write_json(args.out, results)


if __name__ == "__main__":
    main()
