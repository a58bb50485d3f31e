"""The custom-vjp sparse maps against plain formulas."""

import jax
import jax.numpy as jnp
import numpy as np

from dopplermap import _linops


def _layout(rng, n_epoch=5, n_cell=40, n_slot=25, n_bin=30):
    cell = np.zeros((n_epoch, n_slot), np.int32)
    pos = np.full((n_epoch, n_cell), n_slot, np.int32)
    jbase = np.zeros((n_epoch, n_slot), np.int32)
    for e in range(n_epoch):
        vis = np.sort(rng.choice(n_cell, size=n_slot - 3, replace=False))
        cell[e, :vis.size] = vis
        pos[e, vis] = np.arange(vis.size)
        jbase[e, :vis.size] = np.sort(rng.integers(0, n_bin - 4, vis.size))
    return jnp.asarray(cell), jnp.asarray(pos), jnp.asarray(jbase), n_bin


def test_gather_slots_transposes_agree():
    """Both transposes (scatter-add on CPU, gather back through pos on accelerators) equal
    the plain transpose when padded slots carry a zero cotangent (every model's contract)."""
    rng = np.random.default_rng(0)
    cell, pos, _, _ = _layout(rng)
    f = jnp.asarray(rng.normal(size=(40, 3)))
    mask = jnp.asarray((np.arange(cell.shape[1]) < cell.shape[1] - 3)[None, :, None] * 1.0)
    wts = jnp.asarray(rng.normal(size=cell.shape + (3,))) * mask
    out = _linops.gather_slots(f, cell, pos, f.dtype)
    np.testing.assert_allclose(out, np.asarray(f)[np.asarray(cell)])
    g1 = jax.grad(lambda f: jnp.sum(wts * _linops.gather_slots(f, cell, pos, f.dtype)))(f)
    g2 = jax.grad(lambda f: jnp.sum(wts * f[cell]))(f)
    np.testing.assert_allclose(g1, g2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_linops._take_back(wts, pos), g2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_linops._slots_add_back(wts, cell, 40), g2, rtol=1e-12, atol=1e-12)


def test_deposit_matches_loop_and_transpose():
    rng = np.random.default_rng(1)
    cell, pos, jbase, n_bin = _layout(rng)
    a = jnp.asarray(rng.normal(size=cell.shape + (3,)))
    t = rng.random(cell.shape)
    beta = _linops.lagrange_weights(jnp.asarray(t))
    np.testing.assert_allclose(np.asarray(beta).sum(-1), 1.0, rtol=1e-13)
    h = _linops.deposit(a, beta, jbase, n_bin)
    ref = np.zeros((cell.shape[0], n_bin, 3))
    an, bn, jn = np.asarray(a), np.asarray(beta), np.asarray(jbase)
    for e in range(cell.shape[0]):
        for s in range(cell.shape[1]):
            for m in range(4):
                ref[e, jn[e, s] + m] += an[e, s] * bn[e, s, m]
    np.testing.assert_allclose(h, ref, rtol=1e-12, atol=1e-13)
    w = jnp.asarray(rng.normal(size=ref.shape))
    g = jax.grad(lambda a: jnp.sum(w * _linops.deposit(a, beta, jbase, n_bin)))(a)
    gref = np.einsum("esmk,esm->esk", np.asarray(w)[np.arange(cell.shape[0])[:, None, None],
                                                       jn[:, :, None] + np.arange(4)], bn)
    np.testing.assert_allclose(g, gref, rtol=1e-12, atol=1e-13)


def test_gather_slots_casts_and_transposes_in_float64():
    """gather_slots: f[cell] in the storage dtype; the transpose sums in f's dtype."""
    rng = np.random.default_rng(2)
    cell, pos, _, _ = _layout(rng)
    f = jnp.asarray(rng.normal(size=(40, 2)))
    out = _linops.gather_slots(f, cell, pos, jnp.float32)
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, np.asarray(f, np.float32)[np.asarray(cell)])
    # cotangent zero on padded slots (the folded cube's contract); float32 weights
    mask = (np.arange(cell.shape[1]) < cell.shape[1] - 3)[None, :, None]
    wts = (rng.normal(size=cell.shape + (2,)) * mask).astype(np.float32)
    g = jax.grad(lambda f: jnp.sum(jnp.asarray(wts) * _linops.gather_slots(f, cell, pos, jnp.float32)).astype(f.dtype))(f)
    assert g.dtype == jnp.float64
    ref = np.zeros((40, 2))
    np.add.at(ref, np.asarray(cell).reshape(-1), wts.astype(np.float64).reshape(-1, 2))
    np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-12)
    # the accelerator transpose (gather back through pos) gives the same
    np.testing.assert_allclose(_linops._take_back(jnp.asarray(wts, jnp.float64), pos), ref, rtol=1e-12, atol=1e-12)
