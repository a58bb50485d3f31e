"""Light curves: mission FITS (TESS, Kepler/K2), lightkurve's files and objects, other FITS tables and text/CSV.

**Mission FITS** (TESS SPOC, Kepler and K2 ``*_lc.fits``/``*llc.fits``; the layout of the
TESS Science Data Products Description and the Kepler Archive Manual): a binary table
``LIGHTCURVE`` with columns ``TIME`` (days, BTJD/BKJD), ``SAP_FLUX``, ``SAP_FLUX_ERR``,
``PDCSAP_FLUX``, ``PDCSAP_FLUX_ERR`` and ``QUALITY`` (Kepler/K2: ``SAP_QUALITY``). The times
are read from the header keywords, never assumed::

    BJD = TIME [TIMEUNIT] + BJDREFI + BJDREFF        in the scale TIMESYS

(TESS: BJDREFI = 2457000, Kepler/K2: 2454833, BJDREFF = 0, TIMESYS = 'TDB',
TIMEREF = 'SOLARSYSTEM'). A file with some of TIMESYS, TIMEUNIT, BJDREFI, BJDREFF but not
all is refused with one line naming the file and the keyword; one with none of them needs
a declared ``time_scale``. A TIMEREF (or TREFPOS) other than the barycentre is converted
like a declared HJD/JD (:mod:`dopplermap.io.times`); a TIME unit ``BJD - N`` that disagrees
with BJDREFI + BJDREFF is refused.

**lightkurve's files** (``LightCurve.to_fits()``: primary ``CREATOR =
'lightkurve.LightCurve.to_fits()'``, a ``LIGHTCURVE`` table with ``TIME``, ``FLUX``,
``FLUX_ERR`` and, for TESS/Kepler curves, ``QUALITY``): no time keywords; the TIME unit is
the astropy time format lightkurve wrote, ``btjd`` (BJD_TDB - 2457000) or ``bkjd``
(BJD_TDB - 2454833), both barycentric TDB by definition. A ``jd`` or ``mjd`` TIME names no
scale and no reference point, so it needs a declared ``time_scale``.

**Flux column**: ``column="auto"`` takes ``PDCSAP_FLUX`` (systematics corrected), else
``FLUX`` (lightkurve's), else ``SAP_FLUX`` (with a warning); any other column of the table
can be named (``SAP_FLUX``, ``KSPSAP_FLUX``, ``CBVSAP_FLUX``, ...). Its error is
``<column>_ERR``.

**Quality** (:mod:`dopplermap.io.quality`): cadences whose QUALITY word has a bit of the
mask set are dropped, counted per flag; the mask is ``quality_bitmask`` (``"default"``, the
community's, unless given: ``"none"``, ``"hard"``, ``"hardest"`` or an integer). Cadences
with a NaN time, flux or error (the pipelines mark gaps so) are dropped and counted too
(:attr:`LightCurveRead.n_quality`, :attr:`~LightCurveRead.dropped_by_flag`,
:attr:`~LightCurveRead.n_invalid`); dropping more than a fifth of them is a warning.

**lightkurve objects** (``LightCurve`` and its TESS/Kepler kinds, ``LightCurveCollection``,
or a list of light curves) are read by their attributes (lightkurve is never imported
here): ``time`` (an astropy ``Time``; ``btjd``/``bkjd`` are barycentric TDB, another format
needs a declared ``time_scale`` for its reference point), ``flux`` and ``flux_err`` (or the
named ``column`` and ``<column>_err``; Quantities: the error in the flux's unit, a magnitude
unit converted to flux), ``quality`` and ``meta`` (``MISSION``/``TELESCOP``; the
``QUALITY_BITMASK`` lightkurve applied when it read the file is kept unless
``quality_bitmask`` is given). A collection's light curves are each divided by their mean
flux (each is one file's worth, normalised as a file is) and joined in time order.

**Not light curves**: a target-pixel file (a ``PIXELS``/``TARGETTABLES`` table of images),
a full-frame or other image, a spectrum (a wavelength axis or column), a line profile (a
velocity column) or a folded light curve is refused in one line that says what it is.

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
import os
import re
from pathlib import Path

import numpy as np

from .._options import options_of
from ..atomic import write_file, write_text
from ..choices import BIN_UNITS, LIGHTCURVE_FORMATS, LIGHTCURVE_UNITS, LIGHTCURVE_WRITE_FORMATS, check
from ..errors import DopplermapInputError, MissingFileError, bad_file, reader, warn
from .quality import apply_bitmask, check_bitmask, mission_flags, resolve_bitmask
from .times import TimeScale, check_time_overlap, parse_time_scale, to_internal

__all__ = ["LightCurveRead", "LightCurveReading", "read_lightcurve", "from_lightkurve", "is_lightcurve_object", "bin_lightcurve",
           "load_lightcurve", "write_lightcurve", "DROPPED_WARN_FRACTION", "GAP_DAYS",
           "join_segments"]

_T_NAMES = ("time", "t", "bjd", "hjd", "jd", "mjd", "bjd_tdb", "btjd", "bkjd")
_F_NAMES = ("flux", "f", "mag_flux", "pdcsap_flux", "sap_flux", "rel_flux", "mag", "magnitude")
_E_NAMES = ("err", "error", "flux_err", "sigma", "e_flux", "pdcsap_flux_err", "sap_flux_err", "mag_err", "e_mag")
_FITS_EXT = (".fits", ".fit", ".fts", ".fits.gz", ".fit.gz")
_SPLIT = re.compile(r"[,\s;]+")
#: above this fraction of dropped cadences a mission light curve gets a warning
DROPPED_WARN_FRACTION = 0.2
#: gaps in a light curve longer than this (days) are reported
GAP_DAYS = 0.5
_FRAME_OF = {"SOLARSYSTEM": "barycentric", "BARYCENTER": "barycentric", "BARYCENTRIC": "barycentric",
             "HELIOCENTER": "heliocentric", "HELIOCENTRIC": "heliocentric", "GEOCENTER": "geocentric",
             "GEOCENTRIC": "geocentric"}
_TIME_KEYS = ("BJDREFI", "BJDREFF", "TIMESYS", "TIMEUNIT")
# the astropy time formats lightkurve writes as the TIME unit of its files: barycentric TDB by definition
_LK_BARYCENTRIC = {"btjd": 2457000.0, "bkjd": 2454833.0}
_LK_PLAIN = {"jd": 0.0, "mjd": 2400000.5}  # no scale, no reference point: declared
_TIME_SCALES = ("tdb", "tt", "utc", "tai", "tcb", "tcg")
_WAVE_NAMES = ("WAVE", "WAVELENGTH", "LAMBDA", "LOGLAM", "WAVE_AIR", "WAVE_VAC", "WAVELEN")
_VEL_NAMES = ("VEL", "VELOCITY", "VELOCITIES", "VRAD", "RV")
_WAVE_UNITS = ("angstrom", "nm", "um", "micron", "aa")
_VEL_UNITS = ("km/s", "km s-1", "km.s-1", "m/s", "m s-1")


@dataclasses.dataclass(frozen=True, eq=False)
class LightCurveRead:
    """A light curve as read: its arrays and what reading did (counts, masks, bins). The input
    a :class:`~dopplermap.problem.Problem` fits is :class:`dopplermap.problem.LightCurveData`
    (:meth:`~dopplermap.problem.LightCurveData.load` reads one; its ``read`` is this record).

    Attributes:
        time: (n,) BJD_TDB, full Julian days. flux: (n,) any units. err: (n,) > 0, same units.
        source: the file (or the object). n_read: cadences read (None: same as n).
        n_quality: cadences dropped by the quality mask. n_invalid: cadences dropped for a
            NaN time, flux or error. column: the flux column used (FITS, objects).
        time_scale: how the times were declared (or derived from keywords or the object).
        unit: ``"flux"`` or ``"mag"`` (the file's; ``flux`` here is always a flux).
        binned: how the points were binned (``"0.01 phase"``, ``"0.02 d"``), None if not.
        quality_bitmask: the mask applied, as said (``"'default' (TESS: 17087)"``); None
            when the data have no QUALITY column.
        dropped_by_flag: quality flag -> dropped cadences that carry it (a cadence with two
            flags of the mask counts under both).
        note: anything else done while reading (a collection joined).
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
    quality_bitmask: str | None = None
    dropped_by_flag: dict = dataclasses.field(default_factory=dict)
    note: str | None = None
    segment: np.ndarray | None = None
    segments: tuple = ()

    @property
    def folded(self) -> bool:
        """Whether the points were binned in rotation phase (every rotation folded into one)."""
        return self.binned is not None and self.binned.endswith(" phase")

    @property
    def gaps(self) -> list[float]:
        """Gaps (days) longer than :data:`GAP_DAYS` between consecutive points, longest first."""
        d = np.diff(np.sort(self.time))
        return sorted((float(x) for x in d[d > GAP_DAYS]), reverse=True)

    @property
    def n_points(self) -> int:
        """Points that are fitted."""
        return int(self.time.size)

    @property
    def n_dropped(self) -> int:
        return self.n_quality + self.n_invalid

    def describe(self) -> str:
        """One line for the run summary: what was read, dropped (per flag), binned and is fitted."""
        n_read = self.n_points if self.n_read is None else self.n_read
        parts = [f"{self.source}: {n_read} cadences"]
        if self.column:
            parts.append(self.column)
        if self.quality_bitmask:
            parts.append(f"quality mask {self.quality_bitmask}")
        if self.note:
            parts.append(self.note)
        if self.n_dropped:
            flags = ", ".join(f"{k} {v}" for k, v in self.dropped_by_flag.items())
            parts.append(f"{self.n_dropped} dropped (quality {self.n_quality}{f' [{flags}]' if flags else ''}, "
                         f"NaN {self.n_invalid})")
        if self.binned:
            parts.append(f"binned in {self.binned}")
        if self.segments:
            parts.append(f"{len(self.segments)} segments (sectors), each with a free scale")
        gaps = self.gaps
        if gaps:
            longest = ", ".join(f"{g:.3g} d" for g in gaps[:3])
            parts.append(f"{len(gaps)} gap(s) over {GAP_DAYS:g} d (longest {longest})")
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
    label = "line" if str(where) == source else "row"  # text lines, or FITS table rows
    return _complete(source, t, f, e, ts=ts, scale_name=scale_name, unit=unit, hint=hint, ra=ra,
                     dec=dec, rows=(label, rows), **meta)


def _warn_repeated_times(source, t, f, e, rows):
    """Warn about rows that repeat another row's time: each is fitted as one more point.
    ``rows``: (label, the file's number of each point), e.g. ("line", [3, 4, ...])."""
    order = np.argsort(t, kind="stable")
    same = np.nonzero(np.diff(t[order]) == 0)[0]
    if not same.size:
        return
    a, b = order[same], order[same + 1]
    copies = int(np.sum((f[a] == f[b]) & (e[a] == e[b])))
    label, num = rows
    pairs = "; ".join(f"{label}s {num[i]} and {num[j]} at {t[i]:.10g}" for i, j in zip(a[:3], b[:3], strict=True))
    more = f" ... ({same.size} in all)" if same.size > 3 else ""
    warn(f"{source}: {same.size} row(s) repeat the time of another row ({copies} of them exact copies): "
         f"{pairs}{more}; each is fitted as one more point (a copy weighs double): remove the repeated rows")


def _complete(source, t, f, e, *, ts, scale_name, unit, hint, ra, dec, rows=None, **meta):
    if t.size < 2:
        raise DopplermapInputError(f"{source}: needs at least 2 valid cadences, got {t.size}")
    _check_flux_kind(source, f, unit, hint)
    _warn_repeated_times(source, t, f, e, rows if rows is not None else ("cadence", np.arange(1, t.size + 1)))
    if unit == "mag":
        flux = 10.0 ** (-0.4 * f)
        e = 0.4 * math.log(10.0) * flux * e
        f = flux
    bjd = to_internal(t, ts, ra=ra, dec=dec, where=f"{source}: time")
    order = np.argsort(bjd, kind="stable")
    return LightCurveRead(time=bjd[order], flux=f[order].copy(), err=e[order].copy(), source=source,
                          time_scale=scale_name, unit=unit, **meta)


def _check_flux_kind(source, values, unit, hint):
    """Warn when fluxes look like magnitudes, or magnitudes like fluxes."""
    med = float(np.median(values))
    spread = float(np.ptp(values)) / abs(med) if med else math.inf
    if unit == "flux":
        if hint:
            warn(f"{source}: the flux column is labelled {hint!r}, so these may be magnitudes fitted as flux (spot "
                 "signal reversed): if they are magnitudes set unit = 'mag' in its [[lightcurves]] table")
        elif 4.0 <= med <= 25.0 and spread < 0.2:
            warn(f"{source}: fluxes {np.min(values):.4g}..{np.max(values):.4g} (median {med:.4g}, peak-to-peak "
                 f"{100 * spread:.2g}% of it) look like magnitudes of a 4-25 mag star; magnitudes fitted as flux "
                 "reverse the spot signal: if they are magnitudes set unit = 'mag' in its [[lightcurves]] table")
        elif np.min(values) < 0.0 < np.max(values) and float(np.max(np.abs(values))) < 2.0:
            warn(f"{source}: fluxes {np.min(values):.4g}..{np.max(values):.4g} change sign around 0: differential "
                 "magnitudes or a flux variation (F - <F>)? dopplermap needs fluxes > 0 (unit = 'mag' for "
                 "magnitudes; add the mean back to a flux variation)")
    elif med > 30.0 or (0.5 < med < 2.0 and spread < 0.2):
        warn(f"{source}: values {np.min(values):.4g}..{np.max(values):.4g} are declared magnitudes but look like "
             "fluxes (normalised or in counts): check the [[lightcurves]] unit")


@reader("light-curve file")
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


def _shape(dim: str) -> str:
    return " x ".join(x.strip() for x in dim.strip("() ").split(","))


def _refuse_other_products(path, hdul):
    """One line saying what a FITS file that is not a light curve is: a target-pixel file, an
    image, a spectrum, a line profile or a folded light curve (read from its HDU layout)."""
    from astropy.io import fits

    primary = hdul[0].header
    creator = str(primary.get("CREATOR", ""))
    if "FoldedLightCurve" in creator:
        raise DopplermapInputError(f"{path}: a folded light curve (written by {creator}: TIME is rotation phase), not "
                                   "a time series: save the light curve before .fold()")
    tabs = [h for h in hdul if isinstance(h, fits.BinTableHDU)]
    for h in tabs:
        dims = {c.name.upper(): c for c in h.columns if c.dim}
        cube = next((dims[k] for k in ("FLUX", "RAW_CNTS", "FLUX_BKG") if k in dims), None)
        if h.name.upper() in ("PIXELS", "TARGETTABLES") or cube is not None:
            what = f"a {_shape(cube.dim)} pixel {cube.name} image per cadence" if cube is not None else "pixel images"
            raise DopplermapInputError(f"{path}: a target-pixel file ({h.name} table: {what}, {h.header.get('NAXIS2')} "
                                       "cadences), not a light curve: make a light curve from it first (e.g. "
                                       "lightkurve's tpf.to_lightcurve(aperture_mask=...)) and give that")
    if not tabs:
        images = [(i, h) for i, h in enumerate(hdul) if h.is_image and int(h.header.get("NAXIS", 0)) >= 1]
        if images:
            i, h = next(((i, h) for i, h in images if int(h.header["NAXIS"]) >= 2), images[0])
            hd = h.header
            dims = " x ".join(str(hd.get(f"NAXIS{k}")) for k in range(1, int(hd["NAXIS"]) + 1))
            if int(hd["NAXIS"]) == 1:
                axis = hd.get("CTYPE1") or hd.get("CUNIT1") or "a wavelength axis"
                raise DopplermapInputError(f"{path}: a 1-D spectrum ({dims} pixels along {str(axis).strip()}, HDU {i}), "
                                           "not a light curve: a light curve is a table of time, flux and error")
            mission = mission_flags(primary.get("TELESCOP"), primary.get("MISSION"), hd.get("TELESCOP"))
            kind = "a full-frame image" if mission else "an image"
            n_img = sum(1 for _, g in images if int(g.header["NAXIS"]) >= 2)
            more = f", {n_img} image extensions" if n_img > 1 else ""
            raise DopplermapInputError(f"{path}: {kind} ({dims} pixels in HDU {i}{more}), not a light curve: a light "
                                       "curve is a table of time, flux and error (from a full-frame image, extract "
                                       "one first, e.g. with TESScut and lightkurve)")
        return
    for h in tabs:
        names = [c.name.upper() for c in h.columns]
        if any(n in names for n in (t.upper() for t in _T_NAMES)):
            continue
        units = {c.name.upper(): str(c.unit or "").strip().lower() for c in h.columns}
        wave = next((n for n in names if n in _WAVE_NAMES or units[n] in _WAVE_UNITS), None)
        if wave is not None:
            raise DopplermapInputError(f"{path}: a spectrum (table {h.name or 1} has a wavelength column {wave} and no "
                                       "time column), not a light curve")
        vel = next((n for n in names if n in _VEL_NAMES or units[n] in _VEL_UNITS), None)
        if vel is not None:
            raise DopplermapInputError(f"{path}: a line profile (table {h.name or 1} has a velocity column {vel} and "
                                       "no time column), not a light curve: give profiles as [data] profiles")


@reader("light-curve file")
def _read_fits(path: Path, column, unit, ts, scale_name, ra, dec, declared, quality):
    from astropy.io import fits

    try:
        hdul = fits.open(path, memmap=False)
    except OSError as exc:
        raise DopplermapInputError(f"{path}: not a readable FITS file ({exc})") from None
    with hdul:
        _refuse_other_products(path, hdul)
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
        primary = hdul[0].header
        tunit = str(tab.columns[upper["TIME"]].unit or "").strip().lower() if "TIME" in upper else ""
        mission = (tab.name.upper() == "LIGHTCURVE" or any(k in h for k in _TIME_KEYS for h in (tab.header, primary))
                   or bool({"SAP_FLUX", "PDCSAP_FLUX", "QUALITY", "SAP_QUALITY"} & set(upper))
                   or str(primary.get("CREATOR", "")).startswith("lightkurve") or tunit in _LK_BARYCENTRIC)
        if mission:
            return _read_mission(path, primary, tab, upper, column, unit, ra, dec, declared, quality)
        if quality is not None:
            raise DopplermapInputError(f"{path}: quality_bitmask = {quality!r} applies to light curves with a QUALITY "
                                       f"column; this table has none (columns: {', '.join(names)})")
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


def _flux_column(where, upper, names, column, what="column"):
    """The flux column: ``column``, or PDCSAP_FLUX, FLUX (lightkurve's), SAP_FLUX (warned)."""
    if column == "auto":
        fcol = upper.get("PDCSAP_FLUX") or upper.get("FLUX") or upper.get("SAP_FLUX")
        if fcol is None:
            raise DopplermapInputError(f"{where}: no PDCSAP_FLUX, FLUX or SAP_FLUX {what}; name one with "
                                       f"lightcurve_column ({what}s: {', '.join(names)})")
        if fcol.upper() == "SAP_FLUX":
            warn(f"{where}: no PDCSAP_FLUX {what}, using SAP_FLUX (not corrected for systematics)")
        return fcol
    fcol = upper.get(column.upper())
    if fcol is None:
        raise DopplermapInputError(f"{where}: lightcurve_column {column!r} is not a {what} ({what}s: {', '.join(names)})")
    return fcol


def _lightkurve_scale(path, tunit, declared):
    """The :class:`TimeScale` of a lightkurve-written TIME (its unit is the astropy format)."""
    if tunit in _LK_BARYCENTRIC:
        off = _LK_BARYCENTRIC[tunit]
        ts = TimeScale(name=f"TIME in lightkurve's {tunit!r} format (BJD_TDB - {off:.0f})", frame="barycentric",
                       scale="tdb", offset=off)
        if declared is not None:
            d = parse_time_scale(declared, f"{path}: lightcurve_time_scale")
            if (d.frame, d.scale, d.offset) != (ts.frame, ts.scale, ts.offset):
                raise DopplermapInputError(f"{path}: lightcurve_time_scale = {declared!r} disagrees with the file's TIME "
                                           f"unit ({ts.name}); remove it (the unit defines the times)")
        return ts
    if declared is None:
        raise DopplermapInputError(f"{path}: TIME is in {tunit!r} and the file names no time scale or reference point "
                                   "(lightkurve writes none): declare it with lightcurve_time_scale (e.g. 'BJD_TDB', "
                                   "'BMJD', 'HJD')")
    d = parse_time_scale(declared, f"{path}: lightcurve_time_scale")
    if d.offset != _LK_PLAIN[tunit]:
        raise DopplermapInputError(f"{path}: lightcurve_time_scale = {declared!r} (values + {d.offset:.10g}) disagrees "
                                   f"with the TIME unit {tunit!r} (values + {_LK_PLAIN[tunit]:.10g})")
    return d


def _time_of_table(path, tab, primary, tcol, declared):
    """``(TimeScale, factor to days)`` of a mission-like TIME column: from the keywords when
    the file has any, else from lightkurve's TIME unit, else from the declared scale."""
    tunit = str(tab.columns[tcol].unit or "").strip()
    if any(k in h for k in _TIME_KEYS for h in (tab.header, primary)):
        ts, factor = _mission_scale(path, tab.header, primary, tunit)
        if declared is not None:
            d = parse_time_scale(declared, f"{path}: lightcurve_time_scale")
            if (d.frame, d.scale, d.offset) != (ts.frame, ts.scale, ts.offset):
                raise DopplermapInputError(f"{path}: lightcurve_time_scale = {declared!r} disagrees with the file's "
                                           f"keywords ({ts.name}); remove it (the keywords define the times)")
        return ts, factor
    if tunit.lower() in _LK_BARYCENTRIC or tunit.lower() in _LK_PLAIN:
        return _lightkurve_scale(path, tunit.lower(), declared), 1.0
    if declared is None:
        raise DopplermapInputError(f"{path}: no time keywords ({', '.join(_TIME_KEYS)}) and TIME unit {tunit!r}: the "
                                   "times' scale is unknown; declare it with lightcurve_time_scale (e.g. 'BTJD')")
    factor = {"": 1.0, "d": 1.0, "day": 1.0, "days": 1.0}.get(tunit.lower())
    if factor is None:
        raise DopplermapInputError(f"{path}: TIME unit {tunit!r} is not days; a declared lightcurve_time_scale "
                                   "applies to times in days")
    return parse_time_scale(declared, f"{path}: lightcurve_time_scale"), factor


def _quality(where, q, spec, mission, *, note=None):
    """``(dropped, by_flag, label)`` of the QUALITY words ``q`` under the mask ``spec``."""
    if mission is None and isinstance(spec, str) and spec != "none" and not np.any(q):
        return np.zeros(q.shape, bool), {}, f"{spec!r} (no flag set)"
    mask = resolve_bitmask(spec, mission, where)
    dropped, by_flag = apply_bitmask(q, mask, mission)
    label = f"{spec!r} ({mission}: {mask})" if isinstance(spec, str) else f"{mask}" + (f" ({mission})" if mission else "")
    return dropped, by_flag, label + (f", {note}" if note else "")


def _drop(where, n, t, f, e, flagged, label, fcol):
    invalid = ~flagged & ~(np.isfinite(t) & np.isfinite(f) & np.isfinite(e) & (e > 0))
    n_q, n_bad = int(flagged.sum()), int(invalid.sum())
    if n and (n_q + n_bad) > DROPPED_WARN_FRACTION * n:
        warn(f"{where}: {n_q + n_bad} of {n} cadences dropped ({n_q} by the quality mask {label}, {n_bad} with NaN "
             f"{fcol} or time): check the sector, the column and the quality mask", stacklevel=3)
    return ~flagged & ~invalid, n_q, n_bad


def _read_mission(path, primary, tab, upper, column, unit, ra, dec, declared, quality):
    if unit != "flux":
        raise DopplermapInputError(f"{path}: lightcurve_unit = {unit!r}, but mission light curves hold fluxes")
    if "TIME" not in upper:
        raise DopplermapInputError(f"{path}: mission light curve ({tab.name}) has no TIME column")
    names = list(tab.columns.names)
    fcol = _flux_column(f"{path}", upper, names, column, what=f"column of {tab.name}")
    ecol = upper.get(fcol.upper() + "_ERR")
    if ecol is None:
        raise DopplermapInputError(f"{path}: no error column {fcol.upper()}_ERR for {fcol}")
    tcol = upper["TIME"]
    ts, factor = _time_of_table(path, tab, primary, tcol, declared)
    t = np.asarray(tab.data[tcol], dtype=float) * factor
    f = np.asarray(tab.data[fcol], dtype=float)
    e = np.asarray(tab.data[ecol], dtype=float)
    n = t.size
    qcol = upper.get("QUALITY") or upper.get("SAP_QUALITY")  # TESS: QUALITY; Kepler/K2: SAP_QUALITY
    label, by_flag = None, {}
    if qcol is None:
        if quality not in (None, "none", 0):
            raise DopplermapInputError(f"{path}: quality_bitmask = {quality!r}, but {tab.name} has no QUALITY column")
        flagged = np.zeros(n, bool)
    else:
        mission = mission_flags(primary.get("TELESCOP"), primary.get("MISSION"), tab.header.get("TELESCOP"))
        flagged, by_flag, label = _quality(str(path), np.asarray(tab.data[qcol]), "default" if quality is None else
                                           quality, mission)
    keep, n_q, n_bad = _drop(str(path), n, t, f, e, flagged, label, fcol)
    funit = str(tab.columns[fcol].unit or "")
    return _complete(str(path), t[keep], f[keep], e[keep], ts=ts, scale_name=ts.name, unit="flux",
                     hint=funit if "mag" in funit.lower() else None, ra=ra, dec=dec,
                     rows=("row", np.nonzero(keep)[0] + 1), n_read=n, n_quality=n_q,
                     n_invalid=n_bad, column=fcol, quality_bitmask=label, dropped_by_flag=by_flag)


# ------------------------------------------------------------------ lightkurve objects
# An optional adapter: lightkurve is never imported. Its objects are recognised by what they
# hold (an astropy Table with ``time``, ``flux``, ``flux_err`` and ``meta``), so any version,
# or a look-alike, is read the same way.

def _is_table_like(obj) -> bool:
    return all(hasattr(obj, a) for a in ("time", "flux", "meta", "colnames"))


def _not_a_lightcurve(obj, where):
    """One line for a lightkurve object that is not a light curve; None for one that is."""
    name = type(obj).__name__
    if hasattr(obj, "pipeline_mask") or (hasattr(obj, "flux") and np.ndim(obj.flux) == 3):
        shape = " x ".join(str(x) for x in np.shape(obj.flux)[1:])
        return (f"{where}: a target-pixel file ({name}: a {shape} pixel image per cadence), not a light curve: make "
                "one first, e.g. tpf.to_lightcurve(aperture_mask=tpf.pipeline_mask)")
    if hasattr(obj, "frequency") and hasattr(obj, "power"):
        return f"{where}: a periodogram ({name}), not a light curve"
    return None


def is_lightcurve_object(obj) -> bool:
    """Whether ``obj`` is given as an object (a lightkurve light curve, a collection or list of
    them, or another lightkurve product), not as a file path."""
    if isinstance(obj, (str, bytes, os.PathLike)):
        return False
    return _is_table_like(obj) or _not_a_lightcurve(obj, "") is not None or (
        hasattr(obj, "__len__") and (hasattr(obj, "__iter__") or hasattr(obj, "__getitem__"))
        and not isinstance(obj, (dict, np.ndarray)))


def _values(q, where, what):
    """A column or Quantity (masked ones: masked values NaN) as a float array."""
    mask = getattr(q, "mask", None)
    v = getattr(q, "unmasked", q)
    v = getattr(v, "value", v)
    try:
        a = np.array(v, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise DopplermapInputError(f"{where}: {what} is not numeric ({exc})") from None
    if mask is not None and np.ndim(mask):
        a[np.asarray(mask, bool).reshape(-1)] = np.nan
    return a


def _object_time(obj, where, time_scale):
    """``(values, TimeScale)`` of a light curve's ``time`` (an astropy Time)."""
    from astropy.time import Time, TimeDelta

    t = obj.time
    if isinstance(t, TimeDelta) or type(obj).__name__ == "FoldedLightCurve":
        raise DopplermapInputError(f"{where}: a folded light curve (time is rotation phase), not a time series: pass "
                                   "the light curve before .fold()")
    if not isinstance(t, Time):
        raise DopplermapInputError(f"{where}: time must be an astropy Time, got {type(t).__name__}")
    if t.scale not in _TIME_SCALES:
        raise DopplermapInputError(f"{where}: time scale {t.scale!r} is not one dopplermap converts "
                                   f"({', '.join(_TIME_SCALES)})")
    fmt = t.format
    if fmt in _LK_BARYCENTRIC:  # barycentric TDB by the format's definition (lightkurve's BTJD, BKJD)
        ts = TimeScale(name=f"Time in {fmt!r} (BJD_TDB - {_LK_BARYCENTRIC[fmt]:.0f})", frame="barycentric",
                       scale="tdb", offset=0.0)
        if time_scale is not None and parse_time_scale(time_scale, f"{where}: time_scale").frame != "barycentric":
            raise DopplermapInputError(f"{where}: time_scale = {time_scale!r} disagrees with the Time's format {fmt!r}, "
                                       "which is barycentric; remove it")
        return _values(t.tdb.jd, where, "time"), ts
    if time_scale is None:
        raise DopplermapInputError(f"{where}: time in format {fmt!r}, scale {t.scale!r}: the Time knows its scale but "
                                   "not where the times are referred to (barycentre, Sun, Earth): declare time_scale "
                                   "(e.g. 'BJD', 'HJD', 'JD')")
    d = parse_time_scale(time_scale, f"{where}: time_scale")
    ts = TimeScale(name=f"Time in {fmt!r}, scale {t.scale}, {d.frame}", frame=d.frame, scale=t.scale, offset=0.0)
    return _values(t.jd, where, "time"), ts


def _object_flux(obj, where, column, unit):
    """``(flux, err, column label, unit)`` of a light curve object, the error in the flux's unit."""
    cols = list(obj.colnames)
    if column == "auto":
        fq = obj.flux
        eq = obj.flux_err if "flux_err" in cols else None
        origin = obj.meta.get("FLUX_ORIGIN")
        label = f"flux ({origin})" if isinstance(origin, str) and origin != "flux" else "flux"
        ename = "flux_err"
    else:
        fname = next((c for c in cols if c.lower() == column.lower()), None)
        if fname is None:
            raise DopplermapInputError(f"{where}: lightcurve_column {column!r} is not a column (columns: "
                                       f"{', '.join(cols)})")
        ename = next((c for c in cols if c.lower() == fname.lower() + "_err"), fname + "_err")
        fq, eq, label = obj[fname], (obj[ename] if ename in cols else None), fname
    if eq is None:
        raise DopplermapInputError(f"{where}: no error column {ename} for {label}")
    fu, eu = getattr(fq, "unit", None), getattr(eq, "unit", None)
    is_mag = fu is not None and "mag" in str(fu).lower()
    if unit == "mag" and fu is not None and not is_mag and str(fu):
        raise DopplermapInputError(f"{where}: unit = 'mag', but the flux is in {fu}")
    f = _values(fq, where, label)
    if fu is not None and eu is not None and eu != fu and not is_mag:
        try:
            eq = eq.to(fu)
        except Exception as exc:  # astropy's UnitConversionError and relatives
            raise DopplermapInputError(f"{where}: {ename} in {eu} cannot be converted to the flux's {fu} ({exc})") \
                from None
    e = _values(eq, where, ename)
    if np.all(np.isnan(e)):
        raise DopplermapInputError(f"{where}: {ename} is NaN everywhere: a light curve needs its errors")
    return f, e, label, "mag" if (is_mag or unit == "mag") else "flux"


def _object_source(obj) -> str:
    meta = getattr(obj, "meta", {}) or {}
    label = next((meta.get(k) for k in ("OBJECT", "LABEL", "TARGETID") if meta.get(k)), None)
    part = next((f"{k.lower()} {meta[k]}" for k in ("SECTOR", "QUARTER", "CAMPAIGN") if meta.get(k) is not None), None)
    inside = ", ".join(str(x) for x in (label, part) if x)
    return f"{type(obj).__name__}({inside})" if inside else type(obj).__name__


def _read_object(obj, *, column, unit, time_scale, quality_bitmask, ra, dec):
    where = _object_source(obj)
    bad = _not_a_lightcurve(obj, where)
    if bad:
        raise DopplermapInputError(bad)
    values, ts = _object_time(obj, where, time_scale)
    f, e, label, funit = _object_flux(obj, where, column, unit)
    n = values.size
    if not (f.size == e.size == n):
        raise DopplermapInputError(f"{where}: time, flux and error lengths differ ({n}, {f.size}, {e.size})")
    meta = obj.meta
    qlabel, by_flag, flagged = None, {}, np.zeros(n, bool)
    if "quality" in obj.colnames:
        read_with = meta.get("QUALITY_BITMASK")
        given = quality_bitmask is not None
        spec = quality_bitmask if given else read_with if read_with is not None else "default"
        check_bitmask(spec, f"{where}: quality_bitmask" if given else f"{where}: meta QUALITY_BITMASK")
        mission = mission_flags(meta.get("MISSION"), meta.get("TELESCOP"))
        q = np.nan_to_num(_values(obj["quality"], where, "quality")).astype(np.int64)
        note = "the mask lightkurve applied when reading" if (not given and read_with is not None) else None
        flagged, by_flag, qlabel = _quality(where, q, spec, mission, note=note)
    elif quality_bitmask not in (None, "none", 0):
        raise DopplermapInputError(f"{where}: quality_bitmask = {quality_bitmask!r}, but the light curve has no "
                                   "quality column")
    keep, n_q, n_bad = _drop(where, n, values, f, e, flagged, qlabel, label)
    return _complete(where, values[keep], f[keep], e[keep], ts=ts, scale_name=ts.name, unit=funit, hint=None, ra=ra,
                     dec=dec, rows=("cadence", np.nonzero(keep)[0] + 1), n_read=n, n_quality=n_q, n_invalid=n_bad, column=label, quality_bitmask=qlabel,
                     dropped_by_flag=by_flag)


def from_lightkurve(obj, *, column: str = "auto", unit: str = "flux", time_scale=None, quality_bitmask=None,
                    sky=None) -> LightCurveRead:
    """A lightkurve ``LightCurve``, ``LightCurveCollection`` (or a list of light curves) as a
    :class:`LightCurveRead` (times in BJD_TDB): see the module docstring.

    ``quality_bitmask``: None keeps what lightkurve applied when it read the file (its
    ``meta['QUALITY_BITMASK']``; ``"default"`` for a light curve without one); a preset or
    an integer is applied to the ``quality`` column. A collection's light curves are each
    divided by their mean flux and joined in time order.
    """
    check(unit, LIGHTCURVE_UNITS, "light-curve unit")
    if quality_bitmask is not None:
        check_bitmask(quality_bitmask, "quality_bitmask")
    ra, dec = (None, None) if sky is None else sky
    kw = dict(column=column, unit=unit, time_scale=time_scale, quality_bitmask=quality_bitmask, ra=ra, dec=dec)
    if _is_table_like(obj) or _not_a_lightcurve(obj, "") is not None:
        return _read_object(obj, **kw)
    if not is_lightcurve_object(obj):
        raise DopplermapInputError(f"a light curve is a file path or a lightkurve LightCurve / LightCurveCollection, "
                                   f"got {type(obj).__name__}")
    members = list(obj)
    where = f"{type(obj).__name__} of {len(members)}"
    for i, m in enumerate(members):
        if not _is_table_like(m):
            bad = _not_a_lightcurve(m, f"{where}: item {i + 1}")
            raise DopplermapInputError(bad or f"{where}: item {i + 1} is a {type(m).__name__}, not a light curve")
    if not members:
        raise DopplermapInputError(f"{where}: no light curves")
    return join_segments([_read_object(m, **kw) for m in members], where, free_scale=False)


def join_segments(parts, where: str, *, free_scale: bool = True) -> LightCurveRead:
    """Light curves of one band (sectors, quarters, files) joined in time order, each
    divided by its mean flux; each keeps its own time system (read from its own keywords).

    ``free_scale``: record each part as a segment (``segment``, ``segments``), which the
    light-curve model gives a free scale (:mod:`dopplermap.lightcurve`); otherwise the parts
    are only divided by their means."""
    ranges = sorted((p.time[0], p.time[-1], p.source) for p in parts)
    for (_a0, a1, an), (b0, _b1, bn) in zip(ranges, ranges[1:], strict=False):
        if b0 < a1:
            warn(f"{where}: {an} and {bn} overlap in time ({b0:.5f} < {a1:.5f} BJD_TDB): the same cadences twice "
                 "(two pipelines or cadences of one sector)? Give each once")
    flux, err = [], []
    for p in parts:
        mean = float(np.mean(p.flux))
        if not mean > 0:
            raise DopplermapInputError(f"{p.source}: mean flux must be > 0 to normalise it, got {mean!r}")
        flux.append(p.flux / mean)
        err.append(p.err / mean)
    t = np.concatenate([p.time for p in parts])
    order = np.argsort(t, kind="stable")
    seg = np.concatenate([np.full(p.n_points, i, dtype=np.int32) for i, p in enumerate(parts)])[order]
    segments = tuple(dict(source=p.source, start=float(p.time.min()), end=float(p.time.max()), points=p.n_points,
                          time_scale=p.time_scale, binned=p.binned) for p in parts) if free_scale else ()
    by_flag = {}
    for p in parts:
        for k, v in p.dropped_by_flag.items():
            by_flag[k] = by_flag.get(k, 0) + v
    labels = list(dict.fromkeys(p.quality_bitmask for p in parts if p.quality_bitmask))
    columns = list(dict.fromkeys(p.column for p in parts))
    return LightCurveRead(time=t[order], flux=np.concatenate(flux)[order], err=np.concatenate(err)[order],
                          source=f"{where} ({'; '.join(p.source for p in parts)})",
                          n_read=sum(p.n_points if p.n_read is None else p.n_read for p in parts),
                          n_quality=sum(p.n_quality for p in parts),
                          n_invalid=sum(p.n_invalid for p in parts), column=", ".join(c for c in columns if c) or None,
                          time_scale="; ".join(dict.fromkeys(p.time_scale for p in parts)), unit=parts[0].unit,
                          quality_bitmask="; ".join(labels) or None, dropped_by_flag=by_flag,
                          binned="; ".join(dict.fromkeys(p.binned for p in parts if p.binned)) or None,
                          note=(f"{len(parts)} light curves joined, each divided by its mean flux" if not free_scale
                                else None),
                          segment=seg if free_scale else None, segments=segments)


def read_lightcurve(source, fmt: str = "auto", *, column: str = "auto", unit: str = "flux", time_scale=None,
                    fallback_time_scale: str = "BJD_TDB", sky=None, quality_bitmask=None) -> LightCurveRead:
    """Read a light curve, times in the internal BJD_TDB, sorted by time.

    Args:
        source: the file, or a lightkurve ``LightCurve`` / ``LightCurveCollection``
            (:func:`from_lightkurve`). fmt: ``"auto"`` (FITS by the file name), ``"text"``
            or ``"fits"``.
        column: flux column of a FITS file or an object (``"auto"``: PDCSAP_FLUX, else
            FLUX, else SAP_FLUX; any column can be named, its error is ``<column>_ERR``).
        unit: ``"flux"`` or ``"mag"`` (text and non-mission FITS).
        time_scale: declared scale of the times (see :mod:`dopplermap.io.times`); mission
            FITS files take theirs from the keywords, lightkurve's files from the TIME unit
            (a declared one must agree).
        fallback_time_scale: used when ``time_scale`` is None for files without keywords
            (the problem builder passes ``[data] time_scale``).
        sky: ``(ra, dec)``, the target's coordinates (deg), for heliocentric/geocentric times.
        quality_bitmask: ``"none"``, ``"default"``, ``"hard"``, ``"hardest"`` or an integer
            (:mod:`dopplermap.io.quality`); None: ``"default"`` for files with a QUALITY
            column, what lightkurve applied for objects. Text files have no QUALITY column.
    """
    ra, dec = (None, None) if sky is None else sky
    if quality_bitmask is not None:
        check_bitmask(quality_bitmask, "quality_bitmask")
    if is_lightcurve_object(source):
        if fmt != "auto":
            raise DopplermapInputError(f"lightcurve_format = {fmt!r} applies to files; {type(source).__name__} is an "
                                       "object")
        return from_lightkurve(source, column=column, unit=unit, time_scale=time_scale,
                               quality_bitmask=quality_bitmask, sky=sky)
    if not isinstance(source, (str, os.PathLike)):
        raise DopplermapInputError(f"a light curve is a file path or a lightkurve LightCurve / LightCurveCollection, "
                                   f"got {type(source).__name__}")
    path = Path(source)
    check(fmt, LIGHTCURVE_FORMATS, "light-curve format")
    check(unit, LIGHTCURVE_UNITS, "light-curve unit")
    if not path.is_file():
        raise MissingFileError(f"light-curve file not found: {path}")
    name = time_scale if time_scale is not None else fallback_time_scale
    ts = parse_time_scale(name, f"{path}: time_scale")
    if fmt == "fits" or (fmt == "auto" and _is_fits(path)):
        return _read_fits(path, column, unit, ts, name, ra, dec, time_scale, quality_bitmask)
    if column != "auto":
        raise DopplermapInputError(f"{path}: lightcurve_column = {column!r} applies to FITS files; text files are "
                                   "read as columns time, flux, error")
    if quality_bitmask is not None:
        raise DopplermapInputError(f"{path}: quality_bitmask = {quality_bitmask!r} applies to FITS light curves with a "
                                   "QUALITY column; a text file has none")
    return _read_text(path, unit, ts, name, ra, dec)


def bin_lightcurve(data: LightCurveRead, width: float, *, unit: str = "d", period=None, t0=None) -> LightCurveRead:
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
    if data.segment is not None:  # the bins would mix segments of different scales
        raise DopplermapInputError(f"{data.source}: bin each segment (file) before joining them (load_lightcurve "
                                   "with a list of files and bin_width does so)")
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


@dataclasses.dataclass(frozen=True)
class LightCurveReading:
    """How :func:`load_lightcurve` reads and bins a light curve: the keywords of
    :func:`read_lightcurve` (``fmt``, ``column``, ``unit``, ``time_scale``,
    ``fallback_time_scale``, ``sky``, ``quality_bitmask``) and the bins of
    :func:`bin_lightcurve` (``bin_width``, None: not binned; ``bin_unit``)."""

    fmt: str = "auto"
    column: str = "auto"
    unit: str = "flux"
    time_scale: str | None = None
    fallback_time_scale: str = "BJD_TDB"
    sky: tuple | None = None
    quality_bitmask: object = None
    bin_width: float | None = None
    bin_unit: str = "d"

    def replace(self, **changes) -> LightCurveReading:
        return dataclasses.replace(self, **changes)


def reading_options(where: str, reading: LightCurveReading | None, loose: dict) -> LightCurveReading:
    """The :class:`LightCurveReading` of ``where(..., reading=LightCurveReading(...))`` or of its
    fields given as loose keywords (``bin_width=0.02``), not both."""
    return options_of(where, LightCurveReading, reading, loose, "reading")


def load_lightcurve(source, reading: LightCurveReading | None = None, *, period=None, t0=None, profile_times=None,
                    **loose) -> LightCurveRead:
    """Read (:func:`read_lightcurve`: a file or a lightkurve object), check against the profile
    epochs (:func:`dopplermap.io.times.check_time_overlap`) and bin (:func:`bin_lightcurve`):
    the problem builder's one call. ``reading``: a :class:`LightCurveReading`, or its fields
    as keywords (``bin_width=0.02, bin_unit="d"``). ``period``, ``t0``: the star's (days,
    BJD_TDB; phase bins and the overlap check)."""
    r = reading_options("load_lightcurve", reading, loose)
    if isinstance(source, (list, tuple)) and source and all(isinstance(x, (str, Path)) for x in source):
        # several files of one band (sectors, quarters): each read with its own keywords and
        # binned on its own, then joined with a free scale each
        parts = [load_lightcurve(x, r, period=period, t0=t0) for x in source]
        if len(parts) == 1:
            return parts[0]
        data = join_segments(parts, f"{len(parts)} files")
        if profile_times is not None:
            check_time_overlap(profile_times, data.time, period=period, where=data.source)
        return data
    data = read_lightcurve(source, r.fmt, column=r.column, unit=r.unit, time_scale=r.time_scale,
                           fallback_time_scale=r.fallback_time_scale, sky=r.sky, quality_bitmask=r.quality_bitmask)
    if profile_times is not None:
        check_time_overlap(profile_times, data.time, period=period, where=data.source)
    if r.bin_width is not None:
        data = bin_lightcurve(data, r.bin_width, unit=r.bin_unit, period=period, t0=t0)
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
