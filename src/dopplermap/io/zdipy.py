"""ZDIpy configurations (``inzdi.dat``, ``model-voigt-line.dat``) and their dopplermap equivalent.

ZDIpy (Folsom et al. 2018, MNRAS 474, 4956; github.com/folsomcp/ZDIpy) reads ``inzdi.dat``
as its non-comment lines in a fixed order (``#`` starts a comment; words after the values
are ignored):

====  =========================================================================
line  values
====  =========================================================================
1     inclination (deg), vsini (km/s), period (d), dOmega (rad/d)
2     mass (M_sun), equatorial radius (R_sun) (for the Roche shape; 0 = sphere)
3     numRings: rings of cells in colatitude
4     target form ``C`` (chi^2) or ``E`` (entropy), target value, number of iterations
5     test_aim (convergence on Skilling & Bryan's test)
6     fit magnetic (0/1), l_max, B entropy slope, geometry type
7     initial magnetic map from file (0/1), file name
8     fit brightness (0/1), chi^2 scaling of Stokes I, brightness entropy scaling
9     brightness entropy type (1 image, 2 filling factor), default and limiting brightness
10    initial brightness map from file (0/1), file name
11    estimate the line strength from the observed equivalent width (0/1)
12    instrumental resolving power R
13    vel_start, vel_end: fitted window (km/s, relative to each file's centre Vr)
14    Julian date of rotation cycle 0
15..  per observation: file name, Julian date, centre Vr (km/s)
====  =========================================================================

``model-voigt-line.dat``: its first non-comment line ``wl0 (nm), strength, Gaussian width
(km/s, sqrt(2) sigma), Lorentzian width (gamma / Gaussian width), Lande g, linear
limb-darkening coefficient[, gravity-darkening exponent]``. ZDIpy's local profile is
``I/Ic = 1 - strength * Re w(u + i a)`` with ``u = v / width_gauss``, ``a`` the Lorentzian
ratio and ``w`` the Faddeeva function, so in dopplermap's terms (:func:`voigt_parameters`)
``fwhm = 2 sqrt(ln 2) width_gauss``, ``fwhm_lorentz = 2 a width_gauss`` and the central depth
``strength * erfcx(a)``. ZDIpy folds the instrument in the same way dopplermap's
:func:`~dopplermap.broadening.instrumental_broaden` does (Gaussian widths in quadrature, area
kept), so ``resolving_power`` carries over unchanged. Its grid (``numRings`` rings,
``round(2 numRings sin(colatitude))`` cells each) becomes a latitude-band grid with the same
number of cells (:func:`zdipy_n_cell`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path

import numpy as np
from scipy import special

from ..constants import C_MS, H_PLANCK, K_BOLTZMANN
from ..errors import DopplermapInputError, MissingFileError, bad_file, reader

__all__ = ["ZdipyConfig", "ZdipyLine", "lsd_object_name", "read_inzdi", "read_zdipy_line", "zdipy_n_cell", "voigt_parameters",
           "observed_equivalent_width", "gravity_beta", "to_target"]


@dataclasses.dataclass(frozen=True)
class ZdipyConfig:
    """The parameters of one ``inzdi.dat`` (names as in ZDIpy's ``readParamsZDI``)."""

    inclination: float
    vsini: float
    period: float
    domega: float
    mass: float
    radius: float
    n_rings: int
    target_form: str
    target_value: float
    n_iterations: int
    test_aim: float
    fit_mag: int
    l_max: int
    default_bent: float
    mag_geom_type: str
    init_mag_from_file: int
    init_mag_file: str
    fit_bright: int
    chi_scale_i: float
    bright_ent_scale: float
    entropy_bright: int
    default_bright: float
    maximum_bright: float
    init_bright_from_file: int
    init_bright_file: str
    estimate_strength: int
    resolving_power: float
    vel_start: float
    vel_end: float
    jd_ref: float
    files: tuple[str, ...]
    jds: tuple[float, ...]
    v_r: tuple[float, ...]
    file_lines: tuple[int, ...]
    source: str


@dataclasses.dataclass(frozen=True)
class ZdipyLine:
    """ZDIpy's Voigt line model (first line of ``model-voigt-line.dat``)."""

    wavelength_nm: float
    strength: float
    width_gauss: float  # km/s, sqrt(2) sigma
    width_lorentz: float  # gamma / width_gauss
    lande_g: float
    limb_darkening: float
    gravity_darkening: float
    source: str


# (field names, types) of the fixed non-comment lines of inzdi.dat, in order
_LINES = (
    (("inclination", "vsini", "period", "domega"), (float,) * 4),
    (("mass", "radius"), (float, float)),
    (("n_rings",), (int,)),
    (("target_form", "target_value", "n_iterations"), (str, float, int)),
    (("test_aim",), (float,)),
    (("fit_mag", "l_max", "default_bent", "mag_geom_type"), (int, int, float, str)),
    (("init_mag_from_file", "init_mag_file"), (int, str)),
    (("fit_bright", "chi_scale_i", "bright_ent_scale"), (int, float, float)),
    (("entropy_bright", "default_bright", "maximum_bright"), (int, float, float)),
    (("init_bright_from_file", "init_bright_file"), (int, str)),
    (("estimate_strength",), (int,)),
    (("resolving_power",), (float,)),
    (("vel_start", "vel_end"), (float, float)),
    (("jd_ref",), (float,)),
)


def _value(tok, tp, where, name):
    try:
        v = tp(tok)
    except ValueError:
        raise DopplermapInputError(f"{where}: {name} must be {'an integer' if tp is int else 'a number'}, got {tok!r}") from None
    if tp is float and not math.isfinite(v):
        raise DopplermapInputError(f"{where}: {name} must be finite, got {tok!r}")
    return v


def _content_lines(path: Path):
    """``(line number, tokens)`` of the non-blank, non-comment lines (``#`` ends a line)."""
    try:
        text = path.read_text().splitlines()
    except UnicodeDecodeError as exc:
        raise bad_file(path, "ZDIpy file", exc) from None
    for ln, line in enumerate(text, start=1):
        s = line.split("#", 1)[0].strip()
        if s:
            yield ln, s.split()


@reader("ZDIpy inzdi file")
def read_inzdi(path) -> ZdipyConfig:
    """Parse ZDIpy's ``inzdi.dat``; errors name the file, line, field and value."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"ZDIpy configuration not found: {path}")
    vals: dict = {}
    files, jds, vrs, flines = [], [], [], []
    lines = list(_content_lines(path))
    for i, (ln, toks) in enumerate(lines):
        where = f"{path}:{ln}"
        if i < len(_LINES):
            names, types = _LINES[i]
            if len(toks) < len(names):
                raise DopplermapInputError(f"{where}: expected {len(names)} values ({', '.join(names)}), got {len(toks)}: "
                                           f"{' '.join(toks)!r}")
            for name, tp, tok in zip(names, types, toks, strict=False):
                vals[name] = _value(tok, tp, where, name)
            continue
        if len(toks) < 3:
            raise DopplermapInputError(f"{where}: expected 'file_name julian_date center_Vr', got {' '.join(toks)!r}")
        files.append(toks[0])
        jds.append(_value(toks[1], float, where, f"Julian date of {toks[0]}"))
        vrs.append(_value(toks[2], float, where, f"center Vr of {toks[0]}"))
        flines.append(ln)
    if len(lines) < len(_LINES):
        missing = _LINES[len(lines)][0]
        raise DopplermapInputError(f"{path}: ends after {len(lines)} parameter lines; expected next: {', '.join(missing)}")
    if not files:
        raise DopplermapInputError(f"{path}: no observation lines (file_name julian_date center_Vr) after the Julian date of cycle 0")
    cfg = ZdipyConfig(**vals, files=tuple(files), jds=tuple(jds), v_r=tuple(vrs), file_lines=tuple(flines),
                      source=str(path))
    where = {name: f"{path}:{lines[i][0]}" for i, (names, _) in enumerate(_LINES) for name in names}
    if not 0 < cfg.inclination <= 90:
        raise DopplermapInputError(f"{where['inclination']}: inclination must be in (0, 90] deg, got {cfg.inclination!r}")
    for name in ("vsini", "period", "resolving_power"):
        if not getattr(cfg, name) > 0:
            raise DopplermapInputError(f"{where[name]}: {name} must be > 0, got {getattr(cfg, name)!r}")
    if cfg.n_rings < 2:
        raise DopplermapInputError(f"{where['n_rings']}: numRings must be >= 2, got {cfg.n_rings!r}")
    if not cfg.vel_start < cfg.vel_end:
        raise DopplermapInputError(f"{where['vel_start']}: vel_start must be < vel_end, got {cfg.vel_start!r} {cfg.vel_end!r}")
    if cfg.target_form not in ("C", "E"):
        raise DopplermapInputError(f"{where['target_form']}: target form must be 'C' (chi^2) or 'E' (entropy), got {cfg.target_form!r}")
    return cfg


@reader("ZDIpy line-model file")
def read_zdipy_line(path) -> ZdipyLine:
    """Parse ZDIpy's ``model-voigt-line.dat`` (its first non-comment line, as ZDIpy does)."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"ZDIpy line model not found: {path}")
    first = next(iter(_content_lines(path)), None)
    if first is None:
        raise DopplermapInputError(f"{path}: no line data (wl0 str GaussWidth LorentzWidth lande_g limb_darkening)")
    ln, toks = first
    names = ("wavelength_nm", "strength", "width_gauss", "width_lorentz", "lande_g", "limb_darkening")
    if len(toks) < len(names):
        raise DopplermapInputError(f"{path}:{ln}: expected {len(names)} values ({', '.join(names)}[, gravity_darkening]), "
                                   f"got {len(toks)}")
    where = f"{path}:{ln}"
    v = {n: _value(t, float, where, n) for n, t in zip(names, toks, strict=False)}
    gd = _value(toks[6], float, where, "gravity_darkening") if len(toks) > 6 else 0.0
    line = ZdipyLine(**v, gravity_darkening=gd, source=str(path))
    for name in ("wavelength_nm", "strength", "width_gauss"):
        if not getattr(line, name) > 0:
            raise DopplermapInputError(f"{where}: {name} must be > 0, got {getattr(line, name)!r}")
    if line.width_lorentz < 0 or not 0 <= line.limb_darkening <= 1 or line.gravity_darkening < 0:
        raise DopplermapInputError(f"{where}: need width_lorentz >= 0, limb_darkening in [0, 1], gravity_darkening >= 0; "
                                   f"got {line.width_lorentz!r}, {line.limb_darkening!r}, {line.gravity_darkening!r}")
    return line


def zdipy_n_cell(n_rings: int) -> int:
    """Number of cells of ZDIpy's stellar grid with ``n_rings`` rings in colatitude."""
    return int(sum(round(math.sin(math.pi * (i + 0.5) / n_rings) * 2 * n_rings) for i in range(n_rings)))


def voigt_parameters(line: ZdipyLine) -> tuple[float, float, float]:
    """``(depth, fwhm_gauss, fwhm_lorentz)`` (km/s) of dopplermap's ``voigt`` equal to ZDIpy's profile."""
    wg, a = line.width_gauss, line.width_lorentz
    return float(line.strength * special.erfcx(a)), 2.0 * math.sqrt(math.log(2.0)) * wg, 2.0 * a * wg


def observed_equivalent_width(profiles, v_r, vel_start: float, vel_end: float) -> float:
    """Mean equivalent width (km/s) of the profiles inside the window, as ZDIpy estimates it.

    ``profiles``: :class:`~dopplermap.io.lsd.LineProfile` s; the window is
    ``vel_start + v_r .. vel_end + v_r``; the continuum is taken as 1 and the sum is
    ZDIpy's ``sum (1 - I_i)(v_(i+1) - v_i)`` with the last step repeated.
    """
    ews = []
    for p, vr in zip(profiles, v_r, strict=True):
        keep = (p.vels >= vel_start + vr) & (p.vels <= vel_end + vr)
        v, f = p.vels[keep], p.flux[keep]
        if v.size < 2:
            raise DopplermapInputError(f"{p.source}: fewer than 2 points inside the window {vel_start}..{vel_end} km/s "
                                       f"around {vr} km/s")
        dv = np.append(np.diff(v), v[-1] - v[-2])
        ews.append(float(np.sum((1.0 - f) * dv)))
    return float(np.mean(ews))


def gravity_beta(zdipy_exponent: float, t_phot: float, wavelength_nm: float) -> float:
    """dopplermap's ``T ~ g^beta`` matching ZDIpy's intensity ``I ~ g^exponent`` at the line.

    Planck: ``d ln B / d ln T = x / (1 - e^-x)``, ``x = h c / (lambda k T)``; so
    ``beta = exponent / (d ln B / d ln T)`` (to first order in the gravity contrast).
    """
    x = H_PLANCK * C_MS / (wavelength_nm * 1e-9 * K_BOLTZMANN * t_phot)
    return float(zdipy_exponent / (x / -math.expm1(-x)))


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return repr(float(v)) if isinstance(v, float) else str(v)


_LSD_TITLE = re.compile(r"Reduced spectrum of\s+'([^']*)'")


def lsd_object_name(paths) -> str | None:
    """The star's name from the title line of LSD files in Donati's layout (``***Reduced
    spectrum of 'LOPEG   '``): the first file's quoted object (a renormalised ``X.prof.norm``,
    whose title line is replaced, is read through its ``X.prof`` beside it), or None when no
    file has one."""
    files = [Path(f) for f in paths]
    for path in [g for f in files for g in ([f, f.with_suffix("")] if f.suffix == ".norm" else [f])]:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                m = _LSD_TITLE.search(fh.readline())
        except OSError:
            continue
        if m and m.group(1).strip():
            return m.group(1).strip()
    return None


def to_target(cfg: ZdipyConfig, line: ZdipyLine | None, toml_path, *, epochs_name: str, t_phot: float,
              t_cool: float, ew: float | None):
    """The dopplermap TOML text, the epochs-table text and the list of what was not carried over.

    ``toml_path``: where the TOML will be written (profile paths are written relative to
    its folder); ``epochs_name``: the epochs table's file name next to it; ``ew``: the mean
    observed equivalent width (km/s) when ZDIpy estimates the line strength from it.
    """
    toml_path = Path(toml_path)
    base = Path(os.path.abspath(cfg.source)).parent
    out_dir = Path(os.path.abspath(toml_path)).parent
    rel = [os.path.relpath(base / f, out_dir) for f in cfg.files]
    lost: list[str] = []
    if cfg.fit_mag:
        lost.append(f"magnetic field (fit magnetic = 1, l_max {cfg.l_max}, B entropy slope {cfg.default_bent:g}, "
                    f"geometry '{cfg.mag_geom_type}'): dopplermap maps brightness (Stokes I) only")
    if cfg.init_mag_from_file:
        lost.append(f"initial magnetic map {cfg.init_mag_file!r}")
    if not cfg.fit_bright:
        lost.append("ZDIpy 'fit bright' = 0 (this file fits the magnetic field only); dopplermap fits the brightness "
                    "(spot filling factors) from Stokes I")
    if cfg.init_bright_from_file:
        lost.append(f"initial brightness map {cfg.init_bright_file!r}")
    form = "chi^2" if cfg.target_form == "C" else "entropy"
    lost.append(f"target {form} {cfg.target_value:g} in {cfg.n_iterations} MEM iterations, test_aim {cfg.test_aim:g}: "
                "dopplermap uses a fixed regularisation weight [inversion] lmbd (find the lambda for a target reduced "
                f"chi^2, on the errors scaled by [data] error_scale, with: dopplermap lambda {toml_path.name} "
                f"--target-chi2 {cfg.target_value:g})"
                if cfg.target_form == "C" else
                f"target entropy {cfg.target_value:g} in {cfg.n_iterations} iterations: not supported; dopplermap uses "
                "a fixed regularisation weight [inversion] lmbd")
    lost.append(f"brightness entropy type {cfg.entropy_bright} (default brightness {cfg.default_bright:g}, limit "
                f"{cfg.maximum_bright:g}), entropy scaling {cfg.bright_ent_scale:g}: dopplermap's 'mem' regulariser "
                "acts on the cool/hot filling factors")
    if line is not None:
        lost.append(f"Lande g {line.lande_g:g} (Stokes V only)")
        if cfg.mass > 0 and cfg.radius > 0:
            lost.append(f"Roche (oblate) shape from mass {cfg.mass:g} M_sun and radius {cfg.radius:g} R_sun: dopplermap "
                        "keeps a sphere (vsini sets the velocities) and applies gravity darkening only")
    lost.append("ZDIpy holds each file's centre Vr fixed and fits no offsets: fit_rv/fit_amp are off to match")
    if any(vr != cfg.v_r[0] for vr in cfg.v_r):
        sysv = None
    else:
        sysv = cfg.v_r[0]
    n_cell = zdipy_n_cell(cfg.n_rings)
    L = []
    w = L.append
    w(f"# dopplermap target written by `dopplermap import-zdipy` from {Path(cfg.source).name}"
      + (f" and {Path(line.source).name}" if line else ""))
    w("# Run it with:  dopplermap invert " + toml_path.name + " --out results")
    w("#")
    w("# Not carried over from ZDIpy (no dopplermap equivalent):")
    for item in lost:
        w(f"#  - {item}")
    w("# Cool spots only (ZDIpy maps one brightness): [inversion] fit_components = [\"cool\"] holds the")
    w("# hot-spot map at its floor, and the hot-spot temperature equals the photosphere's besides.")
    w("")
    w("[data]")
    w("profiles = [")
    for r in rel:
        w(f"    {_toml(r)},")
    w("]")
    w('format = "auto"')
    w(f"times_table = {_toml(epochs_name)}      # file, time (ZDIpy's Julian dates, as given), v_sys (centre Vr)")
    w(f"velocity_range = {_toml([cfg.vel_start, cfg.vel_end])}   # ZDIpy vel_start vel_end, km/s around each file's centre Vr")
    w('error_scale = "auto"           # LSD error bars are often larger than the profiles\' scatter (then every chi2 is')
    w("                               # far below 1): scaled to it, from the continuum in the window or else from the")
    w("                               # residuals of a fit (docs/observations.md); a number fixes the factor")
    w('time_scale = "BJD_TDB"         # ZDIpy uses its Julian dates as given: declared BJD_TDB they stay unchanged,')
    w("                               # so phases are ZDIpy's; ZDIpy names no scale: set the real one (and ra/dec) if known")
    w("")
    w("[star]")
    name = lsd_object_name([base / f for f in cfg.files])
    if name:
        w(f"name = {_toml(name)}              # the object of the LSD files' title line")
    w("# ZDIpy's inclination and vsini: check them on one grid (dopplermap grid ... --param inclination=...")
    w("# --param vsini=...): a vsini held a few per cent off moves the inclination's minimum far (docs/observations.md)")
    w(f"inclination = {_toml(cfg.inclination)}")
    w(f"vsini = {_toml(cfg.vsini)}")
    w(f"period = {_toml(cfg.period)}")
    w(f"t0 = {_toml(cfg.jd_ref)}              # ZDIpy's Julian date of rotation cycle 0")
    w(f"domega = {_toml(cfg.domega)}              # rad/day, Omega(lat) = Omega_eq - domega sin^2(lat) in both codes")
    if cfg.mass > 0:
        w(f"mass = {_toml(cfg.mass)}")
    if sysv is not None:
        w(f"systemic_velocity = {_toml(sysv)}     # every file's centre Vr (also per epoch in {epochs_name})")
    w("")
    w("[temperatures]                 # ZDIpy maps relative brightness, not temperatures: set the star's")
    w(f"phot = {_toml(float(t_phot))}")
    w(f"cool = {_toml(float(t_cool))}")
    w(f"hot = {_toml(float(t_phot))}                   # = phot; not fitted (fit_components = [\"cool\"])")
    w("")
    w("[line]")
    if line is None:
        w("# no model-voigt-line.dat given: a Gaussian placeholder line; import again with it for ZDIpy's line")
        w("wavelength_nm = 600.0")
        w('profile = "gaussian"')
        w("depth = [0.5, 0.5, 0.5]")
        w("fwhm = 9.0")
        w("limb_darkening = \"linear\"")
        w("ld_phot = [0.6]\nld_cool = [0.6]\nld_hot = [0.6]")
    else:
        depth, fwhm, fwhm_l = voigt_parameters(line)
        w(f"wavelength_nm = {_toml(line.wavelength_nm)}")
        w('profile = "voigt"              # ZDIpy: 1 - strength Re w(v/width_gauss + i a)')
        w(f"depth = {_toml([depth] * 3)}   # strength {line.strength:g} x erfcx(a = {line.width_lorentz:g})")
        w(f"fwhm = {_toml(fwhm)}           # 2 sqrt(ln 2) x Gaussian width {line.width_gauss:g} km/s")
        w(f"fwhm_lorentz = {_toml(fwhm_l)}   # 2 a x Gaussian width")
        w('limb_darkening = "linear"')
        ld = [line.limb_darkening]
        w(f"ld_phot = {_toml(ld)}\nld_cool = {_toml(ld)}\nld_hot = {_toml(ld)}")
    w(f"resolving_power = {_toml(cfg.resolving_power)}")
    if ew is not None:
        w(f"equivalent_width = {_toml(round(ew, 6))}   # ZDIpy 'estimate line strength from EW' = 1: the mean observed EW "
          "in the window, km/s")
        w('ew_method = "integrated"      # the integral of 1 - I/Ic, as ZDIpy sums it')
    if line is not None and line.gravity_darkening > 0 and cfg.mass > 0:
        beta = gravity_beta(line.gravity_darkening, t_phot, line.wavelength_nm)
        w("")
        w("[gravity_darkening]")
        w("enabled = true")
        w(f"beta = {_toml(round(beta, 6))}    # T ~ g^beta giving ZDIpy's I ~ g^{line.gravity_darkening:g} at "
          f"{line.wavelength_nm:g} nm and {t_phot:g} K")
    w("")
    w("[grid]")
    w('kind = "bands"')
    w(f"n_cell = {n_cell}                # as many cells as ZDIpy's {cfg.n_rings} rings")
    w("")
    w("[inversion]")
    w('regulariser = "mem"')
    w("lmbd = 1.0")
    if cfg.chi_scale_i != 1.0:
        w(f"line_weight = {_toml(cfg.chi_scale_i)}   # ZDIpy's chi^2 scaling for Stokes I")
    w('fit_components = ["cool"]      # photosphere + cool spots: a one-brightness map as in ZDIpy')
    w("fit_rv = false                 # ZDIpy holds the centre Vr fixed")
    w("fit_amp = false")
    w("")
    ep = ["# epochs written by dopplermap import-zdipy from " + Path(cfg.source).name,
          "# time: ZDIpy's Julian date as given; v_sys: its centre Vr (km/s), subtracted from the velocities",
          "file,time,v_sys"]
    ep += [f"{r},{jd!r},{vr!r}" for r, jd, vr in zip(rel, cfg.jds, cfg.v_r, strict=True)]
    return "\n".join(L) + "\n", "\n".join(ep) + "\n", lost
