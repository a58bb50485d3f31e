"""Worked example: a spot map from a TESS light curve alone.

    dopplermap example tess_lightcurve .     # writes ./tess_lightcurve.py
    python tess_lightcurve.py --file tess..._lc.fits --period 7.2 [--out tess-run]

The light curve (a SPOC ``*_lc.fits`` file, a lightkurve-saved one, or any file
``docs/lightcurves.md`` lists) becomes a target of light curves alone, exactly as the
command-line recipe of docs/lightcurves.md:

    [[lightcurves]] file = ..., bin = "auto", passband = "TESS"   (PDCSAP flux, SPOC's quality mask)
    dopplermap invert target.toml --out results --uncertainty laplace --uncertainty sandwich

The flux is binned to the resolution a map of ``--n-cell`` cells can use; the spots' contrasts come
from the temperatures in the TESS passband; the map is solved by Gauss-Newton (``solver = "auto"``
on light curves alone, which ends at the minimum where L-BFGS-B stops far above it); the Laplace
and sandwich uncertainty maps are written beside it. Printed: the fit, and where in longitude the
cool spots are. A light curve fixes the spots' longitudes and how much light they remove, not their
latitudes or hemisphere: read the map as a longitude / contrast map.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import dopplermap as dm
from dopplermap.app.output import Output
from dopplermap.app.target import run_target
from dopplermap.config import load_config

TEMPLATE = """# a map from a light curve alone (written by the tess_lightcurve example)
[star]
inclination = {inclination}
vsini = 5.0            # the star's geometry only: a light curve does not see it
period = {period}
t0 = {t0}

[temperatures]
phot = {teff}
cool = {spot_teff}
hot = {hot_teff}

[[lightcurves]]
file = "{file}"
bin = "auto"
passband = "TESS"

[grid]
n_cell = {n_cell}

[inversion]
lmbd = {lmbd}
"""


def longitude_summary(grid, fssc, width: float = 30.0) -> list[str]:
    """Lines giving, per ``width``-degree longitude band, the share of the band's surface covered
    by cool spots (the map's area-weighted filling factor) and the densest cell's longitude."""
    lon = np.mod(np.degrees(np.asarray(grid.lon)), 360.0)
    area = np.asarray(grid.area)
    fssc = np.asarray(fssc)
    out = []
    for lo in np.arange(0.0, 360.0, width):
        band = (lon >= lo) & (lon < lo + width)
        if not band.any():
            continue
        share = float(np.sum(area[band] * fssc[band]) / np.sum(area[band]))
        k = int(np.argmax(fssc[band]))
        out.append(f"longitude {lo:5.1f}..{lo + width:5.1f} deg: {100 * share:5.2f}% covered, densest at "
                   f"{lon[band][k]:5.1f} deg (filling factor {fssc[band][k]:.2f})")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", type=Path, required=True, help="the light-curve file (e.g. a SPOC *_lc.fits)")
    ap.add_argument("--period", type=float, required=True, help="rotation period (d)")
    ap.add_argument("--t0", type=float, default=2457000.0,
                    help="phase origin (BJD_TDB; longitudes count from it) [2457000, TESS's BJD offset]")
    ap.add_argument("--inclination", type=float, default=60.0, help="inclination (deg) [60]")
    ap.add_argument("--teff", type=float, default=5800.0, help="photosphere (K) [5800]")
    ap.add_argument("--spot-teff", type=float, default=4800.0, help="cool spots (K) [4800]")
    ap.add_argument("--lmbd", type=float, default=1.0, help="regularisation weight lambda [1]")
    ap.add_argument("--n-cell", type=int, default=2500, help="surface cells [2500]")
    ap.add_argument("--out", type=Path, default=Path("tess-run"))
    ap.add_argument("--overwrite", action="store_true", help="replace an earlier run in --out")
    args = ap.parse_args(argv)
    if not args.file.is_file():
        ap.exit(2, f"error: --file {args.file}: no such file\n")
    if args.out.exists() and not args.overwrite:
        ap.exit(2, f"error: --out {args.out} exists; pass --overwrite to replace the run in it\n")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    target = args.out / "target.toml"
    target.write_text(TEMPLATE.format(inclination=args.inclination, period=args.period, t0=args.t0, teff=args.teff,
                                      spot_teff=args.spot_teff, hot_teff=args.teff + 500.0,
                                      file=args.file.resolve().as_posix(), n_cell=args.n_cell, lmbd=args.lmbd))
    print(f"wrote {target}")
    summary = run_target(load_config(target), args.out / "results", output=Output(quiet=False, overwrite=args.overwrite),
                         config_file=target, uncertainty=["laplace", "sandwich"])
    wall = time.perf_counter() - t0
    res = dm.load_result(args.out / "results")
    print(f"reduced chi2 {summary['chi2']:.4f} after {summary['iterations']} iterations ({summary['stop_reason']}), "
          f"{summary['n_cell']} cells; wall time {wall:.1f} s")
    print("cool spots by longitude:")
    for line in longitude_summary(res.grid, res.fssc):
        print("  " + line)
    print(f"results in {args.out / 'results'}")
    return summary


if __name__ == "__main__":
    main()
