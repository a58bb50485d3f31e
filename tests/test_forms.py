"""The synthesis forms (``dopplermap.forms``): one protocol, no branching on the form elsewhere.

The forms' numbers are checked against the exact dense model and its NumPy transcription in
``test_conformance.py``; here: the protocol itself (each form an immutable pytree that
selects epochs, pads, reports its cells and sizes the same way) and the absence of
``method``/``kind`` branches outside ``forms/``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap import forms
from dopplermap.errors import DopplermapInputError

SRC = Path(dm.__file__).resolve().parent

# ``method ==`` outside forms/ that is not the synthesis form (another option of that name)
OTHER_METHODS = {
    "broadening.py": "the equivalent-width convention of scale_equivalent_width",
    "uncertainty.py": "the Laplace diagonal's algorithm (dense / hutchinson)",
}

FORM_BRANCH = re.compile(
    r"\b(line|lm|form)\.kind\s*(==|!=|\bin\b|\bnot\s+in\b)"  # line.kind == "dense", pre.line.kind in (...)
    r"|isinstance\([^)]*\b(Dense|Folded|Blocked|Binned)Form\b")  # type switches on the form
METHOD_BRANCH = re.compile(r"\bmethod\s*==|\bmethod\s*!=\s*[\"'](dense|binned|folded|blocked)[\"']")


def form_branches(text: str, name: str) -> list[str]:
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if FORM_BRANCH.search(code):
            out.append(f"{name}:{i}: {line.strip()}")
        elif METHOD_BRANCH.search(code) and Path(name).name not in OTHER_METHODS:
            out.append(f"{name}:{i}: {line.strip()}")
    return out


def test_no_branches_on_the_form_outside_forms():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] != "forms":
            found += form_branches(path.read_text(), str(rel))
    assert not found, "branches on the synthesis form outside dopplermap/forms (add a form method):\n" + "\n".join(found)


def test_branch_scan_can_fail():
    assert form_branches('    if line.kind == "binned":\n', "x.py")
    assert form_branches("    mu = pre.line.kind in ('folded', 'blocked')\n", "x.py")
    assert form_branches("    if isinstance(pre.line, forms.FoldedForm):\n", "x.py")
    assert form_branches('    if method == "dense":\n', "search.py")
    assert not form_branches('    if method == "dense":\n', "uncertainty.py")
    assert not form_branches('    summary["method"] = pre.line.kind  # for the file\n', "x.py")
    assert not form_branches('    if profile.kind == "gaussian":\n', "x.py")  # a local profile's shape


@pytest.fixture(scope="module")
def all_forms():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=9, n_vel=18, seed=3)
    dense = dm.precompute(grid, star, times, vels, comps, method="dense")
    binned = dm.precompute(grid, star, times, vels, comps, method="binned")
    out = {"dense": dense.line, "binned": binned.line,
           "folded": dm.solve_form(dense, "float64").line,
           "blocked": dm.solve_form(dense, "float64", blocked=True).line}
    rng = np.random.default_rng(0)
    fc, fh = (jnp.asarray(rng.uniform(0.0, 0.4, grid.n_cell)) for _ in range(2))
    return out, fc, fh


def _profiles(line, fc, fh):
    num, norm = line.numerator_norm(fc, fh)
    return np.asarray(num / norm[:, None])


def test_every_form_is_an_immutable_pytree(all_forms):
    lines, fc, fh = all_forms
    assert len({type(line).kind for line in lines.values()}) == 4
    ref = _profiles(lines["dense"], fc, fh)
    for name, line in lines.items():
        assert isinstance(line, forms.Form) and line.kind == name
        with pytest.raises(dataclasses.FrozenInstanceError):
            line.vels = None
        leaves, tree = jax.tree_util.tree_flatten(line)
        back = jax.tree_util.tree_unflatten(tree, leaves)
        assert type(back) is type(line) and all(hasattr(x, "shape") for x in leaves)
        assert line.nbytes() == sum(int(x.nbytes) for x in leaves)
        assert (line.n_epoch, line.n_vel) == ref.shape and line.n_cell == 300
        # a jitted synthesis takes the form as an argument (arrays traced, static fields static)
        got = np.asarray(jax.jit(lambda line, a, b: dm.model.synthesize(a, b, line))(line, fc, fh))
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13 if name != "binned" else 1e-6)


def test_seen_cells_agree_across_forms(all_forms):
    lines, _, _ = all_forms
    ref = (np.asarray(lines["dense"].pos) < lines["dense"].n_slot).any(axis=0)  # visible at some epoch
    assert 0 < ref.sum() < ref.size
    for line in lines.values():
        np.testing.assert_array_equal(line.seen_cells(), ref)


def test_select_epochs_is_the_same_rows(all_forms):
    lines, fc, fh = all_forms
    idx = np.array([4, 0, 4, 8])
    for name, line in lines.items():
        if name == "blocked":
            with pytest.raises(DopplermapInputError, match="blocked form"):
                line.select_epochs(idx)
            continue
        part = line.select_epochs(idx)
        assert type(part) is type(line) and part.n_epoch == idx.size
        np.testing.assert_allclose(_profiles(part, fc, fh), _profiles(line, fc, fh)[idx], rtol=0, atol=1e-14)


def test_pad_keeps_the_model(all_forms):
    lines, fc, fh = all_forms
    for name, line in lines.items():
        big = line.pad(line.n_slot + 7, n_bin=getattr(line, "n_bin", 0) + 9)
        assert type(big) is type(line) and big.n_slot == line.n_slot + 7
        assert line.pad(1).n_slot == line.n_slot  # never shrinks
        np.testing.assert_allclose(_profiles(big, fc, fh), _profiles(line, fc, fh), rtol=0, atol=1e-14)
        np.testing.assert_array_equal(big.seen_cells(), line.seen_cells())
        if name == "binned":
            assert big.n_bin == line.n_bin + 9 and big.col_comp == line.col_comp


def test_cell_factors_only_where_weights_are_per_component(all_forms):
    lines, fc, fh = all_forms
    for name in ("dense", "binned"):
        one = lines[name].with_cell_factors(np.ones(300))
        np.testing.assert_allclose(_profiles(one, fc, fh), _profiles(lines[name], fc, fh), rtol=0, atol=0)
    for name in ("folded", "blocked"):  # they hold weight differences: a factor there would be wrong
        with pytest.raises(DopplermapInputError, match="before it is folded"):
            lines[name].with_cell_factors(np.ones(300))


def test_set_up_on_the_cpu_compiles_nothing_and_equals_the_traced_path(all_forms):
    """Cell factors and padding of concrete CPU arrays are NumPy work: no XLA program is compiled
    (an eager op compiles one per new shape, which a grid's points pay each), and the result is the
    traced (jnp) path's exactly."""
    import logging

    lines, fc, fh = all_forms
    f = np.random.default_rng(1).uniform(0.5, 1.5, (300, 3))
    said = []

    class Heard(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    heard = Heard()
    logging.getLogger("jax").addHandler(heard)
    try:
        for name in ("dense", "binned"):
            line = lines[name]
            traced = jax.jit(lambda form, f: form.with_cell_factors(f).pad(form.n_slot + 11, n_bin=getattr(
                form, "n_bin", 0) + 3))(line, jnp.asarray(f))
            said.clear()
            with jax.log_compiles():
                host = line.with_cell_factors(f).pad(line.n_slot + 11, n_bin=getattr(line, "n_bin", 0) + 3)
            assert not [m for m in said if "Compiling" in m], (name, said)
            for a, b in zip(jax.tree_util.tree_leaves(host), jax.tree_util.tree_leaves(traced), strict=True):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    finally:
        logging.getLogger("jax").removeHandler(heard)


def test_solve_forms_of_a_dense_model(all_forms):
    lines, _, _ = all_forms
    dense = lines["dense"]
    # built on every call: a Problem keeps the ones its solves use (tests/test_problem.py)
    assert dense.solve_form("float32") is not dense.solve_form("float32")
    assert dense.solve_form("float32").cube_dtype == "float32" and dense.solve_form(None) is dense
    assert lines["binned"].solve_form("float32") is lines["binned"] and lines["binned"].cube_dtype is None
    assert dense.blocked_nbytes("float64") > 0 and lines["binned"].blocked_nbytes("float64") is None


# ------------------------------------------------------------------ exact rv shift (binned)


@pytest.fixture(scope="module")
def rv_problem():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=6, n_vel=24, seed=1)
    rng = np.random.default_rng(5)
    fc, fh = (jnp.asarray(rng.uniform(0.0, 0.5, grid.n_cell)) for _ in range(2))
    exact = dm.precompute(grid, star, times, vels, comps, method="binned", rv_shift="exact")
    return star, grid, times, np.asarray(vels), comps, fc, fh, exact


def test_exact_rv_is_the_shifted_local_profiles(rv_problem):
    """Against the exact dense model precomputed on the velocity grid moved by -rv (the local
    profiles themselves shifted): the exact shift meets the synthesis tolerance, the seed's
    interpolation misses by its interpolation error, and the two differ by just that."""
    star, grid, times, vels, comps, fc, fh, exact = rv_problem
    n_e = len(times)
    z = jnp.zeros(n_e)
    interp = dm.precompute(grid, star, times, vels, comps, method="dense")
    rvs = (0.37, -2.9)
    truth = [np.asarray(dm.forward(fc, fh, z, z, dm.precompute(grid, star, times, vels - r, comps, method="dense")))
             for r in rvs]
    rv = jnp.asarray([rvs[e % 2] for e in range(n_e)])  # a different shift at alternate epochs
    want = np.stack([truth[e % 2][e] for e in range(n_e)])
    got = np.asarray(dm.forward(fc, fh, rv, z, exact))
    seed = np.asarray(dm.forward(fc, fh, rv, z, interp))
    tol = 3e-7  # synthesis_tol 1e-7, times the mean normalisation
    assert np.max(np.abs(got - want)) <= tol
    interp_err = np.max(np.abs(seed - want))
    assert interp_err > 1e-5  # a grid step of 5 km/s: the seed's linear interpolation is far coarser
    assert abs(np.max(np.abs(got - seed)) - interp_err) <= tol
    plain = dm.precompute(grid, star, times, vels, comps, method="binned")
    np.testing.assert_allclose(np.asarray(dm.forward(fc, fh, z, z, exact)), np.asarray(dm.forward(fc, fh, z, z, plain)),
                               rtol=0, atol=1e-13)  # no shift: the plain binned model


@pytest.mark.slow
def test_exact_rv_gradient_and_chunks(rv_problem, monkeypatch):
    star, grid, times, vels, comps, fc, fh, exact = rv_problem
    n_e = len(times)
    w = jnp.asarray(np.random.default_rng(6).normal(size=(n_e, len(vels))))
    amp = jnp.full(n_e, 0.01)

    def val(rv):
        return jnp.sum(w * dm.forward(fc, fh, rv, amp, exact))

    rv = jnp.asarray(np.linspace(-3.0, 2.5, n_e))
    g = np.asarray(jax.grad(val)(rv))
    h = 1e-5
    val_c = jax.jit(val)  # compiled once for the finite differences' 2 n_epoch evaluations (before the patch below)
    fd = np.array([(float(val_c(rv.at[e].add(h))) - float(val_c(rv.at[e].add(-h)))) / (2 * h) for e in range(n_e)])
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-8 * np.max(np.abs(fd)))
    whole = np.asarray(dm.forward(fc, fh, rv, amp, exact))
    padded = exact.line.pad(exact.line.n_slot + 5, exact.line.n_bin + 7)
    np.testing.assert_allclose(np.asarray(dm.forward(fc, fh, rv, amp, padded)), whole, rtol=0, atol=1e-14)
    monkeypatch.setattr(forms.BinnedForm, "epoch_chunk", lambda self: 4)  # the chunked path slices rv too
    np.testing.assert_allclose(np.asarray(dm.forward(fc, fh, rv, amp, exact)), whole, rtol=0, atol=1e-14)


def test_exact_rv_needs_the_binned_form(rv_problem):
    star, grid, times, vels, comps, *_ = rv_problem
    with pytest.raises(DopplermapInputError, match="needs method='binned'"):
        dm.precompute(grid, star, times, vels, comps, method="dense", rv_shift="exact")
    with pytest.raises(DopplermapInputError, match="rv_shift must be"):
        dm.precompute(grid, star, times, vels, comps, rv_shift="cubic")
    assert dm.precompute(grid, star, times, vels, comps, rv_shift="exact").line.kind == "binned"  # "auto"


def test_exact_rv_model_is_not_saved_as_another(rv_problem, tmp_path):
    from dopplermap.io.seed import SeedProblem, save_problem

    star, grid, times, vels, comps, fc, fh, exact = rv_problem
    flux = np.ones((len(times), len(vels)))
    obs = dm.Observations.create(times, vels, flux, 1e-3 * flux)
    prob = SeedProblem(pre=exact, obs=obs, labels=tuple(map(str, range(len(times)))), n_visible=np.ones(len(times)))
    with pytest.raises(DopplermapInputError, match="rv_shift='exact' cannot be saved"):
        save_problem(tmp_path / "p.npz", prob)
    assert not (tmp_path / "p.npz").exists()
