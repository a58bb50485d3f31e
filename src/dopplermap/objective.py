"""Objective: reduced chi-square plus a regulariser, as in the seed.

With ``x = [fssc (n_cell), fssh (n_cell), rv (n_epoch), amp (n_epoch)]`` (the seed's
layout)::

    chi2 = sum_e sum_v ((obs[e, v] - model[e, v]) / err[e, v])^2 / (n_epoch n_vel)

    mem  = sum_c w_c [ fssc_c ln(fssc_c / m) + fssh_c ln(fssh_c / m)
                       + (fssc_c + fssh_c) ln((fssc_c + fssh_c) / (1 - m)) ] / n_cell
           with w_c = area_c / max(area), m = 1e-5            ("mem": the seed's term)

    mem_spotdipy = sum_c a_c [ fssc_c ln(fssc_c / m') + fssh_c ln(fssh_c / m')
                               + (fssc_c + fssh_c) ln((fssc_c + fssh_c) / m') ]
           with a_c = area_c / sum(area), m' = 1e-7        ("mem_spotdipy": SpotDIPy's term)

    tikhonov = sum_(i,j) in edges [(fssc_i - fssc_j)^2 + (fssh_i - fssh_j)^2] / n_edge

    (these terms, and "none", are the entries of :mod:`dopplermap.regularisers`)

    loss = chi2 + lambda * regulariser + penalty * sum_c max(0, fssc_c + fssh_c - 1)^2
           [+ offset_prior, with ``offset_sigma``; see below]

Several line data sets (:class:`LineSets`: instruments, LSD masks, each with its own epochs,
velocity grid and local lines) share the maps; ``rv`` and ``amp`` then hold every set's
epochs, set after set (``n_epoch`` = the total), and the line chi-square is pooled over all
points, so every point counts the same whatever set it is in::

    chi2      = sum_d SSR_d / sum_d N_d        (reported; one set: the seed's chi2 above)
    loss term = sum_d w_d SSR_d / sum_d N_d    (w_d: the set's weight, 1 by default)
    chi2_d    = SSR_d / N_d                    (reported per set, ``Terms.chi2_sets``)

with ``SSR_d`` the set's sum of squared normalised residuals and ``N_d`` its number of
points (epochs x velocities). Each set is synthesised on its own grid: a set with few
epochs costs few epochs. Several light-curve bands likewise
(:class:`dopplermap.lightcurve.LightCurveSet`).

``mem`` is the default and unchanged. ``mem_spotdipy`` is the normalisation of SpotDIPy
(Bahar et al.; its objective divides the cell areas by their sum and uses a 1e-7 floor in
all three logarithms), so a lambda tuned in SpotDIPy carries over: with the seed's
normalisation the same lambda regularises about 3x differently. Its floor m' enters only
the entropy; the filling factors keep dopplermap's bounds ``[1e-5, 1 - 1e-5]``.

**Offset prior** (``offset_sigma``, default None: no term, the loss above unchanged). A
Gaussian prior ``amp_e ~ N(0, sigma^2)`` on each per-epoch continuum offset adds
``-2 ln p = (amp_e / sigma)^2`` to the *un-normalised* chi-square (the sum of squared
normalised residuals), so in the normalised loss it is divided by the same number of points::

    offset_prior = sum_e (amp_e / sigma_e)^2 / (n_epoch n_vel)
    loss         = (SSR + sum_e (amp_e / sigma_e)^2) / (n_epoch n_vel) + lambda * reg + penalty

Each offset thus counts as one more data point ``0 +- sigma`` of its data set (``n_epoch n_vel
loss / 2`` is minus the log posterior, up to the regulariser and a constant), and ``sigma``
reads "the continuum normalisation of each profile is known to +-sigma". It belongs to its line data set: with
several sets each epoch has its set's sigma, the term is pooled and weighted like the
line chi-square (``sum_d w_d (SSR_d + P_d) / sum_d N_d``, ``P_d`` the set's prior sum), and
in a joint fit it is multiplied by ``line_weight`` with the line chi-square.
``Terms.offset_prior`` reports ``sum_e (amp_e / sigma_e)^2 / sum_d N_d`` (unweighted, as
``chi2``). An infinite sigma is no prior for that epoch.

**Time windows** (:mod:`dopplermap.windows`): with K windows ``fssc`` and ``fssh`` hold K
maps, each epoch's model (and each light-curve point's) reads its window's map, the
regulariser term is the mean of the windows' and ``lmbd_time / K`` times the temporal
coupling is added (``ObjectiveData.lmbd_time``, ``Terms.temporal``). One window is the loss
above exactly.

The seed never constrains ``fssc + fssh <= 1`` (which keeps ``fssp >= 0``). dopplermap adds
the quadratic penalty above (``penalty`` = 1e4 by default; zero wherever the constraint
holds, so the seed's loss is unchanged on feasible maps) and, after the solve, scales any
remaining tiny excess back onto ``fssc + fssh = 1``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _device, regularisers
from ._repr import compact
from ._sets import names_and_weights
from .constants import FILL_MIN
from .errors import DopplermapInputError
from .lightcurve import chi2_lightcurves
from .model import Precomputed, forward
from .model import solve_form as _solve_form
from .model import with_exact_numerator as _with_exact_numerator
from .units import to_epoch, to_unit
from .windows import WindowedLightCurve, chi2_windowed_lightcurves, split_maps
from .windows import time_coupling as coupling_of

__all__ = ["Observations", "LineSets", "NoLines", "Layout", "Terms", "check_sets", "solve_form", "with_exact_numerator",
           "set_chi2", "chi2", "sum_excess", "regulariser_value", "offset_sigmas", "offset_prior", "ObjectiveData",
           "data_terms", "objective_terms", "loss", "DEFAULT_PENALTY", "n_windows"]

DEFAULT_PENALTY = 1e4

_MAX_SPAN_KMS = 1.0e4  # no line profile spans 10^4 km/s: such a grid is in m/s (as io/lsd.py's readers)

@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, eq=False)
class Observations:
    """Observed line profiles, each normalised by its mean (as the model is).

    Attributes:
        times: (n_epoch,) days. vels: (n_vel,) km/s, increasing.
        flux: (n_epoch, n_vel) normalised intensity. err: (n_epoch, n_vel) 1-sigma errors.
    """

    times: jnp.ndarray
    vels: jnp.ndarray
    flux: jnp.ndarray
    err: jnp.ndarray

    def __repr__(self) -> str:
        return compact(self, ("times", "vels"), n_epoch=self.n_epoch, n_vel=self.n_vel)

    @classmethod
    def create(cls, times, vels, flux, err, *, source: str = "observations", normalise: bool = False):
        """Validate and build; ``normalise`` divides each profile (and error) by its mean.

        ``times`` may be an astropy ``Time`` (taken to BJD_TDB) and ``vels`` a velocity
        Quantity (converted to km/s); see :mod:`dopplermap.units`.
        """
        times = np.atleast_1d(np.asarray(to_epoch(times, f"{source}: times"), dtype=float))
        vels = np.asarray(to_unit(vels, "km/s", f"{source}: vels"), dtype=float)
        flux = np.asarray(to_unit(flux, "", f"{source}: flux"), dtype=float)
        err = np.asarray(to_unit(err, "", f"{source}: err"), dtype=float)
        if vels.ndim != 1:
            raise DopplermapInputError(f"{source}: vels must be 1-D, got shape {vels.shape}")
        if not np.all(np.isfinite(vels)):  # NaN compares false, so the order check below would pass it
            raise DopplermapInputError(f"{source}: vels has NaN/inf values, first at index {int(np.argmin(np.isfinite(vels)))}")
        if np.any(np.diff(vels) <= 0):
            i = int(np.argmax(np.diff(vels) <= 0))
            raise DopplermapInputError(f"{source}: vels must be strictly increasing, vels[{i}]={vels[i]!r} >= vels[{i + 1}]={vels[i + 1]!r}")
        if vels.size and float(vels[-1] - vels[0]) > _MAX_SPAN_KMS:
            raise DopplermapInputError(f"{source}: vels span {float(vels[-1] - vels[0]):.6g} km/s, which only makes "
                                       "sense in m/s: give km/s (divide by 1000) or a Quantity (vels * u.m / u.s)")
        want = (times.size, vels.size)
        for name, arr in (("flux", flux), ("err", err)):
            if arr.shape != want:
                raise DopplermapInputError(f"{source}: {name} must have shape (n_epoch, n_vel) = {want}, got {arr.shape}")
            bad = ~np.isfinite(arr)
            if bad.any():
                e, v = np.argwhere(bad)[0]
                raise DopplermapInputError(f"{source}: {name} has {int(bad.sum())} NaN/inf values, first at epoch {e}, velocity index {v}")
        if not np.all(np.isfinite(times)):
            raise DopplermapInputError(f"{source}: times contains NaN or inf")
        if np.any(err <= 0):
            e, v = np.argwhere(err <= 0)[0]
            raise DopplermapInputError(f"{source}: err must be > 0, got {err[e, v]!r} at epoch {e}, velocity index {v} "
                             f"({int((err <= 0).sum())} values <= 0)")
        if normalise:
            mean = flux.mean(axis=1, keepdims=True)
            if np.any(mean <= 0):
                raise DopplermapInputError(f"{source}: a profile has a non-positive mean; cannot normalise")
            flux, err = flux / mean, err / mean
        return cls(times=_device.asarray(times), vels=_device.asarray(vels), flux=_device.asarray(flux), err=_device.asarray(err))

    @property
    def n_epoch(self) -> int:
        return int(self.flux.shape[0])

    @property
    def n_vel(self) -> int:
        return int(self.flux.shape[1])


@functools.partial(jax.tree_util.register_dataclass, data_fields=["sets", "weights"], meta_fields=["names"])
@dataclasses.dataclass(frozen=True, eq=False)
class LineSets:
    """Several line data sets fitted with one map (see the module docstring).

    Attributes:
        sets: one :class:`~dopplermap.model.Precomputed` per set (its own epochs, velocity
            grid, local lines, synthesis form), all on the same surface grid.
        weights: (n_set,) weight of each set in the loss. names: (n_set,) unique names.

    The observations of a ``LineSets`` are a tuple of :class:`Observations`, one per set.
    """

    sets: tuple
    weights: jnp.ndarray
    names: tuple

    def __repr__(self) -> str:
        return compact(self, ("names",), n_sets=self.n_sets, n_cell=self.n_cell, n_epoch=self.n_epoch)

    @classmethod
    def create(cls, sets, weights=None, names=None) -> LineSets:
        """Validate and build; ``weights`` default 1, ``names`` default ``lines1``, ``lines2`` ..."""
        sets = tuple(sets)
        if not sets or not all(isinstance(p, Precomputed) for p in sets):
            raise DopplermapInputError(f"line data sets need at least one precomputed model each, got {len(sets)} items")
        names, weights = names_and_weights("line data set", "lines", [p.n_cell for p in sets], names, weights)
        return cls(sets=sets, weights=weights, names=names)

    @property
    def n_sets(self) -> int:
        return len(self.sets)

    @property
    def n_cell(self) -> int:
        return self.sets[0].n_cell

    @property
    def n_epoch(self) -> int:
        """All sets' epochs together (the length of ``rv`` and ``amp``)."""
        return sum(p.n_epoch for p in self.sets)

    @property
    def epoch_slices(self) -> tuple[slice, ...]:
        """Each set's part of ``rv`` and ``amp``."""
        ends = np.cumsum([0] + [p.n_epoch for p in self.sets])
        return tuple(slice(int(a), int(b)) for a, b in zip(ends[:-1], ends[1:], strict=True))

    @property
    def cell_area(self):
        return self.sets[0].cell_area

    @property
    def edges(self):
        return self.sets[0].edges


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, eq=False)
class NoLines:
    """The line part of a problem without line profiles (light curves alone).

    It has the surface (``cell_area``, ``edges``, for the regulariser) and no epoch: the
    parameter vector is ``[fssc, fssh]`` (:class:`Layout` with ``n_epoch = 0``), there are
    no observations (``obs`` is None) and the loss is the light curves' chi-square alone,
    which the solvers also report as ``chi2``. With ``n_window`` time windows
    (:mod:`dopplermap.windows`) each of ``fssc`` and ``fssh`` holds every window's map in turn
    and each light-curve point reads its window's (a
    :class:`~dopplermap.windows.WindowedLightCurve`).
    """

    cell_area: jnp.ndarray
    edges: jnp.ndarray
    n_window: int = dataclasses.field(default=1, metadata={"static": True})

    @classmethod
    def of_grid(cls, grid, n_window: int = 1) -> NoLines:
        edges = np.asarray(grid.edges, dtype=np.int32).reshape(-1, 2)
        return cls(cell_area=_device.asarray(np.asarray(grid.area, dtype=float)), edges=_device.asarray(edges),
                   n_window=int(n_window))

    @property
    def n_cell(self) -> int:
        return int(self.cell_area.shape[0]) * self.n_window

    @property
    def n_epoch(self) -> int:
        return 0


def check_sets(pre: LineSets, obs) -> None:
    """Refuse observations that do not match their sets (a tuple, one :class:`Observations` each)."""
    if not isinstance(obs, (tuple, list)) or len(obs) != pre.n_sets:
        raise DopplermapInputError(f"{pre.n_sets} line data sets need a tuple of {pre.n_sets} Observations, "
                                   f"got {type(obs).__name__}")
    for name, p, o in zip(pre.names, pre.sets, obs, strict=True):
        if not isinstance(o, Observations):
            raise DopplermapInputError(f"line data set {name!r}: observations must be Observations, got {type(o).__name__}")
        if (o.n_epoch, o.n_vel) != (p.n_epoch, p.n_vel):
            raise DopplermapInputError(f"line data set {name!r}: observations are (n_epoch, n_vel) = "
                                       f"{(o.n_epoch, o.n_vel)} but its model is {(p.n_epoch, p.n_vel)}")
        if not np.allclose(np.asarray(o.vels), np.asarray(p.line.vels), rtol=0, atol=1e-9):
            raise DopplermapInputError(f"line data set {name!r}: velocity grid differs from its model's")


def solve_form(pre, cube_dtype="float32", *, blocked: bool = False):
    """:func:`dopplermap.model.solve_form` of a model, or of each set of a :class:`LineSets`."""
    if isinstance(pre, LineSets):
        return dataclasses.replace(pre, sets=tuple(_solve_form(p, cube_dtype, blocked=blocked) for p in pre.sets))
    if isinstance(pre, NoLines):
        return pre
    return _solve_form(pre, cube_dtype, blocked=blocked)


def with_exact_numerator(solve_pre, pre, fssc, fssh):
    """:func:`dopplermap.model.with_exact_numerator`, set by set for a :class:`LineSets`."""
    if isinstance(solve_pre, LineSets):
        return dataclasses.replace(solve_pre, sets=tuple(_with_exact_numerator(s, p, fssc, fssh)
                                                         for s, p in zip(solve_pre.sets, pre.sets, strict=True)))
    if isinstance(solve_pre, NoLines):
        return solve_pre
    return _with_exact_numerator(solve_pre, pre, fssc, fssh)


def set_chi2(pre, lightcurve, terms) -> dict:
    """``{"chi2_sets": {name: chi2}, "chi2_lc_sets": {name: chi2}}`` of several line data sets /
    light-curve bands (None where there is one): the result's per-set statistics."""
    def named(names, values):
        return None if values is None else {n: float(v) for n, v in zip(names, values, strict=True)}

    return {"chi2_sets": named(getattr(pre, "names", ()), terms.chi2_sets),
            "chi2_lc_sets": named(getattr(lightcurve, "names", ()), terms.chi2_lc_sets)}


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the flat parameter vector maps onto the star: ``[fssc, fssh, rv, amp]``.

    Per spot component (:attr:`components`) one filling factor per cell, then per epoch
    (:attr:`nuisances`) an rv shift and a continuum offset. A :class:`dopplermap.problem.Problem`
    owns its layout (``problem.layout``); every solver, bound and result reads the vector
    through it (:meth:`split`, :meth:`join`, :meth:`blocks`), so a map that changes with time
    (one map per rotation) is another layout with more map blocks, not another code path.
    """

    n_cell: int
    n_epoch: int

    components: ClassVar[tuple[str, ...]] = ("cool", "hot")
    nuisances: ClassVar[tuple[str, ...]] = ("rv", "amp")

    def blocks(self) -> dict[str, slice]:
        """Each block of the vector by name: the components' maps, then the nuisances."""
        sizes = [(c, self.n_cell) for c in self.components] + [(n, self.n_epoch) for n in self.nuisances]
        out, start = {}, 0
        for name, n in sizes:
            out[name] = slice(start, start + n)
            start += n
        return out

    @property
    def size(self) -> int:
        return 2 * self.n_cell + 2 * self.n_epoch

    def split(self, x):
        n, e = self.n_cell, self.n_epoch
        return x[:n], x[n:2 * n], x[2 * n:2 * n + e], x[2 * n + e:]

    def join(self, fssc, fssh, rv, amp):
        xp = jnp if any(isinstance(a, jax.Array) for a in (fssc, fssh, rv, amp)) else np
        return xp.concatenate([xp.asarray(fssc, dtype=float), xp.asarray(fssh, dtype=float),
                               xp.asarray(rv, dtype=float), xp.asarray(amp, dtype=float)])

    def initial(self, fill: float = FILL_MIN) -> np.ndarray:
        """The seed's starting point: all filling factors ``fill``, rv = amp = 0."""
        return np.concatenate([np.full(2 * self.n_cell, fill), np.zeros(2 * self.n_epoch)])


def n_windows(pre) -> int:
    """How many time windows' maps a model's form spans (1: a static map; see
    :mod:`dopplermap.windows`): its cells over the grid's."""
    return int(pre.n_cell) // int(np.shape(pre.cell_area)[0])


def chi2(model, obs: Observations):
    """The seed's reduced chi-square: sum of squared normalised residuals / (n_epoch n_vel)."""
    r = (obs.flux - model) / obs.err
    return jnp.sum(r * r) / r.size


def regulariser_value(name: str, fssc, fssh, cell_area, edges):
    """The regulariser ``name`` (one of :data:`dopplermap.choices.REGULARISERS`, defined in
    :mod:`dopplermap.regularisers`) of the maps ``fssc``, ``fssh``."""
    reg = regularisers.regulariser(name)
    return reg.value(fssc, fssh, cell_area, edges, reg.floor)


def sum_excess(fssc, fssh):
    """Sum over cells of ``max(0, fssc + fssh - 1)^2``."""
    return jnp.sum(jnp.maximum(fssc + fssh - 1.0, 0.0) ** 2)


class Terms(NamedTuple):
    """The named terms of one objective evaluation (a pytree: it passes through ``jit``).

    ``chi2``: reduced chi-square of the line profiles (without the offset prior); ``regulariser``: the regulariser's
    value (before lambda); ``penalty``: the ``fssc + fssh <= 1`` penalty (weighted);
    ``chi2_lc``: the light curve's reduced chi-square, or None without one; ``model``: the
    model profiles (n_epoch, n_vel) when asked for, else None (several line data sets: a
    tuple, one per set). ``chi2_sets`` / ``chi2_lc_sets``: the reduced chi-square of each line
    data set / light-curve band when there are several (``chi2`` / ``chi2_lc`` are then the
    pooled ones, see the module docstring), else None. ``offset_prior``: the offset prior's
    term ``sum_e (amp_e / sigma_e)^2 / n_points`` (before the set weights), or None without one.
    ``temporal``: with time windows (:mod:`dopplermap.windows`), the temporal coupling
    ``sum_k T(F_k, F_{k-1}) / K`` (before ``lmbd_time``), else None; ``regulariser`` is then
    the mean of the windows' regulariser values.
    """

    chi2: jax.Array
    regulariser: jax.Array
    penalty: jax.Array
    chi2_lc: jax.Array | None = None
    model: jax.Array | tuple | None = None
    chi2_sets: tuple | None = None
    chi2_lc_sets: tuple | None = None
    offset_prior: jax.Array | None = None
    temporal: jax.Array | None = None


def _line_chi2(fssc, fssh, rv, amp, pre, obs):
    """``(chi2, weighted, per_set, model)`` of one model or of a :class:`LineSets` (module docstring);
    zeros and no model for :class:`NoLines`."""
    if isinstance(pre, NoLines):
        zero = jnp.zeros((), fssc.dtype)
        return zero, zero, None, None
    if not isinstance(pre, LineSets):
        model = forward(fssc, fssh, rv, amp, pre)
        c2 = chi2(model, obs)
        return c2, c2, None, model
    ssr, models = [], []
    for p, o, sl in zip(pre.sets, obs, pre.epoch_slices, strict=True):  # one term per set (each its own shape)
        m = forward(fssc, fssh, rv[sl], amp[sl], p)
        r = (o.flux - m) / o.err
        ssr.append(jnp.sum(r * r))
        models.append(m)
    ssr = jnp.stack(ssr)
    sizes = np.asarray([o.flux.size for o in obs], dtype=float)
    n = float(sizes.sum())
    return jnp.sum(ssr) / n, jnp.dot(pre.weights.astype(ssr.dtype), ssr) / n, tuple(ssr / sizes), tuple(models)


def _check_sigma(value, where: str) -> float:
    arr = None if isinstance(value, (bool, str, bytes)) else np.asarray(value)  # NumPy/JAX scalars too
    if arr is None or arr.ndim != 0 or arr.dtype.kind not in "iuf" or not np.isfinite(arr) or arr <= 0:
        raise DopplermapInputError(f"{where} must be a finite number > 0, got {value!r}")
    return float(arr)


def offset_sigmas(pre, offset_sigma, where: str = "offset_sigma") -> np.ndarray | None:
    """The (n_epoch,) per-epoch sigma of the offset prior (module docstring), checked, or None.

    ``offset_sigma``: None (no prior), a number (every epoch), or for a :class:`LineSets` a
    sequence with one entry per set (a number, or None: no prior on that set's offsets,
    stored as ``inf``). Raises :class:`DopplermapInputError` naming ``where`` and the value
    for anything but finite numbers > 0.
    """
    if offset_sigma is None:
        return None
    n_epoch = pre.n_epoch
    if isinstance(offset_sigma, (tuple, list)):
        slices = pre.epoch_slices if isinstance(pre, LineSets) else (slice(0, n_epoch),)
        if len(offset_sigma) != len(slices):
            raise DopplermapInputError(f"{where} needs one value per line data set ({len(slices)}), "
                                       f"got {list(offset_sigma)!r}")
        if all(v is None for v in offset_sigma):
            return None
        out = np.full(n_epoch, np.inf)
        for i, (sl, v) in enumerate(zip(slices, offset_sigma, strict=True)):
            if v is not None:
                out[sl] = _check_sigma(v, f"{where}[{i}]")
        return out
    return np.full(n_epoch, _check_sigma(offset_sigma, where))


def _checked_epoch_sigmas(pre, offset_sigma) -> np.ndarray:
    """A number or an (n_epoch,) array of sigmas (inf allowed: no prior there), checked."""
    if np.ndim(offset_sigma) == 0:
        return offset_sigmas(pre, offset_sigma)
    arr = np.asarray(offset_sigma)
    if arr.shape != (pre.n_epoch,) or arr.dtype.kind not in "iuf" or np.any(np.isnan(arr) | (arr <= 0)):
        raise DopplermapInputError(f"offset_sigma must be a number > 0 or {pre.n_epoch} values > 0 (one per epoch), "
                                   f"got {offset_sigma!r}")
    return arr.astype(float)


def offset_prior(amp, sigma, pre, obs):
    """``(term, weighted)``: ``sum_e (amp_e / sigma_e)^2 / n_points`` and the same with each
    set's weight (several line data sets; one set: the same), see the module docstring.

    amp, sigma: (n_epoch,); ``n_points`` is the line chi-square's (all sets' epochs x velocities).
    """
    q = (amp / sigma) ** 2
    if not isinstance(pre, LineSets):
        total = jnp.sum(q) / obs.flux.size
        return total, total
    n = float(sum(o.flux.size for o in obs))
    per_set = jnp.stack([jnp.sum(q[sl]) for sl in pre.epoch_slices])
    return jnp.sum(per_set) / n, jnp.dot(pre.weights.astype(q.dtype), per_set) / n


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True, eq=False)
class ObjectiveData:
    """Everything the loss compares the maps with, as one pytree (a compiled program's argument).

    Attributes:
        obs: the :class:`Observations`, or a tuple of them (:class:`LineSets`).
        lightcurve: None, or the :class:`~dopplermap.lightcurve.LightCurveFit` (or
            :class:`~dopplermap.lightcurve.LightCurveSet`) of the joint fit.
        line_weight, lc_weight: the joint fit's weights (0-d arrays, so new weights reuse a
            compiled program); None without a light curve, where the loss is the plain one.
        offset_sigma: None, or the (n_epoch,) sigma of the offset prior (``inf``: no prior on
            that epoch), as :func:`offset_sigmas` gives it.
        lmbd_time: with time windows (:mod:`dopplermap.windows`): the weight of the
            temporal coupling (a 0-d array, so a new weight reuses a compiled program);
            None: no coupling. time_coupling: its kind (static: part of the compiled
            program), one of :data:`dopplermap.choices.TIME_COUPLINGS`.

    A field that is None is absent from the pytree, so a program compiled for a problem
    without a light curve or an offset prior carries neither.
    """

    obs: Observations | tuple
    lightcurve: object | None = None
    line_weight: jax.Array | None = None
    lc_weight: jax.Array | None = None
    offset_sigma: jax.Array | None = None
    lmbd_time: jax.Array | None = None
    time_coupling: str = dataclasses.field(default="quadratic", metadata={"static": True})

    def __repr__(self) -> str:
        return compact(self)

    @classmethod
    def create(cls, pre, obs, *, lightcurve=None, line_weight=1.0, lc_weight=1.0, offset_sigma=None,
               lmbd_time=0.0, time_coupling="quadratic") -> ObjectiveData:
        """The checked data of a solve: the weights are used (and checked) with a light curve
        only; ``offset_sigma`` as :func:`offset_sigmas` takes it; ``lmbd_time`` with time
        windows only (a static problem carries none)."""
        if isinstance(pre, NoLines):
            if lightcurve is None:
                raise DopplermapInputError("a problem without line profiles needs a light curve to fit")
            if offset_sigma is not None:
                raise DopplermapInputError(f"offset_sigma {offset_sigma!r}: the offset prior is on the line profiles' "
                                           "offsets, and this problem has no line profiles")
        sigma = offset_sigmas(pre, offset_sigma)
        sigma = None if sigma is None else _device.asarray(sigma, dtype=np.float64)
        lt = None
        if n_windows(pre) > 1:
            if not (isinstance(lmbd_time, (int, float, np.floating, np.integer)) and np.isfinite(lmbd_time)
                    and lmbd_time >= 0):
                raise DopplermapInputError(f"lmbd_time must be a finite number >= 0, got {lmbd_time!r}")
            lt = _device.asarray(float(lmbd_time), dtype=jnp.float64)
        coupling_of(time_coupling)  # a known name
        if lightcurve is None:
            return cls(obs=obs, offset_sigma=sigma, lmbd_time=lt, time_coupling=time_coupling)
        for name, w in (("line_weight", line_weight), ("lc_weight", lc_weight)):
            if not (np.isfinite(w) and w >= 0):
                raise DopplermapInputError(f"{name} must be a finite number >= 0, got {w!r}")
        if n_windows(pre) > 1 and not isinstance(lightcurve, WindowedLightCurve):
            raise DopplermapInputError("a model with time windows needs a windowed light curve "
                                       "(dopplermap.windows.WindowedLightCurve: each point's window)")
        if lightcurve.n_cell * n_windows(pre) != pre.n_cell:
            raise DopplermapInputError(f"light curve was precomputed for {lightcurve.n_cell} cells, "
                                       f"the line model has {pre.n_cell}")
        return cls(obs=obs, lightcurve=lightcurve, line_weight=_device.asarray(line_weight, dtype=jnp.float64),
                   lc_weight=_device.asarray(lc_weight, dtype=jnp.float64), offset_sigma=sigma, lmbd_time=lt,
                   time_coupling=time_coupling)

    def replace(self, **changes) -> ObjectiveData:
        return dataclasses.replace(self, **changes)


def data_terms(x, lmbd, pre: Precomputed, data: ObjectiveData, regulariser: str = "mem",
               penalty: float = DEFAULT_PENALTY, *, with_model: bool = False) -> tuple[jax.Array, Terms]:
    """``(loss, Terms)`` of the flat vector ``x`` against ``data`` (:class:`ObjectiveData`):
    the body every compiled objective and solver traces. ``with_model=True`` sets
    ``Terms.model`` to the model profiles (n_epoch, n_vel), so solvers need no separate
    forward pass."""
    obs, lightcurve, offset_sigma = data.obs, data.lightcurve, data.offset_sigma
    lay = Layout(pre.n_cell, pre.n_epoch)
    fssc, fssh, rv, amp = lay.split(x)
    c2, c2_w, c2_sets, model = _line_chi2(fssc, fssh, rv, amp, pre, obs)
    prior = None
    if offset_sigma is not None:
        if not isinstance(offset_sigma, jax.core.Tracer):
            offset_sigma = _checked_epoch_sigmas(pre, offset_sigma)
        prior, prior_w = offset_prior(amp, jnp.asarray(offset_sigma, dtype=x.dtype), pre, obs)
        c2_w = c2_w + prior_w
    n_window = n_windows(pre)
    temporal = None
    if n_window == 1:
        reg = regulariser_value(regulariser, fssc, fssh, pre.cell_area, pre.edges).astype(x.dtype)
    else:  # the mean of the windows' regularisers, and their coupling (dopplermap.windows)
        fc, fh = split_maps(fssc, fssh, n_window)
        reg = jnp.mean(jax.vmap(lambda a, b: regulariser_value(regulariser, a, b, pre.cell_area, pre.edges))(fc, fh))
        reg = reg.astype(x.dtype)
        temporal = (coupling_of(data.time_coupling)(fc, fh, pre.cell_area) / n_window).astype(x.dtype)
    pen = penalty * sum_excess(fssc, fssh)
    c2_lc, c2_lc_w, c2_lc_sets = ((None, None, None) if lightcurve is None
                                  else chi2_windowed_lightcurves(fssc, fssh, lightcurve)
                                  if isinstance(lightcurve, WindowedLightCurve)
                                  else chi2_lightcurves(fssc, fssh, lightcurve))
    photometry = isinstance(pre, NoLines)  # the light curves are the only data: their chi2 is the fit's
    line = (data.lc_weight * c2_lc_w if photometry else c2_w if lightcurve is None
            else data.line_weight * c2_w + data.lc_weight * c2_lc_w)
    total = line + lmbd * reg + pen
    if temporal is not None and data.lmbd_time is not None:
        total = total + data.lmbd_time * temporal
    return total, Terms(c2_lc if photometry else c2, reg, pen, c2_lc, model if with_model else None, c2_sets,
                        c2_lc_sets, prior, temporal)


LOOSE_DATA = ("lightcurve", "line_weight", "lc_weight", "offset_sigma")
"""The data :func:`objective_terms` and :func:`loss` take as keywords beside ``obs``."""


def _loose_data(where: str, obs, data: dict) -> ObjectiveData:
    unknown = sorted(set(data) - set(LOOSE_DATA))
    if unknown:
        raise DopplermapInputError(f"{where}: unknown keyword(s) {', '.join(unknown)}; the data keywords are "
                                   f"{', '.join(LOOSE_DATA)}")
    if data.get("lightcurve") is None:
        return ObjectiveData(obs=obs, offset_sigma=data.get("offset_sigma"))
    return ObjectiveData(obs=obs, lightcurve=data["lightcurve"], line_weight=data.get("line_weight", 1.0),
                         lc_weight=data.get("lc_weight", 1.0), offset_sigma=data.get("offset_sigma"))


def objective_terms(x, lmbd, pre: Precomputed, obs: Observations, regulariser: str = "mem",
                    penalty: float = DEFAULT_PENALTY, *, with_model: bool = False,
                    **data) -> tuple[jax.Array, Terms]:
    """``(loss, Terms)`` for the flat vector ``x``: :func:`data_terms` with the data given loose
    (``obs`` and the keywords :data:`LOOSE_DATA`: ``lightcurve=None``, ``line_weight=1``,
    ``lc_weight=1``, ``offset_sigma=None``).

    With ``lightcurve`` (a :class:`dopplermap.lightcurve.LightCurveFit`, or a
    :class:`~dopplermap.lightcurve.LightCurveSet` of several bands) the loss is the joint
    ``line_weight * chi2 + lc_weight * chi2_lc + lmbd * reg + penalty`` and ``Terms.chi2_lc``
    is set. ``pre`` may be a :class:`LineSets` with ``obs`` a tuple of :class:`Observations`
    (the chi-squares are then the pooled and weighted ones of the module docstring).
    ``offset_sigma``: the offset prior (module docstring): None (none), a number or
    :func:`offset_sigmas`' (n_epoch,) array (checked unless traced); it adds
    ``Terms.offset_prior`` to the line term.
    """
    return data_terms(x, lmbd, pre, _loose_data("objective_terms", obs, data), regulariser, penalty,
                      with_model=with_model)


def loss(x, lmbd, pre: Precomputed, obs: Observations, regulariser: str = "mem",
         penalty: float = DEFAULT_PENALTY, **data):
    """Scalar objective (see module docstring and :func:`objective_terms`; ``data``: its
    keywords :data:`LOOSE_DATA`)."""
    return data_terms(x, lmbd, pre, _loose_data("loss", obs, data), regulariser, penalty)[0]
