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
form is kept. Cells at the same latitude turn at the same rate (``Omega(lat) = Omega_eq -
domega sin^2 lat``; one rate for a rigid rotator), so each such *rotation group* looks the
same at the same phase of its own rotation: a long light curve (``n_lc`` above twice
:func:`phase_nodes`) is modelled on ``N`` evenly spaced phase nodes per group, each group's
flux linearly interpolated to the times at its own phase and summed: ``N x n_cell`` weights
whatever ``n_lc`` (plus an ``(n_lc, n_group)`` index), instead of ``n_lc x n_cell``.
Linear interpolation of a function of the rotation angle ``a`` errs by at most
``(2 pi / N)^2 / 8 max|F''(a)|``. Each cell's weight ``mu (1 - u + u mu)`` with
``mu = A cos a + B`` is smooth but for its kink at the limb, and on the grids measured
(tests/test_lightcurve_memory.py) the normalised flux has ``|F''| <= 2.3`` (coarse grids,
where single cells' kinks show) and ``<= 1`` (fine ones); ``N`` is the smallest node count
with ``(2 pi / N)^2 / 8 x 8 <=`` :data:`PHASE_TOLERANCE` x the median normalised error
(``|F''| <= 8``: a margin over those, and over the sum of the rotation groups' separate
errors with differential rotation), at least :data:`MIN_PHASE_NODES`.

*Circulant groups.* On a grid of rings of evenly spaced cells (the latitude-band grids, ZDIpy's),
a ring of ``n`` cells has ``N_g`` = the smallest multiple of ``n`` >= ``N`` nodes: each cell
then sits a whole number of nodes from the ring's first cell, and its weights at the nodes
are the first cell's shifted (checked at set-up to :data:`CIRCULANT_RTOL`; otherwise the
cells' own weights, below). A group (same rate, same ring size) keeps one kernel per ring,
and its node fluxes are circular convolutions of the kernels with the filling factors
placed at their shifts: Fourier transforms of ``N_g`` points instead of an ``N x cells``
product, for the value and the gradient alike; each point reads two nodes of each group in
one gather. Otherwise the groups
are cut into pieces of at most the mean group's cells (one batched matrix-vector product
over pieces of equal size, little padding), summed per group before the interpolation. A grid with more
than :data:`MAX_ROTATION_GROUPS` latitudes (a grid given cell by cell) keeps rows at the
data's times: bin the light curve (``bin = "auto"``) to bound them.

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
from ._options import options_of
from ._sets import names_and_weights
from .diagnostics import check_phase_span, check_spot_contrast, fields_checked
from .errors import DopplermapInputError
from .geometry import Rotation, StarParams, cell_geometry, check_star
from .grid import SurfaceGrid
from .grid import subdivide as sub_cells
from .memory import check_bytes
from .profiles import LimbDarkening, intensity_ratio
from .units import to_unit

__all__ = ["LightCurveOptions", "LightCurveSimulation", "PHOTOMETRY_LIMITS", "CHUNK_BYTES", "PHASE_TOLERANCE", "MIN_PHASE_NODES", "CIRCULANT_RTOL", "phase_nodes", "rotation_groups",
           "lightcurve_plan", "MAX_ROTATION_GROUPS", "LC_WARN_WORK", "auto_bin", "LC_MADD_RATE", "TYPICAL_EVALUATIONS", "AUTO_BINS_PER_CELL", "LightCurveBand", "LightCurveFit", "LightCurveSet", "precompute_lightcurve", "lightcurve_model",
           "chi2_lightcurve", "chi2_lightcurves", "lightcurve_residuals", "model_residuals", "weighted_residuals", "simulate_lightcurve"]


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


MAX_ROTATION_GROUPS = 512
"""More rotation groups (distinct latitudes) than this: no phase nodes (rows at the times)."""


def rotation_groups(grid, star) -> tuple[np.ndarray, np.ndarray]:
    """``(group, omega)``: each cell's rotation group (n_cell,) and each group's angular
    rate (n_group,), rad/day; cells whose rates agree to 1e-12 share a group."""
    rate = 2.0 * np.pi / float(star.period) - float(star.domega) * np.sin(np.asarray(grid.lat, dtype=float)) ** 2
    key, group = np.unique(np.round(rate * float(star.period) / (2.0 * np.pi), 12), return_inverse=True)
    return group.astype(np.int64), key * 2.0 * np.pi / float(star.period)


def phase_nodes(err, n_lc: int, n_group: int = 1) -> int | None:
    """Number of phase nodes of a light curve's model (module docstring), or None: rows at
    the data's times (too few points for nodes to save anything, or too many rotation groups)."""
    if n_group > MAX_ROTATION_GROUPS:
        return None
    med = float(np.median(np.asarray(err, dtype=float)))
    n = max(MIN_PHASE_NODES, int(np.ceil(2.0 * np.pi / np.sqrt(PHASE_TOLERANCE * med))))
    return n if 2 * n < n_lc else None


LC_WARN_WORK = 1.0e7
"""The cost warning needs the light curve's multiply-adds per evaluation above this too
(about 10 ms of CPU): a small light curve that outweighs a few profiles costs nothing."""


def lightcurve_plan(grid, star, err, n_lc: int, *, at_times: bool = False, circulant: bool = True) -> dict:
    """How the light-curve model of ``n_lc`` points with errors ``err`` (normalised) is held:
    ``nodes`` (phase nodes, or None: rows at the times, always with ``at_times``), ``rows``,
    ``n_group``, ``circulant`` (the nodes of circulant groups, where the grid's rings are
    evenly spaced and ``circulant`` allows), ``bytes`` (held, plus one set-up chunk) and
    ``work`` (multiply-adds per evaluation, value and gradient; a gathered or scattered
    element counts as 2)."""
    group, _ = rotation_groups(grid, star)
    n_group = int(group.max()) + 1
    n_cell = grid.n_cell
    nodes = None if at_times else phase_nodes(err, n_lc, n_group)
    rings = None if nodes is None or not circulant else _ring_groups(grid, group, nodes)
    if nodes is None:
        rows, width = n_lc, n_cell
        held = 8.0 * rows * (2 * n_cell + 1)
        work = 2.0 * 2.0 * rows * 2 * width
    elif rings is not None:
        counts = np.asarray([r[0] for r in rings], dtype=float)
        n_ring = np.asarray([r[2].max() + 1 for r in rings], dtype=float)
        rows, n_group, width = int(counts.max()), len(rings), int(max(r[1].size for r in rings))
        # spectra (complex), base, cells and slots; each point's 2 n_group nodes and weights
        held = float(np.sum(16.0 * 2 * n_ring * (counts // 2 + 1) + 8.0 * counts)) + 8.0 * n_cell + 24.0 * n_lc * n_group
        fft = float(np.sum((2 * n_ring + 1) * 2.5 * counts * np.log2(counts)))
        work = 2.0 * (fft + 2.0 * 2 * n_group * n_lc)
    else:
        pieces = _pieces(group, n_group)
        rows, width = nodes, len(pieces) * max(p.size for p in pieces)  # padded to the largest piece
        held = 8.0 * nodes * (2 * width + n_group) + 12.0 * n_lc * n_group + 4.0 * width
        work = 2.0 * 2.0 * rows * 2 * width
    return dict(nodes=nodes, rows=rows, n_group=n_group, circulant=rings is not None,
                bytes=held + min(CHUNK_BYTES, 72.0 * rows * (width if rings is not None else n_cell)), work=work)


AUTO_BINS_PER_CELL = 4
"""``bin = "auto"``: bins per cell width along the equator (module docstring of :func:`auto_bin`)."""


def auto_bin(n_cell: int, period: float, domega: float, *, evolving: bool = False) -> tuple[float, str]:
    """``(width, unit)`` of ``bin = "auto"``: the resolution the map can use.

    A map of ``n_cell`` cells resolves about ``sqrt(4 pi / n_cell)`` rad of longitude (one
    cell), which the star turns through in that fraction of a rotation; ``AUTO_BINS_PER_CELL``
    bins per cell keep the light curve's features finer than a cell (a box of a quarter cell
    damps a signal that varies on one cell's scale by under 3 %). A rigid rotator
    (``domega = 0``) is binned in rotation phase, folding every rotation together (the map
    is one map: the same spots at every rotation); with differential rotation the pattern
    drifts, and with time windows (``evolving``: one map per window) the spots change, so the
    bins are in time, ``period`` x the phase width (days).
    """
    width = float(np.sqrt(4.0 * np.pi / n_cell) / (2.0 * np.pi) / AUTO_BINS_PER_CELL)
    return (width, "phase") if domega == 0.0 and not evolving else (width * float(period), "d")


LC_MADD_RATE = 1.0e9
"""Multiply-adds a second assumed by the time estimate (one CPU core, float64 matrix-vector)."""

TYPICAL_EVALUATIONS = 300
"""Objective evaluations assumed by the time estimate (an L-BFGS-B map solve at tol 1e-5)."""


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
                   data_fields=["weight", "flux", "err", "times", "base", "diff", "index", "frac", "cells",
                                "piece_group", "segment", "spectra", "slots", "group_cells", "fold"],
                   meta_fields=["fit_dilution", "cell_count", "n_segment", "node_counts"])
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
        index, frac, cells, piece_group: with phase nodes (module docstring): ``base``
            (n_group, N), ``diff`` (n_piece, N, 2 M) (each piece's cool cells, then hot,
            padded with zero weights to the largest piece's M cells), ``cells`` (n_piece, M)
            the cells of each piece (padding: cell 0) and ``piece_group`` its rotation
            group, ``index`` and ``frac`` (n_group, n_lc) each point's
            node below it in each group's phase and its fraction of the way to the next
            (periodic); ``cell_count`` the grid's cells. None: rows are the points.
        segment: (n_lc,) int, each point's segment (a sector, a quarter, a file) of
            ``n_segment``, or None. Each segment has a free scale: the model of segment k is
            ``s_k model`` with ``s_k = sum_k(w obs model) / sum_k(w model^2)`` (``w = 1/err^2``),
            the weighted least-squares scale profiled out at every evaluation (no extra
            parameter), as the per-epoch continuum offsets free each line profile's level.
        spectra, slots, group_cells, fold, node_counts: phase nodes of a grid whose rotation
            groups are rings of evenly spaced cells (module docstring, *circulant groups*): group
            ``g`` has ``node_counts[g]`` nodes ``N_g``; ``spectra`` (2, n_ring, L // 2 + 1) the
            Fourier transforms, zero-padded to one length ``L >= 2 max N_g``, of the cool and hot
            weight differences of each ring's first cell; ``piece_group`` (n_ring,) each ring's
            group; ``group_cells`` (n,) cells and ``slots`` (n,) their slots ``r L + s`` (ring r,
            shifted by s nodes); ``fold`` (2, sum N_g) where each node's two halves of the
            linear convolution lie (group-major, L a group); ``base`` all groups' nodes end to end,
            ``index`` (n_lc, 2 n_group) each point's nodes below and above it in each group (in
            that flat vector) and ``frac`` (n_lc, 2 n_group) their interpolation weights
            (``diff``, ``cells`` None).
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
    cells: jnp.ndarray | None = None
    piece_group: jnp.ndarray | None = None
    cell_count: int = 0
    segment: jnp.ndarray | None = None
    n_segment: int = 0
    spectra: jnp.ndarray | None = None
    slots: jnp.ndarray | None = None
    group_cells: jnp.ndarray | None = None
    fold: jnp.ndarray | None = None
    node_counts: tuple = ()

    @property
    def n_lc(self) -> int:
        return int(self.flux.shape[0])

    @property
    def n_cell(self) -> int:
        if self.cells is not None or self.spectra is not None:
            return self.cell_count
        return int(self.weight.shape[1]) if self.weight is not None else int(self.diff.shape[1]) // 2

    @property
    def n_rows(self) -> int:
        """Rows of the model's weights: the phase nodes (the most of any group), or the points."""
        if self.spectra is not None:
            return max(self.node_counts)
        if self.cells is not None:
            return int(self.diff.shape[1])
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


def _lc_weights(grid, star, times, band, cell_factors, limb="smooth"):
    check_star(star)
    # NumPy: set-up work, evaluated once (jax.numpy would compile every operation)
    geo = cell_geometry(grid, times, Rotation.of(star), xp=np, limb=limb, surface=getattr(grid, "surface", None))
    mu = np.asarray(geo.mu)
    pa = np.asarray(geo.proj_area)
    # written once, into a buffer the device adopts without a copy (as the dense cube)
    w = _device.host_array((*mu.shape, len(band.limb_darkening)))
    f = None if cell_factors is None else np.asarray(cell_factors, dtype=float)
    if f is not None:
        f = f[:, None] if f.ndim == 1 else f
        if f.shape[0] != grid.n_cell or (f.ndim == 3 and f.shape[1:] != (3, 3)):
            raise DopplermapInputError(f"cell factors must have n_cell={grid.n_cell} rows (and, with each cell's "
                                       f"limb darkening, 3 x 3 columns), got {f.shape}")
    for k, (ld, j) in enumerate(zip(band.limb_darkening, band.intensity, strict=True)):
        if f is not None and f.ndim == 3:  # each cell's own power-2 law (its temperature's)
            m = np.clip(np.asarray(geo.ld_mu), 0.0, 1.0)
            np.multiply(j, 1.0 - f[None, :, k, 1] * (1.0 - m ** f[None, :, k, 2]), out=w[..., k])
        else:
            np.multiply(j, np.asarray(ld(geo.ld_mu)), out=w[..., k])
        w[..., k] *= pa
    if f is not None:
        w = w * (f[None, :, :, 0] if f.ndim == 3 else f[None, :, :])
    return w


@dataclasses.dataclass(frozen=True, eq=False)
class LightCurveOptions:
    """How :func:`precompute_lightcurve` models a light curve (its fields are described there):
    ``cell_factors``, ``source``, ``normalise``, ``fit_dilution``, ``limb``, ``segment``, ``at_times``,
    ``subdivide``."""

    cell_factors: object = None
    source: str = "light curve"
    normalise: bool = True
    fit_dilution: bool = False
    limb: str = "smooth"
    segment: object = None
    at_times: bool = False
    subdivide: int = 1

    def replace(self, **changes) -> LightCurveOptions:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True, eq=False)
class LightCurveSimulation:
    """How :func:`simulate_lightcurve` makes its data: noise ``sigma`` (of the normalised
    flux) and its ``seed``; ``cell_factors`` and ``limb`` as in :func:`precompute_lightcurve`."""

    sigma: float = 1e-3
    seed: int = 0
    cell_factors: object = None
    limb: str = "smooth"


def precompute_lightcurve(grid: SurfaceGrid, star: StarParams, times, flux, err, band: LightCurveBand, *,
                          options: LightCurveOptions | None = None, **loose) -> LightCurveFit:
    """Weights of the light-curve model plus validated data.

    Args:
        grid, star: as for the line model. times: (n_lc,) days. flux, err: (n_lc,) in any
            units (divided by the mean flux when ``normalise``). band: :class:`LightCurveBand`.
        options: a :class:`LightCurveOptions`, or its fields as keywords (``fit_dilution=True``):
        cell_factors: optional (n_cell,) or (n_cell, 3) intensity factors (gravity darkening);
            or (n_cell, 3, 3): each cell's and component's factor and power-2 limb darkening
            ``(factor, g, h)``, which replaces the band's law (cells whose temperatures differ).
        limb: the limb weight, as :func:`dopplermap.model.precompute`'s.
        segment: optional (n_lc,) segment of each point (sectors, files): each segment is
            divided by its own mean and gets a free scale (:class:`LightCurveFit`).
        at_times: model rows at the points' times, never on phase nodes (a model each point
            reads from its own map: time windows, :mod:`dopplermap.windows`).
        source: names the data in errors. normalise: divide by the mean flux.
        fit_dilution: a free dilution (third light) term (:class:`LightCurveFit`).
        subdivide: each cell's weights summed over its ``m x m`` sub-cells, as the line model's
            (:func:`dopplermap.grid.subdivide`); the model rows are then at the points' times.
    """
    o = options_of("precompute_lightcurve", LightCurveOptions, options, loose)
    cell_factors, source, normalise, fit_dilution = o.cell_factors, o.source, o.normalise, o.fit_dilution
    limb, segment, at_times = o.limb, o.segment, o.at_times or o.subdivide != 1
    fine, parent = sub_cells(grid, o.subdivide) if o.subdivide != 1 else (grid, None)
    if hasattr(times, "flux") or hasattr(times, "jd"):  # a lightkurve light curve or an astropy Time
        what = "an astropy Time" if hasattr(times, "jd") else f"a {type(times).__name__}"
        raise DopplermapInputError(f"{source}: times is {what}; precompute_lightcurve takes BJD_TDB days as numbers: "
                                   "read a light curve with dopplermap.io.lightcurve.read_lightcurve (or "
                                   "dopplermap.problem.LightCurveData.load), which converts times and fluxes")
    times = np.atleast_1d(np.asarray(times, dtype=float))
    flux = np.atleast_1d(np.array(flux, dtype=float))  # copies: normalised in place below
    err = np.atleast_1d(np.array(err, dtype=float))
    if not (times.shape == flux.shape == err.shape) or times.ndim != 1 or times.size < 2:
        raise DopplermapInputError(f"{source}: times, flux and err must be 1-D of equal length >= 2, got "
                         f"{times.shape}, {flux.shape}, {err.shape}")
    for name, a in (("time", times), ("flux", flux), ("error", err)):
        if not np.all(np.isfinite(a)):
            raise DopplermapInputError(f"{source}: {name} has NaN/inf at row {int(np.argmax(~np.isfinite(a)))}")
    if np.any(err <= 0):
        raise DopplermapInputError(f"{source}: errors must be > 0, row {int(np.argmax(err <= 0))} has {err[err <= 0][0]!r}")
    check_phase_span(times, star.t0, star.period, where=source)
    seg, n_seg = None, 0
    if segment is not None:
        seg = np.asarray(segment)
        if seg.shape != times.shape or seg.dtype.kind not in "iu" or seg.min() < 0:
            raise DopplermapInputError(f"{source}: segment must be {times.size} integers >= 0 (one per point), "
                                       f"got shape {seg.shape}, dtype {seg.dtype}")
        if fit_dilution:
            raise DopplermapInputError(f"{source}: fit_dilution with several segments: each segment's free scale "
                                       "already absorbs a constant dilution's effect on the level; use one or the other")
        _, seg = np.unique(seg, return_inverse=True)
        n_seg = int(seg.max()) + 1
        seg = seg.astype(np.int32)
    if normalise:
        for k in range(max(n_seg, 1)):
            sel = slice(None) if seg is None else seg == k
            mean = flux[sel].mean()
            if not mean > 0:
                raise DopplermapInputError(f"{source}: mean flux must be > 0 to normalise, got {mean!r}")
            flux[sel], err[sel] = flux[sel] / mean, err[sel] / mean
    plan = lightcurve_plan(grid, star, err, times.size, at_times=at_times)
    n_cell = grid.n_cell
    check_bytes(plan["bytes"], f"{source}: the light-curve model ({plan['rows']} rows x {n_cell} cells)",
                "the light curve's points (bin = \"auto\") or the grid's n_cell")
    step = max(1, int(CHUNK_BYTES // (24 * 3 * n_cell)))  # the chunk's weights and geometry
    common = dict(weight=None, flux=_device.asarray(flux), err=_device.asarray(err), times=_device.asarray(times),
                  fit_dilution=bool(fit_dilution), segment=None if seg is None else _device.asarray(seg),
                  n_segment=n_seg)
    if plan["nodes"] is None:  # rows at the times
        diff = _device.host_array((times.size, 2 * n_cell))
        base = np.empty(times.size)
        fine_factors = None if cell_factors is None or parent is None else np.asarray(cell_factors)[parent]
        step = step if parent is None else max(1, step * n_cell // fine.n_cell)
        for a in range(0, times.size, step):
            if parent is None:
                w = _lc_weights(grid, star, times[a:a + step], band, cell_factors, limb)
            else:  # each cell's sub-cells, summed (they are consecutive, as many for every cell)
                w = _lc_weights(fine, star, times[a:a + step], band, fine_factors, limb)
                w = w.reshape(w.shape[0], n_cell, -1, w.shape[-1]).sum(axis=2)
            np.subtract(w[..., 1], w[..., 0], out=diff[a:a + step, :n_cell])
            np.subtract(w[..., 2], w[..., 0], out=diff[a:a + step, n_cell:])
            base[a:a + step] = w[..., 0].sum(axis=1)
        return LightCurveFit(**common, base=_device.asarray(base), diff=_device.asarray(diff))
    n = plan["nodes"]
    group, omega = rotation_groups(grid, star)
    circ = None if not plan["circulant"] else _circulant(grid, star, times, n, group, omega, band, cell_factors, limb)
    if circ is not None:
        return LightCurveFit(**common, **circ, cell_count=int(n_cell))
    if plan["circulant"]:  # a cell's weights are not its ring's shifted: the cells' own weights
        plan = lightcurve_plan(grid, star, err, times.size, circulant=False)
        check_bytes(plan["bytes"], f"{source}: the light-curve model ({plan['rows']} rows x {n_cell} cells)",
                    "the light curve's points (bin = \"auto\") or the grid's n_cell")
    n_group = omega.size
    pieces = _pieces(group, n_group)
    m = max(p.size for p in pieces)
    cells = np.zeros((len(pieces), m), dtype=np.int32)
    piece_group = np.asarray([group[p[0]] for p in pieces], dtype=np.int32)
    diff = _device.host_array((len(pieces), n, 2 * m))  # piece first: one batched matrix-vector product
    diff[...] = 0.0  # the padding's weights
    base = np.zeros((n_group, n))
    factors = None if cell_factors is None else np.asarray(cell_factors, dtype=float)
    for q, members in enumerate(pieces):
        g = int(piece_group[q])
        k = members.size
        cells[q, :k] = members
        surface = getattr(grid, "surface", None)
        sub = _Cells(lat=np.asarray(grid.lat)[members], lon=np.asarray(grid.lon)[members],
                     area=np.asarray(grid.area)[members], n_cell=k,
                     surface=None if surface is None else surface.subset(members))
        node_t = star.t0 + 2.0 * np.pi * np.arange(n) / (n * omega[g])  # node j: turned by 2 pi j / N since t0
        gstep = max(1, int(CHUNK_BYTES // (24 * 3 * k)))
        for a in range(0, n, gstep):
            w = _lc_weights(sub, star, node_t[a:a + gstep], band, None if factors is None else factors[members], limb)
            diff[q, a:a + gstep, :k] = w[..., 1] - w[..., 0]
            diff[q, a:a + gstep, m:m + k] = w[..., 2] - w[..., 0]
            base[g, a:a + gstep] += w[..., 0].sum(axis=1)
    pos = np.mod(omega[:, None] * (times[None, :] - star.t0) / (2.0 * np.pi), 1.0) * n
    index = np.minimum(np.floor(pos).astype(np.int32), n - 1)
    return LightCurveFit(**common, base=_device.asarray(base), diff=_device.asarray(diff),
                         index=_device.asarray(index), frac=_device.asarray(pos - index),
                         cells=_device.asarray(cells), piece_group=_device.asarray(piece_group),
                         cell_count=int(n_cell))


CIRCULANT_RTOL = 1e-10
"""Circulant groups: each cell's weights equal its ring's kernel shifted to this fraction of the
largest weight, plus what the nodes' times carry (a time rounded to float64 at ``|t|`` days
turns the star by up to ``rate eps |t|`` rad, which moves a weight by up to ~4x that of the
largest weight), or the model keeps the cells' own weights."""


def _ring_groups(grid, group, n: int):
    """Cells grouped by rotation rate and ring size, each ring's cells evenly spaced in
    longitude: ``[(N_g, members, ring, shift)]`` (``N_g``: the ring size's smallest multiple
    >= ``n``; ``ring``: each member's ring in the group; ``shift``: its longitude from its
    ring's first cell, in nodes), or None (a ring not evenly spaced, or too many groups)."""
    lat, lon = np.asarray(grid.lat, dtype=float), np.asarray(grid.lon, dtype=float)
    _, ring_of = np.unique(lat, return_inverse=True)
    size = np.bincount(ring_of)[ring_of]
    keys, key_of = np.unique(np.stack([group, size]), axis=1, return_inverse=True)
    if keys.shape[1] > MAX_ROTATION_GROUPS:
        return None
    out = []
    for g in range(keys.shape[1]):
        members = np.flatnonzero(key_of.ravel() == g)
        count = int(keys[1, g])
        n_g = count * int(np.ceil(n / count))
        _, ring = np.unique(ring_of[members], return_inverse=True)
        shift = np.empty(members.size, dtype=np.int64)
        for r in range(int(ring.max()) + 1):
            sel = ring == r
            pos = np.mod(lon[members[sel]] - lon[members[sel]][0], 2.0 * np.pi) * n_g / (2.0 * np.pi)
            k = np.round(pos)
            if np.max(np.abs(pos - k)) > 1e-6:
                return None
            shift[sel] = np.mod(k.astype(np.int64), n_g)
        out.append((n_g, members, ring, shift))
    return out


def _circulant(grid, star, times, n: int, group, omega, band, cell_factors, limb) -> dict | None:
    """The phase-node model of circulant groups (:class:`LightCurveFit`), or None where some
    cell's weights are not its ring's kernel shifted (:data:`CIRCULANT_RTOL`)."""
    layout = _ring_groups(grid, group, n)
    if layout is None:
        return None
    surface = getattr(grid, "surface", None)
    factors = None if cell_factors is None else np.asarray(cell_factors, dtype=float)

    def weights(members, node_t):
        sub = _Cells(lat=np.asarray(grid.lat)[members], lon=np.asarray(grid.lon)[members],
                     area=np.asarray(grid.area)[members], n_cell=members.size,
                     surface=None if surface is None else surface.subset(members))
        return _lc_weights(sub, star, node_t, band, None if factors is None else factors[members], limb)

    # one transform length for all groups (one batched transform): a circular convolution of
    # N_g points is the sum of the two halves of the linear one, which fits in L >= 2 N_g
    length = 1 << int(np.ceil(np.log2(2 * max(r[0] for r in layout))))
    kernels, slots, cells, ring_group, bases, counts, fold, index, weight = [], [], [], [], [], [], [], [], []
    offset, n_ring = 0, 0
    for g, (n_g, members, ring, shift) in enumerate(layout):
        rate = float(omega[group[members[0]]])
        node_t = star.t0 + 2.0 * np.pi * np.arange(n_g) / (n_g * rate)
        first = np.asarray([members[ring == r][0] for r in range(int(ring.max()) + 1)])
        kernel = weights(first, node_t)  # (N_g, R, 3)
        phase_err = rate * np.finfo(float).eps * float(np.max(np.abs(node_t)))
        tol = (CIRCULANT_RTOL + 4.0 * phase_err) * (float(np.max(np.abs(kernel))) or 1.0)
        sign = None
        base = np.zeros(n_g)
        gstep = max(1, int(CHUNK_BYTES // (24 * 3 * members.size)))
        for a in range(0, n_g, gstep):
            w = weights(members, node_t[a:a + gstep])
            base[a:a + gstep] = w[..., 0].sum(axis=1)
            j = np.arange(a, a + w.shape[0])[:, None]
            for sgn in ((1, -1) if sign is None else (sign,)):
                expect = kernel[np.mod(j - sgn * shift[None, :], n_g), ring[None, :]]
                if np.max(np.abs(w - expect)) <= tol:
                    sign = sgn
                    break
            else:
                return None
        padded = np.zeros((2, first.size, length))
        padded[0, :, :n_g] = (kernel[..., 1] - kernel[..., 0]).T
        padded[1, :, :n_g] = (kernel[..., 2] - kernel[..., 0]).T
        kernels.append(padded)
        slots.append((n_ring + ring) * length + np.mod(sign * shift, n_g))
        cells.append(members)
        ring_group.append(np.full(first.size, g))
        bases.append(base)
        counts.append(n_g)
        fold.append(np.stack([g * length + np.arange(n_g), g * length + n_g + np.arange(n_g)]))
        pos = np.mod(rate * (times - star.t0) / (2.0 * np.pi), 1.0) * n_g
        lo = np.minimum(np.floor(pos).astype(np.int64), n_g - 1)
        index += [offset + lo, offset + np.where(lo + 1 == n_g, 0, lo + 1)]
        weight += [1.0 - (pos - lo), pos - lo]
        offset += n_g
        n_ring += first.size
    fold = np.concatenate(fold, axis=1)
    return dict(base=_device.asarray(np.concatenate(bases)),
                spectra=_device.asarray(np.fft.rfft(np.concatenate(kernels, axis=1), axis=-1)),
                slots=_device.asarray(np.concatenate(slots), dtype=np.int32),
                group_cells=_device.asarray(np.concatenate(cells), dtype=np.int32),
                piece_group=_device.asarray(np.concatenate(ring_group), dtype=np.int32),
                fold=_device.asarray(fold, dtype=np.int32), node_counts=tuple(counts),
                index=_device.asarray(np.stack(index, axis=1), dtype=np.int32),
                frac=_device.asarray(np.stack(weight, axis=1)))


def _pieces(group, n_group: int) -> list[np.ndarray]:
    """Each rotation group's cells cut into pieces of at most the mean group's size."""
    size = int(np.ceil(group.size / n_group))
    out = []
    for g in range(n_group):
        members = np.flatnonzero(group == g)
        out += [members[a:a + size] for a in range(0, members.size, size)]
    return out


@dataclasses.dataclass(frozen=True)
class _Cells:
    """Some cells of a grid (a rotation group), as :func:`_lc_weights` reads a grid."""

    lat: np.ndarray
    lon: np.ndarray
    area: np.ndarray
    n_cell: int
    surface: object = None  # the distorted surface's rows of these cells (dopplermap.roche.Surface), or None


def lightcurve_model(fssc, fssh, lc: LightCurveFit):
    """Model light curve (n_lc,), normalised by its mean; fssc, fssh: (n_cell,)."""
    if lc.spectra is not None:  # circulant groups, interpolated to the points (periodic)
        v = _circulant_nodes(fssc, fssh, lc)
        # one flat gather, point-major: XLA's CPU gather (and its scatter-add) is fastest so
        near = v.at[lc.index.reshape(-1)].get(mode="promise_in_bounds").reshape(lc.index.shape)
        flux = jnp.sum(near * lc.frac, axis=1)
    elif lc.cells is not None:  # phase nodes per rotation group, interpolated to the points (periodic)
        f = jnp.concatenate([fssc[lc.cells], fssh[lc.cells]], axis=1)  # (n_piece, 2 M)
        pv = jnp.einsum("pjm,pm->pj", lc.diff, f)  # (n_piece, N)
        v = lc.base + jax.ops.segment_sum(pv, lc.piece_group, num_segments=lc.base.shape[0])  # (n_group, N)
        nxt = jnp.where(lc.index + 1 == v.shape[1], 0, lc.index + 1)
        flux = jnp.sum(jnp.take_along_axis(v, lc.index, axis=1) * (1.0 - lc.frac)
                       + jnp.take_along_axis(v, nxt, axis=1) * lc.frac, axis=0)
    elif lc.diff is not None:  # the folded weights: one (n_lc, 2 n_cell) product
        flux = lc.base + lc.diff @ jnp.concatenate([fssc, fssh])
    else:
        f = jnp.stack([1.0 - fssc - fssh, fssc, fssh], axis=1)
        flux = jnp.einsum("eck,ck->e", lc.weight, f)
    return flux / jnp.mean(flux)


@jax.jit  # called outside a compiled objective too: one compilation, not one per operation
def _circulant_nodes(fssc, fssh, lc: LightCurveFit):
    """The flux at every group's phase nodes, end to end: each ring's cells placed at their
    shifts and circularly convolved with its kernel (a product of Fourier transforms)."""
    f = jnp.stack([fssc, fssh])  # (2, n_cell)
    n_ring, length = lc.spectra.shape[1], 2 * (lc.spectra.shape[2] - 1)
    placed = jnp.zeros((2, n_ring * length), f.dtype).at[:, lc.slots].set(f[:, lc.group_cells], unique_indices=True)
    prod = jnp.sum(lc.spectra * jnp.fft.rfft(placed.reshape(2, n_ring, length), axis=-1), axis=0)
    conv = jnp.fft.irfft(jax.ops.segment_sum(prod, lc.piece_group, num_segments=len(lc.node_counts)), n=length)
    return lc.base + jnp.sum(conv.reshape(-1)[lc.fold], axis=0)


def lightcurve_residuals(fssc, fssh, lc: LightCurveFit):
    """Normalised residuals ``(obs - model) / err`` (n_lc,), the dilution profiled out if fitted."""
    return model_residuals(lightcurve_model(fssc, fssh, lc), lc)


def model_residuals(model, lc: LightCurveFit):
    """Normalised residuals ``(obs - model) / err`` (n_lc,) of a mean-normalised model light
    curve (each segment's free scale and the dilution profiled out if fitted)."""
    if lc.segment is not None:  # a free scale per segment, profiled out (weighted least squares)
        w = 1.0 / lc.err**2
        num = jax.ops.segment_sum(w * lc.flux * model, lc.segment, num_segments=lc.n_segment)
        den = jax.ops.segment_sum(w * model * model, lc.segment, num_segments=lc.n_segment)
        model = model * (num / den)[lc.segment]
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


def weighted_residuals(fssc, fssh, lcs):
    """Residuals whose squared norm is the weighted chi-square of :func:`chi2_lightcurves`
    (its second value): ``sqrt(w_b / n) (obs - model) / err`` of every band ``b`` of a
    :class:`LightCurveSet` (``n`` the points of all bands), or ``(obs - model) / err / sqrt(n_lc)``
    of one :class:`LightCurveFit`: the light curves' part of a least-squares solver's residuals."""
    if isinstance(lcs, LightCurveFit):
        r = lightcurve_residuals(fssc, fssh, lcs)
        return r / np.sqrt(r.size)
    n = float(sum(b.n_lc for b in lcs.bands))
    w = jnp.sqrt(lcs.weights / n)
    return jnp.concatenate([w[i] * lightcurve_residuals(fssc, fssh, b) for i, b in enumerate(lcs.bands)])


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
                        options: LightCurveSimulation | None = None, **loose):
    """Noisy normalised light curve of the maps: returns (flux (n_lc,), err (n_lc,), noiseless).
    ``options``: a :class:`LightCurveSimulation`, or its fields as keywords (``sigma=1e-3, seed=0``)."""
    o = options_of("simulate_lightcurve", LightCurveSimulation, options, loose)
    sigma, seed, cell_factors, limb = o.sigma, o.seed, o.cell_factors, o.limb
    if not sigma > 0:
        raise DopplermapInputError(f"sigma must be > 0, got {sigma!r}")
    times = np.atleast_1d(np.asarray(times, dtype=float))
    w = _lc_weights(grid, star, times, band, cell_factors, limb)
    f = np.stack([1.0 - np.asarray(fssc) - np.asarray(fssh), np.asarray(fssc), np.asarray(fssh)], axis=1)
    clean = np.einsum("eck,ck->e", w, f)
    clean = clean / clean.mean()
    rng = np.random.default_rng(seed)
    err = np.full(times.size, float(sigma))
    return clean + rng.normal(size=times.size) * err, err, clean
