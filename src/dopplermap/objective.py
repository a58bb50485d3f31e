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

    loss = chi2 + lambda * regulariser + penalty * sum_c max(0, fssc_c + fssh_c - 1)^2

``mem`` is the default and unchanged. ``mem_spotdipy`` is the normalisation of SpotDIPy
(Bahar et al.; its objective divides the cell areas by their sum and uses a 1e-7 floor in
all three logarithms), so a lambda tuned in SpotDIPy carries over: with the seed's
normalisation the same lambda regularises about 3x differently. Its floor m' enters only
the entropy; the filling factors keep dopplermap's bounds ``[1e-5, 1 - 1e-5]``.

The seed never constrains ``fssc + fssh <= 1`` (which keeps ``fssp >= 0``). dopplermap adds
the quadratic penalty above (``penalty`` = 1e4 by default; zero wherever the constraint
holds, so the seed's loss is unchanged on feasible maps) and, after the solve, scales any
remaining tiny excess back onto ``fssc + fssh = 1``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _device
from .constants import FILL_MIN
from .errors import DopplermapInputError
from .lightcurve import chi2_lightcurve
from .model import Precomputed, forward
from .units import to_epoch, to_unit

__all__ = ["Observations", "Layout", "Terms", "chi2", "seed_entropy", "spotdipy_entropy", "tikhonov", "sum_excess",
           "regulariser_value", "objective_terms", "loss", "REGULARISERS", "DEFAULT_PENALTY", "SPOTDIPY_FLOOR"]

DEFAULT_PENALTY = 1e4
SPOTDIPY_FLOOR = 1e-7

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


@dataclasses.dataclass(frozen=True)
class Layout:
    """Split of the flat parameter vector ``[fssc, fssh, rv, amp]``."""

    n_cell: int
    n_epoch: int

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


def chi2(model, obs: Observations):
    """The seed's reduced chi-square: sum of squared normalised residuals / (n_epoch n_vel)."""
    r = (obs.flux - model) / obs.err
    return jnp.sum(r * r) / r.size


def seed_entropy(fssc, fssh, cell_area, m: float = FILL_MIN):
    """The seed's maximum-entropy term (see module docstring); lower is 'more entropic'."""
    wp = cell_area / jnp.max(cell_area)
    s = fssc + fssh
    term = fssc * jnp.log(fssc / m) + fssh * jnp.log(fssh / m) + s * jnp.log(s / (1.0 - m))
    return jnp.sum(wp * term) / fssc.shape[0]


def spotdipy_entropy(fssc, fssh, cell_area, m: float = SPOTDIPY_FLOOR):
    """SpotDIPy's maximum-entropy term (``mem_spotdipy`` in the module docstring)."""
    a = cell_area / jnp.sum(cell_area)
    s = fssc + fssh
    return jnp.sum(a * (fssc * jnp.log(fssc / m) + fssh * jnp.log(fssh / m) + s * jnp.log(s / m)))


def tikhonov(fssc, fssh, edges):
    """Mean squared difference of filling factors across neighbouring cells."""
    i, j = edges[:, 0], edges[:, 1]
    return (jnp.sum((fssc[i] - fssc[j]) ** 2) + jnp.sum((fssh[i] - fssh[j]) ** 2)) / edges.shape[0]


# one entry per regulariser: (fssc, fssh, cell_area, edges) -> scalar
_REGULARISER_TERMS = {
    "mem": lambda fssc, fssh, area, edges: seed_entropy(fssc, fssh, area),
    "mem_spotdipy": lambda fssc, fssh, area, edges: spotdipy_entropy(fssc, fssh, area),
    "tikhonov": lambda fssc, fssh, area, edges: tikhonov(fssc, fssh, edges),
    "none": lambda fssc, fssh, area, edges: jnp.zeros((), jnp.result_type(fssc)),
}
REGULARISERS = tuple(_REGULARISER_TERMS)


def regulariser_value(name: str, fssc, fssh, cell_area, edges):
    """The regulariser ``name`` (one of :data:`REGULARISERS`) of the maps ``fssc``, ``fssh``."""
    try:
        term = _REGULARISER_TERMS[name]
    except KeyError:
        raise DopplermapInputError(f"regulariser must be one of {REGULARISERS}, got {name!r}") from None
    return term(fssc, fssh, cell_area, edges)


def sum_excess(fssc, fssh):
    """Sum over cells of ``max(0, fssc + fssh - 1)^2``."""
    return jnp.sum(jnp.maximum(fssc + fssh - 1.0, 0.0) ** 2)


class Terms(NamedTuple):
    """The named terms of one objective evaluation (a pytree: it passes through ``jit``).

    ``chi2``: reduced chi-square of the line profiles; ``regulariser``: the regulariser's
    value (before lambda); ``penalty``: the ``fssc + fssh <= 1`` penalty (weighted);
    ``chi2_lc``: the light curve's reduced chi-square, or None without one; ``model``: the
    model profiles (n_epoch, n_vel) when asked for, else None.
    """

    chi2: jax.Array
    regulariser: jax.Array
    penalty: jax.Array
    chi2_lc: jax.Array | None = None
    model: jax.Array | None = None


def objective_terms(x, lmbd, pre: Precomputed, obs: Observations, regulariser: str = "mem",
                    penalty: float = DEFAULT_PENALTY, lightcurve=None, line_weight=1.0, lc_weight=1.0, *,
                    with_model: bool = False) -> tuple[jax.Array, Terms]:
    """``(loss, Terms)`` for the flat vector ``x``.

    With ``lightcurve`` (a :class:`dopplermap.lightcurve.LightCurveFit`) the loss is the
    joint ``line_weight * chi2 + lc_weight * chi2_lc + lmbd * reg + penalty`` and
    ``Terms.chi2_lc`` is set. ``with_model=True`` sets ``Terms.model`` to the model profiles
    (n_epoch, n_vel), so solvers need no separate forward pass.
    """
    lay = Layout(pre.n_cell, pre.n_epoch)
    fssc, fssh, rv, amp = lay.split(x)
    model = forward(fssc, fssh, rv, amp, pre)
    c2 = chi2(model, obs)
    reg = regulariser_value(regulariser, fssc, fssh, pre.cell_area, pre.edges).astype(x.dtype)
    pen = penalty * sum_excess(fssc, fssh)
    c2_lc = None if lightcurve is None else chi2_lightcurve(fssc, fssh, lightcurve)
    line = c2 if lightcurve is None else line_weight * c2 + lc_weight * c2_lc
    return line + lmbd * reg + pen, Terms(c2, reg, pen, c2_lc, model if with_model else None)


def loss(x, lmbd, pre: Precomputed, obs: Observations, regulariser: str = "mem",
         penalty: float = DEFAULT_PENALTY, lightcurve=None, line_weight=1.0, lc_weight=1.0):
    """Scalar objective (see module docstring and :func:`objective_terms`)."""
    return objective_terms(x, lmbd, pre, obs, regulariser, penalty, lightcurve, line_weight, lc_weight)[0]
