"""Calibration of the stellar-parameter estimators and uncertainty maps on simulated stars.

    PYTHONPATH=src python benchmarks/bench_calibration.py [--quick]
        [--out benchmarks/results/calibration-cpu2.json]
        [--coverage N] [--alt N] [--calibrate N]

Each star is simulated by :func:`brute_force_profiles`, a disc integrator written here in
NumPy and independent of dopplermap's model: a fine latitude-longitude grid (96 bands,
~11.7k cells: ~39x the 300-cell inversion grid), a smooth spot function evaluated per fine
cell, analytic Gaussian local profiles evaluated at ``v - v_los - rv`` (the per-epoch rv is
exact: the local profiles are shifted, not the disc-integrated one), linear limb darkening,
noise of 1/snr of the continuum, each profile divided by its mean (dopplermap's
normalisation).

For every star the existing estimators are run unchanged:

* ``grid``: :func:`dopplermap.search.grid_search` over inclination x vsini with the star's
  default settings, the best point and the interval by
  :func:`dopplermap.search.delta_chi2_interval` (column ``chi2_total``, Delta chi2 <= 1 for
  68 %, <= 4 for 95 %), as the ``grid`` command reports them; also a continuous version of
  the same criterion (parabola at the minimum, interval where the linearly interpolated
  profile crosses Delta chi2 = 1), so that the grid step does not hide the bias;
* ``joint``: :func:`dopplermap.jointfit.joint_fit` of inclination and vsini, started at
  inclination 45 deg and vsini + 2 km/s (it gives no interval).

``--coverage N``: on the first N stars, the per-cell 1-sigma coverage of
:func:`dopplermap.uncertainty.laplace` (posterior, sandwich) and ``bootstrap`` at the true
star parameters. ``--alt N``: on the first N stars, an alternative criterion measured beside
the fixed-lambda one: at each inclination (vsini at the truth) lambda is solved for
reduced chi2 = 1 (:func:`dopplermap.search.lambda_for_chi2`) and the entropy at that fit is
compared (maximum entropy at fixed chi2); nothing in dopplermap's defaults changes.
``--calibrate N``: the calibrated estimator of :mod:`dopplermap.calibrate` (what
``dopplermap grid --calibrate N`` reports; :func:`run_calibrated`) with N simulated data sets
per trial, trial inclinations every 10 deg; ``--cal-column``, ``--cal-lmbd``,
``--cal-sim-lmbd`` change its read-out, its lambda and its trial maps' lambda,
``--cal-oversample K`` simulates its data sets on a band grid of K times the cells.
``--evidence N``: on the first N stars, the Laplace evidence of each inclination at fixed
lambda (:func:`run_evidence`). ``--diagnose K``: star K's fixed-lambda profile on noise-free
data and on three other noise draws (bias or scatter?). ``--resummarise FILE``: recompute
a results file's summary and table. Results and their discussion: benchmarks/RESULTS.md,
topic "Stellar parameters: calibration".
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_json  # noqa: E402  (benchmarks/ is the script's folder)

# ------------------------------------------------------------------ independent forward model

T_PHOT, T_COOL, T_HOT, WAVELENGTH_NM = 5000.0, 3800.0, 6000.0, 600.0
# (depth, fwhm km/s, linear limb darkening) of photosphere, cool and hot spot: the demo's lines
LINES = ((0.50, 9.0, 0.65), (0.60, 9.0, 0.75), (0.42, 9.0, 0.60))


def planck_ratio(t, t_ref, lam_nm):
    """B_lambda(t) / B_lambda(t_ref), written out here (not dopplermap.profiles.intensity_ratio)."""
    c2 = 1.438776877e7  # h c / k in nm K
    return math.expm1(c2 / (lam_nm * t_ref)) / math.expm1(c2 / (lam_nm * t))


def fine_grid(n_lat: int = 96):
    """Latitude-longitude grid: ``n_lat`` equal-height bands, ~2 n_lat cos(lat) cells each.

    Returns (lat, lon, area) with lat, lon in rad and the exact solid angle of each cell.
    """
    edges = np.linspace(-np.pi / 2, np.pi / 2, n_lat + 1)
    lat, lon, area = [], [], []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        c = 0.5 * (lo + hi)
        n = max(4, int(round(2 * n_lat * math.cos(c))))
        le = np.linspace(0.0, 2 * np.pi, n + 1)
        lat.append(np.full(n, c))
        lon.append(0.5 * (le[:-1] + le[1:]))
        area.append(np.full(n, (2 * np.pi / n) * (math.sin(hi) - math.sin(lo))))
    return np.concatenate(lat), np.concatenate(lon), np.concatenate(area)


def spot_fill(lat, lon, spots, edge_deg: float = 4.0):
    """Cool and hot filling factors at (lat, lon) of circular spots ``(lat, lon, radius, kind, fill)``
    (deg) with a linear edge ``edge_deg`` wide; overlapping spots keep the larger fill."""
    fc, fh = np.zeros_like(lat), np.zeros_like(lat)
    for slat, slon, rad, kind, fill in spots:
        a, b = math.radians(slat), math.radians(slon)
        cosd = np.sin(lat) * math.sin(a) + np.cos(lat) * math.cos(a) * np.cos(lon - b)
        d = np.degrees(np.arccos(np.clip(cosd, -1.0, 1.0)))
        f = fill * np.clip((rad - d) / edge_deg + 0.5, 0.0, 1.0)
        tgt = fc if kind == "cool" else fh
        np.maximum(tgt, f, out=tgt)
    s = np.where(fc + fh > 0.999, 0.999 / np.maximum(fc + fh, 1e-300), 1.0)
    return fc * s, fh * s


def brute_force_profiles(lat, lon, area, fc, fh, times, vels, inclination, vsini, period, rv,
                         lines=LINES, intensities=None):
    """Disc-integrated profiles (n_epoch, n_vel) in units of the continuum (not mean-normalised).

    Sum over cells of ``I_k * LD_k(mu) * area * mu * fill_k * phi_k(v - v_los - rv)`` over
    the visible cells and the three components, divided by the same sum without the line.
    Solid-body rotation; rv (km/s) shifts every local profile exactly.
    """
    if intensities is None:
        intensities = (1.0, planck_ratio(T_COOL, T_PHOT, WAVELENGTH_NM), planck_ratio(T_HOT, T_PHOT, WAVELENGTH_NM))
    inc = math.radians(inclination)
    phase = 2 * np.pi * np.asarray(times)[:, None] / period
    alpha = lon[None, :] + phase
    mu = math.sin(inc) * np.cos(lat)[None, :] * np.cos(alpha) + math.cos(inc) * np.sin(lat)[None, :]
    vlos = vsini * np.cos(lat)[None, :] * np.sin(alpha)
    pa = area[None, :] * np.clip(mu, 0.0, None)
    mu = np.clip(mu, 0.0, 1.0)
    fills = (1.0 - fc - fh, fc, fh)
    rv = np.broadcast_to(np.asarray(rv, float), (len(times),))
    dv = np.asarray(vels)[None, None, :] - vlos[:, :, None] - rv[:, None, None]  # (E, C, V)
    num = np.zeros((len(times), len(vels)))
    norm = np.zeros((len(times), 1))
    for (depth, fwhm, u), ik, f in zip(lines, intensities, fills, strict=True):
        w = ik * (1.0 - u * (1.0 - mu)) * pa * f[None, :]  # (E, C)
        prof = 1.0 - depth * np.exp(-4.0 * math.log(2.0) * (dv / fwhm) ** 2)
        num += np.einsum("ec,ecv->ev", w, prof)
        norm += w.sum(axis=1, keepdims=True)
    return num / norm


def cell_truth(grid, flat, flon, ffill):
    """Mean fine-grid fill inside each inversion cell (bands grid: by the cells' bounds)."""
    out = np.zeros(grid.n_cell)
    lb, ob = np.asarray(grid.lat_bounds), np.asarray(grid.lon_bounds)
    for i in range(grid.n_cell):
        m = (flat >= lb[i, 0]) & (flat < lb[i, 1]) & (flon >= ob[i, 0]) & (flon < ob[i, 1])
        out[i] = ffill[m].mean() if m.any() else np.nan
    return out


# ------------------------------------------------------------------------------ the stars

# (inclination, vsini, n_epoch, phase gap, snr); inclinations off the 5-deg grid on purpose
STARS = [
    (22.0, 25.0, 20, False, 500.0),
    (33.0, 40.0, 30, True, 300.0),
    (41.0, 55.0, 12, False, 800.0),
    (48.0, 30.0, 40, False, 1000.0),
    (57.0, 45.0, 16, True, 400.0),
    (62.0, 20.0, 24, False, 600.0),
    (68.0, 60.0, 36, True, 250.0),
    (77.0, 35.0, 10, False, 900.0),
    (27.0, 50.0, 32, True, 700.0),
    (53.0, 38.0, 20, False, 200.0),
    (72.0, 28.0, 28, True, 500.0),
    (37.0, 33.0, 14, True, 1000.0),
]
QUICK = [0, 4, 7]
PERIOD = 2.0
N_CELL = 300
N_VEL = 28
INC_GRID = np.arange(10.0, 90.1, 5.0)
VSINI_STEPS = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])  # km/s about the star's vsini


def make_star(k: int, n_lat: int = 96, n_cell: int = N_CELL, n_vel: int = N_VEL, rv_sigma: float = 0.5,
              noise_seed: int | None = None, noise: bool = True):
    """Star ``k`` of :data:`STARS`: a dict with the problem, its truth and the simulation."""
    import dopplermap as dm
    from dopplermap.problem import DEMO_T_PHOT, DEMO_WAVELENGTH_NM, Problem

    inc, vsini, n_epoch, gap, snr = STARS[k]
    rng = np.random.default_rng(100 + k)
    # phases over 3 rotations; with a gap, phases 0.55-1.0 of the rotation are never observed
    ph = np.sort(rng.uniform(0.0, 3.0, 4 * n_epoch))
    if gap:
        ph = ph[(ph % 1.0) < 0.55]
    ph = np.sort(rng.choice(ph, n_epoch, replace=False))
    times = ph * PERIOD
    spots = [(float(rng.uniform(-15, 70)), float(rng.uniform(0, 360)), float(rng.uniform(12, 22)), "cool",
              float(rng.uniform(0.6, 0.9))) for _ in range(3)]
    spots.append((float(rng.uniform(0, 50)), float(rng.uniform(0, 360)), 12.0, "hot", 0.6))
    half = vsini + 2.0 + 2.5 * LINES[0][1]
    vels = np.linspace(-half, half, n_vel)
    rv = rng.normal(0.0, 1.0, n_epoch) * rv_sigma  # true per-epoch rv, km/s
    flat, flon, farea = fine_grid(n_lat)
    fc, fh = spot_fill(flat, flon, spots)
    clean = brute_force_profiles(flat, flon, farea, fc, fh, times, vels, inc, vsini, PERIOD, rv)
    # noise_seed: another noise draw of the same star; noise=False: noise-free data (same errors)
    nrng = rng if noise_seed is None else np.random.default_rng(noise_seed)
    noisy = clean + (nrng.normal(size=clean.shape) / snr if noise else 0.0)
    mean = clean.mean(axis=1, keepdims=True)  # the model is mean-normalised
    obs = dm.Observations.create(times, vels, noisy / mean, np.full_like(noisy, 1.0 / snr) / mean,
                                 source=f"calibration star {k}")
    grid = dm.latitude_band_grid(n_cell)
    comps = _components()
    # the problem carries the true star; grid_search and joint_fit replace inclination/vsini
    star0 = dm.StarParams(inclination=inc, vsini=vsini, period=PERIOD, t0=0.0)
    prob = Problem(grid=grid, star=star0, obs=obs, components=comps, t_phot=DEMO_T_PHOT,
                   wavelength_nm=DEMO_WAVELENGTH_NM, source=f"calibration star {k}")
    return dict(k=k, inc=inc, vsini=vsini, n_epoch=n_epoch, gap=gap, snr=snr, problem=prob, rv=rv,
                truth_fssc=cell_truth(grid, flat, flon, fc), truth_fssh=cell_truth(grid, flat, flon, fh),
                n_fine=flat.size)


def _components():
    """dopplermap's components for the same lines (as the inversion would be told them)."""
    import dopplermap as dm

    i_c = dm.intensity_ratio(T_COOL, T_PHOT, WAVELENGTH_NM)
    i_h = dm.intensity_ratio(T_HOT, T_PHOT, WAVELENGTH_NM)
    (d0, w0, u0), (d1, w1, u1), (d2, w2, u2) = LINES
    return dm.ComponentSet(
        phot=dm.Component(dm.gaussian(d0, w0), dm.LimbDarkening("linear", (u0,)), 1.0),
        cool=dm.Component(dm.gaussian(d1, w1), dm.LimbDarkening("linear", (u1,)), i_c),
        hot=dm.Component(dm.gaussian(d2, w2), dm.LimbDarkening("linear", (u2,)), i_h))


# ------------------------------------------------------------------------------ estimators

def continuous_interval(vals, prof, delta=1.0):
    """Best value (parabola through the minimum and its neighbours) and the range where the
    linearly interpolated profile is within ``delta`` of the parabola's minimum."""
    vals, prof = np.asarray(vals, float), np.asarray(prof, float)
    i = int(np.argmin(prof))
    best, pmin, a = vals[i], prof[i], 0.0
    if 0 < i < vals.size - 1:
        a, b, c = np.polyfit(vals[i - 1:i + 2], prof[i - 1:i + 2], 2)
        if a > 0:
            best = -b / (2 * a)
            pmin = c - b * b / (4 * a)
    d = prof - pmin - delta
    if a > 0 and (d[i] > 0 or vals[i - 1] <= best - math.sqrt(delta / a) <= best + math.sqrt(delta / a) <= vals[i + 1]):
        # the interval lies within the minimum's neighbours: the parabola's own
        w = math.sqrt(delta / a)
        return float(best), float(best - w), float(best + w)
    lo, hi = vals[0], vals[-1]
    for j in range(i, 0, -1):
        if d[j - 1] > 0 >= d[j]:
            lo = vals[j - 1] + (vals[j] - vals[j - 1]) * d[j - 1] / (d[j - 1] - d[j])
            break
    for j in range(i, vals.size - 1):
        if d[j] <= 0 < d[j + 1]:
            hi = vals[j] + (vals[j + 1] - vals[j]) * d[j] / (d[j] - d[j + 1])
            break
    return float(best), float(min(lo, best)), float(max(hi, best))


def run_grid(s, cluster=None, incs=INC_GRID, vsini_steps=VSINI_STEPS):
    from dopplermap.search import best_point, delta_chi2_interval, grid_search

    axes = {"inclination": np.asarray(incs, float), "vsini": s["vsini"] + np.asarray(vsini_steps, float)}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = grid_search(s["problem"], axes, Path(tmp) / "grid.csv", cluster=cluster)
    wall = time.perf_counter() - t0
    out = dict(grid_wall_s=wall, grid_points=len(rows))
    best_loss = best_point(rows, list(axes), column="loss")
    out["grid_best_loss_inc"] = float(best_loss["inclination"])
    out["grid_best_loss_vsini"] = float(best_loss["vsini"])
    for name in ("inclination", "vsini"):
        truth = s["inc"] if name == "inclination" else s["vsini"]
        i68 = delta_chi2_interval(rows, name, delta=1.0)
        i95 = delta_chi2_interval(rows, name, delta=4.0)
        key = "inc" if name == "inclination" else "vsini"
        out[f"grid_{key}"] = i68["best"]
        out[f"grid_{key}_lo68"], out[f"grid_{key}_hi68"] = i68["lo"], i68["hi"]
        out[f"grid_{key}_lo95"], out[f"grid_{key}_hi95"] = i95["lo"], i95["hi"]
        out[f"grid_{key}_at_edge"] = i68["at_edge"]
        out[f"grid_{key}_in68"] = bool(i68["lo"] <= truth <= i68["hi"])
        out[f"grid_{key}_in95"] = bool(i95["lo"] <= truth <= i95["hi"])
        b, lo, hi = continuous_interval(i68["values"], i68["profile"], 1.0)
        _, lo95, hi95 = continuous_interval(i68["values"], i68["profile"], 4.0)
        out[f"cont_{key}"], out[f"cont_{key}_lo68"], out[f"cont_{key}_hi68"] = b, lo, hi
        out[f"cont_{key}_in68"] = bool(lo <= truth <= hi)
        out[f"cont_{key}_in95"] = bool(lo95 <= truth <= hi95)
        out[f"profile_{key}"] = [list(map(float, i68["values"])), list(map(float, i68["profile"]))]
        # chi2 excess of the truth's neighbourhood: how strongly the criterion rules the truth out
        out[f"grid_{key}_dchi2_truth"] = float(np.interp(truth, i68["values"], i68["profile"]) - i68["profile"].min())
    return out


CAL_TRIALS = INC_GRID[::2]  # trial inclinations of the calibration (every 10 deg)


def run_calibrated(s, grid, n_sim=16, seed=0, incs=INC_GRID, trials=CAL_TRIALS, vsini_steps=VSINI_STEPS,
                   lmbd=None, sim_lmbd=None, column="chi2_total", oversample=4):
    """The calibrated estimator (:func:`dopplermap.calibrate.calibrate_parameter`): inclination
    with vsini held at the grid's best vsini, then vsini with the inclination held at the
    calibrated inclination; ``grid`` is :func:`run_grid`'s output. The other base read-out
    (``loss`` / ``chi2_total``) is calibrated too from the same solves (keys ``calx_``)."""
    from dopplermap.calibrate import COLUMNS, CalibrationOptions, belt_estimate, calibrate_parameter, profile_minimum

    p = s["problem"]
    settings = p.settings if lmbd is None else p.settings.replace(lmbd=lmbd)
    p = p.replace(settings=settings)
    opts = CalibrationOptions(n_sim=n_sim, seed=seed, column=column, sim_lmbd=sim_lmbd, sim_oversample=oversample)
    other = [c for c in COLUMNS if c != column][0]
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ci = calibrate_parameter(p, "inclination", incs, fixed={"vsini": grid["grid_vsini"]}, trials=trials,
                                 options=opts)
        vs = s["vsini"] + np.asarray(vsini_steps, float)
        cv = calibrate_parameter(p, "vsini", vs, fixed={"inclination": ci.estimate},
                                 options=dataclasses.replace(opts, seed=seed + 1))
    for key, c, truth in (("inc", ci, s["inc"]), ("vsini", cv, s["vsini"])):
        out.update({f"cal_{key}": c.estimate, f"cal_{key}_raw": c.raw, f"cal_{key}_lo68": c.lo68,
                    f"cal_{key}_hi68": c.hi68, f"cal_{key}_lo95": c.lo95, f"cal_{key}_hi95": c.hi95,
                    f"cal_{key}_in68": bool(c.lo68 <= truth <= c.hi68), f"cal_{key}_in95": bool(c.lo95 <= truth <= c.hi95),
                    f"cal_{key}_no_crossing": c.no_crossing, f"cal_{key}_solves": c.n_solves,
                    f"cal_{key}_s": c.seconds, f"cal_{key}_center": c.center.tolist(),
                    f"cal_{key}_spread": c.spread.tolist(), f"cal_{key}_trials": c.trials.tolist()})
        pr = c.member_profiles[other]
        est = np.array([profile_minimum(c.values, pr[:, m]) for m in range(pr.shape[1])])
        b = belt_estimate(c.trials, est[1:].reshape(c.trials.size, c.n_sim), est[0])
        out.update({f"calx_{key}": b["estimate"], f"calx_{key}_raw": float(est[0]), f"calx_{key}_lo68": b["lo68"],
                    f"calx_{key}_hi68": b["hi68"], f"calx_{key}_in68": bool(b["lo68"] <= truth <= b["hi68"]),
                    f"calx_{key}_in95": bool(b["lo95"] <= truth <= b["hi95"])})
    out.update(cal_column=column, calx_column=other, cal_sim_lmbd=ci.sim_lmbd, cal_lmbd=float(settings.lmbd),
               cal_oversample=int(oversample))
    return out


def run_joint(s, start_inc=45.0, dvsini=2.0, maxiter=3000):
    from dopplermap.jointfit import joint_fit

    p = s["problem"]
    st = p.star.replace(inclination=start_inc, vsini=s["vsini"] + dvsini)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = joint_fit(p.replace(star=st), maxiter=maxiter)
    return dict(joint_inc=float(r.star.inclination), joint_vsini=float(r.star.vsini),
                joint_wall_s=time.perf_counter() - t0, joint_success=bool(r.map.success))


def run_coverage(s, n_boot=20, min_frac=0.5):
    import dopplermap as dm
    from dopplermap import uncertainty as U
    from dopplermap.geometry import cell_geometry

    p = s["problem"]
    pre = p.pre
    kw = p.invert_kwargs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best = dm.invert(pre, p.obs, **kw)
        t0 = time.perf_counter()
        # the settings the uncertainties were measured with (those of dopplermap invert)
        up = p.replace(settings=p.settings.replace(tol=1e-6, maxiter=1000, fit_rv=True, fit_amp=True))
        uncs = {"laplace-posterior": U.laplace(up, best, width="posterior"),
                "laplace-sandwich": U.laplace(up, best, width="sandwich")}
        t1 = time.perf_counter()
        uncs["bootstrap"] = U.bootstrap(up, best, n_boot=n_boot, seed=s["k"])
        t2 = time.perf_counter()
    g = p.grid
    geo = cell_geometry((g.lat, g.lon, g.area), p.obs.times, (p.star.inclination, p.star.vsini, p.star.period), xp=np)
    seen = (np.asarray(geo.mu) > 0.2).mean(axis=0)  # fraction of epochs a cell is well on the disc
    well = seen >= min_frac
    out = dict(cov_n_well=int(well.sum()), cov_n_spotted=int((well & (s["truth_fssc"] > 0.1)).sum()), cov_laplace_s=t1 - t0, cov_boot_s=t2 - t1,
               map_corr_cool=float(np.corrcoef(best.fssc[well], s["truth_fssc"][well])[0, 1]))
    for name, u in uncs.items():
        cc = np.abs(best.fssc - s["truth_fssc"]) <= u.sigma_fssc
        ch = np.abs(best.fssh - s["truth_fssh"]) <= u.sigma_fssh
        out[f"cov_{name}_cool"] = float(cc[well].mean())
        out[f"cov_{name}_hot"] = float(ch[well].mean())
        out[f"cov_{name}_both"] = float(np.concatenate([cc[well], ch[well]]).mean())
        spotted = well & (s["truth_fssc"] > 0.1)  # the cells whose value is not the floor
        out[f"cov_{name}_cool_spotted"] = float(cc[spotted].mean()) if spotted.any() else None
        out[f"cov_{name}_cool_spotted_z"] = (np.abs(best.fssc - s["truth_fssc"])[spotted]
                                              / u.sigma_fssc[spotted]).tolist()
        out[f"sig_{name}_median"] = float(np.median(u.sigma_fssc[well]))
        if u.lower is not None:  # Laplace: the bounded 1-sigma intervals (inside [0, 1])
            ic = (u.lower[0] <= s["truth_fssc"]) & (s["truth_fssc"] <= u.upper[0])
            ih = (u.lower[1] <= s["truth_fssh"]) & (s["truth_fssh"] <= u.upper[1])
            out[f"cov_{name}_interval_both"] = float(np.concatenate([ic[well], ih[well]]).mean())
            out[f"cov_{name}_interval_cool_spotted"] = float(ic[spotted].mean()) if spotted.any() else None
        out[f"cov_{name}_never_visible_inf"] = bool(np.all(np.isinf(u.sigma_fssc[u.never_visible])))
    return out


def run_alt(s, incs=None):
    """Maximum entropy at reduced chi2 = 1, per inclination (vsini at the truth)."""
    import jax.numpy as jnp

    import dopplermap as dm
    from dopplermap.search import lambda_for_chi2, pad_precomputed, seed_entropy

    p = s["problem"]
    incs = INC_GRID if incs is None else incs
    t0 = time.perf_counter()
    rows = []
    for inc in incs:
        pt = p.replace(star=p.star.replace(inclination=float(inc)))
        pre = pad_precomputed(pt.pre)
        st = pt.settings  # only these settings, as measured (no weights, light curve or solver choice)
        padded = dm.Problem(grid=None, star=None, obs=pt.obs, components=None, form=pre,
                            settings=dm.Settings(regulariser=st.regulariser, tol=st.tol, maxiter=st.maxiter,
                                                 fit_rv=st.fit_rv, fit_amp=st.fit_amp, solver="lbfgsb"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                lm, res, trials = lambda_for_chi2(padded, 1.0, lo=0.01, hi=100.0, rtol=2e-3, max_solves=12)
            except Exception as exc:  # noqa: BLE001  (a point that fails is recorded, not fatal)
                rows.append(dict(inc=float(inc), error=f"{type(exc).__name__}: {exc}"))
                continue
        ent = float(seed_entropy(jnp.asarray(res.fssc), jnp.asarray(res.fssh), pre.cell_area))
        rows.append(dict(inc=float(inc), lmbd=float(lm), chi2=float(res.chi2), entropy=ent,
                         regulariser=float(res.regulariser_value), n_solves=len(trials)))
    out = dict(alt_wall_s=time.perf_counter() - t0, alt_rows=rows)
    out.update(alt_estimates(rows))
    return out


def alt_estimates(rows):
    """Inclination of maximum entropy at chi2 = 1 (the seed's entropy term is lower = more
    entropic, so its minimum) and of the largest lambda reaching chi2 = 1."""
    ok = [r for r in rows if "entropy" in r]
    if len(ok) < 3:
        return {}
    v = np.array([r["inc"] for r in ok])
    b_ent, _, _ = continuous_interval(v, np.array([r["entropy"] for r in ok]), 0.0)
    b_lm, _, _ = continuous_interval(v, -np.log([r["lmbd"] for r in ok]), 0.0)
    return dict(alt_inc_maxent=b_ent, alt_inc_maxlmbd=b_lm)


def _hessian(hvp, x, fidx, scale, chunk):
    """Dense ``scale * H`` over the parameters ``fidx`` from ``hvp`` (as in uncertainty.laplace)."""
    import jax.numpy as jnp

    cols = np.empty((fidx.size, fidx.size))
    for a in range(0, fidx.size, chunk):
        ids = fidx[a:a + chunk]
        basis = np.zeros((chunk if hvp.batched else ids.size, x.size))
        basis[np.arange(ids.size), ids] = 1.0
        cols[a:a + ids.size] = np.asarray(hvp(x, jnp.asarray(basis)))[:ids.size, fidx]
    return scale * 0.5 * (cols + cols.T)


def run_evidence(s, incs=None, chunk=64):
    """Laplace evidence of each inclination (vsini at the truth), map integrated out at fixed lambda.

    ``-log Z = N/2 loss + 1/2 log det H - 1/2 log det H_prior`` at the MAP, ``N = n_epoch n_vel``,
    ``H`` the Hessian of ``N/2 loss`` over the free parameters (filling factors off their
    bounds, rv, amp), ``H_prior`` its map block without the chi-square (MacKay's Occam factor;
    rv and amp have flat priors, a constant). Measured only; dopplermap does not do this.
    """
    import jax.numpy as jnp

    import dopplermap as dm
    from dopplermap.objective import DEFAULT_PENALTY
    from dopplermap.search import pad_precomputed
    from dopplermap.uncertainty import _free_mask, hvp_function

    p = s["problem"]
    incs = INC_GRID if incs is None else incs
    t0 = time.perf_counter()
    rows = []
    for inc in incs:
        pt = p.replace(star=p.star.replace(inclination=float(inc)))
        pre = pad_precomputed(pt.pre)
        kw = pt.invert_kwargs()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            best = dm.invert(pre, pt.obs, **kw)
        n = pt.obs.n_epoch * pt.obs.n_vel
        scale = 0.5 * n
        x = jnp.asarray(best.x)
        free = _free_mask(best, kw["fit_rv"], kw["fit_amp"])
        fidx = np.nonzero(free)[0]
        hv = hvp_function(jnp.asarray(best.lmbd), pre, pt.obs, best.regulariser, DEFAULT_PENALTY, chunk=chunk)
        hd = hvp_function(jnp.asarray(0.0), pre, pt.obs, "none", 0.0, chunk=chunk)

        h = _hessian(hv, x, fidx, scale, chunk)
        hp = h - _hessian(hd, x, fidx, scale, chunk)
        m = fidx < 2 * pre.n_cell
        s1, ld = np.linalg.slogdet(h)
        s2, ldp = np.linalg.slogdet(hp[np.ix_(m, m)])
        rows.append(dict(inc=float(inc), loss=float(best.loss), chi2=float(best.chi2), n_free=int(fidx.size),
                         logdet_h=float(ld) if s1 > 0 else None, logdet_prior=float(ldp) if s2 > 0 else None,
                         neg_log_z=float(scale * best.loss + 0.5 * (ld - ldp)) if s1 > 0 and s2 > 0 else None))
    ok = [r for r in rows if r["neg_log_z"] is not None]
    out = dict(ev_wall_s=time.perf_counter() - t0, ev_rows=rows)
    if len(ok) >= 3:
        v = np.array([r["inc"] for r in ok])
        nlz = np.array([r["neg_log_z"] for r in ok])
        b, lo, hi = continuous_interval(v, 2.0 * nlz, 1.0)  # -2 log Z plays the role of chi2
        out.update(ev_inc=b, ev_inc_lo68=lo, ev_inc_hi68=hi, ev_inc_in68=bool(lo <= s["inc"] <= hi),
                   ev_inc_loss=continuous_interval(v, np.array([r["loss"] for r in ok]), 0.0)[0])
    return out


DIAGNOSE_INCS = np.arange(35.0, 76.0, 5.0)


def diagnose(k, incs=DIAGNOSE_INCS, seeds=(1, 2, 3)):
    """Bias or scatter? The fixed-lambda profile of star ``k`` (vsini at the truth) on noise-free
    data and on other noise draws of the same star."""
    from dopplermap.search import evaluate_point

    out = []
    for kw in [dict(noise=False)] + [dict(noise_seed=sd) for sd in seeds]:
        s = make_star(k, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prof = np.array([evaluate_point(s["problem"], {"inclination": float(i)})["chi2_total"] for i in incs])
        b, lo, hi = continuous_interval(incs, prof, 1.0)
        out.append(dict(kw, best=b, lo68=lo, hi68=hi, dchi2_truth=float(np.interp(s["inc"], incs, prof) - prof.min())))
        print(f"star {k} (inc {s['inc']:.0f}) {kw}: best {b:.1f} [{lo:.1f}, {hi:.1f}], "
              f"dchi2(truth) {out[-1]['dchi2_truth']:.1f}", flush=True)
    return out


# ---------------------------------------------------------------------------------- report

def summarise(rows):
    def stats(key, truth):
        e = np.array([r[key] - r[truth] for r in rows if key in r])
        return dict(n=int(e.size), mae=float(np.mean(np.abs(e))) if e.size else None,
                    bias=float(np.mean(e)) if e.size else None, rms=float(np.sqrt(np.mean(e ** 2))) if e.size else None)

    def frac(key):
        v = [r[key] for r in rows if key in r]
        return float(np.mean(v)) if v else None

    out = {}
    for est in ("grid", "cont", "joint", "cal", "calx"):
        out[f"{est}_inc"] = stats(f"{est}_inc", "inc")
        out[f"{est}_vsini"] = stats(f"{est}_vsini", "vsini")
    for est in ("grid", "cont", "cal", "calx"):
        for key in ("inc", "vsini"):
            out[f"{est}_{key}_cover68"] = frac(f"{est}_{key}_in68")
            out[f"{est}_{key}_cover95"] = frac(f"{est}_{key}_in95")
    if any("ev_inc" in r for r in rows):
        out["ev_inc"] = stats("ev_inc", "inc")
        out["ev_inc_loss"] = stats("ev_inc_loss", "inc")
        out["ev_inc_cover68"] = frac("ev_inc_in68")
    if any("alt_inc_maxent" in r for r in rows):
        out["alt_inc_maxent"] = stats("alt_inc_maxent", "inc")
        out["alt_inc_maxlmbd"] = stats("alt_inc_maxlmbd", "inc")
    for m in ("laplace-posterior", "laplace-sandwich", "bootstrap"):
        v = [r[f"cov_{m}_both"] for r in rows if f"cov_{m}_both" in r]
        if v:
            out[f"cov_{m}"] = dict(mean=float(np.mean(v)), per_star=v)
        vi = [r[f"cov_{m}_interval_both"] for r in rows if f"cov_{m}_interval_both" in r]
        if vi:
            out[f"cov_{m}_interval"] = dict(mean=float(np.mean(vi)), per_star=vi)
    return out


def table(rows):
    h = ("| star | inc | vsini | E | gap | S/N | grid inc [68%] | cont inc [68%] | joint inc | grid vsini [68%] | "
         "cont vsini | joint vsini | dchi2(true inc) | grid s | joint s |")
    lines = [h, "|" + "---|" * (h.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['k']} | {r['inc']:.0f} | {r['vsini']:.0f} | {r['n_epoch']} | {'y' if r['gap'] else 'n'} | {r['snr']:.0f} | "
            f"{r['grid_inc']:.0f} [{r['grid_inc_lo68']:.0f}, {r['grid_inc_hi68']:.0f}] | "
            f"{r['cont_inc']:.1f} [{r['cont_inc_lo68']:.1f}, {r['cont_inc_hi68']:.1f}] | "
            f"{r.get('joint_inc', float('nan')):.1f} | "
            f"{r['grid_vsini']:.0f} [{r['grid_vsini_lo68']:.0f}, {r['grid_vsini_hi68']:.0f}] | "
            f"{r['cont_vsini']:.2f} | {r.get('joint_vsini', float('nan')):.2f} | {r['grid_inc_dchi2_truth']:.1f} | "
            f"{r['grid_wall_s']:.0f} | {r.get('joint_wall_s', float('nan')):.0f} |")
    return "\n".join(lines)


def cal_table(rows):
    """The calibrated estimator against the raw read-out it calibrates."""
    h = ("| star | inc | vsini | E | gap | S/N | raw inc | calibrated inc [68 %] | 95 % | raw vsini | "
         "calibrated vsini [68 %] | 95 % | solves | s |")
    lines = [h, "|" + "---|" * (h.count("|") - 1)]
    for r in rows:
        if "cal_inc" not in r:
            continue
        lines.append(
            f"| {r['k']} | {r['inc']:.0f} | {r['vsini']:.0f} | {r['n_epoch']} | {'y' if r['gap'] else 'n'} | "
            f"{r['snr']:.0f} | {r['cal_inc_raw']:.1f} | {r['cal_inc']:.1f} [{r['cal_inc_lo68']:.1f}, "
            f"{r['cal_inc_hi68']:.1f}] | [{r['cal_inc_lo95']:.1f}, {r['cal_inc_hi95']:.1f}] | "
            f"{r['cal_vsini_raw']:.2f} | {r['cal_vsini']:.2f} [{r['cal_vsini_lo68']:.2f}, {r['cal_vsini_hi68']:.2f}] | "
            f"[{r['cal_vsini_lo95']:.2f}, {r['cal_vsini_hi95']:.2f}] | {r['cal_inc_solves'] + r['cal_vsini_solves']} | "
            f"{r['cal_inc_s'] + r['cal_vsini_s']:.0f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"stars {QUICK} only")
    ap.add_argument("--stars", default=None, help="comma-separated star indices (default all, or --quick's)")
    ap.add_argument("--coverage", type=int, default=3, help="per-cell coverage on the first N stars run")
    ap.add_argument("--alt", type=int, default=0, help="max-entropy-at-chi2=1 estimator on the first N stars run")
    ap.add_argument("--evidence", type=int, default=0, help="Laplace evidence per inclination on the first N stars run")
    ap.add_argument("--no-joint", action="store_true")
    ap.add_argument("--calibrate", type=int, default=0, metavar="N",
                    help="the calibrated estimator with N simulations per trial (0: not run)")
    ap.add_argument("--cal-lmbd", type=float, default=None, help="lambda of the calibrated estimator's base read-out")
    ap.add_argument("--cal-sim-lmbd", type=float, default=None, help="lambda of its trial maps (default 0.1 x lambda)")
    ap.add_argument("--cal-column", default="chi2_total", help="its base read-out: chi2_total or loss")
    ap.add_argument("--cal-oversample", type=int, default=4, help="its simulations on a grid of this many times the cells")
    ap.add_argument("--diagnose", type=int, default=None, help="star K: profile on noise-free data and 3 other noise draws")
    ap.add_argument("--out", default=None, help="JSON results file")
    ap.add_argument("--resummarise", default=None, help="recompute the summary and table of a results JSON")
    args = ap.parse_args()
    if args.diagnose is not None:
        import jax

        jax.config.update("jax_enable_x64", True)
        return diagnose(args.diagnose)
    if args.resummarise:
        import json

        with open(args.resummarise) as fh:
            out = json.load(fh)
        for r in out["stars"]:
            for key, truth in (("inc", r["inc"]), ("vsini", r["vsini"])):
                v, pr = r[f"profile_{key}"]
                b, lo, hi = continuous_interval(v, pr, 1.0)
                _, lo95, hi95 = continuous_interval(v, pr, 4.0)
                r.update({f"cont_{key}": b, f"cont_{key}_lo68": lo, f"cont_{key}_hi68": hi,
                          f"cont_{key}_in68": bool(lo <= truth <= hi), f"cont_{key}_in95": bool(lo95 <= truth <= hi95)})
            if "alt_rows" in r:
                r.update(alt_estimates(r["alt_rows"]))
        out["summary"] = summarise(out["stars"])
        print(table(out["stars"]))
        for k, v in out["summary"].items():
            print(k, v)
        write_json(args.resummarise, out)
        return out
    import jax

    jax.config.update("jax_enable_x64", True)
    ks = [int(x) for x in args.stars.split(",")] if args.stars else (QUICK if args.quick else list(range(len(STARS))))
    load0 = os.getloadavg()
    rows = []
    t_all = time.perf_counter()
    for n, k in enumerate(ks):
        s = make_star(k)
        r = {key: s[key] for key in ("k", "inc", "vsini", "n_epoch", "gap", "snr")}
        r.update(run_grid(s))
        if not args.no_joint:
            r.update(run_joint(s))
        if args.calibrate:
            r.update(run_calibrated(s, r, n_sim=args.calibrate, lmbd=args.cal_lmbd, sim_lmbd=args.cal_sim_lmbd,
                                    column=args.cal_column, oversample=args.cal_oversample))
        if n < args.coverage:
            r.update(run_coverage(s))
        if n < args.alt:
            r.update(run_alt(s))
        if n < args.evidence:
            r.update(run_evidence(s))
        rows.append(r)
        print(f"star {k}: inc {s['inc']:.0f} -> grid {r['grid_inc']:.0f} [{r['grid_inc_lo68']:.0f},{r['grid_inc_hi68']:.0f}]"
              f" cont {r['cont_inc']:.1f} joint {r.get('joint_inc', float('nan')):.1f}; vsini {s['vsini']:.0f} -> "
              f"grid {r['grid_vsini']:.0f} cont {r['cont_vsini']:.2f} joint {r.get('joint_vsini', float('nan')):.2f}"
              + (f"; coverage post {r['cov_laplace-posterior_both']:.2f} sand {r['cov_laplace-sandwich_both']:.2f}"
                 f" boot {r['cov_bootstrap_both']:.2f}" if "cov_bootstrap_both" in r else "")
              + (f"; alt maxent inc {r.get('alt_inc_maxent', float('nan')):.1f}" if "alt_wall_s" in r else "")
              + (f"; evidence inc {r.get('ev_inc', float('nan')):.1f}" if "ev_wall_s" in r else "")
              + (f"; calibrated inc {r['cal_inc']:.1f} [{r['cal_inc_lo68']:.1f}, {r['cal_inc_hi68']:.1f}] vsini "
                 f"{r['cal_vsini']:.2f} [{r['cal_vsini_lo68']:.2f}, {r['cal_vsini_hi68']:.2f}]" if "cal_inc" in r else ""),
              flush=True)
        if args.out:  # a partial file after every star: the run can be stopped at any moment
            write_json(args.out, dict(partial=True, stars=rows, summary=summarise(rows)))
    summ = summarise(rows)
    print(table(rows))
    print(cal_table(rows))
    for k, v in summ.items():
        print(k, v)
    out = dict(machine=platform.node(), cpu_count=os.cpu_count(), backend=jax.default_backend(),
               load_before=load0, load_after=os.getloadavg(), wall_s=time.perf_counter() - t_all,
               settings=dict(n_cell=N_CELL, n_vel=N_VEL, inc_grid=INC_GRID.tolist(), vsini_steps=VSINI_STEPS.tolist(),
                             fine_grid_cells=int(fine_grid()[0].size), calibrate_n_sim=args.calibrate,
                             calibrate_trials=CAL_TRIALS.tolist(), calibrate_lmbd=args.cal_lmbd,
                             calibrate_sim_lmbd=args.cal_sim_lmbd, calibrate_column=args.cal_column,
                             calibrate_oversample=args.cal_oversample),
               stars=rows, summary=summ)
    if args.out:
        write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()
