"""The blocked form: the folded model as a few plain matrices, for batches of maps.

Epochs are grouped by rotation phase (:func:`phase_order`) into ``n_block`` blocks of equal
size; each block becomes one matrix ``(n_epoch_block (n_vel + 1), 2 n_ucell)`` over the union
of the cells its epochs see (zeros where an epoch does not see a cell), so a synthesis is
``n_block`` matrix-vector products after a gather of ``f`` per block, instead of one gather
per epoch and visible cell. Its use is a *batch* of maps (a vmapped solve over lambdas or
data sets): each block then becomes one matrix-matrix product that reads the block once for
all members, where the folded form needs one small product per epoch and member. The
transpose product reads a transposed copy (``local_t``): XLA CPU's transposed contraction of
the same matrix is much slower for a batch. Measurements: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from threadpoolctl import threadpool_limits

from .. import _linops
from ..errors import DopplermapInputError
from .base import Form, form_pytree, pad_axis

__all__ = ["BlockedForm", "DEFAULT_BLOCKS", "phase_order", "blocked_nbytes"]

DEFAULT_BLOCKS = 8
"""Epoch blocks of the blocked form (the block count barely matters: see benchmarks/RESULTS.md)."""


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
    # (E, E) Gram matrix: cheaper than an SVD of (E, C). One BLAS thread: on shared cores
    # OpenBLAS's threads slow this small eigenproblem down many times (benchmarks/RESULTS.md)
    gram = vis @ vis.T
    with threadpool_limits(limits=1, user_api="blas"):
        w, v = np.linalg.eigh(gram)
    ang = np.arctan2(v[:, -2] * np.sqrt(max(w[-2], 0.0)), v[:, -1] * np.sqrt(max(w[-1], 0.0)))
    order = np.argsort(ang, kind="stable")
    gaps = np.diff(np.concatenate([ang[order], ang[order[:1]] + 2 * np.pi]))
    return np.roll(order, -(int(np.argmax(gaps)) + 1))


def blocked_nbytes(line: Form, dtype=jnp.float32) -> int:
    """Bytes of the blocked form's two copies for ``line``, estimated without building them.

    An upper estimate but for the padding of the last block: no block sees more cells than
    are ever visible.
    """
    n_e, n_s = line.cell.shape
    seen = int(np.count_nonzero((np.asarray(line.pos) < n_s).any(axis=0)))
    return 2 * n_e * (line.n_vel + 1) * 2 * seen * np.dtype(dtype).itemsize


@form_pytree
class BlockedForm(Form):
    """The folded model as epoch blocks (see the module docstring).

    Attributes:
        weight: (n_epoch, n_slot, 2) the folded weight differences, kept for reference.
        local: (n_block, n_row, 2 n_ucell) each block of epochs as one matrix over the union
            of its visible cells; ``local_t`` its transpose (n_block, 2 n_ucell, n_row).
        block_cell: (n_block, n_ucell) int32 the union's cells (padding: cell 0, zero columns).
        block_row: (n_epoch,) int32 the row of each epoch in the blocks' stacked output.
        base, base_norm: as the folded form's.
    """

    weight: jnp.ndarray
    local: jnp.ndarray
    base: jnp.ndarray
    base_norm: jnp.ndarray
    local_t: jnp.ndarray
    block_cell: jnp.ndarray
    block_row: jnp.ndarray

    kind: ClassVar[str] = "blocked"
    epoch_fields: ClassVar[tuple[str, ...]] = ()  # blocks span epochs: synthesised whole
    batches_well: ClassVar[bool] = True

    @classmethod
    def from_folded(cls, folded, n_block: int | None = None) -> BlockedForm:
        """Block a :class:`~dopplermap.forms.folded.FoldedForm` into ``n_block`` epoch blocks."""
        n_e, n_r, n_s, n_k = folded.local.shape
        n_block = int(DEFAULT_BLOCKS if n_block is None else n_block)
        if not 1 <= n_block:
            raise DopplermapInputError(f"n_block must be >= 1, got {n_block}")
        n_block = min(n_block, n_e)
        per = -(-n_e // n_block)
        n_block = -(-n_e // per)  # no empty block
        order = phase_order(folded.pos, n_s)
        groups = [order[b * per:(b + 1) * per] for b in range(n_block)]
        pos = np.asarray(folded.pos)
        ee, cc = np.nonzero(pos < n_s)
        ss = pos[ee, cc]
        unions = [np.unique(cc[np.isin(ee, g)]) for g in groups]
        n_u = max(1, max(u.size for u in unions))
        cube = np.asarray(folded.local)  # (E, R, S, 2)
        blocks = np.zeros((n_block, per, n_r, n_u, n_k), cube.dtype)
        block_cell = np.zeros((n_block, n_u), np.int32)
        block_row = np.zeros(n_e, np.int32)
        col = np.empty(folded.n_cell, np.int64)
        local_e = np.empty(n_e, np.int64)
        for b, (g, u) in enumerate(zip(groups, unions, strict=True)):
            block_cell[b, :u.size] = u
            col[u] = np.arange(u.size)
            local_e[g] = np.arange(g.size)
            block_row[g] = b * per + np.arange(g.size)
            sel = np.isin(ee, g)
            e_b, c_b, s_b = ee[sel], cc[sel], ss[sel]
            blocks[b][local_e[e_b], :, col[c_b], :] = cube[e_b, :, s_b, :]
        blocks = blocks.reshape(n_block, per * n_r, n_u * n_k)
        return cls(vels=folded.vels, cell=folded.cell, pos=folded.pos, weight=folded.weight,
                   local=jnp.asarray(blocks), local_t=jnp.asarray(np.ascontiguousarray(blocks.transpose(0, 2, 1))),
                   block_cell=jnp.asarray(block_cell), block_row=jnp.asarray(block_row),
                   base=folded.base, base_norm=folded.base_norm)

    @property
    def cube_dtype(self) -> str:
        return str(self.local.dtype)

    def fill(self, fssc, fssh):
        return jnp.stack([fssc, fssh], axis=1)

    def epoch_numerator_norm(self, f):
        n_b, n_row, n_col = self.local.shape
        x = f.at[self.block_cell].get(mode="promise_in_bounds").reshape(n_b, n_col)  # (B, U * 2)
        out = _linops.block_product(x, self.local, self.local_t)  # (B, n_row), f's dtype
        out = out.reshape(-1, self.base.shape[1] + 1)[self.block_row]  # (E, V + 1) in epoch order
        return self.base + out[:, :-1], self.base_norm + out[:, -1]

    def jacobian_blocks(self):
        if type(self).shifted_profiles is not Form.shifted_profiles:
            return None
        return self.local, self.block_row, self.block_cell

    def select_epochs(self, idx):
        raise DopplermapInputError("resample_epochs needs a dense, folded or binned model, not the blocked form "
                                   "(resample the dense model, then block it)")

    def padding(self, s1, n_bin):
        # the blocks span their unions' cells, not slots: only the slot-indexed arrays grow
        return {**super().padding(s1, n_bin), "weight": lambda a: pad_axis(a, 1, s1 - self.n_slot)}

    def seen_cells(self):
        # judged by the blocks' columns (each a cell of a block's union)
        seen = np.zeros(self.n_cell, bool)
        cols = np.abs(np.asarray(self.local)).sum(axis=1).reshape(self.block_cell.shape + (-1,)).sum(axis=2)
        seen[np.asarray(self.block_cell)[cols > 0]] = True
        return seen
