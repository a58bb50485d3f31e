"""The protocol every synthesis form follows, and what the forms share.

A form is an immutable pytree holding only its own arrays. The rest of the package talks to
it through this protocol and never asks which form it is:

* ``numerator_norm(fssc, fssh)``: the disc-integrated numerator ``(n_epoch, n_vel)`` and
  normalisation ``(n_epoch,)`` of a map (the profiles are their ratio);
* ``shifted_profiles(fssc, fssh, rv)``: those profiles moved by the per-epoch rv (the
  seed's interpolation, or the binned form's exact shift);
* ``select_epochs(idx)``, ``pad(n_slot, n_bin)``: the same model on other epochs / in
  larger shapes (zero-weight padding);
* ``seen_cells()``: which cells any epoch sees;
* ``nbytes()``, ``n_epoch``, ``n_cell``, ``n_vel``, ``n_slot``;
* ``solve_form(cube_dtype, blocked)``, ``exact_at(source, fssc, fssh)``: the form a solver
  iterates on and its float64 evaluation;
* ``with_cell_factors(factors)``: per-cell weight factors (gravity darkening);
* ``kind``: a name for messages, summaries and files.

Shapes: ``n_slot`` is the most cells visible at any epoch (shorter epochs are padded with
zero weight); slot ``s`` of epoch ``e`` is cell ``cell[e, s]``, and ``pos[e, c]`` is the
slot of cell ``c`` (``n_slot`` if it is not visible).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .. import _device
from .._repr import compact
from ..errors import DopplermapInputError

__all__ = ["Form", "Setup", "Slots", "form_pytree", "is_mu_dependent", "eval_profile", "fill_stack", "shift_profiles"]


def form_pytree(cls=None, *, meta=()):
    """Frozen dataclass registered as a pytree (``meta``: static fields). Hashed by identity,
    so a form can key the caches of the forms derived from it."""
    def wrap(c):
        c = dataclasses.dataclass(frozen=True, eq=False, repr=False)(c)  # Form.__repr__: sizes, no arrays
        names = [f.name for f in dataclasses.fields(c)]
        return jax.tree_util.register_dataclass(
            c, data_fields=[n for n in names if n not in meta], meta_fields=list(meta))
    return wrap if cls is None else wrap(cls)


def is_mu_dependent(profile) -> bool:
    """Whether a local profile depends on mu: it has ``mu_dependent = True`` and is called
    as ``profile(v, mu)`` (broadcasting; v km/s, mu in [0, 1]) instead of ``profile(v)``."""
    return bool(getattr(profile, "mu_dependent", False))


def eval_profile(profile, v, mu=None) -> np.ndarray:
    """``profile(v, mu)`` for mu-dependent profiles, else ``profile(v)`` (mu ignored)."""
    if is_mu_dependent(profile):
        return np.asarray(profile(v, 1.0 if mu is None else mu), dtype=float)
    return np.asarray(profile(v), dtype=float)


def fill_stack(fssc, fssh):
    """(n_cell, 3) filling factors of photosphere, cool and hot spots."""
    return jnp.stack([1.0 - fssc - fssh, fssc, fssh], axis=1)


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


def round_up(n: int, step: int) -> int:
    return int(-(-n // step) * step)


def on_host(a) -> bool:
    """Whether ``a`` is set-up data NumPy can work on in place of an eager XLA op: a NumPy array
    (or a list), or a concrete array on the CPU (where NumPy reads it without a copy). An eager
    ``jnp`` op compiles a program per new shape (tens of ms each: a grid's points differ in their
    slot counts), which a first run pays in full; on an accelerator the data stay on the device."""
    if not isinstance(a, jax.Array):
        return True
    return not isinstance(a, jax.core.Tracer) and all(d.platform == "cpu" for d in a.devices())


def set_up(f, *arrays):
    """``f(xp, *arrays)`` with ``xp`` NumPy where every array is on the host (:func:`on_host`; the
    result put on the device without compiling anything), else ``jax.numpy``."""
    if all(on_host(a) for a in arrays):
        return _device.asarray(f(np, *(np.asarray(a) for a in arrays)))
    return f(jnp, *arrays)


def pad_axis(a, axis: int, n: int, value=0, mode: str = "constant"):
    """``a`` with ``n`` entries appended along ``axis``: ``value``, or with ``mode="edge"`` the last."""
    if not n:
        return a
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, n)
    kw = dict(constant_values=value) if mode == "constant" else {}
    return set_up(lambda xp, a: xp.pad(a, widths, mode=mode, **kw), a)


@dataclasses.dataclass(frozen=True)
class Slots:
    """Slot layout of a precomputation: which cell each (epoch, slot) holds, and the
    per-slot geometry. ``order`` sorts each epoch's cells by ``key`` (visible first)."""

    slot_ok: np.ndarray  # (E, S) bool: a visible cell
    order: np.ndarray  # (E, S) cell of each slot before masking
    cell: np.ndarray  # (E, S) int32
    pos: np.ndarray  # (E, C) int32
    weight: np.ndarray  # (E, S, 3) component weights, 0 in padding
    v_los: np.ndarray  # (E, S) km/s
    mu: np.ndarray  # (E, S) in [0, 1]

    @classmethod
    def sorted_by(cls, key, visible, n_slot: int, weights, v_los, mu) -> Slots:
        n_epoch, n_cell = visible.shape
        order = np.argsort(key, axis=1, kind="stable")[:, :n_slot]
        slot_ok = np.take_along_axis(visible, order, axis=1)
        cell = np.where(slot_ok, order, 0).astype(np.int32)
        pos = np.full((n_epoch, n_cell), n_slot, dtype=np.int32)
        e_idx, s_idx = np.nonzero(slot_ok)
        pos[e_idx, order[e_idx, s_idx]] = s_idx
        w_slot = np.where(slot_ok[..., None], np.take_along_axis(weights, order[None], axis=2).transpose(1, 2, 0), 0.0)
        v_slot = np.take_along_axis(v_los, order, axis=1)
        mu_slot = np.clip(np.take_along_axis(mu, order, axis=1), 0.0, 1.0)
        return cls(slot_ok=slot_ok, order=order, cell=cell, pos=pos, weight=w_slot, v_los=v_slot, mu=mu_slot)


@dataclasses.dataclass(frozen=True)
class Setup:
    """What :func:`dopplermap.precompute` hands a form's ``build``: the geometry of every
    (epoch, cell) and the settings.

    Attributes:
        vels: (n_vel,) km/s. v_los, mu, visible: (n_epoch, n_cell). weights: (3, n_epoch,
        n_cell) ``I_k LD_k(mu) area mu``. n_slot: most cells visible at an epoch.
        components: the :class:`~dopplermap.profiles.ComponentSet`. span: km/s, largest
        |v_los| plus the width of the velocity grid. synthesis_tol, bin_width: the binned
        form's accuracy settings. dtype: float dtype of the arrays. rv_margin: km/s, the
        largest rv shift the form must synthesise exactly (None: the seed's interpolation).
    """

    vels: np.ndarray
    v_los: np.ndarray
    mu: np.ndarray
    visible: np.ndarray
    weights: np.ndarray
    n_slot: int
    components: object
    span: float
    synthesis_tol: float
    bin_width: float | None
    dtype: object
    rv_margin: float | None = None

    def slots(self, key) -> Slots:
        """Slot layout with each epoch's cells sorted by ``key`` (E, C) (invisible cells last)."""
        return Slots.sorted_by(key, self.visible, self.n_slot, self.weights, self.v_los, self.mu)


@dataclasses.dataclass(frozen=True, eq=False)
class Form:
    """Base of the synthesis forms: the fields every form has and the protocol's defaults.

    Attributes:
        vels: (n_vel,) observed velocity grid, km/s.
        cell: (n_epoch, n_slot) int32 cell index of each slot.
        pos: (n_epoch, n_cell) int32 slot of each cell, ``n_slot`` if not visible.
    """

    vels: jnp.ndarray
    cell: jnp.ndarray
    pos: jnp.ndarray

    kind: ClassVar[str] = "form"
    """Name of the form, for messages, summaries and files."""
    epoch_fields: ClassVar[tuple[str, ...]] = ("cell", "pos")
    """Fields whose first axis is the epoch (selected and chunked together)."""
    foldable: ClassVar[bool] = False
    """Whether this is the exact float64 cube that solvers fold (or block) to iterate on."""
    batches_well: ClassVar[bool] = False
    """Whether vmapped products over many maps beat one at a time on the CPU (matrix-matrix)."""

    def __repr__(self) -> str:
        return compact(self, ("vels",), n_cell=self.n_cell, n_epoch=self.n_epoch, n_vel=self.n_vel)

    @classmethod
    def build_subdivided(cls, setup: Setup, n_cell: int) -> Form:
        """From the geometry of sub-cells, one filling factor per map cell (``subdivide``):
        only the dense form integrates a cell over sub-cells."""
        raise DopplermapInputError(f"subdivide: the {cls.kind} synthesis does not integrate cells over sub-cells; "
                                   "use method = 'dense' (or 'auto') and rv_shift = 'interpolate', or subdivide = 1")

    @property
    def exact_rv(self) -> bool:
        """Whether :meth:`shifted_profiles` moves the local profiles by rv (``rv_shift="exact"``)
        instead of interpolating the disc-integrated profile (the seed's shift)."""
        return False

    # ------------------------------------------------------------------ sizes

    @property
    def n_epoch(self) -> int:
        return int(self.cell.shape[0])

    @property
    def n_cell(self) -> int:
        return int(self.pos.shape[1])

    @property
    def n_vel(self) -> int:
        return int(self.vels.shape[0])

    @property
    def n_slot(self) -> int:
        return int(self.cell.shape[1])

    @property
    def cube_dtype(self) -> str | None:
        """Storage dtype of the form's profile cube, None if it has none."""
        return None

    def nbytes(self) -> int:
        """Bytes held by the arrays of this form."""
        return sum(int(x.nbytes) for x in jax.tree_util.tree_leaves(self))

    # ------------------------------------------------------------------ synthesis

    def fill(self, fssc, fssh):
        """The per-cell factors the form's products take: (n_cell, k)."""
        raise NotImplementedError

    def epoch_numerator_norm(self, f):
        """``(num (n_epoch, n_vel), norm (n_epoch,))`` from :meth:`fill`'s ``f``, for the
        epochs this form holds (a chunk of them, when :meth:`numerator_norm` chunks)."""
        raise NotImplementedError

    def jacobian_blocks(self):
        """``(local, block_row, block_cell)``: matrices the epochs' numerators and normalisations
        are linear in, block by block (as :class:`~dopplermap.forms.blocked.BlockedForm` holds
        them), so that a Jacobian by the filling factors can be read from them
        (:func:`dopplermap.uncertainty.effective_dof`); None for a form without them or whose rv
        shift is not :meth:`shifted_profiles`' base one."""
        return None

    def shifted_profiles(self, fssc, fssh, rv):
        """(n_epoch, n_vel) weight-normalised profiles moved by ``rv`` (n_epoch,) km/s: the seed's
        linear interpolation of the synthesised profiles on the data grid (:func:`shift_profiles`)."""
        num, norm = self.numerator_norm(fssc, fssh)
        return shift_profiles(self.vels, rv, num / norm[:, None])

    def epoch_chunk(self) -> int:
        """Epochs synthesised together (:meth:`numerator_norm` maps over chunks of them)."""
        return self.n_epoch

    def numerator_norm(self, fssc, fssh, rv=None):
        """Numerator ``sum_k sum_c a_k L_k`` (n_epoch, n_vel) and normalisation ``sum_k sum_c a_k``
        (n_epoch,) of the map ``(fssc, fssh)`` ((n_cell,) each). ``rv`` (n_epoch,) km/s: the
        local profiles moved by it, for forms that synthesise a shift (see :meth:`shifted_profiles`)."""
        f = self.fill(fssc, fssh)
        n_epoch, chunk = self.n_epoch, self.epoch_chunk()

        def part_of(line, r):
            return line.epoch_numerator_norm(f) if r is None else line.epoch_numerator_norm(f, r)

        if chunk >= n_epoch:
            return part_of(self, rv)
        # chunks slice the arrays in place (no padded copy of the model per call); the last
        # chunk ends at the last epoch and overlaps its neighbour, whose results for the
        # shared epochs are the ones kept
        n_chunk = -(-n_epoch // chunk)
        starts = np.minimum(np.arange(n_chunk) * chunk, n_epoch - chunk)
        fields = [k for k in self.epoch_fields if getattr(self, k) is not None]

        def one(start):
            part = {k: jax.lax.dynamic_slice_in_dim(getattr(self, k), start, chunk, axis=0) for k in fields}
            r = None if rv is None else jax.lax.dynamic_slice_in_dim(rv, start, chunk, axis=0)
            return part_of(dataclasses.replace(self, **part), r)

        num, norm = jax.lax.map(jax.checkpoint(one), jnp.asarray(starts, dtype=jnp.int32))
        e = np.arange(n_epoch)
        c = np.minimum(e // chunk, n_chunk - 1)  # chunk that keeps epoch e
        keep = jnp.asarray(c * chunk + e - starts[c])  # its row in the stacked chunk results
        return num.reshape(n_chunk * chunk, -1)[keep], norm.reshape(-1)[keep]

    # ------------------------------------------------------------------ other shapes

    def select_epochs(self, idx) -> Form:
        """The same model restricted to epochs ``idx`` ((k,) int, repeats allowed)."""
        j = jnp.asarray(idx)
        return dataclasses.replace(self, **{k: getattr(self, k)[j] for k in self.epoch_fields
                                            if getattr(self, k) is not None})

    def pad(self, n_slot: int | None = None, n_bin: int | None = None) -> Form:
        """The same model with the slot axis (and, binned, the bin axis) padded by zero-weight
        entries; never shrinks. Default ``n_slot``: rounded up to a multiple of
        ``max(32, n_cell // 16)`` (so that neighbouring grid points share one compiled
        objective); ``n_bin`` as the form says (:meth:`padding`)."""
        s0 = self.n_slot
        s1 = n_slot if n_slot is not None else min(round_up(s0, max(32, self.n_cell // 16)), self.n_cell)
        s1 = max(int(s1), s0)
        return dataclasses.replace(self, **{k: rule(getattr(self, k)) for k, rule in self.padding(s1, n_bin).items()
                                            if getattr(self, k) is not None})

    def padding(self, s1: int, n_bin: int | None) -> dict:
        """Field -> function that pads it when the slot axis grows to ``s1`` (fields not named
        keep their value: they have no slot axis)."""
        s0 = self.n_slot
        return {"cell": lambda a: pad_axis(a, 1, s1 - s0),  # new slots point at cell 0 with zero weight
                "pos": lambda a: set_up(lambda xp, a: xp.where(a == s0, s1, a).astype(a.dtype), a)}  # "not visible" is the slot count

    # ------------------------------------------------------------------ what the cells carry

    def slot_activity(self) -> np.ndarray:
        """(n_epoch, n_slot) >= 0, > 0 where the slot contributes to the model."""
        raise NotImplementedError

    def seen_cells(self) -> np.ndarray:
        """(n_cell,) bool: cells that carry weight at some epoch."""
        pos = np.asarray(self.pos)
        seen = np.zeros(self.n_cell, bool)
        e, c = np.nonzero(pos < self.n_slot)
        seen[c[self.slot_activity()[e, pos[e, c]] > 0]] = True
        return seen

    def weight_components(self) -> tuple[int, ...]:
        """Component (0 phot, 1 cool, 2 hot) of each column of ``weight``."""
        raise DopplermapInputError(f"the {self.kind} form holds no per-component weights: apply cell factors to "
                                   "the dense (or binned) model before it is folded")

    def with_cell_factors(self, factors) -> Form:
        """This form with its per-cell weights multiplied by ``factors`` ((n_cell,) or (n_cell, 3))."""
        cols = np.asarray(self.weight_components())
        shape = np.shape(factors)
        if shape not in ((self.n_cell,), (self.n_cell, 3)):
            raise DopplermapInputError(f"cell factors must have shape (n_cell,) or (n_cell, 3) with n_cell={self.n_cell}, got {shape}")

        def scaled(xp, weight, cell, f):
            f = xp.asarray(f, dtype=weight.dtype)
            f = xp.broadcast_to(f[:, None], (f.shape[0], 3)) if f.ndim == 1 else f
            return weight * f[cell][..., cols]

        return dataclasses.replace(self, weight=set_up(scaled, self.weight, self.cell, factors))

    # ------------------------------------------------------------------ solving

    def solve_form(self, cube_dtype="float32", blocked: bool = False) -> Form:
        """The form a solver iterates on (this one, unless :attr:`foldable`)."""
        return self

    def blocked_nbytes(self, dtype=jnp.float32) -> int | None:
        """Bytes of the blocked form of this model, None if it has none."""
        return None

    def exact_at(self, source: Form, fssc, fssh) -> Form:
        """This form set to report float64 values at ``(fssc, fssh)``, computed from ``source``
        (the model it was derived from); unchanged where it computes them already."""
        return self
