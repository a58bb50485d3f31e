"""Light-curve files: columns time (days), flux (any units), error.

Text (whitespace or CSV, ``#`` comments and one header line allowed) or a FITS binary
table (columns named like ``time``/``bjd``/``hjd``, ``flux``, ``err``/``flux_err``, else
the first three). Errors name the file and the line (text) or row (FITS). The flux is
divided by its mean by :func:`dopplermap.lightcurve.precompute_lightcurve`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from ..errors import DopplermapInputError, MissingFileError
from .lsd import _is_fits, read_fits_columns, read_text_columns

__all__ = ["LightCurveData", "read_lightcurve", "write_lightcurve"]

_T_NAMES = ("time", "t", "bjd", "hjd", "jd", "mjd", "bjd_tdb")
_F_NAMES = ("flux", "f", "mag_flux", "sap_flux", "pdcsap_flux", "rel_flux")
_E_NAMES = ("err", "error", "flux_err", "sigma", "e_flux", "sap_flux_err", "pdcsap_flux_err")


@dataclasses.dataclass(frozen=True, eq=False)
class LightCurveData:
    """A light curve as read: time (n,) days, flux (n,) any units, err (n,) > 0."""

    time: np.ndarray
    flux: np.ndarray
    err: np.ndarray
    source: str


def _validate(where, arr, lines):
    for col, name in enumerate(("time", "flux", "error")):
        bad = ~np.isfinite(arr[:, col])
        if bad.any():
            i = int(np.argmax(bad))
            raise DopplermapInputError(f"{where}:{lines[i]}: {name} is {float(arr[i, col])!r} (NaN or inf not allowed)")
    bad = arr[:, 2] <= 0
    if bad.any():
        i = int(np.argmax(bad))
        raise DopplermapInputError(f"{where}:{lines[i]}: error must be > 0, got {float(arr[i, 2])!r} ({int(bad.sum())} values <= 0)")
    if arr.shape[0] < 2:
        raise DopplermapInputError(f"{where}: needs at least 2 rows, got {arr.shape[0]}")
    order = np.argsort(arr[:, 0], kind="stable")
    return LightCurveData(time=arr[order, 0].copy(), flux=arr[order, 1].copy(), err=arr[order, 2].copy(),
                          source=str(where))


def read_lightcurve(path, fmt: str = "auto") -> LightCurveData:
    """Read a light curve (``fmt``: ``"auto"``, ``"text"`` or ``"fits"``), sorted by time."""
    path = Path(path)
    if fmt not in ("auto", "text", "fits"):
        raise DopplermapInputError(f"light-curve format must be 'auto', 'text' or 'fits', got {fmt!r}")
    if not path.is_file():
        raise MissingFileError(f"light-curve file not found: {path}")
    if fmt == "fits" or (fmt == "auto" and _is_fits(path)):
        arr = read_fits_columns(path, (_T_NAMES, _F_NAMES, _E_NAMES), "time, flux, error")
        return _validate(f"{path} (table row)", arr, list(range(1, arr.shape[0] + 1)))
    try:
        text = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise DopplermapInputError(f"{path}: not a text file (for FITS use a .fits name or format 'fits')") from None
    rows, lines = read_text_columns(path, text, "time, flux, error")
    return _validate(path, np.asarray(rows, dtype=float), lines)


def write_lightcurve(path, time, flux, err, fmt: str = "csv"):
    """Write ``time, flux, err`` as ``"csv"``, ``"text"`` or ``"fits"`` (temp file, then rename)."""
    path = Path(path)
    t, f, e = (np.asarray(a, dtype=float) for a in (time, flux, err))
    if not (t.shape == f.shape == e.shape and t.ndim == 1):
        raise DopplermapInputError(f"time, flux and err must be 1-D of equal length, got {t.shape}, {f.shape}, {e.shape}")
    tmp = path.with_name(path.name + ".tmp")
    if fmt == "fits":
        from astropy.io import fits

        hdu = fits.BinTableHDU.from_columns([fits.Column(name="time", format="D", unit="d", array=t),
                                             fits.Column(name="flux", format="D", array=f),
                                             fits.Column(name="err", format="D", array=e)])
        fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(tmp, overwrite=True)
    elif fmt in ("csv", "text"):
        sep = "," if fmt == "csv" else " "
        head = "time,flux,err\n" if fmt == "csv" else "# time flux err\n"
        body = "\n".join(sep.join(f"{x:.17g}" for x in r) for r in np.stack([t, f, e], axis=1))
        tmp.write_text(head + body + "\n")
    else:
        raise DopplermapInputError(f"light-curve write format must be 'csv', 'text' or 'fits', got {fmt!r}")
    os.replace(tmp, path)
