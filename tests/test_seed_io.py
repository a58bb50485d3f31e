"""The seed's pickles: reader, loss equality with the seed's own code, writer, NPZ, CLI, errors."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.cli import main
from dopplermap.io.seed import (
    UntrustedPickleError,
    load_problem,
    read_seed,
    save_problem,
    seed_dicts,
    seed_problem,
    write_seed_pickles,
)
from dopplermap.objective import Layout, loss

N_CELL, N_EPOCH, N_VEL = 300, 20, 32


# ------------------------------------------------------------------ the seed's loss, in plain NumPy

def seed_loss_numpy(x0s, lmbd, idc, sg, cpcs):
    """Line-by-line NumPy transcription of the user's ``model`` and ``loss``."""
    noes = sg["noes"]
    noo = len(idc["times"])
    fssc = x0s[:noes]
    fssh = x0s[noes:2 * noes]
    fssp = 1.0 - (fssc + fssh)
    rv = x0s[2 * noes:2 * noes + noo]
    amp = x0s[2 * noes + noo:2 * noes + 2 * noo]

    def model(time, rv_i, amp_i):
        c, ln = cpcs["common"][time], cpcs["line"][time]
        ivis = np.asarray(c["ivis"])
        areas, mus = np.asarray(c["areas"]), np.asarray(c["mus"])
        vels = np.asarray(idc["vels"]).copy()
        wgt, wgtn, prf = {}, 0.0, 0.0
        for k, f in (("phot", fssp), ("cool", fssc), ("hot", fssh)):
            coeffs = np.asarray(ln[f"lis_{k}"]) * np.asarray(ln[f"ldfs_{k}"]) * areas * mus
            wgt[k] = coeffs * f[ivis]
            wgtn = wgtn + np.sum(wgt[k])
        prf = np.sum(wgt["phot"][:, None] * np.asarray(ln["lps_phot"]) + wgt["cool"][:, None] * np.asarray(ln["lps_cool"])
                     + wgt["hot"][:, None] * np.asarray(ln["lps_hot"]), axis=0)
        prf = prf / wgtn
        prf = np.interp(vels, vels + rv_i, prf)
        prf = prf + amp_i
        return prf / np.mean(prf)

    chisq = 0.0
    for i, itime in enumerate(idc["times"]):
        oprf = np.asarray(idc["data"][itime]["prf"])
        errs = np.asarray(idc["data"][itime]["errs"])
        sprf = model(itime, rv[i], amp[i])
        chisq += np.sum(((oprf - sprf) / errs) ** 2) / (noo * len(oprf))
    areas = np.asarray(sg["grid_areas"])
    wp = areas / np.max(areas)
    mem = np.sum(wp * (fssc * np.log(fssc / 1e-5) + fssh * np.log(fssh / 1e-5)
                       + (1.0 - fssp) * np.log((1.0 - fssp) / (1.0 - 1e-5)))) / sg["noes"]
    return chisq + lmbd * mem


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def sim():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=N_CELL, n_epoch=N_EPOCH, n_vel=N_VEL, seed=3)
    return dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=400, seed=3,
                       rv=np.linspace(-0.5, 0.5, N_EPOCH), amp=0.002)


@pytest.fixture(scope="module")
def dicts(sim):
    return seed_dicts(sim)


def ragged(dicts, seed=0):
    """Copy of the dicts with visible lists thinned and shuffled (very different lengths per epoch)."""
    idc, sg, cpcs = copy.deepcopy(dicts)
    rng = np.random.default_rng(seed)
    for t in idc["times"]:
        c, ln = cpcs["common"][t], cpcs["line"][t]
        n = len(c["ivis"])
        keep = rng.permutation(n)[: rng.integers(n // 3, n + 1)]
        for d in (c, ln):
            for k, v in d.items():
                if np.ndim(v) >= 1:
                    d[k] = np.asarray(v)[keep]
    return idc, sg, cpcs


def random_feasible(n_cell, n_epoch, rng):
    fssc = rng.uniform(1e-5, 0.5, n_cell)
    fssh = rng.uniform(1e-5, 0.5, n_cell)
    return Layout(n_cell, n_epoch).join(fssc, fssh, rng.normal(0, 2.0, n_epoch), rng.normal(0, 0.01, n_epoch))


def rekey(dicts, keys):
    idc, sg, cpcs = copy.deepcopy(dicts)
    old = list(idc["times"])
    idc["times"] = list(keys)
    idc["data"] = {k: idc["data"][o] for k, o in zip(keys, old, strict=True)}
    for part in ("common", "line"):
        cpcs[part] = {k: cpcs[part][o] for k, o in zip(keys, old, strict=True)}
    return idc, sg, cpcs


def to_jax(dicts):
    return jax.tree_util.tree_map(lambda v: jnp.asarray(v) if isinstance(v, np.ndarray) else v, dicts)


# ------------------------------------------------------------------ loss equality

@pytest.mark.parametrize("variant", ["plain", "ragged", "per_cell_lis", "jax_arrays", "string_keys", "tuple_keys",
                                     "float_keys_reordered"])
def test_loss_equals_seed_numpy(sim, dicts, variant):
    if variant == "per_cell_lis":
        d = seed_dicts(sim, per_cell_lis=True)
        assert np.ndim(d[2]["line"][d[0]["times"][0]]["lis_cool"]) == 1
    elif variant == "ragged":
        d = ragged(dicts)
    elif variant == "jax_arrays":
        d = to_jax(ragged(dicts))
    elif variant == "string_keys":
        d = rekey(dicts, [f"night-{i}" for i in range(N_EPOCH)])
    elif variant == "tuple_keys":
        d = rekey(dicts, [("run", 0.25 + 1.5 * i) for i in range(N_EPOCH)])
    elif variant == "float_keys_reordered":  # keys in non-chronological order, non-integer floats
        d = rekey(dicts, [2459000.0 + 0.37 * ((7 * i) % N_EPOCH) for i in range(N_EPOCH)])
    else:
        d = dicts
    prob = seed_problem(*d)
    rng = np.random.default_rng(42)
    for lmbd in (1.0, 0.1):
        for _ in range(3):
            x = random_feasible(N_CELL, N_EPOCH, rng)
            ref = seed_loss_numpy(np.asarray(x), lmbd, *d)
            got = float(loss(jnp.asarray(x), lmbd, prob.pre, prob.obs, regulariser="mem"))
            assert abs(got - ref) <= 1e-10 * abs(ref), (variant, got, ref)


def test_initial_point_and_seed_mem(dicts):
    """At the seed's starting vector (all 1e-5, rv = amp = 0) the losses agree too."""
    prob = seed_problem(*dicts)
    x = Layout(N_CELL, N_EPOCH).initial()
    ref = seed_loss_numpy(x, 1.0, *dicts)
    got = float(loss(jnp.asarray(x), 1.0, prob.pre, prob.obs))
    assert abs(got - ref) <= 1e-10 * abs(ref)


def test_dense_model_equals_precompute(sim, dicts):
    """The pickles written from a simulation describe the same model as dopplermap's dense precompute."""
    prob = seed_problem(*dicts)
    pre = dm.precompute(sim.grid, sim.star, np.asarray(sim.obs.times), np.asarray(sim.obs.vels), sim.components,
                        method="dense")
    rng = np.random.default_rng(1)
    fc, fh = rng.uniform(0, 0.5, N_CELL), rng.uniform(0, 0.5, N_CELL)
    rv, amp = rng.normal(0, 1, N_EPOCH), rng.normal(0, 0.01, N_EPOCH)
    a = np.asarray(dm.forward(fc, fh, rv, amp, prob.pre))
    b = np.asarray(dm.forward(fc, fh, rv, amp, pre))
    assert np.max(np.abs(a - b)) < 1e-12
    assert np.array_equal(np.asarray(prob.pre.line.cell), np.asarray(pre.line.cell))
    # truth + no noise reproduces the noiseless simulation exactly
    clean = np.asarray(dm.forward(sim.fssc, sim.fssh, sim.rv, sim.amp, prob.pre))
    assert np.max(np.abs(clean - sim.noiseless)) < 1e-12


def test_dense_cube_holds_the_pickle_values_and_is_adopted_without_a_copy(dicts):
    """The cube is each epoch's ``lps_*`` in its visible slots and zero after them; on the CPU
    the device array is the reader's own (aligned) buffer, not a second copy of it."""
    from dopplermap import _device

    prob = seed_problem(*dicts)
    local = np.asarray(prob.pre.line.local)
    idc, _, cpcs = dicts
    for e, t in enumerate(idc["times"]):
        n = len(np.asarray(cpcs["common"][t]["ivis"]))
        for k, name in enumerate(("phot", "cool", "hot")):
            assert np.array_equal(local[e, :n, k], np.asarray(cpcs["line"][t][f"lps_{name}"]))
        assert not local[e, n:].any()
    buf = _device.host_array((3, 5, 7))
    assert buf.ctypes.data % 64 == 0 and buf.shape == (3, 5, 7) and buf.dtype == np.float64
    if jax.default_backend() == "cpu":
        assert prob.pre.line.local.unsafe_buffer_pointer() % 64 == 0
        buf[:] = 1.0
        assert _device.asarray(buf).unsafe_buffer_pointer() == buf.ctypes.data


def test_padding_layout_and_gradient(dicts):
    """Ragged epochs: pos inverts cell, padding has zero weight, and the gradient matches finite differences."""
    d = ragged(dicts)
    prob = seed_problem(*d)
    lm = prob.pre.line
    cell, pos, w = np.asarray(lm.cell), np.asarray(lm.pos), np.asarray(lm.weight)
    n_slot = cell.shape[1]
    lengths = [len(d[2]["common"][t]["ivis"]) for t in d[0]["times"]]
    assert list(prob.n_visible) == lengths and n_slot == max(lengths) and min(lengths) < n_slot
    for e, t in enumerate(d[0]["times"]):
        ivis = np.asarray(d[2]["common"][t]["ivis"])
        assert np.array_equal(cell[e, :ivis.size], ivis)
        assert np.all(w[e, ivis.size:] == 0)
        assert np.array_equal(pos[e, ivis], np.arange(ivis.size))
        assert np.sum(pos[e] < n_slot) == ivis.size
    rng = np.random.default_rng(5)
    x = jnp.asarray(random_feasible(N_CELL, N_EPOCH, rng))
    vg = jax.jit(jax.value_and_grad(loss))
    _, g = vg(x, 0.3, prob.pre, prob.obs)
    direction = jnp.asarray(rng.normal(size=x.shape)) * 1e-2
    h = 1e-4
    fd = (vg(x + h * direction, 0.3, prob.pre, prob.obs)[0] - vg(x - h * direction, 0.3, prob.pre, prob.obs)[0]) / (2 * h)
    assert abs(float(jnp.dot(g, direction)) - float(fd)) <= 1e-6 * abs(float(fd)) + 1e-12


# ------------------------------------------------------------------ files

def test_pickle_roundtrip_needs_trust(tmp_path, sim, dicts):
    paths = write_seed_pickles(sim, tmp_path, as_jax=True)
    with pytest.raises(UntrustedPickleError) as exc:
        read_seed(paths["idc"], paths["sg"], paths["cpcs"])
    msg = str(exc.value)
    assert "trust_pickle=True" in msg and "--trust-pickle" in msg and "idc.pkl" in msg and "\n" not in msg
    prob = read_seed(paths["idc"], paths["sg"], paths["cpcs"], trust_pickle=True)
    ref = seed_problem(*dicts)
    for a, b in zip(jax.tree_util.tree_leaves(prob.pre), jax.tree_util.tree_leaves(ref.pre), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(prob.obs.flux), np.asarray(ref.obs.flux))
    assert prob.labels == ref.labels and prob.has_coordinates
    with open(paths["idc"], "rb") as fh:  # the seed's own script can read what we wrote
        idc = pickle.load(fh)
    assert isinstance(idc["vels"], jax.Array) and len(idc["times"]) == N_EPOCH


def test_npz_roundtrip(tmp_path, dicts):
    prob = seed_problem(*rekey(dicts, [f"ep{i}" for i in range(N_EPOCH)]))
    path = save_problem(tmp_path / "p.npz", prob)
    assert not list(tmp_path.glob(".*tmp"))  # no temp file left behind
    with np.load(path, allow_pickle=False) as z:  # readable without pickle
        assert z["line_local"].dtype == np.float64
    back = load_problem(path)
    for a, b in zip(jax.tree_util.tree_leaves((prob.pre, prob.obs)), jax.tree_util.tree_leaves((back.pre, back.obs)), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert back.labels == prob.labels and back.pre.line.kind == "dense"
    np.testing.assert_array_equal(back.n_visible, prob.n_visible)
    np.testing.assert_array_equal(back.lat, prob.lat)


def test_npz_rejects_broken_index(tmp_path, dicts):
    prob = seed_problem(*dicts)
    path = save_problem(tmp_path / "p.npz", prob)
    with np.load(path) as z:
        arrays = dict(z)
    arrays["line_pos"] = arrays["line_pos"].copy()
    arrays["line_pos"][0, :] = 0
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ValueError, match="inverse"):
        load_problem(tmp_path / "bad.npz")
    # a weight on a padded slot (no cell maps there) would add a phantom cell to the model
    with np.load(path) as z:
        arrays = dict(z)
    e = int(np.argmin(prob.n_visible))
    assert prob.n_visible[e] < arrays["line_cell"].shape[1]
    arrays["line_weight"] = arrays["line_weight"].copy()
    arrays["line_weight"][e, -1, 1] = 0.5
    np.savez(tmp_path / "bad2.npz", **arrays)
    with pytest.raises(ValueError, match=rf"bad2.npz.*'line_weight' must be 0 on padded slots; epoch {e}"):
        load_problem(tmp_path / "bad2.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="junk.npz"):
        load_problem(tmp_path / "junk.npz")


# ------------------------------------------------------------------ bad input: one clear line

def _first(dicts):
    return dicts[0]["times"][0]


def _break(dicts, what):
    idc, sg, cpcs = copy.deepcopy(dicts)
    t = _first(dicts)
    if what == "missing_errs":
        del idc["data"][t]["errs"]
    elif what == "missing_noes":
        del sg["noes"]
    elif what == "missing_epoch":
        del cpcs["line"][t]
    elif what == "lps_shape":
        cpcs["line"][t]["lps_cool"] = np.asarray(cpcs["line"][t]["lps_cool"])[:, :-1]
    elif what == "areas_shape":
        sg["grid_areas"] = np.asarray(sg["grid_areas"])[:-3]
    elif what == "nan_profile":
        idc["data"][t]["prf"] = np.asarray(idc["data"][t]["prf"]).copy()
        idc["data"][t]["prf"][5] = np.nan
    elif what == "nan_lps":
        cpcs["line"][t]["lps_hot"] = np.asarray(cpcs["line"][t]["lps_hot"]).copy()
        cpcs["line"][t]["lps_hot"][3, 4] = np.nan
    elif what == "ivis_range":
        cpcs["common"][t]["ivis"] = np.asarray(cpcs["common"][t]["ivis"]).copy()
        cpcs["common"][t]["ivis"][2] = N_CELL + 7
    elif what == "ivis_negative":
        cpcs["common"][t]["ivis"] = np.asarray(cpcs["common"][t]["ivis"]).copy()
        cpcs["common"][t]["ivis"][0] = -1
    elif what == "ivis_float":
        cpcs["common"][t]["ivis"] = np.asarray(cpcs["common"][t]["ivis"], dtype=float)
    elif what == "zero_err":
        idc["data"][t]["errs"] = np.zeros(N_VEL)
    return idc, sg, cpcs


@pytest.mark.parametrize("what, expect", [
    ("missing_errs", "missing key idc['data'][{t}]['errs']"),
    ("missing_noes", "missing key sg['noes']"),
    ("missing_epoch", "missing key cpcs['line'][{t}]"),
    ("lps_shape", "cpcs['line'][{t}]['lps_cool'] has shape"),
    ("areas_shape", "sg['grid_areas'] has shape (297,), expected (300,)"),
    ("nan_profile", "idc['data'][{t}]['prf'] has 1 NaN/inf value(s), first at index (5,)"),
    ("nan_lps", "['lps_hot'] has 1 NaN/inf value(s), first at index (3, 4)"),
    ("ivis_range", f"['ivis'][2] = {N_CELL + 7} is out of range [0, {N_CELL})"),
    ("ivis_negative", "['ivis'][0] = -1 is out of range"),
    ("ivis_float", "must hold integer cell indices"),
    ("zero_err", "['errs'] must be > 0"),
])
def test_bad_input_messages(dicts, what, expect):
    d = _break(dicts, what)
    with pytest.raises(ValueError) as exc:
        seed_problem(*d, sources=("my_idc.pkl", "my_sg.pkl", "my_cpcs.pkl"))
    msg = str(exc.value)
    assert expect.format(t=repr(_first(dicts))) in msg, msg
    assert msg.startswith("my_") and "\n" not in msg


def test_cli_errors_are_one_line(tmp_path, sim, capsys):
    paths = write_seed_pickles(sim, tmp_path / "in")
    args = ["invert-seed", "--idc", str(paths["idc"]), "--sg", str(paths["sg"]), "--cpcs", str(paths["cpcs"]),
            "--out", str(tmp_path / "out")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: refusing to unpickle") and "--trust-pickle" in err and "\n" not in err
    # a broken pickle: ivis out of range, reported with the file name
    with open(paths["cpcs"], "rb") as fh:
        cpcs = pickle.load(fh)
    t0 = next(iter(cpcs["common"]))
    cpcs["common"][t0]["ivis"] = np.asarray(cpcs["common"][t0]["ivis"]) + N_CELL
    with open(paths["cpcs"], "wb") as fh:
        pickle.dump(cpcs, fh)
    assert main(args + ["--trust-pickle"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "cpcs.pkl" in err and "out of range" in err and "\n" not in err
    assert not (tmp_path / "out").exists()
    assert main(["invert-seed", "--idc", str(paths["idc"]), "--out", str(tmp_path / "o2")]) == 2
    assert "missing --sg, --cpcs" in capsys.readouterr().err


# ------------------------------------------------------------------ the reading child of invert-seed

needs_memfd = pytest.mark.skipif(not hasattr(__import__("os"), "memfd_create"), reason="no os.memfd_create here")


def _dump(tmp_path, dicts, name="in"):
    d = tmp_path / name
    d.mkdir()
    paths = []
    for part, obj in zip(("idc", "sg", "cpcs"), dicts, strict=True):
        with open(d / f"{part}.pkl", "wb") as fh:
            pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
        paths.append(d / f"{part}.pkl")
    return paths


def _child_problem(paths):
    from dopplermap.app import seed_read
    from dopplermap.app.seed import read_problem

    with seed_read.start(*paths, trust_pickle=True) as reading:
        assert reading is not None
        return read_problem(*paths, None, True, reading=reading)


def _assert_same_problem(a, b):
    for x, y in zip(jax.tree_util.tree_leaves((a.pre, a.obs)), jax.tree_util.tree_leaves((b.pre, b.obs)), strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert a.labels == b.labels and a.source == b.source
    np.testing.assert_array_equal(a.n_visible, b.n_visible)
    for u, v in ((a.lat, b.lat), (a.lon, b.lon)):
        assert (u is None) == (v is None)
        if u is not None:
            np.testing.assert_array_equal(u, v)


def seed_layout_by_hand():
    """A tiny problem written the way the seed's script keeps it (module docstring of
    dopplermap.io.seed): float epoch keys, scalar lis_* and errs, epochs of different
    visible counts, cells listed out of order; with the dense arrays it must give."""
    vels = np.array([-10.0, 0.0, 10.0])
    idc = {"times": [0.5, 1.25], "vels": vels,
           "data": {0.5: {"prf": np.array([1.0, 0.9, 1.1]), "errs": 0.01},
                    1.25: {"prf": np.array([0.95, 1.0, 1.05]), "errs": np.array([0.02, 0.03, 0.04])}}}
    sg = {"noes": 4, "grid_areas": np.array([1.0, 2.0, 3.0, 4.0]),
          "grid_lats": np.array([0.1, 0.2, -0.1, -0.2]), "grid_longs": np.array([0.0, 1.0, 2.0, 3.0])}
    lps = {e: {k: np.arange(n * 3, dtype=float).reshape(n, 3) / 10 + 0.1 * j + e
               for j, k in enumerate(("phot", "cool", "hot"))} for e, n in ((0, 3), (1, 2))}
    cpcs = {"common": {0.5: {"ivis": np.array([2, 0, 3]), "areas": np.array([3.0, 1.0, 4.0]),
                             "mus": np.array([0.5, 0.9, 0.2])},
                       1.25: {"ivis": np.array([1, 2]), "areas": np.array([2.0, 3.0]), "mus": np.array([0.7, 0.4])}},
            "line": {t: {**{f"lis_{k}": lis for k, lis in zip(("phot", "cool", "hot"), (1.0, 0.3, 2.0), strict=True)},
                         **{f"ldfs_{k}": np.full(len(cpcs_ivis), ld) for k, ld in zip(("phot", "cool", "hot"),
                                                                                      (0.8, 0.7, 0.9), strict=True)},
                         **{f"lps_{k}": lps[e][k] for k in ("phot", "cool", "hot")}}
                     for e, (t, cpcs_ivis) in enumerate(((0.5, [2, 0, 3]), (1.25, [1, 2])))}}
    want = {"cell": np.array([[2, 0, 3], [1, 2, 0]]), "pos": np.array([[1, 3, 0, 2], [3, 0, 1, 3]]),
            "n_visible": np.array([3, 2]), "times": np.array([0.5, 1.25]),
            "err": np.array([[0.01] * 3, [0.02, 0.03, 0.04]])}
    weight = np.zeros((2, 3, 3))
    for e, (areas, mus) in enumerate((([3.0, 1.0, 4.0], [0.5, 0.9, 0.2]), ([2.0, 3.0], [0.7, 0.4]))):
        for k, (lis, ld) in enumerate(((1.0, 0.8), (0.3, 0.7), (2.0, 0.9))):
            weight[e, :len(areas), k] = lis * ld * np.array(areas) * np.array(mus)
    local = np.zeros((2, 3, 3, 3))
    for e, n in ((0, 3), (1, 2)):
        for k, name in enumerate(("phot", "cool", "hot")):
            local[e, :n, k] = lps[e][name]
    want.update(weight=weight, local=local)
    return (idc, sg, cpcs), want


@needs_memfd
def test_seed_layout_by_hand_reads_the_same_in_the_child_and_here(tmp_path):
    dicts, want = seed_layout_by_hand()
    paths = _dump(tmp_path, dicts)
    here = read_seed(*paths, trust_pickle=True)
    child = _child_problem(paths)
    _assert_same_problem(child, here)
    lm = child.pre.line
    np.testing.assert_array_equal(np.asarray(lm.cell), want["cell"])
    np.testing.assert_array_equal(np.asarray(lm.pos), want["pos"])
    np.testing.assert_allclose(np.asarray(lm.weight), want["weight"], rtol=1e-15)
    np.testing.assert_array_equal(np.asarray(lm.local), want["local"])
    np.testing.assert_array_equal(child.n_visible, want["n_visible"])
    np.testing.assert_array_equal(np.asarray(child.obs.times), want["times"])
    np.testing.assert_array_equal(np.asarray(child.obs.err), want["err"])
    np.testing.assert_array_equal(np.asarray(child.pre.cell_area), [1.0, 2.0, 3.0, 4.0])
    assert child.labels == ("0.5", "1.25") and child.has_coordinates
    assert str(paths[0]) in child.source and str(paths[2]) in child.source


@needs_memfd
@pytest.mark.parametrize("variant", ["plain", "ragged", "per_cell_lis", "jax_arrays", "string_keys"])
def test_the_reading_child_gives_the_arrays_read_here(tmp_path, sim, dicts, variant):
    """invert-seed's reading child: the same problem, bit for bit, as reading the files in this
    process, for the layouts the seed's files come in (JAX arrays in them included)."""
    d = {"plain": lambda: dicts, "ragged": lambda: ragged(dicts),
         "per_cell_lis": lambda: seed_dicts(sim, per_cell_lis=True), "jax_arrays": lambda: to_jax(dicts),
         "string_keys": lambda: rekey(dicts, [f"ep{i}" for i in range(N_EPOCH)])}[variant]()
    paths = _dump(tmp_path, d)
    _assert_same_problem(_child_problem(paths), read_seed(*paths, trust_pickle=True))


@needs_memfd
@pytest.mark.parametrize("what", ["ivis_range", "nan_lps", "not_a_pickle", "missing_file"])
def test_the_reading_child_raises_the_errors_read_here(tmp_path, dicts, what):
    if what in ("not_a_pickle", "missing_file"):
        paths = _dump(tmp_path, dicts)
        if what == "not_a_pickle":
            paths[1].write_text("grid_areas = 1, 2, 3\n")
        else:
            paths[2].unlink()
    else:
        paths = _dump(tmp_path, _break(dicts, what))
    with pytest.raises(ValueError) as here:
        read_seed(*paths, trust_pickle=True)
    with pytest.raises(ValueError) as child:
        _child_problem(paths)
    assert type(child.value) is type(here.value) and str(child.value) == str(here.value)
    assert "\n" not in str(child.value)


@needs_memfd
def test_a_failed_reading_child_leaves_the_reading_here(tmp_path, dicts):
    from dopplermap.app import seed_read
    from dopplermap.app.seed import read_problem

    paths = _dump(tmp_path, dicts)
    with seed_read.start(*paths, trust_pickle=True) as reading:
        reading._proc.kill()  # the child dies before it sends anything
        prob = read_problem(*paths, None, True, reading=reading)
    _assert_same_problem(prob, read_seed(*paths, trust_pickle=True))
    assert seed_read.start(*paths, trust_pickle=False) is None  # the refusal is the reader's own


# ------------------------------------------------------------------ the seed's files as a Problem

def test_seed_problem_solves_through_invert_problem(tmp_path, dicts):
    """from_seed gives a Problem: its form is the pickles' model (the seed's loss, read from the
    NumPy transcription), invert(problem) solves it with its settings, and its grid holds the
    given cell centres with the areas as solid angles."""
    from dopplermap.problem import Problem, Settings, from_seed

    d = ragged(dicts, seed=5)
    sp = seed_problem(*d)
    prob = from_seed(sp, settings=Settings(lmbd=0.7, tol=1e-8, maxiter=3000))
    assert isinstance(prob, Problem) and prob.pre is sp.pre and prob.star is None and prob.components is None
    x = random_feasible(N_CELL, N_EPOCH, np.random.default_rng(9))
    ref = seed_loss_numpy(x, 0.7, *d)
    assert abs(float(loss(jnp.asarray(x), 0.7, prob.pre, prob.obs, regulariser="mem")) - ref) <= 1e-11 * ref
    areas = np.asarray(d[1]["grid_areas"])
    np.testing.assert_allclose(prob.grid.area, areas / areas.sum() * 4 * np.pi, rtol=1e-14)
    np.testing.assert_array_equal(prob.grid.lat, np.asarray(d[1]["grid_lats"]))
    assert np.all((prob.grid.lon >= 0) & (prob.grid.lon < 2 * np.pi))
    res = dm.invert(prob)
    assert res.lmbd == 0.7 and res.grid is prob.grid and res.intensities is None
    xr = np.concatenate([res.fssc, res.fssh, res.rv, res.amp])
    assert abs(res.loss - seed_loss_numpy(xr, 0.7, *d)) <= 1e-10 * res.loss
    assert res.loss < ref
    # the same problem read back from the safe .npz
    back = from_seed(load_problem(save_problem(tmp_path / "p.npz", sp)), settings=prob.settings)
    assert abs(float(loss(jnp.asarray(x), 0.7, back.pre, back.obs, regulariser="mem")) - ref) <= 1e-11 * ref


def test_seed_problem_refuses_what_its_form_cannot_follow(dicts):
    from dopplermap.errors import DopplermapInputError
    from dopplermap.problem import Settings, from_seed

    idc, sg, cpcs = copy.deepcopy(dicts)
    del sg["grid_lats"], sg["grid_longs"]
    prob = from_seed(seed_problem(idc, sg, cpcs))
    assert prob.grid is None
    with pytest.raises(DopplermapInputError, match="'tikhonov' needs neighbouring cells"):
        from_seed(seed_problem(idc, sg, cpcs), settings=Settings(regulariser="tikhonov"))
    star, *_ = dm.demo_setup(n_cell=N_CELL, n_epoch=N_EPOCH, n_vel=N_VEL, seed=3)
    with pytest.raises(DopplermapInputError, match="given as data; changing star"):
        prob.replace(star=star)
    with pytest.raises(DopplermapInputError, match="takes no star"):
        dataclasses.replace(prob, star=star)
    other = seed_problem(*rekey(dicts, list(range(N_EPOCH))))
    short = dm.Observations.create(np.asarray(other.obs.times)[:-1], other.obs.vels, other.obs.flux[:-1],
                                   other.obs.err[:-1])
    with pytest.raises(DopplermapInputError, match="19 x 32"):
        prob.replace(obs=short)


def test_seed_figures_from_arrays(tmp_path, dicts):
    """The figures need plain arrays only (what a figure process receives)."""
    from dopplermap.app.seed_figures import plot_seed_figures

    sp = seed_problem(*dicts)
    flux = np.asarray(sp.obs.flux)
    base = dict(fssc=np.full(N_CELL, 0.1), fssh=np.full(N_CELL, 1e-5), model=flux * 1.001, flux=flux,
                err=np.asarray(sp.obs.err), vels=np.asarray(sp.obs.vels), chi2=1.0)
    for name, coords in (("map", dict(lat=sp.lat, lon=sp.lon)), ("index", dict(lat=None, lon=None))):
        paths = plot_seed_figures(tmp_path / name, dict(base, **coords))
        assert [p.name for p in paths] == ["filling_factors.png", "residuals.png"]
        assert all(p.stat().st_size > 10_000 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


# ------------------------------------------------------------------ end to end

def test_cli_simulate_convert_invert(tmp_path, capsys):
    sim_dir = tmp_path / "sim"
    assert main(["simulate", "--out", str(sim_dir), "--format", "seed-pickle", "--n-cell", "300",
                 "--n-epoch", "20", "--snr", "300", "--no-coordinates", "--per-cell-lis"]) == 0
    files = {p.name for p in sim_dir.iterdir()}
    assert {"idc.pkl", "sg.pkl", "cpcs.pkl", "truth.npz"} <= files
    npz = tmp_path / "p.npz"
    pick = ["--idc", str(sim_dir / "idc.pkl"), "--sg", str(sim_dir / "sg.pkl"), "--cpcs", str(sim_dir / "cpcs.pkl")]
    assert main(["convert", *pick, "--trust-pickle", "--out", str(npz)]) == 0
    out = tmp_path / "res"
    assert main(["invert-seed", "--problem", str(npz), "--lmbd", "0.5", "--out", str(out), "--quiet"]) == 0
    stdout = capsys.readouterr().out
    assert "per cell index" in stdout
    s = json.loads((out / "summary.json").read_text())
    for key in ("loss", "chi2", "entropy", "iterations", "compile_time", "solve_time", "total_time"):
        assert key in s
    assert s["success"] and s["has_coordinates"] is False and "figure_note" in s
    assert {"filling_factors.png", "residuals.png"} <= {p.name for p in out.iterdir()}
    assert not list(out.glob(".*tmp"))
    # the reported loss is the seed's loss at the written solution, and it beats the seed's start
    with np.load(out / "result.npz") as r:
        x = np.concatenate([r["fssc"], r["fssh"], r["rv"], r["amp"]])
        assert np.all((r["fssc"] >= 1e-5) & (r["fssh"] >= 1e-5) & (r["fssc"] + r["fssh"] <= 1.0))
    d = [pickle.load(open(sim_dir / f"{n}.pkl", "rb")) for n in ("idc", "sg", "cpcs")]
    ref = seed_loss_numpy(x, 0.5, *d)
    assert abs(s["loss"] - ref) <= 1e-10 * ref
    with np.load(sim_dir / "truth.npz") as tr:  # the optimum lies below the truth's loss
        x_true = np.concatenate([tr["fssc"], tr["fssh"], tr["rv"], tr["amp"]])
    assert ref < seed_loss_numpy(x_true, 0.5, *d) < seed_loss_numpy(Layout(300, 20).initial(), 0.5, *d)
    # the npz simulate format reads back as the same kind of problem
    assert main(["simulate", "--out", str(tmp_path / "sim2"), "--n-cell", "300", "--n-epoch", "20"]) == 0
    p2 = load_problem(tmp_path / "sim2" / "problem.npz")
    assert p2.n_cell == 300 and p2.n_epoch == 20 and p2.has_coordinates
