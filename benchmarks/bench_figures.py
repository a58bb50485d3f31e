"""Time to write the result files and figures of a small run, in one process.

The run: 8 epochs x 47 velocities, 4000 cells, a 300-point light curve (the size of the
small real data set). The result is built without a solve (the model of the true map), so
only the writing is timed. In the same process, each repeated ``--repeat`` times (best of):

  * ``save_result`` with figures (this tree's plot.py), with 1 thread and the default;
  * the same, then ``report.html``;
  * with ``--before REV`` (a git revision), also the result files (FITS, JSON) then every
    figure with the plotting code of that revision, one after the other, for comparison.

Wall and CPU seconds are printed with the CPU/wall ratio of a fixed numpy workload run just
before, as a load gauge. Usage:
    PYTHONPATH=src python benchmarks/bench_figures.py [--repeat 3] [--before REV] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def gauge() -> float:
    a = np.random.default_rng(0).random((400, 400))
    c, w = time.process_time(), time.perf_counter()
    for _ in range(20):
        a = np.tanh(a @ a.T / 400)
    return (time.process_time() - c) / (time.perf_counter() - w)


def small_run():
    import jax.numpy as jnp

    import dopplermap as dm
    from dopplermap.app import with_context
    from dopplermap.result import InversionResult

    star, grid, times, vels, comps = dm.demo_setup(n_cell=4000, n_epoch=8, n_vel=47)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500, seed=1)
    pre = dm.precompute(grid, star, times, vels, comps)
    z = jnp.zeros(8)
    model = np.asarray(dm.forward(jnp.asarray(sim.fssc), jnp.asarray(sim.fssh), z, z, pre))
    n_it = 300
    hist = {"loss": np.geomspace(50, 1.1, n_it), "chi2": np.geomspace(40, 1.0, n_it),
            "regulariser": np.linspace(0.1, 0.6, n_it), "chi2_lc": np.geomspace(20, 1.05, n_it)}
    res = InversionResult(fssc=sim.fssc, fssh=sim.fssh, rv=np.zeros(8), amp=np.zeros(8), loss=1.1, chi2=1.0,
                          regulariser_value=0.6, lmbd=1.0, regulariser="mem", iterations=n_it, n_eval=n_it + 5,
                          success=True, stop_reason="converged", compile_time=0.5, solve_time=1.0, history=hist,
                          model=model, chi2_lc=1.05)
    t = np.sort(np.random.default_rng(2).uniform(0, 4 * star.period, 300))
    flux = 1 + 0.02 * np.sin(2 * np.pi * t / star.period)
    lc = {"times": t, "flux": flux, "err": np.full(300, 1e-3), "model": flux + 1e-4}
    return with_context(res, grid=grid, star=star, obs=sim.obs, pre=pre, components=comps, light_curve=lc,
                        config={"command": "bench"}, extra={"n_cell": 4000})


def load_before(rev: str):
    """The plot module of git revision ``rev`` as ``dopplermap._plot_before``."""
    src = subprocess.run(["git", "show", f"{rev}:src/dopplermap/plot.py"], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    spec = importlib.util.spec_from_loader("dopplermap._plot_before", loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "dopplermap"
    sys.modules[spec.name] = mod
    exec(compile(src, f"{rev}:plot.py", "exec"), mod.__dict__)
    return mod


def timed(fn, repeat):
    best = None
    for _ in range(repeat):
        g = gauge()
        c, w = time.process_time(), time.perf_counter()
        fn()
        row = {"wall": time.perf_counter() - w, "cpu": time.process_time() - c, "gauge": g}
        best = row if best is None or row["wall"] < best["wall"] else best
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", default=None,
                    help="also time the plot.py of this git revision (files + figures, serial)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    rev = None
    if args.before:
        rev = subprocess.run(["git", "rev-parse", args.before], capture_output=True, text=True, cwd=root,
                             check=True).stdout.strip()

    from astropy.io import fits

    from dopplermap import app, plot
    from dopplermap.io import results as rio
    from dopplermap.report import write_report

    res = small_run()
    old = load_before(rev) if rev else None
    work = Path(tempfile.mkdtemp(prefix="bench-figures-"))
    app.save_result(res, work / "warm", plots=True)  # imports, fonts, caches: the same for both sides
    if old is not None:
        old.plot_result(res, work / "warm_old")

    def before():
        d = work / "before"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir()
        rio._map_hdus(res, fits).writeto(d / "map.fits")
        rio._profile_hdus(res, fits).writeto(d / "profiles.fits")
        old.plot_result(res, d)

    def after(workers):
        def run():
            app.save_result(res, work / f"after{workers}", plots=True, plot_kwargs={"workers": workers})
        return run

    def after_report():
        app.save_result(res, work / "after_r", plots=True)
        write_report(work / "after_r")

    rows = {}
    if old is not None:
        rows["before (files + figures, serial)"] = timed(before, args.repeat)
    rows.update({"save_result, 1 thread": timed(after(1), args.repeat),
                 "save_result, default threads": timed(after(None), args.repeat),
                 "save_result + report.html": timed(after_report, args.repeat)})
    base = rows["before (files + figures, serial)"]["wall"] if old is not None else None
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}"
          + (f", before = {rev[:10]}" if rev else ""))
    print(f"{'':34s} {'wall s':>7s} {'cpu s':>7s} {'gauge':>6s}" + (f" {'x before':>8s}" if base else ""))
    for k, r in rows.items():
        print(f"{k:34s} {r['wall']:7.3f} {r['cpu']:7.3f} {r['gauge']:6.2f}"
              + (f" {base / r['wall']:8.2f}" if base else ""))
    sizes = {p.name: p.stat().st_size for p in (work / "after_r").iterdir()}
    print("files:", ", ".join(f"{k} {v / 1e3:.0f} kB" for k, v in sorted(sizes.items())))
    if args.out:
        from _common import write_json

        write_json(args.out, {"before": rev, "rows": rows, "sizes": sizes})
    shutil.rmtree(work, ignore_errors=True)
    _ = plot


if __name__ == "__main__":
    main()
