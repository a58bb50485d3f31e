"""The Gaussian prior on the per-epoch continuum offsets: offsets, chi2 and map.

    PYTHONPATH=src python benchmarks/bench_offsets.py [--no-lopeg]
        [--out benchmarks/results/offsets-cpu2.json]

1. A simulated star: 300 cells, 12 epochs, 30 velocities (``dm.demo_setup(seed=2)``), local
   lines made from a synthetic-LSD-like table (continuum 1.5 % below 1, Lorentzian wings) scaled
   with ``ew_method = "gaussian_fit"`` (SpotDIPy's convention) to EW 6 / 7 / 5 km/s, the demo's
   spots, snr 500, true offsets 0. Simulated twice: on the inversion's own grid and on a 4x
   finer grid (1200 cells, the truth painted on the 300 inversion cells). Inverted with the
   same lines at lambda 1 and 0.1, four ways: no prior, ``offset_sigma`` 0.01 and 0.005, and
   ``fit_amp = false``. Printed: max |amp|, mean amp,
   chi2, the cool-map correlation with the truth and the mean cool filling factor (true 0.066).
2. LO Peg (real data, ``../shared/data/lopeg``): ``import-zdipy`` -> target TOML (which holds
   ``fit_amp = false``, ZDIpy's convention), then through the TOML path with the offsets free,
   free with ``offset_sigma`` 0.01 and 0.005, and held: max |amp|, mean amp, chi2.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_json  # noqa: E402

LOPEG = Path(__file__).resolve().parents[2] / "shared" / "data" / "lopeg"
CASES = (("no prior", dict()), ("sigma 0.01", dict(offset_sigma=0.01)), ("sigma 0.005", dict(offset_sigma=0.005)),
         ("fit_amp=false", dict(fit_amp=False)))


def _lines(comps):
    import dopplermap as dm
    from dopplermap.broadening import scale_equivalent_width

    v = np.linspace(-40.0, 40.0, 161)
    table = dm.tabulated(v, 0.985 - 0.45 * np.exp(-v**2 / 32.0) - 0.05 / (1.0 + (v / 3.0) ** 2))
    return dm.ComponentSet(*[dm.Component(scale_equivalent_width(table, ew, "gaussian_fit"), c.limb_darkening,
                                          c.intensity) for c, ew in zip(comps, (6.0, 7.0, 5.0), strict=True)])


def gaussian_fit_star() -> list[dict]:
    """Part 1: the 300-cell star with ``gaussian_fit``-scaled lines and true offsets 0."""
    import dopplermap as dm

    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=12, n_vel=30, seed=2)
    lines = _lines(comps)
    truth, _ = dm.spot_map(grid, dm.DEMO_SPOTS)
    pre = dm.precompute(grid, star, times, vels, lines, method="dense")
    rows = []
    for data, sim_grid in (("same grid", grid), ("4x finer grid", dm.latitude_band_grid(1200))):
        sim = dm.simulate(sim_grid, star, times, vels, lines, dm.DEMO_SPOTS, snr=500, seed=2, method="dense")
        for lmbd in (1.0, 0.1):
            for name, kw in CASES:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", dm.DopplermapWarning)
                    r = dm.invert(pre, sim.obs, lmbd=lmbd, tol=1e-7, solver="lbfgsb", **kw)
                amp = np.asarray(r.amp)
                rows.append(dict(data=data, lmbd=lmbd, case=name, max_abs_amp=float(np.abs(amp).max()),
                                 mean_amp=float(amp.mean()), chi2=r.chi2, offset_prior=r.offset_prior,
                                 corr=float(np.corrcoef(r.fssc, truth)[0, 1]), mean_cool=float(np.mean(r.fssc)),
                                 true_mean_cool=float(np.mean(truth)), seconds=time.perf_counter() - t0))
                x = rows[-1]
                print(f"{data:13s} lambda {lmbd:4g}  {name:13s} max|amp| {x['max_abs_amp']:.4f}  mean amp "
                      f"{x['mean_amp']:+.4f}  chi2 {x['chi2']:.3f}  corr {x['corr']:.3f}  mean cool "
                      f"{x['mean_cool']:.3f} (true {x['true_mean_cool']:.3f})", flush=True)
    return rows


def lopeg() -> list[dict]:
    import dopplermap as dm
    from dopplermap.app.zdipy import import_zdipy
    from dopplermap.config import load_config
    from dopplermap.problem import from_config

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        toml, _, _ = import_zdipy(LOPEG / "inzdi.dat", LOPEG / "model-voigt-line.dat", Path(tmp) / "lopeg.toml",
                                  overwrite=True, t_phot=4500.0, t_cool=3500.0, echo=lambda m: None)
        text = toml.read_text()
        if "fit_amp = false" not in text:
            raise SystemExit("the imported LO Peg target no longer holds 'fit_amp = false'; update this benchmark")
        for name, kw in CASES:
            # each case through the TOML path: [inversion] fit_amp / offset_sigma written into the file
            keys = "fit_amp = false" if kw.get("fit_amp") is False else "fit_amp = true" + (
                f"\noffset_sigma = {kw['offset_sigma']}" if "offset_sigma" in kw else "")
            case = Path(tmp) / f"case_{len(rows)}.toml"
            case.write_text(text.replace("fit_amp = false", keys))
            prob = from_config(load_config(case))
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", dm.DopplermapWarning)
                r = dm.invert(prob)
            amp = np.asarray(r.amp)
            rows.append(dict(case=name, max_abs_amp=float(np.abs(amp).max()), mean_amp=float(amp.mean()),
                             chi2=r.chi2, offset_prior=r.offset_prior, lmbd=r.lmbd, iterations=r.iterations,
                             n_cell=r.n_cell, seconds=time.perf_counter() - t0, amp=amp.tolist()))
            x = rows[-1]
            print(f"LO Peg  {name:13s} max|amp| {x['max_abs_amp']:.4f}  mean amp {x['mean_amp']:+.4f}  chi2 "
                  f"{x['chi2']:.4f}  ({x['iterations']} it, {x['seconds']:.1f} s)", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-lopeg", action="store_true", help="skip the real-data part")
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    out = dict(machine=platform.node(), load_before=os.getloadavg(), star=gaussian_fit_star())
    if not args.no_lopeg:
        if (LOPEG / "inzdi.dat").is_file():
            out["lopeg"] = lopeg()
        else:
            print(f"LO Peg data not found in {LOPEG}: skipped")
    out["load_after"] = os.getloadavg()
    print(f"load after: {out['load_after']}")
    if args.out:
        write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()
