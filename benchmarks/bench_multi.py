"""Several line data sets in one map: recovery and cost.

A star observed by two instruments, simulated with the independent NumPy disc integrator
of :mod:`bench_calibration` on a fine latitude-longitude grid (not dopplermap's model):

* "espadons": R = 65000, velocities every 1.8 km/s, 12 epochs over rotation phases 0-0.6;
* "narval":   R = 35000, velocities every 4 km/s, 10 other epochs over phases 0.5-1.1.

The instrument is applied exactly (Gaussian local lines convolved with the instrumental
Gaussian: widths add in quadrature, equivalent width kept); dopplermap is told the
resolving power of each set and broadens its local lines itself. ``recovery`` maps each set
alone and both together and prints the correlation of the cool-spot map with the truth
averaged into the inversion cells; ``cost`` times one value-and-gradient of a large set
alone, with a 2-epoch set added (its own shapes), and with that set padded to the large
set's epochs (what a common grid would cost).

    PYTHONPATH=src python benchmarks/bench_multi.py [--quick] [--cost]   (--cost: the timing only)
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_calibration as B  # noqa: E402

C_KMS = 299792.458
INC, VSINI, PERIOD = 60.0, 40.0, 2.0
SPOTS = [(45.0, 40.0, 18.0, "cool", 0.9), (10.0, 160.0, 16.0, "cool", 0.8), (-10.0, 280.0, 15.0, "cool", 0.8),
         (30.0, 230.0, 12.0, "hot", 0.6)]
# (name, resolving power, velocity step km/s, n_epoch, first phase, snr, seed)
INSTRUMENTS = (("espadons", 65000.0, 1.8, 12, 0.0, 400.0, 1), ("narval", 35000.0, 4.0, 10, 0.5, 400.0, 2))


def _instrument_set(flat, flon, farea, fc, fh, R, dv, n_epoch, phase0, snr, seed):
    """Observations of one instrument from the fine-grid integrator, and dopplermap's components."""
    import dopplermap as dm
    from dopplermap.broadening import instrumental_broaden

    rng = np.random.default_rng(seed)
    times = (phase0 + np.linspace(0.0, 0.6, n_epoch)) * PERIOD
    half = VSINI + 25.0
    vels = np.arange(-half, half + 1e-9, dv)
    wi = C_KMS / R
    lines = tuple((d * w / math.hypot(w, wi), math.hypot(w, wi), u) for d, w, u in B.LINES)
    rv = rng.normal(0.0, 0.3, n_epoch)  # true per-epoch shifts, km/s
    clean = B.brute_force_profiles(flat, flon, farea, fc, fh, times, vels, INC, VSINI, PERIOD, rv, lines=lines)
    noisy = clean + rng.normal(size=clean.shape) / snr
    mean = clean.mean(axis=1, keepdims=True)  # the model is mean-normalised
    obs = dm.Observations.create(times, vels, noisy / mean, np.full_like(noisy, 1.0 / snr) / mean)
    comps = dm.ComponentSet(*[dm.Component(instrumental_broaden(c.profile, R), c.limb_darkening, c.intensity)
                              for c in B._components()])
    return obs, comps


def two_instruments(n_lat: int = 72, n_cell: int = 300):
    """``dict(grid, star, sets=[(name, obs, components)], truth_fssc)`` of the two-instrument star."""
    import dopplermap as dm

    flat, flon, farea = B.fine_grid(n_lat)
    fc, fh = B.spot_fill(flat, flon, SPOTS)
    grid = dm.latitude_band_grid(n_cell)
    sets = [(name, *_instrument_set(flat, flon, farea, fc, fh, R, dv, ne, ph0, snr, seed))
            for name, R, dv, ne, ph0, snr, seed in INSTRUMENTS]
    star = dm.StarParams(inclination=INC, vsini=VSINI, period=PERIOD, t0=0.0)
    return dict(grid=grid, star=star, sets=sets, truth_fssc=B.cell_truth(grid, flat, flon, fc))


def problems(case, settings):
    """``{"espadons": Problem, "narval": Problem, "joint": Problem}`` of :func:`two_instruments`."""
    from dopplermap.problem import LineData, Problem

    out = {name: Problem(grid=case["grid"], star=case["star"], obs=obs, components=comps, settings=settings)
           for name, obs, comps in case["sets"]}
    out["joint"] = Problem(grid=case["grid"], star=case["star"], obs=None, components=None, settings=settings,
                           lines=tuple(LineData(obs, comps, name=name) for name, obs, comps in case["sets"]))
    return out


def correlation(fssc, truth) -> float:
    ok = np.isfinite(truth)
    return float(np.corrcoef(np.asarray(fssc)[ok], truth[ok])[0, 1])


def recovery(quick: bool = False):
    import dopplermap as dm
    from dopplermap.problem import Settings

    case = two_instruments(n_lat=60 if quick else 96, n_cell=300 if quick else 800)
    rows = []
    for lmbd in ((1.0,) if quick else (0.3, 1.0, 3.0)):
        for name, prob in problems(case, Settings(lmbd=lmbd, tol=1e-6, maxiter=2000)).items():
            for solver in ("lbfgsb", "projected_lbfgs"):
                t0 = time.perf_counter()
                res = dm.invert(prob, solver=solver)
                rows.append(dict(lmbd=lmbd, data=name, solver=solver, corr=correlation(res.fssc, case["truth_fssc"]),
                                 chi2=res.chi2, chi2_sets=res.chi2_sets, iterations=res.iterations,
                                 seconds=time.perf_counter() - t0))
                r = rows[-1]
                sets = "" if r["chi2_sets"] is None else "  " + "  ".join(f"{k} {v:.3f}" for k, v in r["chi2_sets"].items())
                print(f"lambda {lmbd:4g}  {name:9s} {solver:16s} corr {r['corr']:.3f}  chi2 {r['chi2']:.3f}{sets}"
                      f"  it {r['iterations']:4d}  {r['seconds']:.1f} s", flush=True)
    return rows


def cost(n_cell: int = 2500, n_big: int = 150, n_small: int = 2, rounds: int = 15, repeat: int = 10):
    """Seconds per value-and-gradient (float32 folded form, as the solvers iterate on): the
    big set alone, the small set alone, both as two sets (each its own shapes), and the big
    set with the small one padded to ``n_big`` epochs (what one common epoch axis would cost).
    The cases are timed in turn, ``rounds`` times, and the best of each is kept (a shared
    machine's load only ever adds time)."""
    import jax
    import jax.numpy as jnp

    import dopplermap as dm
    from dopplermap.objective import LineSets, objective_terms, solve_form

    star, grid, times, vels, comps = dm.demo_setup(n_cell=n_cell, n_epoch=n_big, seed=1)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500)
    small_t = times[:n_small] + 0.37
    small_v = np.linspace(-60.0, 60.0, 61)  # another velocity grid
    sim2 = dm.simulate(grid, star, small_t, small_v, comps, dm.DEMO_SPOTS, snr=500)
    pad_t = np.concatenate([small_t, times[: n_big - n_small] + 0.37])
    sim3 = dm.simulate(grid, star, pad_t, small_v, comps, dm.DEMO_SPOTS, snr=500)
    big = dm.precompute(grid, star, times, vels, comps)
    small = dm.precompute(grid, star, small_t, small_v, comps)
    padded = dm.precompute(grid, star, pad_t, small_v, comps)
    cases = {"big set alone": (big, sim.obs), f"{n_small}-epoch set alone": (small, sim2.obs),
             f"big + {n_small}-epoch set": (LineSets.create([big, small]), (sim.obs, sim2.obs)),
             f"big + that set padded to {n_big} epochs": (LineSets.create([big, padded]), (sim.obs, sim3.obs))}
    fns = {}
    for name, (pre, obs) in cases.items():
        pre = solve_form(pre, "float32")
        x = jnp.asarray(dm.Layout(pre.n_cell, pre.n_epoch).initial(0.05))
        fn = jax.jit(jax.value_and_grad(lambda x, pre, obs: objective_terms(x, 1.0, pre, obs)[0]))
        jax.block_until_ready(fn(x, pre, obs))
        fns[name] = (fn, x, pre, obs)
    best = dict.fromkeys(fns, np.inf)
    for _ in range(rounds):
        for name, (fn, x, pre, obs) in fns.items():
            t0 = time.perf_counter()
            for _ in range(repeat):
                jax.block_until_ready(fn(x, pre, obs))
            best[name] = min(best[name], (time.perf_counter() - t0) / repeat)
    for name, sec in best.items():
        print(f"{name:40s} {1e3 * sec:7.2f} ms per value-and-gradient", flush=True)
    return best


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    if "--cost" not in sys.argv:
        recovery(quick)
    cost(n_cell=800 if quick else 2500)
