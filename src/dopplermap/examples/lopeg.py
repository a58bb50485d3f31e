"""Worked real-data example: LO Pegasi mapped from ZDIpy's own set-up.

    dopplermap example lopeg .     # writes ./lopeg.py
    python lopeg.py --data DIR [--out lopeg-run]    # DIR: ZDIpy's test data (inzdi.dat, LSDprof/)

The 16 LSD profiles of LO Peg (August 2014, shipped with ZDIpy; cite Folsom et al. 2016,
MNRAS 457, 580) and ZDIpy's ``inzdi.dat`` / ``model-voigt-line.dat`` are turned into a
dopplermap target and inverted, exactly as the command-line recipe in docs/observations.md:

    dopplermap import-zdipy DATA/inzdi.dat DATA/model-voigt-line.dat --out lopeg.toml --teff 4500 --spot-teff 3500
    dopplermap invert lopeg.toml --out results

ZDIpy's parameters carried over: inclination 45 deg, vsini 67.7 km/s, P 0.4232 d, dOmega
0.02 rad/d, cycle zero JD 2456892.015, v_rad -19.8 km/s, R 65000, its Voigt line, linear
limb darkening 0.66, window -80..80 km/s around the line centre, 60 rings (4584 cells).
Cool spots only: ZDIpy maps one relative brightness; the imported target fits photosphere
(4500 K) + cool spots (3500 K) only (``[inversion] fit_components = ["cool"]``, the hot map held
at its floor; the hot-spot temperature is set equal to the photosphere's besides).

Writes ``OUT/lopeg.toml`` (+ epochs table), the result folder ``OUT/results`` and prints the
reduced chi-square, iterations, wall time and where the cool spots are.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import dopplermap as dm
from dopplermap.app.output import Output
from dopplermap.app.target import run_target
from dopplermap.app.zdipy import import_zdipy
from dopplermap.config import load_config

T_PHOT, T_COOL = 4500.0, 3500.0  # K; LO Peg is a K5-K7 dwarf


def spot_summary(grid, fssc, threshold: float = 0.3) -> list[str]:
    """Lines describing the cool spots: per 15-degree latitude band the area covered and the
    longitude of the densest cell (bands with nothing above ``threshold`` are left out)."""
    lat, lon, area = np.degrees(grid.lat), np.degrees(grid.lon), np.asarray(grid.area)
    out = []
    for lo in range(75, -90, -15):
        band = (lat >= lo) & (lat < lo + 15)
        if not band.any():
            continue
        spotted = area[band] * fssc[band]
        frac = float(spotted.sum() / area[band].sum())
        k = int(np.argmax(fssc[band]))
        if fssc[band][k] < threshold:
            continue
        out.append(f"latitude {lo:+3d}..{lo + 15:+3d} deg: {100 * frac:4.1f}% of the band spotted, densest at "
                   f"longitude {lon[band][k]:5.1f} deg (filling factor {fssc[band][k]:.2f})")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True,
                    help="folder with ZDIpy's inzdi.dat, model-voigt-line.dat and LSDprof/")
    ap.add_argument("--out", type=Path, default=Path("lopeg-run"))
    args = ap.parse_args(argv)
    if not (args.data / "inzdi.dat").is_file():
        ap.exit(2, f"error: --data {args.data}: no inzdi.dat there (give the folder of ZDIpy's LO Peg test data)\n")
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    toml, epochs, lost = import_zdipy(args.data / "inzdi.dat", args.data / "model-voigt-line.dat",
                                      args.out / "lopeg.toml", overwrite=True, t_phot=T_PHOT, t_cool=T_COOL)
    print(f"wrote {toml} and {epochs}; not carried over from ZDIpy:")
    for item in lost:
        print(f"  - {item}")
    cfg = load_config(toml)
    summary = run_target(cfg, args.out / "results", output=Output(quiet=False), config_file=toml)
    wall = time.perf_counter() - t0
    res = dm.load_result(args.out / "results")
    print(f"reduced chi2 {summary['chi2']:.4f} after {summary['iterations']} iterations ({summary['stop_reason']}); "
          f"{summary['n_epoch']} epochs x {summary['n_vel']} velocities, {summary['n_cell']} cells; "
          f"wall time {wall:.1f} s (solve {summary['solve_time']:.2f} s)")
    print("cool spots:")
    for line in spot_summary(res.grid, np.asarray(res.fssc)):
        print("  " + line)
    print(f"results in {args.out / 'results'}")
    return summary


if __name__ == "__main__":
    main()
