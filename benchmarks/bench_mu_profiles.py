"""Cost of mu-dependent local profiles (macroturbulence) per objective evaluation.

    PYTHONPATH=src python benchmarks/bench_mu_profiles.py [--n-cell 2500 --n-epoch 150 --n-vel 32]

Compares value-and-gradient time of the chi-square at the seed's size, without and with
mu-dependent profiles (RT macroturbulence zeta = 4 km/s + instrument R = 65000,
:class:`~dopplermap.broadening.MuProfile` components through ``dm.precompute``), for
the model solvers iterate on by default (``method="auto"``: at this size the dense cube,
folded to float32 by ``dm.solve_form``), for the binned model (the default beyond 512 MiB)
and for the unfolded dense float64 reference. Compile time is measured apart; each "+mu"
ratio is relative to the same method without mu dependence, in the same run. Also checks binned+mu against the dense mu model (max deviation,
continuum units).
"""

import argparse
import dataclasses
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

import dopplermap as dm
from dopplermap.broadening import mu_dependent_profile


def bench(pre, obs, n_rep):
    lay = dm.Layout(pre.n_cell, pre.n_epoch)
    x = jnp.asarray(lay.initial(0.1))
    # pre and obs are arguments (not closed-over constants), as in the solvers
    f = jax.jit(jax.value_and_grad(lambda x, pre, obs: dm.objective.chi2(dm.forward(*lay.split(x), pre), obs)))
    t0 = time.perf_counter()
    jax.block_until_ready(f(x, pre, obs))
    comp = time.perf_counter() - t0
    ts = []
    for _ in range(n_rep):
        t0 = time.perf_counter()
        jax.block_until_ready(f(x, pre, obs))
        ts.append(time.perf_counter() - t0)
    return comp, float(np.median(ts))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-cell", type=int, default=2500)
    ap.add_argument("--n-epoch", type=int, default=150)
    ap.add_argument("--n-vel", type=int, default=32)
    ap.add_argument("--rep", type=int, default=20)
    a = ap.parse_args()
    star, grid, times, vels, comps = dm.demo_setup(n_cell=a.n_cell, n_epoch=a.n_epoch, n_vel=a.n_vel)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500)
    t0 = time.perf_counter()
    mps = [mu_dependent_profile(c.profile, 4.0, resolving_power=65000.0) for c in comps]
    t_tab = time.perf_counter() - t0
    mcomps = dm.ComponentSet(*[dataclasses.replace(c, profile=m) for c, m in zip(comps, mps, strict=True)])
    cases, pres = {}, {}
    def default(c):
        return dm.solve_form(dm.precompute(grid, star, times, vels, c))

    for name, build in (("default", lambda: default(comps)), ("default+mu", lambda: default(mcomps)),
                        ("binned", lambda: dm.precompute(grid, star, times, vels, comps, method="binned")),
                        ("binned+mu", lambda: dm.precompute(grid, star, times, vels, mcomps, method="binned")),
                        ("dense", lambda: dm.precompute(grid, star, times, vels, comps, method="dense")),
                        ("dense+mu", lambda: dm.precompute(grid, star, times, vels, mcomps, method="dense"))):
        t0 = time.perf_counter()
        pre = build()
        t_pre = time.perf_counter() - t0
        comp, run = bench(pre, sim.obs, a.rep)
        cases[name] = (t_pre, comp, run, pre.line.nbytes() / 2**20, pre.line.kind)
        if name.endswith("+mu"):
            pres[name] = pre
    fc, fh = (jnp.asarray(x) for x in dm.spot_map(grid, dm.DEMO_SPOTS))
    dev = float(jnp.max(jnp.abs(dm.model.synthesize(fc, fh, pres["binned+mu"].line)
                                - dm.model.synthesize(fc, fh, pres["dense+mu"].line))))
    print(f"backend {jax.default_backend()}  float64  {platform.processor() or platform.machine()}  "
          f"n_cell {a.n_cell} n_epoch {a.n_epoch} n_vel {a.n_vel}; mu tables {t_tab:.2f} s; "
          f"binned+mu columns {len(pres['binned+mu'].line.col_comp)}, max |binned+mu - dense+mu| {dev:.2e}")
    for name, (t_pre, comp, run, mb, method) in cases.items():
        ref = cases[name.removesuffix("+mu")][2]
        print(f"{name:10s} ({method:6s}) precompute {t_pre:6.2f} s  compile {comp:6.2f} s  "
              f"value+grad {run * 1e3:8.2f} ms  ratio to no-mu {run / ref:5.2f}  model {mb:7.1f} MiB")


if __name__ == "__main__":
    main()
