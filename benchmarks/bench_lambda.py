"""32 lambdas at the seed's size (2500 cells, 150 epochs, 32 velocities): one compiled
objective, each solve warm-started from the previous lambda, against 32 cold solves.

``--demo``: instead, the demo star of ``dopplermap lambda`` (400 cells, 30 epochs, 24
velocities, S/N 500, its default sweep 0.001..100 in 16 steps, tol 1e-7): the L-curve corner
(refined and snapped to the sweep), and the target-chi2 lambda with the number of solves it
took, bracketed from the sweep (as the command does) and from the sweep's ends alone.

    PYTHONPATH=src python benchmarks/bench_lambda.py [--n-lambda 32] [--n-cell 2500]
    PYTHONPATH=src python benchmarks/bench_lambda.py --demo [--target-chi2 1.0 1.2]
"""

import argparse
import platform
import time

import jax
import numpy as np

import dopplermap as dm
from dopplermap import search


def demo(targets):
    from dopplermap.app.search import load_problem

    prob = load_problem(None)  # the command's demo star
    prob = prob.replace(settings=prob.settings.replace(tol=1e-7, maxiter=2000))
    obs = prob.obs
    lm = np.logspace(-3, 2, 16)
    print(f"demo star: n_cell {prob.grid.n_cell} n_epoch {obs.n_epoch} n_vel {obs.n_vel}, 16 lambdas 0.001..100, "
          f"tol 1e-7, backend {jax.default_backend()}")
    t = time.perf_counter()
    sw = search.sweep_lambda(prob, lm)
    print(f"sweep {time.perf_counter() - t:.1f} s")
    c, _ = search.lcurve_corner(sw)
    c0, _ = search.lcurve_corner(sw, refine=False)
    print(f"L-curve corner: lambda {c:.5g} (refined), {c0:.5g} (best sweep point)")
    for target in targets:
        for name, kw in (("sweep bracket", dict(sweep=sw)), ("lo/hi bracket", dict(lo=float(lm[0]), hi=float(lm[-1])))):
            t = time.perf_counter()
            lmt, res, trials = search.lambda_for_chi2(prob, target, **kw)
            print(f"target chi2 {target:g} ({name}): lambda {lmt:.5g}, chi2/target - 1 = {res.chi2 / target - 1:+.2e}, "
                  f"{len(trials)} solves, {time.perf_counter() - t:.1f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo", action="store_true", help="corner and target-chi2 lambda on the CLI's demo star")
    ap.add_argument("--target-chi2", type=float, nargs="+", default=[1.0, 1.2])
    ap.add_argument("--n-lambda", type=int, default=32)
    ap.add_argument("--n-cell", type=int, default=2500)
    ap.add_argument("--n-epoch", type=int, default=150)
    ap.add_argument("--tol", type=float, default=1e-5, help="the seed's tolerance")
    a = ap.parse_args()
    if a.demo:
        return demo(a.target_chi2)
    star, grid, times, vels, comps = dm.demo_setup(n_cell=a.n_cell, n_epoch=a.n_epoch)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500.0)
    prob = dm.Problem(grid=grid, star=star, obs=sim.obs, components=comps,
                      settings=dm.Settings(tol=a.tol, maxiter=2000, solver="lbfgsb"))  # as measured
    lm = np.logspace(-3, 2, a.n_lambda)
    print(f"backend {jax.default_backend()} float64  cpu {platform.processor() or platform.machine()}  "
          f"n_cell {grid.n_cell} n_epoch {len(times)} n_vel {len(vels)}  {a.n_lambda} lambdas, tol {a.tol}")
    t = time.perf_counter()
    r0 = dm.invert(prob, lmbd=1.0, maxiter=1000)  # compile once (cached for both runs)
    print(f"first solve (includes compile {r0.compile_time:.2f} s): {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    warm = search.sweep_lambda(prob, lm, warm_start=True)
    t_warm = time.perf_counter() - t
    t = time.perf_counter()
    cold = search.sweep_lambda(prob, lm, warm_start=False)
    t_cold = time.perf_counter() - t
    for name, sw, tt in (("warm-started", warm, t_warm), ("cold", cold, t_cold)):
        print(f"{name:13s} total {tt:7.2f} s  per solve {tt / len(lm):6.3f} s  iterations {int(sw.iterations.sum())}"
              f"  (median {np.median(sw.iterations):.0f})")
    print(f"cold / warm time ratio {t_cold / t_warm:.2f}")
    dl = np.max(np.abs(warm.loss - cold.loss) / np.abs(cold.loss))
    print(f"max relative loss difference warm vs cold {dl:.2e} (both stop at tol {a.tol})")
    try:
        print(f"L-curve corner (warm sweep): lambda {search.lcurve_corner(warm)[0]:.4g}")
    except ValueError as exc:
        print(f"L-curve: {exc}")


if __name__ == "__main__":
    main()
