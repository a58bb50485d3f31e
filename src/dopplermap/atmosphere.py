"""Limb darkening of model atmospheres in photometric passbands, offline, from published tables.

The package ships a column subset of Claret & Southworth (2023, A&A 674, A63; VizieR
J/A+A/674/A63 table 1): the power-2 law ``I(mu)/I(1) = 1 - g (1 - mu^h)`` fitted to PHOENIX-COND
spherical model atmospheres (solar metallicity, microturbulence 2 km/s) for the Gaia G, BP, RP,
Kepler and TESS passbands, Teff 2300-12000 K and log g 0-6 (``data/claret2023_power2.csv``,
written by ``tools/subset_claret_power2.py`` from the catalogue; values unchanged). Cite the
paper when you use these coefficients.

:func:`passband_limb_darkening` interpolates ``g`` and ``h`` bilinearly in Teff and log g
between the table's nodes (exact at a node); a point whose four surrounding nodes are not all
in the table (outside its range, or in a hole of the grid) is refused, naming the point.
Only solar metallicity is tabulated. Nothing here reaches the network.

What the tables do not give: disc-centre intensities of the model atmospheres (the spots'
contrasts in the band) and monochromatic limb darkening at a line's wavelength; no compact
published table of either, with a licence that allows shipping it, is known to this package.
For the contrasts :func:`passband_planck_ratio` integrates the Planck function over a
passband's published response, photon-weighted as the detectors count photons::

    J(T) / J(T_phot) = int R(lambda) B_lambda(T) lambda dlambda / int R(lambda) B_lambda(T_phot) lambda dlambda

a blackbody contrast in the band, not a model atmosphere's. The responses (wavelength in nm,
values unchanged):

- TESS: the TESS Science Office's v2.0 curve (Ricker et al. 2015), ``data/tess_response_v2.csv``,
  written by ``tools/subset_tess_response.py``;
- Kepler: the mission's high-resolution response (Van Cleve & Caldwell, Kepler Instrument
  Handbook KSCI-19033) as pyphot ships it (MIT), ``data/kepler_response.csv``;
- Gaia G, BP, RP: ESA's (E)DR3 passbands (Riello et al. 2021, A&A 649, A3) as speclite ships
  them (BSD-3-Clause), ``data/gaia_dr3_*_response.csv``;
- Johnson-Cousins U, B, V, R, I: Bessell's (1990, PASP 102, 1181) standard passbands as speclite
  ships them, ``data/bessell_*_response.csv`` (energy responses: photon-weighted as ``R / lambda``;
  no limb-darkening table for them, :data:`dopplermap.choices.ATMOSPHERE_PASSBANDS`);

the last three written by ``tools/subset_responses.py``. Line limb darkening stays the typed law
(:mod:`dopplermap.profiles`).
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from .choices import ATMOSPHERE_PASSBANDS, PASSBANDS, check
from .errors import DopplermapInputError
from .limb_darkening import LimbDarkening
from .profiles import planck

__all__ = ["TABLE", "CITATION", "RESPONSES", "RESPONSE_SOURCES", "ENERGY_RESPONSES", "passband_limb_darkening", "table_nodes",
           "passband_response", "passband_planck_ratio"]

TABLE = Path(__file__).parent / "data" / "claret2023_power2.csv"
CITATION = "Claret A., Southworth J., 2023, A&A 674, A63 (power-2 limb darkening, PHOENIX-COND spherical models)"
_DATA = Path(__file__).parent / "data"
RESPONSES = {"TESS": _DATA / "tess_response_v2.csv", "Kepler": _DATA / "kepler_response.csv",
             "Gaia_G": _DATA / "gaia_dr3_G_response.csv", "Gaia_BP": _DATA / "gaia_dr3_BP_response.csv",
             "Gaia_RP": _DATA / "gaia_dr3_RP_response.csv",
             **{f"Bessell_{b}": _DATA / f"bessell_{b}_response.csv" for b in "UBVRI"}}
"""The response curve of each passband (:data:`dopplermap.choices.PASSBANDS`)."""
RESPONSE_SOURCES = {"TESS": "TESS Science Office v2.0 (Ricker et al. 2015)",
                    "Kepler": "Kepler high-resolution response (Van Cleve & Caldwell, KSCI-19033)",
                    "Gaia_G": "Gaia (E)DR3 passbands (Riello et al. 2021)",
                    "Gaia_BP": "Gaia (E)DR3 passbands (Riello et al. 2021)",
                    "Gaia_RP": "Gaia (E)DR3 passbands (Riello et al. 2021)",
                    **{f"Bessell_{b}": "Johnson-Cousins standard passbands (Bessell 1990)" for b in "UBVRI"}}
"""Where each response comes from, for the run's record."""
ENERGY_RESPONSES = frozenset(f"Bessell_{b}" for b in "UBVRI")
"""Responses defined for energy integration (Bessell 1990's; Bessell & Murphy 2012): their
photon-counting response is ``R / lambda``, so the photon-weighted integral is ``int R B dlambda``."""


@functools.cache
def _load():
    lines = [ln for ln in TABLE.read_text(encoding="ascii").splitlines() if ln.strip() and not ln.startswith("#")]
    names = lines[0].split(",")
    values = np.array([[float(x) for x in ln.split(",")] for ln in lines[1:]])
    data = {n: values[:, k] for k, n in enumerate(names)}
    teff, logg = np.unique(data["teff"]), np.unique(data["logg"])
    cols = {}
    for band in ATMOSPHERE_PASSBANDS:
        for c in ("g", "h"):
            grid = np.full((teff.size, logg.size), np.nan)
            grid[np.searchsorted(teff, data["teff"]), np.searchsorted(logg, data["logg"])] = data[f"{c}_{band}"]
            cols[c, band] = grid
    return teff, logg, cols


def table_nodes() -> tuple[np.ndarray, np.ndarray]:
    """The table's Teff (K) and log g (cgs) nodes (not every pair is tabulated)."""
    teff, logg, _ = _load()
    return teff.copy(), logg.copy()


def _cell(axis, x, name, unit):
    if not (np.isfinite(x) and axis[0] <= x <= axis[-1]):
        raise DopplermapInputError(f"{name} = {x!r}{unit} is outside the limb-darkening table "
                                   f"({axis[0]:g}-{axis[-1]:g}{unit}; {CITATION})")
    i = int(np.clip(np.searchsorted(axis, x, side="right") - 1, 0, axis.size - 2))
    return i, (x - axis[i]) / (axis[i + 1] - axis[i])


def passband_limb_darkening(passband: str, teff: float, logg: float, metallicity: float = 0.0) -> LimbDarkening:
    """The power-2 limb darkening of a model atmosphere (Teff K, log g cgs) in ``passband``
    (:data:`dopplermap.choices.ATMOSPHERE_PASSBANDS`), interpolated bilinearly in the shipped table."""
    check(passband, ATMOSPHERE_PASSBANDS, "passband (of the limb-darkening table)")
    if metallicity != 0.0:
        raise DopplermapInputError(f"metallicity = {metallicity!r}: the shipped limb-darkening table is for solar "
                                   "metallicity only ([M/H] = 0)")
    teff_ax, logg_ax, cols = _load()
    i, t = _cell(teff_ax, float(teff), "teff", " K")
    j, u = _cell(logg_ax, float(logg), "logg", "")
    out = []
    for c in ("g", "h"):
        block = cols[c, passband][i:i + 2, j:j + 2]
        w = np.array([[(1 - t) * (1 - u), (1 - t) * u], [t * (1 - u), t * u]])
        need = w > 0
        if np.any(np.isnan(block[need])):
            raise DopplermapInputError(f"teff = {teff!r} K, logg = {logg!r}: the limb-darkening table has no model at "
                                       f"a neighbouring node (Teff {teff_ax[i]:g}-{teff_ax[i + 1]:g} K, log g "
                                       f"{logg_ax[j]:g}-{logg_ax[j + 1]:g}; {CITATION})")
        out.append(float(np.sum(np.where(need, w * np.nan_to_num(block), 0.0))))
    return LimbDarkening("power2", (out[0], out[1]))


@functools.cache
def passband_response(passband: str) -> tuple[np.ndarray, np.ndarray]:
    """A shipped passband's response: wavelength (nm) and relative response, read-only arrays."""
    check(passband, PASSBANDS, "passband")
    rows = [ln for ln in RESPONSES[passband].read_text(encoding="ascii").splitlines()
            if ln.strip() and not ln.startswith("#")][1:]
    wl, resp = np.array([[float(x) for x in ln.split(",")] for ln in rows]).T
    wl.flags.writeable = resp.flags.writeable = False
    return wl, resp


def passband_planck_ratio(temperature, t_phot, passband: str):
    """Photon-weighted blackbody intensity at ``temperature`` over that at ``t_phot`` (K) in
    ``passband`` (module docstring): a float for scalars, else an array of their broadcast shape
    (per-cell temperatures of gravity darkening)."""
    for name, t in (("temperature", temperature), ("t_phot", t_phot)):
        a = np.asarray(t, dtype=float)
        if not np.all(np.isfinite(a) & (a > 0)):
            raise DopplermapInputError(f"{name} must be > 0 K, got {t!r}")
    wl, resp = passband_response(passband)

    photon = resp if passband in ENERGY_RESPONSES else resp * wl  # the photon-counting response

    def counts(t):
        t = np.asarray(t, dtype=float)
        return np.trapezoid(photon * planck(wl, t[..., None]), wl, axis=-1)

    out = counts(temperature) / counts(t_phot)
    return float(out) if np.ndim(out) == 0 else out
