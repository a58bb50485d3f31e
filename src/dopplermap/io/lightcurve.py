"""Light-curve files: mission FITS (TESS, Kepler/K2), other FITS tables and text/CSV.

**Mission FITS** (TESS SPOC, Kepler and K2 ``*_lc.fits``/``*llc.fits``; the layout of the
TESS Science Data Products Description and the Kepler Archive Manual): a binary table
``LIGHTCURVE`` with columns ``TIME`` (days, BTJD/BKJD), ``SAP_FLUX``, ``SAP_FLUX_ERR``,
``PDCSAP_FLUX``, ``PDCSAP_FLUX_ERR`` and ``QUALITY`` (Kepler/K2: ``SAP_QUALITY``). The times are read from the header
keywords, never assumed::

    BJD = TIME [TIMEUNIT] + BJDREFI + BJDREFF        in the scale TIMESYS

(TESS: BJDREFI = 2457000, Kepler/K2: 2454833, BJDREFF = 0, TIMESYS = 'TDB',
TIMEREF = 'SOLARSYSTEM'). A file without TIMESYS, TIMEUNIT, BJDREFI or BJDREFF is refused
with one line naming the file and the keyword; a TIMEREF (or TREFPOS) other than the
barycentre is converted like a declared HJD/JD (:mod:`dopplermap.io.times`); a TIME unit
``BJD - N`` that disagrees with BJDREFI + BJDREFF is refused. The flux is ``PDCSAP_FLUX``
(systematics corrected) unless ``column`` names another one (``SAP_FLUX``); its error is
``<column>_ERR``. Cadences with ``QUALITY != 0`` and cadences with a NaN time, flux or error
(the pipelines mark gaps so) are dropped and counted (any set QUALITY bit drops a cadence:
stricter than lightkurve's default mask) (:attr:`LightCurveData.n_quality`,
:attr:`~LightCurveData.n_invalid`); dropping more than a fifth of them is a warning.

**Other FITS tables** (first binary table): columns named like ``time``/``bjd``, ``flux``,
``err``/``flux_err`` (else the first three, with a warning); **text** (whitespace or CSV,
``#`` comments and one header line of column names allowed): columns time, flux (or
magnitude), error. Their times are in the declared ``time_scale``; a NaN or a non-positive
error is an error naming the line (these are the user's own files).

``unit="mag"``: the second column is a magnitude, converted to flux with
``F = 10^(-0.4 m)``, ``sigma_F = 0.4 ln(10) F sigma_m``. A flux column that looks like
magnitudes (a ``mag`` column name or unit; values 4..25 that vary by less than a fifth;
values of both signs around 0, like differential magnitudes) is a
:class:`~dopplermap.errors.DopplermapWarning`.

Times come out in the internal BJD_TDB (full Julian days). :func:`bin_lightcurve` bins a
long light curve in time or rotation phase (inverse-variance weighted means).
:func:`load_lightcurve` is the problem builder's single call (read, time check, bin). The
flux is divided by its mean later, by :func:`dopplermap.lightcurve.precompute_lightcurve`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np

from ..atomic import write_file, write_text
from ..choices import BIN_UNITS, LIGHTCURVE_FORMATS, LIGHTCURVE_UNITS, LIGHTCURVE_WRITE_FORMATS, check
from ..errors import DopplermapInputError, MissingFileError, bad_file, reader, warn
from .times import TimeScale, check_time_overlap, parse_time_scale, to_internal

__all__ = ["LightCurveData", "read_lightcurve", "bin_lightcurve", "load_lightcurve", "write_lightcurve",
           "DROPPED_WARN_FRACTION", "LONG_LIGHTCURVE"]

_T_NAMES = ("time", "t", "bjd", "hjd", "jd", "mjd", "bjd_tdb", "btjd", "bkjd")
_F_NAMES = ("flux", "f", "mag_flux", "pdcsap_flux", "sap_flux", "rel_flux", "mag", "magnitude")
_E_NAMES = ("err", "error", "flux_err", "sigma", "e_flux", "pdcsap_flux_err", "sap_flux_err", "mag_err", "e_mag")
_FITS_EXT = (".fits", ".fit", ".fts", ".fits.gz", ".fit.gz")
_SPLIT = re.compile(r"[,\s;]+")
#: above this fraction of dropped cadences a mission light curve gets a warning
DROPPED_WARN_FRACTION = 0.2
#: unbinned light curves longer than this get a warning (their dense model weights grow with it)
LONG_LIGHTCURVE = 20000
_FRAME_OF = {"SOLARSYSTEM": "barycentric", "BARYCENTER": "barycentric", "BARYCENTRIC": "barycentric",
             "HELIOCENTER": "heliocentric", "HELIOCENTRIC": "heliocentric", "GEOCENTER": "geocentric",
             "GEOCENTRIC": "geocentric"}


@dataclasses.dataclass(frozen=True, eq=False)
class LightCurveData:
    """A light curve as read.

    Attributes:
        time: (n,) BJD_TDB, full Julian days. flux: (n,) any units. err: (n,) > 0, same units.
        source: the file. n_read: cadences in the file (None: same as n).
        n_quality: cadences dropped for QUALITY != 0. n_invalid: cadences dropped for a
            NaN time, flux or error. column: the flux column used (FITS).
        time_scale: how the file's times were declared (or derived from its keywords).
        unit: ``"flux"`` or ``"mag"`` (the file's; ``flux`` here is always a flux).
        binned: how the points were binned (``"0.01 phase"``, ``"0.02 d"``), None if not.
    """

    time: np.ndarray
    flux: np.ndarray
    err: np.ndarray
    source: str
    n_read: int | None = None
    n_quality: int = 0
    n_invalid: int = 0
    column: str | None = None
    time_scale: str = "BJD_TDB"
    unit: str = "flux"
    binned: str | None = None

    @property
    def n_points(self) -> int:
        """Points that are fitted."""
        return int(self.time.size)

    @property
    def n_dropped(self) -> int:
        return self.n_quality + self.n_invalid

    def describe(self) -> str:
        """One line for the run summary: what was read, dropped, binned and is fitted."""
        n_read = self.n_points if self.n_read is None else self.n_read
        parts = [f"{self.source}: {n_read} cadences"]
        if self.column:
            parts.append(self.column)
        if self.n_dropped:
            parts.append(f"{self.n_dropped} dropped (QUALITY != 0: {self.n_quality}, NaN: {self.n_invalid})")
        if self.binned:
            parts.append(f"binned in {self.binned}")
        return ", ".join(parts) + f"; {self.n_points} points fitted"


def _is_fits(path: Path) -> bool:
    name = path.name.lower()
    return any(name.endswith(e) for e in _FITS_EXT)


def _finish(where, source, t, f, e, rows, *, ts, scale_name, unit, hint, ra, dec, **meta):
    """Validate (own files: NaN and err <= 0 are errors), convert mag and time, sort."""
    for name, a in (("time", t), (unit if unit == "mag" else "flux", f), ("error", e)):
        bad = ~np.isfinite(a)
        if bad.any():
            i = int(np.argmax(bad))
            raise DopplermapInputError(f"{where}:{rows[i]}: {name} is {float(a[i])!r} (NaN or inf not allowed)")
    bad = e <= 0
    if bad.any():
        i = int(np.argmax(bad))
        raise DopplermapInputError(f"{where}:{rows[i]}: error must be > 0, got {float(e[i])!r} ({int(bad.sum())} values <= 0)")
    return _complete(source, t, f, e, ts=ts, scale_name=scale_name, unit=unit, hint=hint, ra=ra,
                     dec=dec, **meta)


def _complete(source, t, f, e, *, ts, scale_name, unit, hint, ra, dec, **meta):
    if t.size < 2:
        raise DopplermapInputError(f"{source}: needs at least 2 valid cadences, got {t.size}")
    _check_flux_kind(source, f, unit, hint)
    if unit == "mag":
        flux = 10.0 ** (-0.4 * f)
        e = 0.4 * math.log(10.0) * flux * e
        f = flux
    bjd = to_internal(t, ts, ra=ra, dec=dec, where=f"{source}: time")
    order = np.argsort(bjd, kind="stable")
    return LightCurveData(time=bjd[order], flux=f[order].copy(), err=e[order].copy(), source=source,
                          time_scale=scale_name, unit=unit, **meta)


def _check_flux_kind(source, values, unit, hint):
    """Warn when fluxes look like magnitudes, or magnitudes like fluxes."""
    med = float(np.median(values))
    spread = float(np.ptp(values)) / abs(med) if med else math.inf
    if unit == "flux":
        if hint:
            warn(f"{source}: the flux column is labelled {hint!r}, so these may be magnitudes fitted as flux (spot "
                 "signal reversed): if they are magnitudes set [data] lightcurve_unit = 'mag'")
        elif 4.0 <= med <= 25.0 and spread < 0.2:
            warn(f"{source}: fluxes {np.min(values):.4g}..{np.max(values):.4g} (median {med:.4g}, peak-to-peak "
                 f"{100 * spread:.2g}% of it) look like magnitudes of a 4-25 mag star; magnitudes fitted as flux "
                 "reverse the spot signal: if they are magnitudes set [data] lightcurve_unit = 'mag'")
        elif np.min(values) < 0.0 < np.max(values) and float(np.max(np.abs(values))) < 2.0:
            warn(f"{source}: fluxes {np.min(values):.4g}..{np.max(values):.4g} change sign around 0: differential "
                 "magnitudes or a flux variation (F - <F>)? dopplermap needs fluxes > 0 (lightcurve_unit = 'mag' for "
                 "magnitudes; add the mean back to a flux variation)")
    elif med > 30.0 or (0.5 < med < 2.0 and spread < 0.2):
        warn(f"{source}: values {np.min(values):.4g}..{np.max(values):.4g} are declared magnitudes but look like "
             "fluxes (normalised or in counts): check [data] lightcurve_unit")


def _read_text(path: Path, unit, ts, scale_name, ra, dec):
    try:
        text = path.read_text().splitlines()
    except UnicodeDecodeError as exc:
        raise bad_file(path, "light-curve file", exc, hint="for FITS use a .fits name or format 'fits'") from None
    rows, lines, header, n_col = [], [], None, None
    for ln, line in enumerate(text, start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        toks = [t for t in _SPLIT.split(s) if t]
        if not rows and header is None:
            try:
                [float(t) for t in toks]
            except ValueError:
                header = toks  # one header line of column names
                continue
        if n_col is None:
            n_col = len(toks)
            if n_col < 3:
                raise DopplermapInputError(f"{path}:{ln}: expected at least 3 columns (time, flux, error), got {n_col}")
        if len(toks) != n_col:
            raise DopplermapInputError(f"{path}:{ln}: expected {n_col} columns like the first data row, got {len(toks)}")
        try:
            rows.append([float(t) for t in toks[:3]])
        except ValueError:
            bad = next(t for t in toks[:3] if not _is_number(t))
            raise DopplermapInputError(f"{path}:{ln}: non-numeric value {bad!r}") from None
        lines.append(ln)
    if not rows:
        raise DopplermapInputError(f"{path}: no data rows")
    a = np.asarray(rows, dtype=float)
    hint = header[1] if header and len(header) > 1 and "mag" in header[1].lower() else None
    return _finish(path, str(path), a[:, 0], a[:, 1], a[:, 2], lines, ts=ts, scale_name=scale_name, unit=unit, hint=hint,
                   ra=ra, dec=dec)


def _is_number(tok):
    try:
        float(tok)
    except ValueError:
        return False
    return True


def _keyword(path, hdus, key, what):
    for h in hdus:
        if key in h:
            return h[key]
    raise DopplermapInputError(f"{path}: keyword {key} is missing (needed for {what}); a TESS/Kepler light curve has it "
                               "in the LIGHTCURVE header")


def _mission_scale(path, hdr, primary, tunit):
    """The :class:`TimeScale` of a mission TIME column, from its keywords."""
    hdus = (hdr, primary)
    what = "BJD = TIME + BJDREFI + BJDREFF"
    refi, reff = _keyword(path, hdus, "BJDREFI", what), _keyword(path, hdus, "BJDREFF", what)
    for key, v in (("BJDREFI", refi), ("BJDREFF", reff)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise DopplermapInputError(f"{path}: keyword {key} = {v!r} is not a number")
    sys_ = str(_keyword(path, hdus, "TIMESYS", "the time scale of TIME")).strip().upper()
    if sys_ not in ("TDB", "TT", "UTC", "TAI", "TCB", "TCG"):
        raise DopplermapInputError(f"{path}: keyword TIMESYS = {sys_!r} is not a time scale dopplermap converts "
                                   "(TDB, TT, UTC, TAI, TCB, TCG)")
    tu = str(_keyword(path, hdus, "TIMEUNIT", "the unit of TIME")).strip()
    factor = {"d": 1.0, "s": 1.0 / 86400.0, "min": 1.0 / 1440.0, "h": 1.0 / 24.0}.get(tu)
    if factor is None:
        raise DopplermapInputError(f"{path}: keyword TIMEUNIT = {tu!r} is not a time unit (d, s, min, h)")
    ref = next((str(h[k]).strip().upper() for k in ("TIMEREF", "TREFPOS") for h in hdus if k in h), "SOLARSYSTEM")
    if ref not in _FRAME_OF:
        raise DopplermapInputError(f"{path}: keyword TIMEREF = {ref!r} is not a reference position dopplermap converts "
                                   "(SOLARSYSTEM, HELIOCENTRIC, GEOCENTRIC)")
    offset = float(refi) + float(reff)
    m = re.match(r"^\s*BJD\s*-\s*([0-9.]+)", tunit or "")
    if m and abs(float(m.group(1)) - offset) > 1e-6:
        raise DopplermapInputError(f"{path}: TIME unit {tunit!r} disagrees with BJDREFI + BJDREFF = {offset!r}")
    name = f"TIME + BJDREFI + BJDREFF ({offset:.10g}), TIMESYS = {sys_}, TIMEREF = {ref}"
    return TimeScale(name=name, frame=_FRAME_OF[ref], scale=sys_.lower(), offset=offset), factor


def _read_fits(path: Path, column, unit, ts, scale_name, ra, dec, declared):
    from astropy.io import fits

    try:
        hdul = fits.open(path, memmap=False)
    except OSError as exc:
        raise DopplermapInputError(f"{path}: not a readable FITS file ({exc})") from None
    with hdul:
        tabs = [h for h in hdul if isinstance(h, fits.BinTableHDU)]
        if not tabs:
            raise DopplermapInputError(f"{path}: no binary-table extension found")
        tab = next((h for h in tabs if h.name.upper() == "LIGHTCURVE"), tabs[0])
        names = list(tab.columns.names)
        unnamed = [i for i, n in enumerate(names, start=1) if not n]
        if unnamed:
            raise DopplermapInputError(f"{path}: table column {unnamed[0]} has no name (its TTYPE{unnamed[0]} card is "
                                       "missing or damaged)")
        upper = {n.upper(): n for n in names}
        mission = tab.name.upper() == "LIGHTCURVE" or "BJDREFI" in tab.header or \
            bool({"SAP_FLUX", "PDCSAP_FLUX"} & set(upper))
        if mission:
            return _read_mission(path, hdul[0].header, tab, upper, column, unit, ra, dec, declared)
        if column != "auto":
            if column.upper() not in upper:
                raise DopplermapInputError(f"{path}: no column {column!r} (columns: {', '.join(names)})")
            fcol = upper[column.upper()]
        else:
            fcol = None
        cols = []
        for i, wanted in enumerate((_T_NAMES, _F_NAMES, _E_NAMES)):
            hit = fcol if (i == 1 and fcol) else next((upper[w.upper()] for w in wanted if w.upper() in upper), None)
            cols.append(hit)
        if None in cols:
            if len(names) < 3:
                raise DopplermapInputError(f"{path}: table needs 3 columns (time, flux, error), has {names}")
            cols = [c if c is not None else names[i] for i, c in enumerate(cols)]
            warn(f"{path}: FITS columns {', '.join(names[:6])} not all recognised; read by position as time = {cols[0]}, "
                 f"flux = {cols[1]}, error = {cols[2]}: check, or name them time, flux, err")
        try:
            t, f, e = (np.asarray(tab.data[c], dtype=float).reshape(-1) for c in cols)
        except (ValueError, TypeError) as exc:
            raise DopplermapInputError(f"{path}: columns {cols} are not numeric ({exc})") from None
        funit = str(tab.columns[cols[1]].unit or "")
        hint = next((s for s in (cols[1], funit) if "mag" in s.lower()), None)
        return _finish(f"{path} (table row)", str(path), t, f, e, list(range(1, t.size + 1)), ts=ts, scale_name=scale_name,
                       unit=unit, hint=hint, ra=ra, dec=dec, column=cols[1])


def _read_mission(path, primary, tab, upper, column, unit, ra, dec, declared):
    if unit != "flux":
        raise DopplermapInputError(f"{path}: lightcurve_unit = {unit!r}, but mission light curves hold fluxes (e-/s)")
    if "TIME" not in upper:
        raise DopplermapInputError(f"{path}: mission light curve ({tab.name}) has no TIME column")
    if column == "auto":
        fcol = upper.get("PDCSAP_FLUX") or upper.get("SAP_FLUX")
        if fcol is None:
            raise DopplermapInputError(f"{path}: no PDCSAP_FLUX or SAP_FLUX column; name one with [data] lightcurve_column")
        if fcol.upper() == "SAP_FLUX":
            warn(f"{path}: no PDCSAP_FLUX column, using SAP_FLUX (not corrected for systematics)")
    else:
        fcol = upper.get(column.upper())
        if fcol is None:
            raise DopplermapInputError(f"{path}: lightcurve_column {column!r} is not a column of {tab.name} "
                                       f"(columns: {', '.join(tab.columns.names)})")
    ecol = upper.get(fcol.upper() + "_ERR")
    if ecol is None:
        raise DopplermapInputError(f"{path}: no error column {fcol.upper()}_ERR for {fcol}")
    tcol = upper["TIME"]
    ts, factor = _mission_scale(path, tab.header, primary, str(tab.columns[tcol].unit or ""))
    if declared is not None:
        d = parse_time_scale(declared, f"{path}: lightcurve_time_scale")
        if (d.frame, d.scale, d.offset) != (ts.frame, ts.scale, ts.offset):
            raise DopplermapInputError(f"{path}: lightcurve_time_scale = {declared!r} disagrees with the file's keywords "
                                       f"({ts.name}); remove it (the keywords define the times)")
    t = np.asarray(tab.data[tcol], dtype=float) * factor
    f = np.asarray(tab.data[fcol], dtype=float)
    e = np.asarray(tab.data[ecol], dtype=float)
    n = t.size
    qcol = upper.get("QUALITY") or upper.get("SAP_QUALITY")  # TESS: QUALITY; Kepler/K2: SAP_QUALITY
    q = np.asarray(tab.data[qcol]) if qcol else np.zeros(n, dtype=int)
    flagged = q != 0
    invalid = ~flagged & ~(np.isfinite(t) & np.isfinite(f) & np.isfinite(e) & (e > 0))
    keep = ~flagged & ~invalid
    n_q, n_bad = int(flagged.sum()), int(invalid.sum())
    if n and (n_q + n_bad) > DROPPED_WARN_FRACTION * n:
        warn(f"{path}: {n_q + n_bad} of {n} cadences dropped ({n_q} with QUALITY != 0, {n_bad} with NaN {fcol} or "
             "time): check the sector and the column")
    return _complete(str(path), t[keep], f[keep], e[keep], ts=ts, scale_name=ts.name, unit="flux", hint=None, ra=ra,
                     dec=dec, n_read=n, n_quality=n_q, n_invalid=n_bad, column=fcol)


@reader("light-curve file")
def read_lightcurve(path, fmt: str = "auto", *, column: str = "auto", unit: str = "flux", time_scale=None,
                    fallback_time_scale: str = "BJD_TDB", ra=None, dec=None) -> LightCurveData:
    """Read a light curve, times in the internal BJD_TDB, sorted by time.

    Args:
        path: the file. fmt: ``"auto"`` (FITS by the file name), ``"text"`` or ``"fits"``.
        column: flux column of a FITS file (``"auto"``: PDCSAP_FLUX for mission files).
        unit: ``"flux"`` or ``"mag"`` (text and non-mission FITS).
        time_scale: declared scale of the times (see :mod:`dopplermap.io.times`); mission
            FITS files take theirs from the keywords (a declared one must agree).
        fallback_time_scale: used when ``time_scale`` is None for files without keywords
            (the problem builder passes ``[data] time_scale``).
        ra, dec: target coordinates (deg), for heliocentric/geocentric times.
    """
    path = Path(path)
    check(fmt, LIGHTCURVE_FORMATS, "light-curve format")
    check(unit, LIGHTCURVE_UNITS, "light-curve unit")
    if not path.is_file():
        raise MissingFileError(f"light-curve file not found: {path}")
    name = time_scale if time_scale is not None else fallback_time_scale
    ts = parse_time_scale(name, f"{path}: time_scale")
    if fmt == "fits" or (fmt == "auto" and _is_fits(path)):
        return _read_fits(path, column, unit, ts, name, ra, dec, time_scale)
    if column != "auto":
        raise DopplermapInputError(f"{path}: lightcurve_column = {column!r} applies to FITS files; text files are "
                                   "read as columns time, flux, error")
    return _read_text(path, unit, ts, name, ra, dec)


def bin_lightcurve(data: LightCurveData, width: float, *, unit: str = "d", period=None, t0=None) -> LightCurveData:
    """Bin a light curve: inverse-variance weighted means in bins of ``width``.

    ``unit="d"``: bins of ``width`` days from the first cadence; each point's time is the
    weighted mean time of its bin. ``unit="phase"``: bins of ``width`` in rotation phase
    ``((t - t0) / period) mod 1``, folding every cycle together (this assumes the light
    curve does not change from cycle to cycle: rigid rotation, stable spots); each point
    gets the time ``t0 + period (n + phase)``, with ``phase`` the weighted mean phase of
    its bin and ``n`` the cycle of the median cadence. In each bin::

        flux = sum(w f) / sum(w),  err = 1 / sqrt(sum(w)),  w = 1 / err^2

    Empty bins are left out.
    """
    if not (isinstance(width, (int, float)) and math.isfinite(width) and width > 0):
        raise DopplermapInputError(f"lightcurve_bin must be > 0, got {width!r}")
    check(unit, BIN_UNITS, "lightcurve_bin_unit")
    t, f, e = data.time, data.flux, data.err
    w = 1.0 / e**2
    if unit == "d":
        key = np.floor((t - t[0]) / width).astype(np.int64)
        x = t - t[0]
    else:  # phase
        if width > 0.5:
            raise DopplermapInputError(f"lightcurve_bin in phase must be <= 0.5, got {width!r}")
        if period is None or t0 is None:
            raise DopplermapInputError("binning in rotation phase needs the period and t0")
        cycle = (t - t0) / period
        x = np.mod(cycle, 1.0)
        key = np.minimum(np.floor(x / width), math.ceil(1.0 / width) - 1).astype(np.int64)
    _, inv = np.unique(key, return_inverse=True)
    sw = np.bincount(inv, weights=w)
    fb = np.bincount(inv, weights=w * f) / sw
    xb = np.bincount(inv, weights=w * x) / sw
    if unit == "d":
        tb = t[0] + xb
    else:
        n_ref = math.floor(float(np.median(cycle)))
        tb = t0 + period * (n_ref + xb)
    order = np.argsort(tb, kind="stable")
    return dataclasses.replace(data, time=tb[order], flux=fb[order], err=(1.0 / np.sqrt(sw))[order],
                               n_read=data.n_read if data.n_read is not None else data.n_points,
                               binned=f"{width:g} {'d' if unit == 'd' else 'phase'}")


def load_lightcurve(path, *, fmt: str = "auto", column: str = "auto", unit: str = "flux", time_scale=None,
                    fallback_time_scale: str = "BJD_TDB", ra=None, dec=None, bin_width=None, bin_unit: str = "d",
                    period=None, t0=None, profile_times=None) -> LightCurveData:
    """Read (:func:`read_lightcurve`), check against the profile epochs
    (:func:`dopplermap.io.times.check_time_overlap`) and bin (:func:`bin_lightcurve`): the
    problem builder's one call. ``period``, ``t0``: the star's (days, BJD_TDB)."""
    data = read_lightcurve(path, fmt, column=column, unit=unit, time_scale=time_scale,
                           fallback_time_scale=fallback_time_scale, ra=ra, dec=dec)
    if profile_times is not None:
        check_time_overlap(profile_times, data.time, period=period, where=data.source)
    if bin_width is not None:
        data = bin_lightcurve(data, bin_width, unit=bin_unit, period=period, t0=t0)
    elif data.n_points > LONG_LIGHTCURVE:
        warn(f"{data.source}: {data.n_points} light-curve points are fitted unbinned; the light-curve model keeps "
             f"{data.n_points} x n_cell x 3 weights ({data.n_points * 24 / 1e6:.3g} MB per 1000 cells): bin with "
             "[data] lightcurve_bin (days or rotation phase)")
    return data


def write_lightcurve(path, time, flux, err, fmt: str = "csv"):
    """Write ``time, flux, err`` as ``"csv"``, ``"text"`` or ``"fits"`` (temp file, then rename)."""
    path = Path(path)
    check(fmt, LIGHTCURVE_WRITE_FORMATS, "light-curve write format")
    t, f, e = (np.asarray(a, dtype=float) for a in (time, flux, err))
    if not (t.shape == f.shape == e.shape and t.ndim == 1):
        raise DopplermapInputError(f"time, flux and err must be 1-D of equal length, got {t.shape}, {f.shape}, {e.shape}")
    if fmt == "fits":
        from astropy.io import fits

        hdu = fits.BinTableHDU.from_columns([fits.Column(name="time", format="D", unit="d", array=t),
                                             fits.Column(name="flux", format="D", array=f),
                                             fits.Column(name="err", format="D", array=e)])
        write_file(path, lambda fh: fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(fh))
    else:  # csv or text
        sep = "," if fmt == "csv" else " "
        head = "time,flux,err\n" if fmt == "csv" else "# time flux err\n"
        body = "\n".join(sep.join(f"{x:.17g}" for x in r) for r in np.stack([t, f, e], axis=1))
        write_text(path, head + body + "\n")
