"""Maps that evolve: a simulated campaign with a growing and a decaying spot and a shear,
inverted with one static map and with one map per time window; and the solve time of
K = 1, 4, 16 windows.

    PYTHONPATH=src python benchmarks/bench_windows.py campaign [--n-cell 600] [--n-epoch 60]
        [--rotations 12] [--windows 4] [--lmbd-time 10] [--time-coupling quadratic]
        [--domega-grid 0,0.025,0.05,0.075,0.1]
        [--lmbd-time-scan 1,10,100] [--figures DIR] [--out benchmarks/results/windows-campaign.json]
    PYTHONPATH=src python benchmarks/bench_windows.py timing [--n-cell 2500] [--n-epoch 150]
        [--ks 1,4,16] [--out benchmarks/results/windows-timing.json]

``campaign``: the star is simulated by :func:`campaign_profiles`, a NumPy disc integrator
written here, independent of dopplermap's model (the fine grid, spot shapes, Planck ratios
and Gaussian lines of ``bench_calibration``, with differential rotation
``Omega(lat) = Omega_eq - domega sin^2 lat`` and spots whose filling factor changes with
time: one grows from nothing, one decays to nothing, one stays). It is inverted with the
true domega by a static map and by K windows (lambda the same; ``lmbd_time`` couples the
windows), reporting chi2, each window's correlation with the true map of that window (the
fine-grid fill averaged over the window's epochs and over each inversion cell), the
spot area against time, and a grid over domega (chi2 of each fit; the best value from a
parabola through the minimum, the interval where chi2 x N rises by <= 1), and the windowed
fit at other ``lmbd_time`` values (``--lmbd-time-scan``).

``timing``: the demo star at the given size, solved with 1, 4 and 16 windows
(``lmbd_time`` 1, started from the static map, as a campaign would be), wall time and
peak resident memory of each solve.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_calibration as B  # noqa: E402
import bench_domega as D  # noqa: E402
from _common import write_json  # noqa: E402

PERIOD = 2.0
INC, VSINI = 60.0, 40.0
# (lat, lon, radius deg, kind, peak fill, evolution): "grow" 0 -> peak, "decay" peak -> 0, "steady"
SPOTS = ((40.0, 60.0, 20.0, "cool", 0.8, "grow"),
         (10.0, 200.0, 20.0, "cool", 0.8, "decay"),
         (-15.0, 310.0, 15.0, "cool", 0.7, "steady"))


def spot_amplitudes(t, t_end):
    """Each spot's fill factor scale at times ``t`` (linear growth / decay over the campaign)."""
    x = np.clip(np.asarray(t, float) / t_end, 0.0, 1.0)
    out = []
    for *_, evo in SPOTS:
        out.append(x if evo == "grow" else 1.0 - x if evo == "decay" else np.ones_like(x))
    return np.stack(out, axis=1)  # (n_t, n_spot)


def fine_fill(flat, flon, amps):
    """Cool fill (n_fine,) of the spots scaled by ``amps`` (n_spot,)."""
    spots = [(la, lo, r, kind, fill * a) for (la, lo, r, kind, fill, _), a in zip(SPOTS, amps, strict=True)]
    return B.spot_fill(flat, flon, spots)


def campaign_profiles(flat, flon, farea, times, vels, domega, t_end):
    """Disc-integrated, continuum-normalised profiles (n_epoch, n_vel) of the evolving,
    differentially rotating star: for each epoch the fill of that moment, the cells at
    ``alpha = lon + Omega(lat) t`` (dopplermap's convention, docs/conventions.md)."""
    amps = spot_amplitudes(times, t_end)
    out = np.zeros((len(times), len(vels)))
    for e, t in enumerate(times):
        fc, fh = fine_fill(flat, flon, amps[e])
        out[e] = D.dr_epoch(flat, flon, farea, fc, fh, t, vels, INC, VSINI, PERIOD, domega)
    return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def corr(a, b):
    ok = np.isfinite(a) & np.isfinite(b)
    return float(np.corrcoef(a[ok], b[ok])[0, 1])


def campaign(args):
    import dopplermap as dm
    from dopplermap.problem import DEMO_T_PHOT, DEMO_WAVELENGTH_NM, Problem, Settings
    from dopplermap.windows import Windows

    rng = np.random.default_rng(7)
    t_end = args.rotations * PERIOD
    times = np.sort(rng.uniform(0.0, t_end, args.n_epoch))
    half = VSINI + 2.0 + 2.5 * B.LINES[0][1]
    vels = np.linspace(-half, half, args.n_vel)
    flat, flon, farea = B.fine_grid(args.n_lat)
    t0 = time.perf_counter()
    clean = campaign_profiles(flat, flon, farea, times, vels, args.domega, t_end)
    t_sim = time.perf_counter() - t0
    noisy = clean + rng.normal(size=clean.shape) / args.snr
    mean = clean.mean(axis=1, keepdims=True)
    obs = dm.Observations.create(times, vels, noisy / mean, np.full_like(noisy, 1.0 / args.snr) / mean,
                                 source="evolving campaign")
    grid = dm.latitude_band_grid(args.n_cell)
    star = dm.StarParams(inclination=INC, vsini=VSINI, period=PERIOD, t0=0.0, domega=args.domega)
    settings = Settings(lmbd=args.lmbd, tol=args.tol, maxiter=args.maxiter, solver="lbfgsb",
                        lmbd_time=args.lmbd_time, time_coupling=args.time_coupling)
    static = Problem(grid=grid, star=star, obs=obs, components=B._components(), settings=settings,
                     t_phot=DEMO_T_PHOT, wavelength_nm=DEMO_WAVELENGTH_NM, source="evolving campaign")
    windows = Windows.count(args.windows, times)
    win = static.replace(windows=windows)
    idx = windows.index(times)
    # truth of each window: the fine fill averaged over the window's epochs, then over each cell
    amps = spot_amplitudes(times, t_end)
    truth = []
    for k in range(windows.n_window):
        mean_amp = amps[idx == k].mean(axis=0)
        fc, _ = fine_fill(flat, flon, mean_amp)
        truth.append(B.cell_truth(grid, flat, flon, fc))
    truth = np.array(truth)
    truth_static = B.cell_truth(grid, flat, flon, fine_fill(flat, flon, amps.mean(axis=0))[0])
    area = np.asarray(grid.area) / np.sum(grid.area)

    def solve(problem, x0=None):
        t = time.perf_counter()
        res = dm.invert(problem, x0=x0)
        return res, time.perf_counter() - t

    r_static, t_static = solve(static)
    # the windowed solve starts from the static map in every window (its rv, amp too)
    x0 = win.layout.join(np.tile(r_static.fssc, windows.n_window), np.tile(r_static.fssh, windows.n_window),
                         r_static.rv, r_static.amp)
    r_win, t_win = solve(win, x0=x0)
    fc_w, _ = r_win.window_maps()
    out = {
        "setup": {"n_cell": args.n_cell, "n_epoch": args.n_epoch, "n_vel": args.n_vel, "rotations": args.rotations,
                  "snr": args.snr, "domega_true": args.domega, "windows": windows.n_window, "lmbd": args.lmbd,
                  "lmbd_time": args.lmbd_time, "time_coupling": args.time_coupling, "n_fine": int(flat.size), "simulate_s": t_sim,
                  "epochs_per_window": np.bincount(idx, minlength=windows.n_window).tolist()},
        "static": {"chi2": r_static.chi2, "iterations": r_static.iterations, "solve_s": t_static,
                   "corr_per_window": [corr(r_static.fssc, truth[k]) for k in range(windows.n_window)],
                   "corr_mean_truth": corr(r_static.fssc, truth_static),
                   "area": float(r_static.fssc @ area)},
        "windowed": {"chi2": r_win.chi2, "iterations": r_win.iterations, "solve_s": t_win,
                     "corr_per_window": [corr(fc_w[k], truth[k]) for k in range(windows.n_window)],
                     "area": (fc_w @ area).tolist(), "temporal": r_win.temporal},
        "true_area": (np.nan_to_num(truth) @ area).tolist(),
        "window_spans": windows.spans.tolist(),
    }
    print(f"static   chi2 {r_static.chi2:.4f}  corr per window {np.round(out['static']['corr_per_window'], 3)}  "
          f"({t_static:.1f} s)")
    print(f"windowed chi2 {r_win.chi2:.4f}  corr per window {np.round(out['windowed']['corr_per_window'], 3)}  "
          f"({t_win:.1f} s)")
    print(f"area true {np.round(out['true_area'], 4)}  windowed {np.round(out['windowed']['area'], 4)}  "
          f"static {out['static']['area']:.4f}")
    if args.figures:
        from dopplermap.io.results import with_context
        from dopplermap.plot import plot_result

        shown = with_context(r_win, grid=grid, star=star, obs=obs, truth={"fssc": truth.ravel(),
                                                                          "fssh": np.zeros(truth.size)})
        plot_result(shown, Path(args.figures), workers=1)
    if args.lmbd_time_scan:
        scan = []
        for lt in [float(v) for v in args.lmbd_time_scan.split(",")]:
            r, _ = solve(win.replace(settings=win.settings.replace(lmbd_time=lt)), x0=x0)
            c = [corr(m, truth[k]) for k, m in enumerate(r.window_maps()[0])]
            scan.append({"lmbd_time": lt, "chi2": r.chi2, "temporal": r.temporal, "corr_per_window": c})
            print(f"lmbd_time {lt:g}: chi2 {r.chi2:.4f}  corr per window {np.round(c, 3)}  mean {np.mean(c):.3f}")
        out["lmbd_time_scan"] = scan
    if args.domega_grid:
        grid_vals = [float(v) for v in args.domega_grid.split(",")]
        rows = {"static": [], "windowed": []}
        for d in grid_vals:
            s_d = static.replace(star=star.replace(domega=d))
            w_d = s_d.replace(windows=windows)
            rs, _ = solve(s_d)
            xw = w_d.layout.join(np.tile(rs.fssc, windows.n_window), np.tile(rs.fssh, windows.n_window), rs.rv, rs.amp)
            rw, _ = solve(w_d, x0=xw)
            rows["static"].append(rs.chi2)
            rows["windowed"].append(rw.chi2)
            print(f"domega {d:.4f}: chi2 static {rs.chi2:.5f}  windowed {rw.chi2:.5f}")
        n_pts = obs.flux.size
        out["domega_grid"] = {"values": grid_vals, **rows}
        for name, chi in rows.items():
            best, lo, hi = B.continuous_interval(grid_vals, np.asarray(chi) * n_pts, 1.0)[:3]
            out["domega_grid"][f"{name}_best"] = [best, lo, hi]
            print(f"domega {name}: best {best:.4f} [{lo:.4f}, {hi:.4f}] (true {args.domega})")
    return out


def timing(args):
    import dopplermap as dm
    from dopplermap.problem import Settings, demo_problem
    from dopplermap.windows import Windows

    prob = demo_problem(n_cell=args.n_cell, n_epoch=args.n_epoch, n_vel=args.n_vel,
                        settings=Settings(lmbd=1.0, tol=args.tol, maxiter=args.maxiter, solver="lbfgsb", lmbd_time=1.0))
    t = time.perf_counter()
    base = dm.invert(prob)
    rows = [{"k": 1, "solve_s": time.perf_counter() - t, "compile_s": base.compile_time, "iterations": base.iterations,
             "chi2": base.chi2, "peak_rss_mb": peak_rss_mb()}]
    print(f"K=1: {rows[0]['solve_s']:.1f} s ({base.iterations} it, compile {base.compile_time:.1f} s), "
          f"peak RSS {rows[0]['peak_rss_mb']:.0f} MB")
    for k in args.ks:
        if k == 1:
            continue
        win = prob.replace(windows=Windows.count(k, prob.obs.times))
        x0 = win.layout.join(np.tile(base.fssc, k), np.tile(base.fssh, k), base.rv, base.amp)
        t = time.perf_counter()
        res = dm.invert(win, x0=x0)
        row = {"k": k, "solve_s": time.perf_counter() - t, "compile_s": res.compile_time,
               "iterations": res.iterations, "chi2": res.chi2, "peak_rss_mb": peak_rss_mb()}
        rows.append(row)
        print(f"K={k}: {row['solve_s']:.1f} s ({res.iterations} it, compile {res.compile_time:.1f} s), "
              f"chi2 {res.chi2:.4f}, peak RSS {row['peak_rss_mb']:.0f} MB")
    return {"setup": {"n_cell": args.n_cell, "n_epoch": args.n_epoch, "n_vel": args.n_vel, "tol": args.tol},
            "rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("campaign")
    c.add_argument("--n-cell", type=int, default=600)
    c.add_argument("--n-epoch", type=int, default=60)
    c.add_argument("--n-vel", type=int, default=28)
    c.add_argument("--n-lat", type=int, default=60)
    c.add_argument("--rotations", type=float, default=12.0)
    c.add_argument("--windows", type=int, default=4)
    c.add_argument("--snr", type=float, default=300.0)
    c.add_argument("--domega", type=float, default=0.05)
    c.add_argument("--lmbd", type=float, default=1.0)
    c.add_argument("--lmbd-time", type=float, default=10.0)
    c.add_argument("--time-coupling", default="quadratic")
    c.add_argument("--tol", type=float, default=1e-6)
    c.add_argument("--maxiter", type=int, default=1000)
    c.add_argument("--domega-grid", default="")
    c.add_argument("--lmbd-time-scan", default="")
    c.add_argument("--figures", default="")
    c.add_argument("--out", default="benchmarks/results/windows-campaign.json")
    t = sub.add_parser("timing")
    t.add_argument("--n-cell", type=int, default=2500)
    t.add_argument("--n-epoch", type=int, default=150)
    t.add_argument("--n-vel", type=int, default=32)
    t.add_argument("--ks", type=lambda s: [int(v) for v in s.split(",")], default=[1, 4, 16])
    t.add_argument("--tol", type=float, default=1e-5)
    t.add_argument("--maxiter", type=int, default=1000)
    t.add_argument("--out", default="benchmarks/results/windows-timing.json")
    args = ap.parse_args()
    out = campaign(args) if args.what == "campaign" else timing(args)
    write_json(args.out, out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
