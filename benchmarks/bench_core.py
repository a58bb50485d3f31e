"""Core speed benchmark at the seed size (150 epochs x 32 velocities, 2500 cells), float64.

Prints and (with --out) writes JSON: machine, backend, the measured memory bandwidth and
the bandwidth bound of value-and-gradient (bytes of the arrays it reads / bandwidth) beside
its measured time; trace / lower / compile seconds, cold and with the persistent cache
warm (fresh processes); scipy L-BFGS-B and device solve times; a batch of 8 lambdas.

    PYTHONPATH=src python benchmarks/bench_core.py [--out benchmarks/results/core-cpu2.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
from _common import write_json  # benchmarks/ is the script's folder


def _best(fn, n=20):
    import jax
    jax.block_until_ready(fn())
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        ts.append(time.perf_counter() - t0)
    return float(np.min(ts)), float(np.median(ts))


def _bytes_read(line) -> int:
    """Bytes of the model arrays a value+grad reads on this backend (each once).

    Not counted: ``pos`` on CPU (the slot gather's CPU transpose is a scatter-add over
    ``cell``) and the folded model's ``weight`` (the normalisation is the cube's last row).
    """
    import dataclasses

    import jax

    skip = {"pos"} if jax.default_backend() == "cpu" else set()
    if line.kind == "folded":
        skip.add("weight")
    return sum(int(getattr(line, f.name).nbytes) for f in dataclasses.fields(line)
               if f.name not in skip and hasattr(getattr(line, f.name), "nbytes"))


def bandwidth_gbs():
    """Read bandwidth of the default device: sum of a 256 MB float64 array."""
    import jax
    import jax.numpy as jnp
    x = jnp.ones(32_000_000, jnp.float64)
    f = jax.jit(jnp.sum)
    t, _ = _best(lambda: f(x), n=10)
    return x.nbytes / t / 1e9


def compile_child(cache_dir: str) -> dict:
    """Time trace/lower/compile of value-and-gradient in this (fresh) process."""
    import jax
    import jax.numpy as jnp

    import dopplermap as dm
    from dopplermap.cache import enable_compilation_cache
    from dopplermap.objective import Layout, ObjectiveData
    from dopplermap.solvers.program import value_and_grad_body
    enable_compilation_cache(cache_dir)
    star, grid, times, vels, comps = dm.demo_setup()
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500, method="binned")
    pre = dm.solve_form(dm.precompute(grid, star, times, vels, comps))  # what invert compiles
    x = jnp.asarray(Layout(pre.n_cell, pre.n_epoch).initial())
    lm = jnp.asarray(1.0)
    vg_jit = jax.jit(value_and_grad_body, static_argnames=("regulariser", "penalty"))
    t0 = time.perf_counter()
    traced = vg_jit.trace(x, lm, pre, ObjectiveData(obs=sim.obs), regulariser="mem", penalty=1e4)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    lowered.compile()
    t3 = time.perf_counter()
    return {"trace": t1 - t0, "lower": t2 - t1, "compile": t3 - t2, "total": t3 - t0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true", help="skip the cache subprocesses and the batch")
    ap.add_argument("--compile-child")
    args = ap.parse_args()
    if args.compile_child:
        print(json.dumps(compile_child(args.compile_child)))
        return
    import jax
    import jax.numpy as jnp

    import dopplermap as dm
    from dopplermap.objective import Layout, ObjectiveData
    from dopplermap.solvers import invert_batch, invert_device
    from dopplermap.solvers.program import compiled_value_and_grad

    dev = jax.devices()[0]
    out = {"machine": platform.node(), "cpu_count": os.cpu_count(), "backend": jax.default_backend(),
           "device": getattr(dev, "device_kind", str(dev)), "dtype": "float64", "jax": jax.__version__}
    star, grid, times, vels, comps = dm.demo_setup()
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500)
    out["size"] = {"n_cell": grid.n_cell, "n_epoch": len(times), "n_vel": len(vels)}
    bw = bandwidth_gbs()
    out["bandwidth_GBps"] = bw
    lay = Layout(grid.n_cell, len(times))
    x = jnp.asarray(lay.initial(0.05))
    lm = jnp.asarray(1.0)
    dense = None
    data = ObjectiveData(obs=sim.obs)
    for method in ("binned", "dense", "folded_float64", "folded_float32"):
        t0 = time.perf_counter()
        if method.startswith("folded"):
            pre = dm.solve_form(dense, method.split("_")[1])  # what invert iterates on (float32: the default)
        else:
            pre = dm.precompute(grid, star, times, vels, comps, method=method)
        pre_t = time.perf_counter() - t0
        dense = pre if method == "dense" else dense
        fn, timing = compiled_value_and_grad(x, lm, pre, data)
        best, med = _best(lambda fn=fn, pre=pre: fn(x, lm, pre, data))
        nbytes = _bytes_read(pre.line) + 2 * sim.obs.flux.nbytes + x.nbytes
        out[method] = {"precompute_s": pre_t, "vg_ms_min": best * 1e3, "vg_ms_median": med * 1e3,
                       "bytes_read_MB": nbytes / 1e6, "bandwidth_bound_ms": nbytes / (bw * 1e9) * 1e3,
                       "ratio_to_bound": best / (nbytes / (bw * 1e9)), "trace_lower_s": timing["trace_lower"],
                       "compile_s": timing["compile"]}
        print(method, json.dumps(out[method]), flush=True)
    pre = dm.precompute(grid, star, times, vels, comps)  # "auto": dense here; solvers fold it to float32
    out["default_method"] = pre.line.kind
    r = dm.invert(pre, sim.obs, lmbd=1.0)
    out["scipy"] = {"solve_s": r.solve_time, "iterations": r.iterations, "n_eval": r.n_eval, "loss": r.loss,
                    "compile_s": r.compile_time}
    print("scipy", out["scipy"], flush=True)
    d = invert_device(pre, sim.obs, lmbd=1.0, tol=1e-5)
    out["device_tol1e-5"] = {"solve_s": d.solve_time, "iterations": d.iterations, "n_eval": d.n_eval,
                             "loss": d.loss, "compile_s": d.compile_time, "rel_loss_vs_scipy": (d.loss - r.loss) / r.loss}
    print("device", out["device_tol1e-5"], flush=True)
    d2 = invert_device(pre, sim.obs, lmbd=1.0, tol=1e-8, maxiter=3000)
    r2 = dm.invert(pre, sim.obs, lmbd=1.0, tol=1e-8, maxiter=3000)  # like for like: both at tol 1e-8
    out["device_tol1e-8"] = {"solve_s": d2.solve_time, "iterations": d2.iterations, "loss": d2.loss,
                             "compile_s": d2.compile_time, "rel_loss_vs_scipy": (d2.loss - r.loss) / r.loss,
                             "scipy_tol1e-8_solve_s": r2.solve_time, "scipy_tol1e-8_iterations": r2.iterations,
                             "rel_loss_vs_scipy_tol1e-8": (d2.loss - r2.loss) / r2.loss}
    print("device tight", out["device_tol1e-8"], flush=True)
    if not args.quick:
        lmbds = np.geomspace(0.1, 10.0, 8)
        one = invert_device(pre, sim.obs, lmbd=float(lmbds[0]), tol=1e-5)  # compiled already above? shape same
        for mode, form in (("vmap", "blocked"), ("vmap", "folded"), ("sequential", "folded")):
            b = invert_batch(pre, sim.obs, lmbds=lmbds, tol=1e-5, mode=mode, form=form)
            if mode == "vmap":  # again, compiled: the second call is the one timed
                b = invert_batch(pre, sim.obs, lmbds=lmbds, tol=1e-5, mode=mode, form=form)
            out[f"batch8_{mode}_{form}"] = {
                "solve_s": b[0].solve_time, "compile_s": b[0].compile_time, "one_solve_s": d.solve_time,
                "ratio_to_one": b[0].solve_time / d.solve_time, "iterations": [x.iterations for x in b],
                "n_eval": [x.n_eval for x in b], "one_lmbd0_s": one.solve_time}
            print(f"batch ({mode}, {form})", out[f"batch8_{mode}_{form}"], flush=True)
        with tempfile.TemporaryDirectory() as cache:
            runs = []
            for _ in range(2):
                p = subprocess.run([sys.executable, __file__, "--compile-child", cache], capture_output=True,
                                   text=True, env=dict(os.environ))
                runs.append(json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-500:]})
            out["compile_cold"], out["compile_warm_cache"] = runs
            print("compile cold", runs[0], "warm", runs[1], flush=True)
    if args.out:
        write_json(args.out, out)


if __name__ == "__main__":
    main()
