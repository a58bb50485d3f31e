"""vsini read off a grid on the 12 calibration stars, by the regularised and the profiled read-out.

    PYTHONPATH=src python benchmarks/bench_vsini.py [--stars 0,...,11] [--readouts regularised,profiled]
        [--at truth|estimate] [--cells 300] [--subdivide 1] [--lmbd 1] [--noise-free]
        [--out benchmarks/results/vsini-cpu2.json]

Stars are :mod:`bench_calibration`'s (its independent disc integrator). vsini is profiled over
the truth + :data:`STEPS` km/s with the inclination held (``--at truth``: at the true
inclination; ``--at estimate``: at the same read-out's inclination of
``benchmarks/results/readout-cpu2.json``, what a grid over both would pair it with), every
point solved from the flat start (:func:`dopplermap.search.evaluate_point`) and read by
``bench_calibration.continuous_interval`` on ``chi2_total`` (Delta chi2 <= 1), on ``--cells`` band
cells, each integrated over ``--subdivide`` x ``--subdivide`` sub-cells (``[grid] subdivide``). Read-outs:
``regularised`` (lambda ``--lmbd``, default 1, at ``GRID_TOL``, ``grid``'s default) and ``profiled``
(:data:`dopplermap.search.PROFILE_READOUT`, ``grid --readout profiled``); ``true_map``, a
control: the true map's chi2, no solve (:func:`true_map`). Results:
benchmarks/RESULTS.md, "Stellar parameters: calibration", "vsini by read-out".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_calibration as B  # noqa: E402
from _common import write_json  # noqa: E402

STEPS = np.array([-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5])
READOUT_FILE = Path(__file__).resolve().parent / "results" / "readout-cpu2.json"
OLD_NAME = {"regularised": "old", "profiled": "profiled"}  # bench_readout's names


def settings(problem, which, lmbd=1.0):
    from dopplermap.app.defaults import GRID_TOL
    from dopplermap.search import PROFILE_READOUT

    work = problem.settings.replace(lmbd=lmbd, tol=GRID_TOL, maxiter=max(problem.settings.maxiter, 5000))
    return work if which == "regularised" else work.replace(**PROFILE_READOUT.settings(work))


def profile(s, which, inclination, steps=STEPS, subdivide=1, lmbd=1.0):
    from dopplermap.search import evaluate_point

    p = s["problem"]
    p = p.replace(settings=settings(p, which, lmbd), subdivide=subdivide)
    vals = s["vsini"] + np.asarray(steps, float)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prof = np.array([evaluate_point(p, {"inclination": inclination, "vsini": float(v)})["chi2_total"]
                         for v in vals])
    best, lo, hi = B.continuous_interval(vals, prof, 1.0)
    return dict(best=best, lo68=lo, hi68=hi, err=best - s["vsini"], in68=bool(lo <= s["vsini"] <= hi),
                inclination=inclination, profile=prof.tolist(), wall_s=time.perf_counter() - t0)


def true_map(s, steps=STEPS, subdivide=1):
    """The control: ``chi2_total`` of the true map (its cell averages) with the true rv and no
    offsets at each vsini, no solve: where dopplermap's model puts vsini when the map is known."""
    import jax.numpy as jnp

    from dopplermap.model import forward

    p = s["problem"].replace(subdivide=subdivide)
    c, h = jnp.asarray(np.nan_to_num(s["truth_fssc"])), jnp.asarray(np.nan_to_num(s["truth_fssh"]))
    vals = s["vsini"] + np.asarray(steps, float)
    t0 = time.perf_counter()
    prof = []
    for v in vals:
        q = p.replace(star=p.star.replace(vsini=float(v)))
        model = np.asarray(forward(c, h, jnp.asarray(s["rv"]), jnp.zeros(len(s["rv"])), q.pre))
        prof.append(float(np.sum(((np.asarray(q.obs.flux) - model) / np.asarray(q.obs.err)) ** 2)))
    best, lo, hi = B.continuous_interval(vals, np.array(prof), 1.0)
    return dict(best=best, lo68=lo, hi68=hi, err=best - s["vsini"], in68=bool(lo <= s["vsini"] <= hi),
                inclination=s["inc"], profile=prof, wall_s=time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stars", default=",".join(str(k) for k in range(12)))
    ap.add_argument("--readouts", default="regularised,profiled")
    ap.add_argument("--at", choices=("truth", "estimate"), default="truth")
    ap.add_argument("--steps", default=None, help="vsini - truth, km/s, comma-separated (default STEPS)")
    ap.add_argument("--cells", type=int, default=B.N_CELL)
    ap.add_argument("--subdivide", type=int, default=1)
    ap.add_argument("--lmbd", type=float, default=1.0, help="the regularised read-out's lambda")
    ap.add_argument("--noise-free", action="store_true", help="the stars' profiles without noise (a control)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    steps = STEPS if args.steps is None else np.array([float(x) for x in args.steps.split(",")])
    est = {}
    if args.at == "estimate":
        est = {r["k"]: r for r in json.loads(READOUT_FILE.read_text())["stars"]}
    res = dict(machine=platform.platform(), load_start=os.getloadavg()[0], at=args.at, steps=steps.tolist(),
               cells=args.cells, subdivide=args.subdivide, lmbd=args.lmbd, noise=not args.noise_free, stars=[])
    readouts = [w for w in args.readouts.split(",") if w]
    for k in [int(x) for x in args.stars.split(",") if x]:
        s = B.make_star(k, n_cell=args.cells, noise=not args.noise_free)
        row = dict(k=k, inc=s["inc"], vsini=s["vsini"])
        for which in readouts:
            inc = s["inc"] if args.at == "truth" or which == "true_map" else float(est[k][OLD_NAME[which]]["best"])
            row[which] = r = (true_map(s, steps, args.subdivide) if which == "true_map"
                              else profile(s, which, inc, steps, args.subdivide, args.lmbd))
            print(f"star {k} (vsini {s['vsini']:.0f}, i {inc:.1f}) {which:11s}: {r['best']:.3f} "
                  f"[{r['lo68']:.3f}, {r['hi68']:.3f}] err {r['err']:+.3f}  {r['wall_s']:.0f}s; "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
        res["stars"].append(row)
        if args.out:
            write_json(args.out, res)
    for which in readouts:
        err = np.array([r[which]["err"] for r in res["stars"]])
        res[f"summary_{which}"] = dict(mean_abs_err=float(np.mean(np.abs(err))), bias=float(np.mean(err)),
                                       max_abs_err=float(np.max(np.abs(err))),
                                       n_within_0p3=int(np.sum(np.abs(err) <= 0.3)),
                                       cover68=int(sum(r[which]["in68"] for r in res["stars"])))
        print(which, res[f"summary_{which}"], flush=True)
    res["load_end"] = os.getloadavg()[0]
    if args.out:
        write_json(args.out, res)


if __name__ == "__main__":
    main()
