"""The folded form: the dense model rearranged for fast solving.

Since ``f_phot = 1 - f_cool - f_hot``, the photosphere's contribution is a constant per
epoch plus differences::

    num  = base + sum_s f_cool D_cool + f_hot D_hot,        D_k = w_k L_k - w_phot L_phot
    norm = base_norm + sum_s f_cool (w_cool - w_phot) + f_hot (w_hot - w_phot)

so the cube shrinks to ``2 x n_epoch x n_vis x (n_vel + 1)`` weighted differences (the extra
row: the normalisation), velocity-major and stored in float32 by default (half the bytes
again). Its rounding is ~2e-7 of the continuum in the profiles and ~1e-8 relative in the
loss (seed size); the rest stays float64.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp
import numpy as np

from .. import _device, _linops
from ..compiled import call_cached
from ..errors import DopplermapInputError
from .base import Form, form_pytree, pad_axis

__all__ = ["FoldedForm"]


def _fold_arrays(weight, local, *, dtype):
    # one compiled pass: velocity-major (E, V + 1, S, 2) cube, the weight differences as its
    # last row - both products of an evaluation (forward and transpose) then stream
    # contiguous rows and the normalisation comes with the numerator
    w = weight.astype(jnp.float64)
    loc = local.astype(jnp.float64)  # (E, S, 3, V)
    phot = w[..., 0, None] * loc[:, :, 0]  # (E, S, V)
    diff = w[..., 1:, None] * loc[:, :, 1:] - phot[:, :, None]  # (E, S, 2, V)
    wdiff = w[..., 1:] - w[..., :1]  # (E, S, 2)
    cube = jnp.concatenate([diff.transpose(0, 3, 1, 2), wdiff[:, None]], axis=1).astype(dtype)
    return cube, phot.sum(axis=1), w[..., 0].sum(axis=1), wdiff


@form_pytree
class FoldedForm(Form):
    """The dense model as the photosphere plus spot differences (see the module docstring).

    Attributes:
        weight: (n_epoch, n_slot, 2) ``w_k - w_phot`` (k = cool, hot), kept for reference
            (the products read the cube's last row).
        local: (n_epoch, n_vel + 1, n_slot, 2) rows ``v``: ``w_k L_k - w_phot L_phot``, row
            ``n_vel``: ``w_k - w_phot``; float32 or float64; velocity-major, so each epoch's
            matrix-vector product and its transpose stream contiguous rows.
        base: (n_epoch, n_vel) numerator of an unspotted star, ``sum w_phot L_phot``.
        base_norm: (n_epoch,) ``sum w_phot``.
        num_exact, use_exact: float32 cube only: (n_epoch, n_vel + 1) numerator and (last
            column) normalisation computed elsewhere in float64, and a () bool; when True
            they replace the float32 sums (value only: their gradient is not formed).
            Solvers set it once, for the final reported evaluation (:meth:`exact_at`).
    """

    weight: jnp.ndarray
    local: jnp.ndarray
    base: jnp.ndarray
    base_norm: jnp.ndarray
    num_exact: jnp.ndarray | None = None
    use_exact: jnp.ndarray | None = None

    kind: ClassVar[str] = "folded"
    epoch_fields: ClassVar[tuple[str, ...]] = ("cell", "pos", "weight", "local", "base", "base_norm", "num_exact")

    @classmethod
    def from_dense(cls, dense, dtype=jnp.float32) -> FoldedForm:
        """Fold a :class:`~dopplermap.forms.dense.DenseForm` (``dtype``: float32 or float64 cube)."""
        dtype = jnp.dtype(dtype)
        if dtype not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.float64)):
            raise DopplermapInputError(f"cube dtype must be float32 or float64, got {dtype}")
        diff, base, base_norm, wdiff = call_cached("fold", _fold_arrays, dense.weight, dense.local, dtype=dtype.name)
        low = dtype != jnp.dtype(jnp.float64)
        return cls(vels=dense.vels, cell=dense.cell, pos=dense.pos, weight=wdiff, local=diff, base=base,
                   base_norm=base_norm, num_exact=_device.asarray(np.zeros(base.shape[:1] + (base.shape[1] + 1,))) if low else None,
                   use_exact=_device.asarray(False) if low else None)

    @property
    def cube_dtype(self) -> str:
        return str(self.local.dtype)

    def fill(self, fssc, fssh):
        return jnp.stack([fssc, fssh], axis=1)

    def epoch_numerator_norm(self, f):
        cube = self.local  # (E, V + 1, S, 2): difference profiles, then the weight differences
        n_e, n_r, n_s, n_k = cube.shape
        a = _linops.gather_slots(f, self.cell, self.pos, cube.dtype).reshape(n_e, n_s * n_k)
        out = jnp.einsum("es,evs->ev", a, cube.reshape(n_e, n_r, n_s * n_k)).astype(f.dtype)
        num = self.base + out[:, :-1]
        norm = self.base_norm + out[:, -1]
        if self.use_exact is not None:
            num = jnp.where(self.use_exact, self.num_exact[:, :-1], num)
            norm = jnp.where(self.use_exact, self.num_exact[:, -1], norm)
        return num, norm

    def padding(self, s1, n_bin):
        ds = s1 - self.n_slot
        return {**super().padding(s1, n_bin), "weight": lambda a: pad_axis(a, 1, ds),
                "local": lambda a: pad_axis(a, 2, ds)}

    def slot_activity(self):
        # weight differences may be zero (a spot as bright as the photosphere): the cube rows
        # say whether a slot contributes; > 0 is exact in float32 too
        return np.abs(np.asarray(self.local)).sum(axis=(1, 3))

    def exact_at(self, source, fssc, fssh) -> FoldedForm:
        """For a float32 cube folded from the dense ``source``: the numerator and
        normalisation at ``(fssc, fssh)`` computed from it in float64 NumPy and substituted
        (value only). Otherwise (float64 cube, or a ``source`` that is not the dense model) unchanged."""
        if self.use_exact is None or not source.foldable:
            return self
        num = _device.asarray(source.exact_numerator(fssc, fssh, with_norm=True), dtype=self.base.dtype)
        return dataclasses.replace(self, num_exact=num, use_exact=_device.asarray(True))
