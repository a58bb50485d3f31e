"""Result folders: round trip, FITS layout, atomic writes, the demo's folder."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.io import results as rio
from dopplermap.regularisers import seed_entropy
from dopplermap.result import InversionResult

SRC = str(Path(__file__).resolve().parents[1] / "src")


def small_result(n_cell=300, n_epoch=20, light_curve=False):
    """A result with full context, built without a solve (fast)."""
    star, grid, times, vels, comps = dm.demo_setup(n_cell=n_cell, n_epoch=n_epoch)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=300, seed=3)
    rng = np.random.default_rng(0)
    fssc = np.clip(sim.fssc * 0.8 + 0.02 * rng.random(n_cell), 1e-5, 0.9)
    fssh = np.clip(sim.fssh * 0.7, 1e-5, 0.9)
    rv = 0.05 * rng.standard_normal(n_epoch)
    amp = 1e-3 * rng.standard_normal(n_epoch)
    pre = dm.precompute(grid, star, times, vels, comps)
    model = np.asarray(dm.forward(jnp.asarray(fssc), jnp.asarray(fssh), jnp.asarray(rv), jnp.asarray(amp), pre))
    hist = {"loss": np.linspace(3, 1.2, 12), "chi2": np.linspace(2.8, 1.0, 12), "regulariser": np.linspace(0.1, 0.4, 12)}
    res = InversionResult(fssc=fssc, fssh=fssh, rv=rv, amp=amp, loss=1.2345678901234567, chi2=1.0123456789,
                          regulariser_value=0.4, lmbd=0.75, regulariser="mem", iterations=12, n_eval=14, success=True,
                          stop_reason="CONVERGENCE: RELATIVE REDUCTION OF F <= FACTR*EPSMCH " * 2, compile_time=1.5,
                          solve_time=0.25, history=hist, model=model, max_sum_excess=0.0)
    lc = None
    if light_curve:
        t = np.linspace(0, 4, 50)
        lc = {"times": t, "flux": 1 + 0.01 * np.sin(t), "err": np.full(50, 1e-3), "model": 1 + 0.011 * np.sin(t)}
    if light_curve and "chi2_lc" in {f.name for f in dataclasses.fields(InversionResult)}:
        res = dataclasses.replace(res, chi2_lc=1.0456)
    return dm.app.with_context(res, grid=grid, star=star, obs=sim.obs, pre=pre, components=comps,
                            truth={"fssc": sim.fssc, "fssh": sim.fssh}, light_curve=lc,
                            config={"command": "test", "lmbd": 0.75, "nested": {"a": [1, 2]}},
                            extra={"corr_cool": 0.9, "n_cell": n_cell})


@pytest.fixture(scope="module")
def result():
    return small_result(light_curve=True)


def test_round_trip_identical(result, tmp_path):
    out = tmp_path / "run"
    summary = dm.save_result(result, out, plots=False)
    assert summary["complete"] is True
    back = dm.load_result(out)
    for name in ("fssc", "fssh", "rv", "amp", "model", "spotless", "fssp", "brightness"):
        np.testing.assert_array_equal(getattr(back, name), getattr(result, name), err_msg=name)
    for name in ("loss", "chi2", "regulariser_value", "lmbd", "regulariser", "iterations", "n_eval", "success",
                 "stop_reason", "compile_time", "solve_time", "max_sum_excess", "solver"):
        assert getattr(back, name) == getattr(result, name), name
        assert type(getattr(back, name)) is type(getattr(result, name)), name
    assert back.summary() == result.summary()  # every scalar field, whatever the solver adds
    for k in result.history:
        np.testing.assert_array_equal(back.history[k], result.history[k])
    for k in ("times", "vels", "flux", "err"):
        np.testing.assert_array_equal(np.asarray(getattr(back.obs, k)), np.asarray(getattr(result.obs, k)))
    for k in ("fssc", "fssh"):
        np.testing.assert_array_equal(back.truth[k], result.truth[k])
    for k in result.light_curve:
        np.testing.assert_array_equal(back.light_curve[k], result.light_curve[k])
    assert back.star == result.star
    assert back.intensities == result.intensities
    assert back.config == result.config
    assert back.extra == result.extra
    g, g0 = back.grid, result.grid
    assert g.kind == g0.kind and g.n_cell == g0.n_cell
    np.testing.assert_allclose(g.lat, g0.lat, rtol=0, atol=1e-14)
    np.testing.assert_allclose(g.lon, g0.lon, rtol=0, atol=1e-14)
    np.testing.assert_allclose(g.lat_bounds, g0.lat_bounds, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(g.area, g0.area)
    np.testing.assert_array_equal(g.edges, g0.edges)
    # a second save of the loaded result gives the same maps again
    dm.save_result(back, tmp_path / "again", plots=False)
    again = dm.load_result(tmp_path / "again")
    np.testing.assert_array_equal(again.fssc, result.fssc)
    assert again.chi2 == result.chi2


def test_fits_headers_name_the_star_the_date_and_the_software(result, tmp_path):
    """Every HDU carries OBJECT (the star's name), DATE, ORIGIN and CREATOR; the name comes back."""
    import datetime

    from astropy.io import fits

    named = dataclasses.replace(result, star=result.star.replace(name="LO Peg"))
    before = datetime.datetime.now(datetime.UTC).replace(microsecond=0, tzinfo=None)
    dm.save_result(named, tmp_path / "run", plots=False)
    for name in ("map.fits", "profiles.fits"):
        with fits.open(tmp_path / "run" / name) as hdul:
            for hdu in hdul:
                h = hdu.header
                assert h["OBJECT"] == "LO Peg" and h["ORIGIN"] == "dopplermap", (name, hdu.name)
                assert h["CREATOR"] == f"dopplermap {dm.__version__}", (name, hdu.name)
                assert datetime.datetime.fromisoformat(h["DATE"]) >= before, (name, hdu.name)
    back = dm.load_result(tmp_path / "run")
    assert back.star.name == "LO Peg" and back.name == "LO Peg"
    # the figures, drawn from the JAX-free stand-in a figure process gets, carry the name too
    from dopplermap.app.folders import figure_view
    from dopplermap.plot import result_figures

    assert figure_view(named).star.name == "LO Peg"
    assert result_figures(figure_view(named))["polar"]().axes[0].get_title() == "LO Peg"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["star"]["name"] == "LO Peg"
    # without a name: no OBJECT keyword, the rest as before
    dm.save_result(result, tmp_path / "anon", plots=False)
    with fits.open(tmp_path / "anon" / "map.fits") as hdul:
        assert "OBJECT" not in hdul["MAP"].header and hdul["MAP"].header["ORIGIN"] == "dopplermap"
    assert dm.load_result(tmp_path / "anon").star.name is None


def test_fits_layout_columns_units_header(result, tmp_path):
    from astropy.io import fits
    from astropy.table import Table

    dm.save_result(result, tmp_path / "run", plots=False)
    t = Table.read(tmp_path / "run" / "map.fits", hdu="MAP")
    for col in ("LAT", "LON", "AREA", "FSSC", "FSSH", "FSSP", "BRIGHT", "LAT_MIN", "LAT_MAX", "LON_MIN", "LON_MAX",
                "TRUE_FSSC", "TRUE_FSSH"):
        assert col in t.colnames, col
    assert str(t["LAT"].unit) == "deg" and str(t["LON"].unit) == "deg" and str(t["AREA"].unit) == "sr"
    assert len(t) == result.grid.n_cell
    np.testing.assert_allclose(t["FSSP"], 1 - t["FSSC"] - t["FSSH"], atol=1e-15)
    np.testing.assert_allclose(np.sum(t["AREA"]), 4 * np.pi, rtol=1e-12)
    # hot spots brighter, cool spots darker than the photosphere
    assert t["BRIGHT"][np.argmax(t["FSSC"])] < 1 < t["BRIGHT"][np.argmax(t["FSSH"])]
    with fits.open(tmp_path / "run" / "map.fits") as hdul:
        h = hdul["MAP"].header
        assert h["INCLIN"] == 60.0 and h["VSINI"] == 40.0 and h["PERIOD"] == 2.0
        assert h["LAMBDA"] == 0.75 and h["REGUL"] == "mem" and h["NITER"] == 12 and h["CHI2"] == result.chi2
        assert h["DMVER"] == dm.__version__
        assert json.loads(h["CONFIG"]) == result.config
        ent = float(seed_entropy(result.fssc, result.fssh, result.grid.area))
        assert h["ENTROPY"] == pytest.approx(ent, rel=1e-12)
        assert list(hdul["CONVERGENCE"].data["ITER"]) == list(range(1, 13))
    with fits.open(tmp_path / "run" / "profiles.fits") as hdul:
        p = hdul["PROFILES"].data
        assert p["OBS"].shape == (20, 32)
        np.testing.assert_array_equal(p["RESID"], p["OBS"] - p["MODEL"])
        assert np.all((p["PHASE"] >= 0) & (p["PHASE"] < 1))
        assert hdul["VELS"].header["BUNIT"] == "km/s"
        assert "LIGHTCURVE" in hdul
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg == result.config


def test_interrupted_write_leaves_nothing_complete(result, tmp_path, monkeypatch):
    out = tmp_path / "run"

    def boom(*a, **k):
        assert (list(tmp_path.glob(".run.partial-*/map.fits"))), "map.fits should already be written"
        raise KeyboardInterrupt("simulated interrupt")

    monkeypatch.setattr(rio, "_profile_hdus", boom)
    with pytest.raises(KeyboardInterrupt):
        dm.save_result(result, out, plots=False)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # the partial folder was removed
    with pytest.raises(ValueError, match="does not exist"):
        dm.load_result(out)


def test_interrupted_overwrite_keeps_previous_result(result, tmp_path, monkeypatch):
    out = tmp_path / "run"
    dm.save_result(result, out, plots=False)
    changed = rio.with_context(result, extra={"marker": 1})
    monkeypatch.setattr(rio, "_profile_hdus", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("disk full")))
    with pytest.raises(RuntimeError, match="disk full"):
        dm.save_result(changed, out, plots=False)
    back = dm.load_result(out)  # the old result, whole
    assert "marker" not in back.extra
    np.testing.assert_array_equal(back.fssc, result.fssc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_killed_process_leaves_no_complete_looking_result(result, tmp_path):
    """SIGKILL in the middle of writing (after map.fits): the target never appears."""
    pkl = tmp_path / "res.pkl"
    pkl.write_bytes(pickle.dumps(result))
    script = textwrap.dedent(f"""
        import os, pickle, signal
        import dopplermap as dm
        from dopplermap.io import results as rio
        res = pickle.loads(open({str(pkl)!r}, "rb").read())
        def die(*a, **k):
            os.kill(os.getpid(), signal.SIGKILL)
        rio._profile_hdus = die
        dm.save_result(res, {str(tmp_path / "run")!r}, plots=False)
    """)
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert not (tmp_path / "run").exists()
    partial = list(tmp_path.glob(".run.partial-*"))
    assert len(partial) == 1 and (partial[0] / "map.fits").is_file()  # it died mid-write
    assert not (partial[0] / "summary.json").exists()
    with pytest.raises(ValueError, match="not a complete"):
        dm.load_result(partial[0])
    # a later run succeeds next to the leftover
    dm.save_result(result, tmp_path / "run", plots=False)
    assert dm.load_result(tmp_path / "run").iterations == result.iterations


def test_bad_paths_and_inputs(result, tmp_path):
    other = tmp_path / "notes"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    with pytest.raises(ValueError, match="not a dopplermap result folder"):
        dm.save_result(result, other, plots=False)
    assert (other / "thesis.tex").read_text() == "x"
    with pytest.raises(ValueError, match="no grid"):
        dm.save_result(InversionResult(**{**result.__dict__, "grid": None}), tmp_path / "x", plots=False)
    with pytest.raises(ValueError, match="does not exist"):
        dm.load_result(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a complete"):
        dm.load_result(other)
    dm.save_result(result, tmp_path / "r", plots=False)
    with pytest.raises(ValueError, match="overwrite=True"):
        dm.save_result(result, tmp_path / "r", plots=False, overwrite=False)
    (tmp_path / "r" / "summary.json").write_text("{broken")
    with pytest.raises(ValueError, match="summary.json does not match dopplermap.json"):
        dm.load_result(tmp_path / "r")
    with pytest.raises(ValueError, match="grid has"):
        rio.with_context(result, grid=dm.latitude_band_grid(100))


def test_config_file_copied_verbatim(result, tmp_path):
    cfg = tmp_path / "target.toml"
    cfg.write_text("# my star\n[star]\ninclination = 60.0\n")
    dm.save_result(result, tmp_path / "run", plots=False, config_file=cfg)
    assert (tmp_path / "run" / "config.toml").read_text() == cfg.read_text()
    with pytest.raises(ValueError, match="config_file"):
        dm.save_result(result, tmp_path / "run2", plots=False, config_file=tmp_path / "nope.toml")


def test_demo_writes_loadable_results_and_figures(tmp_path, capsys):
    from dopplermap.cli import main

    out = tmp_path / "demo"
    assert main(["demo", "--n-cell", "300", "--out", str(out), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "chi2" in captured.out and "corr(cool)" in captured.out
    assert captured.err == ""  # --quiet: no progress display
    summary = json.loads((out / "summary.json").read_text())
    for key in ("chi2", "iterations", "compile_time", "solve_time", "corr_cool", "corr_hot", "precompute_time",
                "n_cell", "n_epoch", "n_vel", "snr", "total_time", "write_time", "plot_time"):
        assert key in summary, key
    for fig in ("map_mollweide.png", "map_rect.png", "orthographic.png", "polar.png", "profiles.png", "dynamic_spectrum.png",
                "convergence.png"):
        assert (out / fig).stat().st_size > 10_000, fig
    res = dm.load_result(out)
    assert res.grid.n_cell == 300 and res.truth is not None and res.extra["corr_cool"] == summary["corr_cool"]
    assert res.config["command"] == "demo"
