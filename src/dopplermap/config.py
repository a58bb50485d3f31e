"""Target configuration: one TOML file that describes the data, the star and the inversion.

``load_config(path)`` parses the file with :mod:`tomllib` into frozen dataclasses. Unknown
keys, wrong types, missing required keys and out-of-range values raise ``ValueError``
naming the key (``"target.toml: [line] fwhm must be a number, got 'nine'"``). Relative
paths are resolved against the folder of the TOML file. ``TEMPLATE`` is the commented
template ``dopplermap init`` writes; :func:`run_target` (in
:mod:`dopplermap.app.target`) runs a configuration.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from pathlib import Path

from .choices import (
    ATMOSPHERE_PASSBANDS,
    BIN_UNITS,
    CUBE_DTYPES,
    EW_METHODS,
    EW_STAGES,
    EW_UNITS,
    GRAVITY_LAWS,
    GRID_KINDS,
    LIGHTCURVE_FORMATS,
    LIGHTCURVE_UNITS,
    LINE_PROFILES,
    PASSBANDS,
    PROFILE_FORMATS,
    REGULARISERS,
    RV_SHIFTS,
    SOLVER_CHOICES,
    SPOT_COMPONENTS,
    STAR_SHAPES,
    SYNTHESIS_METHODS,
    TIME_COUPLINGS,
    UNCERTAINTY_METHODS,
    check,
    check_error_scale,
    did_you_mean,
)
from .constants import MAX_SUBDIVIDE
from .errors import DopplermapInputError, MissingFileError, bad_file, warn
from .io.quality import check_bitmask
from .io.times import parse_time_scale
from .limb_darkening import LimbDarkening

__all__ = ["DataConfig", "StarConfig", "TemperatureConfig", "LineConfig", "LightCurveConfig", "LineSetConfig",
           "LightCurveSetConfig",
           "GravityConfig", "GridConfig", "InversionConfig", "TargetConfig", "load_config", "parse_config",
           "TEMPLATE"]


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Observed data. Paths are relative to the TOML file."""

    profiles: tuple[str, ...] = ()  # none: light curves alone (a longitude / contrast map)
    format: str = "auto"
    times_table: str | None = None
    time_pattern: str | None = None
    time_scale: str = "BJD_TDB"
    velocity_range: tuple[float, ...] | None = None
    lightcurve: str | tuple[str, ...] | None = None  # several files: sectors of one band, a free scale each
    lightcurve_format: str = "auto"
    fits_columns: tuple[str, ...] | None = None
    lightcurve_column: str = "auto"
    lightcurve_unit: str = "flux"
    lightcurve_time_scale: str | None = None
    lightcurve_bin: float | str | None = None  # a width, or "auto" (dopplermap.lightcurve.auto_bin)
    lightcurve_bin_unit: str = "d"
    error_scale: float | str | None = None  # a factor on the errors, or one of ERROR_SCALES (dopplermap.errorscale)
    lightcurve_quality_bitmask: str | int | None = None  # None: "default" (dopplermap.io.quality)


@dataclasses.dataclass(frozen=True)
class StarConfig:
    """``[star]``: inclination (deg), period (d), vsini (km/s) or radius (R_sun), t0 (in
    ``t0_scale`` or ``[data] time_scale``), domega (rad/d), mass (M_sun), systemic_velocity
    (km/s), ra and dec (deg, ICRS) and the star's name (figures, report, FITS OBJECT); the
    template (:data:`TEMPLATE`) comments each key."""

    inclination: float
    period: float
    vsini: float | None = None
    radius: float | None = None
    t0: float = 0.0
    domega: float = 0.0
    mass: float | None = None
    logg: float | None = None
    systemic_velocity: float = 0.0
    t0_scale: str | None = None
    ra: float | None = None
    dec: float | None = None
    name: str | None = None  # titles the figures and the report; FITS keyword OBJECT
    shape: str = "sphere"
    mass_ratio: float = 0.0
    roche_fill: float | None = None
    synchronicity: float = 1.0
    separation: float | None = None  # R_sun: sets roche_fill from the star's radius


@dataclasses.dataclass(frozen=True)
class TemperatureConfig:
    """``[temperatures]``: photosphere, cool- and hot-spot temperatures (K); with ``[line]
    wavelength_nm`` they give the Planck continuum intensity ratios."""

    phot: float
    cool: float
    hot: float


@dataclasses.dataclass(frozen=True)
class LineConfig:
    """``[line]``: the local line of each component (profile, depths, widths or tabulated
    files, instrumental resolving power, macroturbulence) and its wavelength (nm)."""

    wavelength_nm: float
    profile: str = "gaussian"
    depth: tuple[float, ...] = (0.5, 0.5, 0.5)
    fwhm: float = 9.0
    fwhm_lorentz: float = 0.0
    files: tuple[str, ...] | None = None
    resolving_power: float | None = None
    macroturbulence: float = 0.0
    radial_fraction: float = 0.5
    equivalent_width: float | tuple[float, ...] | None = None  # one, or one per component (phot, cool, hot)
    ew_method: str = "integrated"
    ew_unit: str = "km/s"
    ew_stage: str = "intrinsic"
    limb_darkening: str = "linear"
    ld_phot: tuple[float, ...] = (0.6,)
    ld_cool: tuple[float, ...] = (0.6,)
    ld_hot: tuple[float, ...] = (0.6,)
    intensity: tuple[float, ...] | None = None


@dataclasses.dataclass(frozen=True)
class LightCurveConfig:
    """``[lightcurve]``: the band of a light curve fitted jointly: wavelength (nm), limb
    darkening of each component, continuum intensities and whether to fit a dilution."""

    wavelength_nm: float = 550.0
    limb_darkening: str = "linear"
    passband: str | None = None
    ld_phot: tuple[float, ...] = (0.6,)
    ld_cool: tuple[float, ...] = (0.6,)
    ld_hot: tuple[float, ...] = (0.6,)
    intensity: tuple[float, ...] | None = None
    fit_dilution: bool = False


@dataclasses.dataclass(frozen=True)
class LineSetConfig:
    """One ``[[lines]]`` table: a line data set (an instrument, an LSD mask) with its own
    ``data`` (as ``[data]``, without the light-curve keys) and ``line`` (as ``[line]``)
    sub-tables, a ``name`` (results, figures), a ``weight`` in the loss and an
    ``offset_sigma`` (the prior on this set's offsets; None: ``[inversion] offset_sigma``)."""

    data: DataConfig
    line: LineConfig
    name: str = ""
    weight: float = 1.0
    offset_sigma: float | None = None


@dataclasses.dataclass(frozen=True)
class LightCurveSetConfig:
    """One ``[[lightcurves]]`` table: a light curve in one band. ``file`` and the reading keys
    are ``[data]``'s ``lightcurve*`` keys without the prefix; the band keys are ``[lightcurve]``'s."""

    file: str | tuple[str, ...]
    name: str = ""
    weight: float = 1.0
    format: str = "auto"
    column: str = "auto"
    unit: str = "flux"
    time_scale: str | None = None
    bin: float | str | None = None
    bin_unit: str = "d"
    quality_bitmask: str | int | None = None
    wavelength_nm: float = 550.0
    limb_darkening: str = "linear"
    passband: str | None = None
    ld_phot: tuple[float, ...] = (0.6,)
    ld_cool: tuple[float, ...] = (0.6,)
    ld_hot: tuple[float, ...] = (0.6,)
    intensity: tuple[float, ...] | None = None
    fit_dilution: bool = False


@dataclasses.dataclass(frozen=True)
class GravityConfig:
    """``[gravity_darkening]``: von Zeipel gravity darkening on a Roche surface (needs
    ``[star] mass``); ``beta`` the exponent."""

    enabled: bool = False
    beta: float = 0.25
    law: str = "von_zeipel"


@dataclasses.dataclass(frozen=True)
class GridConfig:
    """``[grid]``: the surface grid, ``kind`` (latitude bands or HEALPix) and its size;
    ``subdivide``: each cell's line profiles integrated over ``subdivide x subdivide`` sub-cells
    (:func:`dopplermap.precompute`)."""

    kind: str = "bands"
    n_cell: int = 2500
    nside: int | None = None
    subdivide: int = 1


@dataclasses.dataclass(frozen=True)
class InversionConfig:
    """``[inversion]``: regulariser and lambda, weights of the line and light-curve terms,
    which nuisances and spot components to fit, tolerance, iteration cap, synthesis method,
    rv shift, solver and the offset prior (the :class:`~dopplermap.problem.Settings` of a run)."""

    regulariser: str = "mem"
    lmbd: float = 1.0
    line_weight: float = 1.0
    lc_weight: float = 1.0
    fit_rv: bool = True
    fit_amp: bool = True
    tol: float = 1e-5
    maxiter: int = 1000
    method: str = "auto"
    rv_shift: str = "interpolate"
    solver: str = "auto"
    fit_components: tuple[str, ...] = SPOT_COMPONENTS
    offset_sigma: float | None = None  # Gaussian prior on the per-epoch offsets (dopplermap.objective)
    cube_dtype: str = "auto"  # the dense cube a solve iterates on (dopplermap.problem.Problem.cube_dtype)


@dataclasses.dataclass(frozen=True)
class MapConfig:
    """``[map]``: one map per time window (:mod:`dopplermap.windows`); at most one of
    ``windows`` (that many windows of equal length), ``window_rotations`` (rotations per
    window), ``window_edges`` (edges in rotation cycles since t0) and ``window_gap`` (a
    window between gaps longer than this many days). ``lmbd_time``: the weight of the
    coupling of neighbouring windows' maps; ``time_coupling``: its kind."""

    windows: int | None = None
    window_rotations: float | None = None
    window_edges: tuple[float, ...] = ()
    window_gap: float | None = None
    lmbd_time: float = 0.0
    time_coupling: str = "quadratic"

    @property
    def windowed(self) -> bool:
        return self.windows is not None or self.window_rotations is not None or bool(self.window_edges) \
            or self.window_gap is not None


@dataclasses.dataclass(frozen=True)
class UncertaintyConfig:
    """``[uncertainty]``: the uncertainty maps to compute (``methods`` from
    :data:`dopplermap.choices.UNCERTAINTY_METHODS`), bootstrap size and seed."""

    methods: tuple[str, ...] = ()
    n_boot: int = 20
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class TargetConfig:
    """A parsed target file. One line data set: ``data`` and ``line`` (``[data]``, ``[line]``);
    several: ``lines`` (``[[lines]]``) with ``data`` and ``line`` None. Light curves:
    ``lightcurves`` (``[[lightcurves]]``, one per band); :func:`parse_config` maps the old
    spelling (``[data] lightcurve`` keys with ``[lightcurve]``) to one such table, so a parsed
    configuration never holds a ``[data] lightcurve``."""

    data: DataConfig | None
    star: StarConfig
    temperatures: TemperatureConfig
    line: LineConfig | None
    lightcurve: LightCurveConfig = LightCurveConfig()
    gravity_darkening: GravityConfig = GravityConfig()
    grid: GridConfig = GridConfig()
    inversion: InversionConfig = InversionConfig()
    uncertainty: UncertaintyConfig = UncertaintyConfig()
    map: MapConfig = MapConfig()
    lines: tuple[LineSetConfig, ...] = ()
    lightcurves: tuple[LightCurveSetConfig, ...] = ()
    base_dir: str = "."
    source: str = "<config>"

    @property
    def photometry_only(self) -> bool:
        """Whether the target has light curves and no line profiles (no ``[[lines]]``, no
        ``[data] profiles``)."""
        return not self.lines and (self.data is None or not self.data.profiles)

    def line_sets(self) -> list[LineSetConfig]:
        """Every line data set: the ``[[lines]]`` tables, or ``[data]`` with ``[line]`` (none
        for light curves alone)."""
        if self.photometry_only:
            return []
        return list(self.lines) if self.lines else [LineSetConfig(self.data, self.line, "lines", 1.0)]

    def path(self, rel: str) -> Path:
        """A data path resolved against the folder of the TOML file."""
        p = Path(rel).expanduser()
        return p if p.is_absolute() else Path(self.base_dir) / p


_SECTIONS = {f.name: f for f in dataclasses.fields(TargetConfig) if f.name not in ("base_dir", "source")}
_ARRAYS = ("lines", "lightcurves")  # arrays of tables, parsed by _line_sets / _lightcurve_sets
_OPTIONAL_WITH_LINES = ("data", "line")  # absent when [[lines]] are given
_SECTION_TYPES = {k: next(a for a in typing.get_args(t) if a is not type(None)) if typing.get_args(t) else t
                  for k, t in typing.get_type_hints(TargetConfig).items()}  # DataConfig | None -> DataConfig


def _type_name(tp) -> str:
    if typing.get_origin(tp) is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0]).split(' ', 1)[-1]}s"
    return {float: "a number", int: "an integer", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _coerce(value, tp, where: str):
    """Check ``value`` against annotation ``tp``; return the converted value."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if str in args and float in args:  # a number or a name: _validate checks it, naming both
            return value
        for a in args[:-1]:  # several types (``str | int``): the first that takes the value
            try:
                return _coerce(value, a, where)
            except DopplermapInputError:
                pass
        try:
            return _coerce(value, args[-1], where)
        except DopplermapInputError:
            if len(args) == 1:
                raise
        raise DopplermapInputError(f"{where} must be {' or '.join(_type_name(a) for a in args)}, got {value!r}")
    if origin is tuple:
        (inner, _ellipsis) = typing.get_args(tp)
        if not isinstance(value, list):
            raise DopplermapInputError(f"{where} must be a list of {_type_name(inner)}s, got {value!r}")
        return tuple(_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise DopplermapInputError(f"{where} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise DopplermapInputError(f"{where} must be finite, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise DopplermapInputError(f"{where} must be an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise DopplermapInputError(f"{where} must be true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise DopplermapInputError(f"{where} must be a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config annotation {tp!r}")  # pragma: no cover - programming error


def _unknown(where: str, what: str, name: str, allowed) -> DopplermapInputError:
    """One line for an unknown key or section, with the nearest allowed spelling where one is close
    (a typo such as ``wavelenght_nm``)."""
    allowed = list(allowed)
    shown = (lambda k: f"[{k}]") if what == "section" else repr
    return DopplermapInputError(f"{where}: unknown {what} {shown(name)}{did_you_mean(name, allowed, shown)} "
                                f"(allowed: {', '.join(allowed)})")


def _build(cls, table, where: str):
    if not isinstance(table, dict):
        raise DopplermapInputError(f"{where} must be a table, got {table!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise _unknown(where, "key", unknown[0], fields)
    kwargs = {}
    for name, f in fields.items():
        if name in table:
            kwargs[name] = _coerce(table[name], hints[name], f"{where} {name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise DopplermapInputError(f"{where}: missing required key {name!r}")
    return cls(**kwargs)


def _positive(where, value, allow_zero=False):
    ok = value >= 0 if allow_zero else value > 0
    if not ok:
        raise DopplermapInputError(f"{where} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def _check_ld(where, law, coeffs):
    try:
        LimbDarkening(law, tuple(coeffs))
    except ValueError as exc:
        raise DopplermapInputError(f"{where}: {exc}") from None


def _validate_data(s: str, d: DataConfig, sec: str = "[data]"):
    if not d.profiles:
        raise DopplermapInputError(f"{s}: {sec} profiles must list at least one file or glob pattern")
    _validate_profile_keys(s, d, sec)


def _validate_profile_keys(s: str, d: DataConfig, sec: str):
    check(d.format, PROFILE_FORMATS, f"{s}: {sec} format")
    if (d.times_table is None) == (d.time_pattern is None):
        raise DopplermapInputError(f"{s}: {sec} give exactly one of times_table or time_pattern")
    parse_time_scale(d.time_scale, f"{s}: {sec} time_scale")
    if d.velocity_range is not None and (len(d.velocity_range) != 2 or d.velocity_range[0] >= d.velocity_range[1]):
        raise DopplermapInputError(f"{s}: {sec} velocity_range must be [min, max] with min < max, got {list(d.velocity_range)}")
    if d.error_scale is not None:
        check_error_scale(d.error_scale, f"{s}: {sec} error_scale")
    if d.fits_columns is not None and (len(d.fits_columns) != 3 or len(set(d.fits_columns)) != 3):
        raise DopplermapInputError(f"{s}: {sec} fits_columns must name 3 different columns (velocity, intensity, error), "
                                   f"got {list(d.fits_columns)}")


def _validate_line(s: str, ln: LineConfig, sec: str = "[line]"):
    _positive(f"{s}: {sec} wavelength_nm", ln.wavelength_nm)
    check(ln.profile, LINE_PROFILES, f"{s}: {sec} profile")
    if ln.profile == "tabulated":
        if ln.files is None or len(ln.files) != 3:
            raise DopplermapInputError(f"{s}: {sec} files must list 3 tabulated profiles (phot, cool, hot) for profile = 'tabulated'")
    else:
        if len(ln.depth) != 3 or not all(0 <= x < 1 for x in ln.depth):
            raise DopplermapInputError(f"{s}: {sec} depth must be 3 values in [0, 1) (phot, cool, hot), got {list(ln.depth)}")
        _positive(f"{s}: {sec} fwhm", ln.fwhm)
        _positive(f"{s}: {sec} fwhm_lorentz", ln.fwhm_lorentz, allow_zero=True)
    if ln.resolving_power is not None:
        _positive(f"{s}: {sec} resolving_power", ln.resolving_power)
    _positive(f"{s}: {sec} macroturbulence", ln.macroturbulence, allow_zero=True)
    if not 0 <= ln.radial_fraction <= 1:
        raise DopplermapInputError(f"{s}: {sec} radial_fraction must be in [0, 1], got {ln.radial_fraction!r}")
    if ln.equivalent_width is not None:
        ews = ln.equivalent_width if isinstance(ln.equivalent_width, tuple) else (ln.equivalent_width,)
        if len(ews) not in (1, 3):
            raise DopplermapInputError(f"{s}: {sec} equivalent_width must be one value or 3 (phot, cool, hot), "
                                       f"got {list(ews)}")
        for i, ew in enumerate(ews):
            _positive(f"{s}: {sec} equivalent_width" + (f"[{i}]" if len(ews) > 1 else ""), ew)
    check(ln.ew_method, EW_METHODS, f"{s}: {sec} ew_method")
    check(ln.ew_unit, EW_UNITS, f"{s}: {sec} ew_unit")
    check(ln.ew_stage, EW_STAGES, f"{s}: {sec} ew_stage")
    _validate_band(s, ln, sec)


def _validate_band(s: str, obj, sec: str):
    passband = getattr(obj, "passband", None)
    if passband is not None:
        check(passband, PASSBANDS, f"{s}: {sec} passband")
    if obj.limb_darkening == "atmosphere":
        if not hasattr(obj, "passband"):
            raise DopplermapInputError(f"{s}: {sec} limb_darkening = 'atmosphere': the shipped model-atmosphere "
                                       "tables are for photometric passbands (light-curve bands); give a law and "
                                       "its coefficients for the line")
        if passband is None or passband not in ATMOSPHERE_PASSBANDS:
            raise DopplermapInputError(f"{s}: {sec} limb_darkening = 'atmosphere' reads the model-atmosphere table "
                                       f"of a passband: give passband ({', '.join(ATMOSPHERE_PASSBANDS)})"
                                       + ("" if passband is None else f"; {passband!r} has a response but no "
                                          "limb-darkening table: give a law and its coefficients"))
        return
    for k in ("ld_phot", "ld_cool", "ld_hot"):
        _check_ld(f"{s}: {sec} {k}", obj.limb_darkening, getattr(obj, k))
    if obj.intensity is not None and (len(obj.intensity) != 3 or any(x < 0 for x in obj.intensity)):
        raise DopplermapInputError(f"{s}: {sec} intensity must be 3 values >= 0 (phot, cool, hot), got {list(obj.intensity)}")


def _validate_lc_reading(s: str, sec: str, fmt, unit, bin_width, bin_unit, time_scale, quality):
    if time_scale is not None:
        parse_time_scale(time_scale, f"{s}: {sec}time_scale")
    if quality is not None:
        check_bitmask(quality, f"{s}: {sec}quality_bitmask")
    check(fmt, LIGHTCURVE_FORMATS, f"{s}: {sec}format")
    check(unit, LIGHTCURVE_UNITS, f"{s}: {sec}unit")
    check(bin_unit, BIN_UNITS, f"{s}: {sec}bin_unit")
    if isinstance(bin_width, str):
        if bin_width != "auto":
            raise DopplermapInputError(f"{s}: {sec}bin must be a width or \"auto\", got {bin_width!r}")
    elif bin_width is not None:
        _positive(f"{s}: {sec}bin", bin_width)
        if bin_unit == "phase" and bin_width > 0.5:
            raise DopplermapInputError(f"{s}: {sec}bin in phase must be <= 0.5, got {bin_width!r}")


def _validate(cfg: TargetConfig):
    s = cfg.source
    if cfg.photometry_only:
        d = cfg.data
        if (d is None or d.lightcurve is None) and not cfg.lightcurves:
            raise DopplermapInputError(f"{s}: [data]: missing required key 'profiles' (line profiles); a target "
                                       "without them needs a light curve ([[lightcurves]] tables)")
        if cfg.line is not None:
            raise DopplermapInputError(f"{s}: [line] describes the local line of [data] profiles, and this target "
                                       "lists none: remove [line], or list the profiles")
        if d is not None:
            set_keys = [f.name for f in dataclasses.fields(DataConfig) if not f.name.startswith("lightcurve")
                        and f.name not in ("profiles", "time_scale") and getattr(d, f.name) != f.default]
            if set_keys:
                raise DopplermapInputError(f"{s}: [data] {set_keys[0]} describes line profiles, and this target "
                                           "lists none ([data] profiles)")
            parse_time_scale(d.time_scale, f"{s}: [data] time_scale")
    for i, ls in enumerate(cfg.line_sets()):
        multi = bool(cfg.lines)
        sec = f"[[lines]] {i + 1} ({ls.name!r})" if multi else ""
        _validate_data(s, ls.data, f"{sec} data" if multi else "[data]")
        _validate_line(s, ls.line, f"{sec} line" if multi else "[line]")
        if multi:
            _positive(f"{s}: {sec} weight", ls.weight, allow_zero=True)
            if ls.offset_sigma is not None:
                _positive(f"{s}: {sec} offset_sigma", ls.offset_sigma)
            lc_keys = [f.name for f in dataclasses.fields(DataConfig) if f.name.startswith("lightcurve")
                       and getattr(ls.data, f.name) != f.default]
            if lc_keys:
                raise DopplermapInputError(f"{s}: {sec} data: {lc_keys[0]!r} belongs in a [[lightcurves]] table")
    names = [ls.name for ls in cfg.lines]
    if len(set(names)) != len(names):
        raise DopplermapInputError(f"{s}: [[lines]] names must differ, got {names}")
    for i, lc in enumerate(cfg.lightcurves):
        sec = f"[[lightcurves]] {i + 1} ({lc.name!r})"
        _validate_lc_reading(s, f"{sec} ", lc.format, lc.unit, lc.bin, lc.bin_unit, lc.time_scale, lc.quality_bitmask)
        _positive(f"{s}: {sec} weight", lc.weight, allow_zero=True)
        _positive(f"{s}: {sec} wavelength_nm", lc.wavelength_nm)
        _validate_band(s, lc, sec)
    names = [lc.name for lc in cfg.lightcurves]
    if len(set(names)) != len(names):
        raise DopplermapInputError(f"{s}: [[lightcurves]] names must differ, got {names}")
    d = cfg.data
    if d is not None and d.lightcurve is not None and cfg.lightcurves:
        raise DopplermapInputError(f"{s}: give the light curve as [data] lightcurve or as [[lightcurves]] tables, not both")
    if d is not None:
        _validate_lc_reading(s, "[data] lightcurve_", d.lightcurve_format, d.lightcurve_unit, d.lightcurve_bin,
                             d.lightcurve_bin_unit, d.lightcurve_time_scale, d.lightcurve_quality_bitmask)
    if cfg.star.t0_scale is not None:
        parse_time_scale(cfg.star.t0_scale, f"{s}: [star] t0_scale")
    if (cfg.star.ra is None) != (cfg.star.dec is None):
        raise DopplermapInputError(f"{s}: [star] give both ra and dec (deg) or neither, got ra={cfg.star.ra!r}, dec={cfg.star.dec!r}")
    if cfg.star.ra is not None and not (0 <= cfg.star.ra < 360 and -90 <= cfg.star.dec <= 90):
        raise DopplermapInputError(f"{s}: [star] need 0 <= ra < 360 and -90 <= dec <= 90 deg, got ra={cfg.star.ra!r}, dec={cfg.star.dec!r}")
    st = cfg.star
    if not 0 < st.inclination <= 90:
        raise DopplermapInputError(f"{s}: [star] inclination must be in (0, 90] deg, got {st.inclination!r}")
    _positive(f"{s}: [star] period", st.period)
    if (st.vsini is None) == (st.radius is None):
        raise DopplermapInputError(f"{s}: [star] give exactly one of vsini (km/s) or radius (R_sun)")
    if st.logg is not None and not 0.0 <= st.logg <= 6.0:
        raise DopplermapInputError(f"{s}: [star] logg must be in [0, 6] (cgs), got {st.logg!r}")
    for k in ("vsini", "radius", "mass"):
        if getattr(st, k) is not None:
            _positive(f"{s}: [star] {k}", getattr(st, k))
    if abs(st.systemic_velocity) > 2000.0:
        raise DopplermapInputError(f"{s}: [star] systemic_velocity {st.systemic_velocity!r} km/s is beyond any star's "
                                   f"(|v| <= 2000): give it in km/s")
    for k in ("phot", "cool", "hot"):
        _positive(f"{s}: [temperatures] {k}", getattr(cfg.temperatures, k))
    _validate_band(s, cfg.lightcurve, "[lightcurve]")
    _positive(f"{s}: [lightcurve] wavelength_nm", cfg.lightcurve.wavelength_nm)
    check(st.shape, STAR_SHAPES, f"{s}: [star] shape")
    if st.shape == "sphere" and (st.mass_ratio or st.roche_fill is not None or st.separation is not None):
        raise DopplermapInputError(f"{s}: [star] mass_ratio, roche_fill and separation describe a Roche surface: "
                                   "set shape = 'roche'")
    if st.shape == "roche":
        _positive(f"{s}: [star] mass_ratio", st.mass_ratio, allow_zero=True)
        _positive(f"{s}: [star] synchronicity", st.synchronicity)
        if st.domega:
            raise DopplermapInputError(f"{s}: [star] domega must be 0 with shape = 'roche' (the equipotential of a "
                                       f"rigid rotator), got {st.domega!r}")
        if st.separation is not None:
            if not st.mass_ratio > 0:
                raise DopplermapInputError(f"{s}: [star] separation is the companion's distance: give mass_ratio > 0")
            if st.roche_fill is not None:
                raise DopplermapInputError(f"{s}: [star] give roche_fill or separation (which sets the fill from the "
                                           "star's radius), not both")
            _positive(f"{s}: [star] separation", st.separation)
        elif st.mass_ratio > 0 and (st.roche_fill is None or not 0 < st.roche_fill < 1):
            raise DopplermapInputError(f"{s}: [star] roche_fill (the volume-equivalent radius over the Roche lobe's) "
                                       f"must be in (0, 1) with mass_ratio > 0 (or give separation), got "
                                       f"{st.roche_fill!r}")
    g = cfg.gravity_darkening
    _positive(f"{s}: [gravity_darkening] beta", g.beta, allow_zero=True)
    check(g.law, GRAVITY_LAWS, f"{s}: [gravity_darkening] law")
    tidal = st.shape == "roche" and st.mass_ratio > 0
    if g.enabled and st.mass is None and not tidal:
        raise DopplermapInputError(f"{s}: [gravity_darkening] enabled needs [star] mass (M_sun)")
    if g.enabled and g.law == "elr" and tidal:
        raise DopplermapInputError(f"{s}: [gravity_darkening] law = 'elr' (Espinosa Lara & Rieutord 2011) is for "
                                   "single rotating stars; use 'von_zeipel' with a companion's tide")
    gr = cfg.grid
    check(gr.kind, GRID_KINDS, f"{s}: [grid] kind")
    if gr.n_cell < 8:
        raise DopplermapInputError(f"{s}: [grid] n_cell must be >= 8, got {gr.n_cell!r}")
    if not 1 <= gr.subdivide <= MAX_SUBDIVIDE:
        raise DopplermapInputError(f"{s}: [grid] subdivide must be an integer in 1..{MAX_SUBDIVIDE}, got {gr.subdivide!r}")
    if gr.kind == "healpix" and gr.subdivide & (gr.subdivide - 1):
        raise DopplermapInputError(f"{s}: [grid] subdivide on a HEALPix grid must be a power of 2, got {gr.subdivide!r}")
    inv = cfg.inversion
    check(inv.regulariser, REGULARISERS, f"{s}: [inversion] regulariser")
    check(inv.method, SYNTHESIS_METHODS, f"{s}: [inversion] method")
    for k in ("lmbd", "line_weight", "lc_weight"):
        _positive(f"{s}: [inversion] {k}", getattr(inv, k), allow_zero=True)
    _positive(f"{s}: [inversion] tol", inv.tol)
    if inv.offset_sigma is not None:
        _positive(f"{s}: [inversion] offset_sigma", inv.offset_sigma)
    if inv.maxiter < 1:
        raise DopplermapInputError(f"{s}: [inversion] maxiter must be >= 1, got {inv.maxiter!r}")
    check(inv.rv_shift, RV_SHIFTS, f"{s}: [inversion] rv_shift")
    check(inv.cube_dtype, tuple(c for c in CUBE_DTYPES if c is not None), f"{s}: [inversion] cube_dtype")
    check(inv.solver, SOLVER_CHOICES, f"{s}: [inversion] solver")
    comps = inv.fit_components
    if not comps or len(set(comps)) != len(comps) or not set(comps) <= set(SPOT_COMPONENTS):
        raise DopplermapInputError(f"{s}: [inversion] fit_components must list 'cool', 'hot' or both, got {list(comps)}")
    mp = cfg.map
    given = [k for k in ("windows", "window_rotations", "window_edges", "window_gap")
             if getattr(mp, k) not in (None, ())]
    if len(given) > 1:
        raise DopplermapInputError(f"{s}: [map] {given[0]} and {given[1]} both given: choose one way to cut the "
                                   "campaign into windows")
    if mp.windows is not None and mp.windows < 1:
        raise DopplermapInputError(f"{s}: [map] windows must be >= 1, got {mp.windows!r}")
    for k in ("window_rotations", "window_gap"):
        if getattr(mp, k) is not None:
            _positive(f"{s}: [map] {k}", getattr(mp, k))
    if mp.window_edges and (len(mp.window_edges) < 2 or any(b <= a for a, b in zip(mp.window_edges[:-1],
                                                                                     mp.window_edges[1:],
                                                                                     strict=True))):
        raise DopplermapInputError(f"{s}: [map] window_edges must be >= 2 strictly increasing rotation cycles, got "
                                   f"{list(mp.window_edges)!r}")
    _positive(f"{s}: [map] lmbd_time", mp.lmbd_time, allow_zero=True)
    check(mp.time_coupling, TIME_COUPLINGS, f"{s}: [map] time_coupling")
    if mp.lmbd_time > 0 and not mp.windowed:
        warn(f"{s}: [map] lmbd_time = {mp.lmbd_time!r} has no effect without windows")
    unc = cfg.uncertainty
    for i, m in enumerate(unc.methods):
        check(m, UNCERTAINTY_METHODS, f"{s}: [uncertainty] methods[{i}]")
    if unc.n_boot < 2:
        raise DopplermapInputError(f"{s}: [uncertainty] n_boot must be >= 2, got {unc.n_boot!r}")


def _line_sets(tables, source: str) -> tuple[LineSetConfig, ...]:
    if not isinstance(tables, list) or not tables:
        raise DopplermapInputError(f"{source}: lines must be [[lines]] tables (an array of tables), got {tables!r}")
    out = []
    for i, t in enumerate(tables):
        where = f"{source}: [[lines]] {i + 1}"
        if not isinstance(t, dict):
            raise DopplermapInputError(f"{where} must be a table, got {t!r}")
        keys = ("name", "weight", "offset_sigma", "data", "line")
        unknown = sorted(set(t) - set(keys))
        if unknown:
            raise _unknown(where, "key", unknown[0], keys)
        for key in ("data", "line"):
            if key not in t:
                raise DopplermapInputError(f"{where}: missing sub-table [lines.{key}]")
        out.append(LineSetConfig(data=_build(DataConfig, t["data"], f"{where} data"),
                                 line=_build(LineConfig, t["line"], f"{where} line"),
                                 name=_coerce(t.get("name", f"lines{i + 1}"), str, f"{where} name"),
                                 weight=_coerce(t.get("weight", 1.0), float, f"{where} weight"),
                                 offset_sigma=(None if "offset_sigma" not in t else
                                               _coerce(t["offset_sigma"], float, f"{where} offset_sigma"))))
    return tuple(out)


LC_NAME = "lightcurve"  # the name of a light curve given alone (an unnamed single [[lightcurves]] table)


def _lightcurve_sets(tables, source: str) -> tuple[LightCurveSetConfig, ...]:
    if not isinstance(tables, list) or not tables:
        raise DopplermapInputError(f"{source}: lightcurves must be [[lightcurves]] tables (an array of tables), got {tables!r}")
    out = []
    for i, t in enumerate(tables):
        lc = _build(LightCurveSetConfig, t, f"{source}: [[lightcurves]] {i + 1}")
        # one band keeps the name a single light curve always had, so its results read the same
        out.append(lc if lc.name else dataclasses.replace(lc, name=LC_NAME if len(tables) == 1 else f"lightcurve{i + 1}"))
    return tuple(out)

# the old spelling's [data] reading keys -> their [[lightcurves]] keys
_OLD_LC_KEYS = {f.name: f.name.removeprefix("lightcurve_") if f.name != "lightcurve" else "file"
                for f in dataclasses.fields(DataConfig) if f.name.startswith("lightcurve")}
_BAND_KEYS = tuple(f.name for f in dataclasses.fields(LightCurveConfig))


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(map(_toml, value)) + "]"
    return repr(value)


def _as_lightcurve_table(cfg: TargetConfig) -> TargetConfig:
    """``[data] lightcurve*`` keys with ``[lightcurve]`` (the old spelling of one light curve)
    as the one ``[[lightcurves]]`` table they mean, with a warning naming that table; the
    configuration then holds one spelling, whatever the file used."""
    d = cfg.data
    if d is None or d.lightcurve is None:
        return cfg
    given = {new: getattr(d, old) for old, new in _OLD_LC_KEYS.items()}
    given.update({k: getattr(cfg.lightcurve, k) for k in _BAND_KEYS})
    table = LightCurveSetConfig(name=LC_NAME, weight=1.0, **given)
    defaults = LightCurveSetConfig(file="")
    shown = "; ".join(f"{k} = {_toml(v)}" for k, v in given.items()
                      if k == "file" or v != getattr(defaults, k))
    warn(f"{cfg.source}: [data] lightcurve with [lightcurve] is the old spelling of a light curve, read as one "
         f"[[lightcurves]] table: write it as [[lightcurves]] with {shown} (one key a line)")
    data = dataclasses.replace(d, **{f.name: f.default for f in dataclasses.fields(DataConfig) if f.name in _OLD_LC_KEYS})
    return dataclasses.replace(cfg, data=data, lightcurve=LightCurveConfig(), lightcurves=(table,))


def parse_config(table: dict, *, source: str = "<config>", base_dir: str = ".") -> TargetConfig:
    """Build and validate a :class:`TargetConfig` from a parsed TOML table."""
    unknown = sorted(set(table) - set(_SECTIONS))
    if unknown:
        raise _unknown(source, "section", unknown[0], _SECTIONS)
    parts = {}
    if "lines" in table:
        parts["lines"] = _line_sets(table["lines"], source)
        both = [k for k in _OPTIONAL_WITH_LINES if k in table]
        if both:
            raise DopplermapInputError(f"{source}: [{both[0]}] and [[lines]] both given: with [[lines]] every line data "
                                       "set has its own data and line sub-tables")
        parts.update(data=None, line=None)
    elif not (isinstance(table.get("data"), dict) and "profiles" in table["data"]):
        # light curves alone: [data] holds the light-curve keys (or is absent), no [line]
        parts.setdefault("line", None if "line" not in table else _build(LineConfig, table["line"],
                                                                         f"{source}: [line]"))
        if "data" not in table:
            parts["data"] = None
    if "lightcurves" in table:
        parts["lightcurves"] = _lightcurve_sets(table["lightcurves"], source)
        if "lightcurve" in table:
            raise DopplermapInputError(f"{source}: [lightcurve] and [[lightcurves]] both given: each [[lightcurves]] "
                                       "table holds its band")
    for name, f in _SECTIONS.items():
        if name in _ARRAYS or name in parts:
            continue
        if name in table:
            parts[name] = _build(_SECTION_TYPES[name], table[name], f"{source}: [{name}]")
        elif f.default is dataclasses.MISSING:
            raise DopplermapInputError(f"{source}: missing section [{name}]")
    cfg = TargetConfig(**parts, base_dir=str(base_dir), source=source)
    _validate(cfg)  # the old light-curve keys are checked under their own names, then mapped
    return _as_lightcurve_table(cfg)


def load_config(path) -> TargetConfig:
    """Read and validate a target TOML file."""
    path = Path(path)
    if path.is_dir():
        raise DopplermapInputError(f"{path} is a folder, not a target TOML file")
    if not path.is_file():
        raise MissingFileError(f"target file not found: {path}")
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise DopplermapInputError(f"{path}: invalid TOML: {exc}") from None
    except (UnicodeDecodeError, RecursionError, OSError) as exc:  # TOML is UTF-8; the parser recurses per level
        raise bad_file(path, "TOML file", exc) from None
    return parse_config(table, source=str(path), base_dir=str(path.parent))


TEMPLATE = '''# dopplermap target configuration. Run it with:  dopplermap invert target.toml --out results
# Paths are relative to this file. Velocities in km/s, times in days, temperatures in K.

[data]
profiles = ["profiles/*.lsd"]        # LSD files (glob patterns allowed), one per epoch
format = "auto"                      # auto | donati | text | fits
times_table = "times.csv"            # CSV/ECSV: file, time (BJD or HJD)[, v_sys km/s] ...
# time_pattern = 'BJD=(?P<time>[0-9.]+)'   # ... or a regex on the file names (not both)
time_scale = "BJD_TDB"               # BJD_TDB | HJD | JD | MJD | BTJD | BKJD | 'BJD-2450000' ... of the times and t0
# velocity_range = [-60.0, 60.0]     # fit only this part, km/s around the line centre (v - v_sys)
# error_scale = "auto"               # LSD errors larger than the scatter: auto | continuum | residuals | a factor
# fits_columns = ["VEL", "I", "ERR"] # FITS profiles: names of the velocity, intensity, error columns

[star]
# name = "LO Peg"                    # titles the figures and the report; OBJECT in the FITS headers
inclination = 60.0                   # deg
vsini = 40.0                         # km/s (or give radius = R_eq in R_sun instead)
period = 2.0                         # days (equatorial)
t0 = 0.0                             # time of phase 0, in time_scale (or in t0_scale)
# t0_scale = "HJD"                   # the scale of t0 when it differs from [data] time_scale
domega = 0.0                         # differential rotation, rad/day
# mass = 1.0                         # M_sun, needed for gravity darkening and a rotating Roche surface
# logg = 4.5                         # cgs: the atmosphere table's log g (default: from mass and radius)
# shape = "sphere"                   # sphere | roche (equipotential surface: rotation, and a companion's tide)
# mass_ratio = 0.0                   # roche: M_companion / M_star (0: a single rotating star)
# roche_fill = 0.8                   # roche with a companion: volume-equivalent radius / the Roche lobe's
# synchronicity = 1.0                # roche with a companion: rotation rate / orbital rate
# separation = 20.0                  # roche with a companion: R_sun, instead of roche_fill (from the radius)
# systemic_velocity = -19.8          # km/s, line centre; profiles are shifted v -> v - v_sys (or per epoch in times_table)
# ra = 322.85                        # deg (ICRS): with dec, moves HJD/JD/MJD times to the barycentre
# dec = 23.335

[temperatures]
phot = 5000.0
cool = 3800.0
hot = 6000.0

[line]
wavelength_nm = 600.0                # continuum intensity ratios use Planck at this wavelength
profile = "gaussian"                 # gaussian | voigt | tabulated
depth = [0.5, 0.6, 0.42]             # central depth of phot, cool, hot (gaussian/voigt)
fwhm = 9.0                           # Gaussian FWHM, km/s
fwhm_lorentz = 0.0                   # voigt only
# files = ["phot.txt", "cool.txt", "hot.txt"]   # tabulated: columns velocity, I/Ic per temperature
# resolving_power = 65000.0          # instrument: Gaussian of FWHM c/R
macroturbulence = 0.0                # zeta_RT, km/s (radial-tangential, Gray); 0 = off
radial_fraction = 0.5                # A_R (A_T = 1 - A_R)
# equivalent_width = 3.0             # scale every local profile to this EW, or [phot, cool, hot]
# ew_unit = "km/s"                   # km/s | angstrom (converted with wavelength_nm: EW_v = c EW_A / lambda0)
# ew_method = "integrated"           # integrated (1 - I/Ic over the profile) | gaussian_fit (SpotDIPy's)
# ew_stage = "intrinsic"             # intrinsic (before instrumental broadening) | broadened (after: SpotDIPy's order)
limb_darkening = "linear"            # linear | quadratic | sqrt | power2 (a light-curve band: also atmosphere)
ld_phot = [0.65]
ld_cool = [0.75]
ld_hot = [0.60]
# intensity = [1.0, 0.3, 1.6]        # continuum intensities instead of Planck ratios

# A light curve fitted jointly: one [[lightcurves]] table per photometric band (uncomment to use).
# [[lightcurves]]
# file = "lightcurve.csv"            # time, flux (any units), error; a TESS/Kepler *_lc.fits or a lightkurve to_fits()
# name = "TESS"                      # names the band's results (default: "lightcurve", or lightcurve1, 2 ... of several)
# weight = 1.0                       # of this band among several (the light-curve term itself: [inversion] lc_weight)
# column = "auto"                    # FITS flux column (auto: PDCSAP_FLUX, else FLUX) | "SAP_FLUX" | "CBVSAP_FLUX" ...
# quality_bitmask = "default"        # none | default (the archives' bad cadences) | hard | hardest (or a bit mask)
# unit = "flux"                      # flux | mag (magnitudes are converted to flux)
# time_scale = "BTJD"                # text light curves (default: [data] time_scale); mission FITS use their keywords
# bin = 0.01                         # bin before fitting (inverse-variance weighted means), or "auto" ...
# bin_unit = "phase"                 # ... in days ("d") or in rotation phase ("phase")
# wavelength_nm = 550.0
# limb_darkening = "linear"          # or "atmosphere": power-2 law of PHOENIX models in passband (Claret & Southworth 2023)
# passband = "TESS"                  # TESS | Kepler | Gaia_G | Gaia_BP | Gaia_RP (these: also limb_darkening = "atmosphere") | Bessell_U..I
# ld_phot = [0.70]
# ld_cool = [0.80]
# ld_hot = [0.65]
# fit_dilution = false               # free light-curve offset (contaminating light), profiled out

# Several instruments or masks: [[lines]] tables (each with [lines.data] and [lines.line]) instead of
# [data] and [line]; see docs/datasets.md.

[gravity_darkening]
enabled = false                      # on a Roche surface; needs [star] mass (or a Roche [star] shape)
beta = 0.25                          # von_zeipel: T ~ g^beta
law = "von_zeipel"                   # von_zeipel | elr (Espinosa Lara & Rieutord 2011, single stars)

[grid]
kind = "bands"                       # bands | healpix
n_cell = 2500
subdivide = 1                        # each cell's lines integrated over subdivide x subdivide sub-cells

[inversion]
regulariser = "mem"                  # mem (the seed's entropy) | mem_spotdipy (SpotDIPy's normalisation) | tikhonov | none
lmbd = 1.0                           # regularisation weight lambda
line_weight = 1.0                    # alpha: weight of the line chi-square
lc_weight = 1.0                      # delta: weight of the light-curve chi-square
fit_rv = true                        # free radial-velocity shift per epoch
fit_amp = true                       # free additive offset per epoch
# offset_sigma = 0.01                # Gaussian prior amp ~ N(0, sigma^2) on those offsets; default none (docs/observations.md)
tol = 1e-5
maxiter = 1000
method = "auto"                      # auto (dense while its cube <= 512 MiB) | binned (memory-light) | dense (exact)
# cube_dtype = "auto"                # dense cube a solve iterates on: auto (float32 at tol >= 1e-6) | float32 | float64
fit_components = ["cool", "hot"]     # spot components fitted; ["cool"]: photosphere + cool spots only
# rv_shift = "interpolate"           # interpolate (the seed's shift of the disc-integrated profile) | exact (binned)
solver = "auto"                      # auto (newton at tol <= 1e-6, else lbfgsb) | lbfgsb (scipy, live progress)
                                     # | projected_lbfgs (one compiled loop; GPU) | newton (Gauss-Newton-CG)

# [map]                              # a map per time window, for spots that evolve (docs/parameters.md)
# windows = 4                        # that many windows of equal length over the epochs, or
# window_rotations = 3.0             # rotations per window, or
# window_edges = [0.0, 3.0, 6.0]     # edges in rotation cycles since t0, or
# window_gap = 5.0                   # a window between gaps in the data longer than this (days)
# lmbd_time = 10.0                   # weight of the coupling of neighbouring windows' maps
# time_coupling = "quadratic"        # quadratic | relative_entropy (each map relative to the previous window's)

[uncertainty]                        # per-cell uncertainty maps written into the result folder
methods = []                         # any of "laplace" (posterior), "sandwich", "bootstrap"; [] = none
n_boot = 20                          # bootstrap resamples over epochs
seed = 0                             # bootstrap random seed
'''
