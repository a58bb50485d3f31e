"""Error of the rv shift against the exact shifted model, per way of shifting.

The exact model at a shift rv is the dense model precomputed on the velocity grid moved by
-rv (the local profiles themselves shifted). Compared, in units of the continuum after the
mean normalisation (max over epochs and velocities): the seed's linear interpolation of the
disc-integrated profile on the data grid (``rv_shift="interpolate"``, what dense and folded
models do), a cubic Lagrange interpolation there, the dense model precomputed on a k times
finer grid and interpolated linearly there, and the binned form's exact shift
(``rv_shift="exact"``).

    PYTHONPATH=src python benchmarks/bench_rv_shift.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from _common import write_json  # benchmarks/ is the script's folder


def _mean_normalised(raw):
    return raw / raw.mean(axis=1, keepdims=True)


def cubic_shift(vels, rv, raw):
    """``raw(v - rv)`` by cubic Lagrange interpolation on the uniform grid ``vels`` (linear at the ends)."""
    from dopplermap._linops import lagrange_weights

    dv = vels[1] - vels[0]
    out = np.empty_like(raw)
    for e in range(raw.shape[0]):
        x = (vels - rv - vels[0]) / dv
        j = np.clip(np.floor(x).astype(int), 1, len(vels) - 3)
        w = lagrange_weights(x - j)
        out[e] = sum(w[:, b] * raw[e, j + b - 1] for b in range(4))
        edge = (x < 1) | (x > len(vels) - 2)
        out[e, edge] = np.interp(vels[edge] - rv, vels, raw[e])
    return out


def run(n_vel: int, rvs, n_cell=1500, n_epoch=20, fine=(2, 4)):
    import jax.numpy as jnp

    import dopplermap as dm
    from dopplermap.model import shift_profiles

    star, grid, times, vels, comps = dm.demo_setup(n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, seed=2)
    vels = np.asarray(vels)
    fc, fh = dm.spot_map(grid, dm.DEMO_SPOTS)
    fc, fh = jnp.asarray(fc), jnp.asarray(fh)
    z = jnp.zeros(n_epoch)
    dense = dm.precompute(grid, star, times, vels, comps, method="dense")
    exact = dm.precompute(grid, star, times, vels, comps, method="binned", rv_shift="exact")
    raw = np.asarray(dm.synthesize(fc, fh, dense.line))
    dv = float(vels[1] - vels[0])
    fines = {}
    for k in fine:
        vf = vels[0] + dv / k * np.arange(k * (n_vel - 1) + 1)
        fines[k] = (vf, dm.precompute(grid, star, times, vf, comps, method="dense"))
    rows = []
    for rv in rvs:
        truth = np.asarray(dm.forward(fc, fh, z, z, dm.precompute(grid, star, times, vels - rv, comps, method="dense")))
        r = jnp.full(n_epoch, rv)
        row = {"n_vel": n_vel, "step_kms": dv, "rv_kms": rv,
               "seed_linear": float(np.max(np.abs(np.asarray(dm.forward(fc, fh, r, z, dense)) - truth))),
               "cubic_on_data_grid": float(np.max(np.abs(_mean_normalised(cubic_shift(vels, rv, raw)) - truth))),
               "binned_exact": float(np.max(np.abs(np.asarray(dm.forward(fc, fh, r, z, exact)) - truth)))}
        for k, (vf, pre_f) in fines.items():
            raw_f = np.asarray(shift_profiles(jnp.asarray(vf), r, dm.synthesize(fc, fh, pre_f.line)))[:, ::k]
            row[f"dense_x{k}_linear"] = float(np.max(np.abs(_mean_normalised(raw_f) - truth)))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"rows": rows, "binned_cube_MB": exact.line.nbytes() / 1e6, "dense_cube_MB": dense.line.nbytes() / 1e6}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    out = {f"n_vel_{n}": run(n, (0.3, 0.9, 1.7, -2.3)) for n in (48, 64)}
    if args.out:
        write_json(args.out, out)


if __name__ == "__main__":
    main()
