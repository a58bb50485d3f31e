"""Disc-integrated light curve from the same filling-factor maps as the line profiles.

For light-curve epoch ``e``::

    flux[e] = sum_c sum_k J_k LDlc_k(mu[e, c]) area[c] max(mu[e, c], 0) g[c, k] f_k[c]
    model[e] = flux[e] / mean_e(flux)

with ``J_k`` the continuum intensity of component k in the light-curve band relative to
the photosphere, ``LDlc_k`` its limb darkening in that band, ``g`` optional per-cell factors
(gravity darkening) and ``f = (1 - fssc - fssh, fssc, fssh)``. The observed light curve is
normalised by its mean too. Light curves are small, so the weight
``W[e, c, k]`` is precomputed densely: (n_lc, n_cell, 3). The model reads it folded, as
``flux = sum_c W[:, c, 0] + (W[..., 1:] - W[..., :1]) . (fssc, fssh)`` (the same sum; a
third fewer bytes, in one plain matrix product).

**Bounded memory.** The weights are built :data:`CHUNK_BYTES` at a time and only their folded
form is kept: ``(n_row, 2 n_cell)`` float64. A rigidly rotating star (``domega = 0``) looks
the same at the same rotation phase, so a long light curve (``n_lc`` above twice
:func:`phase_nodes`) is modelled on ``N`` evenly spaced phase nodes and linearly interpolated
to its times: ``n_row = N`` whatever ``n_lc``. Linear interpolation of a function of the
rotation angle ``a`` errs by at most ``(2 pi / N)^2 / 8 max|F''(a)|``. Each cell's weight
``mu (1 - u + u mu)`` with ``mu = A cos a + B`` is smooth but for its kink at the limb, and
on the grids measured (tests/test_lightcurve_memory.py) the normalised flux has
``|F''| <= 2.3`` (coarse grids, where single cells' kinks show) and ``<= 1`` (fine ones); ``N``
is the smallest node count with ``(2 pi / N)^2 / 8 x 8 <=`` :data:`PHASE_TOLERANCE` x the
median normalised error (``|F''| <= 8``: a margin over those), at least :data:`MIN_PHASE_NODES`. With differential rotation
(``domega != 0``) the rows are the data's times (``n_row = n_lc``): bin the light curve
(``bin = "auto"``) to bound them.

Several bands (:class:`LightCurveSet`) share the maps; each has its own weights, times and
normalisation. Their chi-square is pooled over all points, as for several line data sets
(:mod:`dopplermap.objective`)::

    chi2_lc   = sum_b SSR_b / sum_b n_b          (reported; one band: its reduced chi2)
    loss term = sum_b w_b SSR_b / sum_b n_b      (w_b: the band's weight, 1 by default)
    chi2_b    = SSR_b / n_b                      (reported per band)

with ``SSR_b`` the band's sum of squared normalised residuals.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import _device
from ._sets import names_and_weights
from .diagnostics import check_phase_span, check_spot_contrast, fields_checked
from .errors import DopplermapInputError
from .geometry import StarParams, cell_geometry, check_star
from .grid import SurfaceGrid
from .memory import check_bytes
from .profiles import LimbDarkening, intensity_ratio
from .units import to_unit

__all__ = ["PHOTOMETRY_LIMITS", "CHUNK_BYTES", "PHASE_TOLERANCE", "MIN_PHASE_NODES", "phase_nodes", "lightcurve_rows",
           "lightcurve_nbytes", "LightCurveBand", "LightCurveFit", "LightCurveSet", "precompute_lightcurve", "lightcurve_model",
           "chi2_lightcurve", "chi2_lightcurves", "lightcurve_residuals", "simulate_lightcurve"]


PHOTOMETRY_LIMITS = (
    "light curves alone: a longitude / contrast map. The disc-integrated flux fixes where in rotation phase "
    "the spots are and how much light they remove; it barely constrains their latitudes, cannot tell a spot "
    "in the northern hemisphere from its mirror image in the southern one (identical light curves), and "
    "trades a spot's area against its contrast")
"""What photometry cannot tell, said in the summary of a map fitted to light curves alone."""


CHUNK_BYTES = 64 * 2**20
"""The set-up builds the (rows, n_cell, 3) weights this many bytes at a time."""

PHASE_TOLERANCE = 0.01
"""Phase nodes: the interpolation error bound, as a fraction of the median normalised error."""

MIN_PHASE_NODES = 256


def phase_nodes(err, n_lc: int, domega: float) -> int | None:
    """Number of phase nodes of a light curve's model (module docstring), or None: rows at
    the data's times (differential rotation, or too few points for nodes to save anything)."""
    if domega != 0.0:
        return None
    med = float(np.median(np.asarray(err, dtype=float)))
    n = max(MIN_PHASE_NODES, int(np.ceil(2.0 * np.pi / np.sqrt(PHASE_TOLERANCE * med))))
    return n if 2 * n < n_lc else None


def lightcurve_rows(n_lc: int, err, domega: float) -> int:
    """Rows of the light-curve model's weights: the phase nodes, or the points."""
    n = phase_nodes(err, n_lc, domega)
    return n_lc if n is None else n


def lightcurve_nbytes(n_rows: int, n_cell: int) -> float:
    """Bytes the light-curve model holds (its folded weights) plus one set-up chunk."""
    return 8.0 * n_rows * (2 * n_cell + 1) + min(CHUNK_BYTES, 72.0 * n_rows * n_cell)


@dataclasses.dataclass(frozen=True)
class LightCurveBand:
    """Photometric band: limb darkening and continuum intensity of phot, cool, hot."""

    limb_darkening: tuple[LimbDarkening, LimbDarkening, LimbDarkening]
    intensity: tuple[float, float, float] = (1.0, 0.3, 1.5)

    def __post_init__(self):
        if len(self.limb_darkening) != 3 or len(self.intensity) != 3:
            raise DopplermapInputError("a light-curve band needs 3 limb-darkening laws and 3 intensities (phot, cool, hot)")
        for name, val in zip(("phot", "cool", "hot"), self.intensity, strict=True):
            if not (np.isfinite(val) and val >= 0):
                raise DopplermapInputError(f"light-curve intensity of {name} must be >= 0, got {val!r}")
        check_spot_contrast(self.intensity, what="continuum intensities (phot, cool, hot)", where="light-curve band")

    @classmethod
    def from_temperatures(cls, t_phot: float, t_cool: float, t_hot: float, wavelength_nm: float,
                          limb_darkening: Sequence[LimbDarkening]) -> LightCurveBand:
        """Planck intensity ratios at the band's effective wavelength (nm)."""
        inten = tuple(intensity_ratio(t, t_phot, wavelength_nm) for t in (t_phot, t_cool, t_hot))
        check_spot_contrast([to_unit(t, "K", "temperature", kind="temperature") for t in (t_phot, t_cool, t_hot)],
                            what="temperatures (phot, cool, hot)", unit=" K", where="light-curve band")
        with fields_checked():  # the intensities follow the temperatures just checked
            return cls(tuple(limb_darkening), inten)


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["weight", "flux", "err", "times", "base", "diff", "index", "frac"],
                   meta_fields=["fit_dilution"])
@dataclasses.dataclass(frozen=True, eq=False)
class LightCurveFit:
    """Precomputed light-curve weights with the (mean-normalised) data.

    Attributes:
        weight: (n_lc, n_cell, 3) ``J_k LD_k(mu) area mu g`` (0 for hidden cells), or None:
            :func:`precompute_lightcurve` keeps only the folded ``base`` and ``diff``.
        flux: (n_lc,) observed flux / its mean. err: (n_lc,) 1-sigma errors, same units.
        times: (n_lc,) days.
        fit_dilution: free light-curve offset (contaminating light ``D``): the model becomes
            ``1 + s (model - 1)`` with ``s = 1 / (1 + D / mean flux)`` profiled out by weighted
            least squares at every evaluation (no extra parameter). Off by default: it makes
            the light curve insensitive to the spots' overall contrast.
        base, diff: the folded weights, (n_lc,) ``sum_c W[:, c, 0]`` and (n_lc, 2 n_cell)
            ``W[..., 1:] - W[..., :1]`` (cool cells, then hot), as
            :func:`precompute_lightcurve` builds them; None: the model reads ``weight``. They
            are derived from ``weight``: a copy with other weights sets them None (or rebuilds).
            With phase nodes their rows are the nodes, not the points.
        index, frac: (n_lc,) with phase nodes: each point's node below it and its fraction
            of the way to the next (linear interpolation, periodic); None: rows are the points.
    """

    weight: jnp.ndarray
    flux: jnp.ndarray
    err: jnp.ndarray
    times: jnp.ndarray
    fit_dilution: bool = False
    base: jnp.ndarray | None = None
    diff: jnp.ndarray | None = None
    index: jnp.ndarray | None = None
    frac: jnp.ndarray | None = None

    @property
    def n_lc(self) -> int:
        return int(self.flux.shape[0])

    @property
    def n_cell(self) -> int:
        return int(self.weight.shape[1]) if self.weight is not None else int(self.diff.shape[1]) // 2

    @property
    def n_rows(self) -> int:
        """Rows of the model's weights: the phase nodes, or the points."""
        return int(self.diff.shape[0]) if self.diff is not None else self.n_lc


@functools.partial(jax.tree_util.register_dataclass, data_fields=["bands", "weights"], meta_fields=["names"])
@dataclasses.dataclass(frozen=True, eq=False)
class LightCurveSet:
    """Light curves in several bands fitted with one map (see the module docstring).

    Attributes:
        bands: one :class:`LightCurveFit` per band. weights: (n_band,) weight of each band
            in the loss. names: (n_band,) unique names (results, figures).
    """

    bands: tuple
    weights: jnp.ndarray
    names: tuple

    @classmethod
    def create(cls, bands, weights=None, names=None) -> LightCurveSet:
        """Validate and build; ``weights`` default 1, ``names`` default ``band1``, ``band2`` ..."""
        bands = tuple(bands)
        if not bands or not all(isinstance(b, LightCurveFit) for b in bands):
            raise DopplermapInputError(f"a light-curve set needs at least one LightCurveFit, got {len(bands)} items")
        names, weights = names_and_weights("light curve", "band", [b.n_cell for b in bands], names, weights)
        return cls(bands=bands, weights=weights, names=names)

    @property
    def n_cell(self) -> int:
        return self.bands[0].n_cell

    @property
    def n_lc(self) -> int:
        return sum(b.n_lc for b in self.bands)


def _lc_weights(grid, star, times, band, cell_factors):
    check_star(star)
    # NumPy: set-up work, evaluated once (jax.numpy would compile every operation)
    geo = cell_geometry(grid.lat, grid.lon, grid.area, times, star.inclination, star.vsini_kms,
                        star.period, star.t0, star.domega, xp=np)
    mu = np.asarray(geo.mu)
    pa = np.asarray(geo.proj_area)
    # written once, into a buffer the device adopts without a copy (as the dense cube)
    w = _device.host_array((*mu.shape, len(band.limb_darkening)))
    for k, (ld, j) in enumerate(zip(band.limb_darkening, band.intensity, strict=True)):
        np.multiply(j, np.asarray(ld(mu)), out=w[..., k])
        w[..., k] *= pa
    if cell_factors is not None:
        f = np.asarray(cell_factors, dtype=float)
        f = f[:, None] if f.ndim == 1 else f
        if f.shape[0] != grid.n_cell:
            raise DopplermapInputError(f"cell factors must have n_cell={grid.n_cell} rows, got {f.shape}")
        w = w * f[None, :, :]
    return w


def precompute_lightcurve(grid: SurfaceGrid, star: StarParams, times, flux, err, band: LightCurveBand, *,
                          cell_factors=None, source: str = "light curve", normalise: bool = True,
                          fit_dilution: bool = False) -> LightCurveFit:
    """Weights of the light-curve model plus validated data.

    Args:
        grid, star: as for the line model. times: (n_lc,) days. flux, err: (n_lc,) in any
            units (divided by the mean flux when ``normalise``). band: :class:`LightCurveBand`.
        cell_factors: optional (n_cell,) or (n_cell, 3) intensity factors (gravity darkening).
    """
    if hasattr(times, "flux") or hasattr(times, "jd"):  # a lightkurve light curve or an astropy Time
        what = "an astropy Time" if hasattr(times, "jd") else f"a {type(times).__name__}"
        raise DopplermapInputError(f"{source}: times is {what}; precompute_lightcurve takes BJD_TDB days as numbers: "
                                   "read a light curve with dopplermap.io.lightcurve.read_lightcurve (or "
                                   "dopplermap.problem.LightCurveData.load), which converts times and fluxes")
    times = np.atleast_1d(np.asarray(times, dtype=float))
    flux = np.atleast_1d(np.asarray(flux, dtype=float))
    err = np.atleast_1d(np.asarray(err, dtype=float))
    if not (times.shape == flux.shape == err.shape) or times.ndim != 1 or times.size < 2:
        raise DopplermapInputError(f"{source}: times, flux and err must be 1-D of equal length >= 2, got "
                         f"{times.shape}, {flux.shape}, {err.shape}")
    for name, a in (("time", times), ("flux", flux), ("error", err)):
        if not np.all(np.isfinite(a)):
            raise DopplermapInputError(f"{source}: {name} has NaN/inf at row {int(np.argmax(~np.isfinite(a)))}")
    if np.any(err <= 0):
        raise DopplermapInputError(f"{source}: errors must be > 0, row {int(np.argmax(err <= 0))} has {err[err <= 0][0]!r}")
    check_phase_span(times, star.t0, star.period, where=source)
    if normalise:
        mean = flux.mean()
        if not mean > 0:
            raise DopplermapInputError(f"{source}: mean flux must be > 0 to normalise, got {mean!r}")
        flux, err = flux / mean, err / mean
    n_nodes = phase_nodes(err, times.size, float(star.domega))
    index = frac = None
    rows = times
    if n_nodes is not None:  # rigid rotation: the model on phase nodes, interpolated to the times
        rows = star.t0 + star.period * np.arange(n_nodes) / n_nodes
        pos = np.mod((times - star.t0) / star.period, 1.0) * n_nodes
        index = np.minimum(np.floor(pos).astype(np.int32), n_nodes - 1)
        frac = pos - index
    n_cell = grid.n_cell
    check_bytes(lightcurve_nbytes(rows.size, n_cell),
                f"{source}: the light-curve model ({rows.size} rows x {n_cell} cells)",
                "the light curve's points (bin = \"auto\") or the grid's n_cell")
    diff = _device.host_array((rows.size, 2 * n_cell))
    base = np.empty(rows.size)
    step = max(1, int(CHUNK_BYTES // (24 * 3 * n_cell)))  # the chunk's weights and geometry
    for a in range(0, rows.size, step):
        w = _lc_weights(grid, star, rows[a:a + step], band, cell_factors)
        np.subtract(w[..., 1], w[..., 0], out=diff[a:a + step, :n_cell])
        np.subtract(w[..., 2], w[..., 0], out=diff[a:a + step, n_cell:])
        base[a:a + step] = w[..., 0].sum(axis=1)
    return LightCurveFit(weight=None, flux=_device.asarray(flux), err=_device.asarray(err),
                         times=_device.asarray(times), fit_dilution=bool(fit_dilution),
                         base=_device.asarray(base), diff=_device.asarray(diff),
                         index=None if index is None else _device.asarray(index),
                         frac=None if frac is None else _device.asarray(frac))


def lightcurve_model(fssc, fssh, lc: LightCurveFit):
    """Model light curve (n_lc,), normalised by its mean; fssc, fssh: (n_cell,)."""
    if lc.diff is not None:  # the folded weights: one (n_row, 2 n_cell) product
        flux = lc.base + lc.diff @ jnp.concatenate([fssc, fssh])
        if lc.index is not None:  # phase nodes: interpolated to the points (periodic)
            nxt = jnp.where(lc.index + 1 == flux.shape[0], 0, lc.index + 1)
            flux = flux[lc.index] * (1.0 - lc.frac) + flux[nxt] * lc.frac
    else:
        f = jnp.stack([1.0 - fssc - fssh, fssc, fssh], axis=1)
        flux = jnp.einsum("eck,ck->e", lc.weight, f)
    return flux / jnp.mean(flux)


def lightcurve_residuals(fssc, fssh, lc: LightCurveFit):
    """Normalised residuals ``(obs - model) / err`` (n_lc,), the dilution profiled out if fitted."""
    model = lightcurve_model(fssc, fssh, lc)
    if lc.fit_dilution:
        w = 1.0 / lc.err**2
        dm_, do = model - 1.0, lc.flux - 1.0
        s = jnp.sum(w * dm_ * do) / jnp.maximum(jnp.sum(w * dm_ * dm_), 1e-300)
        model = 1.0 + jnp.clip(s, 0.0, 1.0) * dm_  # dilution only dims the variation
    return (lc.flux - model) / lc.err


def chi2_lightcurve(fssc, fssh, lc: LightCurveFit):
    """Reduced chi-square of the light curve: ``sum(((obs - model) / err)^2) / n_lc``."""
    r = lightcurve_residuals(fssc, fssh, lc)
    return jnp.sum(r * r) / r.size


def chi2_lightcurves(fssc, fssh, lcs):
    """``(chi2_lc, weighted, per_band)`` of a :class:`LightCurveSet` (module docstring), or
    ``(chi2, chi2, None)`` of one :class:`LightCurveFit`."""
    if isinstance(lcs, LightCurveFit):
        c2 = chi2_lightcurve(fssc, fssh, lcs)
        return c2, c2, None
    ssr = []
    for b in lcs.bands:  # one term per band (each its own shape): traced once
        r = lightcurve_residuals(fssc, fssh, b)
        ssr.append(jnp.sum(r * r))
    ssr = jnp.stack(ssr)
    sizes = np.asarray([b.n_lc for b in lcs.bands], dtype=float)
    n = float(sizes.sum())
    return jnp.sum(ssr) / n, jnp.dot(lcs.weights.astype(ssr.dtype), ssr) / n, tuple(ssr / sizes)


def simulate_lightcurve(grid: SurfaceGrid, star: StarParams, times, band: LightCurveBand, fssc, fssh, *,
                        sigma: float = 1e-3, seed: int = 0, cell_factors=None):
    """Noisy normalised light curve of the maps: returns (flux (n_lc,), err (n_lc,), noiseless)."""
    if not sigma > 0:
        raise DopplermapInputError(f"sigma must be > 0, got {sigma!r}")
    times = np.atleast_1d(np.asarray(times, dtype=float))
    w = _lc_weights(grid, star, times, band, cell_factors)
    f = np.stack([1.0 - np.asarray(fssc) - np.asarray(fssh), np.asarray(fssc), np.asarray(fssh)], axis=1)
    clean = np.einsum("eck,ck->e", w, f)
    clean = clean / clean.mean()
    rng = np.random.default_rng(seed)
    err = np.full(times.size, float(sigma))
    return clean + rng.normal(size=times.size) * err, err, clean
