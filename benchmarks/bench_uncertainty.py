"""Hessian-vector products and Laplace uncertainties at the seed's size.

    PYTHONPATH=src python benchmarks/bench_uncertainty.py [--quick] [--out benchmarks/results/uncertainty-cpu2.json]

The unbatched and the batched path in the same process:

* one HVP at a time on the dense float64 cube (a compiled single HVP, the unbatched path)
  against ``chunk`` HVPs in one vmapped call on the blocked float64 form
  (:func:`dopplermap.uncertainty.hvp_form`), per HVP, with their agreement;
* whole ``laplace(width="posterior")`` and ``laplace(width="sandwich")`` (dense diagonal)
  wall times and the sandwich's diagonal ``diag(A F A)`` by the three-operand
  ``np.einsum`` against the BLAS product ``A @ F`` and a row-wise dot with ``A``, on random
  1200 x 1200 matrices (both skipped with ``--quick``).
"""

import argparse
import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from _common import write_json  # benchmarks/ is the script's folder

import dopplermap as dm
from dopplermap import uncertainty as U


def _best_of(fn, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="HVPs only (no whole Laplace runs)")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    jax.config.update("jax_enable_x64", True)
    star, grid, times, vels, comps = dm.demo_setup()
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500)
    pre = dm.precompute(grid, star, times, vels, comps)
    best = dm.invert(pre, sim.obs, lmbd=1.0)
    out = {"machine": platform.node(), "cpu_count": os.cpu_count(), "backend": jax.default_backend(),
           "jax": jax.__version__, "size": {"n_cell": grid.n_cell, "n_epoch": len(times), "n_vel": len(vels)},
           "method": pre.line.kind, "chunk": args.chunk}
    x = jnp.asarray(best.x)
    lm = jnp.asarray(1.0)
    n = x.size
    basis = np.zeros((args.chunk, n))
    basis[np.arange(args.chunk), np.arange(args.chunk) * (n // args.chunk)] = 1.0
    basis = jnp.asarray(basis)

    single = jax.jit(U._hvp, static_argnames=("regulariser", "penalty"))

    def one_at_a_time():  # the unbatched path: a compiled single HVP on the dense cube, row by row
        return np.stack([np.asarray(single(x, v, lm, pre, sim.obs, regulariser="mem", penalty=1e4))
                         for v in basis[:8]])

    one_at_a_time()  # compile
    t_old, ref = _best_of(one_at_a_time, 3)
    t0 = time.perf_counter()
    hvp = U.hvp_function(1.0, pre, sim.obs, "mem", chunk=args.chunk)
    first = np.asarray(hvp(x, basis))
    t_setup = time.perf_counter() - t0
    t_new, got = _best_of(lambda: np.asarray(hvp(x, basis)), 3)
    out["hvp"] = {"dense_single_ms": t_old / 8 * 1e3, "batched_ms": t_new / args.chunk * 1e3,
                  "speedup": (t_old / 8) / (t_new / args.chunk), "form": U.hvp_form(pre).line.kind,
                  "setup_and_compile_s": t_setup - t_new,
                  "max_rel_diff": float(np.max(np.abs(got[:8] - ref)) / np.max(np.abs(ref)))}
    assert np.array_equal(first, got)
    print("hvp", json.dumps(out["hvp"]), flush=True)

    # the three-operand einsum is O(n^3) without BLAS: 7 minutes at the seed size's n_free
    # (4065); compared here at n = 1200 (the ratio grows no slower than that)
    n_free = int(U._free_mask(best, True, True).sum())
    m = 1200
    rng = np.random.default_rng(0)
    a = rng.normal(size=(m, m))
    f = rng.normal(size=(m, m))
    t_blas, d_blas = _best_of(lambda: np.einsum("ij,ji->i", a @ f, a), 1)
    out["sandwich_diagonal"] = {"n_free_seed_size": n_free, "n": m, "blas_s": t_blas}
    if not args.quick:
        t_ein, d_ein = _best_of(lambda: np.einsum("ij,jk,ki->i", a, f, a), 1)
        out["sandwich_diagonal"].update(einsum3_s=t_ein, speedup=t_ein / t_blas,
                                        max_rel_diff=float(np.max(np.abs(d_ein - d_blas)) / np.max(np.abs(d_ein))))
        for kind in ("posterior", "sandwich"):
            t0 = time.perf_counter()
            problem = dm.Problem(grid=grid, star=None, obs=sim.obs, components=None, form=pre)
            unc = U.laplace(problem, best, width=kind, options={"chunk": args.chunk})
            sig = unc.sigma_fssc[np.isfinite(unc.sigma_fssc)]
            out[f"laplace_{kind}"] = {"wall_s": time.perf_counter() - t0, "median_sigma_fssc": float(np.median(sig))}
            print(kind, json.dumps(out[f"laplace_{kind}"]), flush=True)
    print("sandwich diagonal", json.dumps(out["sandwich_diagonal"]), flush=True)
    if args.out:
        write_json(args.out, out)


if __name__ == "__main__":
    main()
