"""Differential rotation read off a grid over dOmega: the static grid's read-outs and the
calibrated one, on a star simulated by an independent disc integrator, with the controls
that say why a read-out misses.

    PYTHONPATH=src python benchmarks/bench_domega.py [--stars 0,1,2] [--readouts regularised,profiled]
        [--calibrate N] [--noise-free] [--n-cell 300] [--true-map] [--jitter]
        [--out benchmarks/results/domega-cpu2.json]

The star is made by :func:`dr_profiles`, a NumPy disc integrator written here (the fine
latitude-longitude grid, spot function, Planck ratios and Gaussian local lines of
``bench_calibration``, not dopplermap's model) with solar-type differential rotation
``Omega(lat) = Omega_eq - dOmega sin^2 lat``: every fine cell sits at
``alpha = lon + Omega(lat) (t - t0)`` and moves at ``v_los = vsini (Omega / Omega_eq) cos lat sin alpha``
(dopplermap's convention, docs/conventions.md), so spots drift with their latitude's rate.
Default star: inclination 60 deg, vsini 40 km/s, P 2 d, 30 epochs over 3 rotations, S/N 300,
dOmega 0.05 rad/d, per-epoch rv N(0, 0.5) km/s (fitted by the inversion, as on the
calibration stars), four cool spots at latitudes -10 to 65 deg and a hot one.

Inclination and vsini are held at the truth; dOmega is profiled over ``--grid`` (default
0 to 0.1 every 0.01), each point solved from the flat start by
:func:`dopplermap.search.evaluate_point` (what ``grid --param domega=...`` does), and read by
``bench_calibration.continuous_interval`` on ``chi2_total`` (Delta chi2 <= 1 / <= 4). Read-outs:

* ``regularised``: the working lambda (1) at ``GRID_TOL`` (``grid``'s default);
* ``tight``: the working lambda, Gauss-Newton to 1e-10 (the solver-tolerance control);
* ``lambda0.1``: a tenth of it, Gauss-Newton to 1e-10;
* ``profiled``: :data:`dopplermap.search.PROFILE_READOUT` (``grid --readout profiled``);
* ``support``: ``grid --readout support`` (the regularised solves choose the spotted cells, every
  value's map refitted on them, read on that chi2; :func:`support_profile`);
* ``--calibrate N``: :func:`dopplermap.calibrate.calibrate_parameter` on the regularised
  read-out (``grid --calibrate N``; ``--cal-readout support``: on the support read-out, ``grid
  --readout support --calibrate N``), trial values ``--trials``.

Controls: ``--noise-free`` (the same star without noise), ``--n-cell`` (the inversion grid),
``--rv-sigma 0 --no-fit-rv`` (no per-epoch rv, and none fitted: what fitting it absorbs),
``--true-map`` (chi2 of the true map, averaged over each inversion cell, with the true rv:
where the model itself puts dOmega, no solve), ``--jitter`` (the regularised read-out's
chi2 against a Gauss-Newton solve to 1e-12 at the truth, :func:`dopplermap.search.chi2_jitter`).
``--save-npz FILE``: write the first star as a problem file instead, for
``dopplermap grid FILE --param domega=0:0.1:0.01 [--calibrate N]``.
Results: benchmarks/RESULTS.md, "Stellar parameters: calibration", "Differential rotation".
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_calibration as B  # noqa: E402
from _common import write_json  # noqa: E402

INC, VSINI, PERIOD = 60.0, 40.0, 2.0
# (lat, lon, radius deg, kind, fill): spots spread in latitude, so that the shear moves them apart
SPOTS = ((-10.0, 30.0, 18.0, "cool", 0.8), (15.0, 150.0, 16.0, "cool", 0.8), (40.0, 260.0, 18.0, "cool", 0.8),
         (65.0, 100.0, 15.0, "cool", 0.7), (25.0, 330.0, 12.0, "hot", 0.6))
DOMEGA_GRID = np.round(np.arange(0.0, 0.1001, 0.01), 10)
TRIALS = np.array([0.0, 0.025, 0.05, 0.075, 0.1])


def dr_profiles(flat, flon, farea, fc, fh, times, vels, inclination, vsini, period, domega, rv):
    """Disc-integrated profiles (n_epoch, n_vel) in units of the continuum of a star rotating
    differentially: ``bench_calibration.brute_force_profiles`` with each fine cell at
    ``alpha = lon + Omega(lat) t`` and ``v_los`` scaled by ``Omega(lat) / Omega_eq``."""
    out = np.zeros((len(times), len(vels)))
    for e, t in enumerate(times):  # one epoch at a time: (cells, velocities) fits memory
        out[e] = dr_epoch(flat, flon, farea, fc, fh, t, vels, inclination, vsini, period, domega, rv[e])
    return out


def dr_epoch(flat, flon, farea, fc, fh, t, vels, inclination, vsini, period, domega, rv=0.0):
    """One epoch's profile (n_vel,) of :func:`dr_profiles` at time ``t`` (d), fills ``fc``, ``fh``
    (n_fine,) of that moment."""
    intens = (1.0, B.planck_ratio(B.T_COOL, B.T_PHOT, B.WAVELENGTH_NM), B.planck_ratio(B.T_HOT, B.T_PHOT, B.WAVELENGTH_NM))
    inc = math.radians(inclination)
    om_eq = 2 * np.pi / period
    om = om_eq - domega * np.sin(flat) ** 2
    alpha = flon + om * t
    mu = math.sin(inc) * np.cos(flat) * np.cos(alpha) + math.cos(inc) * np.sin(flat)
    vlos = vsini * (om / om_eq) * np.cos(flat) * np.sin(alpha)
    pa = farea * np.clip(mu, 0.0, None)
    mu = np.clip(mu, 0.0, 1.0)
    dv = vels[None, :] - vlos[:, None] - rv
    num, norm = np.zeros(len(vels)), 0.0
    for (depth, fwhm, u), ik, f in zip(B.LINES, intens, (1.0 - fc - fh, fc, fh), strict=True):
        w = ik * (1.0 - u * (1.0 - mu)) * pa * f
        num += w @ (1.0 - depth * np.exp(-4.0 * math.log(2.0) * (dv / fwhm) ** 2))
        norm += w.sum()
    return num / norm


def spots_of(layout: int):
    """Star ``layout``'s spots: 0 is :data:`SPOTS`; negative: none (an unspotted star, whose
    profiles carry no dOmega signal: the noise-only control); others three cool spots and a hot
    one drawn as on the calibration stars (latitudes -15 to 70 deg, radii 12-22 deg)."""
    if layout == 0:
        return SPOTS
    if layout < 0:
        return ()
    rng = np.random.default_rng(1000 + layout)
    spots = [(float(rng.uniform(-15, 70)), float(rng.uniform(0, 360)), float(rng.uniform(12, 22)), "cool",
              float(rng.uniform(0.6, 0.9))) for _ in range(3)]
    return (*spots, (float(rng.uniform(0, 50)), float(rng.uniform(0, 360)), 12.0, "hot", 0.6))


def make_star(layout=0, domega=0.05, n_epoch=30, rotations=3.0, snr=300.0, n_cell=300, n_vel=28, n_lat=96,
              rv_sigma=0.5, noise=True):
    """Star ``layout`` (its spots :func:`spots_of`, its epochs, rv and noise drawn from seed
    29 + layout): a dict with the problem (its star at the truth), the truth and the simulation."""
    import dopplermap as dm
    from dopplermap.problem import DEMO_T_PHOT, DEMO_WAVELENGTH_NM, Problem

    rng = np.random.default_rng(29 + layout)
    times = np.sort(rng.uniform(0.0, rotations * PERIOD, n_epoch))
    half = VSINI + 2.0 + 2.5 * B.LINES[0][1]
    vels = np.linspace(-half, half, n_vel)
    rv = rng.normal(0.0, 1.0, n_epoch) * rv_sigma
    flat, flon, farea = B.fine_grid(n_lat)
    fc, fh = B.spot_fill(flat, flon, spots_of(layout))
    clean = dr_profiles(flat, flon, farea, fc, fh, times, vels, INC, VSINI, PERIOD, domega, rv)
    noisy = clean + (rng.normal(size=clean.shape) / snr if noise else 0.0)
    mean = clean.mean(axis=1, keepdims=True)
    obs = dm.Observations.create(times, vels, noisy / mean, np.full_like(noisy, 1.0 / snr) / mean,
                                 source="differential-rotation star")
    grid = dm.latitude_band_grid(n_cell)
    star = dm.StarParams(inclination=INC, vsini=VSINI, period=PERIOD, t0=0.0, domega=domega)
    prob = Problem(grid=grid, star=star, obs=obs, components=B._components(), t_phot=DEMO_T_PHOT,
                   wavelength_nm=DEMO_WAVELENGTH_NM, source="differential-rotation star")
    return dict(layout=layout, spots=[list(x) for x in spots_of(layout)], problem=prob, domega=domega, rv=rv, truth_fssc=B.cell_truth(grid, flat, flon, fc),
                truth_fssh=B.cell_truth(grid, flat, flon, fh), n_fine=int(flat.size))


def readout_settings(settings, which):
    from dopplermap.app.defaults import GRID_TOL
    from dopplermap.search import PROFILE_READOUT

    work = settings.replace(lmbd=1.0, tol=GRID_TOL, maxiter=max(settings.maxiter, 5000))
    if which == "regularised":
        return work
    profiled = PROFILE_READOUT.settings(work)
    if which == "tight":  # the working lambda, solved as the profiled read-out is
        return work.replace(**dict(profiled, lmbd=work.lmbd))
    if which == "lambda0.1":
        return work.replace(**dict(profiled, lmbd=0.1 * work.lmbd))
    if which == "profiled":
        return work.replace(**profiled)
    raise ValueError(which)


def read(values, prof, truth):
    best, lo, hi = B.continuous_interval(values, prof, 1.0)
    _, lo95, hi95 = B.continuous_interval(values, prof, 4.0)
    return dict(best=best, lo68=lo, hi68=hi, lo95=lo95, hi95=hi95, err=best - truth,
                in68=bool(lo <= truth <= hi), in95=bool(lo95 <= truth <= hi95), excludes0_68=bool(lo > 0.0),
                excludes0_95=bool(lo95 > 0.0), dchi2_truth=float(np.interp(truth, values, prof) - np.min(prof)),
                dchi2_rigid=float(prof[0] - np.min(prof)) if values[0] == 0.0 else math.nan,
                profile=[float(x) for x in prof])


def support_profile(s, values):
    """``grid --readout support`` along dOmega: the regularised solves (lambda 1, ``GRID_TOL``) at
    every value, the support of the map at the lowest ``chi2_total`` (:data:`SUPPORT_READOUT`),
    every value's map refitted on it (:func:`dopplermap.search.solve_on_support`, from that
    value's regularised map), read on the refits' chi2."""
    from dopplermap.search import apply_parameters, pad_precomputed, solve_on_support, support_mask
    from dopplermap.solvers import invert

    p = s["problem"]
    p = p.replace(settings=readout_settings(p.settings, "regularised"))
    n_data = p.obs.n_epoch * p.obs.n_vel
    t0 = time.perf_counter()
    regs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for v in values:
            star, comps = apply_parameters(p, {"domega": float(v)})
            pt = p.replace(star=star, components=comps)
            regs.append(invert(pad_precomputed(pt.pre), pt.obs, **pt.invert_kwargs()))
        best = regs[int(np.argmin([r.chi2 for r in regs]))]
        keep = [support_mask(p.grid, f) for f in (best.fssc, best.fssh)]
        fits = [solve_on_support(p, {"domega": float(v)}, *keep, r.x) for v, r in zip(values, regs, strict=True)]
    prof = np.array([r.chi2 * n_data for r in fits])
    for v, c in zip(values, prof, strict=True):
        print(f"  support domega {v:.4f}: chi2_support {c:.3f}", flush=True)
    out = read(values, prof, s["domega"])
    out.update(iterations=[int(r.iterations) for r in fits], unconverged=int(sum(not r.success for r in fits)),
               support_cells=[int(k.sum()) for k in keep], wall_s=time.perf_counter() - t0)
    return out


def profile(s, which, values):
    from dopplermap.search import evaluate_point

    if which == "support":
        return support_profile(s, values)
    p = s["problem"]
    p = p.replace(settings=readout_settings(p.settings, which))
    t0 = time.perf_counter()
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for v in values:
            rows.append(evaluate_point(p, {"domega": float(v)}))
            print(f"  {which} domega {v:.4f}: chi2_total {rows[-1]['chi2_total']:.3f} "
                  f"({rows[-1]['iterations']} it)", flush=True)
    prof = np.array([r["chi2_total"] for r in rows])
    out = read(values, prof, s["domega"])
    out.update(iterations=[int(r["iterations"]) for r in rows], lmbd=p.settings.lmbd, tol=p.settings.tol,
               solver=p.settings.solver, wall_s=time.perf_counter() - t0)
    return out


def true_map(s, values):
    """chi2_total of the true map (cell averages) with the true rv and no amp, at each dOmega."""
    import jax.numpy as jnp

    from dopplermap.model import forward

    p = s["problem"]
    c, h = jnp.asarray(np.nan_to_num(s["truth_fssc"])), jnp.asarray(np.nan_to_num(s["truth_fssh"]))
    prof = []
    for v in values:
        q = p.replace(star=p.star.replace(domega=float(v)))
        model = np.asarray(forward(c, h, jnp.asarray(s["rv"]), jnp.zeros(len(s["rv"])), q.pre))
        prof.append(float(np.sum(((np.asarray(q.obs.flux) - model) / np.asarray(q.obs.err)) ** 2)))
    return read(values, np.array(prof), s["domega"])


def calibrated(s, values, n_sim, trials, seed=0, which="regularised", sim_lmbd=None, oversample=None):
    from dopplermap.calibrate import SIM_OVERSAMPLE, CalibrationOptions, calibrate_parameter

    p = s["problem"]
    p = p.replace(settings=readout_settings(p.settings, "regularised" if which == "support" else which))
    opts = CalibrationOptions(n_sim=n_sim, seed=seed, sim_lmbd=sim_lmbd,
                              sim_oversample=SIM_OVERSAMPLE if oversample is None else oversample,
                              readout="support" if which == "support" else "regularised")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = calibrate_parameter(p, "domega", values, trials=trials, options=opts,
                                progress=lambda stage, i, n: print(f"  calibrate {stage} {i}/{n}", flush=True))
    truth = s["domega"]
    return dict(best=c.estimate, raw=c.raw, lo68=c.lo68, hi68=c.hi68, lo95=c.lo95, hi95=c.hi95, err=c.estimate - truth,
                in68=bool(c.lo68 <= truth <= c.hi68), in95=bool(c.lo95 <= truth <= c.hi95),
                excludes0_68=bool(c.lo68 > 0.0), excludes0_95=bool(c.lo95 > 0.0), n_sim=n_sim,
                trials=c.trials.tolist(), center=c.center.tolist(), spread=c.spread.tolist(),
                median=np.median(c.sims, axis=1).tolist(), sims=c.sims.tolist(), readout=which,
                sim_lmbd=c.sim_lmbd, sim_oversample=c.sim_oversample,
                no_crossing=c.no_crossing, solves=c.n_solves, wall_s=c.seconds)


def _line(name, r):
    return (f"{name:12s}: {r['best']:.4f} [{r['lo68']:.4f}, {r['hi68']:.4f}] 95% [{r['lo95']:.4f}, "
            f"{r['hi95']:.4f}]  dchi2(truth) {r.get('dchi2_truth', math.nan):.2f}  "
            f"dchi2(0) {r.get('dchi2_rigid', math.nan):.2f}  {r.get('wall_s', 0):.0f}s")


def run_star(args, layout, values):
    t0 = time.perf_counter()
    s = make_star(layout=layout, domega=args.domega, n_cell=args.n_cell, noise=not args.noise_free,
                  rv_sigma=args.rv_sigma)
    if args.subdivide > 1:  # each cell's lines integrated over sub-cells (Problem.subdivide)
        s["problem"] = s["problem"].replace(subdivide=args.subdivide)
    if args.no_fit_rv:  # rv known (and 0 with --rv-sigma 0): the control of what the per-epoch rv absorbs
        p = s["problem"]
        s["problem"] = p.replace(settings=p.settings.replace(fit_rv=False))
    res = dict(layout=layout, spots=s["spots"], load_start=os.getloadavg()[0], simulate_s=time.perf_counter() - t0)
    print(f"star {layout} simulated ({s['n_fine']} fine cells, {res['simulate_s']:.1f} s); load "
          f"{res['load_start']:.2f}", flush=True)
    if args.true_map:
        res["true_map"] = true_map(s, values)
        print(_line("true map", res["true_map"]), flush=True)
    if args.jitter:
        from dopplermap.search import chi2_jitter

        p = s["problem"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res["jitter"] = chi2_jitter(p.replace(settings=readout_settings(p.settings, "regularised")),
                                        {"domega": args.domega})
        print(f"chi2 jitter (regularised, at the truth): {res['jitter']:.4f}", flush=True)
    for which in [w for w in args.readouts.split(",") if w]:
        res[which] = profile(s, which, values)
        print(_line(which, res[which]), flush=True)
    if args.calibrate:
        res["calibrated"] = calibrated(s, values, args.calibrate, np.array([float(x) for x in args.trials.split(",")]),
                                       which=args.cal_readout, sim_lmbd=args.cal_sim_lmbd,
                                       oversample=args.cal_oversample)
        print(_line("calibrated", res["calibrated"]), flush=True)
    res["load_end"] = os.getloadavg()[0]
    res["wall_s"] = time.perf_counter() - t0
    return res


def summary(stars, which, truth):
    rows = [r[which] for r in stars if which in r]
    if not rows:
        return None
    err = np.array([r["best"] - truth for r in rows])
    return dict(n=len(rows), mean_abs_err=float(np.mean(np.abs(err))), bias=float(np.mean(err)),
                within_0p01=int(np.sum(np.abs(err) <= 0.01)), cover68=int(sum(r["in68"] for r in rows)),
                cover95=int(sum(r["in95"] for r in rows)), excl0_68=int(sum(r["excludes0_68"] for r in rows)),
                excl0_95=int(sum(r["excludes0_95"] for r in rows)),
                accept=int(sum(abs(r["best"] - truth) <= 0.01 and r["in68"] and r["excludes0_68"] for r in rows)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stars", default="0", help="star layouts K,... (0: the fixed spots; others random)")
    ap.add_argument("--readouts", default="regularised,profiled")
    ap.add_argument("--grid", default=None, help="dOmega values, comma-separated (default 0:0.1:0.01)")
    ap.add_argument("--calibrate", type=int, default=0, help="N simulated data sets per trial (0: none)")
    ap.add_argument("--trials", default=",".join(map(str, TRIALS)))
    ap.add_argument("--cal-readout", default="regularised", help="the read-out the calibration calibrates")
    ap.add_argument("--cal-sim-lmbd", type=float, default=None, help="lambda of its trial maps (default 0.1 x)")
    ap.add_argument("--cal-oversample", type=int, default=None, help="its simulation grid's factor (default 4)")
    ap.add_argument("--noise-free", action="store_true")
    ap.add_argument("--n-cell", type=int, default=300)
    ap.add_argument("--subdivide", type=int, default=1, help="each cell's lines integrated over M x M sub-cells")
    ap.add_argument("--domega", type=float, default=0.05)
    ap.add_argument("--true-map", action="store_true")
    ap.add_argument("--rv-sigma", type=float, default=0.5, help="sd of the simulated per-epoch rv, km/s")
    ap.add_argument("--no-fit-rv", action="store_true", help="the inversion does not fit the per-epoch rv")
    ap.add_argument("--jitter", action="store_true")
    ap.add_argument("--save-npz", default=None, help="write the first star as a problem file for dopplermap grid")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.save_npz:
        from dopplermap.app.search import save_problem

        k = int(args.stars.split(",")[0])
        p = make_star(layout=k, domega=args.domega, n_cell=args.n_cell, noise=not args.noise_free,
                      rv_sigma=args.rv_sigma)["problem"]
        print(save_problem(args.save_npz, p.obs, p.star, n_cell=args.n_cell))
        return
    values = DOMEGA_GRID if args.grid is None else np.array([float(x) for x in args.grid.split(",")])
    t0 = time.perf_counter()
    res = dict(machine=platform.platform(), cpus=os.cpu_count(), load_start=os.getloadavg()[0], args=vars(args),
               star=dict(inclination=INC, vsini=VSINI, period=PERIOD, domega=args.domega, n_epoch=30, snr=300.0,
                         n_cell=args.n_cell, subdivide=args.subdivide, noise=not args.noise_free,
                         rv_sigma=args.rv_sigma, fit_rv=not args.no_fit_rv), grid=values.tolist(), stars=[])
    for k in [int(x) for x in args.stars.split(",") if x]:
        res["stars"].append(run_star(args, k, values))
        if args.out:
            write_json(args.out, res)
    for which in ("true_map", *[w for w in args.readouts.split(",") if w], "calibrated"):
        sm = summary(res["stars"], which, args.domega)
        if sm is not None:
            res[f"summary_{which}"] = sm
            print(which, sm, flush=True)
    res["load_end"] = os.getloadavg()[0]
    res["wall_s"] = time.perf_counter() - t0
    print(f"total {res['wall_s']:.0f} s; load {res['load_start']:.2f} -> {res['load_end']:.2f}", flush=True)
    if args.out:
        write_json(args.out, res)


if __name__ == "__main__":
    main()
