"""Laplace uncertainties at real size: LO Peg (4,584 cells, 16 epochs x 89 velocities).

    PYTHONPATH=src python benchmarks/bench_laplace_lopeg.py [--diagonals lowrank,dense] [--width posterior]
        [--out benchmarks/results/laplace_lopeg-cpu2.json]

Imports ZDIpy's set-up (``../shared/data/lopeg``) as ``dopplermap import-zdipy`` does, fits
the map as ``dopplermap invert`` does (error scale from the residuals, the TOML's settings),
then times ``laplace_cost(measure=True)`` and ``laplace`` for each diagonal asked (wall and
process CPU seconds, the process' peak memory after each), and compares every diagonal's
sigma with the first one's. ``hutchinson`` (64 probes) takes many minutes.
"""

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import write_json  # benchmarks/ is the script's folder

from dopplermap import uncertainty as U
from dopplermap.cli import main
from dopplermap.config import load_config
from dopplermap.problem import from_config
from dopplermap.search import apply_error_scale
from dopplermap.solvers import invert

LOPEG = Path(__file__).resolve().parents[2] / "shared" / "data" / "lopeg"


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main_(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--diagonals", default="lowrank,dense")
    ap.add_argument("--width", default="posterior")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not (LOPEG / "inzdi.dat").is_file():
        raise SystemExit(f"LO Peg data not found at {LOPEG}")
    with tempfile.TemporaryDirectory() as tmp:
        toml = Path(tmp) / "lopeg.toml"
        assert main(["import-zdipy", str(LOPEG / "inzdi.dat"), str(LOPEG / "model-voigt-line.dat"), "--out",
                     str(toml), "--teff", "4500", "--spot-teff", "3500"]) == 0
        prob = from_config(load_config(toml))
        if any(e.pending for e in prob.error_scale):
            prob = apply_error_scale(prob)
    best = invert(prob)
    prob = prob.replace(settings=prob.settings.replace(tol=1e-6, maxiter=1000))  # as `dopplermap invert` does
    out = {"load_start": os.getloadavg(), "n_cell": prob.pre.n_cell, "chi2": float(best.chi2),
           "peak_mib_before": peak_mib(), "runs": []}
    print(f"LO Peg: {prob.pre.n_cell} cells, chi2 {best.chi2:.4f}, peak {out['peak_mib_before']:.0f} MiB before")
    ref = None
    for diag in args.diagonals.split(","):
        t, c = time.perf_counter(), time.process_time()
        cost = U.laplace_cost(prob, best, width=args.width, diagonal=diag, measure=True)
        t_cost, c_cost = time.perf_counter() - t, time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        unc = U.laplace(prob, best, width=args.width, diagonal=diag, cost=cost)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        sig = np.concatenate([unc.sigma_fssc, unc.sigma_fssh])
        ok = np.isfinite(sig)
        row = {"diagonal": diag, "plan": cost.describe(), "cost_wall": t_cost, "cost_cpu": c_cost, "wall": wall,
               "cpu": cpu, "peak_mib": peak_mib(), "note": unc.note, "n_crossing": unc.n_crossing,
               "median_sigma_fssc_seen": float(np.median(unc.sigma_fssc[~unc.never_visible]))}
        if ref is None:
            ref = sig
        else:
            row["max_rel_diff_to_first"] = float(np.max(np.abs(sig[ok] / ref[ok] - 1.0)))
        out["runs"].append(row)
        print(row)
    out["load_end"] = os.getloadavg()
    if args.out:
        write_json(args.out, out)


if __name__ == "__main__":
    main_()
