"""Cadence quality flags of TESS and Kepler/K2 light curves, and the masks observers apply.

Each cadence of a mission light curve carries a QUALITY word (Kepler/K2: ``SAP_QUALITY``)
whose bits say what happened during it. The bits are the archives':

* TESS: the TESS Science Data Products Description Document (EXP-TESS-ARC-ICD-0014),
  table "Cadence quality flags" (bits 1-16);
* Kepler and K2: the Kepler Archive Manual (KDMC-10008), table 2.3 "QUALITY flags"
  (bits 1-21; bit 10 is unused).

A mask names the bits that drop a cadence (``QUALITY & mask != 0``). The presets are the
community's (lightkurve's ``TessQualityFlags``/``KeplerQualityFlags`` define them so):

* ``"none"``: nothing is dropped for its flags;
* ``"default"``: cadences the pipelines mark as unusable (the spacecraft not in fine
  point, momentum dumps, manual excludes, ...); flags that mark a cadence whose flux is
  still good (a corrected discontinuity, a cosmic ray removed from the aperture, scattered
  light, the planet-search exclusions) keep it;
* ``"hard"``: ``default`` plus the flags that mark flux which may be affected (cosmic rays,
  scattered light, sensitivity dropouts, possible thruster firings): it removes good data
  too;
* ``"hardest"``: every defined bit.

An integer is a mask of its own (``0`` is ``"none"``). The presets need the mission, read
from the file's ``TELESCOP``/``MISSION`` keywords (K2 flies the Kepler flags).
"""

from __future__ import annotations

import numbers

import numpy as np

from ..choices import QUALITY_BITMASKS
from ..errors import DopplermapInputError

__all__ = ["TESS_FLAGS", "KEPLER_FLAGS", "PRESETS", "mission_flags", "check_bitmask", "flag_name", "resolve_bitmask",
           "apply_bitmask"]

# bit value -> name; the manuals' wording, shortened
TESS_FLAGS = {
    1: "Attitude tweak",
    2: "Safe mode",
    4: "Coarse point",  # spacecraft in coarse point
    8: "Earth point",  # spacecraft in Earth point (data downlink)
    16: "Argabrightening",  # a transient brightening of the whole CCD
    32: "Desaturation event",  # reaction-wheel momentum dump
    64: "Cosmic ray in aperture",  # a cosmic ray in an optimal-aperture pixel (corrected)
    128: "Manual exclude",  # an anomaly: excluded by hand
    256: "Discontinuity corrected",  # between this cadence and the next
    512: "Impulsive outlier",  # removed before cotrending
    1024: "Cosmic ray in collateral data",
    2048: "Straylight",  # Earth or Moon in the camera's field (set by inspection)
    4096: "Scattered light",  # background above threshold (set by the pipeline)
    8192: "Planet search exclude",
    16384: "Bad calibration exclude",
    32768: "Insufficient targets for error correction",
}
KEPLER_FLAGS = {
    1: "Attitude tweak",
    2: "Safe mode",
    4: "Coarse point",
    8: "Earth point",
    16: "Zero crossing",  # a reaction wheel through zero speed
    32: "Desaturation event",
    64: "Argabrightening",
    128: "Cosmic ray in aperture",
    256: "Manual exclude",
    # 512: unused
    1024: "Sudden sensitivity dropout",
    2048: "Impulsive outlier",
    4096: "Argabrightening on CCD",
    8192: "Cosmic ray in collateral data",
    16384: "Detector anomaly",
    32768: "No fine point",
    65536: "No data",
    131072: "Rolling band in aperture",
    262144: "Rolling band in mask",
    524288: "Possible thruster firing",
    1048576: "Thruster firing",
}


def _bits(table, *names):
    by_name = {v: k for k, v in table.items()}
    return sum(by_name[n] for n in names)


_TESS_DEFAULT = ("Attitude tweak", "Safe mode", "Coarse point", "Earth point", "Argabrightening", "Desaturation event",
                 "Manual exclude", "Impulsive outlier", "Bad calibration exclude")
_KEPLER_DEFAULT = ("Attitude tweak", "Safe mode", "Coarse point", "Earth point", "Desaturation event",
                   "Manual exclude", "Detector anomaly", "No data", "Thruster firing")
#: mission -> preset -> mask
PRESETS = {
    "TESS": {
        "none": 0,
        "default": _bits(TESS_FLAGS, *_TESS_DEFAULT),
        "hard": _bits(TESS_FLAGS, *_TESS_DEFAULT, "Cosmic ray in aperture", "Cosmic ray in collateral data",
                      "Straylight", "Scattered light"),
        "hardest": sum(TESS_FLAGS),
    },
    "Kepler": {
        "none": 0,
        "default": _bits(KEPLER_FLAGS, *_KEPLER_DEFAULT),
        "hard": _bits(KEPLER_FLAGS, *_KEPLER_DEFAULT, "Sudden sensitivity dropout", "Cosmic ray in aperture",
                      "Cosmic ray in collateral data", "Possible thruster firing"),
        "hardest": sum(KEPLER_FLAGS),
    },
}
_TABLES = {"TESS": TESS_FLAGS, "Kepler": KEPLER_FLAGS}


def mission_flags(*values) -> str | None:
    """The flag table (``"TESS"``, ``"Kepler"``) of the first ``TELESCOP``/``MISSION`` value
    that names a mission (K2 is Kepler's), or None."""
    for v in values:
        s = str(v or "").strip().upper()
        if s == "TESS":
            return "TESS"
        if s in ("KEPLER", "K2"):
            return "Kepler"
    return None


def check_bitmask(spec, where: str):
    """``spec`` if it is a preset name or an integer >= 0; else one line naming ``where``."""
    if isinstance(spec, bool) or not isinstance(spec, (str, numbers.Integral)) or (
            isinstance(spec, str) and spec not in QUALITY_BITMASKS):
        raise DopplermapInputError(f"{where} must be one of {', '.join(map(repr, QUALITY_BITMASKS))}, got {spec!r} "
                                   "(or an integer bit mask >= 0)")
    if not isinstance(spec, str) and spec < 0:
        raise DopplermapInputError(f"{where} must be >= 0 as an integer bit mask, got {spec!r}")
    return spec


def resolve_bitmask(spec, mission: str | None, where: str) -> int:
    """The integer mask of ``spec`` for ``mission`` (a preset needs a mission unless it is
    ``"none"``); ``where`` names the file or object in errors."""
    check_bitmask(spec, f"{where}: quality_bitmask")
    if not isinstance(spec, str):
        return int(spec)
    if spec == "none":
        return 0
    if mission is None:
        raise DopplermapInputError(f"{where}: quality_bitmask {spec!r} needs the mission's flag definitions, and the "
                                   "file names no mission (TELESCOP/MISSION 'TESS', 'Kepler' or 'K2'): give an integer "
                                   "bit mask, or 'none'")
    return PRESETS[mission][spec]


def flag_name(bit: int, mission: str | None) -> str:
    name = _TABLES.get(mission, {}).get(bit)
    return name if name is not None else f"bit {bit.bit_length()} ({bit})"


def apply_bitmask(quality, mask: int, mission: str | None):
    """``(dropped, by_flag)``: the cadences ``quality & mask != 0`` and, for each flag of the
    mask set in a dropped cadence, how many dropped cadences carry it (a cadence with two such
    flags counts under both), in bit order."""
    q = np.asarray(quality).astype(np.int64, copy=False)
    dropped = (q & int(mask)) != 0
    by_flag = {}
    bit = 1
    while bit <= mask:
        if mask & bit:
            n = int(np.count_nonzero(q[dropped] & bit))
            if n:
                by_flag[flag_name(bit, mission)] = n
        bit <<= 1
    return dropped, by_flag
