import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support.problems import components as _comps
from support.problems import gray_kernel

import dopplermap as dm
from dopplermap import plan


@pytest.mark.parametrize("method", ["binned", "dense"])
def test_unspotted_star_is_gray_rotational_profile(method):
    vsini, eps, depth, fwhm = 30.0, 0.6, 0.5, 3.0
    star = dm.StarParams(inclination=70.0, vsini=vsini, period=1.0)
    grid = dm.latitude_band_grid(40000)
    vels = np.linspace(-45, 45, 61)
    local = dm.gaussian(depth, fwhm)
    pre = dm.precompute(grid, star, [0.0, 0.37], vels, _comps(local, eps), method=method)
    z = jnp.full(grid.n_cell, 1e-12)
    raw = np.asarray(dm.model.synthesize(z, z, pre.line))
    u = np.linspace(-vsini, vsini, 40001)
    k = gray_kernel(u, vsini, eps)
    ref = np.array([1 - np.trapezoid(k * (1 - local(v - u)), u) for v in vels])
    assert np.max(np.abs(raw - ref[None, :])) < 1e-3


def test_vsini_to_zero_returns_local_profile():
    with pytest.warns(dm.DopplermapWarning, match="radius .* R_sun"):  # a star of 16 m: the limit, on purpose
        star = dm.StarParams(inclination=60.0, vsini=1e-6, period=1.0)
    grid = dm.latitude_band_grid(500)
    vels = np.linspace(-20, 20, 41)
    local = dm.gaussian(0.45, 7.0)
    pre = dm.precompute(grid, star, [0.0, 0.5], vels, _comps(local), method="dense")
    z = jnp.full(grid.n_cell, 1e-5)
    np.testing.assert_allclose(np.asarray(dm.model.synthesize(z, z, pre.line)), np.broadcast_to(local(vels), (2, 41)),
                               atol=1e-10)


def _random_state(n_cell, n_epoch, seed=0):
    rng = np.random.default_rng(seed)
    fc = rng.uniform(0.0, 0.6, n_cell)
    fh = rng.uniform(0.0, 0.3, n_cell)
    return jnp.asarray(fc), jnp.asarray(fh), jnp.asarray(rng.normal(0, 0.5, n_epoch)), jnp.asarray(rng.normal(0, 0.01, n_epoch))


@pytest.mark.slow
def test_binned_matches_dense_and_jit(small_problem):
    star, grid, times, vels, comps, _ = small_problem
    pb = dm.precompute(grid, star, times, vels, comps, method="binned")
    pd = dm.precompute(grid, star, times, vels, comps, method="dense")
    state = _random_state(grid.n_cell, len(times))
    mb = dm.forward(*state, pb)
    md = dm.forward(*state, pd)
    assert float(jnp.max(jnp.abs(mb - md))) < 1e-5
    mj = jax.jit(dm.forward)(*state, pb)
    np.testing.assert_allclose(np.asarray(mj), np.asarray(mb), rtol=0, atol=1e-13)
    # vmap over two maps equals two plain calls
    fc2 = jnp.stack([state[0], state[0][::-1]])
    mv = jax.vmap(lambda fc: dm.forward(fc, state[1], state[2], state[3], pb))(fc2)
    np.testing.assert_allclose(np.asarray(mv[1]), np.asarray(dm.forward(state[0][::-1], *state[1:], pb)), atol=1e-13)


@pytest.mark.parametrize("method", ["binned", "dense"])
def test_gradient_matches_finite_differences(small_problem, method):
    star, grid, times, vels, comps, sim = small_problem
    pre = dm.precompute(grid, star, times, vels, comps, method=method)
    lay = dm.Layout(grid.n_cell, len(times))
    x = lay.join(*[np.asarray(a) for a in _random_state(grid.n_cell, len(times), 5)])
    x[: 2 * grid.n_cell] = np.clip(x[: 2 * grid.n_cell], 1e-3, None)
    f = jax.jit(lambda x: dm.objective.loss(x, 0.7, pre, sim.obs))
    g = np.asarray(jax.grad(lambda x: dm.objective.loss(x, 0.7, pre, sim.obs))(jnp.asarray(x)))
    rng = np.random.default_rng(1)
    idx = np.concatenate([rng.choice(2 * grid.n_cell, 8, replace=False), 2 * grid.n_cell + rng.choice(2 * len(times), 4)])
    for i in idx:
        h = 1e-6
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        fd = (float(f(jnp.asarray(xp))) - float(f(jnp.asarray(xm)))) / (2 * h)
        assert np.isclose(g[i], fd, rtol=1e-5, atol=1e-9), (i, g[i], fd)


def test_spot_bump_crosses_profile_blue_to_red():
    star = dm.StarParams(inclination=60.0, vsini=40.0, period=1.0)
    grid = dm.latitude_band_grid(3000)
    phases = np.array([-0.15, -0.05, 0.05, 0.15])
    vels = np.linspace(-55, 55, 111)
    comps = _comps(dm.gaussian(0.5, 6.0))
    pre = dm.precompute(grid, star, phases, vels, comps)
    fc, fh = dm.spot_map(grid, [dm.Spot(20.0, 0.0, 15.0, "cool", 1.0)])
    z = jnp.full(grid.n_cell, 1e-5)
    diff = np.asarray(dm.model.synthesize(jnp.asarray(fc), jnp.asarray(fh), pre.line) - dm.model.synthesize(z, z, pre.line))
    # a dark spot removes absorption: the profile rises (bump) where the spot is
    bump_v = vels[np.argmax(diff, axis=1)]
    assert np.all(np.diff(bump_v) > 0) and bump_v[0] < 0 < bump_v[-1]


def test_precompute_bad_input(small_problem):
    star, grid, times, vels, comps, _ = small_problem
    with pytest.raises(ValueError, match="vels must be strictly increasing"):
        dm.precompute(grid, star, times, vels[::-1], comps)
    with pytest.raises(ValueError, match="times contains NaN"):
        dm.precompute(grid, star, np.array([0.0, np.nan]), vels, comps)
    with pytest.raises(ValueError, match="method"):
        dm.precompute(grid, star, times, vels, comps, method="fft")


@pytest.mark.parametrize("method", ["binned", "dense", "folded"])
@pytest.mark.slow
def test_epoch_chunks_equal_one_pass(small_problem, method, monkeypatch):
    import dopplermap.forms.binned as binned_form

    star, grid, times, vels, comps, _ = small_problem
    if method == "folded":
        pre = dm.solve_form(dm.precompute(grid, star, times, vels, comps, method="dense"), "float64")
    else:
        pre = dm.precompute(grid, star, times, vels, comps, method=method)
    state = _random_state(grid.n_cell, len(times), 7)
    whole = np.asarray(dm.forward(*state, pre))
    x = jnp.concatenate(state)
    lay = dm.Layout(grid.n_cell, len(times))
    g_whole = np.asarray(jax.grad(lambda x: jnp.sum(dm.forward(*lay.split(x), pre) ** 2))(x))

    def hvp(x, v):
        grad = jax.grad(lambda x: jnp.sum(dm.forward(*lay.split(x), pre) ** 2))
        return jax.grad(lambda x: jnp.vdot(grad(x), v))(x)

    # at most 7 epochs per chunk: 24 epochs -> 4 equal chunks of 6 (binned only: the dense and
    # folded products stream their cube whole); at most 5: 5 chunks of 5, the last overlapping
    monkeypatch.setattr(binned_form, "SLOTS_PER_CHUNK", 7 * pre.line.cell.shape[1])
    assert pre.line.epoch_chunk() == (6 if method == "binned" else 24)
    monkeypatch.setattr(binned_form, "SLOTS_PER_CHUNK", 5 * pre.line.cell.shape[1] + 3)
    assert pre.line.epoch_chunk() == (5 if method == "binned" else 24)
    # the chunked path itself serves every model form
    monkeypatch.setattr(type(pre.line), "epoch_chunk", lambda self: 5)
    chunked = np.asarray(dm.forward(*state, pre))
    g_chunked = np.asarray(jax.grad(lambda x: jnp.sum(dm.forward(*lay.split(x), pre) ** 2))(x))
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=1e-13)
    np.testing.assert_allclose(g_chunked, g_whole, rtol=1e-10, atol=1e-12)
    # reverse over reverse (the uncertainty module's Hessian-vector products) through the chunks
    v = jnp.asarray(np.random.default_rng(8).normal(size=x.shape))
    hvp_chunked = np.asarray(hvp(x, v))
    monkeypatch.undo()
    monkeypatch.setattr(binned_form, "SLOTS_PER_CHUNK", 10 ** 9)
    np.testing.assert_allclose(hvp_chunked, np.asarray(hvp(x, v)), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("dtype,atol", [("float64", 1e-13), ("float32", 1e-6)])
def test_folded_dense_equals_dense(small_problem, dtype, atol):
    """The folded cube (photosphere as constant + differences) is the same model."""
    from dopplermap.model import fold_dense, solve_form

    star, grid, times, vels, comps, _ = small_problem
    pd = dm.precompute(grid, star, times, vels, comps, method="dense")
    pf = solve_form(pd, dtype)
    assert pf.line.kind == "folded" and pf.line.local.shape[3] == 2 and pf.line.local.shape[1] == pd.line.n_vel + 1
    assert pf.line.local.dtype == jnp.dtype(dtype)
    state = _random_state(grid.n_cell, len(times), 3)
    ref = np.asarray(dm.forward(*state, pd))
    got = np.asarray(dm.forward(*state, pf))
    dev = np.max(np.abs(got - ref))
    assert dev <= atol
    if dtype == "float32":
        assert dev > 1e-12  # really evaluated in float32
    lay = dm.Layout(grid.n_cell, len(times))
    x = jnp.concatenate(state)
    gd = np.asarray(jax.grad(lambda x: jnp.sum(dm.forward(*lay.split(x), pd) ** 2))(x))
    gf = np.asarray(jax.grad(lambda x: jnp.sum(dm.forward(*lay.split(x), pf) ** 2))(x))
    np.testing.assert_allclose(gf, gd, rtol=0, atol=1e-10 if dtype == "float64" else 2e-5 * np.max(np.abs(gd)))
    with pytest.raises(ValueError, match="dense line model"):
        fold_dense(dm.precompute(grid, star, times, vels, comps, method="binned").line)
    with pytest.raises(ValueError, match="float32 or float64"):
        fold_dense(pd.line, "int32")


@pytest.mark.parametrize("n_block", [1, 3, 5, 24])
@pytest.mark.slow
def test_blocked_equals_folded(small_problem, n_block):
    """The blocked form (epoch blocks as plain matrices over their cells' union) is the same
    model: value and gradient, for one map and for a vmapped batch of maps (its batched
    product has its own rule)."""
    from dopplermap.model import block_dense, solve_form

    star, grid, times, vels, comps, _ = small_problem
    pd = dm.precompute(grid, star, times, vels, comps, method="dense")
    pf = solve_form(pd, "float64")
    pb = dataclasses.replace(pd, line=block_dense(pd.line, n_block, dtype="float64"))
    assert pb.line.kind == "blocked" and pb.line.local.shape[0] == min(n_block, len(times))
    lay = dm.Layout(grid.n_cell, len(times))
    states = [jnp.concatenate(_random_state(grid.n_cell, len(times), s)) for s in (11, 12, 13)]

    def val(x, pre):
        return jnp.sum(dm.forward(*lay.split(x), pre) ** 3)

    for x in states:
        np.testing.assert_allclose(np.asarray(dm.forward(*lay.split(x), pb)), np.asarray(dm.forward(*lay.split(x), pf)),
                                   rtol=0, atol=1e-13)
    xs = jnp.stack(states)
    gb = np.asarray(jax.vmap(jax.grad(val), in_axes=(0, None))(xs, pb))
    gf = np.stack([np.asarray(jax.grad(val)(x, pf)) for x in states])
    np.testing.assert_allclose(gb, gf, rtol=0, atol=1e-10 * np.max(np.abs(gf)))
    np.testing.assert_allclose(np.asarray(jax.grad(val)(states[0], pb)), gf[0], rtol=0, atol=1e-10 * np.max(np.abs(gf)))


def test_phase_order_makes_small_blocks():
    """Epochs grouped along the phase order see far fewer cells per block than in time order
    (the demo's epochs are spread over many rotations) or a random order."""
    from dopplermap.model import phase_order

    star, grid, times, vels, comps = dm.demo_setup(n_cell=800, n_epoch=60, n_vel=16)
    pre = dm.precompute(grid, star, times, vels, comps, method="dense")
    pos = np.asarray(pre.line.pos)
    n_slot = pre.line.cell.shape[1]
    seen = pos < n_slot

    def biggest_union(order, n_block=6):
        return max(int(seen[g].any(axis=0).sum()) for g in np.array_split(order, n_block))

    order = phase_order(pos, n_slot)
    assert sorted(order.tolist()) == list(range(len(times)))
    # phase order by the star's own rotation: what the visibility patterns should recover
    by_phase = np.argsort((np.asarray(times) / star.period) % 1.0)
    best = biggest_union(by_phase)
    assert biggest_union(order) <= 1.1 * best
    assert best < 0.8 * biggest_union(np.arange(len(times)))
    assert best < 0.8 * biggest_union(np.random.default_rng(0).permutation(len(times)))


def test_folded_exact_numerator_restores_float64(small_problem):
    from dopplermap.model import solve_form, with_exact_numerator

    star, grid, times, vels, comps, _ = small_problem
    pd = dm.precompute(grid, star, times, vels, comps, method="dense")
    pf = solve_form(pd)
    state = _random_state(grid.n_cell, len(times), 5)
    exact = with_exact_numerator(pf, pd, np.asarray(state[0]), np.asarray(state[1]))
    ref = np.asarray(dm.forward(*state, pd))
    np.testing.assert_allclose(np.asarray(dm.forward(*state, exact)), ref, rtol=0, atol=1e-14)
    assert np.max(np.abs(np.asarray(dm.forward(*state, pf)) - ref)) > 1e-12


@pytest.mark.parametrize("uniform", [True, False])
def test_shift_profiles_is_jnp_interp(uniform):
    from dopplermap.model import shift_profiles

    rng = np.random.default_rng(4)
    vels = np.linspace(-40, 40, 25) if uniform else np.sort(rng.uniform(-40, 40, 25))
    vels = jnp.asarray(vels)
    prf = jnp.asarray(rng.uniform(0.4, 1.0, (40, 25)))
    # inside, on nodes, beyond either end, zero
    rv = jnp.asarray(np.concatenate([rng.uniform(-10, 10, 30), [0.0, float(vels[1] - vels[0]), 60.0, -95.0,
                                                                 1e-15, -3.3, 2.2, 39.9, -39.9, 80.0]]))

    def ref(rv, prf):
        return jax.vmap(lambda r, p: jnp.interp(vels, vels + r, p))(rv, prf)

    np.testing.assert_allclose(np.asarray(shift_profiles(vels, rv, prf)), np.asarray(ref(rv, prf)), rtol=0, atol=1e-15)
    w = jnp.asarray(rng.normal(size=(40, 25)))
    g_ref = jax.grad(lambda rv, p: jnp.sum(w * ref(rv, p)), argnums=(0, 1))(rv, prf)
    g_got = jax.grad(lambda rv, p: jnp.sum(w * shift_profiles(vels, rv, p)), argnums=(0, 1))(rv, prf)
    for a, b in zip(g_got, g_ref, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-14)


def test_auto_method_picks_dense_while_it_fits(small_problem, monkeypatch):

    star, grid, times, vels, comps, _ = small_problem
    assert dm.precompute(grid, star, times, vels, comps).line.kind == "dense"
    monkeypatch.setattr(plan, "DENSE_AUTO_BYTES", 1000)
    assert dm.precompute(grid, star, times, vels, comps).line.kind == "binned"
