"""Figures drawn in a child interpreter (dopplermap.figure_process): the same files as drawn
in this process, a fallback when the child fails, and nothing left behind."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.app.folders import figure_view
from dopplermap.app.seed_figures import plot_seed_figures
from dopplermap.figure_process import FigureProcess, submit
from dopplermap.result import InversionResult

SEED_FIGURES = "dopplermap.app.seed_figures:plot_seed_figures"


def _seed_arrays(n_cell=300, n_epoch=20, n_vel=24):
    rng = np.random.default_rng(4)
    flux = 1.0 - 0.05 * np.exp(-np.linspace(-2, 2, n_vel) ** 2)[None, :] + 1e-3 * rng.standard_normal((n_epoch, n_vel))
    return dict(fssc=np.linspace(1e-5, 0.6, n_cell), fssh=np.full(n_cell, 0.05), model=flux * 0.999, flux=flux,
                err=np.full_like(flux, 1e-3), vels=np.linspace(-50, 50, n_vel), chi2=1.25,
                lat=rng.uniform(-1.5, 1.5, n_cell), lon=rng.uniform(0, 6.28, n_cell))


def test_child_draws_the_same_files_and_a_failed_child_falls_back(tmp_path, caplog):
    arrays = _seed_arrays()
    here = plot_seed_figures(tmp_path / "here", arrays)
    with FigureProcess(preload=("dopplermap.app.seed_figures",)) as fp:
        paths = submit(fp, SEED_FIGURES, tmp_path / "child", arrays)()
    assert [p.name for p in paths] == ["filling_factors.png", "residuals.png"]
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in here]
    # a child that cannot import its modules exits before the call: this process draws instead
    with FigureProcess(preload=("dopplermap.no_such_module",)) as fp:
        finish = submit(fp, SEED_FIGURES, tmp_path / "fallback", arrays)
        with caplog.at_level("WARNING", logger="dopplermap.figure_process"):
            paths = finish()
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in here]
    assert "drawing the figures in this process" in caplog.text and "no_such_module" in caplog.text


def _small_result():
    """A result with context, without a solve."""
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=12, n_vel=24)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=300, seed=3)
    fssc, fssh = np.clip(sim.fssc * 0.8, 1e-5, 0.9), np.clip(sim.fssh * 0.7, 1e-5, 0.9)
    zero = np.zeros(12)
    pre = dm.precompute(grid, star, times, vels, comps)
    model = np.asarray(dm.forward(jnp.asarray(fssc), jnp.asarray(fssh), jnp.asarray(zero), jnp.asarray(zero), pre))
    hist = {"loss": np.linspace(3, 1.2, 12), "chi2": np.linspace(2.8, 1.0, 12), "regulariser": np.linspace(0.1, 0.4, 12)}
    res = InversionResult(fssc=fssc, fssh=fssh, rv=zero, amp=zero, loss=1.2, chi2=1.0, regulariser_value=0.4,
                          lmbd=0.75, regulariser="mem", iterations=12, n_eval=14, success=True, stop_reason="test",
                          compile_time=0.0, solve_time=0.0, history=hist, model=model)
    t = np.linspace(0, 4, 50)
    lc = {"times": t, "flux": 1 + 0.01 * np.sin(t), "err": np.full(50, 1e-3), "model": 1 + 0.011 * np.sin(t)}
    return dm.app.with_context(res, grid=grid, star=star, obs=sim.obs, pre=pre, components=comps, light_curve=lc)


@pytest.mark.slow
def test_result_folder_figures_from_a_child_equal_those_drawn_here(tmp_path):
    result = _small_result()
    assert b"jax" not in pickle.dumps(figure_view(result))  # the child unpickles it without JAX
    s_here = dm.app.save_result(result, tmp_path / "here", report=True)
    with FigureProcess() as fp:  # no JAX in the child: figure_view's stand-ins unpickle without it
        s_child = dm.app.save_result(result, tmp_path / "child", report=True, figure_process=fp)
    assert s_child["figures"] == s_here["figures"] and len(s_here["figures"]) == 8  # with polar.png
    assert s_child["files"] == s_here["files"]
    for name in s_here["figures"]:
        assert (tmp_path / "child" / name).read_bytes() == (tmp_path / "here" / name).read_bytes(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["child", "here"]  # no staging folder left
    # a refused folder: the child is stopped, nothing is written or left behind
    with FigureProcess() as fp:
        with pytest.raises(dm.DopplermapInputError):
            dm.app.save_result(result, tmp_path / "child", overwrite=False, figure_process=fp)
        assert fp._proc.poll() is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["child", "here"]


_FORK_SCRIPT = r"""
import os, sys, threading, pickle
from pathlib import Path
from dopplermap import style
assert "jax" not in sys.modules and threading.active_count() == 1
out = Path(sys.argv[1])
(out / "who").mkdir()
def maker(k):
    def make():
        (out / "who" / f"{k}-{os.getpid()}").touch()
        fig = style.new_figure(2.0, 1.5)
        ax = fig.add_axes((0.2, 0.2, 0.7, 0.7))
        ax.plot([0, 1, 2], [k, k * k, 1]); ax.set_title(f"figure {k}")
        return fig
    return make
makers = {f"f{k}": maker(k) for k in range(5)}
main = os.getpid()
forked = style.save_figures(makers, out / "forked", processes=2, costs={"f0": 3.0})
drew_forked = sorted(p.name for p in (out / "who").iterdir())
for p in (out / "who").iterdir():
    p.unlink()
threads = style.save_figures(makers, out / "threads", processes=1)
drew_threads = sorted(p.name for p in (out / "who").iterdir())
def broken():
    if os.getpid() != main:
        raise ValueError("drawing failed in a forked share")
    return maker(9)()
try:
    style.save_figures({"a": maker(1), "b": broken}, out / "broken", processes=2)
    failed = None
except RuntimeError as exc:
    failed = str(exc)
print(pickle.dumps(([str(p) for p in forked], [str(p) for p in threads], drew_forked, drew_threads, failed)).hex())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="figures are drawn in forked processes on Linux only")
def test_figures_shared_among_forked_processes_come_back_in_order(tmp_path):
    """Where the interpreter may fork (no JAX, no other thread: the figure child), the figures
    are drawn by forked copies: the same files as drawn in one process, the paths in the
    makers' order, and a share that fails is an error, not a missing figure."""
    p = subprocess.run([sys.executable, "-c", _FORK_SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    forked, threads, drew_forked, drew_threads, failed = pickle.loads(bytes.fromhex(p.stdout.strip().splitlines()[-1]))
    assert [Path(f).name for f in forked] == [f"f{k}.png" for k in range(5)] == [Path(f).name for f in threads]
    for f, t in zip(forked, threads, strict=True):
        assert Path(f).read_bytes() == Path(t).read_bytes()
    assert len({w.split("-")[1] for w in drew_forked}) == 2 and len(drew_forked) == 5  # two processes drew
    assert len({w.split("-")[1] for w in drew_threads}) == 1
    assert failed is not None and "1 forked process(es) failed" in failed
    assert "drawing failed in a forked share" in p.stderr


def test_figure_shares_balance_the_drawing_cost():
    from dopplermap.style import _shares

    items = [(n, None) for n in ("map", "rect", "profiles", "dynamic_spectrum", "light_curve", "conv", "profiles_b")]
    costs = {"dynamic_spectrum": 3.0, "profiles": 1.5}
    shares = _shares(items, costs, 2)
    assert sorted(i for s in shares for i in s) == list(range(len(items)))
    load = [sum({**costs, "profiles_b": 1.5}.get(items[i][0], 1.0) for i in s) for s in shares]
    assert abs(load[0] - load[1]) <= 1.0 and all(s == sorted(s) for s in shares)
    assert _shares(items[:1], {}, 3) == [[0], [], []]
