"""Forward model: disc-integrated line profiles of a spotted star.

For epoch ``e`` and velocity ``v`` the model is the seed's::

    a_k[e, c] = I_k LD_k(mu[e, c]) area[c] w(mu[e, c]) f_k[c]        (visible cells, k = phot, cool, hot)
    raw[e, v] = sum_k sum_c a_k[e, c] L_k(v - v_los[e, c]) / sum_k sum_c a_k[e, c]
    model[e]  = shift(raw[e], rv[e]) + amp[e];  model[e] /= mean(model[e])

with ``f_phot = 1 - f_cool - f_hot``, ``w`` the limb weight (``mu`` inside the disc; at the limb
the cell-averaged :func:`dopplermap.geometry.limb_weight`, or the seed's ``max(mu, 0)``) and ``shift`` the seed's linear interpolation
``interp(v, v + rv, raw)``.

:func:`precompute` does everything that depends only on star, grid, epochs and local
profiles, once, and returns a :class:`Precomputed` whose ``line`` is one synthesis form of
:mod:`dopplermap.forms`: ``"dense"`` (the exact cube of shifted local profiles, as the seed
stores it; the ``"auto"`` choice while it fits) or ``"binned"`` (memory-light, within
``synthesis_tol`` of the exact model). Solvers iterate on the dense cube folded to float32
(:func:`solve_form`, :func:`fold_dense`) or blocked (:func:`block_dense`).

:func:`forward` is pure and cheap; ``jit``, ``vmap`` and ``grad`` work on it.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from . import _device, choices, plan
from ._options import options_of
from ._repr import compact
from .diagnostics import check_phase_span, check_velocity_window
from .errors import DopplermapInputError
from .forms import (
    DEFAULT_BLOCKS,
    FORMS,
    Form,
    Setup,
    block_dense,
    blocked_nbytes,
    choose_bin_width,
    dense_numerator,
    eval_profile,
    fold_dense,
    is_mu_dependent,
    phase_order,
)
from .forms.base import form_pytree, shift_profiles
from .geometry import Rotation, StarParams, cell_geometry, check_star
from .grid import SurfaceGrid, subdivide
from .memory import check_precompute_size
from .profiles import ComponentSet

__all__ = ["Precomputed", "Synthesis", "precompute", "synthesize", "forward", "apply_nuisance",
           "choose_bin_width", "is_mu_dependent", "eval_profile", "fold_dense", "block_dense", "blocked_nbytes",
           "phase_order", "solve_form", "dense_numerator", "with_exact_numerator", "DEFAULT_BLOCKS", "shift_profiles"]

RV_SHIFTS = {"interpolate": False, "exact": True}
"""``precompute(rv_shift=...)`` (:data:`dopplermap.choices.RV_SHIFTS`): whether the form synthesises the rv shift exactly."""


@form_pytree
class Precomputed:
    """Everything the objective needs besides the data.

    Attributes:
        line: the synthesis form (:mod:`dopplermap.forms`).
        cell_area: (n_cell,) sr, for the entropy weights.
        edges: (n_edge, 2) int32 neighbour pairs, for Tikhonov smoothing.
    """

    line: Form
    cell_area: jnp.ndarray
    edges: jnp.ndarray

    def __repr__(self) -> str:
        return compact(self, (), form=self.line.kind, n_cell=self.n_cell, n_epoch=self.n_epoch, n_vel=self.n_vel)

    @property
    def n_epoch(self) -> int:
        return self.line.n_epoch

    @property
    def n_cell(self) -> int:
        return self.line.n_cell

    @property
    def n_vel(self) -> int:
        return self.line.n_vel


def _check_vels(vels) -> np.ndarray:
    v = np.asarray(vels, dtype=float)
    if v.ndim != 1 or v.size < 3:
        raise DopplermapInputError(f"vels must be a 1-D array of >= 3 velocities, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise DopplermapInputError("vels contains NaN or inf")
    if np.any(np.diff(v) <= 0):
        i = int(np.argmax(np.diff(v) <= 0))
        raise DopplermapInputError(f"vels must be strictly increasing, but vels[{i}]={v[i]!r} >= vels[{i + 1}]={v[i + 1]!r}")
    return v


def _check_times(times) -> np.ndarray:
    t = np.atleast_1d(np.asarray(times, dtype=float))
    if t.ndim != 1 or t.size < 1:
        raise DopplermapInputError(f"times must be a 1-D array, got shape {t.shape}")
    if not np.all(np.isfinite(t)):
        raise DopplermapInputError(f"times contains NaN or inf at index {int(np.argmax(~np.isfinite(t)))}")
    return t



def _component_weights(components: ComponentSet, mu, proj_area):
    return np.stack([np.asarray(comp.intensity * comp.limb_darkening(mu) * proj_area) for comp in components])


@dataclasses.dataclass(frozen=True)
class Synthesis:
    """How :func:`precompute` synthesises the lines (its fields are described there):
    ``method``, ``synthesis_tol``, ``bin_width``, ``dtype``, ``rv_shift``, ``limb``, ``subdivide``."""

    method: str = "auto"
    synthesis_tol: float = 1e-7
    bin_width: float | None = None
    dtype: object = jnp.float64
    rv_shift: str = "interpolate"
    limb: str = "smooth"
    subdivide: int = 1

    def replace(self, **changes) -> Synthesis:
        return dataclasses.replace(self, **changes)


def precompute(grid: SurfaceGrid, star: StarParams, times, vels, components: ComponentSet, *,
               synthesis: Synthesis | None = None, **loose) -> Precomputed:
    """Precompute the line synthesis for a star, grid, epochs and local profiles.

    Args:
        grid: surface grid. star: :class:`StarParams`. times: (n_epoch,) days.
        vels: (n_vel,) increasing velocity grid of the observations, km/s.
        components: photosphere, cool-spot and hot-spot components.
        synthesis: a :class:`Synthesis`, or its fields as keywords (``method="dense"``):
        method: ``"auto"`` (default), ``"binned"`` (memory-light) or ``"dense"`` (exact cube).
            ``"auto"`` is ``"dense"`` while its cube fits :data:`dopplermap.plan.DENSE_AUTO_BYTES`
            (512 MiB; 144 MB at the seed's 2500 cells x 150 epochs x 32 velocities) and
            ``"binned"`` beyond: solvers iterate on the dense cube folded to float32
            (:func:`fold_dense`), the fastest form where it fits, and the same cost with
            mu-dependent local profiles as without.
        synthesis_tol: bound on the binned method's deviation from the exact model, in
            units of the continuum (ignored by ``"dense"``).
        bin_width: override the binned method's velocity bin width, km/s.
        rv_shift: ``"interpolate"`` (default: the seed's linear interpolation of the
            disc-integrated profile on the data grid) or ``"exact"`` (binned only, and what
            ``"auto"`` then picks: the local profiles' velocities moved by rv, to
            ``synthesis_tol``, for shifts up to half the velocity window).
        limb: ``"smooth"`` (default: a cell the limb cuts weighs its cell-averaged projected
            area, :func:`dopplermap.geometry.limb_weight`) or ``"sharp"`` (``max(mu, 0)``, the
            seed's weights).
        dtype: of the synthesis arrays [float64].
        subdivide: ``m``: each cell integrated over ``m x m`` sub-cells
            (:func:`dopplermap.grid.subdivide`; HEALPix: ``m`` a power of 2), each with its own velocity, limb angle and
            area, the map keeping one filling factor per cell: the line profiles of a grid
            ``m^2`` times finer for the parameters of this one (dense synthesis only). 1
            (default): each cell is one point of the disc integral.
    """
    o = options_of("precompute", Synthesis, synthesis, loose, "synthesis")
    method, synthesis_tol, bin_width, dtype, rv_shift, limb = (o.method, o.synthesis_tol, o.bin_width, o.dtype,
                                                               o.rv_shift, o.limb)
    fine, parent = subdivide(grid, o.subdivide) if o.subdivide != 1 else (grid, None)
    check_star(star)
    vels = _check_vels(vels)
    times = _check_times(times)
    choices.check(method, choices.SYNTHESIS_METHODS, "method")
    # before the (E, C) arrays; "auto" is settled below, by size
    cube = FORMS[method].precompute_nbytes(grid.n_cell, times.size, vels.size) if method in FORMS else 0.0
    check_precompute_size(grid.n_cell, times.size, vels.size, method, cube)
    check_velocity_window(vels, float(star.vsini_kms))
    check_phase_span(times, star.t0, star.period, where="line profiles")
    geo = cell_geometry(fine, times, Rotation.of(star), xp=np, limb=limb, surface=fine.surface)
    # limb darkening and mu-dependent local profiles at the same mu (never < 0 for a cell in view)
    mu = np.asarray(geo.ld_mu)
    v_los = np.asarray(geo.v_los)
    visible = np.asarray(geo.visible)
    weights = _component_weights(components, mu, np.asarray(geo.proj_area))  # (3, E, C)
    n_epoch = mu.shape[0]
    n_vis = visible.sum(axis=1)
    if np.any(n_vis == 0):
        raise DopplermapInputError("no cell is visible at some epoch; check inclination and grid")
    n_slot = int(n_vis.max())
    exact_rv = RV_SHIFTS[choices.check(rv_shift, choices.RV_SHIFTS, "rv_shift")]
    form = FORMS[plan.synthesis_method(method, n_epoch * n_slot * 3 * len(vels) * 8, exact_rv=exact_rv,
                                       subdivided=parent is not None)]

    if bin_width is not None and not float(bin_width) > 0:
        raise DopplermapInputError(f"bin_width must be > 0 km/s, got {bin_width!r}")
    if not synthesis_tol > 0:
        raise DopplermapInputError(f"synthesis_tol must be > 0, got {synthesis_tol!r}")
    span = float(np.max(np.abs(v_los[visible]))) + float(vels[-1] - vels[0])
    setup = Setup(vels=vels, v_los=v_los, mu=mu, visible=visible, weights=weights, n_slot=int(n_vis.max()),
                  components=components, span=span, synthesis_tol=synthesis_tol, bin_width=bin_width,
                  dtype=dtype, rv_margin=0.5 * float(vels[-1] - vels[0]) if exact_rv else None)
    line = form.build(setup) if parent is None else form.build_subdivided(setup, grid.n_cell)
    edges = np.asarray(grid.edges, dtype=np.int32).reshape(-1, 2)
    return Precomputed(line=line, cell_area=_device.asarray(grid.area, dtype), edges=_device.asarray(edges))


def solve_form(pre: Precomputed, cube_dtype="float32", *, blocked: bool = False) -> Precomputed:
    """The model a solver should iterate on: dense models folded (:func:`fold_dense`), others as is.

    ``cube_dtype=None`` (or a model that is not dense) returns ``pre`` unchanged. ``blocked``:
    the :func:`block_dense` form instead (for batched solves). The form is cached per dense
    model (weakly: it goes when the dense model goes).
    """
    line = pre.line.solve_form(cube_dtype, blocked)
    return pre if line is pre.line else dataclasses.replace(pre, line=line)


def with_exact_numerator(solve_pre: Precomputed, pre: Precomputed, fssc, fssh) -> Precomputed:
    """``solve_pre`` (from :func:`solve_form`) set to evaluate exactly at ``(fssc, fssh)``.

    For a float32 folded model the numerator and normalisation are computed from the dense
    ``pre`` it was folded from, in float64 NumPy, and substituted (value only), so the same compiled
    objective reports float64 values. Other models, or a ``pre`` that is not dense (a caller
    that passed the folded model itself), are returned unchanged.
    """
    line = solve_pre.line.exact_at(pre.line, fssc, fssh)
    return solve_pre if line is solve_pre.line else dataclasses.replace(solve_pre, line=line)


def synthesize(fssc, fssh, line: Form):
    """Weight-normalised profiles before rv, amp and mean normalisation: (n_epoch, n_vel).

    Args:
        fssc, fssh: (n_cell,) cool- and hot-spot filling factors.
        line: a synthesis form.
    """
    num, norm = line.numerator_norm(fssc, fssh)
    return num / norm[:, None]


def apply_nuisance(raw, vels, rv, amp):
    """The seed's per-epoch rv shift (linear interpolation), additive amp, mean normalisation."""
    shifted = shift_profiles(vels, rv, raw) + amp[:, None]
    return shifted / jnp.mean(shifted, axis=1, keepdims=True)


def forward(fssc, fssh, rv, amp, pre: Precomputed | Form):
    """Model profiles (n_epoch, n_vel), each normalised by its mean.

    The rv shift is the form's (:meth:`dopplermap.forms.Form.shifted_profiles`): the seed's
    linear interpolation of the synthesised profiles, or for a binned model precomputed with
    ``rv_shift="exact"`` the local profiles' velocities moved by rv.

    Args:
        fssc, fssh: (n_cell,) cool- and hot-spot filling factors in [0, 1].
        rv: (n_epoch,) radial-velocity shifts, km/s. amp: (n_epoch,) additive offsets.
        pre: :class:`Precomputed` (or its synthesis form).
    """
    line = pre.line if isinstance(pre, Precomputed) else pre
    shifted = line.shifted_profiles(fssc, fssh, rv) + amp[:, None]
    return shifted / jnp.mean(shifted, axis=1, keepdims=True)


forward_jit = jax.jit(forward)
"""``jax.jit(forward)``: compiled once per shape, for callers outside an objective."""
