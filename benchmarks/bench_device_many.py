"""Many solves on one device: a single solve, a 64-member batch and a calibration, timed
each with its compile and again compiled, written to one JSON file.

The problem is the demo star of ``dopplermap lambda`` at the seed's size (2500 cells, 150
epochs, 32 velocities; ``--quick``: 400 x 30 x 24, a CPU check of the script). The single
solve is ``invert`` at tol 1e-5 (the automatic solver); the batch is
``solve_many(mode="auto")`` over 64 noise draws of the data (what a calibration's grid
value solves); the calibration is ``calibrate_parameter`` of the inclination over 5 grid
values, 8 data sets per trial (``--quick``: 3 values, 4 sets).

    python benchmarks/bench_device_many.py --out benchmarks/results/many-h200.json
    JAX_PLATFORMS=cpu python benchmarks/bench_device_many.py --quick --out /tmp/many-cpu-quick.json
"""

import argparse
import os
import platform
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import write_json  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the demo size (a CPU check of the script)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    import jax

    import dopplermap as dm
    from dopplermap.calibrate import CalibrationOptions, calibrate_parameter
    from dopplermap.problem import demo_problem
    from dopplermap.solvers import solve_many

    size = dict(n_cell=400, n_epoch=30, n_vel=24) if a.quick else dict(n_cell=2500, n_epoch=150, n_vel=32)
    prob = demo_problem(**size)
    prob = prob.replace(settings=prob.settings.replace(tol=1e-5, solver="auto"))
    out = {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()], "jax": jax.__version__,
           "host": platform.machine(), "cpu_count": os.cpu_count(), "size": size, "quick": a.quick,
           "load_average_start": os.getloadavg()[0]}
    print(out, flush=True)
    for k in ("first", "again"):
        r, t = timed(lambda: dm.invert(prob))
        out[f"single_{k}_s"] = t
        out["single_solver"], out["single_iterations"] = r.solver, r.iterations
        print(f"single solve ({k}): {t:.2f} s, {r.solver}, {r.iterations} iterations", flush=True)
    obs = prob.obs
    rng = np.random.default_rng(0)
    err = np.asarray(obs.err, float)
    flux = np.asarray(r.model)[None] + err[None] * rng.standard_normal((64, *err.shape))
    st = prob.settings
    for k in ("first", "again"):
        many, t = timed(lambda: solve_many(prob.pre, obs, flux=flux, err=err, lmbd=st.lmbd, tol=st.tol,
                                           maxiter=st.maxiter, mode="auto"))
        out[f"batch64_{k}_s"] = t
        out["batch64_mode"], out["batch64_calls"] = many.mode, many.n_calls
        print(f"64-member batch ({k}): {t:.2f} s, {many.describe()}", flush=True)
    vals = [45.0, 55.0, 65.0] if a.quick else [40.0, 47.5, 55.0, 62.5, 70.0]
    n_sim = 4 if a.quick else 8
    c, t = timed(lambda: calibrate_parameter(prob, "inclination", vals, fixed={"vsini": prob.star.vsini},
                                             options=CalibrationOptions(n_sim=n_sim, sim_oversample=1)))
    out.update(calibration_s=t, calibration_solves=c.n_solves, calibration_mode=c.mode,
               calibration_estimate=[c.estimate, c.lo68, c.hi68], load_average_end=os.getloadavg()[0])
    print(f"calibration of inclination ({len(vals)} values, {n_sim} sets per trial, {c.n_solves} solves): "
          f"{t:.2f} s, {c.mode}; estimate {c.estimate:.2f} [{c.lo68:.2f}, {c.hi68:.2f}]", flush=True)
    write_json(a.out, out)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
