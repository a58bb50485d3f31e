"""The fixed-entropy read-out of a stellar parameter against the fixed-lambda one.

    PYTHONPATH=src python benchmarks/bench_entropy_readout.py [--stars 0,4] [--cells 1200]
        [--param inclination|domega] [--procs 2] [--out benchmarks/results/entropy-readout-cpu2.json]
    PYTHONPATH=src python benchmarks/bench_entropy_readout.py --tables a.json [b.json ...]

The usual way of the Doppler-imaging literature to read a parameter such as differential rotation
off a grid (Donati, Collier Cameron & Petit 2003, MNRAS 345, 1187; Petit et al. 2002): at every
grid point the map is reconstructed at one fixed information content (the same entropy), and the
chi2 of those maps is compared. dopplermap's ``grid`` reads chi2 at one fixed lambda instead, so
that a node whose map needs less structure gets a lower penalty as well as its own chi2.

For every node this script (1) solves at the working lambda (1, tight tolerance: the "fixed
lambda" read-out); (2) takes the regulariser's value ``S0`` of the best node's map; (3) at every
node finds the lambda at which the map's regulariser equals ``S0`` (regula falsi in log lambda,
each solve warm-started from the nearest one) and reads its ``chi2_total``, corrected to the exact
``S0`` to first order by the stationarity relation ``d chi2 = -lambda d S`` along the path of
minima (the last root-finding step's residual, reported). Both profiles are read by
:func:`bench_calibration.continuous_interval` (Delta chi2 <= 1 / 4).

``--param inclination``: the 12 calibration stars of :mod:`bench_calibration` (its independent
disc integrator), vsini at the truth, nodes 10-90 deg every 10. ``--param domega``: the seven
differential-rotation stars of :mod:`bench_domega` (inclination and vsini at the truth, dOmega
0-0.1 every 0.01). Results: benchmarks/RESULTS.md, "Stellar parameters: calibration".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_calibration as B  # noqa: E402
from _common import pool_rows  # noqa: E402
from bench_readout import read  # noqa: E402

INC_NODES = np.arange(10.0, 90.1, 10.0)
DOMEGA_NODES = np.round(np.arange(0.0, 0.1001, 0.01), 4)
LMBD = 1.0
TOL = 1e-9
MAXITER = 3000
MAX_SOLVES = 8  # per node, for the entropy root


def _star(param, k, cells):
    if param == "inclination":
        s = B.make_star(k, n_cell=cells)
        return s, "inclination", INC_NODES, float(s["inc"]), {"vsini": float(s["vsini"])}
    import bench_domega as D

    s = D.make_star(layout=k, n_cell=cells)
    return s, "domega", DOMEGA_NODES, float(s["domega"]), {}


def _solver(point, lmbd, x0):
    from dopplermap.search import pad_precomputed
    from dopplermap.solvers import invert

    p = point.replace(settings=point.settings.replace(lmbd=float(lmbd), tol=TOL, maxiter=MAXITER))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = invert(pad_precomputed(p.pre), p.obs, **p.invert_kwargs(), x0=x0)
    n = p.obs.n_epoch * p.obs.n_vel
    return dict(lmbd=float(lmbd), chi2_total=float(res.chi2) * n, reg=float(res.regulariser_value),
                loss=float(res.loss), chi2=float(res.chi2), success=bool(res.success),
                iterations=int(res.iterations)), np.asarray(res.x)


def _entropy_root(point, s0, start, n_data):
    """The lambda at which the map's regulariser equals ``s0``; ``start``: a solved (row, x)."""
    rows = [start]
    f = lambda r: r["reg"] - s0  # noqa: E731  (decreasing in lambda)
    a = start
    if abs(f(a[0])) * a[0]["lmbd"] * n_data < 0.05:
        return a, rows
    # bracket: step by a factor e in the direction that moves reg towards s0
    step = 1.0 if f(a[0]) > 0 else -1.0
    b = None
    cur = a
    for _ in range(6):
        nxt = _solver(point, cur[0]["lmbd"] * math.exp(step), cur[1])
        rows.append(nxt)
        if f(nxt[0]) * f(a[0]) <= 0:
            b = nxt
            break
        a = cur = nxt
    if b is None:
        return min(rows, key=lambda r: abs(f(r[0]))), rows
    lo, hi, side = a, b, 0
    best = min((lo, hi), key=lambda r: abs(f(r[0])) * r[0]["lmbd"])
    while len(rows) < MAX_SOLVES and abs(f(best[0])) * best[0]["lmbd"] * n_data >= 0.05:
        sa, sb = math.log(lo[0]["lmbd"]), math.log(hi[0]["lmbd"])
        fa, fb = f(lo[0]), f(hi[0])
        if side == -1:
            fa /= 2
        elif side == 1:
            fb /= 2
        t = sb - fb * (sb - sa) / (fb - fa)
        if not min(sa, sb) < t < max(sa, sb):
            t = 0.5 * (sa + sb)
        near = min((lo, hi), key=lambda r: abs(math.log(r[0]["lmbd"]) - t))
        m = _solver(point, math.exp(t), near[1])
        rows.append(m)
        if f(m[0]) * f(lo[0]) <= 0:
            hi, side = m, -1 if side == 1 else 1
        else:
            lo, side = m, 1 if side == -1 else -1
        best = min((best, m), key=lambda r: abs(f(r[0])) * r[0]["lmbd"])
    return best, rows


def run_star(param, k, cells):
    from dopplermap.search import apply_parameters

    t0 = time.perf_counter()
    s, name, nodes, truth, fixed = _star(param, k, cells)
    prob = s["problem"]
    n_data = prob.obs.n_epoch * prob.obs.n_vel
    points = []
    for v in nodes:
        star, comps = apply_parameters(prob, {name: float(v), **fixed})
        points.append(prob.replace(star=star, components=comps))
    fixed_l = [_solver(pt, LMBD, None) for pt in points]
    chi_l = np.array([r["chi2_total"] for r, _ in fixed_l])
    j0 = int(np.argmin(chi_l))
    s0 = fixed_l[j0][0]["reg"]
    ent, n_solves, resid, ent_rows = [], [], [], []
    for pt, start in zip(points, fixed_l, strict=True):
        (row, _x), rows = _entropy_root(pt, s0, start, n_data)
        corr = row["lmbd"] * (row["reg"] - s0) * n_data  # d chi2_total = -lambda N d S
        ent.append(row["chi2_total"] + corr)
        resid.append(corr)
        n_solves.append(len(rows))
        row["chi2_at_s0"] = row["chi2_total"] + corr
        row["solves"] = len(rows)
        ent_rows.append(row)
    out = dict(param=param, k=k, cells=cells, truth=truth, nodes=nodes.tolist(), s0=s0, s0_node=float(nodes[j0]),
               fixed_lambda=dict(read(nodes, chi_l, truth), rows=[r for r, _ in fixed_l]),
               fixed_entropy=dict(read(nodes, np.array(ent), truth), correction=resid, solves=n_solves, lmbd=[r["lmbd"] for r in ent_rows]),
               wall_s=time.perf_counter() - t0)
    return out


def summary(rows, key):
    err = np.array([r[key]["err"] for r in rows])
    return dict(mae=float(np.mean(np.abs(err))), median=float(np.median(np.abs(err))), bias=float(np.mean(err)),
                in68=int(sum(r[key]["in68"] for r in rows)), in95=int(sum(r[key]["in95"] for r in rows)),
                width=float(np.mean([r[key]["hi68"] - r[key]["lo68"] for r in rows])), n=len(rows))


def tables(rows):
    rows = sorted(rows, key=lambda r: r["k"])
    fmt = "{:.1f}" if rows[0]["param"] == "inclination" else "{:.3f}"
    print("| star | truth | fixed lambda [68 %] | fixed entropy [68 %] | entropy solves | largest correction |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        a, b = r["fixed_lambda"], r["fixed_entropy"]
        cell = lambda d: f"{fmt.format(d['best'])} [{fmt.format(d['lo68'])}, {fmt.format(d['hi68'])}]"  # noqa: E731
        print(f"| {r['k']} | {fmt.format(r['truth'])} | {cell(a)} | {cell(b)} | {sum(b['solves'])} | "
              f"{max(abs(c) for c in b['correction']):.2f} |")
    print()
    print("| read-out | mean abs error | median | bias | 68 % coverage | 95 % coverage | mean 68 % width |")
    print("|---|---|---|---|---|---|---|")
    for key in ("fixed_lambda", "fixed_entropy"):
        m = summary(rows, key)
        print(f"| {key.replace('_', ' ')} | {fmt.format(m['mae'])} | {fmt.format(m['median'])} | "
              f"{fmt.format(m['bias'])} | {m['in68']}/{m['n']} | {m['in95']}/{m['n']} | {fmt.format(m['width'])} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--param", choices=("inclination", "domega"), default="inclination")
    ap.add_argument("--stars", default=None)
    ap.add_argument("--cells", type=int, default=None)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--tables", nargs="+", default=None)
    a = ap.parse_args()
    if a.tables:
        rows = [r for p in a.tables for r in json.loads(Path(p).read_text())["stars"]]
        tables(rows)
        return
    cells = a.cells or (1200 if a.param == "inclination" else 300)
    ks = [int(k) for k in a.stars.split(",")] if a.stars else list(range(12 if a.param == "inclination" else 7))
    res = dict(command=" ".join(sys.argv), param=a.param, cells=cells, lmbd=LMBD, tol=TOL)
    rows = pool_rows([(run_star, (a.param, k, cells)) for k in ks], a.procs, res, a.out,
                     lambda r: f"star {r['k']}: truth {r['truth']}: fixed lambda {r['fixed_lambda']['best']:.3f}, "
                               f"fixed entropy {r['fixed_entropy']['best']:.3f} ({r['wall_s']:.0f} s)")
    tables(rows)


if __name__ == "__main__":
    main()
