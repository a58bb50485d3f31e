"""The dense form: the exact cube of shifted local profiles, as the seed stores it.

``num[e, v] = sum_s sum_k weight[e, s, k] f_k[cell[e, s]] local[e, s, k, v]``,
``norm[e] = sum_s sum_k weight[e, s, k] f_k[cell[e, s]]``. Solvers iterate on its folded
(:mod:`.folded`) or blocked (:mod:`.blocked`) rearrangement (:meth:`DenseForm.solve_form`).
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
import numpy as np

from .. import _device, _linops
from ..errors import DopplermapInputError
from .base import Form, Setup, Slots, eval_profile, fill_stack, form_pytree, pad_axis
from .blocked import BlockedForm, blocked_nbytes
from .folded import FoldedForm

__all__ = ["DenseForm", "fold_dense", "block_dense", "dense_numerator"]


@form_pytree
class DenseForm(Form):
    """Exact line synthesis for fixed star, grid, epochs and local profiles.

    Attributes:
        weight: (n_epoch, n_slot, 3) ``I_k LD_k(mu) area mu`` (0 in padding).
        local: (n_epoch, n_slot, 3, n_vel) ``L_k(v - v_los, mu)``.
    """

    weight: jnp.ndarray
    local: jnp.ndarray

    kind: ClassVar[str] = "dense"
    epoch_fields: ClassVar[tuple[str, ...]] = ("cell", "pos", "weight", "local")
    foldable: ClassVar[bool] = True

    @classmethod
    def build(cls, setup: Setup) -> DenseForm:
        """From the precomputation's geometry: the local profiles of every visible cell."""
        if setup.rv_margin is not None:
            raise DopplermapInputError("rv_shift='exact' needs method='binned': the dense cube holds the local "
                                       "profiles at fixed velocities (the seed's interpolation shifts them)")
        sl = setup.slots(np.where(setup.visible, 0, 1))
        vels, dtype = setup.vels, setup.dtype
        u = vels[None, None, :] - sl.v_los[:, :, None]
        # written once, into a buffer the device adopts without a copy when it is float64
        comps = tuple(setup.components)
        local = _device.host_array((*u.shape[:2], len(comps), u.shape[2]))
        for k, comp in enumerate(comps):
            local[:, :, k, :] = eval_profile(comp.profile, u, sl.mu[:, :, None])
        return cls(vels=_device.asarray(vels, dtype), cell=_device.asarray(sl.cell), pos=_device.asarray(sl.pos),
                   weight=_device.asarray(sl.weight, dtype), local=_device.asarray(local, dtype))

    @classmethod
    def build_subdivided(cls, setup: Setup, n_cell: int) -> DenseForm:
        """From the geometry of sub-cells (``setup`` over the sub-cells, each map cell's as many
        and consecutive, as :func:`dopplermap.grid.subdivide` orders them): one slot per map cell in view, whose weight is the sum of its visible
        sub-cells' weights and whose local profile their weighted mean, so that
        ``sum_sub w L f_k = f_k W (sum_sub w L / W)`` is exact for a filling factor shared by the
        sub-cells. The map keeps ``n_cell`` parameters; the line is integrated over the
        sub-cells (a cell the limb cuts counts only its sub-cells in view)."""
        if setup.rv_margin is not None:
            raise DopplermapInputError("subdivide: rv_shift='exact' needs method='binned', which does not integrate "
                                       "cells over sub-cells; use rv_shift='interpolate' or subdivide = 1")
        n_fine = setup.visible.shape[1]
        m2 = n_fine // n_cell
        n_epoch = setup.visible.shape[0]
        n_vel = setup.vels.size
        n_k = len(tuple(setup.components))

        def per_cell(a, axis):  # sum over each map cell's m2 consecutive sub-cells along ``axis``
            a = np.asarray(a)
            return a.reshape(a.shape[:axis] + (n_cell, m2) + a.shape[axis + 1:]).sum(axis=axis + 1)

        w_f = np.where(setup.visible[None], setup.weights, 0.0)  # (3, E, Cf)
        w_c = per_cell(w_f, 2)  # (3, E, C)
        visible = per_cell(setup.visible, 1) > 0
        n_slot = int(visible.sum(axis=1).max())
        zeros = np.zeros(visible.shape)
        sl = Slots.sorted_by(np.where(visible, 0, 1), visible, n_slot, w_c, zeros, zeros)
        local = _device.host_array((n_epoch, n_slot, n_k, n_vel))
        comps = tuple(setup.components)
        block = max(1, int(2 ** 24 // max(1, n_fine * n_vel)))  # ~128 MiB of sub-cell profiles at a time
        for e0 in range(0, n_epoch, block):  # set-up only: epoch blocks bound the sub-cells' memory
            e1 = min(n_epoch, e0 + block)
            seen = np.nonzero(setup.visible[e0:e1])  # only the sub-cells in view: about half
            u = setup.vels[None, :] - setup.v_los[e0:e1][seen][:, None]  # (n_seen, V)
            mu = np.clip(setup.mu[e0:e1][seen], 0.0, 1.0)[:, None]
            full = np.zeros((e1 - e0, n_fine, n_vel))
            for k, comp in enumerate(comps):
                full[seen] = eval_profile(comp.profile, u, mu) * w_f[k, e0:e1][seen][:, None]
                num = per_cell(full, 1)  # (B, C, V)
                wk = w_c[k, e0:e1][:, :, None]
                mean = np.divide(num, wk, out=np.zeros_like(num), where=wk > 0)
                local[e0:e1, :, k, :] = np.take_along_axis(mean, sl.cell[e0:e1, :, None].astype(np.int64), axis=1)
        local[~sl.slot_ok] = 0.0
        dtype = setup.dtype
        return cls(vels=_device.asarray(setup.vels, dtype), cell=_device.asarray(sl.cell), pos=_device.asarray(sl.pos),
                   weight=_device.asarray(sl.weight, dtype), local=_device.asarray(local, dtype))

    @staticmethod
    def precompute_nbytes(n_cell: int, n_epoch: int, n_vel: int) -> float:
        """Bytes of the cube of about half the cells (the visible ones) x 3 components x
        n_vel, plus its folded copy (beyond the precomputation's geometry arrays)."""
        return 2 * 8.0 * n_epoch * (n_cell / 2 + 1) * 3 * n_vel

    @property
    def cube_dtype(self) -> str:
        return str(self.local.dtype)

    def fill(self, fssc, fssh):
        return fill_stack(fssc, fssh)

    def epoch_numerator_norm(self, f):
        a = self.weight * _linops.gather_slots(f, self.cell, self.pos, f.dtype)  # (E, S, 3)
        norm = a.sum(axis=(1, 2))
        # one merged contraction axis: XLA CPU is far slower contracting (s, k) as two axes
        n_e, n_s, n_k, n_v = self.local.shape
        num = jnp.einsum("es,esv->ev", a.reshape(n_e, n_s * n_k), self.local.reshape(n_e, n_s * n_k, n_v))
        return num, norm

    def padding(self, s1, n_bin):
        ds = s1 - self.n_slot
        return {**super().padding(s1, n_bin), "weight": lambda a: pad_axis(a, 1, ds),
                "local": lambda a: pad_axis(a, 1, ds)}

    def slot_activity(self):
        return np.abs(np.asarray(self.weight)).sum(axis=2)

    def weight_components(self):
        return (0, 1, 2)

    def solve_form(self, cube_dtype="float32", blocked: bool = False) -> Form:
        """The folded form (:func:`fold_dense`), or the blocked one (:func:`block_dense`), in
        ``cube_dtype``; None: this form. Built anew on every call: a
        :class:`dopplermap.problem.Problem` keeps the forms its solves use."""
        if cube_dtype is None:
            return self
        return (block_dense if blocked else fold_dense)(self, dtype=cube_dtype)

    def blocked_nbytes(self, dtype=jnp.float32) -> int:
        return blocked_nbytes(self, dtype)

    def exact_numerator(self, fssc, fssh, with_norm: bool = False) -> np.ndarray:
        """(n_epoch, n_vel) numerator ``sum_k sum_c a_k L_k``, float64 NumPy; ``with_norm``:
        the normalisation ``sum_k sum_c a_k`` appended as a last column."""
        f = np.stack([1.0 - np.asarray(fssc) - np.asarray(fssh), np.asarray(fssc), np.asarray(fssh)], axis=1)
        a = np.asarray(self.weight, dtype=np.float64) * f[np.asarray(self.cell)]  # (E, S, 3)
        num = np.einsum("esk,eskv->ev", a, np.asarray(self.local, dtype=np.float64), optimize=True)
        return np.concatenate([num, a.sum(axis=(1, 2))[:, None]], axis=1) if with_norm else num


def _need_dense(line, what: str) -> None:
    if not isinstance(line, DenseForm):
        raise DopplermapInputError(f"{what} needs a dense line model, got method={line.kind!r}")


def fold_dense(line: DenseForm, dtype=jnp.float32) -> FoldedForm:
    """The folded form of a dense model, for fast solving (same model, 2/3 of the cube);
    see :class:`~dopplermap.forms.folded.FoldedForm`.

    Args:
        line: a :class:`DenseForm`.
        dtype: storage (and arithmetic) type of the difference cube. ``float32`` halves the
            bytes read per evaluation; its rounding is ~2e-7 of the continuum (the
            unspotted part ``base`` and everything after the sum stay float64).
    """
    _need_dense(line, "fold_dense")
    return FoldedForm.from_dense(line, dtype)


def block_dense(line: DenseForm, n_block: int | None = None, dtype=jnp.float32) -> BlockedForm:
    """The blocked form of a dense model (see :class:`~dopplermap.forms.blocked.BlockedForm`).

    Args:
        line: a :class:`DenseForm`.
        n_block: number of epoch blocks (at most n_epoch); default ``DEFAULT_BLOCKS``.
        dtype: storage type of the blocks (as :func:`fold_dense`).
    """
    _need_dense(line, "block_dense")
    return BlockedForm.from_folded(FoldedForm.from_dense(line, dtype), n_block)


def dense_numerator(fssc, fssh, line: DenseForm, with_norm: bool = False) -> np.ndarray:
    """(n_epoch, n_vel) numerator ``sum_k sum_c a_k L_k`` of a dense model, float64 NumPy
    (:meth:`DenseForm.exact_numerator`)."""
    _need_dense(line, "dense_numerator")
    return line.exact_numerator(fssc, fssh, with_norm)
