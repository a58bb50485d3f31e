"""Readers and writers of observed line profiles (LSD profiles) and their epochs.

Text profiles (``fmt`` ``"auto"``, ``"donati"`` or ``"text"``) follow the layout written by
Donati's LSD code, LSDpy, SpecpolFlow and read by ZDIpy:

* optional leading lines: ``#`` comments and one title line (``***Reduced spectrum of ...``,
  ``#renormalized LSD prof`` or a line of column names);
* optional count line ``N_points N_columns``, where ``N_columns`` counts the columns *after*
  the velocity (`` 224 6`` for ``v I sigma_I V sigma_V N sigma_N``, `` 47 2`` for
  ``v I sigma_I``);
* ``N_points`` rows of 3 (``v I sigma_I``), 5 (``+ V sigma_V``), 7 (``+ N sigma_N``) or 9
  (``+ N2 sigma_N2``) columns, whitespace or comma separated; velocity in km/s, Stokes I
  from column 2 and its error from column 3 (the rest is not used). Blank lines and ``#``
  lines anywhere are skipped. Six columns is refused: that is the spectrum layout of
  LSDpy/SpecpolFlow (``wavelength I V N1 N2 sigma``), where column 3 is V.

``"auto"`` and ``"text"`` accept files with or without the count line (a two-integer line
before the data can only be a count line: profile rows have at least 3 columns);
``"donati"`` requires it. A count line that disagrees with the data is an error naming
the line and what it expected; one that counts *all* columns (written by dopplermap before
it followed the convention) is read with a :class:`~dopplermap.errors.DopplermapWarning`.

``"fits"`` (or ``"auto"`` with a ``.fits``/``.fit``/``.fts`` name): the first binary table,
columns named like velocity / flux / error (``v``, ``vel``, ``velocity``; ``i``, ``flux``,
``intensity``; ``err``, ``error``, ``sigma``, ``sigma_i``) or named explicitly with
``fits_columns=("VEL", "I", "ERR")`` (``[data] fits_columns``). Tables whose names are
not recognised are refused, never read by position.

Every profile is checked: finite values, errors > 0, increasing velocities, a median error
below the median intensity (else the columns look swapped) and a grid that makes sense in
km/s (a median step above 50 km/s or a span above 10 000 km/s is a grid in m/s). A
spectrum is not a profile: an axis entirely beyond 2000 (Angstrom, or nm in the infrared),
or more than 3000 points on a positive axis stepping less than 0.1 (nm), is refused;
more than 3000 points otherwise, or a positive axis above 100 stepping less than 0.1, is
a :class:`~dopplermap.errors.DopplermapWarning`.

Epochs come from a table (CSV/whitespace text or astropy ECSV) of file name, time and
optionally the systemic (line-centre) velocity, or from a regular expression on the file
names with a group named ``time`` (for example ``BJD=(?P<time>[0-9.]+)``). Times are returned
as plain numbers as given.

Systemic velocity: each profile's velocities are shifted into the star's rest frame,
``u = v_observed - v_sys`` (ZDIpy's convention; ``v_sys`` positive = receding), before the
velocity window (``velocity_range``, relative to the line centre) is applied.

Different velocity grids: :func:`load_observations` resamples every profile onto one grid
by linear interpolation, with errors propagated as
``sigma^2 = (1 - w)^2 sigma_i^2 + w^2 sigma_(i+1)^2``. The grid is that of a file of the
largest group of files sharing one velocity step (between groups of equal size, the
coarser step), shifted to the line centre and restricted to the range all files cover and
to the window: most profiles are then taken unchanged (to 1e-9 km/s), and no file is
resampled onto a finer grid than it was sampled on unless most files are finer.
Interpolation correlates neighbouring resampled points, which the chi-square does not
track: a coarse profile put on a finer grid weighs more than its information. Files whose
step or span is unlike the chosen grid's get one warning that names them and the grid.
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._options import options_of
from ..atomic import write_file, write_text
from ..choices import PROFILE_FORMATS, PROFILE_WRITE_FORMATS, check
from ..errors import DopplermapInputError, MissingFileError, bad_file, one_line, reader, warn
from ..objective import Observations
from ..profiles import tabulated

__all__ = ["LineProfile", "ProfileReading", "read_lsd", "write_lsd", "read_times_table", "read_epochs_table", "Epoch",
           "times_from_pattern", "resample", "load_observations", "load_profiles", "profile_files",
           "read_local_profile"]

_FITS_EXT = (".fits", ".fit", ".fts", ".fits.gz", ".fit.gz")
_V_NAMES = ("v", "vel", "velocity", "velocities", "rv", "vrad")
_I_NAMES = ("i", "flux", "intensity", "prf", "stokes_i", "i/ic", "ic", "speci")
_E_NAMES = ("err", "error", "errs", "sigma", "sigma_i", "sig_i", "ierr", "i_err", "flux_err", "specsigi")
# beyond these a profile's grid is in m/s, not km/s (no LSD grid steps 50 km/s or spans 10^4 km/s)
_MAX_STEP_KMS = 50.0
_MAX_SPAN_KMS = 10_000.0
# an LSD profile has tens to a few hundred points, sampled at >= ~0.5 km/s (a spectrograph
# pixel); an axis finer than _MIN_STEP_KMS over more than _MAX_POINTS points is a spectrum
_MAX_POINTS = 3000
_MIN_STEP_KMS = 0.1
# the line of a star lies within this of 0 km/s (its systemic velocity, as _check_vsys)
_MAX_LINE_KMS = 2000.0
# standard Donati/LSDpy/SpecpolFlow column counts and what they hold
_LAYOUTS = {3: "v I sigma_I", 5: "v I sigma_I V sigma_V", 7: "v I sigma_I V sigma_V N sigma_N",
            9: "v I sigma_I V sigma_V N1 sigma_N1 N2 sigma_N2"}


@dataclasses.dataclass(frozen=True, eq=False)
class LineProfile:
    """One observed profile: velocities (n,) km/s increasing, flux (n,) I/Ic, err (n,) > 0."""

    vels: np.ndarray
    flux: np.ndarray
    err: np.ndarray
    source: str


def _is_fits(path: Path) -> bool:
    name = path.name.lower()
    return any(name.endswith(e) for e in _FITS_EXT)


def _float(tok: str, where: str) -> float:
    try:
        return float(tok)
    except ValueError:
        raise DopplermapInputError(f"{where}: non-numeric value {tok!r}") from None


def _split(line: str):
    return [t for t in re.split(r"[,\s;]+", line.strip()) if t]


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def _check_grid_units(where, v, lines=None):
    """Refuse a velocity grid that only makes sense in m/s."""
    if v.size < 2:
        return
    step = float(np.median(np.diff(v)))
    span = float(v[-1] - v[0])
    if step > _MAX_STEP_KMS or span > _MAX_SPAN_KMS:
        raise DopplermapInputError(
            f"{where}: velocity grid looks like m/s, not km/s (median step {step:.6g}, span {span:.6g}; "
            f"a km/s grid steps < {_MAX_STEP_KMS:g} and spans < {_MAX_SPAN_KMS:g}): give velocities in km/s "
            f"(divide by 1000)")


def _check_not_spectrum(where, v):
    """Refuse an axis that is a spectrum's wavelengths, warn about one that may be.

    Refused: an axis entirely beyond 2000 (no star's line lies there in km/s: Angstrom, or nm
    in the infrared), or thousands of points on a positive axis stepping less than
    0.1 km/s (no spectrograph samples that finely: nm). Warned: thousands of points
    otherwise, or a positive axis above 100 stepping less than 0.1 (a cut-out of a
    spectrum in nm?)."""
    n, lo, hi = v.size, float(v[0]), float(v[-1])
    step = float(np.median(np.diff(v)))
    what = f"{n} points from {lo:.6g} to {hi:.6g} (median step {step:.3g})"
    lsd = "an LSD profile has tens to a few hundred velocities (km/s) around the line centre"
    if lo > _MAX_LINE_KMS:
        raise DopplermapInputError(f"{where}: {what} cannot be velocities of a stellar line in km/s (beyond "
                                   f"{_MAX_LINE_KMS:g}): a spectrum on a wavelength axis (Angstrom or nm)? {lsd}; "
                                   "compute one from the spectrum (LSDpy, SpecpolFlow)")
    fine = lo > 0 and step < _MIN_STEP_KMS
    if n > _MAX_POINTS and fine:
        raise DopplermapInputError(f"{where}: {what} is a spectrum on a wavelength axis (nm?), not a line profile: "
                                   f"{lsd}, at steps >= ~0.5 km/s; compute one from the spectrum (LSDpy, SpecpolFlow)")
    if n > _MAX_POINTS:
        warn(f"{where}: {what}: {lsd}; is it a spectrum? The model's cost grows with the points: check the file, "
             "or cut it with velocity_range")
    elif fine and lo > 100.0:
        warn(f"{where}: {what} steps finer than any spectrograph samples in km/s and never reaches 0: wavelengths "
             f"in nm (a cut-out of a spectrum)? {lsd}")


def _check_rows(path, rows, lines, columns: str = "columns 1-3"):
    """Validate parsed (v, I, err) rows; ``lines`` gives the line number of each row."""
    arr = np.asarray(rows, dtype=float).reshape(-1, 3)
    for col, name in enumerate(("velocity", "intensity", "error")):
        bad = ~np.isfinite(arr[:, col])
        if bad.any():
            i = int(np.argmax(bad))
            raise DopplermapInputError(f"{path}:{lines[i]}: {name} is {float(arr[i, col])!r} (NaN or inf not allowed)")
    bad = arr[:, 2] <= 0
    if bad.any():
        i = int(np.argmax(bad))
        raise DopplermapInputError(f"{path}:{lines[i]}: error must be > 0, got {float(arr[i, 2])!r} ({int(bad.sum())} values <= 0 in file)")
    dv = np.diff(arr[:, 0])
    if np.any(dv <= 0):
        i = int(np.argmax(dv <= 0)) + 1
        raise DopplermapInputError(f"{path}:{lines[i]}: velocities must increase, {float(arr[i, 0])!r} follows {float(arr[i - 1, 0])!r}")
    if arr.shape[0] < 3:
        raise DopplermapInputError(f"{path}: needs at least 3 data rows, got {arr.shape[0]}")
    _check_grid_units(path, arr[:, 0])
    _check_not_spectrum(path, arr[:, 0])
    med_f, med_e = float(np.median(np.abs(arr[:, 1]))), float(np.median(arr[:, 2]))
    if med_e >= med_f:
        raise DopplermapInputError(
            f"{path}: median error {med_e:.4g} >= median intensity {med_f:.4g} ({columns} read as velocity, "
            f"intensity, error): the intensity and error columns look swapped (or column 2 is not I/Ic)")
    return LineProfile(vels=arr[:, 0].copy(), flux=arr[:, 1].copy(), err=arr[:, 2].copy(), source=str(path))


def _is_count_line(toks) -> bool:
    return len(toks) == 2 and all(re.fullmatch(r"[+]?\d+", t) for t in toks)


def _parse_columns(path: Path, text: list[str], *, fmt: str, min_cols: int, what: str):
    """Rows of a text profile in the Donati/LSDpy layout (see the module docstring).

    Returns ``(rows (n, min_cols) floats, line numbers, n_columns)``. ``min_cols`` is 3 for
    observed profiles (v, I, sigma_I) and 2 for local profiles (v, I/Ic).
    """
    title_seen = False
    count = None  # (line number, N_points, N_columns after the velocity)
    rows, lines, n_col = [], [], None
    for ln, line in enumerate(text, start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        toks = _split(s)
        if not rows and count is None:
            if s.startswith("***") or not _is_number(toks[0]) or (
                    not all(map(_is_number, toks)) and _next_is_count(text, ln)):
                if title_seen:
                    raise DopplermapInputError(f"{path}:{ln}: expected a count line 'N_points N_columns' or data "
                                               f"({what}) after the title line, got {s[:60]!r}")
                title_seen = True
                continue
            if _is_count_line(toks) and (min_cols >= 3 or _looks_like_count(text, ln, toks)):
                count = (ln, int(toks[0]), int(toks[1]))
                continue
        if n_col is None:
            n_col = len(toks)
            if n_col < min_cols:
                raise DopplermapInputError(f"{path}:{ln}: expected at least {min_cols} columns ({what}), got {n_col}")
        if len(toks) != n_col:
            raise DopplermapInputError(f"{path}:{ln}: expected {n_col} columns like the first data row "
                                       f"(line {lines[0]}), got {len(toks)}")
        if count is not None and len(rows) == count[1]:
            raise DopplermapInputError(f"{path}:{ln}: more data rows than N_points = {count[1]} "
                                       f"(count line {count[0]})")
        rows.append([_float(t, f"{path}:{ln}") for t in toks[:min_cols]])
        lines.append(ln)
    if not rows:
        raise DopplermapInputError(f"{path}: no data rows ({what})")
    if fmt == "donati" and count is None:
        raise DopplermapInputError(f"{path}:{lines[0]}: format 'donati' needs a count line 'N_points N_columns' "
                                   f"before the data (e.g. ' {len(rows)} {n_col - 1}'); use format 'auto' for files without one")
    if count is not None:
        cl, n_pts, n_after = count
        if n_after + 1 != n_col:
            if n_after == n_col and min_cols < 3:
                pass  # local profiles are written both ways; the data are unambiguous
            elif n_after == n_col:
                warn(f"{path}:{cl}: count line says {n_after} columns but counts the velocity too (the convention, "
                     f"used by LSD, LSDpy, SpecpolFlow and ZDIpy, is N_columns after the velocity: "
                     f"' {n_pts} {n_col - 1}'); read as {n_col} columns. Rewrite the file with write_lsd.")
            else:
                raise DopplermapInputError(
                    f"{path}:{cl}: count line says {n_after} columns after the velocity ({n_after + 1} in all), "
                    f"but the data rows (line {lines[0]} on) have {n_col}: expected ' {n_pts} {n_col - 1}'")
        if len(rows) != n_pts:
            raise DopplermapInputError(f"{path}:{lines[-1]}: file ends after {len(rows)} data rows but the count "
                                       f"line {cl} says N_points = {n_pts}")
    if min_cols >= 3 and n_col == 6:
        raise DopplermapInputError(
            f"{path}:{lines[0]}: 6 columns is the layout of a spectrum (LSDpy/SpecpolFlow .s: wavelength I V N1 N2 "
            f"sigma), not of an LSD profile (3, 5, 7 or 9 columns: v I sigma_I [V sigma_V [N sigma_N ...]]); "
            f"column 3 would be V, not the error of I")
    if min_cols >= 3 and n_col not in _LAYOUTS:
        warn(f"{path}: {n_col} columns is not a standard LSD layout ({', '.join(f'{k}: {v}' for k, v in _LAYOUTS.items())}); "
             f"read column 1 as velocity, 2 as Stokes I and 3 as its error: check that is right")
    return rows, lines, n_col


def _next_is_count(text, ln) -> bool:
    """Whether the content line after line ``ln`` is a count line (a title such as
    '2014 Aug 16 LO Peg' starts with a number; a corrupt data row is not followed by one)."""
    nxt = next((_split(t) for t in text[ln:] if t.strip() and not t.strip().startswith("#")), None)
    return nxt is not None and _is_count_line(nxt)


def _looks_like_count(text, ln, toks) -> bool:
    """Whether a two-integer line of a 2-column local-profile file is a count line: the rows
    after it have another column count, their number equals its first integer, or the next
    velocity is not above its first integer (so it cannot be the first data row)."""
    after = [_split(t) for t in text[ln:] if t.strip() and not t.strip().startswith("#")]
    if not after:
        return False
    nxt, n_pts = after[0], int(toks[0])
    if len(nxt) != 2 or len(after) == n_pts:
        return True
    return _is_number(nxt[0]) and float(nxt[0]) <= n_pts


def _pick(names, wanted):
    """The first of ``names`` whose lower-case form is in ``wanted``, or None."""
    low = [n.lower() for n in names]
    for w in wanted:
        if w in low:
            return names[low.index(w)]
    return None


def _open_table(path: Path):
    from astropy.io import fits

    try:
        hdul = fits.open(path, memmap=False)
    except OSError as exc:
        raise DopplermapInputError(f"{path}: not a readable FITS file ({exc})") from None
    tab = next((h for h in hdul if isinstance(h, fits.BinTableHDU)), None)
    if tab is None:
        hdul.close()
        raise DopplermapInputError(f"{path}: no binary-table extension found")
    return hdul, tab


def _column_names(path, tab) -> list[str]:
    """The column names of a FITS table; a column without one (a damaged TTYPEn card) is refused."""
    names = list(tab.columns.names)
    for i, n in enumerate(names, start=1):
        if not n:
            raise DopplermapInputError(f"{path}: table column {i} has no name (its TTYPE{i} card is missing or damaged)")
    return names


def _stack(path, tab, cols):
    try:
        return np.stack([np.asarray(tab.data[c], dtype=float).reshape(-1) for c in cols], axis=1)
    except (ValueError, TypeError) as exc:
        raise DopplermapInputError(f"{path}: columns {cols} are not numeric ({exc})") from None


def _read_fits(path: Path, columns=None) -> LineProfile:
    hdul, tab = _open_table(path)
    with hdul:
        names = _column_names(path, tab)
        if columns is not None:
            if len(columns) != 3:
                raise DopplermapInputError(f"fits_columns must name 3 columns (velocity, intensity, error), got {list(columns)}")
            low = {n.lower(): n for n in names}
            missing = [c for c in columns if c.lower() not in low]
            if missing:
                raise DopplermapInputError(f"{path}: fits_columns {missing[0]!r} is not a column of the table "
                                           f"(columns found: {names})")
            cols = [low[c.lower()] for c in columns]
        else:
            cols = [_pick(names, w) for w in (_V_NAMES, _I_NAMES, _E_NAMES)]
            if None in cols or len(set(cols)) != 3:
                raise DopplermapInputError(
                    f"{path}: cannot tell velocity, intensity and error apart from the column names {names} "
                    f"(recognised: v/vel/velocity, i/flux/intensity, err/error/sigma); rename them or set "
                    f"[data] fits_columns = [\"VELOCITY_COLUMN\", \"INTENSITY_COLUMN\", \"ERROR_COLUMN\"] "
                    f"(read_lsd(..., fits_columns=...))")
        arr = _stack(path, tab, cols)
    # FITS rows are numbered from 1; report them as "row N"
    return _check_rows(f"{path} (table row)", arr, list(range(1, arr.shape[0] + 1)), columns=f"columns {cols}")


@reader("line-profile file")
def read_lsd(path, fmt: str = "auto", *, fits_columns=None) -> LineProfile:
    """Read one profile; see the module docstring for ``fmt`` and ``fits_columns``."""
    path = Path(path)
    check(fmt, PROFILE_FORMATS, "format")
    if not path.is_file():
        raise MissingFileError(f"profile file not found: {path}")
    if fmt == "fits" or (fmt == "auto" and _is_fits(path)):
        return _read_fits(path, fits_columns)
    try:
        raw = path.read_text()
    except UnicodeDecodeError as exc:
        raise bad_file(path, "line-profile file", exc, hint="for FITS use a .fits name or format 'fits'") from None
    if raw and not raw.endswith("\n"):  # a text file cut short: its last number may be cut too, and still parse
        warn(f"{path}: the last line has no newline at its end, as in a file cut short (an interrupted copy or "
             "download); its last value may be incomplete: compare the file with its source")
    text = raw.splitlines()
    rows, lines, _ = _parse_columns(path, text, fmt=fmt, min_cols=3, what="velocity, intensity, error")
    return _check_rows(path, rows, lines)


def write_lsd(path, vels, flux, err, fmt: str = "donati", *, comment: str = "LSD profile written by dopplermap",
              columns: int = 3):
    """Write one profile.

    ``fmt``: ``"donati"``: the standard LSD layout (title line ``***comment``, count line
    ``N_points N_columns_after_velocity``, then rows; ``columns`` 3, or 7 for the
    spectropolarimetric layout with V and N set to 0 and their errors to sigma_I),
    ``"text"`` (whitespace, ``#`` header), ``"csv"`` (with a header) or ``"fits"`` (binary
    table ``v, flux, err``).
    """
    path = Path(path)
    check(fmt, PROFILE_WRITE_FORMATS, "write format")
    v, f, e = (np.asarray(a, dtype=float) for a in (vels, flux, err))
    if not (v.shape == f.shape == e.shape and v.ndim == 1):
        raise DopplermapInputError(f"vels, flux and err must be 1-D of equal length, got {v.shape}, {f.shape}, {e.shape}")
    if fmt == "fits":
        from astropy.io import fits

        hdu = fits.BinTableHDU.from_columns([fits.Column(name="v", format="D", unit="km/s", array=v),
                                             fits.Column(name="flux", format="D", array=f),
                                             fits.Column(name="err", format="D", array=e)])
        write_file(path, lambda fh: fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(fh))
        return
    if fmt == "donati":
        if columns not in (3, 7):
            raise DopplermapInputError(f"Donati LSD files have 3 or 7 columns, got {columns!r}")
        rows = np.stack([v, f, e], axis=1)
        if columns == 7:
            z = np.zeros_like(v)
            rows = np.stack([v, f, e, z, e, z, e], axis=1)
        body = "\n".join(" ".join(f"{x:.10g}" for x in r) for r in rows)
        write_text(path, f"***{comment}\n {v.size} {columns - 1}\n{body}\n")
    else:  # text or csv
        sep = "," if fmt == "csv" else " "
        head = "v,flux,err\n" if fmt == "csv" else f"# {comment}\n# v flux err\n"
        body = "\n".join(sep.join(f"{x:.10g}" for x in r) for r in np.stack([v, f, e], axis=1))
        write_text(path, head + body + "\n")


@dataclasses.dataclass(frozen=True)
class Epoch:
    """One row of an epochs table: time (days, as given) and the systemic velocity (km/s) or None."""

    time: float
    systemic_velocity: float | None = None


_FILE_COLS = ("file", "filename", "file_name", "name", "profile", "path", "fname")
_TIME_COLS = ("time", "t", "bjd", "hjd", "jd", "mjd", "bjd_tdb", "hjd_utc", "date", "julian_date", "jdate")
_VSYS_COLS = ("v_sys", "vsys", "systemic_velocity", "v_rad", "vrad", "vr", "rv", "center_vr", "gamma", "v0")
_MAX_VSYS_KMS = 2000.0  # beyond any star's radial velocity: a value in m/s


def _check_vsys(where, value):
    if not math.isfinite(value):
        raise DopplermapInputError(f"{where}: systemic velocity is {value!r}")
    if abs(value) > _MAX_VSYS_KMS:
        raise DopplermapInputError(f"{where}: systemic velocity {value!r} km/s is beyond any star's "
                                   f"(|v| <= {_MAX_VSYS_KMS:g}): give it in km/s (m/s divided by 1000)")


def _column_roles(path, ln, names):
    low = [n.strip().lower() for n in names]

    def find(choices, role, required):
        hits = [i for i, n in enumerate(low) if n in choices]
        if not hits:
            if required:
                raise DopplermapInputError(f"{path}:{ln}: no {role} column among {names} (name it one of "
                                           f"{', '.join(choices[:6])})")
            return None
        return hits[0]

    return find(_FILE_COLS, "file", True), find(_TIME_COLS, "time", True), find(_VSYS_COLS, "systemic-velocity", False)


def _read_ecsv(path: Path) -> dict[str, Epoch]:
    from astropy import units as u
    from astropy.table import Table

    try:
        tab = Table.read(path, format="ascii.ecsv")
    except Exception as exc:  # astropy raises many types for a malformed ECSV
        raise DopplermapInputError(one_line(f"{path}: not a readable ECSV table ({type(exc).__name__}: {exc})")) from None
    fi, ti, vi = _column_roles(path, "header", tab.colnames)
    names = tab.colnames
    vs = None
    if vi is not None:
        col = tab[names[vi]]
        unit = getattr(col, "unit", None)
        try:
            vs = (np.asarray(col, dtype=float) * (u.Unit(unit) if unit else u.km / u.s)).to_value(u.km / u.s)
        except (u.UnitConversionError, ValueError, TypeError) as exc:
            raise DopplermapInputError(f"{path}: column {names[vi]!r} (unit {unit}) is not a velocity ({exc})") from None
    tcol = tab[names[ti]]
    try:
        times = np.asarray(getattr(tcol, "value", tcol), dtype=float)
    except (ValueError, TypeError):
        raise DopplermapInputError(f"{path}: time column {names[ti]!r} is not numeric") from None
    out: dict[str, Epoch] = {}
    for k in range(len(tab)):
        where = f"{path}: row {k + 1}"
        name = Path(str(tab[names[fi]][k])).name
        t = float(times[k])
        if not math.isfinite(t):
            raise DopplermapInputError(f"{where}: time is {t!r}")
        v = None if vs is None else float(vs[k])
        if v is not None:
            _check_vsys(where, v)
        if name in out:
            raise DopplermapInputError(f"{where}: file {name!r} listed twice")
        out[name] = Epoch(t, v)
    if not out:
        raise DopplermapInputError(f"{path}: no rows")
    return out


@reader("epochs table")
def read_epochs_table(path) -> dict[str, Epoch]:
    """Epochs table: file name, time (days) and optionally the systemic velocity (km/s).

    Text (CSV or whitespace; ``#`` comments; an optional header line whose column names say
    which column is which: ``file``, ``time``/``bjd``/``hjd``/``jd``..., ``v_sys``/``vrad``...,
    other columns ignored) or ECSV (``.ecsv``, read with astropy; a unit on the velocity
    column is converted to km/s). Without a header the columns are ``file, time[, v_sys]``.
    Returns ``{base file name: Epoch}``; times are as given (no time-scale conversion).
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"epochs table not found: {path}")
    if path.name.lower().endswith(".ecsv"):
        return _read_ecsv(path)
    out: dict[str, Epoch] = {}
    roles = None  # (file, time, v_sys) column indices
    n_col = None
    with path.open(newline="") as fh:
        for ln, line in enumerate(fh, start=1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            toks = next(csv.reader([s])) if "," in s else s.split()
            toks = [t.strip() for t in toks]
            if roles is None:
                if len(toks) >= 2 and not _is_number(toks[1]) and not out:
                    roles = _column_roles(path, ln, toks)  # header line
                    n_col = len(toks)
                    continue
                if len(toks) not in (2, 3):
                    raise DopplermapInputError(f"{path}:{ln}: expected 'file, time[, v_sys]' (or a header line "
                                               f"naming the columns), got {len(toks)} columns: {s!r}")
                roles, n_col = (0, 1, 2 if len(toks) == 3 else None), len(toks)
            if len(toks) != n_col:
                raise DopplermapInputError(f"{path}:{ln}: expected {n_col} columns like the first row, got {len(toks)}: {s!r}")
            fi, ti, vi = roles
            name = Path(toks[fi]).name
            if not name:
                raise DopplermapInputError(f"{path}:{ln}: empty file name")
            try:
                t = float(toks[ti])
            except ValueError:
                raise DopplermapInputError(f"{path}:{ln}: time {toks[ti]!r} is not a number") from None
            if not math.isfinite(t):
                raise DopplermapInputError(f"{path}:{ln}: time is {t!r}")
            v = None
            if vi is not None:
                try:
                    v = float(toks[vi])
                except ValueError:
                    raise DopplermapInputError(f"{path}:{ln}: systemic velocity {toks[vi]!r} is not a number") from None
                _check_vsys(f"{path}:{ln}", v)
            if name in out:
                raise DopplermapInputError(f"{path}:{ln}: file {name!r} listed twice")
            out[name] = Epoch(t, v)
    if not out:
        raise DopplermapInputError(f"{path}: no rows")
    return out


def read_times_table(path) -> dict[str, float]:
    """``{base file name: time}`` of an epochs table (see :func:`read_epochs_table`)."""
    return {k: e.time for k, e in read_epochs_table(path).items()}


def times_from_pattern(paths: Sequence, pattern: str) -> np.ndarray:
    """Times (days) parsed from file names with a regex (group ``time``, else group 1)."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise DopplermapInputError(f"time pattern {pattern!r} is not a valid regular expression: {exc}") from None
    if rx.groups < 1:
        raise DopplermapInputError(f"time pattern {pattern!r} needs a group, e.g. 'BJD=(?P<time>[0-9.]+)'")
    out = []
    for p in paths:
        name = Path(p).name
        m = rx.search(name)
        if m is None:
            raise DopplermapInputError(f"time pattern {pattern!r} does not match file name {name!r}")
        tok = m.group("time") if "time" in rx.groupindex else m.group(1)
        try:
            out.append(float(tok))
        except (TypeError, ValueError):
            raise DopplermapInputError(f"time pattern {pattern!r} matched {tok!r} in {name!r}, which is not a number") from None
    return np.asarray(out)


def resample(vels, flux, err, new_vels, source: str = "profile"):
    """Linear interpolation onto ``new_vels`` (km/s) with propagated errors.

    Returns ``(flux, err)`` on ``new_vels``; ``err^2 = (1-w)^2 err_i^2 + w^2 err_(i+1)^2``
    (neighbouring outputs become correlated; that is not tracked).
    """
    v = np.asarray(vels, dtype=float)
    nv = np.asarray(new_vels, dtype=float)
    if nv[0] < v[0] - 1e-9 or nv[-1] > v[-1] + 1e-9:
        raise DopplermapInputError(f"{source}: covers {v[0]:.3f}..{v[-1]:.3f} km/s, cannot resample onto {nv[0]:.3f}..{nv[-1]:.3f} km/s")
    i = np.clip(np.searchsorted(v, nv, side="right") - 1, 0, v.size - 2)
    w = np.clip((nv - v[i]) / (v[i + 1] - v[i]), 0.0, 1.0)
    f = (1 - w) * flux[i] + w * flux[i + 1]
    e = np.sqrt((1 - w) ** 2 * err[i] ** 2 + w**2 * err[i + 1] ** 2)
    return f, e


def _reference_grid(profs) -> int:
    """The file whose velocity grid the others are put on: one of the largest group of files
    that share a step (to 1%), so that most profiles are taken unchanged; between groups of
    equal size the coarser step, since onto a coarser grid the interpolated points stay
    (nearly) independent, while onto a finer one they are correlated and the chi-square
    counts them as independent, weighing that file more."""
    steps = np.array([np.median(np.diff(p.vels)) for p in profs])
    same = np.abs(steps[:, None] / steps[None, :] - 1.0) <= 0.01
    size = same.sum(axis=1)
    best = np.nonzero(size == size.max())[0]
    return int(best[np.argmax(steps[best])])  # the first of the coarsest among the largest groups


def _warn_unlike_grids(profs, ref: int, vels):
    """One DopplermapWarning naming the files whose velocity step or span is unlike the grid
    they are put on (``vels``, from file ``ref``), and what is done with them."""
    if len(profs) < 2:
        return
    steps = np.array([np.median(np.diff(p.vels)) for p in profs])
    spans = np.array([p.vels[-1] - p.vels[0] for p in profs])
    st, sp = float(steps[ref]), float(spans[ref])
    odd = [k for k in range(len(profs)) if not (0.99 <= steps[k] / st <= 1.01) or not (0.5 <= spans[k] / sp <= 2.0)]
    if not odd:
        return
    v = np.asarray(vels, dtype=float)
    listed = "; ".join(f"{profs[k].source} (step {steps[k]:.4g} km/s, span {spans[k]:.4g} km/s)" for k in odd[:3])
    more = f" and {len(odd) - 3} more" if len(odd) > 3 else ""
    coarse = [k for k in odd if steps[k] > 1.01 * st]
    note = (f"; the {len(coarse)} coarser file(s)' resampled points are correlated, so they weigh more than "
            "their information" if coarse else "")
    warn(f"velocity grids differ: {len(odd)} of {len(profs)} files are unlike {profs[ref].source}'s grid (step "
         f"{st:.4g} km/s, span {sp:.4g} km/s), which {len(profs) - len(odd)} of them share: {listed}{more}. "
         f"Every profile is put on that grid where all files overlap ({v.size} points, {v[0]:.4g}..{v[-1]:.4g} km/s "
         f"around the line centre) by linear interpolation{note}: check their units and that they come from the "
         "same LSD set-up")


def _repeats(paths) -> dict:
    """{resolved path: positions} of the files listed more than once."""
    at: dict = {}
    for k, p in enumerate(paths):
        at.setdefault(Path(p).resolve(), []).append(k)
    return {p: ks for p, ks in at.items() if len(ks) > 1}


def _warn_repeated_files(paths):
    twice = _repeats(paths)
    if twice:
        listed = "; ".join(f"{p.name} at positions {', '.join(map(str, ks))}" for p, ks in list(twice.items())[:3])
        warn(f"{len(twice)} profile file(s) listed more than once, each read as one more epoch (it weighs double): "
             f"{listed}; list each file once")


def _systemic(n, systemic_velocity, table_v, table_path):
    """Per-file systemic velocities (n,) km/s from the table (if it has them) or the argument."""
    if systemic_velocity is None:
        sv = np.zeros(n)
    elif np.ndim(systemic_velocity) == 0:
        sv = np.full(n, float(systemic_velocity))
    else:
        sv = np.asarray(systemic_velocity, dtype=float)
        if sv.shape != (n,):
            raise DopplermapInputError(f"systemic_velocity must be one number or one per file ({n}), got shape {sv.shape}")
    for k, v in enumerate(sv):
        _check_vsys(f"systemic_velocity[{k}]", float(v))
    if table_v is None or all(v is None for v in table_v):
        return sv
    tv = np.asarray(table_v, dtype=float)
    if np.any(sv != 0) and not np.allclose(sv, tv):
        warn(f"{table_path}: its per-epoch systemic velocities are used, not the systemic_velocity "
             f"{float(sv[0])!r} km/s given besides: check which one is right")
    return tv


@dataclasses.dataclass(frozen=True, eq=False)
class ProfileReading:
    """How :func:`load_observations` reads and puts profiles on one grid (described there):
    ``fmt``, ``fits_columns`` (:func:`read_lsd`), ``systemic_velocity``, ``velocity_range``,
    ``vels``, ``normalise``."""

    fmt: str = "auto"
    normalise: bool = True
    systemic_velocity: object = None
    velocity_range: object = None
    fits_columns: object = None
    vels: object = None

    def replace(self, **changes) -> ProfileReading:
        return dataclasses.replace(self, **changes)


def load_observations(paths: Sequence, *, times=None, times_table=None, time_pattern: str | None = None,
                      reading: ProfileReading | None = None, **loose):
    """Read profiles into :class:`dopplermap.Observations` on one velocity grid, sorted by time.

    ``reading``: a :class:`ProfileReading`, or its fields as keywords (``normalise=False``).

    Exactly one of ``times`` ((n_epoch,) days), ``times_table`` (path of an epochs table,
    see :func:`read_epochs_table`) or ``time_pattern`` (regex) gives the epochs. Each
    profile is shifted to the star's rest frame, ``u = v - v_sys``, with ``v_sys`` from the
    table's systemic-velocity column if it has one, else ``systemic_velocity`` (km/s; one
    number or one per file; default 0). ``velocity_range`` ``(lo, hi)`` km/s keeps that part
    around the line centre. ``vels`` (rest frame, km/s) defaults to the shifted grid of a file
    of the largest group sharing one step (see the module docstring), restricted to the range
    all files cover and to ``velocity_range``; given, every profile is resampled onto it
    without a warning. Each profile (and its error) is divided by its mean when ``normalise``.
    """
    r = options_of("load_observations", ProfileReading, reading, loose, "reading")
    fmt, normalise, systemic_velocity, velocity_range = r.fmt, r.normalise, r.systemic_velocity, r.velocity_range
    fits_columns, vels = r.fits_columns, r.vels
    paths = [Path(p) for p in paths]
    if not paths:
        raise DopplermapInputError("no profile files given")
    given = sum(x is not None for x in (times, times_table, time_pattern))
    if given != 1:
        raise DopplermapInputError("give exactly one of times, times_table or time_pattern")
    _warn_repeated_files(paths)
    profs = [read_lsd(p, fmt, fits_columns=fits_columns) for p in paths]
    table_v = None
    if times_table is not None:
        table = read_epochs_table(times_table)
        missing = [p.name for p in paths if p.name not in table]
        if missing:
            raise DopplermapInputError(f"{times_table}: no time for {missing[0]!r} ({len(missing)} files missing)")
        t = np.array([table[p.name].time for p in paths])
        table_v = [table[p.name].systemic_velocity for p in paths]
    elif time_pattern is not None:
        t = times_from_pattern(paths, time_pattern)
    else:
        t = np.atleast_1d(np.asarray(times, dtype=float))
        if t.shape != (len(paths),):
            raise DopplermapInputError(f"times must have one entry per file ({len(paths)}), got shape {t.shape}")
    vsys = _systemic(len(paths), systemic_velocity, table_v, times_table)
    ref = _reference_grid(profs)
    shifted = [p.vels - vs for p, vs in zip(profs, vsys, strict=True)]
    if velocity_range is not None:
        if len(velocity_range) != 2 or not velocity_range[0] < velocity_range[1]:
            raise DopplermapInputError(f"velocity_range must be (lo, hi) km/s with lo < hi, got {list(velocity_range)}")
    if vels is None:
        lo = max(u[0] for u in shifted)
        hi = min(u[-1] for u in shifted)
        if velocity_range is not None:
            lo, hi = max(lo, velocity_range[0]), min(hi, velocity_range[1])
        u0 = shifted[ref]
        vels = u0[(u0 >= lo - 1e-9) & (u0 <= hi + 1e-9)]
        if vels.size < 3:
            win = "" if velocity_range is None else f" inside velocity_range {list(velocity_range)}"
            raise DopplermapInputError(f"the files share less than 3 velocities of {profs[ref].source}'s grid{win} "
                                       f"({lo:.3f}..{hi:.3f} km/s around the line centre)")
        _warn_unlike_grids(profs, ref, vels)
    vels = np.asarray(vels, dtype=float)
    flux = np.empty((len(profs), vels.size))
    err = np.empty_like(flux)
    for k, (p, u) in enumerate(zip(profs, shifted, strict=True)):
        if u.size == vels.size and np.allclose(u, vels, rtol=0, atol=1e-9):
            flux[k], err[k] = p.flux, p.err
        else:
            flux[k], err[k] = resample(u, p.flux, p.err, vels, source=p.source)
    order = np.argsort(t, kind="stable")
    dup = np.diff(t[order]) == 0
    if dup.any():
        i = int(np.argmax(dup))
        raise DopplermapInputError(f"files {paths[order[i]].name!r} and {paths[order[i + 1]].name!r} have the same time {t[order[i]]!r}")
    return Observations.create(t[order], vels, flux[order], err[order], source=f"{len(paths)} profile files",
                               normalise=normalise)


def profile_files(cfg) -> list[str]:
    """The profile files a target configuration's ``[data] profiles`` (globs) name, in order."""
    files = []
    for pat in cfg.data.profiles:
        full = str(cfg.path(pat))
        hits = sorted(glob.glob(full)) if glob.has_magic(full) else ([full] if Path(full).is_file() else [])
        if not hits:
            raise DopplermapInputError(f"{cfg.source}: [data] profiles: nothing matches {pat!r} (looked for {full})")
        files.extend(hits)
    twice = _repeats(files)
    if twice:
        first = next(iter(twice))
        raise DopplermapInputError(f"{cfg.source}: [data] profiles: {len(twice)} file(s) are matched more than once "
                                   f"(e.g. {first}): list each file once")
    return files


def load_profiles(cfg):
    """``(Observations, files)`` for a :class:`~dopplermap.config.TargetConfig`'s ``[data]`` and
    ``[star] systemic_velocity`` (normalised by each profile's mean)."""
    d = cfg.data
    files = profile_files(cfg)
    try:
        obs = load_observations(files, times_table=cfg.path(d.times_table) if d.times_table else None,
                                time_pattern=d.time_pattern, fmt=d.format, normalise=True,
                                systemic_velocity=cfg.star.systemic_velocity, velocity_range=d.velocity_range,
                                fits_columns=d.fits_columns)
    except DopplermapInputError as exc:
        if "share less than 3 velocities" in str(exc) and d.velocity_range is not None:
            raise DopplermapInputError(f"{cfg.source}: [data] velocity_range {list(d.velocity_range)}: {exc}") from None
        raise
    return obs, files


@reader("local line-profile table")
def read_local_profile(path):
    """Tabulated local profile: velocity (km/s, increasing), I/Ic [, ...] in the LSD text layout.

    Title, ``#`` comment and count (`` 201 2``) lines as for observed profiles; columns 1 and
    2 are used. Returns a :class:`dopplermap.LocalProfile`; errors name the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"local-profile file not found: {path}")
    try:
        text = path.read_text().splitlines()
    except UnicodeDecodeError as exc:
        raise bad_file(path, "local line-profile table", exc) from None
    rows, lines, _ = _parse_columns(path, text, fmt="auto", min_cols=2, what="velocity, I/Ic")
    arr = np.asarray(rows, dtype=float)
    for i, row in enumerate(arr):
        if not np.all(np.isfinite(row)):
            raise DopplermapInputError(f"{path}:{lines[i]}: NaN or inf value")
        if i and row[0] <= arr[i - 1, 0]:
            raise DopplermapInputError(f"{path}:{lines[i]}: velocities must increase, {row[0]!r} follows {arr[i - 1, 0]!r}")
    if len(rows) < 4:
        raise DopplermapInputError(f"{path}: needs at least 4 rows (velocity, I/Ic), got {len(rows)}")
    _check_grid_units(path, arr[:, 0])
    return tabulated(arr[:, 0], arr[:, 1], name=str(path))
