"""The inversion problem, described once and built once.

A :class:`Problem` holds what defines an inversion - surface grid, star, observations,
local-line components, synthesis method, gravity darkening, light curve and the solver
settings - and derives from it, once and on first use, the synthesis form (``pre``), the
light-curve fit and the per-cell gravity-darkening factors. Every entry point builds one:
``dopplermap invert`` (a target TOML, :func:`from_config`), ``dopplermap lambda`` and
``dopplermap grid`` (the same TOML, an ``.npz`` problem file, or the demo star), the
uncertainties, the joint fit and ``dopplermap invert-seed`` (the seed's pickles or their
``.npz``, :func:`from_seed`: a problem whose synthesis form is given as data). A grid point is the same problem with other stellar
parameters (:meth:`Problem.replace`), so nothing a configuration asks for (gravity
darkening, a light curve, the synthesis method, the weights) is lost on the way.

A Problem pickles without its derived arrays (a Dask worker rebuilds them), so shipping it
to a worker costs the size of the data, not of the synthesis cube.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import zipfile
from pathlib import Path

import numpy as np

from . import regularisers
from ._repr import compact
from .atmosphere import passband_limb_darkening, passband_planck_ratio
from .atomic import write_file
from .broadening import apply_cell_factors, equivalent_width_kms, line_profiles
from .choices import CUBE_DTYPES, REGULARISERS, RV_SHIFTS, SPOT_COMPONENTS, SYNTHESIS_METHODS, check
from .constants import DAY_S, G_SI, M_SUN_KG, R_SUN_KM
from .diagnostics import check_spot_contrast, check_wavelength, fields_checked
from .errors import DopplermapInputError, MissingFileError, warn
from .errorscale import ErrorScale, error_scale_for, scale_errors
from .geometry import StarParams
from .gravity import gravity_darkening_factors, log_g, star_surface, temperature_ratio
from .grid import SurfaceGrid, check_subdivide, make_grid, with_surface
from .io.lightcurve import LightCurveRead, LightCurveReading, load_lightcurve, reading_options
from .io.lsd import load_profiles, read_local_profile
from .io.times import epoch_times
from .lightcurve import (
    LC_MADD_RATE,
    LC_WARN_WORK,
    TYPICAL_EVALUATIONS,
    LightCurveBand,
    LightCurveSet,
    auto_bin,
    lightcurve_plan,
    precompute_lightcurve,
)
from .model import Precomputed, precompute
from .objective import Layout, LineSets, NoLines, Observations, solve_form
from .plan import Plan
from .profiles import Component, ComponentSet, LimbDarkening, gaussian, intensity_ratio, voigt
from .roche import fill_from_separation
from .simulate import DEMO_SPOTS, demo_setup, simulate
from .windows import WindowedLightCurve, Windows, window_precomputed

__all__ = ["Settings", "GravityDarkening", "LightCurveData", "LineData", "Problem", "require_problem", "from_config",
           "from_npz", "from_seed", "demo_problem", "save_npz", "NPZ_SCALARS"]

# built on first use from the fields; left out of a pickle (a Dask worker rebuilds them)
_CACHED = ("pre", "lightcurve", "line_factors", "lc_factors", "plan", "_solve_forms")


@dataclasses.dataclass(frozen=True)
class Settings:
    """Solver settings of a problem; the keyword arguments of :func:`dopplermap.invert`."""

    lmbd: float = 1.0
    regulariser: str = "mem"
    tol: float = 1e-5
    maxiter: int = 1000
    fit_rv: bool = True
    fit_amp: bool = True
    line_weight: float = 1.0
    lc_weight: float = 1.0
    solver: str = "auto"
    fit_components: tuple[str, ...] = SPOT_COMPONENTS
    offset_sigma: float | tuple | None = None  # Gaussian prior on the offsets (dopplermap.objective); per set: a tuple
    lmbd_time: float = 0.0  # weight of the coupling of neighbouring time windows' maps (dopplermap.windows)
    time_coupling: str = "quadratic"  # its kind: "quadratic" or "relative_entropy" (dopplermap.windows)

    def replace(self, **changes) -> Settings:
        """A copy with ``changes``; ``None`` values are ignored (unset command-line options)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def invert_kwargs(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class GravityDarkening:
    """Gravity darkening on a Roche surface (see :mod:`dopplermap.gravity`): von Zeipel's
    ``beta`` or ``law = "elr"``; ``mass`` (M_sun) sets the Roche model of a spherical grid
    (a grid with a distorted surface carries its own gravity).

    ``temperatures``: (phot, cool, hot) K; ``line_wavelength_nm`` / ``lc_wavelength_nm``:
    where the intensity factors of the line band and of the light-curve band are evaluated;
    ``lc_passband``: the light-curve band's passband, whose response then replaces
    ``lc_wavelength_nm`` (blackbody ratios over it, :func:`dopplermap.atmosphere.passband_planck_ratio`).
    """

    mass: float | None
    beta: float
    temperatures: tuple[float, float, float]
    line_wavelength_nm: float
    lc_wavelength_nm: float | None = None
    law: str = "von_zeipel"
    lc_passband: str | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class LightCurveData:
    """An observed light curve and its band: times (days), flux and err (n_lc,); the one
    light-curve input of a :class:`Problem` (a configuration's ``[[lightcurves]]`` become these).

    :meth:`load` builds one from a file or a lightkurve ``LightCurve`` /
    ``LightCurveCollection`` (times converted to BJD_TDB, quality mask; what the reader did,
    a :class:`~dopplermap.io.lightcurve.LightCurveRead`, kept in ``read``).
    """

    times: np.ndarray
    flux: np.ndarray
    err: np.ndarray
    band: object  # dopplermap.lightcurve.LightCurveBand
    fit_dilution: bool = False
    source: str = "light curve"
    read: LightCurveRead | None = None  # what reading did: counts read, dropped, binned
    name: str = "lightcurve"
    weight: float = 1.0  # of this band among several (dopplermap.lightcurve.LightCurveSet)
    wavelength_nm: float | None = None  # gravity-darkening factors; None: GravityDarkening.lc_wavelength_nm
    segment: np.ndarray | None = None  # (n_lc,) each point's segment (sector, file): a free scale each
    passband: str | None = None  # gravity-darkening factors over its response (before wavelength_nm)
    atmosphere_logg: float | None = None  # band limb darkening from the table: each gravity-darkened cell's own

    def __repr__(self) -> str:
        return compact(self, ("name", "times", "flux", "source"))

    @classmethod
    def load(cls, source, band, *, star=None, n_cell: int | None = None, reading: LightCurveReading | None = None,
             **given) -> LightCurveData:
        """The light curve of ``source`` (a file, or a lightkurve ``LightCurve`` /
        ``LightCurveCollection``) in ``band``.

        ``given``: this class's fields (``name``, ``weight``, ``fit_dilution``,
        ``wavelength_nm``, ``passband``, ``atmosphere_logg``), the ephemeris ``period`` and
        ``t0`` (default the star's), and, unless ``reading`` (a
        :class:`~dopplermap.io.lightcurve.LightCurveReading`) is given, its fields
        (``column``, ``quality_bitmask``, ``time_scale``, ``bin_width``, ``bin_unit``, ...) as
        in :func:`dopplermap.io.lightcurve.load_lightcurve`.

        ``bin_width="auto"`` (the configuration's ``lightcurve_bin = "auto"``) bins to the
        resolution a map of ``n_cell`` cells of ``star`` can use
        (:func:`dopplermap.lightcurve.auto_bin`; both needed). ``star`` also gives the period
        and t0 of phase bins."""
        fields = {k: given.pop(k) for k in _LOAD_FIELDS if k in given}
        period = given.pop("period", None if star is None else star.period)
        t0 = given.pop("t0", None if star is None else star.t0)
        r = reading_options("LightCurveData.load", reading, given)
        if isinstance(r.bin_width, str):
            if r.bin_width != "auto":
                raise DopplermapInputError(f"{source}: bin_width must be a width or 'auto', got {r.bin_width!r}")
            if star is None or n_cell is None:
                raise DopplermapInputError(f"{source}: bin_width = 'auto' bins to the resolution the map can use: give "
                                           "star= (its period and differential rotation) and n_cell= (the grid's cells)")
            width, unit = auto_bin(int(n_cell), star.period, float(star.domega))
            r = r.replace(bin_width=width, bin_unit=unit)
        data = load_lightcurve(source, r, period=period, t0=t0)
        return cls(times=data.time, flux=data.flux, err=data.err, band=band, source=data.source, read=data,
                   segment=data.segment, **fields)


_LOAD_FIELDS = ("name", "weight", "fit_dilution", "wavelength_nm", "passband", "atmosphere_logg")


@dataclasses.dataclass(frozen=True, eq=False)
class LineData:
    """One line data set of several (an instrument, an LSD mask): its profiles and local lines.

    ``weight``: of this set in the loss (see :mod:`dopplermap.objective`); ``wavelength_nm``:
    where its gravity-darkening factors are evaluated (None: ``GravityDarkening.line_wavelength_nm``).
    """

    obs: Observations
    components: ComponentSet
    name: str = "lines"
    weight: float = 1.0
    wavelength_nm: float | None = None
    files: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return compact(self, ("name", "obs", "weight", "wavelength_nm"))


@dataclasses.dataclass(frozen=True, eq=False)
class Problem:
    """One inversion problem; derived arrays are built on first use and cached.

    Attributes:
        grid, star, obs, components: the surface, the star, the line profiles and the
            local-line components of phot, cool and hot (None with ``lines``).
        lines: several line data sets (:class:`LineData`) fitted with one map, instead of
            ``obs`` and ``components``; ``pre`` is then a :class:`~dopplermap.objective.LineSets`
            and :attr:`observations` a tuple.
        rv_shift: ``"interpolate"`` (the seed's shift of the disc-integrated profile) or
            ``"exact"`` (the local profiles moved by rv; binned synthesis), see
            :func:`dopplermap.precompute`.
        method: synthesis method for :func:`dopplermap.precompute` (``"auto"``, ``"dense"``,
            ``"binned"``).
        gravity: gravity darkening, or None.
        lightcurve_data: an observed light curve fitted jointly, a tuple of them (several
            bands, :class:`~dopplermap.lightcurve.LightCurveSet`), or None.
        settings: solver settings (lambda, regulariser, tolerance, weights, solver).
        t_phot, wavelength_nm: photosphere temperature (K) and line wavelength (nm), needed
            to turn ``t_cool``/``t_hot`` grid values into Planck intensity ratios.
        files: the profile files read, source: where the problem came from.
        form: a synthesis form given as data (:class:`dopplermap.model.Precomputed`, e.g. the
            seed's pickles, :func:`from_seed`), used as ``pre`` instead of one built from the
            grid, star and components; ``star`` and ``components`` are then None (the form
            holds what they would give) and ``grid`` holds the cells' centres when known.
        error_scale: the :class:`~dopplermap.errorscale.ErrorScale` of each line data set
            whose errors were scaled (:meth:`scale_errors`; ``[data] error_scale``), or a
            pending one that a fit must still find (:func:`dopplermap.search.apply_error_scale`).
        mass: the star's mass (M_sun) where known (``[star] mass``): a grid search then
            refuses points beyond break-up and reports log g beside the implied radius
            (:attr:`stellar_mass` falls back on the gravity darkening's mass).
        windows: time windows (:class:`dopplermap.windows.Windows`), one map each, coupled
            by ``settings.lmbd_time``; None: one static map. The parameter vector then holds
            every window's maps (:mod:`dopplermap.windows`); ``pre`` is windowed.
        cube_dtype: the dtype of the dense cube the solves iterate on (one of
            :data:`dopplermap.choices.CUBE_DTYPES`): ``"auto"`` (float32 at ``tol >= 1e-6``, else
            float64), ``"float32"``, ``"float64"``, or None (the model as built). Decided once,
            with the batch form and mode, in :attr:`plan` (shown in a run's summary); a solve's
            ``cube_dtype=`` keyword overrides it for that solve.
        subdivide: each map cell's line profiles integrated over ``subdivide x subdivide``
            sub-cells (:func:`dopplermap.precompute`'s ``subdivide``; the dense
            synthesis): the model of a finer grid for the map's parameters. 1: none.
    """

    grid: SurfaceGrid
    star: StarParams
    obs: Observations | None
    components: ComponentSet | None
    method: str = "auto"
    gravity: GravityDarkening | None = None
    lightcurve_data: LightCurveData | tuple[LightCurveData, ...] | None = None
    settings: Settings = Settings()
    t_phot: float | None = None
    wavelength_nm: float | None = None
    files: tuple[str, ...] = ()
    source: str = "<problem>"
    lines: tuple[LineData, ...] = ()
    rv_shift: str = "interpolate"
    form: Precomputed | None = None
    error_scale: tuple[ErrorScale, ...] = ()
    mass: float | None = None
    windows: Windows | None = None
    cube_dtype: str | None = "auto"
    subdivide: int = 1

    def __repr__(self) -> str:
        obs = self.observations
        sizes = (f"{obs.n_epoch}x{obs.n_vel}" if not isinstance(obs, tuple)
                 else " + ".join(f"{o.n_epoch}x{o.n_vel}" for o in obs))
        return compact(self, ("star", "method", "source"), n_cell=self.grid.n_cell if self.grid is not None else None,
                       epochs_x_velocities=sizes, lightcurve=self.lightcurve_data is not None or None)

    def __post_init__(self):
        check(self.method, SYNTHESIS_METHODS, f"{self.source}: method")
        check(self.cube_dtype, CUBE_DTYPES, f"{self.source}: cube_dtype")
        if self.windows is not None and not isinstance(self.windows, Windows):
            raise DopplermapInputError(f"{self.source}: windows takes dopplermap.windows.Windows, got "
                                       f"{type(self.windows).__name__}")
        if self.mass is not None and not (isinstance(self.mass, (int, float)) and math.isfinite(self.mass)
                                          and self.mass > 0):
            raise DopplermapInputError(f"{self.source}: mass must be a finite number > 0 M_sun, got {self.mass!r}")
        lcs = self.lightcurve_data if isinstance(self.lightcurve_data, tuple) else (self.lightcurve_data,)
        for d in lcs:
            if d is not None and not isinstance(d, LightCurveData):
                raise DopplermapInputError(f"{self.source}: lightcurve_data takes dopplermap.problem.LightCurveData "
                                           f"(or a tuple of them), got {type(d).__name__}; a file or a lightkurve light "
                                           "curve: LightCurveData.load(source, band)")
        check(self.rv_shift, RV_SHIFTS, f"{self.source}: rv_shift")
        self._check_subdivide()
        if self.windows is not None:
            folded = [d for d in self.lightcurve_bands if d.read is not None and d.read.folded]
            if folded:  # a phase bin's time is in the first rotation: every point would read one window's map
                raise DopplermapInputError(f"{self.source}: light curve {folded[0].name!r} is binned in rotation phase "
                                           f"({folded[0].read.binned}), which folds every rotation into one; time "
                                           "windows need it binned in time (bin_unit = \"d\", or bin = \"auto\" "
                                           "with the windows set)")
        if self.form is None:
            if self.grid is None or self.star is None:
                raise DopplermapInputError(f"{self.source}: a problem needs a grid and a star (or a given form)")
            single = (self.obs is not None, self.components is not None)
            if self.photometry_only:
                if self.method != "auto" or self.rv_shift != "interpolate":
                    raise DopplermapInputError(f"{self.source}: method and rv_shift choose how line profiles are "
                                               "synthesised; a problem of light curves alone has none")
                if self.settings.offset_sigma is not None:
                    raise DopplermapInputError(f"{self.source}: offset_sigma is a prior on the line profiles' "
                                               "offsets; a problem of light curves alone has none")
            elif (self.lines and any(single)) or (not self.lines and not all(single)):
                what = "both" if self.lines else "neither" if not any(single) else "only one of obs and components"
                raise DopplermapInputError(f"{self.source}: give obs and components (one line data set), lines "
                                           f"(several line data sets) or light curves alone (lightcurve_data), "
                                           f"got {what}")
        else:
            if isinstance(self.form, LineSets):  # a Problem's several sets are built from lines, not given
                raise DopplermapInputError(f"{self.source}: form takes one line data set's model "
                                           f"(dopplermap.model.Precomputed), got a LineSets of {self.form.n_sets} sets; "
                                           "for several sets give lines (one LineData each) with grid and star, "
                                           "or call dopplermap.invert(line_sets, obs_tuple)")
            if not isinstance(self.form, Precomputed):
                raise DopplermapInputError(f"{self.source}: form takes a dopplermap.model.Precomputed (e.g. from "
                                           f"dopplermap.precompute), got {type(self.form).__name__}")
            if self.obs is not None and not isinstance(self.obs, Observations):
                raise DopplermapInputError(f"{self.source}: obs takes dopplermap.Observations, got "
                                           f"{type(self.obs).__name__}")
            if self.lines or self.obs is None:
                raise DopplermapInputError(f"{self.source}: a problem with a given synthesis form needs its one "
                                           "line data set's obs (and no lines)")
            if self.gravity is not None or self.star is not None or self.components is not None:
                raise DopplermapInputError(f"{self.source}: a problem with a given synthesis form takes no star, "
                                           "components or gravity darkening (the form already holds them)")
            if self.lightcurve_data is not None:
                raise DopplermapInputError(f"{self.source}: a light curve needs the star; a problem with a given "
                                           "synthesis form has none")
            if (self.form.n_epoch, self.form.n_vel) != (self.obs.n_epoch, self.obs.n_vel):
                raise DopplermapInputError(f"{self.source}: the given form has {self.form.n_epoch} epochs x "
                                           f"{self.form.n_vel} velocities, the observations {self.obs.n_epoch} x "
                                           f"{self.obs.n_vel}")
            if self.grid is not None and self.grid.n_cell != self.form.n_cell:
                raise DopplermapInputError(f"{self.source}: the grid has {self.grid.n_cell} cells, the given form "
                                           f"{self.form.n_cell}")

    @property
    def stellar_mass(self) -> float | None:
        """The star's mass (M_sun): :attr:`mass`, else the gravity darkening's, else None."""
        if self.mass is not None:
            return float(self.mass)
        return float(self.gravity.mass) if self.gravity is not None else None

    @property
    def photometry_only(self) -> bool:
        """Whether the problem fits light curves alone (no line profiles: ``obs``,
        ``components`` and ``lines`` absent, ``lightcurve_data`` given). Its map is a
        longitude / contrast map: see :data:`PHOTOMETRY_LIMITS`."""
        return (self.form is None and self.obs is None and self.components is None and not self.lines
                and self.lightcurve_data is not None)

    @property
    def multi(self) -> bool:
        """Whether the problem has several line data sets (``lines``)."""
        return bool(self.lines)

    @property
    def observations(self):
        """``obs``, or the tuple of every line data set's observations."""
        return tuple(ld.obs for ld in self.lines) if self.lines else self.obs

    @property
    def intensities(self) -> tuple[float, float, float] | None:
        """Continuum intensities (phot, cool, hot) of the line band (several sets: the first
        set's), for the brightness map; None for a given form (the seed's files)."""
        if self.photometry_only:  # the (first) light-curve band's
            d = self.lightcurve_data if isinstance(self.lightcurve_data, LightCurveData) else self.lightcurve_data[0]
            return tuple(float(x) for x in d.band.intensity)
        comps = self.lines[0].components if self.lines else self.components
        return None if comps is None else tuple(float(c.intensity) for c in comps)

    def single(self, what: str) -> Problem:
        """This problem, or a clear error where ``what`` handles one line data set only."""
        if self.lines:
            raise DopplermapInputError(f"{self.source}: {what}: one line data set only, this problem has "
                                       f"{len(self.lines)} ([[lines]])")
        return self

    # ------------------------------------------------------------ derived, built once

    @functools.cached_property
    def line_factors(self):
        """(n_cell, 3) gravity-darkening intensity factors of the line band, or None."""
        return self._factors(self.gravity.line_wavelength_nm) if self.gravity is not None else None

    @functools.cached_property
    def lc_factors(self):
        """(n_cell, 3) gravity-darkening factors of the light-curve band, or None."""
        g = self.gravity
        if g is None:
            return None
        return self._factors(g.lc_wavelength_nm if g.lc_wavelength_nm is not None else g.line_wavelength_nm,
                             g.lc_passband)

    def _factors(self, wavelength_nm, passband=None):
        g = self.gravity
        if passband is None:
            return gravity_darkening_factors(self.grid, self.star, g.mass, g.temperatures, wavelength_nm, g.beta, g.law)
        # the band's blackbody ratio over its response, as its spot contrasts
        t = temperature_ratio(self.grid, self.star, g.mass, beta=g.beta, law=g.law)
        temps = np.asarray(g.temperatures, dtype=float)
        return passband_planck_ratio(temps[None, :] * t[:, None], temps[None, :], passband)

    def _cell_limb_darkening(self, factors, d: LightCurveData) -> np.ndarray:
        """(n_cell, 3, 3): each cell's gravity-darkening factor and the power-2 law of the
        model-atmosphere table at its own temperature (component temperature times the cell's
        ``T / T_pole``) and the star's log g, for a band with ``limb_darkening = 'atmosphere'``."""
        g = self.gravity
        t = temperature_ratio(self.grid, self.star, g.mass, beta=g.beta, law=g.law)
        out = np.empty((self.grid.n_cell, 3, 3))
        out[..., 0] = np.broadcast_to(np.asarray(factors, dtype=float).reshape(self.grid.n_cell, -1),
                                      (self.grid.n_cell, 3))
        for k, temp in enumerate(g.temperatures):
            cell_t = temp * t
            uniq, where = np.unique(cell_t, return_inverse=True)  # latitudes share temperatures
            try:
                coeffs = np.array([passband_limb_darkening(d.passband, x, d.atmosphere_logg).coeffs for x in uniq])
            except DopplermapInputError as exc:
                raise DopplermapInputError(f"{d.source}: {d.passband} limb darkening of the gravity-darkened cells: "
                                           f"{exc}") from None
            out[:, k, 1:] = coeffs[where.ravel()]
        return out

    def _precompute(self, obs, components, wavelength_nm=None):
        pre = precompute(self.grid, self.star, np.asarray(obs.times), np.asarray(obs.vels), components,
                         method=self.method, rv_shift=self.rv_shift, subdivide=self.subdivide)
        if self.gravity is None:
            return pre
        factors = self.line_factors if wavelength_nm is None else self._factors(wavelength_nm)
        return apply_cell_factors(pre, factors)

    @functools.cached_property
    def pre(self):
        """The synthesis form of the line profiles (:class:`dopplermap.model.Precomputed`), or
        with ``lines`` one per set (:class:`dopplermap.objective.LineSets`); a given ``form`` as it is."""
        if self.windows is not None:
            lc_times = np.concatenate([np.asarray(d.times) for d in self.lightcurve_bands] or [np.zeros(0)])
            edges = np.asarray(self.windows.edges)
            inside = lc_times.size and edges[0] <= lc_times.min() and lc_times.max() <= edges[-1]
            # points outside the windows are refused where the light curve is built, in its own words
            lc_index = self.window_index(lc_times) if inside and not self.photometry_only else None
            self.windows.check_filled(self.window_index(), lmbd_time=self.settings.lmbd_time,
                                      where=f"{self.source}: windows", lines=not self.photometry_only, lc_index=lc_index)
        if self.form is not None:
            return self._windowed(self.form, self.obs, self.source)
        if self.photometry_only:
            return NoLines.of_grid(self.grid, self.n_window)
        if not self.lines:
            return self._windowed(self._precompute(self.obs, self.components), self.obs, self.source)
        return LineSets.create([self._windowed(self._precompute(ld.obs, ld.components, ld.wavelength_nm), ld.obs,
                                               f"{self.source}: [[lines]] {ld.name!r}") for ld in self.lines],
                               weights=[ld.weight for ld in self.lines], names=[ld.name for ld in self.lines])

    @property
    def n_window(self) -> int:
        """The number of time windows (1: one static map)."""
        return 1 if self.windows is None else self.windows.n_window

    def window_index(self, times=None) -> np.ndarray:
        """(n,) window of each of ``times`` (default: every line data set's epochs, set after set;
        light curves alone: every light-curve point, band after band)."""
        if times is None and self.photometry_only:
            times = np.concatenate([np.asarray(d.times) for d in self.lightcurve_bands])
        elif times is None:
            times = np.concatenate([np.asarray(o.times) for o in
                                    (self.observations if self.lines else (self.obs,))])
        if self.windows is None:
            return np.zeros(np.size(times), np.int32)
        return self.windows.index(times, where=f"{self.source}: windows")

    def _windowed(self, pre, obs, where):
        if self.windows is None:
            return pre
        idx = self.windows.index(np.asarray(obs.times), where=f"{where}: windows")
        return window_precomputed(pre, idx, self.windows.n_window)

    @property
    def layout(self) -> Layout:
        """How the parameter vector maps onto this problem's surface and epochs."""
        return Layout(self.pre.n_cell, self.pre.n_epoch)

    @functools.cached_property
    def plan(self) -> Plan:
        """The engine's choices for this problem (:class:`dopplermap.plan.Plan`), made once."""
        return Plan.of(self.pre, self.settings.tol, self.cube_dtype)

    def solve_form(self, cube_dtype="float32", *, blocked: bool = False):
        """The form of :attr:`pre` a solver iterates on (:func:`dopplermap.objective.solve_form`:
        dense models folded, or blocked, in ``cube_dtype``), built once per problem and
        choice, so a lambda sweep, a bootstrap or a solve's final evaluation fold the dense
        cube once."""
        forms = self.__dict__.setdefault("_solve_forms", {})
        key = (cube_dtype, bool(blocked))
        if key not in forms:
            forms[key] = solve_form(self.pre, cube_dtype, blocked=blocked)
        return forms[key]

    @functools.cached_property
    def lightcurve(self):
        """The precomputed light-curve fit (:class:`dopplermap.lightcurve.LightCurveFit`), one
        per band (:class:`~dopplermap.lightcurve.LightCurveSet`) for a tuple, or None."""
        d = self.lightcurve_data
        if d is None:
            return None
        self._warn_lightcurve_cost()
        if isinstance(d, LightCurveData):
            fit = self._lightcurve(d)
        else:
            fit = LightCurveSet.create([self._lightcurve(b) for b in d], weights=[b.weight for b in d],
                                       names=[b.name for b in d])
        if self.windows is None:
            return fit
        # each point reads its window's map (dopplermap.windows)
        return WindowedLightCurve.create(fit, self.windows, where=f"{self.source}: light curve")

    @property
    def lightcurve_bands(self) -> tuple[LightCurveData, ...]:
        """The light curves (one per band), ``()`` without."""
        d = self.lightcurve_data
        return () if d is None else (d,) if isinstance(d, LightCurveData) else tuple(d)

    def lightcurve_estimate(self, bands=None) -> dict | None:
        """What the light-curve model will cost, before it is built: ``rows`` (its phase nodes
        or points, all bands), ``bytes`` (held), ``work`` (multiply-adds per evaluation, value
        and gradient), ``seconds`` (over :data:`~dopplermap.lightcurve.TYPICAL_EVALUATIONS`
        evaluations at :data:`~dopplermap.lightcurve.LC_MADD_RATE`), ``line_work`` (the line
        profiles' dense-equivalent multiply-adds per evaluation, 0 without) and ``points``;
        None without a light curve. ``bands``: of these of :attr:`lightcurve_bands` only."""
        if self.lightcurve_data is None:
            return None
        n_cell = self.grid.n_cell
        bands = self.lightcurve_bands if bands is None else tuple(bands)
        plans = [lightcurve_plan(self.grid, self.star, np.asarray(d.err) / np.mean(d.flux), d.flux.size,
                                at_times=self.windows is not None or self.subdivide != 1)
                 for d in bands]
        work = sum(p["work"] for p in plans)
        obs = () if self.observations is None else (
            self.observations if isinstance(self.observations, tuple) else (self.observations,))
        return dict(points=sum(d.flux.size for d in bands), rows=sum(p["rows"] for p in plans),
                    nodes=sum(p["nodes"] or 0 for p in plans), bytes=sum(p["bytes"] for p in plans), work=work,
                    seconds=TYPICAL_EVALUATIONS * work / LC_MADD_RATE,
                    line_work=sum(4.0 * int(np.size(o.flux)) * n_cell for o in obs))

    def _warn_lightcurve_cost(self) -> None:
        """Warn when unbinned light curves will cost more per evaluation than the line
        profiles (light curves alone: more than ten times their ``bin = "auto"`` points), and
        more than :data:`~dopplermap.lightcurve.LC_WARN_WORK` multiply-adds."""
        unbinned = [d for d in self.lightcurve_bands if d.read is None or not d.read.binned]
        if not unbinned:
            return
        est = self.lightcurve_estimate(unbinned)  # theirs alone: a binned band is as fine as it should be
        if self.photometry_only:
            width, unit = auto_bin(self.grid.n_cell, self.star.period, float(self.star.domega),
                                   evolving=self.windows is not None)
            enough = 10 * (math.ceil(1.0 / width) if unit == "phase" else
                           sum(math.ceil(np.ptp(np.asarray(d.times)) / width) + 1 for d in unbinned))
            heavy = est["rows"] > enough
            versus = f"more than ten times the {enough // 10} points of bin = \"auto\""
        else:
            heavy = est["work"] > est["line_work"]
            versus = (f"{est['work'] / max(est['line_work'], 1.0):.3g} times the line profiles' "
                      f"({est['line_work']:.3g})")
        if heavy and est["work"] > LC_WARN_WORK:
            names = ", ".join(d.source for d in unbinned)
            warn(f"{self.source}: the unbinned light curve(s) {names} dominate the cost: {est['points']} points as "
                 f"{est['rows']} model rows x {self.grid.n_cell} cells, {est['work']:.3g} multiply-adds per "
                 f"evaluation, {versus}; bin them (bin = \"auto\": the resolution the map can use)")

    def _lightcurve(self, d: LightCurveData):
        factors = self.lc_factors
        if self.gravity is not None and (d.passband is not None or d.wavelength_nm is not None):
            factors = self._factors(d.wavelength_nm, d.passband)
        if self.gravity is not None and d.atmosphere_logg is not None:
            factors = self._cell_limb_darkening(factors, d)
        return precompute_lightcurve(self.grid, self.star, d.times, d.flux, d.err, d.band,
                                     cell_factors=factors, source=d.source, fit_dilution=d.fit_dilution,
                                     segment=d.segment, at_times=self.windows is not None, subdivide=self.subdivide)

    # ------------------------------------------------------------------ variations

    def _check_subdivide(self) -> None:
        try:
            m = check_subdivide(self.subdivide)
        except DopplermapInputError as exc:
            raise DopplermapInputError(f"{self.source}: {exc}") from None
        if m == 1:
            return
        why = ("the synthesis form is given as data" if self.form is not None
               else "the star's distorted surface is computed on the map's cells" if self.grid.surface is not None
               else None)
        if why is not None:
            raise DopplermapInputError(f"{self.source}: subdivide = {m}: {why}; use subdivide = 1")

    def replace(self, **changes) -> Problem:
        """The same problem with some fields replaced; derived arrays are rebuilt on use
        (kept when only ``settings`` change).

        A given form is not rebuilt from anything: other stellar parameters, components or a
        method cannot apply to it and are refused. A rotating star's Roche surface (a grid
        with a single star's :mod:`dopplermap.roche` surface and a known mass) is rebuilt for
        a new star: its distortion follows the period and radius."""
        fixed = sorted(k for k in ("grid", "star", "components", "method", "gravity", "rv_shift", "subdivide")
                       if k in changes)
        if self.form is not None and "form" not in changes and fixed:
            raise DopplermapInputError(f"{self.source}: the synthesis form is given as data; changing "
                                       f"{', '.join(fixed)} would not change it")
        surf = None if self.grid is None else self.grid.surface
        if ("star" in changes and "grid" not in changes and surf is not None and not surf.q
                and self.stellar_mass is not None):
            # a rotating star's shape follows its period and radius: rebuilt for the new star
            changes["grid"] = with_surface(self.grid, star_surface(self.grid, changes["star"], mass=self.stellar_mass))
        new = dataclasses.replace(self, **changes)
        if set(changes) <= {"settings", "cube_dtype"}:  # solver choices enter no derived array: keep those
            # built (but the plan: its cube dtype follows the tolerance and the choice)
            new.__dict__.update({k: v for k, v in self.__dict__.items() if k in _CACHED and k != "plan"})
        return new

    @property
    def set_names(self) -> tuple[str, ...]:
        """The line data sets' names (``("lines",)`` for one set, ``()`` for light curves alone)."""
        if self.photometry_only:
            return ()
        return tuple(ld.name for ld in self.lines) if self.lines else ("lines",)

    def scale_errors(self, scales) -> Problem:
        """This problem with each line data set's errors multiplied by its factor.

        ``scales``: one number or :class:`~dopplermap.errorscale.ErrorScale` per line data set
        (a single one for one set), or a dict of some sets' by name; a pending scale (no factor
        yet) is kept as a record and scales nothing. The derived arrays are kept (the errors
        enter none of them). :attr:`error_scale` then holds the record; scaling a set twice is
        refused."""
        names = self.set_names
        if isinstance(scales, dict):
            unknown = sorted(set(scales) - set(names))
            if unknown:
                raise DopplermapInputError(f"{self.source}: no line data set {unknown[0]!r} (sets: {', '.join(names)})")
            scales = [scales.get(n) for n in names]
        else:
            scales = list(scales) if isinstance(scales, (list, tuple)) else [scales]
            if len(scales) != len(names):
                raise DopplermapInputError(f"{self.source}: {len(scales)} error scales for {len(names)} line data set(s)")
        scales = [s if s is None or isinstance(s, ErrorScale) else
                  ErrorScale(factor=float(s), method="given", name=n)
                  for s, n in zip(scales, names, strict=True)]
        scales = [s if s is None else dataclasses.replace(s, name=n) for s, n in zip(scales, names, strict=True)]
        done = {e.name for e in self.error_scale if not e.pending}
        again = [s.name for s in scales if s is not None and not s.pending and s.name in done]
        if again:
            raise DopplermapInputError(f"{self.source}: the errors of {again[0]!r} are already scaled "
                                       f"({self.error_scale_of(again[0]).describe()}); scale the unscaled problem")
        obs = [ld.obs for ld in self.lines] if self.lines else [self.obs]
        obs = [o if s is None or s.pending else scale_errors(o, s.factor) for o, s in zip(obs, scales, strict=True)]
        given = [s for s in scales if s is not None]
        kept = {e.name: e for e in self.error_scale if e.name not in {s.name for s in given}}
        kept.update({s.name: s for s in given})
        return self.with_observations(obs, error_scale=tuple(kept[n] for n in names if n in kept))

    def with_observations(self, observations, **changes) -> Problem:
        """This problem with other fluxes and errors at the same epochs and velocities (one
        :class:`~dopplermap.objective.Observations` per line data set, a list, or one): the
        derived arrays are kept, since only the epochs and velocities enter them."""
        obs = list(observations) if isinstance(observations, (list, tuple)) else [observations]
        old = [ld.obs for ld in self.lines] if self.lines else [self.obs]
        if len(obs) != len(old) or any(
                np.shape(o.flux) != np.shape(p.flux) or not np.array_equal(np.asarray(o.times), np.asarray(p.times))
                or not np.array_equal(np.asarray(o.vels), np.asarray(p.vels)) for o, p in zip(obs, old, strict=False)):
            raise DopplermapInputError(f"{self.source}: with_observations needs the same epochs and velocities as the "
                                       "problem's (another grid needs another problem)")
        if self.lines:
            changes["lines"] = tuple(dataclasses.replace(ld, obs=o) for ld, o in zip(self.lines, obs, strict=True))
        else:
            changes["obs"] = obs[0]
        new = dataclasses.replace(self, **changes)
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k in _CACHED})
        return new

    def without_lightcurves(self) -> Problem:
        """This problem with its line profiles alone (no light curve); the line model's derived
        arrays are kept (the light curves enter none of them). Itself when it has no light curve."""
        if self.lightcurve_data is None:
            return self
        if self.photometry_only:
            raise DopplermapInputError(f"{self.source}: a problem of light curves alone has no line profiles "
                                       "to keep")
        new = dataclasses.replace(self, lightcurve_data=None)
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k in ("pre", "line_factors", "_solve_forms")})
        return new

    def error_scale_of(self, name: str = "lines") -> ErrorScale | None:
        """The error scale recorded for the line data set ``name``, or None."""
        return next((e for e in self.error_scale if e.name == name), None)

    def invert_kwargs(self, **overrides) -> dict:
        """Keyword arguments of :func:`dopplermap.invert` for this problem (settings, light curve)."""
        kw = self.settings.replace(**overrides).invert_kwargs()
        kw["lightcurve"] = self.lightcurve
        return kw

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k not in _CACHED}

    def __setstate__(self, state):
        self.__dict__.update(state)


def require_problem(obj, what: str) -> Problem:
    """``obj`` if it is a :class:`Problem`; a bare model or loose parts are refused in one line."""
    if not isinstance(obj, Problem):
        raise DopplermapInputError(f"{what} takes a dopplermap.problem.Problem first, got {type(obj).__name__}; "
                                   "build one: Problem(grid=..., star=..., obs=..., components=...)")
    return obj


# ------------------------------------------------------------------ builders


def _line_components(cfg, ln=None) -> ComponentSet:
    """Line-band components of a target configuration (``ln``: a line table, default
    ``[line]``); with macroturbulence their profiles are :class:`~dopplermap.broadening.MuProfile`
    tables (RT macroturbulence and instrument, depending on mu), which
    :func:`dopplermap.precompute` handles with either method."""
    ln, temps = cfg.line if ln is None else ln, cfg.temperatures
    if ln.profile == "tabulated":
        profiles = [read_local_profile(cfg.path(f)) for f in ln.files]
    elif ln.profile == "gaussian":
        profiles = [gaussian(d, ln.fwhm) for d in ln.depth]
    else:
        profiles = [voigt(d, ln.fwhm, ln.fwhm_lorentz) for d in ln.depth]
    ew = ln.equivalent_width
    if ew is not None:
        ew = equivalent_width_kms(list(ew) if isinstance(ew, tuple) else ew, ln.wavelength_nm,
                                  "angstrom" if ln.ew_unit == "angstrom" else "km/s", "[line] equivalent_width")
    profiles = line_profiles(profiles, equivalent_width=ew, ew_method=ln.ew_method, ew_stage=ln.ew_stage,
                             resolving_power=ln.resolving_power, macroturbulence=ln.macroturbulence,
                             radial_fraction=ln.radial_fraction)
    t = (temps.phot, temps.cool, temps.hot)
    inten = ln.intensity or tuple(intensity_ratio(x, temps.phot, ln.wavelength_nm) for x in t)
    lds = [LimbDarkening(ln.limb_darkening, c) for c in (ln.ld_phot, ln.ld_cool, ln.ld_hot)]
    return ComponentSet(*[Component(p, ld, i) for p, ld, i in zip(profiles, lds, inten, strict=True)])


def _band(cfg, lcc, star=None) -> LightCurveBand:
    temps = cfg.temperatures
    if lcc.limb_darkening == "atmosphere":
        lds = _atmosphere_limb_darkening(cfg, lcc, star)
    else:
        lds = [LimbDarkening(lcc.limb_darkening, c) for c in (lcc.ld_phot, lcc.ld_cool, lcc.ld_hot)]
    if lcc.intensity is not None:
        return LightCurveBand(tuple(lds), tuple(lcc.intensity))
    if lcc.passband is not None:  # blackbody contrasts over the band's published response
        inten = tuple(passband_planck_ratio(t, temps.phot, lcc.passband) for t in (temps.phot, temps.cool, temps.hot))
        return LightCurveBand(tuple(lds), inten)
    return LightCurveBand.from_temperatures(temps.phot, temps.cool, temps.hot, lcc.wavelength_nm, lds)


def _fill_from_separation(source: str, s, star) -> float:
    """``[star] roche_fill`` from ``separation`` (R_sun) and the star's reference radius; with
    ``mass``, a warning where the rotation period is not the Keplerian orbit's over the
    synchronicity (the tide's rotation rate assumes it is)."""
    try:
        fill = fill_from_separation(s.mass_ratio, star.radius_rsun / s.separation, sync=s.synchronicity)
    except DopplermapInputError as exc:
        raise DopplermapInputError(f"{source}: [star] separation = {s.separation!r} R_sun: {exc}") from None
    if s.mass is not None:
        a_m = s.separation * R_SUN_KM * 1e3
        p_orb = 2.0 * np.pi * np.sqrt(a_m**3 / (G_SI * s.mass * (1.0 + s.mass_ratio) * M_SUN_KG)) / DAY_S
        p_rot = p_orb / s.synchronicity
        if abs(star.period / p_rot - 1.0) > 0.05:
            warn(f"{source}: [star] period = {star.period:g} d, but separation {s.separation:g} R_sun, mass "
                 f"{s.mass:g} M_sun and mass_ratio {s.mass_ratio:g} give an orbit of {p_orb:.4g} d, so a rotation "
                 f"period of {p_rot:.4g} d at synchronicity {s.synchronicity:g}; check them")
    return fill


def _table_logg(cfg, lcc, star) -> float | None:
    """The table's log g for a band with ``limb_darkening = 'atmosphere'``, else None."""
    return _atmosphere_logg(cfg, star) if lcc.limb_darkening == "atmosphere" else None


def _atmosphere_logg(cfg, star) -> float:
    """The log g at which a band's ``limb_darkening = 'atmosphere'`` reads the table."""
    s = cfg.star
    if s.logg is not None:
        return s.logg
    if s.mass is None or star is None:
        raise DopplermapInputError(f"{cfg.source}: limb_darkening = 'atmosphere' needs the star's log g: give "
                                   "[star] logg, or [star] mass (with the radius, it gives log g)")
    return log_g(s.mass, star.radius_rsun)


def _atmosphere_limb_darkening(cfg, lcc, star) -> list:
    """Each component's limb darkening in ``lcc.passband`` from the shipped model-atmosphere
    table (:mod:`dopplermap.atmosphere`) at its temperature and the star's log g."""
    t = cfg.temperatures
    logg = _atmosphere_logg(cfg, star)
    where = f"{cfg.source}: {lcc.passband} limb darkening"
    try:
        return [passband_limb_darkening(lcc.passband, temp, logg) for temp in (t.phot, t.cool, t.hot)]
    except DopplermapInputError as exc:
        raise DopplermapInputError(f"{where}: {exc}") from None


def _read_lightcurve(cfg, star, profile_times, path, fmt, column, unit, time_scale, bin_width, bin_unit, fallback,
                     quality, n_cell):
    if bin_width == "auto":  # the resolution the map can use (dopplermap.lightcurve.auto_bin)
        bin_width, bin_unit = auto_bin(n_cell, star.period, float(star.domega), evolving=cfg.map.windowed)
    path = [cfg.path(p) for p in path] if isinstance(path, tuple) else cfg.path(path)
    sky = None if cfg.star.ra is None else (cfg.star.ra, cfg.star.dec)
    reading = LightCurveReading(fmt=fmt, column=column, unit=unit, time_scale=time_scale, fallback_time_scale=fallback,
                                sky=sky, quality_bitmask=quality, bin_width=bin_width, bin_unit=bin_unit)
    return load_lightcurve(path, reading, period=star.period, t0=star.t0, profile_times=profile_times)


def _lightcurve_data(cfg, star, profile_times, time_scale, n_cell):
    """The ``[[lightcurves]]`` (a tuple, one per band) or None. A parsed configuration holds
    no ``[data] lightcurve``: :func:`dopplermap.config.parse_config` maps it to one table."""
    if cfg.data is not None and cfg.data.lightcurve is not None:
        raise DopplermapInputError(f"{cfg.source}: [data] lightcurve reaches the problem unmapped: read the target "
                                   "with dopplermap.config.load_config or parse_config, which make it a [[lightcurves]] table")
    if not cfg.lightcurves:
        return None
    out = []
    for lc in cfg.lightcurves:
        data = _read_lightcurve(cfg, star, profile_times, lc.file, lc.format, lc.column, lc.unit, lc.time_scale,
                                lc.bin, lc.bin_unit, time_scale, lc.quality_bitmask, n_cell)
        out.append(LightCurveData(times=data.time, flux=data.flux, err=data.err, band=_band(cfg, lc, star),
                                  fit_dilution=lc.fit_dilution, source=data.source, read=data, name=lc.name,
                                  weight=lc.weight, wavelength_nm=lc.wavelength_nm, segment=data.segment,
                                  passband=lc.passband, atmosphere_logg=_table_logg(cfg, lc, star)))
    return tuple(out)


def _check_config_values(cfg) -> None:
    """The configuration's temperatures, intensities and wavelengths, checked under their
    field names (the objects built from them then skip the same checks)."""
    src, t = cfg.source, cfg.temperatures
    fitted = tuple(cfg.inversion.fit_components)
    check_spot_contrast((t.phot, t.cool, t.hot), what="[temperatures] phot, cool, hot", unit=" K", where=src,
                        fitted=fitted)
    bands = [(f"[[lines]] {ls.name!r} line" if cfg.lines else "[line]", ls.line) for ls in cfg.line_sets()]
    bands += [(f"[[lightcurves]] {lc.name!r}", lc) for lc in cfg.lightcurves] or [("[lightcurve]", cfg.lightcurve)]
    for sec, band in bands:
        check_wavelength(band.wavelength_nm, f"{src}: {sec} wavelength_nm")
        if band.intensity is not None:
            check_spot_contrast(band.intensity, what=f"{sec} intensity (phot, cool, hot)", where=src, fitted=fitted)


def _warn_reused_files(source: str, what: str, files_of: dict) -> None:
    """A warning naming each file that several data sets (``files_of``: set name -> files) read."""
    sets_of: dict[str, list[str]] = {}
    for name, files in files_of.items():
        for f in files:
            sets_of.setdefault(str(Path(f).resolve()), []).append(name)
    twice = {f: names for f, names in sets_of.items() if len(names) > 1}
    if twice:
        listed = "; ".join(f"{Path(f).name} in {', '.join(map(repr, names))}" for f, names in list(twice.items())[:3])
        more = f" and {len(twice) - 3} more" if len(twice) > 3 else ""
        warn(f"{source}: {len(twice)} file(s) are read by more than one {what} table, so their data are fitted "
             f"once per table (they weigh double): {listed}{more}; list each file in one table")


def _windows(mp, star, times, source) -> Windows | None:
    """The ``[map]`` time windows over the profiles' epochs (BJD_TDB), or None."""
    where = f"{source}: [map]"
    if mp.windows is not None:
        return Windows.count(mp.windows, times, where=f"{where} windows")
    if mp.window_rotations is not None:
        return Windows.rotations(mp.window_rotations, times, star.period, star.t0, where=f"{where} window_rotations")
    if mp.window_edges:
        return Windows.from_cycles(mp.window_edges, star.period, star.t0, where=f"{where} window_edges")
    if mp.window_gap is not None:
        return Windows.gaps(mp.window_gap, times, where=f"{where} window_gap")
    return None


def from_config(cfg) -> Problem:
    """The problem a target configuration (:class:`dopplermap.config.TargetConfig`) describes:
    one line data set (``[data]`` and ``[line]``) or several (``[[lines]]``, :class:`LineData`)."""
    _check_config_values(cfg)
    with fields_checked():  # checked above under their names; the objects built from them repeat nothing
        return _from_config(cfg)


def _from_config(cfg) -> Problem:
    s = cfg.star
    sets, t0 = [], None
    for ls in cfg.line_sets():
        sub = dataclasses.replace(cfg, data=ls.data, line=ls.line)
        where = cfg.source if not cfg.lines else f"{cfg.source}: [[lines]] {ls.name!r}"
        obs, files = load_profiles(sub)  # files, epochs, systemic velocity and window of this set
        # every time to the internal BJD_TDB, once (dopplermap.io.times)
        times, t0_set = epoch_times(obs.times, s.t0, time_scale=ls.data.time_scale, t0_scale=s.t0_scale, ra=s.ra,
                                    dec=s.dec, period=s.period, where=where)
        if t0 is not None and abs(t0_set - t0) > 1e-9:
            raise DopplermapInputError(f"{cfg.source}: [star] t0 = {s.t0!r} means BJD_TDB {t0!r} in the first data "
                                       f"set's time_scale but {t0_set!r} in {ls.name!r}'s ({ls.data.time_scale}): "
                                       "give [star] t0_scale")
        t0 = t0_set
        obs = Observations.create(times, obs.vels, obs.flux, obs.err, source=where)
        sets.append(LineData(obs=obs, components=_line_components(cfg, ls.line), name=ls.name, weight=ls.weight,
                             wavelength_nm=float(ls.line.wavelength_nm), files=tuple(files)))
    if not sets:  # light curves alone: t0 from its declared scale (else the [data] time_scale, else BJD_TDB)
        scale = cfg.data.time_scale if cfg.data is not None else "BJD_TDB"
        _, t0 = epoch_times(np.zeros(0), s.t0, time_scale=scale, t0_scale=s.t0_scale, ra=s.ra, dec=s.dec,
                            period=s.period, where=cfg.source)
    if cfg.lines:
        _warn_reused_files(cfg.source, "[[lines]]", {ld.name: ld.files for ld in sets})
    if cfg.lightcurves:
        _warn_reused_files(cfg.source, "[[lightcurves]]",
                           {lc.name: [cfg.path(f) for f in (lc.file if isinstance(lc.file, tuple) else (lc.file,))]
                            for lc in cfg.lightcurves})
    star = StarParams(inclination=s.inclination, vsini=s.vsini, period=s.period, t0=t0, domega=s.domega,
                      radius=s.radius, name=s.name)
    # [data] error_scale: a factor, the continuum's scatter, or pending (dopplermap.search.apply_error_scale)
    scales = [None if ls.data.error_scale is None else
              error_scale_for(ls.data.error_scale, ld.obs, ld.components, star.vsini_kms, name=ld.name,
                              where=f"{cfg.source}: " + (f"[[lines]] {ls.name!r} data" if cfg.lines else "[data]"))
              for ls, ld in zip(cfg.line_sets(), sets, strict=True)]
    sets = [ld if e is None or e.pending else dataclasses.replace(ld, obs=scale_errors(ld.obs, e.factor))
            for ld, e in zip(sets, scales, strict=True)]
    scales = tuple(e for e in scales if e is not None)
    temps = (cfg.temperatures.phot, cfg.temperatures.cool, cfg.temperatures.hot)
    first = cfg.line_sets()[0] if sets else None
    lcc = cfg.lightcurves[0] if cfg.lightcurves else cfg.lightcurve  # each band's own factors: Problem._lightcurve
    lc_nm = lcc.wavelength_nm
    line_nm = first.line.wavelength_nm if first is not None else lc_nm
    gravity = None
    if cfg.gravity_darkening.enabled:
        gravity = GravityDarkening(mass=s.mass, beta=cfg.gravity_darkening.beta, temperatures=temps,
                                   line_wavelength_nm=line_nm,
                                   lc_wavelength_nm=lcc.wavelength_nm, law=cfg.gravity_darkening.law,
                                   lc_passband=lcc.passband)
    inv = cfg.inversion
    # each set's offsets get its own [[lines]] offset_sigma, else the [inversion] one
    sigmas = tuple(inv.offset_sigma if ls.offset_sigma is None else ls.offset_sigma for ls in cfg.line_sets())
    settings = Settings(lmbd=inv.lmbd, regulariser=inv.regulariser, tol=inv.tol, maxiter=inv.maxiter,
                        fit_rv=inv.fit_rv, fit_amp=inv.fit_amp, line_weight=inv.line_weight,
                        lc_weight=inv.lc_weight, solver=inv.solver, fit_components=tuple(inv.fit_components),
                        offset_sigma=None if all(v is None for v in sigmas) else
                        sigmas[0] if len(sigmas) == 1 else sigmas, lmbd_time=cfg.map.lmbd_time,
                        time_coupling=cfg.map.time_coupling)
    profile_times = np.concatenate([np.asarray(ld.obs.times) for ld in sets]) if sets else None
    grid = make_grid(cfg.grid.kind, cfg.grid.n_cell, cfg.grid.nside)
    lc = _lightcurve_data(cfg, star, profile_times, first.data.time_scale if first is not None else
                          (cfg.data.time_scale if cfg.data is not None else "BJD_TDB"), grid.n_cell)
    # the windows span every epoch and every light-curve point
    lc_times = [np.asarray(d.times) for d in (lc if isinstance(lc, tuple) else (lc,)) if d is not None]
    all_times = [t for t in ([] if profile_times is None else [profile_times]) + lc_times]
    windows = _windows(cfg.map, star, np.concatenate(all_times), cfg.source) if all_times else None
    if isinstance(lc, tuple) and len(lc) == 1:  # one band: the plain joint fit, its weight on lc_weight
        settings = settings.replace(lc_weight=settings.lc_weight * lc[0].weight)
        lc = lc[0]
    if s.shape == "roche":
        if not s.mass_ratio and s.mass is None:
            raise DopplermapInputError(f"{cfg.source}: [star] shape = 'roche' of a single star needs [star] mass "
                                       "(M_sun): the rotation's distortion follows from mass, period and radius")
        fill = s.roche_fill if s.separation is None else _fill_from_separation(cfg.source, s, star)
        grid = with_surface(grid, star_surface(grid, star, mass=s.mass, q=s.mass_ratio, fill=fill,
                                               sync=s.synchronicity))
    common = dict(grid=grid, star=star, method=inv.method, cube_dtype=inv.cube_dtype, subdivide=cfg.grid.subdivide,
                  rv_shift=inv.rv_shift, gravity=gravity, lightcurve_data=lc, t_phot=float(temps[0]),
                  wavelength_nm=float(line_nm), source=cfg.source, mass=s.mass, windows=windows)
    if not sets:  # light curves alone: no line synthesis, no offsets
        if lc is None:
            raise DopplermapInputError(f"{cfg.source}: no data to fit: give [data] profiles (line profiles) and/or a "
                                       "light curve ([[lightcurves]] tables)")
        return Problem(obs=None, components=None, settings=settings, **common)
    if len(sets) == 1:  # one set (also one [[lines]] table): the plain problem, its weight on line_weight
        one = sets[0]
        if cfg.lines:
            settings = settings.replace(line_weight=settings.line_weight * one.weight)
        return Problem(obs=one.obs, components=one.components, settings=settings, files=one.files,
                       error_scale=scales, **common)
    return Problem(obs=None, components=None, lines=tuple(sets), settings=settings,
                   files=tuple(f for ld in sets for f in ld.files), error_scale=scales, **common)



# the demo's local lines and temperatures, used by .npz problems that carry only data
DEMO_T_PHOT, DEMO_WAVELENGTH_NM = 5000.0, 600.0
NPZ_SCALARS = ("inclination", "vsini", "period", "t0", "domega", "n_cell")


def demo_problem(*, n_cell: int = 400, n_epoch: int = 30, n_vel: int = 24, snr: float = 500.0, seed: int = 1,
                 settings: Settings = Settings()) -> Problem:
    """The simulated demo star (:func:`dopplermap.simulate.demo_setup`, spots ``DEMO_SPOTS``)."""
    star, grid, times, vels, comps = demo_setup(n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, seed=seed)
    sim = simulate(grid, star, times, vels, comps, DEMO_SPOTS, snr=snr, seed=seed)
    return Problem(grid=grid, star=star, obs=sim.obs, components=comps, settings=settings, t_phot=DEMO_T_PHOT,
                   wavelength_nm=DEMO_WAVELENGTH_NM, source="demo star")


def from_npz(path, *, n_cell: int = 400, settings: Settings = Settings(), seed: int = 1) -> Problem:
    """A problem from an ``.npz`` file: ``times`` (n_epoch,) days, ``vels`` (n_vel,) km/s, ``flux``
    and ``err`` (n_epoch, n_vel); optional scalars :data:`NPZ_SCALARS` (missing ones, the local
    lines and the temperatures are the demo's; ``n_cell`` applies when the file has none)."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"problem file {path} does not exist")
    if path.is_file() and not zipfile.is_zipfile(path):  # else numpy takes it for a pickle and says so
        raise DopplermapInputError(f"{path}: not a .npz file (not a zip archive: cut short, or another kind of file)")
    try:  # every member is read here, so a damaged one is reported as a bad file
        with np.load(path, allow_pickle=False) as z:
            npz = {k: np.asarray(z[k]) for k in z.files}
    except Exception as exc:
        raise DopplermapInputError(f"{path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None
    missing = [k for k in ("times", "vels", "flux", "err") if k not in npz]
    if missing:
        raise DopplermapInputError(f"{path}: missing array(s) {missing}; need times, vels, flux, err")
    for k in ("times", "vels", "flux", "err"):
        if npz[k].dtype.kind not in "iuf":
            raise DopplermapInputError(f"{path}: array {k!r} must hold numbers, got dtype {npz[k].dtype}")
    extra = {}
    for k in NPZ_SCALARS:
        if k in npz:
            v = npz[k]
            if v.shape != () or v.dtype.kind not in "iuf" or not np.isfinite(v):
                raise DopplermapInputError(f"{path}: {k} must be a finite scalar, got {v!r}")
            extra[k] = float(v)
    n_cell = int(extra.pop("n_cell", n_cell))
    star, grid, _times, _vels, comps = demo_setup(n_cell=n_cell, seed=seed)
    obs = Observations.create(npz["times"], npz["vels"], npz["flux"], npz["err"], source=str(path))
    return Problem(grid=grid, star=star.replace(**extra), obs=obs, components=comps, settings=settings,
                   t_phot=DEMO_T_PHOT, wavelength_nm=DEMO_WAVELENGTH_NM, source=str(path))


def from_seed(seed, *, settings: Settings = Settings()) -> Problem:
    """The problem of the seed's files (:class:`dopplermap.io.seed.SeedProblem`, from
    :func:`~dopplermap.io.seed.read_seed` or :func:`~dopplermap.io.seed.load_problem`): its dense
    synthesis form as given, its observations, and a grid of its cell centres when the files
    hold them (solid angles: the given areas scaled to 4 pi). The seed's files name no
    neighbour pairs, so a regulariser that reads them (``"tikhonov"``, which smooths across
    them) is refused unless the form carries them (an ``.npz`` written with edges)."""
    if regularisers.regulariser(settings.regulariser).uses_edges and np.asarray(seed.pre.edges).size == 0:
        others = ", ".join(repr(r) for r in REGULARISERS if not regularisers.regulariser(r).uses_edges)
        raise DopplermapInputError(f"{seed.source}: regulariser {settings.regulariser!r} needs neighbouring cells, and "
                                   f"these files name none; use one of {others} ('mem' is the seed's)")
    grid = None
    if seed.has_coordinates:
        area = np.asarray(seed.pre.cell_area, dtype=float)
        grid = SurfaceGrid(lat=np.asarray(seed.lat, dtype=float), lon=np.mod(np.asarray(seed.lon, dtype=float), 2 * np.pi),
                           area=area * (4 * np.pi / area.sum()), edges=np.asarray(seed.pre.edges, dtype=np.int64),
                           kind="given")
    return Problem(grid=grid, star=None, obs=seed.obs, components=None, method=seed.pre.line.kind,
                   settings=settings, source=seed.source, form=seed.pre)


def save_npz(path, obs: Observations, star: StarParams | None = None, n_cell: int | None = None) -> Path:
    """Write observations (and optionally star parameters, grid size) as a problem ``.npz``."""
    path = Path(path)
    data = dict(times=np.asarray(obs.times), vels=np.asarray(obs.vels), flux=np.asarray(obs.flux),
                err=np.asarray(obs.err))
    if star is not None:
        data.update(inclination=star.inclination, vsini=star.vsini_kms, period=star.period, t0=star.t0,
                    domega=star.domega)
    if n_cell is not None:
        data["n_cell"] = int(n_cell)

    write_file(path, lambda fh: np.savez(fh, **data))
    return path
