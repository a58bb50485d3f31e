"""Value+grad of the four synthesis forms at the seed size, interleaved (min of 60 each, ms).

Interleaving makes a load spike hit every form alike; run two trees at the same time to
compare them under the same load.

    PYTHONPATH=src python benchmarks/bench_forms_vg.py
"""
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

import dopplermap as dm
from dopplermap.objective import Layout, ObjectiveData
from dopplermap.solvers.program import compiled_value_and_grad

star, grid, times, vels, comps = dm.demo_setup()
sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500)
x = jnp.asarray(Layout(grid.n_cell, len(times)).initial(0.05))
lm = jnp.asarray(1.0)
out = {}
dense = dm.precompute(grid, star, times, vels, comps, method="dense")
pres = {"binned": dm.precompute(grid, star, times, vels, comps, method="binned"), "dense": dense,
        "folded_float64": dm.solve_form(dense, "float64"), "folded_float32": dm.solve_form(dense, "float32")}
data = ObjectiveData(obs=sim.obs)
fns = {k: compiled_value_and_grad(x, lm, p, data)[0] for k, p in pres.items()}
for k in fns:
    jax.block_until_ready(fns[k](x, lm, pres[k], data))
ts = {k: [] for k in fns}
for _ in range(60):  # interleaved, so a load spike hits every form alike
    for k, fn in fns.items():
        t0 = time.perf_counter()
        jax.block_until_ready(fn(x, lm, pres[k], data))
        ts[k].append(time.perf_counter() - t0)
print(json.dumps({k: 1e3 * float(np.min(v)) for k, v in ts.items()}))
