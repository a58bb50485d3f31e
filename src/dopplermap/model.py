"""Forward model: disc-integrated line profiles of a spotted star.

For epoch ``e`` and velocity ``v`` the model is the seed's::

    a_k[e, c] = I_k LD_k(mu[e, c]) area[c] mu[e, c] f_k[c]        (visible cells, k = phot, cool, hot)
    raw[e, v] = sum_k sum_c a_k[e, c] L_k(v - v_los[e, c]) / sum_k sum_c a_k[e, c]
    model[e]  = shift(raw[e], rv[e]) + amp[e];  model[e] /= mean(model[e])

with ``f_phot = 1 - f_cool - f_hot`` and ``shift`` the seed's linear interpolation
``interp(v, v + rv, raw)``.

:func:`precompute` does everything that depends only on star, grid, epochs and local
profiles, once. Two synthesis methods exist:

* ``"binned"`` (default, memory-light): the weights of each epoch are deposited on a fine
  velocity grid (cubic Lagrange weights, bin width ``delta``) and the histogram is
  multiplied by the shifted template ``L_k(v - u_j)``. Its error versus the exact model is
  at most ``0.0234 delta^4 max|L''''|``; ``delta`` is chosen from ``synthesis_tol``
  (default 1e-7 of the continuum). Memory grows as ``n_epoch x n_cell``, not times ``n_vel``.
* ``"dense"`` (exact reference): the full ``3 x n_epoch x n_vis x n_vel`` cube of shifted
  local profiles, as the seed stores it.

For solving, :func:`fold_dense` turns a dense model into the ``"folded"`` form: since
``f_phot = 1 - f_cool - f_hot``, the photosphere's contribution is a constant per epoch plus
differences, so the cube shrinks to ``2 x n_epoch x n_vis x (n_vel + 1)`` weighted
differences (the extra row: the normalisation), velocity-major and stored in float32 by
default (half the bytes again). Its rounding is ~2e-7 of the continuum in the profiles and
~1e-8 relative in the loss (seed size); the rest stays float64.

:func:`forward` is pure and cheap; ``jit``, ``vmap`` and ``grad`` work on it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from . import _device, _linops, plan
from .diagnostics import check_velocity_window
from .errors import DopplermapInputError, warn
from .geometry import StarParams, cell_geometry, check_star
from .grid import SurfaceGrid
from .memory import check_precompute_size
from .profiles import ComponentSet

__all__ = ["LineModel", "Precomputed", "precompute", "synthesize", "forward", "apply_nuisance",
           "choose_bin_width", "is_mu_dependent", "eval_profile", "fold_dense", "block_dense", "blocked_nbytes", "phase_order", "solve_form", "dense_numerator", "with_exact_numerator"]

_LAGRANGE_ERR = 9.0 / 16.0 / 24.0  # max |prod(t - node)| / 4! for 4 nodes


def _dataclass_pytree(cls=None, *, meta=()):
    def wrap(c):
        c = dataclasses.dataclass(frozen=True, eq=False)(c)
        names = [f.name for f in dataclasses.fields(c)]
        return jax.tree_util.register_dataclass(
            c, data_fields=[n for n in names if n not in meta], meta_fields=list(meta))
    return wrap if cls is None else wrap(cls)


@_dataclass_pytree(meta=("method", "col_comp"))
class LineModel:
    """Precomputed line synthesis for fixed star, grid, epochs and local profiles.

    Shapes: ``n_slot`` = the most cells visible at any epoch (shorter epochs are padded
    with zero weight).

    Attributes:
        vels: (n_vel,) observed velocity grid, km/s.
        cell: (n_epoch, n_slot) int32 cell index of each slot.
        pos: (n_epoch, n_cell) int32 slot of each cell, ``n_slot`` if not visible.
        weight: (n_epoch, n_slot, 3) ``I_k LD_k(mu) area mu`` (0 in padding); binned
            with mu-dependent profiles (n_epoch, n_slot, n_col): the same times the
            mu-basis coefficient ``c_r(mu)`` of each column.
        beta: binned (n_epoch, n_slot, 4) cubic Lagrange weights.
        jbase: binned (n_epoch, n_slot) int32 first bin of each slot.
        kernel: binned (n_bin, n_col, n_vel) column templates ``T_i(v - u_j)``.
        cont: binned (n_col,) continuum value of each column template (1 if mu-independent).
        local: (n_epoch, n_slot, 3, n_vel) dense method: ``L_k(v - v_los, mu)``; folded
            method: (n_epoch, n_vel + 1, n_slot, 2): rows ``v`` ``w_k L_k - w_phot L_phot``
            (k = cool, hot), row ``n_vel`` ``w_k - w_phot`` (the normalisation), float32
            or float64; velocity-major, so each epoch's matrix-vector product and its
            transpose stream contiguous rows (``weight`` is then (n_epoch, n_slot, 2)
            ``w_k - w_phot``, kept for reference; the solvers read the cube's last row).
        base: folded: (n_epoch, n_vel) numerator of an unspotted star, ``sum w_phot L_phot``.
        base_norm: folded: (n_epoch,) ``sum w_phot``.
        num_exact, use_exact: folded float32: (n_epoch, n_vel + 1) numerator and (last
            column) normalisation computed elsewhere in float64, and a () bool; when True
            they replace the float32 sums (value only: their gradient is not formed). Solvers set it once, for the final reported evaluation.
        local_t, block_cell, block_row: blocked method only (see :func:`block_dense`):
            ``local`` is then (n_block, n_row, 2 n_ucell) - each block of epochs (rotation
            phases close together) as one matrix over the union of its visible cells -,
            ``local_t`` its transpose (n_block, 2 n_ucell, n_row), ``block_cell``
            (n_block, n_ucell) int32 the union's cells (padding: cell 0, zero columns),
            ``block_row`` (n_epoch,) int32 the row of each epoch in the blocks' stacked output.
        method: ``"binned"``, ``"dense"``, ``"folded"`` (see :func:`fold_dense`) or
            ``"blocked"`` (see :func:`block_dense`).
        col_comp: binned: component (0 phot, 1 cool, 2 hot) of each column (static);
            ``(0, 1, 2)`` when no profile depends on mu.
    """

    vels: jnp.ndarray
    cell: jnp.ndarray
    pos: jnp.ndarray
    weight: jnp.ndarray
    beta: jnp.ndarray | None = None
    jbase: jnp.ndarray | None = None
    kernel: jnp.ndarray | None = None  # (n_bin, n_col, n_vel)
    cont: jnp.ndarray | None = None  # (n_col,)
    local: jnp.ndarray | None = None
    base: jnp.ndarray | None = None
    base_norm: jnp.ndarray | None = None
    num_exact: jnp.ndarray | None = None
    use_exact: jnp.ndarray | None = None
    local_t: jnp.ndarray | None = None
    block_cell: jnp.ndarray | None = None
    block_row: jnp.ndarray | None = None
    method: str = "binned"
    col_comp: tuple = (0, 1, 2)

    @property
    def n_epoch(self) -> int:
        return int(self.cell.shape[0])

    @property
    def n_cell(self) -> int:
        return int(self.pos.shape[1])

    @property
    def n_vel(self) -> int:
        return int(self.vels.shape[0])

    def nbytes(self) -> int:
        """Bytes held by the arrays of this model."""
        return sum(int(x.nbytes) for x in jax.tree_util.tree_leaves(self))


@_dataclass_pytree(meta=())
class Precomputed:
    """Everything the objective needs besides the data.

    Attributes:
        line: the :class:`LineModel`.
        cell_area: (n_cell,) sr, for the entropy weights.
        edges: (n_edge, 2) int32 neighbour pairs, for Tikhonov smoothing.
    """

    line: LineModel
    cell_area: jnp.ndarray
    edges: jnp.ndarray

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


def is_mu_dependent(profile) -> bool:
    """Whether a local profile depends on mu: it has ``mu_dependent = True`` and is called
    as ``profile(v, mu)`` (broadcasting; v km/s, mu in [0, 1]) instead of ``profile(v)``."""
    return bool(getattr(profile, "mu_dependent", False))


def eval_profile(profile, v, mu=None) -> np.ndarray:
    """``profile(v, mu)`` for mu-dependent profiles, else ``profile(v)`` (mu ignored)."""
    if is_mu_dependent(profile):
        return np.asarray(profile(v, 1.0 if mu is None else mu), dtype=float)
    return np.asarray(profile(v), dtype=float)


def _max_fourth_derivative(fn, hw: float) -> float:
    h = min(0.02, hw / 2000.0)
    v = np.arange(-hw, hw + h, h)
    d4 = np.abs(np.diff(fn(v), 4)) / h**4
    return float(np.max(d4)) if d4.size else 0.0


def _half_width(profile, default: float) -> float:
    hw = getattr(profile, "half_width", None)
    return max(float(hw) if hw is not None else default, 1.0)


def choose_bin_width(components: ComponentSet, tol: float, vspan: float = 200.0) -> float:
    """Velocity bin width (km/s) whose cubic interpolation error is below ``tol``.

    The binned model deviates from the exact one by at most ``0.0234 delta^4 max|d4L/dv4|``
    (continuum units); mu-dependent profiles are probed at mu = 0.1, 0.4, 0.7, 1.
    """
    m4 = 0.0
    for comp in components:
        hw = _half_width(comp.profile, vspan)
        mus = (0.1, 0.4, 0.7, 1.0) if is_mu_dependent(comp.profile) else (None,)
        for mu in mus:
            m4 = max(m4, _max_fourth_derivative(lambda v: eval_profile(comp.profile, v, mu), hw))
    if m4 <= 0.0:
        return 1.0
    return float((tol / (_LAGRANGE_ERR * m4)) ** 0.25)


def _component_weights(components: ComponentSet, mu, proj_area):
    return np.stack([np.asarray(comp.intensity * comp.limb_darkening(mu) * proj_area) for comp in components])


_MU_NODES = 65  # mu nodes of the low-rank separation of mu-dependent profiles


class _MuBasis:
    """Low-rank separation ``L(v, mu) ~= sum_r c_r(mu) T_r(v)`` of a local profile.

    ``T_r(v) = sum_i g[i, r] L(v, mu_i)`` is an exact combination of the profile at mu
    nodes (so it can be evaluated at any velocity); ``c_r(mu)`` is a cubic spline through
    the nodes. The rank is the smallest whose reconstruction error, checked on the nodes
    and half-way between them, is below ``tol``. mu-independent profiles: rank 1, c = 1.
    """

    def __init__(self, profile, tol: float, hw: float, delta: float):
        from scipy.interpolate import CubicSpline

        self.profile = profile
        self.error = 0.0
        if not is_mu_dependent(profile):
            self.rank = 1
            return
        mu = np.linspace(0.0, 1.0, _MU_NODES)
        mid = 0.5 * (mu[1:] + mu[:-1])
        h = min(delta / 2.0, hw / 400.0)
        v = np.arange(-hw - 2 * delta, hw + 2 * delta + h, h)
        a = eval_profile(profile, v[None, :], mu[:, None])
        a_mid = eval_profile(profile, v[None, :], mid[:, None])
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        for rank in range(1, s.size + 1):
            coef = u[:, :rank] * s[:rank]
            spline = CubicSpline(mu, coef, axis=0)
            err = max(np.max(np.abs(coef @ vt[:rank] - a)), np.max(np.abs(spline(mid) @ vt[:rank] - a_mid)))
            if err <= tol:
                break
        else:  # every node's profile used and still short: the binned model misses its tolerance
            warn(f"a mu-dependent local profile separates only to {err:.3g} of the continuum with all "
                 f"{_MU_NODES} mu nodes, above synthesis_tol = {tol:.3g}: the binned model deviates from the "
                 "exact one by up to that much; raise synthesis_tol or use method = 'dense'")
        self.rank = rank
        self.mu_nodes = mu
        self.g = u[:, :rank] / s[:rank]  # T_r = sum_i g[i, r] L(., mu_i)
        self.spline = spline
        self.error = float(err)

    def coefficients(self, mu) -> np.ndarray:
        """(..., rank) coefficients ``c_r(mu)``."""
        mu = np.asarray(mu, dtype=float)
        if not is_mu_dependent(self.profile):
            return np.ones(mu.shape + (1,))
        return self.spline(np.clip(mu, 0.0, 1.0))

    def templates(self, v) -> np.ndarray:
        """(rank, *v.shape) basis templates ``T_r(v)``."""
        v = np.asarray(v, dtype=float)
        if not is_mu_dependent(self.profile):
            return eval_profile(self.profile, v)[None]
        prof = eval_profile(self.profile, v[None], self.mu_nodes.reshape((-1,) + (1,) * v.ndim))
        return np.tensordot(self.g.T, prof, axes=1)

    def continuum(self) -> np.ndarray:
        """(rank,) value of each template in the continuum (1 for a mu-independent profile)."""
        if not is_mu_dependent(self.profile):
            return np.ones(1)
        return self.g.sum(axis=0)


def precompute(grid: SurfaceGrid, star: StarParams, times, vels, components: ComponentSet, *,
               method: str = "auto", synthesis_tol: float = 1e-7, bin_width: float | None = None,
               dtype=jnp.float64) -> Precomputed:
    """Precompute the line synthesis for a star, grid, epochs and local profiles.

    Args:
        grid: surface grid. star: :class:`StarParams`. times: (n_epoch,) days.
        vels: (n_vel,) increasing velocity grid of the observations, km/s.
        components: photosphere, cool-spot and hot-spot components.
        method: ``"auto"`` (default), ``"binned"`` (memory-light) or ``"dense"`` (exact cube).
            ``"auto"`` is ``"dense"`` while its cube fits :data:`dopplermap.plan.DENSE_AUTO_BYTES`
            (512 MiB; 144 MB at the seed's 2500 cells x 150 epochs x 32 velocities) and
            ``"binned"`` beyond: solvers iterate on the dense cube folded to float32
            (:func:`fold_dense`), the fastest form where it fits, and the same cost with
            mu-dependent local profiles as without.
        synthesis_tol: bound on the binned method's deviation from the exact model, in
            units of the continuum (ignored by ``"dense"``).
        bin_width: override the binned method's velocity bin width, km/s.
    """
    check_star(star)
    vels = _check_vels(vels)
    times = _check_times(times)
    if method not in plan.METHODS:
        raise DopplermapInputError(f"method must be 'auto', 'binned' or 'dense', got {method!r}")
    check_precompute_size(grid.n_cell, times.size, vels.size, method)  # before the (E, C) arrays
    check_velocity_window(vels, float(star.vsini_kms))
    geo = cell_geometry(grid.lat, grid.lon, grid.area, times, star.inclination, star.vsini_kms,
                        star.period, star.t0, star.domega, xp=np)
    mu = np.asarray(geo.mu)
    v_los = np.asarray(geo.v_los)
    visible = mu > 0.0
    weights = _component_weights(components, mu, np.asarray(geo.proj_area))  # (3, E, C)
    n_epoch, n_cell = mu.shape
    n_vis = visible.sum(axis=1)
    if np.any(n_vis == 0):
        raise DopplermapInputError("no cell is visible at some epoch; check inclination and grid")
    n_slot = int(n_vis.max())
    method = plan.synthesis_method(method, n_epoch * n_slot * 3 * len(vels) * 8)

    if bin_width is not None and not float(bin_width) > 0:
        raise DopplermapInputError(f"bin_width must be > 0 km/s, got {bin_width!r}")
    if not synthesis_tol > 0:
        raise DopplermapInputError(f"synthesis_tol must be > 0, got {synthesis_tol!r}")
    span = float(np.max(np.abs(v_los[visible]))) + float(vels[-1] - vels[0])
    if method == "binned":
        delta = float(bin_width) if bin_width is not None else choose_bin_width(components, synthesis_tol, span)
        vmax = float(np.max(np.abs(v_los[visible]))) + delta
        u0 = -vmax - 2.0 * delta
        n_base = int(math.floor(2.0 * vmax / delta)) + 3
        if n_base > 200_000:
            raise DopplermapInputError(f"binned synthesis needs {n_base} velocity bins (bin width {delta:.3g} km/s); "
                             "raise synthesis_tol or set bin_width")
        x = (v_los - u0) / delta
        j0 = np.floor(x).astype(np.int64)
        t = x - j0
        jbase = np.clip(j0 - 1, 0, n_base - 1)
        key = np.where(visible, jbase, n_base)  # invisible cells sort last
    else:
        key = np.where(visible, 0, 1)
    order = np.argsort(key, axis=1, kind="stable")[:, :n_slot]
    slot_ok = np.take_along_axis(visible, order, axis=1)
    cell = np.where(slot_ok, order, 0).astype(np.int32)
    pos = np.full((n_epoch, n_cell), n_slot, dtype=np.int32)
    e_idx, s_idx = np.nonzero(slot_ok)
    pos[e_idx, order[e_idx, s_idx]] = s_idx
    w_slot = np.where(slot_ok[..., None], np.take_along_axis(weights, order[None], axis=2).transpose(1, 2, 0), 0.0)
    v_slot = np.take_along_axis(v_los, order, axis=1)
    mu_slot = np.clip(np.take_along_axis(mu, order, axis=1), 0.0, 1.0)

    fields = dict(vels=_device.asarray(vels, dtype), cell=_device.asarray(cell), pos=_device.asarray(pos),
                  weight=_device.asarray(w_slot, dtype), method=method)
    if method == "binned":
        jb = np.where(slot_ok, np.take_along_axis(jbase, order, axis=1), n_base - 1)
        tt = np.where(slot_ok, np.take_along_axis(t, order, axis=1), 0.0)
        beta = np.where(slot_ok[..., None], _linops.lagrange_weights(tt), 0.0)
        u = u0 + delta * np.arange(n_base + 3)
        # columns: (component, mu-basis term); one per component if no profile depends on mu
        bases = [_MuBasis(comp.profile, 0.25 * synthesis_tol, _half_width(comp.profile, span), delta)
                 for comp in components]
        col_comp = tuple(k for k, bs in enumerate(bases) for _ in range(bs.rank))
        if col_comp != (0, 1, 2):
            w_slot = np.concatenate([w_slot[..., k:k + 1] * bases[k].coefficients(mu_slot) for k in range(3)], axis=-1)
            fields["weight"] = _device.asarray(w_slot, dtype)
        dv = vels[None, :] - u[:, None]
        kernel = np.concatenate([bases[k].templates(dv) for k in range(3)], axis=0).transpose(1, 0, 2)
        cont = np.concatenate([bs.continuum() for bs in bases])
        fields.update(beta=_device.asarray(beta, dtype), jbase=_device.asarray(jb.astype(np.int32)),
                      kernel=_device.asarray(kernel, dtype), cont=_device.asarray(cont, dtype), col_comp=col_comp)
    else:
        local = np.stack([eval_profile(comp.profile, vels[None, None, :] - v_slot[:, :, None], mu_slot[:, :, None])
                          for comp in components], axis=2)
        fields.update(local=_device.asarray(local, dtype))
    line = LineModel(**fields)
    edges = np.asarray(grid.edges, dtype=np.int32).reshape(-1, 2)
    pre = Precomputed(line=line, cell_area=_device.asarray(grid.area, dtype), edges=_device.asarray(edges))
    _SETUP[pre] = (grid, star, components)
    return pre


# (grid, star, components) each model was precomputed from, so that invert's results know
# them (figures, result files); weak keys: an entry lives as long as its model
_SETUP: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def setup_of(pre: Precomputed):
    """``(grid, star, components)`` that :func:`precompute` built ``pre`` from, or None.

    None for a model made otherwise (read from a file, folded, resampled, a pytree copy).
    """
    return _SETUP.get(pre)


@functools.partial(jax.jit, static_argnames="dtype")
def _fold_arrays(weight, local, dtype):
    # one compiled pass (both cores; 0.47 s -> ~0.03 s at the seed size in NumPy before):
    # velocity-major (E, V + 1, S, 2) cube, the weight differences as its last row - both
    # products of an evaluation (forward and transpose) then stream contiguous rows and the
    # normalisation comes with the numerator (2 cores, seed size, float32: 4.3 ms for the
    # pair of products vs 6.8 ms in the slot-major layout)
    w = weight.astype(jnp.float64)
    loc = local.astype(jnp.float64)  # (E, S, 3, V)
    phot = w[..., 0, None] * loc[:, :, 0]  # (E, S, V)
    diff = w[..., 1:, None] * loc[:, :, 1:] - phot[:, :, None]  # (E, S, 2, V)
    wdiff = w[..., 1:] - w[..., :1]  # (E, S, 2)
    cube = jnp.concatenate([diff.transpose(0, 3, 1, 2), wdiff[:, None]], axis=1).astype(dtype)
    return cube, phot.sum(axis=1), w[..., 0].sum(axis=1), wdiff


def fold_dense(line: LineModel, dtype=jnp.float32) -> LineModel:
    """The ``"folded"`` form of a dense model, for fast solving (same model, 2/3 of the cube).

    ``num = base + sum_s f_cool D_cool + f_hot D_hot`` with ``D_k = w_k L_k - w_phot L_phot``
    and ``norm = base_norm + sum_s f_cool (w_cool - w_phot) + f_hot (w_hot - w_phot)``.

    Args:
        line: a ``method="dense"`` :class:`LineModel`.
        dtype: storage (and arithmetic) type of the difference cube. ``float32`` halves the
            bytes read per evaluation; its rounding is ~2e-7 of the continuum (the
            unspotted part ``base`` and everything after the sum stay float64).
    """
    if line.method != "dense":
        raise DopplermapInputError(f"fold_dense needs a dense line model, got method={line.method!r}")
    dtype = jnp.dtype(dtype)
    if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
        raise DopplermapInputError(f"cube dtype must be float32 or float64, got {dtype}")
    diff, base, base_norm, wdiff = _fold_arrays(line.weight, line.local, dtype.name)
    low = dtype != jnp.dtype(jnp.float64)
    return LineModel(vels=line.vels, cell=line.cell, pos=line.pos,
                     weight=wdiff, local=diff, base=base, base_norm=base_norm,
                     num_exact=jnp.zeros(base.shape[:1] + (base.shape[1] + 1,)) if low else None,
                     use_exact=jnp.asarray(False) if low else None, method="folded")


DEFAULT_BLOCKS = 8
"""Epoch blocks of :func:`block_dense` (see there for the measurements behind it)."""


def phase_order(pos, n_slot: int) -> np.ndarray:
    """Epochs ordered by rotation phase, read from which cells each one sees: (n_epoch,) int.

    The visibility patterns of a rotating star lie on a closed loop; their first two
    principal components are (for rigid rotation) the cosine and sine of the phase. The
    order starts after the widest phase gap, so contiguous runs of it are epochs that see
    nearly the same cells. Any order is exact; a good one only makes blocks smaller.
    """
    vis = (np.asarray(pos) < n_slot).astype(np.float64)
    n_e = vis.shape[0]
    if n_e < 3:
        return np.arange(n_e)
    vis -= vis.mean(axis=0)
    w, v = np.linalg.eigh(vis @ vis.T)  # (E, E) Gram matrix: cheaper than an SVD of (E, C)
    ang = np.arctan2(v[:, -2] * np.sqrt(max(w[-2], 0.0)), v[:, -1] * np.sqrt(max(w[-1], 0.0)))
    order = np.argsort(ang, kind="stable")
    gaps = np.diff(np.concatenate([ang[order], ang[order[:1]] + 2 * np.pi]))
    return np.roll(order, -(int(np.argmax(gaps)) + 1))


def blocked_nbytes(line: LineModel, dtype=jnp.float32) -> int:
    """Bytes of :func:`block_dense`'s two copies for a dense ``line``, estimated without building them.

    An upper estimate but for the padding of the last block: no block sees more cells than
    are ever visible.
    """
    n_e, n_s = line.cell.shape
    seen = int(np.count_nonzero((np.asarray(line.pos) < n_s).any(axis=0)))
    return 2 * n_e * (line.n_vel + 1) * 2 * seen * np.dtype(dtype).itemsize


def block_dense(line: LineModel, n_block: int | None = None, dtype=jnp.float32) -> LineModel:
    """The ``"blocked"`` form of a dense model: the folded model as a few plain matrices.

    Epochs are grouped by rotation phase (:func:`phase_order`) into ``n_block`` blocks of
    equal size; each block becomes one matrix ``(n_epoch_block (n_vel + 1), 2 n_ucell)``
    over the union of the cells its epochs see (zeros where an epoch does not see a cell),
    so a synthesis is ``n_block`` matrix-vector products after a gather of ``f`` per block,
    instead of one gather per epoch and visible cell. Its use is a *batch* of maps (a
    vmapped solve over lambdas or data sets): each block then becomes one matrix-matrix
    product that reads the block once for all members, where the folded form needs one
    small product per epoch and member. The transpose product reads a transposed copy
    (``local_t``): XLA CPU's transposed contraction of the same matrix was 3x slower for
    8 members. Seed size (150 x 32, 2500 cells, 8 blocks): the unions hold 0.6 of the cells,
    the two float32 copies 2 x 64 MB (the folded cube: 50 MB); 2-core dev box, 8 members:
    value+grad 15 ms against 100 ms for the folded form vmapped (one member: 8 vs 6 ms).
    The block count barely matters there (4, 8, 16 blocks: the same batch solve time
    within noise).

    Args:
        line: a ``method="dense"`` :class:`LineModel`.
        n_block: number of epoch blocks (at most n_epoch); default ``DEFAULT_BLOCKS``.
        dtype: storage type of the blocks (as :func:`fold_dense`).
    """
    folded = fold_dense(line, dtype)
    n_e, n_r, n_s, n_k = folded.local.shape
    n_block = int(DEFAULT_BLOCKS if n_block is None else n_block)
    if not 1 <= n_block:
        raise DopplermapInputError(f"n_block must be >= 1, got {n_block}")
    n_block = min(n_block, n_e)
    per = -(-n_e // n_block)
    n_block = -(-n_e // per)  # no empty block
    order = phase_order(line.pos, n_s)
    groups = [order[b * per:(b + 1) * per] for b in range(n_block)]
    pos = np.asarray(line.pos)
    ee, cc = np.nonzero(pos < n_s)
    ss = pos[ee, cc]
    unions = [np.unique(cc[np.isin(ee, g)]) for g in groups]
    n_u = max(1, max(u.size for u in unions))
    cube = np.asarray(folded.local)  # (E, R, S, 2)
    blocks = np.zeros((n_block, per, n_r, n_u, n_k), cube.dtype)
    block_cell = np.zeros((n_block, n_u), np.int32)
    block_row = np.zeros(n_e, np.int32)
    col = np.empty(line.n_cell, np.int64)
    local_e = np.empty(n_e, np.int64)
    for b, (g, u) in enumerate(zip(groups, unions)):
        block_cell[b, :u.size] = u
        col[u] = np.arange(u.size)
        local_e[g] = np.arange(g.size)
        block_row[g] = b * per + np.arange(g.size)
        sel = np.isin(ee, g)
        e_b, c_b, s_b = ee[sel], cc[sel], ss[sel]
        blocks[b][local_e[e_b], :, col[c_b], :] = cube[e_b, :, s_b, :]
    blocks = blocks.reshape(n_block, per * n_r, n_u * n_k)
    return LineModel(vels=line.vels, cell=line.cell, pos=line.pos, weight=folded.weight,
                     local=jnp.asarray(blocks), local_t=jnp.asarray(np.ascontiguousarray(blocks.transpose(0, 2, 1))),
                     block_cell=jnp.asarray(block_cell), block_row=jnp.asarray(block_row),
                     base=folded.base, base_norm=folded.base_norm, method="blocked")


def dense_numerator(fssc, fssh, line: LineModel, with_norm: bool = False) -> np.ndarray:
    """(n_epoch, n_vel) numerator ``sum_k sum_c a_k L_k`` of a dense model, float64 NumPy.

    ``with_norm``: append the normalisation ``sum_k sum_c a_k`` as a last column.
    """
    if line.method != "dense":
        raise DopplermapInputError(f"dense_numerator needs a dense line model, got method={line.method!r}")
    f = np.stack([1.0 - np.asarray(fssc) - np.asarray(fssh), np.asarray(fssc), np.asarray(fssh)], axis=1)
    a = np.asarray(line.weight, dtype=np.float64) * f[np.asarray(line.cell)]  # (E, S, 3)
    num = np.einsum("esk,eskv->ev", a, np.asarray(line.local, dtype=np.float64), optimize=True)
    return np.concatenate([num, a.sum(axis=(1, 2))[:, None]], axis=1) if with_norm else num


def with_exact_numerator(solve_pre: Precomputed, pre: Precomputed, fssc, fssh) -> Precomputed:
    """``solve_pre`` (from :func:`solve_form`) set to evaluate exactly at ``(fssc, fssh)``.

    For a float32 folded model the numerator and normalisation are computed from the dense
    ``pre`` it was folded from, in float64 NumPy, and substituted (value only), so the same compiled
    objective reports float64 values. Other models, or a ``pre`` that is not dense (a caller
    that passed the folded model itself), are returned unchanged.
    """
    line = solve_pre.line
    if line.use_exact is None or pre.line.method != "dense":
        return solve_pre
    num = jnp.asarray(dense_numerator(fssc, fssh, pre.line, with_norm=True), dtype=line.base.dtype)
    return dataclasses.replace(solve_pre, line=dataclasses.replace(line, num_exact=num, use_exact=jnp.asarray(True)))


def solve_form(pre: Precomputed, cube_dtype="float32", *, blocked: bool = False) -> Precomputed:
    """The model a solver should iterate on: dense models folded (:func:`fold_dense`), others as is.

    ``cube_dtype=None`` (or a non-dense model) returns ``pre`` unchanged. ``blocked``: the
    :func:`block_dense` form instead (for batched solves). The form is cached per dense
    model (weakly: it goes when the dense model goes).
    """
    if cube_dtype is None or pre.line.method != "dense":
        return pre
    key = (jnp.dtype(cube_dtype).name, blocked)
    folds = _FOLDED.setdefault(pre.line, {})  # a lambda sweep or bootstrap folds each model once
    if key not in folds:
        folds[key] = (block_dense if blocked else fold_dense)(pre.line, dtype=cube_dtype)
    return dataclasses.replace(pre, line=folds[key])


_FOLDED: "weakref.WeakKeyDictionary[LineModel, dict]" = weakref.WeakKeyDictionary()


def _fill_stack(fssc, fssh):
    return jnp.stack([1.0 - fssc - fssh, fssc, fssh], axis=1)


_EPOCH_FIELDS = ("cell", "pos", "weight", "beta", "jbase", "local", "base", "base_norm", "num_exact")

SLOTS_PER_CHUNK = 25_000
"""On CPU, the binned model synthesises epochs in chunks of about this many (epoch, visible
cell) slots (``lax.map``), so each chunk's working set stays cache-sized and the cost grows
linearly with n_epoch x n_cell; accelerators, and the dense and folded models, take all
epochs at once. Measured on the 2-core dev box (value+grad, min): 10k cells x 150 epochs
29.9 / 34.4 / 36.3 / 85.0 ms for 25k / 50k / 200k slots / unchunked; 20k x 600 x 64
295 / 297 / 338 / 522 ms; the seed size within noise."""


def _folded_numerator_norm(f, line: LineModel):
    cube = line.local  # (E, V + 1, S, 2): difference profiles, then the weight differences
    n_e, n_r, n_s, n_k = cube.shape
    a = _linops.gather_slots(f, line.cell, line.pos, cube.dtype).reshape(n_e, n_s * n_k)
    out = jnp.einsum("es,evs->ev", a, cube.reshape(n_e, n_r, n_s * n_k)).astype(f.dtype)
    num = line.base + out[:, :-1]
    norm = line.base_norm + out[:, -1]
    if line.use_exact is not None:
        num = jnp.where(line.use_exact, line.num_exact[:, :-1], num)
        norm = jnp.where(line.use_exact, line.num_exact[:, -1], norm)
    return num, norm


def _blocked_numerator_norm(f, line: LineModel):
    n_b, n_row, n_col = line.local.shape
    x = f.at[line.block_cell].get(mode="promise_in_bounds").reshape(n_b, n_col)  # (B, U * 2)
    out = _linops.block_product(x, line.local, line.local_t)  # (B, n_row), f's dtype
    out = out.reshape(-1, line.base.shape[1] + 1)[line.block_row]  # (E, V + 1) in epoch order
    return line.base + out[:, :-1], line.base_norm + out[:, -1]


def _numerator_norm(f, line: LineModel, mu_dep: bool):
    if line.method == "folded":
        return _folded_numerator_norm(f, line)
    if line.method == "blocked":
        return _blocked_numerator_norm(f, line)
    a = line.weight * _linops.gather_slots(f, line.cell, line.pos, f.dtype)  # (E, S, n_col)
    norm = jnp.einsum("esc,c->e", a, line.cont) if mu_dep else a.sum(axis=(1, 2))  # (E,)
    if line.method == "binned":
        hist = _linops.deposit(a, line.beta, line.jbase, line.kernel.shape[0])  # (E, B, n_col)
        num = hist.reshape(hist.shape[0], -1) @ line.kernel.reshape(-1, line.kernel.shape[-1])
    else:
        # one merged contraction axis: XLA CPU is ~30x slower contracting (s, k) as two axes
        n_e, n_s, n_k, n_v = line.local.shape
        num = jnp.einsum("es,esv->ev", a.reshape(n_e, n_s * n_k), line.local.reshape(n_e, n_s * n_k, n_v))
    return num, norm


def _epoch_chunk(line: LineModel) -> int:
    # Only the binned model is chunked: its scatters and gathers want a cache-sized working
    # set. The dense and folded products stream their cube anyway, and a chunk of it would be
    # copied out first (measured, folded, 4000 cells x 300 epochs: 17 ms whole vs 70 ms in
    # four chunks).
    if plan.on_accelerator() or line.method != "binned":
        return line.n_epoch
    most = max(1, min(line.n_epoch, SLOTS_PER_CHUNK // max(1, int(line.cell.shape[1]))))
    n_chunk = -(-line.n_epoch // most)
    return -(-line.n_epoch // n_chunk)  # equal chunks: the last overlaps its neighbour by < n_chunk epochs


def synthesize(fssc, fssh, line: LineModel):
    """Weight-normalised profiles before rv, amp and mean normalisation: (n_epoch, n_vel).

    Args:
        fssc, fssh: (n_cell,) cool- and hot-spot filling factors.
    """
    f = jnp.stack([fssc, fssh], axis=1) if line.method in ("folded", "blocked") else _fill_stack(fssc, fssh)  # (n_cell, 3|2)
    mu_dep = line.method == "binned" and line.col_comp != (0, 1, 2)
    if mu_dep:
        f = f[:, np.asarray(line.col_comp)]  # (n_cell, n_col)
    n_epoch, chunk = line.n_epoch, _epoch_chunk(line)
    if chunk >= n_epoch:
        num, norm = _numerator_norm(f, line, mu_dep)
    else:
        # chunks slice the model arrays in place (no padded copy of the model per call: at
        # 20k cells x 600 epochs that copy was a third of an evaluation); the last chunk
        # ends at the last epoch and overlaps its neighbour, whose results for the shared
        # epochs are the ones kept
        n_chunk = -(-n_epoch // chunk)
        starts = np.minimum(np.arange(n_chunk) * chunk, n_epoch - chunk)
        fields = [k for k in _EPOCH_FIELDS if getattr(line, k) is not None]

        def one(start):
            part = {k: jax.lax.dynamic_slice_in_dim(getattr(line, k), start, chunk, axis=0) for k in fields}
            return _numerator_norm(f, dataclasses.replace(line, **part), mu_dep)

        num, norm = jax.lax.map(jax.checkpoint(one), jnp.asarray(starts, dtype=jnp.int32))
        e = np.arange(n_epoch)
        c = np.minimum(e // chunk, n_chunk - 1)  # chunk that keeps epoch e
        keep = jnp.asarray(c * chunk + e - starts[c])  # its row in the stacked chunk results
        num = num.reshape(n_chunk * chunk, -1)[keep]
        norm = norm.reshape(-1)[keep]
    return num / norm[:, None]


def shift_profiles(vels, rv, prf):
    """Row ``e`` of ``prf`` shifted by ``rv[e]``: ``jnp.interp(vels, vels + rv[e], prf[e])`` for all rows.

    The same arithmetic as ``jnp.interp`` (constant ends), written for the whole batch with a
    compare-all search (``n_vel`` is small): several times cheaper to compile than a vmapped
    ``jnp.interp``, for any increasing grid.
    """
    xp = vels[None, :] + rv[:, None]  # (E, V) shifted abscissae
    n = vels.shape[0]
    i = jnp.sum(xp[:, None, :] <= vels[None, :, None], axis=2)  # searchsorted(xp, vels, 'right')
    i = jnp.clip(i, 1, n - 1)
    f_hi = jnp.take_along_axis(prf, i, axis=1)
    f_lo = jnp.take_along_axis(prf, i - 1, axis=1)
    x_hi = jnp.take_along_axis(xp, i, axis=1)
    x_lo = jnp.take_along_axis(xp, i - 1, axis=1)
    dx = x_hi - x_lo
    eps = np.spacing(np.finfo(np.dtype(xp.dtype)).eps)
    dx0 = jnp.abs(dx) <= eps
    f = jnp.where(dx0, f_lo, f_lo + ((vels[None, :] - x_lo) / jnp.where(dx0, 1, dx)) * (f_hi - f_lo))
    f = jnp.where(vels[None, :] < xp[:, :1], prf[:, :1], f)
    return jnp.where(vels[None, :] > xp[:, -1:], prf[:, -1:], f)


def apply_nuisance(raw, vels, rv, amp):
    """The seed's per-epoch rv shift (linear interpolation), additive amp, mean normalisation."""
    shifted = shift_profiles(vels, rv, raw) + amp[:, None]
    return shifted / jnp.mean(shifted, axis=1, keepdims=True)


def forward(fssc, fssh, rv, amp, pre: Precomputed | LineModel):
    """Model profiles (n_epoch, n_vel), each normalised by its mean.

    Args:
        fssc, fssh: (n_cell,) cool- and hot-spot filling factors in [0, 1].
        rv: (n_epoch,) radial-velocity shifts, km/s. amp: (n_epoch,) additive offsets.
        pre: :class:`Precomputed` (or its :class:`LineModel`).
    """
    line = pre.line if isinstance(pre, Precomputed) else pre
    return apply_nuisance(synthesize(fssc, fssh, line), line.vels, rv, amp)


forward_jit = jax.jit(forward)
"""``jax.jit(forward)``: compiled once per shape, for callers outside an objective."""
