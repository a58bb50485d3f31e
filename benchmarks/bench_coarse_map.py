"""A map coarser than the model's grid: the inclination read-outs on a fine model with a coarse map.

    PYTHONPATH=src python benchmarks/bench_coarse_map.py [--stars 0,4] [--fine 2500] [--coarse 300]
        [--procs 2] [--out benchmarks/results/coarse-map-cpu2.json]
    PYTHONPATH=src python benchmarks/bench_coarse_map.py --tables a.json [b.json ...]

The inclination's information depends on the map's parametrisation (the support bound is 4.9 deg
on 300 cells and 30.5 on 2500 for the same profiles), while a coarse grid's own model error
decides the read-out on 300 cells. Here the line profiles are synthesised on the fine grid
(each fine cell with its own velocity, limb angle and area) and the map has one filling factor
per coarse cell, shared by the fine cells whose centres lie in it: the dense form's slot-to-cell
index is replaced by the coarse cell of each slot's fine cell (an exact linear map
``f_fine = P f_coarse``), the entropy weighted by the coarse cells' areas, Tikhonov on the coarse
neighbours.

For each of :mod:`bench_calibration`'s 12 stars (its independent disc integrator), vsini at the
truth, nodes 10-90 deg every 10: the regularised solves (lambda 1, tol 1e-5, from the flat start:
``regularised``), then the support refit as ``grid --readout support`` does it (the support of
the best node's map, the map refitted at every node with only those cells free and no
regulariser, Gauss-Newton to tol 1e-10: ``support``); both read by
:func:`bench_calibration.continuous_interval`. Results: benchmarks/RESULTS.md, "Stellar
parameters: calibration".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_calibration as B  # noqa: E402
from _common import pool_rows  # noqa: E402
from bench_readout import read  # noqa: E402

NODES = np.arange(10.0, 90.1, 10.0)
REG = dict(lmbd=1.0, tol=1e-5, maxiter=1000)


def coarse_index(fine, coarse) -> np.ndarray:
    """(n_fine,) the coarse cell holding each fine cell's centre (band grids: by their bounds)."""
    lat, lon = np.asarray(fine.lat), np.asarray(fine.lon) % (2 * np.pi)  # rad
    lb, ob = coarse.lat_bounds, coarse.lon_bounds
    inside = ((lat[:, None] >= lb[None, :, 0]) & (lat[:, None] <= lb[None, :, 1])
              & (lon[:, None] >= ob[None, :, 0]) & (lon[:, None] < ob[None, :, 1]))
    idx = np.argmax(inside, axis=1)
    missing = ~inside.any(axis=1)
    if missing.any():  # rounding at a boundary: the nearest centre
        def xyz(la, lo):
            return np.stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)], -1)
        c = xyz(np.asarray(coarse.lat), np.asarray(coarse.lon))
        idx[missing] = np.argmax(xyz(lat[missing], lon[missing]) @ c.T, axis=1)
    return idx


def coarse_pre(pre, fine, coarse, index):
    """``pre`` (dense, on ``fine``) with one filling factor per cell of ``coarse``."""
    import jax.numpy as jnp

    from dopplermap.model import Precomputed

    line = pre.line
    cell_f = np.asarray(line.cell)
    cell_c = index[cell_f].astype(np.int32)
    n_e, n_s = cell_c.shape
    pos = np.full((n_e, coarse.n_cell), n_s, np.int32)  # a slot of each coarse cell (its shape: n_cell)
    w = np.abs(np.asarray(line.weight)).sum(axis=2) > 0
    e, s = np.nonzero(w)
    pos[e, cell_c[e, s]] = s
    form = dataclasses.replace(line, cell=jnp.asarray(cell_c), pos=jnp.asarray(pos))
    area = np.bincount(index, weights=np.asarray(fine.area, float), minlength=coarse.n_cell)
    return Precomputed(line=form, cell_area=jnp.asarray(area), edges=jnp.asarray(coarse.edges))


def _points(s, fine_cells, coarse_cells):
    import dopplermap as dm
    from dopplermap.search import apply_parameters

    prob = s["problem"]
    prob = prob.replace(settings=prob.settings.replace(**REG))
    fine, coarse = prob.grid, dm.latitude_band_grid(coarse_cells)
    index = coarse_index(fine, coarse)
    out = []
    for v in NODES:
        star, comps = apply_parameters(prob, {"inclination": float(v), "vsini": float(s["vsini"])})
        point = prob.replace(star=star, components=comps)
        out.append((point, coarse_pre(point.pre, fine, coarse, index)))
    return prob, coarse, index, out


def run_star(k, fine_cells, coarse_cells):
    from dopplermap.constants import FILL_MIN
    from dopplermap.search import SUPPORT_READOUT, pad_precomputed, support_mask
    from dopplermap.solvers import SolveOptions, finish, invert, prepare
    from dopplermap.solvers.newton import solve_newton

    t0 = time.perf_counter()
    s = B.make_star(k, n_cell=fine_cells)
    prob, coarse, index, pts = _points(s, fine_cells, coarse_cells)
    n_data = prob.obs.n_epoch * prob.obs.n_vel
    n = coarse.n_cell
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = [invert(pad_precomputed(pc), pt.obs, **pt.invert_kwargs()) for pt, pc in pts]
        chi_r = np.array([r.chi2 * n_data for r in reg])
        j = int(np.argmin(chi_r))
        ro = SUPPORT_READOUT
        masks = [support_mask(coarse, f, ro.threshold, ro.dilate_deg) for f in (reg[j].fssc, reg[j].fssh)]
        refits = []
        for (pt, pc), r in zip(pts, reg, strict=True):
            settings = pt.settings.replace(lmbd=ro.lmbd, tol=ro.tol, maxiter=ro.maxiter, solver="newton")
            setup = prepare(pad_precomputed(pc), pt.obs, settings, x0=r.x, solve=SolveOptions())
            lo, hi = setup.lower.copy(), setup.upper.copy()
            for c, m in enumerate(masks):
                lo[c * n:(c + 1) * n][~m] = FILL_MIN
                hi[c * n:(c + 1) * n][~m] = FILL_MIN
            setup = dataclasses.replace(setup, lower=lo, upper=hi, x0=np.clip(setup.x0, lo, hi))
            refits.append(finish(setup, solve_newton(setup, None), "newton"))
    chi_s = np.array([r.chi2 * n_data for r in refits])
    return dict(k=k, truth=float(s["inc"]), fine=fine_cells, coarse=coarse_cells, nodes=NODES.tolist(),
                regularised=read(NODES, chi_r, s["inc"]), support=read(NODES, chi_s, s["inc"]),
                support_cells=[int(m.sum()) for m in masks], refit_iterations=[int(r.iterations) for r in refits],
                unconverged=int(sum(not r.success for r in refits)), wall_s=time.perf_counter() - t0)


def tables(rows):
    rows = sorted(rows, key=lambda r: r["k"])
    print("| star | truth | regularised [68 %] | support [68 %] | support cells | refits unconverged |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        def cell(d):
            return f"{d['best']:.1f} [{d['lo68']:.1f}, {d['hi68']:.1f}]"
        print(f"| {r['k']} | {r['truth']:.0f} | {cell(r['regularised'])} | {cell(r['support'])} | "
              f"{r['support_cells'][0]} + {r['support_cells'][1]} | {r['unconverged']} |")
    print()
    print("| read-out | mean abs error | median | bias | 68 % coverage | 95 % coverage | mean 68 % width |")
    print("|---|---|---|---|---|---|---|")
    for key in ("regularised", "support"):
        err = np.array([r[key]["err"] for r in rows])
        w = np.mean([r[key]["hi68"] - r[key]["lo68"] for r in rows])
        print(f"| {key} | {np.mean(np.abs(err)):.1f} deg | {np.median(np.abs(err)):.1f} | {np.mean(err):+.1f} | "
              f"{sum(r[key]['in68'] for r in rows)}/{len(rows)} | {sum(r[key]['in95'] for r in rows)}/{len(rows)} | "
              f"{w:.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stars", default=None)
    ap.add_argument("--fine", type=int, default=2500)
    ap.add_argument("--coarse", type=int, default=300)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--tables", nargs="+", default=None)
    a = ap.parse_args()
    if a.tables:
        tables([r for p in a.tables for r in json.loads(Path(p).read_text())["stars"]])
        return
    ks = [int(k) for k in a.stars.split(",")] if a.stars else list(range(12))
    res = dict(command=" ".join(sys.argv), fine=a.fine, coarse=a.coarse)
    rows = pool_rows([(run_star, (k, a.fine, a.coarse)) for k in ks], a.procs, res, a.out,
                     lambda r: f"star {r['k']}: truth {r['truth']:.0f}: regularised {r['regularised']['best']:.1f}, "
                               f"support {r['support']['best']:.1f} ({r['wall_s']:.0f} s)")
    tables(rows)


if __name__ == "__main__":
    main()
