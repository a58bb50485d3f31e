"""Readers and writers of observed line profiles (LSD profiles) and their epochs.

Formats (``fmt`` argument, or ``"auto"`` from the extension and the first line):

* ``"donati"`` - the common LSD text layout: a comment line starting with ``***``, a line
  ``N_points N_columns``, then ``N_points`` rows. With 3 columns: velocity (km/s), I/Ic,
  error; with more (the spectropolarimetric layout ``v I sigma_I V sigma_V N sigma_N``)
  only ``v``, ``I`` and ``sigma_I`` are used.
* ``"text"`` - whitespace- or comma-separated columns ``v I err [...]``; ``#`` comments
  and one non-numeric header line are allowed.
* ``"fits"`` - a FITS binary table (first table extension) with columns named like
  velocity / flux / error (``v``, ``vel``, ``velocity``; ``i``, ``flux``, ``intensity``;
  ``err``, ``error``, ``sigma``, ``sigma_i``), else its first three columns.

Every error names the file and the line (text) or row (FITS).

Epoch times come from a CSV table (file name, time) or from a regular expression on the
file names with a group named ``time`` (for example ``BJD=(?P<time>[0-9.]+)``). Times are
used as given (BJD or HJD, days); ``t0`` of the star must be on the same scale.

Different velocity grids: :func:`load_observations` resamples every profile onto one grid
(the first file's, or the one given) by linear interpolation, with errors propagated as
``sigma^2 = (1 - w)^2 sigma_i^2 + w^2 sigma_(i+1)^2``. This ignores the correlation that
interpolation introduces between neighbouring resampled points (per-epoch grids are not
kept). Profiles already on the grid (to 1e-9 km/s) are taken unchanged.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import DopplermapInputError, MissingFileError

__all__ = ["LineProfile", "read_lsd", "write_lsd", "read_times_table", "times_from_pattern", "resample",
           "load_observations", "read_local_profile", "FORMATS"]

FORMATS = ("auto", "donati", "text", "fits")
_FITS_EXT = (".fits", ".fit", ".fts", ".fits.gz", ".fit.gz")
_V_NAMES = ("v", "vel", "velocity", "velocities", "rv", "vrad")
_I_NAMES = ("i", "flux", "intensity", "prf", "stokes_i", "i/ic", "ic")
_E_NAMES = ("err", "error", "errs", "sigma", "sigma_i", "sig_i", "ierr", "i_err", "flux_err")


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


def _check_rows(path, rows, lines):
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
    return LineProfile(vels=arr[:, 0].copy(), flux=arr[:, 1].copy(), err=arr[:, 2].copy(), source=str(path))


def _read_donati(path: Path, text: list[str]) -> LineProfile:
    if len(text) < 2:
        raise DopplermapInputError(f"{path}: Donati LSD file needs a '***' comment line and an 'N_points N_columns' line")
    head = _split(text[1])
    if len(head) < 2:
        raise DopplermapInputError(f"{path}:2: expected 'N_points N_columns', got {text[1].strip()!r}")
    try:
        n_pts, n_col = int(head[0]), int(head[1])
    except ValueError:
        raise DopplermapInputError(f"{path}:2: expected two integers 'N_points N_columns', got {text[1].strip()!r}") from None
    if n_pts < 3 or n_col < 3:
        raise DopplermapInputError(f"{path}:2: need N_points >= 3 and N_columns >= 3, got {n_pts} {n_col}")
    rows, lines = [], []
    for ln, line in enumerate(text[2:], start=3):
        if not line.strip():
            continue
        toks = _split(line)
        if len(toks) != n_col:
            raise DopplermapInputError(f"{path}:{ln}: expected {n_col} columns (header line 2), got {len(toks)}")
        if len(rows) == n_pts:
            raise DopplermapInputError(f"{path}:{ln}: more data rows than N_points = {n_pts} (line 2)")
        rows.append([_float(t, f"{path}:{ln}") for t in toks[:3]])
        lines.append(ln)
    if len(rows) != n_pts:
        raise DopplermapInputError(f"{path}:{len(text)}: file ends after {len(rows)} data rows but line 2 says N_points = {n_pts}")
    return _check_rows(path, rows, lines)


def _data_lines(text: list[str], skip=("#",)):
    """``(line number, tokens)`` of the data lines: blank lines, lines starting with one of
    ``skip`` and one leading header line of column names are left out."""
    header_seen = data_seen = False
    for ln, line in enumerate(text, start=1):
        s = line.strip()
        if not s or s.startswith(skip):
            continue
        toks = _split(s)
        if not data_seen and not header_seen:
            try:
                [float(t) for t in toks]
            except ValueError:
                header_seen = True  # one header line of column names
                continue
        data_seen = True
        yield ln, toks


def read_text_columns(path: Path, text: list[str], what: str) -> tuple[list, list]:
    """First three columns of a whitespace/CSV table as floats, and their line numbers.

    Blank and ``#`` lines are skipped, as is one header line of column names; every data
    row needs the first row's column count (>= 3). ``what`` names the columns in errors.
    """
    rows, lines, n_col = [], [], None
    for ln, toks in _data_lines(text):
        if n_col is None:
            n_col = len(toks)
            if n_col < 3:
                raise DopplermapInputError(f"{path}:{ln}: expected at least 3 columns ({what}), got {n_col}")
        if len(toks) != n_col:
            raise DopplermapInputError(f"{path}:{ln}: expected {n_col} columns like the first data row, got {len(toks)}")
        rows.append([_float(t, f"{path}:{ln}") for t in toks[:3]])
        lines.append(ln)
    if not rows:
        raise DopplermapInputError(f"{path}: no data rows")
    return rows, lines


def _read_text(path: Path, text: list[str]) -> LineProfile:
    rows, lines = read_text_columns(path, text, "velocity, intensity, error")
    return _check_rows(path, rows, lines)


def _pick(names, wanted, fallback):
    low = [n.lower() for n in names]
    for w in wanted:
        if w in low:
            return names[low.index(w)]
    return names[fallback]


def read_fits_columns(path: Path, wanted, what: str) -> np.ndarray:
    """(n_row, 3) float columns of the first binary table of a FITS file.

    ``wanted``: three lists of accepted (lower-case) column names, falling back to the
    first, second and third column; ``what`` names the columns for error messages.
    """
    from astropy.io import fits

    try:
        hdul = fits.open(path, memmap=False)
    except OSError as exc:
        raise DopplermapInputError(f"{path}: not a readable FITS file ({exc})") from None
    with hdul:
        tab = next((h for h in hdul if isinstance(h, fits.BinTableHDU)), None)
        if tab is None:
            raise DopplermapInputError(f"{path}: no binary-table extension found")
        names = list(tab.columns.names)
        if len(names) < 3:
            raise DopplermapInputError(f"{path}: table needs 3 columns ({what}), has {names}")
        cols = [_pick(names, w, i) for i, w in enumerate(wanted)]
        try:
            return np.stack([np.asarray(tab.data[c], dtype=float).reshape(-1) for c in cols], axis=1)
        except (ValueError, TypeError) as exc:
            raise DopplermapInputError(f"{path}: columns {cols} are not numeric ({exc})") from None


def _read_fits(path: Path) -> LineProfile:
    arr = read_fits_columns(path, (_V_NAMES, _I_NAMES, _E_NAMES), "velocity, intensity, error")
    # FITS rows are numbered from 1; report them as "row N"
    return _check_rows(f"{path} (table row)", arr, list(range(1, arr.shape[0] + 1)))


def read_lsd(path, fmt: str = "auto") -> LineProfile:
    """Read one profile; see the module docstring for ``fmt``."""
    path = Path(path)
    if fmt not in FORMATS:
        raise DopplermapInputError(f"format must be one of {FORMATS}, got {fmt!r}")
    if not path.is_file():
        raise MissingFileError(f"profile file not found: {path}")
    if fmt == "fits" or (fmt == "auto" and _is_fits(path)):
        return _read_fits(path)
    try:
        text = path.read_text().splitlines()
    except UnicodeDecodeError:
        raise DopplermapInputError(f"{path}: not a text file (for FITS use a .fits name or format 'fits')") from None
    first = next((ln for ln in text if ln.strip()), "")
    if fmt == "donati" or (fmt == "auto" and first.lstrip().startswith("***")):
        if not text or not text[0].lstrip().startswith("***"):
            raise DopplermapInputError(f"{path}:1: Donati LSD files start with a '***' comment line")
        return _read_donati(path, text)
    return _read_text(path, text)


def _atomic_write_text(path: Path, text: str):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_lsd(path, vels, flux, err, fmt: str = "donati", *, comment: str = "LSD profile written by dopplermap",
              columns: int = 3):
    """Write one profile. ``fmt``: ``"donati"`` (``columns`` 3 or 7: the spectropolarimetric
    layout with V and N set to 0 and their errors to sigma_I), ``"text"`` (whitespace),
    ``"csv"`` (with a header) or ``"fits"`` (binary table ``v, flux, err``)."""
    path = Path(path)
    v, f, e = (np.asarray(a, dtype=float) for a in (vels, flux, err))
    if not (v.shape == f.shape == e.shape and v.ndim == 1):
        raise DopplermapInputError(f"vels, flux and err must be 1-D of equal length, got {v.shape}, {f.shape}, {e.shape}")
    if fmt == "fits":
        from astropy.io import fits

        hdu = fits.BinTableHDU.from_columns([fits.Column(name="v", format="D", unit="km/s", array=v),
                                             fits.Column(name="flux", format="D", array=f),
                                             fits.Column(name="err", format="D", array=e)])
        tmp = path.with_name(path.name + ".tmp")
        fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(tmp, overwrite=True)
        os.replace(tmp, path)
        return
    if fmt == "donati":
        if columns not in (3, 7):
            raise DopplermapInputError(f"Donati LSD files have 3 or 7 columns, got {columns!r}")
        rows = np.stack([v, f, e], axis=1)
        if columns == 7:
            z = np.zeros_like(v)
            rows = np.stack([v, f, e, z, e, z, e], axis=1)
        body = "\n".join(" ".join(f"{x:.10g}" for x in r) for r in rows)
        _atomic_write_text(path, f"***{comment}\n{v.size} {columns}\n{body}\n")
    elif fmt in ("text", "csv"):
        sep = "," if fmt == "csv" else " "
        head = "v,flux,err\n" if fmt == "csv" else f"# {comment}\n# v flux err\n"
        body = "\n".join(sep.join(f"{x:.10g}" for x in r) for r in np.stack([v, f, e], axis=1))
        _atomic_write_text(path, head + body + "\n")
    else:
        raise DopplermapInputError(f"write format must be 'donati', 'text', 'csv' or 'fits', got {fmt!r}")


def read_times_table(path) -> dict[str, float]:
    """CSV/whitespace table ``file_name, time`` (days); header line and ``#`` comments allowed.

    Returns ``{base file name: time}``.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"times table not found: {path}")
    out: dict[str, float] = {}
    with path.open(newline="") as fh:
        for ln, line in enumerate(fh, start=1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            toks = next(csv.reader([s])) if "," in s else s.split()
            toks = [t.strip() for t in toks if t.strip()]
            if len(toks) < 2:
                raise DopplermapInputError(f"{path}:{ln}: expected 'file_name, time', got {s!r}")
            try:
                t = float(toks[1])
            except ValueError:
                if not out:  # header line
                    continue
                raise DopplermapInputError(f"{path}:{ln}: time {toks[1]!r} is not a number") from None
            if not math.isfinite(t):
                raise DopplermapInputError(f"{path}:{ln}: time is {t!r}")
            name = Path(toks[0]).name
            if name in out:
                raise DopplermapInputError(f"{path}:{ln}: file {name!r} listed twice")
            out[name] = t
    if not out:
        raise DopplermapInputError(f"{path}: no rows")
    return out


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


def load_observations(paths: Sequence, *, times=None, times_table=None, time_pattern: str | None = None,
                      vels=None, fmt: str = "auto", normalise: bool = True):
    """Read profiles into :class:`dopplermap.Observations` on one velocity grid, sorted by time.

    Exactly one of ``times`` ((n_epoch,) days), ``times_table`` (path) or ``time_pattern``
    (regex) gives the epochs. ``vels`` defaults to the first file's grid restricted to the
    range all files cover. Each profile (and its error) is divided by its mean when
    ``normalise``.
    """
    from ..objective import Observations

    paths = [Path(p) for p in paths]
    if not paths:
        raise DopplermapInputError("no profile files given")
    given = sum(x is not None for x in (times, times_table, time_pattern))
    if given != 1:
        raise DopplermapInputError("give exactly one of times, times_table or time_pattern")
    profs = [read_lsd(p, fmt) for p in paths]
    if times_table is not None:
        table = read_times_table(times_table)
        missing = [p.name for p in paths if p.name not in table]
        if missing:
            raise DopplermapInputError(f"{times_table}: no time for {missing[0]!r} ({len(missing)} files missing)")
        t = np.array([table[p.name] for p in paths])
    elif time_pattern is not None:
        t = times_from_pattern(paths, time_pattern)
    else:
        t = np.atleast_1d(np.asarray(times, dtype=float))
        if t.shape != (len(paths),):
            raise DopplermapInputError(f"times must have one entry per file ({len(paths)}), got shape {t.shape}")
    if vels is None:
        lo = max(p.vels[0] for p in profs)
        hi = min(p.vels[-1] for p in profs)
        v0 = profs[0].vels
        vels = v0[(v0 >= lo - 1e-9) & (v0 <= hi + 1e-9)]
        if vels.size < 3:
            raise DopplermapInputError(f"the files share less than 3 velocities of {profs[0].source}'s grid ({lo:.3f}..{hi:.3f} km/s)")
    vels = np.asarray(vels, dtype=float)
    flux = np.empty((len(profs), vels.size))
    err = np.empty_like(flux)
    for k, p in enumerate(profs):
        if p.vels.size == vels.size and np.allclose(p.vels, vels, rtol=0, atol=1e-9):
            flux[k], err[k] = p.flux, p.err
        else:
            flux[k], err[k] = resample(p.vels, p.flux, p.err, vels, source=p.source)
    order = np.argsort(t, kind="stable")
    dup = np.diff(t[order]) == 0
    if dup.any():
        i = int(np.argmax(dup))
        raise DopplermapInputError(f"files {paths[order[i]].name!r} and {paths[order[i + 1]].name!r} have the same time {t[order[i]]!r}")
    return Observations.create(t[order], vels, flux[order], err[order], source=f"{len(paths)} profile files",
                               normalise=normalise)


def read_local_profile(path):
    """Tabulated local profile: text columns velocity (km/s, increasing), I/Ic [, ...].

    Returns a :class:`dopplermap.LocalProfile`; errors name the file and line.
    """
    from ..profiles import tabulated

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"local-profile file not found: {path}")
    rows, lines = [], []
    for ln, toks in _data_lines(path.read_text().splitlines(), skip=("#", "***")):
        if len(toks) < 2:
            raise DopplermapInputError(f"{path}:{ln}: expected at least 2 columns (velocity, I/Ic), got {len(toks)}")
        row = [_float(t, f"{path}:{ln}") for t in toks[:2]]
        if not all(math.isfinite(x) for x in row):
            raise DopplermapInputError(f"{path}:{ln}: NaN or inf value")
        if rows and row[0] <= rows[-1][0]:
            raise DopplermapInputError(f"{path}:{ln}: velocities must increase, {row[0]!r} follows {rows[-1][0]!r}")
        rows.append(row)
        lines.append(ln)
    if len(rows) < 4:
        raise DopplermapInputError(f"{path}: needs at least 4 rows (velocity, I/Ic), got {len(rows)}")
    arr = np.asarray(rows)
    return tabulated(arr[:, 0], arr[:, 1], name=str(path))
