"""The support read-out calibrated by simulation (``grid --readout support --calibrate N``) on
the 12 calibration stars, against the same read-out uncalibrated.

    PYTHONPATH=src python benchmarks/bench_calibrated_support.py [--stars 0,1,...] [--cells 1200]
        [--n-sim 4] [--procs 2] [--stop-after S] [--out benchmarks/results/calibrated-support.json]
    PYTHONPATH=src python benchmarks/bench_calibrated_support.py --vsini INCLINATION.json [--procs 2] [--out V.json]
    PYTHONPATH=src python benchmarks/bench_calibrated_support.py --tables a.json b.json
    ... --map-at RESULTS.json: every trial simulated from the one map at that file's raw estimate

Stars are :mod:`bench_calibration`'s (its independent disc integrator on 11 740 cells). Each star's
inclination is calibrated by :func:`dopplermap.calibrate.calibrate_parameter` with
``readout="support"`` over 10-90 deg every 10 deg (``--step``; the support read-out's nodes in
RESULTS.md), the same values as trials, vsini held at the truth, the read-out's settings
the regularised ones of ``bench_readout.py``'s ``old`` (lambda 1, tol 1e-5), simulations on a grid
of 4x the cells (the default for observed data). The uncalibrated support read-out (``raw``) is
the same calibration's observed-data estimate; its interval is its own profile's Delta chi2 <= 1
/ 4 range (:func:`bench_calibration.continuous_interval`), as ``grid --readout support`` prints.
``--readout regularised``: the control, the regularised read-out calibrated the same way
(``grid --calibrate N``).
``--vsini``: then each star's vsini, raw and calibrated by the same read-out at its calibrated
inclination (:func:`vsini_star`). A star a spawned single-threaded worker with ``--procs``
(``bench_readout._star_pool``).
Results: benchmarks/RESULTS.md, "The support read-out calibrated".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import bench_calibration as B  # noqa: E402
import bench_readout as R  # noqa: E402
from _common import write_json  # noqa: E402


def calibrate_star(k, cells, n_sim, step=10.0, seed=0, readout="support", map_at=None, subdivide=1):
    """Star ``k``'s ``readout`` (``support``, or ``regularised``: the control), raw and calibrated
    (a row of the tables: keys ``readout`` and ``"cal_" + readout``)."""
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter

    t0 = time.perf_counter()
    incs = np.arange(10.0, 90.0 + 1e-9, step)
    s = B.make_star(k, n_cell=cells)
    p = s["problem"]
    p = p.replace(settings=R._settings(p, "old"), subdivide=subdivide)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = calibrate_parameter(p, "inclination", incs, fixed={"vsini": s["vsini"]}, trials=incs,
                                options=CalibrationOptions(n_sim=n_sim, seed=seed, readout=readout,
                                                           trial_map_at=map_at))
    row = dict(k=k, inc=s["inc"], vsini=s["vsini"], n_epoch=s["n_epoch"], snr=s["snr"], n_cell=cells, n_sim=n_sim,
               readout=readout, raw=float(c.raw), trial_map_at=map_at, subdivide=subdivide)
    row[readout] = dict(R.read(incs, c.profile, s["inc"]), wall_s=0.0, unconverged=0)
    row["cal_" + readout] = dict(best=c.estimate, lo68=c.lo68, hi68=c.hi68, lo95=c.lo95, hi95=c.hi95,
                                wall_s=c.seconds, unconverged=int(c.unconverged or 0), lo_open=c.lo_open,
                                hi_open=c.hi_open, no_crossing=c.no_crossing)
    row.update(sims=c.sims.tolist(), center=c.center.tolist(), spread=c.spread.tolist(), profile=c.profile.tolist(),
               n_solves=c.n_solves, mode=c.mode, warnings=[str(w.message)[:300] for w in caught],
               wall_s=time.perf_counter() - t0)
    return row


def vsini_star(k, cells, n_sim, inc, seed=1, map_at=None, subdivide=1):
    """Star ``k``'s vsini by the support read-out, raw and calibrated, with the inclination held at
    ``inc`` (the calibrated one: ``grid --calibrate`` calibrates the axes in turn): values the
    truth -2..+2 km/s every 0.5, trials every 1 km/s (:data:`bench_calibration.VSINI_STEPS`)."""
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter

    t0 = time.perf_counter()
    s = B.make_star(k, n_cell=cells)
    p = s["problem"]
    p = p.replace(settings=R._settings(p, "old"), subdivide=subdivide)
    values = s["vsini"] + np.arange(-2.0, 2.0 + 1e-9, 0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = calibrate_parameter(p, "vsini", values, fixed={"inclination": float(inc)}, trials=s["vsini"] + B.VSINI_STEPS,
                                options=CalibrationOptions(n_sim=n_sim, seed=seed, readout="support",
                                                           trial_map_at=map_at))
    return dict(k=k, inc=s["inc"], vsini=s["vsini"], held_inc=float(inc), n_cell=cells, n_sim=n_sim, trial_map_at=map_at,
                subdivide=subdivide,
                support=dict(R.read(values, c.profile, s["vsini"]), wall_s=0.0, unconverged=0), raw=float(c.raw),
                cal_support=dict(best=c.estimate, lo68=c.lo68, hi68=c.hi68, lo95=c.lo95, hi95=c.hi95,
                                 wall_s=c.seconds, unconverged=int(c.unconverged or 0), lo_open=c.lo_open,
                                 hi_open=c.hi_open, no_crossing=c.no_crossing),
                sims=c.sims.tolist(), center=c.center.tolist(), values=values.tolist(),
                warnings=[str(w.message)[:300] for w in caught], wall_s=time.perf_counter() - t0)


def vsini_tables(rows):
    rows = sorted(rows, key=lambda r: r["k"])
    out = ["| star | vsini | inclination held | support, raw [68 %] | error | calibrated [68 %] (95 %) | error |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        a, c = r["support"], r["cal_support"]
        out.append(f"| {r['k']} | {r['vsini']:.0f} | {r['held_inc']:.1f} | {a['best']:.2f} [{a['lo68']:.2f}, "
                   f"{a['hi68']:.2f}] | {a['best'] - r['vsini']:+.2f} | {c['best']:.2f} [{c['lo68']:.2f}, "
                   f"{c['hi68']:.2f}] ({c['lo95']:.2f}-{c['hi95']:.2f}) | {c['best'] - r['vsini']:+.2f} |")
    for which in ("support", "cal_support"):
        e = np.array([r[which]["best"] - r["vsini"] for r in rows])
        c68 = sum(r[which]["lo68"] <= r["vsini"] <= r[which]["hi68"] for r in rows)
        c95 = sum(r[which]["lo95"] <= r["vsini"] <= r[which]["hi95"] for r in rows)
        out.append(f"{which}: mean abs error {np.mean(np.abs(e)):.2f} km/s, bias {np.mean(e):+.2f}, largest "
                   f"{np.max(np.abs(e)):.2f}, within 0.3 km/s {int(np.sum(np.abs(e) <= 0.3))}/{len(rows)}, 68 % "
                   f"{c68}/{len(rows)}, 95 % {c95}/{len(rows)}")
    return "\n".join(out)


def _worker(k, cells, n_sim, step, readout, map_at=None, subdivide=1):
    return calibrate_star(k, cells, n_sim, step, readout=readout, map_at=map_at, subdivide=subdivide)


def _vsini_worker(k, cells, n_sim, inc, map_at=None, subdivide=1):
    return vsini_star(k, cells, n_sim, inc, map_at=map_at, subdivide=subdivide)


def summary(rows, which):
    err = np.array([r[which]["best"] - r["inc"] for r in rows])
    c68 = sum(r[which]["lo68"] <= r["inc"] <= r[which]["hi68"] for r in rows)
    c95 = sum(r[which]["lo95"] <= r["inc"] <= r[which]["hi95"] for r in rows)
    width = np.mean([r[which]["hi68"] - r[which]["lo68"] for r in rows])
    return (f"| {which} | {len(rows)} | {np.mean(np.abs(err)):.1f} deg | {np.median(np.abs(err)):.1f} deg | "
            f"{np.mean(err):+.1f} deg | {c68}/{len(rows)} | {c95}/{len(rows)} | {width:.1f} deg |")


def tables(rows):
    rows = sorted(rows, key=lambda r: r["k"])
    ro = rows[0].get("readout", "support")
    out = [f"| star | truth | E | S/N | {ro}, raw [68 %] (95 %) | calibrated [68 %] (95 %) | refits unconverged | s |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        a, c = r[ro], r["cal_" + ro]
        out.append(f"| {r['k']} | {r['inc']:.0f} | {r['n_epoch']} | {r['snr']:.0f} | {a['best']:.1f} [{a['lo68']:.1f}, "
                   f"{a['hi68']:.1f}] ({a['lo95']:.1f}-{a['hi95']:.1f}) | {c['best']:.1f} [{c['lo68']:.1f}, "
                   f"{c['hi68']:.1f}] ({c['lo95']:.1f}-{c['hi95']:.1f}) | {c['unconverged']} | {c['wall_s']:.0f} |")
    out += ["", "| read-out | stars | mean abs error | median | bias | 68 % coverage | 95 % coverage | mean 68 % width |",
            "|---|---|---|---|---|---|---|---|", summary(rows, ro), summary(rows, "cal_" + ro)]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stars", default=",".join(str(k) for k in range(len(B.STARS))))
    ap.add_argument("--cells", type=int, default=1200)
    ap.add_argument("--n-sim", type=int, default=4)
    ap.add_argument("--step", type=float, default=10.0, help="grid and trial step, deg")
    ap.add_argument("--readout", default="support", choices=("support", "regularised"),
                    help="the read-out calibrated (regularised: the control, grid --calibrate N)")
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--stop-after", type=float, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--tables", nargs="+", default=None, help="print the tables of these result files")
    ap.add_argument("--vsini", default=None, help="an inclination result file: calibrate each star's vsini by the "
                    "support read-out at its calibrated inclination (--out: the vsini results)")
    ap.add_argument("--map-at", default=None, help="a result file of the same stars (and axis): simulate every "
                    "trial from the one map fitted at that file's raw estimate (CalibrationOptions.trial_map_at) "
                    "instead of each trial value's own map")
    ap.add_argument("--subdivide", type=int, default=1, help="each cell's lines integrated over M x M sub-cells "
                    "(Problem.subdivide)")
    args = ap.parse_args()
    map_at = {}
    if args.map_at:
        map_at = {r["k"]: float(r["raw"]) for r in json.loads(Path(args.map_at).read_text())["stars"]}
    if args.tables:
        res = [json.loads(Path(path).read_text()) for path in args.tables]
        rows = [r for x in res for r in x["stars"]]
        print(vsini_tables(rows) if all("held_inc" in r for r in rows) else tables(rows))
        return
    if args.vsini:
        incs = {r["k"]: r["cal_support"]["best"] for r in json.loads(Path(args.vsini).read_text())["stars"]}
        ks = [int(k) for k in args.stars.split(",") if k != "" and int(k) in incs]
        res = dict(command=" ".join(sys.argv), cells=args.cells, n_sim=args.n_sim, stars=[])
        R._worker_env()
        t0 = time.perf_counter()
        R._star_pool({k: (_vsini_worker, (k, args.cells, args.n_sim, incs[k], map_at.get(k), args.subdivide))
                      for k in ks},
                     lambda k, row: row,
                     ("support", "cal_support"), args.procs, res, args.out, args.stop_after, t0)
        if args.out:
            write_json(args.out, res)
        print(vsini_tables(res["stars"]))
        return
    ks = [int(k) for k in args.stars.split(",") if k != ""]
    incs = np.arange(10.0, 90.0 + 1e-9, args.step)
    res = dict(command=" ".join(sys.argv), cells=args.cells, subdivide=args.subdivide, n_sim=args.n_sim,
               inc_grid=incs.tolist(),
               trials=incs.tolist(), stars=[])
    t0 = time.perf_counter()
    order = sorted(ks, key=lambda k: -B.STARS[k][2])  # the most epochs first
    if args.procs <= 1:
        for k in order:
            res["stars"].append(calibrate_star(k, args.cells, args.n_sim, args.step, readout=args.readout,
                                               map_at=map_at.get(k), subdivide=args.subdivide))
            R._print_star(res["stars"][-1], (args.readout, "cal_" + args.readout))
            if args.out:
                write_json(args.out, res)
    else:
        R._worker_env()
        jobs = {k: (_worker, (k, args.cells, args.n_sim, args.step, args.readout, map_at.get(k), args.subdivide))
                for k in order}
        R._star_pool(jobs, lambda k, row: row, (args.readout, "cal_" + args.readout), args.procs, res, args.out,
                     args.stop_after, t0)
    res["wall_s"] = time.perf_counter() - t0
    if args.out:
        write_json(args.out, res)
    if res["stars"]:
        print(tables(res["stars"]))


if __name__ == "__main__":
    main()
