"""Units at the Python API: astropy Quantities and Times in, documented plain units inside.

Every public entry point that takes a velocity, wavelength, angle, temperature or time
passes it through one of these helpers. Plain numbers (and arrays) keep the documented
units (km/s, nm, deg, K, days) and pass unchanged; an astropy ``Quantity`` is converted
(m/s to km/s, Angstrom to nm, rad to deg, ...); an incompatible unit raises
:class:`~dopplermap.errors.DopplermapInputError` naming the argument, the unit expected and
the unit received. An ``astropy.time.Time`` epoch becomes BJD_TDB in full Julian days, the
internal convention (``docs/conventions.md``): its scale is converted to TDB and it is
taken as a barycentric time (astropy's ``Time`` has no notion of where a time was
measured; correct geocentric times first, e.g. with ``Time.light_travel_time``).

astropy is never imported here: a value can only be a Quantity or a Time if astropy is
already loaded, so the checks cost nothing for plain numbers.
"""

from __future__ import annotations

import importlib
import sys

import numpy as np

from .errors import DopplermapInputError

__all__ = ["to_unit", "to_days", "to_epoch"]


def _astropy(name):
    """The astropy module ``name`` if it is loaded (or being loaded), else None.

    ``sys.modules`` alone is not enough: a background thread (``prefetch_writers``) may be
    half-way through importing astropy; importing it here waits for that import to finish."""
    if name not in sys.modules:
        return None
    return importlib.import_module(name)


def _class(module: str, name: str):
    """``module.name`` if that module is imported; None otherwise, and while another thread
    is still importing it (the result writers' prefetch): nothing can be an instance yet."""
    return getattr(_astropy(module), name, None)


def _is_quantity(x) -> bool:
    q = _class("astropy.units", "Quantity")
    return q is not None and isinstance(x, q)


def _is_time(x) -> bool:
    t, td = _class("astropy.time", "Time"), _class("astropy.time", "TimeDelta")
    return t is not None and isinstance(x, t) and not (td is not None and isinstance(x, td))


def _is_timedelta(x) -> bool:
    td = _class("astropy.time", "TimeDelta")
    return td is not None and isinstance(x, td)


def _convert(x, unit: str, name: str, equivalencies=()):
    u = _astropy("astropy.units")
    try:
        return x.to_value(unit, equivalencies=list(equivalencies))
    except u.UnitConversionError:
        raise DopplermapInputError(f"{name} must be in units convertible to {unit}, got a Quantity in "
                                   f"{x.unit.to_string() or 'dimensionless'}") from None


def to_unit(x, unit: str, name: str, *, kind: str | None = None):
    """``x`` in ``unit`` (a float or an ndarray); plain numbers pass unchanged.

    ``kind`` selects astropy equivalencies: ``"spectral"`` (wavelength from frequency or
    energy), ``"temperature"`` (K from deg_C). A ``Time`` where a plain quantity is
    expected is an error.
    """
    if _is_time(x):
        raise DopplermapInputError(f"{name} must be a number or a Quantity in {unit}, got an astropy Time")
    if _is_timedelta(x):
        x = x.to("d")
    if not _is_quantity(x):
        return x
    eq = ()
    if kind is not None:
        u = _astropy("astropy.units")
        eq = {"spectral": u.spectral, "temperature": u.temperature}[kind]()
    v = _convert(x, unit, name, eq)
    return float(v) if np.ndim(v) == 0 else np.asarray(v, dtype=float)


def to_days(x, name: str):
    """A duration (period) in days: number, time Quantity or ``TimeDelta``."""
    return to_unit(x, "d", name)


def to_epoch(x, name: str):
    """An epoch (or array of epochs) in the internal BJD_TDB, full Julian days.

    ``Time``: its scale converted to TDB, value as JD. A time ``Quantity``: days in the
    internal convention. Plain numbers pass unchanged (already BJD_TDB by contract).
    """
    if _is_time(x):
        jd = x.tdb.jd
        return float(jd) if np.ndim(jd) == 0 else np.asarray(jd, dtype=float)
    if _is_timedelta(x):
        raise DopplermapInputError(f"{name} must be an epoch (a Time or days in BJD_TDB), got a TimeDelta (a duration)")
    return to_unit(x, "d", name)
