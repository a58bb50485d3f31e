"""Epoch times: from the scale a user declares to dopplermap's one internal convention.

Internal convention (``docs/conventions.md``): **BJD_TDB as full Julian days, float64**
(e.g. ``2459500.1234``): barycentric (solar-system barycentre) arrival times in the TDB
scale. Every time that enters from a file or a configuration (profile epochs, light-curve
cadences, ``t0``) is converted here, once, with :mod:`astropy.time`; everything after
(phases, geometry, result files) uses the internal times only.

Declared scales (case-insensitive; :func:`parse_time_scale`):

======================  ====================================================  =========
name                    meaning                                               default
======================  ====================================================  =========
``BJD`` / ``BJD_TDB``   barycentric JD                                        TDB
``HJD``                 heliocentric JD                                       UTC
``JD``                  geocentric JD (no light-travel correction applied)    UTC
``MJD``                 geocentric JD - 2400000.5                             UTC
``BMJD``, ``HMJD``      barycentric / heliocentric JD - 2400000.5             TDB / UTC
``BTJD``                TESS: BJD_TDB - 2457000                               TDB
``BKJD``                Kepler/K2: BJD_TDB - 2454833                          TDB
======================  ====================================================  =========

A scale suffix overrides the default (``HJD_TT``, ``BJD_UTC``, ``JD_TDB``: one of TDB, TT,
UTC, TAI, TCB, TCG) and a reduced form adds an offset (``BJD-2450000``, ``HJD-2400000``).

What is converted exactly and what is not:

* the time scale (UTC, TT, TAI, ... to TDB) always, with astropy (leap seconds included:
  TDB - UTC is about 69 s today);
* HJD to BJD: the heliocentre and the barycentre are at most ~2 solar radii apart, a light
  travel time of a few seconds (< 8.3 s).
  With the target's coordinates (``ra``, ``dec``) the difference is removed with
  astropy's ephemeris; without them it stays (documented, no warning: 8 s is 1e-4 of a
  one-day rotation);
* geocentric JD/MJD to BJD needs the light-travel time to the barycentre (up to +-8.5 min):
  applied with ``ra``/``dec``, otherwise a :class:`~dopplermap.errors.DopplermapWarning`
  says how large the error can be.

An unknown scale raises :class:`~dopplermap.errors.DopplermapInputError` naming the field
and the value.
"""

from __future__ import annotations

import dataclasses
import re
import warnings

import numpy as np

from ..errors import DopplermapInputError, warn

__all__ = ["INTERNAL_SCALE", "MISSION_OFFSETS", "TimeScale", "parse_time_scale", "to_internal", "epoch_times",
           "check_time_overlap"]

INTERNAL_SCALE = "BJD_TDB"
#: offsets (days) between full Julian dates and the reduced dates in common use
MISSION_OFFSETS = {2400000.0: "JD-2400000", 2400000.5: "MJD (JD-2400000.5)", 2450000.0: "JD-2450000",
                   2454833.0: "Kepler BKJD (BJD-2454833)", 2457000.0: "TESS BTJD (BJD-2457000)"}

_FRAMES = {"BJD": ("barycentric", "tdb", 0.0), "HJD": ("heliocentric", "utc", 0.0),
           "JD": ("geocentric", "utc", 0.0), "BMJD": ("barycentric", "tdb", 2400000.5),
           "HMJD": ("heliocentric", "utc", 2400000.5), "MJD": ("geocentric", "utc", 2400000.5),
           "BTJD": ("barycentric", "tdb", 2457000.0), "BKJD": ("barycentric", "tdb", 2454833.0)}
_RX = re.compile(r"^(BJD|HJD|JD|BMJD|HMJD|MJD|BTJD|BKJD)(?:_(TDB|TT|UTC|TAI|TCB|TCG))?"
                 r"(?:-(\d+(?:\.\d*)?))?$")
_ALLOWED = ("BJD_TDB (default), BJD, HJD, JD, MJD, BMJD, HMJD, BTJD, BKJD, with an optional scale "
            "suffix (_TDB, _TT, _UTC, _TAI) and an optional reduced form like 'BJD-2450000'")
_MAX_LTT_D = 1.0167 * 499.005 / 86400.0  # light time over the Earth's aphelion distance, days
_UTC_START_JD = 2436934.5  # 1960-01-01: UTC (and astropy's leap-second table) starts here


@dataclasses.dataclass(frozen=True)
class TimeScale:
    """A declared time scale.

    Attributes:
        name: as declared. frame: ``"barycentric"``, ``"heliocentric"`` or ``"geocentric"``.
        scale: astropy time scale of the values (``"tdb"``, ``"utc"``, ...).
        offset: days to add to the values to get full Julian days.
    """

    name: str
    frame: str
    scale: str
    offset: float

    @property
    def is_internal(self) -> bool:
        """True when the values only need ``offset`` added (BJD in TDB)."""
        return self.frame == "barycentric" and self.scale == "tdb"


def parse_time_scale(spec, where: str = "time_scale") -> TimeScale:
    """Parse a declared time scale (see the module docstring); ``where`` names the field in errors."""
    if not isinstance(spec, str):
        raise DopplermapInputError(f"{where}: time scale must be a string like 'BJD_TDB', got {spec!r}")
    key = re.sub(r"\s+", "", spec).upper()
    m = _RX.match(key)
    if m is None:
        raise DopplermapInputError(f"{where}: unknown time scale {spec!r} (allowed: {_ALLOWED})")
    ref, scale, off = m.groups()
    frame, default_scale, base = _FRAMES[ref]
    if ref in ("BTJD", "BKJD") and (scale or off):
        raise DopplermapInputError(f"{where}: {ref} is already BJD_TDB - {base:.0f}; got {spec!r}")
    # 'BJD-2450000' means the values are BJD - 2450000: add the offset back
    offset = base + (float(off) if off else 0.0)
    return TimeScale(name=spec, frame=frame, scale=(scale or default_scale).lower(), offset=offset)


def _coords(ra, dec, where):
    if ra is None and dec is None:
        return None
    if ra is None or dec is None:
        raise DopplermapInputError(f"{where}: give both ra and dec (deg) or neither, got ra={ra!r}, dec={dec!r}")
    if not (np.isfinite(ra) and np.isfinite(dec) and 0.0 <= ra < 360.0 and -90.0 <= dec <= 90.0):
        raise DopplermapInputError(f"{where}: need 0 <= ra < 360 and -90 <= dec <= 90 deg, got ra={ra!r}, dec={dec!r}")
    import astropy.units as u
    from astropy.coordinates import SkyCoord

    return SkyCoord(float(ra) * u.deg, float(dec) * u.deg, frame="icrs")


def to_internal(values, scale="BJD_TDB", *, ra=None, dec=None, where: str = "times", period=None) -> np.ndarray:
    """Convert times declared in ``scale`` to the internal BJD_TDB (full JD, float64).

    Args:
        values: array of times (days in the declared scale). scale: a name accepted by
            :func:`parse_time_scale` or a :class:`TimeScale`.
        ra, dec: target coordinates (deg, ICRS); needed to move heliocentric or geocentric
            times to the barycentre.
        where: the file or field named in errors and warnings.
        period: rotation period (days), only to say in a warning what an uncorrected
            light-travel time means in rotation phase.
    Returns:
        (n,) float64 BJD_TDB.
    """
    ts = scale if isinstance(scale, TimeScale) else parse_time_scale(scale, f"{where}: time_scale")
    v = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(v)):
        raise DopplermapInputError(f"{where}: times contain NaN or inf")
    if _check_future(v, ts, where):
        with warnings.catch_warnings():  # ERFA's "dubious year" says again what the warning said
            warnings.filterwarnings("ignore", message=".*dubious year")
            return _convert(v, ts, ra, dec, where, period)
    return _convert(v, ts, ra, dec, where, period)


def _convert(v, ts, ra, dec, where, period):
    if ts.is_internal:
        out = v + ts.offset
        _check_plausible(out, ts, where)
        return out
    jd = v + ts.offset
    if v.size and float(np.min(jd)) < _UTC_START_JD:
        # not calendar dates: no scale or light-travel conversion can mean anything
        span = f"{np.min(jd):.6g}" if np.min(jd) == np.max(jd) else f"{np.min(jd):.6g}..{np.max(jd):.6g}"
        mjd = _MJD_LO <= float(np.min(v)) and float(np.max(v)) < _MJD_HI
        guess = ("They look like MJD (JD - 2400000.5): declare 'MJD' ('BMJD', 'HMJD')" if mjd else
                 "If they are reduced dates declare the offset (e.g. 'HJD-2450000')")
        warn(f"{where}: times {span} declared {ts.name} lie before 1960, so they are not "
             f"full Julian dates; they are used as given (no {ts.scale.upper()} -> TDB or {ts.frame} -> barycentric "
             f"correction). {guess}; if they are days from an arbitrary zero declare 'BJD_TDB'")
        return jd
    from astropy.time import Time, TimeDelta

    coord = _coords(ra, dec, where)
    t = Time(np.full(v.shape, ts.offset), v, format="jd", scale=ts.scale)
    if ts.frame == "barycentric":
        return np.asarray(t.tdb.jd, dtype=float)
    if coord is None:
        if ts.frame == "geocentric":
            frac = "" if period is None else f" = {_MAX_LTT_D / float(period):.2g} of a rotation"
            warn(f"{where}: times declared {ts.name} are geocentric; without [star] ra and dec the light-travel time "
                 f"to the barycentre (up to +-8.5 min = 0.0059 d{frac}) is not applied: give ra/dec (deg) "
                 "or barycentric times (BJD_TDB)")
        return np.asarray(t.tdb.jd, dtype=float)
    from astropy.constants import c
    from astropy.coordinates import get_body_barycentric

    # light time from the reference point to the barycentre along the line of sight n:
    # BJD - HJD = (r_sun . n) / c, BJD - JD_geo = (r_earth . n) / c (barycentric positions; the
    # Sun moves ~13 m/s, so evaluating at HJD rather than at the geocentric time costs < 1e-4 s;
    # for the Earth the difference HJD/JD - t_geo is absent). The topocentre is < 21 ms away.
    n = coord.cartesian.xyz.value
    body = "sun" if ts.frame == "heliocentric" else "earth"

    def delay(tt):
        return n @ get_body_barycentric(body, tt).xyz.to_value("m") / c.value

    tdb = t.tdb
    return np.asarray((tdb + TimeDelta(_smooth(delay, tdb), format="sec")).jd, dtype=float)


_NODE_STEP_D = 0.25


def _smooth(fn, t):
    """``fn(t)`` (seconds) for many times: evaluated on nodes 6 h apart and interpolated.

    Light-travel times vary on the scale of a month (the Earth about the Earth-Moon
    barycentre) and a year; a cubic spline through nodes 0.25 d apart reproduces them to
    better than a microsecond, and keeps 10^5 light-curve cadences fast.
    """
    jd = t.jd
    lo, hi = float(np.min(jd)), float(np.max(jd))
    n_nodes = max(4, int(np.ceil((hi - lo) / _NODE_STEP_D)) + 1)
    if jd.size <= max(256, n_nodes):
        return np.asarray(fn(t), dtype=float)
    from astropy.time import Time
    from scipy.interpolate import CubicSpline

    nodes = np.linspace(lo, hi, n_nodes)
    return CubicSpline(nodes, np.asarray(fn(Time(nodes, format="jd", scale=t.scale)), dtype=float))(jd)


def epoch_times(times, t0, *, time_scale="BJD_TDB", t0_scale=None, ra=None, dec=None, period=None,
                where: str = "config"):
    """Profile epochs and ``t0`` to the internal BJD_TDB: the problem builder's one call.

    ``t0`` is declared in ``t0_scale`` (None: the same as the times). Returns
    ``(times (n,) float64, t0 float)``.
    """
    times = to_internal(times, time_scale, ra=ra, dec=dec, period=period, where=f"{where}: [data] times ({time_scale})")
    t0_scale = time_scale if t0_scale is None else t0_scale
    t0 = float(to_internal(np.asarray([t0], dtype=float), t0_scale, ra=ra, dec=dec, period=period,
                           where=f"{where}: [star] t0 ({t0_scale})")[0])
    return times, t0


_FUTURE_JD = 2.5e6  # 2132-08-31: later dates are a wrong declared scale, not observations
_MJD_LO, _MJD_HI = 3.0e4, 1.0e5  # MJD of 1941 .. 2132


def _check_future(v, ts, where):
    """Warn when the declared scale puts the times after 2132: full Julian days declared as a
    reduced date (BTJD, BKJD, MJD, 'BJD-2450000') or reduced dates with the wrong offset."""
    if ts.offset == 0.0 or v.size == 0 or float(np.max(v)) + ts.offset <= _FUTURE_JD:
        return False
    lo, hi = float(np.min(v)), float(np.max(v))
    span = f"{lo:.10g}" if lo == hi else f"{lo:.10g}..{hi:.10g}"
    if lo > 2.0e6:
        guess = "full Julian days: declare their scale without an offset ('BJD_TDB', 'HJD', 'JD')"
    elif _MJD_LO <= lo and hi < _MJD_HI:
        guess = "MJD (JD - 2400000.5): declare 'MJD' ('BMJD', 'HMJD')"
    else:
        guess = "reduced dates with another offset: declare the offset they have (e.g. 'BJD-2450000')"
    warn(f"{where}: times {span} declared {ts.name} (JD - {ts.offset:.10g}) would be JD {hi + ts.offset:.8g}, "
         f"after the year 2132; they look like {guess}", stacklevel=3)
    return True


def _check_plausible(bjd, ts, where):
    """Warn when full-JD times look like reduced dates (a forgotten offset)."""
    if ts.offset != 0.0 or bjd.size == 0:
        return
    lo, hi = float(np.min(bjd)), float(np.max(bjd))
    if 1000.0 <= lo and hi < 1.0e6:
        guess = "MJD-like (JD - 2400000 or - 2400000.5)" if lo > 3.0e4 else "a reduced date (e.g. BJD-2450000, BTJD, BKJD)"
        warn(f"{where}: times {lo:.6g}..{hi:.6g} are declared {ts.name} (full Julian days) but look like {guess}: "
             "declare the offset, e.g. time_scale = 'BJD-2450000', 'BTJD' or 'BMJD'")


def check_time_overlap(profile_times, lc_times, *, period=None, where: str = "light curve"):
    """Warn when light-curve and profile epochs (both internal BJD_TDB) do not overlap in time.

    The problem builder calls this with both arrays. Ranges further apart than one day get a
    :class:`~dopplermap.errors.DopplermapWarning`; when the gap is explained by one of the
    usual reduced-date offsets (``MISSION_OFFSETS``) the warning names it, since then one of
    the two time scales is declared wrongly. Returns the message (None when they overlap).
    """
    p = np.asarray(profile_times, dtype=float)
    lc = np.asarray(lc_times, dtype=float)
    if p.size == 0 or lc.size == 0:
        return None
    p0, p1, l0, l1 = float(p.min()), float(p.max()), float(lc.min()), float(lc.max())

    def gap(shift):
        return max(l0 + shift - p1, p0 - (l1 + shift), 0.0)

    g = gap(0.0)
    if g <= 1.0:
        return None
    tol = max(60.0, (p1 - p0) + (l1 - l0))
    rng = f"light curve {l0:.6f}..{l1:.6f}, profiles {p0:.6f}..{p1:.6f} (BJD_TDB as converted)"
    need = 0.5 * (p0 + p1) - 0.5 * (l0 + l1)  # shift that would centre the light curve on the profiles
    fits = [(abs(need - shift), off, shift) for off in MISSION_OFFSETS for shift in (off, -off) if gap(shift) <= tol]
    if fits:
        _, off, shift = min(fits)
        which = "light curve" if shift > 0 else "profiles"
        msg = (f"{where}: {rng} differ by about {off:.10g} d, the offset of {MISSION_OFFSETS[off]}: the {which} "
               "times look reduced; declare their time scale (e.g. lightcurve_time_scale / time_scale = 'BTJD', "
               "'BKJD', 'BJD-2450000', 'MJD')")
        warn(msg, stacklevel=3)
        return msg
    rot = "" if period is None else f" = {g / float(period):.4g} rotations"
    msg = (f"{where}: {rng} do not overlap: gap {g:.6g} d{rot}. Spots evolve and phases extrapolate over the gap; "
           "check that both are in the same time scale and belong together")
    warn(msg, stacklevel=3)
    return msg
