"""Sparse linear maps with fast transposes, as ``jax.custom_vjp`` primitives.

The automatic transposes are scatters; these maps choose their transposes:

* :func:`gather_slots` - values of the cells visible at each epoch, in slot order, cast to
  a storage dtype (float32 for the folded cube); its transpose gathers back through the
  inverse index ``pos`` on accelerators and is a scatter-add on CPU (faster there,
  measured), accumulating in the input's dtype. Padded slots must carry a zero cotangent,
  which every model guarantees (their weights and cube rows are zero there).
* :func:`block_product` - ``blocks[b] @ x[b]`` for a few stored matrices whose transposes
  are stored too (the transposed contraction of the same array is 3x slower on XLA CPU
  for a batch of 8 vectors).
* :func:`deposit` - a weighted histogram of slot values onto velocity bins (a row
  scatter-add with sorted indices); its transpose is an interpolation (gather).

Their backward functions are plain differentiable ``jax.numpy``, so second derivatives
(reverse over reverse) work too.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from . import (
    _x64,  # noqa: F401  (float64 JAX for every numeric module)
    plan,
)

N_TAPS = 4  # cubic Lagrange interpolation: bins jbase .. jbase + 3


def _take_back(gbar, pos):
    # gbar: (n_epoch, n_slot, K); pos: (n_epoch, n_cell) in [0, n_slot] (n_slot = pad)
    padded = jnp.pad(gbar, ((0, 0), (0, 1), (0, 0)))
    return jnp.take_along_axis(padded, pos[:, :, None], axis=1, mode="promise_in_bounds").sum(axis=0)


_SLOT_GATHER = jax.lax.GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(0,), start_index_map=(0,))
_SLOT_SCATTER = jax.lax.ScatterDimensionNumbers(update_window_dims=(2,), inserted_window_dims=(0,),
                                                scatter_dims_to_operand_dims=(0,))


def _slots_of(f, cell):
    # lax.gather straight on the int32 indices: jnp indexing would add a negative-index
    # wrap-around (a select, or a converted copy of the indices) per call
    return jax.lax.gather(f, cell[..., None], _SLOT_GATHER, (1, f.shape[1]),
                          mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)


def _slots_add_back(gbar, cell, n_cell):
    out = jnp.zeros((n_cell, gbar.shape[-1]), gbar.dtype)
    return jax.lax.scatter_add(out, cell[..., None], gbar, _SLOT_SCATTER,
                               mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def gather_slots(f, cell, pos, dtype):
    """``f[cell].astype(dtype)``: the cells visible at each epoch, in slot order.

    Padded slots (``cell`` 0, ``pos`` never pointing at them) must get a zero cotangent, as
    they do in every model (zero weight and cube there): the CPU transpose (a scatter-add,
    measured faster there than the inverse-index gather: 2.2x at 2500 cells, 7x at 20k,
    which reads one random row per epoch per cell) does not mask them, which saves an index
    gather per call. The cotangent is accumulated in ``f``'s dtype (float64), whatever
    ``dtype`` the slots are stored in.

    Args:
        f: (n_cell, K). cell: (n_epoch, n_slot) int32. pos: (n_epoch, n_cell) inverse map.
        dtype: dtype of the result (static).
    """
    return _slots_of(f.astype(dtype), cell)


def _slots_fwd(f, cell, pos, dtype):
    return gather_slots(f, cell, pos, dtype), (cell, pos, jnp.zeros((0,), f.dtype))


def _slots_bwd(dtype, res, gbar):
    cell, pos, proto = res
    gbar = gbar.astype(proto.dtype)
    if not plan.on_accelerator():
        return _slots_add_back(gbar, cell, pos.shape[1]), None, None
    return _take_back(gbar, pos), None, None


gather_slots.defvjp(_slots_fwd, _slots_bwd)


def lagrange_weights(t):
    """Cubic Lagrange weights for nodes -1, 0, 1, 2 at fraction ``t`` in [0, 1) (NumPy or JAX)."""
    stack = np.stack if isinstance(t, np.ndarray) else jnp.stack
    return stack([
        -t * (t - 1.0) * (t - 2.0) / 6.0,
        (t + 1.0) * (t - 1.0) * (t - 2.0) / 2.0,
        -(t + 1.0) * t * (t - 2.0) / 2.0,
        (t + 1.0) * t * (t - 1.0) / 6.0,
    ], axis=-1)


def _deposit_impl(a, beta, jbase, n_bin):
    # a: (E, S, K); beta: (E, S, 4); jbase: (E, S) -> (E, n_bin, K)
    n_e, n_s, n_k = a.shape
    rows = (jbase + n_bin * jnp.arange(n_e, dtype=jbase.dtype)[:, None]).reshape(-1)
    out = jnp.zeros((n_e * n_bin, n_k), a.dtype)
    for m in range(N_TAPS):
        # materialised first: XLA CPU is several times slower when it fuses the product
        # into the scatter
        upd = jax.lax.optimization_barrier((a * beta[:, :, m:m + 1]).reshape(-1, n_k))
        out = out.at[rows + m].add(upd, indices_are_sorted=True, mode="promise_in_bounds")
    return out.reshape(n_e, n_bin, n_k)


def _interp_back(hbar, beta, jbase):
    # hbar: (E, n_bin, K) -> (E, S, K): sum_m beta[e, s, m] * hbar[e, jbase[e, s] + m]. One
    # row gather per tap, fused with its weight (no (E, S, 4, K) temporary: 4.6x faster at
    # 2500 cells, 12x at 5000 on a 2-core x86_64 VM, where that temporary left the caches)
    n_e, n_bin, n_k = hbar.shape
    flat = hbar.reshape(-1, n_k)
    rows = jbase + (n_bin * jnp.arange(n_e, dtype=jbase.dtype))[:, None]
    out = beta[..., 0:1] * flat.at[rows].get(mode="promise_in_bounds")
    for m in range(1, N_TAPS):
        out = out + beta[..., m:m + 1] * flat.at[rows + m].get(mode="promise_in_bounds")
    return out


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def deposit(a, beta, jbase, n_bin):
    """Weighted histogram onto velocity bins.

    ``H[e, jbase[e, s] + m, k] += a[e, s, k] * beta[e, s, m]``, m = 0..3.

    Args:
        a: (n_epoch, n_slot, K) values; slots sorted by ``jbase`` within each epoch.
        beta: (n_epoch, n_slot, 4) interpolation weights.
        jbase: (n_epoch, n_slot) int32 first bin of each slot, <= n_bin - 4.
        n_bin: number of velocity bins (static).
    Returns:
        (n_epoch, n_bin, K) histogram.
    """
    return _deposit_impl(a, beta, jbase, n_bin)


def _deposit_fwd(a, beta, jbase, n_bin):
    return _deposit_impl(a, beta, jbase, n_bin), (beta, jbase)


def _deposit_bwd(n_bin, res, hbar):
    beta, jbase = res
    abar = _interp_back(hbar, beta, jbase)
    # beta is fixed geometry (precomputed): its cotangent is not formed (zero)
    return abar, None, None


deposit.defvjp(_deposit_fwd, _deposit_bwd)


@jax.custom_batching.custom_vmap
def _block_matvec(x, blocks):
    return jnp.einsum("brc,bc->br", blocks, x.astype(blocks.dtype))


@_block_matvec.def_vmap
def _block_matvec_vmap(axis_size, in_batched, x, blocks):
    # a batch of vectors (n, B, C): one matrix-matrix product per block with the members
    # last, (B, R, C) @ (B, C, n); the default rule contracts against (n, B, C) as is,
    # 1.6-1.8x slower on XLA CPU (8 members, seed size)
    if in_batched[1]:  # batched matrices: no shortcut
        return jax.vmap(_block_matvec, in_axes=(0 if in_batched[0] else None, 0))(x, blocks), True
    xt = jax.lax.optimization_barrier(jnp.moveaxis(x, 0, -1).astype(blocks.dtype))  # not fused into the product
    out = jnp.einsum("brc,bcn->brn", blocks, xt)
    return jnp.moveaxis(out, -1, 0), True


@jax.custom_vjp
def block_product(x, blocks, blocks_t):
    """``out[b] = blocks[b] @ x[b]`` in the blocks' dtype, returned in ``x``'s dtype.

    Args:
        x: (n_block, n_col). blocks: (n_block, n_row, n_col). blocks_t: their transposes
            (n_block, n_col, n_row), which the transpose product reads (constants: no
            cotangent is formed for either).
    """
    return _block_matvec(x, blocks).astype(x.dtype)


def _block_fwd(x, blocks, blocks_t):
    return block_product(x, blocks, blocks_t), (blocks, blocks_t, jnp.zeros((0,), x.dtype))


def _block_bwd(res, g):
    blocks, blocks_t, proto = res
    # through block_product again (its own rule): second derivatives (reverse over reverse) work
    return block_product(g.astype(proto.dtype), blocks_t, blocks), None, None


block_product.defvjp(_block_fwd, _block_bwd)
