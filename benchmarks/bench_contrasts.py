"""Spot contrasts in the shipped passbands: blackbody ratios over each published response
against the monochromatic Planck ratio at one wavelength, and the power-2 limb darkening of the
Claret & Southworth (2023) table at the same temperatures.

For SpotDIPy's shipped example (photosphere 5080 K, cool spots 3800 K, log g 4.4) by default.
Usage::

    PYTHONPATH=src python benchmarks/bench_contrasts.py [--phot 5080] [--cool 3800] [--logg 4.4]
"""

from __future__ import annotations

import argparse

import numpy as np

from dopplermap import atmosphere
from dopplermap.choices import ATMOSPHERE_PASSBANDS
from dopplermap.profiles import intensity_ratio, planck


def _mean_wavelength(band: str) -> float:
    """The photon-counting response's mean wavelength."""
    wl, resp = atmosphere.passband_response(band)
    resp = resp / wl if band in atmosphere.ENERGY_RESPONSES else resp
    return float(np.trapezoid(resp * wl, wl) / np.trapezoid(resp, wl))


def _flat_band(t: float, t_phot: float, lo: float, hi: float) -> float:
    """Energy-weighted blackbody ratio over a flat band ``lo``-``hi`` nm."""
    wl = np.linspace(lo, hi, 2401)
    return float(np.trapezoid(planck(wl, t), wl) / np.trapezoid(planck(wl, t_phot), wl))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phot", type=float, default=5080.0)
    ap.add_argument("--cool", type=float, default=3800.0)
    ap.add_argument("--logg", type=float, default=4.4)
    a = ap.parse_args()
    print(f"cool {a.cool:g} K / photosphere {a.phot:g} K, log g {a.logg:g}")
    print("| band | response-weighted mean wavelength (nm) | Planck over the response | Planck at the mean "
          "wavelength | power-2 (g, h) photosphere | power-2 (g, h) spot |")
    print("|---|---|---|---|---|---|")
    for band in atmosphere.RESPONSES:
        lam = _mean_wavelength(band)
        if band in ATMOSPHERE_PASSBANDS:
            ld = [atmosphere.passband_limb_darkening(band, t, a.logg).coeffs for t in (a.phot, a.cool)]
            lds = [f"({c[0]:.4f}, {c[1]:.4f})" for c in ld]
        else:
            lds = ["-", "-"]  # no limb-darkening table for the band
        print(f"| {band} | {lam:.1f} | {atmosphere.passband_planck_ratio(a.cool, a.phot, band):.4f} | "
              f"{intensity_ratio(a.cool, a.phot, lam):.4f} | {lds[0]} | {lds[1]} |")
    print(f"Planck at 800 nm: {intensity_ratio(a.cool, a.phot, 800.0):.4f}; at 560 nm: "
          f"{intensity_ratio(a.cool, a.phot, 560.0):.4f}; flat 440-680 nm, energy-weighted: "
          f"{_flat_band(a.cool, a.phot, 440.0, 680.0):.4f}")


if __name__ == "__main__":
    main()
