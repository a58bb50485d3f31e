"""Synthetic spotted stars: true maps from circular spots, noisy observed profiles."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from ._options import options_of
from ._repr import compact
from .choices import SPOT_COMPONENTS, check
from .constants import FILL_MIN
from .errors import DopplermapInputError
from .geometry import StarParams
from .grid import SurfaceGrid, latitude_band_grid
from .model import forward_jit, precompute
from .objective import Observations
from .profiles import Component, ComponentSet, LimbDarkening, gaussian, intensity_ratio
from .units import to_epoch, to_unit

__all__ = ["Spot", "spot_map", "simulate", "SimulationOptions", "Simulation", "demo_setup", "DEMO_SPOTS"]


@dataclasses.dataclass(frozen=True)
class Spot:
    """A circular spot: centre (deg), angular radius (deg), kind and filling factor."""

    lat: float
    lon: float
    radius: float
    kind: str = "cool"
    fill: float = 0.9

    def __post_init__(self):
        check(self.kind, SPOT_COMPONENTS, "spot kind")
        if not (0.0 < self.fill <= 1.0):
            raise DopplermapInputError(f"spot fill must be in (0, 1], got {self.fill!r}")
        if not (-90.0 <= self.lat <= 90.0) or not (0.0 < self.radius < 180.0):
            raise DopplermapInputError(f"spot needs -90 <= lat <= 90 and 0 < radius < 180 deg, got lat={self.lat!r}, radius={self.radius!r}")


def spot_map(grid: SurfaceGrid, spots, background: float = FILL_MIN):
    """Cool and hot filling factors (n_cell,) of circular spots with a soft edge.

    The edge ramps linearly over about one cell width; overlapping spots keep the larger
    fill, and ``fssc + fssh <= 1`` is enforced by scaling.
    """
    fssc = np.full(grid.n_cell, background)
    fssh = np.full(grid.n_cell, background)
    width = np.degrees(np.sqrt(4 * np.pi / grid.n_cell))
    for s in spots:
        lat0, lon0 = np.radians(s.lat), np.radians(s.lon)
        cosd = np.sin(grid.lat) * np.sin(lat0) + np.cos(grid.lat) * np.cos(lat0) * np.cos(grid.lon - lon0)
        d = np.degrees(np.arccos(np.clip(cosd, -1, 1)))
        f = s.fill * np.clip((s.radius - d) / width + 0.5, 0.0, 1.0)
        target = fssc if s.kind == "cool" else fssh
        np.maximum(target, f, out=target)
    total = fssc + fssh
    scale = np.where(total > 1.0 - FILL_MIN, (1.0 - FILL_MIN) / total, 1.0)
    return np.maximum(fssc * scale, FILL_MIN), np.maximum(fssh * scale, FILL_MIN)


@dataclasses.dataclass
class Simulation:
    """Simulated observations and the truth behind them."""

    obs: Observations
    grid: SurfaceGrid
    star: StarParams
    components: ComponentSet
    fssc: np.ndarray
    fssh: np.ndarray
    rv: np.ndarray
    amp: np.ndarray
    snr: float
    noiseless: np.ndarray

    def __repr__(self) -> str:
        return compact(self, ("snr",), n_cell=self.grid.n_cell, n_epoch=self.obs.n_epoch, n_vel=self.obs.n_vel,
                       star=self.star)


@dataclasses.dataclass(frozen=True, eq=False)
class SimulationOptions:
    """How :func:`simulate` makes its data.

    Attributes:
        snr: continuum signal-to-noise of the Gaussian noise. seed: of the noise draws.
        rv, amp: per-epoch (or one) true rv shift (km/s) and continuum offset [0].
        method, synthesis_tol: the synthesis (:class:`dopplermap.model.Synthesis`); default
            binned to 1e-11 (see :func:`simulate`).
    """

    snr: float = 500.0
    rv: object = None
    amp: object = None
    seed: int = 0
    method: str = "binned"
    synthesis_tol: float = 1e-11

    def replace(self, **changes) -> SimulationOptions:
        return dataclasses.replace(self, **changes)


def simulate(grid: SurfaceGrid, star: StarParams, times, vels, components: ComponentSet, spots=(), *,
             options: SimulationOptions | None = None, **loose) -> Simulation:
    """Simulate mean-normalised line profiles of a spotted star with Gaussian noise.

    ``options``: a :class:`SimulationOptions`, or its fields as keywords (``snr=500``, ``seed``,
    ``rv``, ``amp``, ``method``, ``synthesis_tol``). The noise has sigma = 1/snr of the
    continuum (before normalisation by the mean). The
    default synthesis is binned with ``synthesis_tol=1e-11`` (exact for all purposes, and
    a finer velocity binning than an inversion's default, so the two do not share their
    discretisation); ``method="dense"`` uses the exact cube. ``times`` may be an astropy
    ``Time`` and ``vels``/``rv`` velocity Quantities (see :mod:`dopplermap.units`).
    """
    o = options_of("simulate", SimulationOptions, options, loose)
    snr, rv, amp, seed, method, synthesis_tol = o.snr, o.rv, o.amp, o.seed, o.method, o.synthesis_tol
    if not snr > 0:
        raise DopplermapInputError(f"snr must be > 0, got {snr!r}")
    times = np.asarray(to_epoch(times, "times"), dtype=float)
    vels = np.asarray(to_unit(vels, "km/s", "vels"), dtype=float)
    rv = None if rv is None else to_unit(rv, "km/s", "rv")
    fssc, fssh = spot_map(grid, spots)
    n_epoch = times.size
    rv = np.zeros(n_epoch) if rv is None else np.broadcast_to(np.asarray(rv, float), (n_epoch,)).copy()
    amp = np.zeros(n_epoch) if amp is None else np.broadcast_to(np.asarray(amp, float), (n_epoch,)).copy()
    pre = precompute(grid, star, times, vels, components, method=method, synthesis_tol=synthesis_tol)
    clean = np.asarray(forward_jit(jnp.asarray(fssc), jnp.asarray(fssh), jnp.asarray(rv), jnp.asarray(amp), pre))
    rng = np.random.default_rng(seed)
    # clean is mean-normalised; the continuum sits at 1 / mean(raw), so scale sigma to it
    sigma = np.full_like(clean, 1.0 / snr) * clean.max(axis=1, keepdims=True)
    noisy = clean + rng.normal(size=clean.shape) * sigma
    obs = Observations.create(times, vels, noisy, sigma, source="simulation")
    return Simulation(obs=obs, grid=grid, star=star, components=components, fssc=fssc, fssh=fssh,
                      rv=rv, amp=amp, snr=snr, noiseless=clean)


DEMO_SPOTS = (
    Spot(lat=45.0, lon=40.0, radius=18.0, kind="cool", fill=0.9),
    Spot(lat=70.0, lon=190.0, radius=15.0, kind="cool", fill=0.85),
    Spot(lat=15.0, lon=120.0, radius=15.0, kind="cool", fill=0.8),
    Spot(lat=25.0, lon=310.0, radius=14.0, kind="cool", fill=0.8),
    Spot(lat=30.0, lon=245.0, radius=12.0, kind="hot", fill=0.7),
)
"""The demo star's spots (:func:`demo_setup`, ``dopplermap demo``): four cool spots at
latitudes 15-70 deg, one of them near the pole, and one hot spot."""


def demo_setup(n_cell: int = 2500, n_epoch: int = 150, n_vel: int = 32, seed: int = 1):
    """The built-in example at the seed's size: star, grid, epochs, velocities, components.

    Inclination 60 deg, vsini 40 km/s, P = 2.0 d, 150 epochs over about 4 rotations,
    32 velocities over +-60 km/s, photosphere 5000 K, cool spots 3800 K, hot spot 6000 K at
    600 nm, Gaussian local profiles (FWHM 9 km/s) and linear limb darkening.
    """
    rng = np.random.default_rng(seed)
    star = StarParams(inclination=60.0, vsini=40.0, period=2.0, t0=0.0)
    grid = latitude_band_grid(n_cell)
    times = np.sort(rng.uniform(0.0, 4.0 * star.period, n_epoch))
    vels = np.linspace(-60.0, 60.0, n_vel)
    lam = 600.0
    components = ComponentSet(
        phot=Component(gaussian(0.50, 9.0), LimbDarkening("linear", (0.65,)), 1.0),
        cool=Component(gaussian(0.60, 9.0), LimbDarkening("linear", (0.75,)), intensity_ratio(3800.0, 5000.0, lam)),
        hot=Component(gaussian(0.42, 9.0), LimbDarkening("linear", (0.60,)), intensity_ratio(6000.0, 5000.0, lam)),
    )
    return star, grid, times, vels, components
