"""Error of the rv shift against the exact shifted model, per way of shifting.

The exact model at a shift rv is the dense model precomputed on the velocity grid moved by
-rv (the local profiles themselves shifted). Compared, in units of the continuum after the
mean normalisation (max over epochs and velocities): the seed's linear interpolation of the
disc-integrated profile on the data grid (``rv_shift="interpolate"``, what dense and folded
models do), a cubic Lagrange interpolation there, the dense model precomputed on a k times
finer grid and interpolated linearly there, and the binned form's exact shift
(``rv_shift="exact"``). Then the per-epoch rv recovered from data made with the exact
shift, by the interpolating dense model and the exact binned one (:func:`recover`).

    PYTHONPATH=src python benchmarks/bench_rv_shift.py [--out benchmarks/results/rv_shift-cpu2.json]
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
    raw = np.asarray(dm.model.synthesize(fc, fh, dense.line))
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
            raw_f = np.asarray(shift_profiles(jnp.asarray(vf), r, dm.model.synthesize(fc, fh, pre_f.line)))[:, ::k]
            row[f"dense_x{k}_linear"] = float(np.max(np.abs(_mean_normalised(raw_f) - truth)))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return {"rows": rows, "binned_cube_MB": exact.line.nbytes() / 1e6, "dense_cube_MB": dense.line.nbytes() / 1e6}


def recover(n_vel=48, n_cell=1500, n_epoch=20, snr=500.0, seed=3):
    """Per-epoch rv recovered by inversions of data made with the exact shift (each epoch the
    dense model precomputed on its own shifted grid, plus noise): interpolating dense model
    (the default) against the binned exact-rv model."""
    import jax.numpy as jnp

    import dopplermap as dm

    star, grid, times, vels, comps = dm.demo_setup(n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, seed=2)
    vels, times = np.asarray(vels), np.asarray(times)
    rng = np.random.default_rng(seed)
    rv_true = rng.uniform(-2.0, 2.0, n_epoch)
    fc, fh = (jnp.asarray(a) for a in dm.spot_map(grid, dm.DEMO_SPOTS))
    z = jnp.zeros(1)
    clean = np.concatenate([np.asarray(dm.forward(fc, fh, z, z, dm.precompute(
        grid, star, times[e:e + 1], vels - rv_true[e], comps, method="dense"))) for e in range(n_epoch)])
    err = np.full_like(clean, 1.0 / snr)
    obs = dm.Observations.create(times, vels, clean + err * rng.normal(size=clean.shape), err)
    out = {"rv_true": rv_true.tolist()}
    for name, pre in (("dense_interpolate", dm.precompute(grid, star, times, vels, comps, method="dense")),
                      ("binned_exact", dm.precompute(grid, star, times, vels, comps, method="binned", rv_shift="exact"))):
        res = dm.invert(pre, obs, lmbd=1.0, tol=1e-7, maxiter=3000, solver="lbfgsb")
        d = np.asarray(res.rv) - rv_true
        out[name] = {"rv_err_rms": float(np.sqrt(np.mean(d ** 2))), "rv_err_max": float(np.max(np.abs(d))),
                     "rv_err_mean": float(np.mean(d)), "chi2": float(res.chi2), "loss": float(res.loss)}
        print(name, json.dumps(out[name]), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    out = {f"n_vel_{n}": run(n, (0.3, 0.9, 1.7, -2.3)) for n in (48, 64)}
    out["recovery"] = recover()
    if args.out:
        write_json(args.out, out)


if __name__ == "__main__":
    main()
