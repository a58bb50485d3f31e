"""Trust: warnings, honest exit codes, outputs that refuse to lose files,
searches that refuse to mix, size guards. One test (at least) per case of each."""

from __future__ import annotations

import errno
import json
import os
import shutil
import types
import warnings

import numpy as np
import pytest

import dopplermap as dm
from dopplermap import diagnostics, search
from dopplermap.cli import main
from dopplermap.errors import (
    EXIT_NOT_CONVERGED,
    ConvergenceWarning,
    DopplermapInputError,
    DopplermapWarning,
    collect_warnings,
)
from dopplermap.problem import Settings

N_CELL, N_EPOCH, N_VEL = 150, 12, 24


@pytest.fixture(scope="module")
def small():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=N_CELL, n_epoch=N_EPOCH, n_vel=N_VEL, seed=3)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=400, seed=3)
    pre = dm.precompute(grid, star, times, vels, comps)
    return types.SimpleNamespace(star=star, grid=grid, times=times, vels=vels, comps=comps, sim=sim, pre=pre)


def _obs(small, flux=None, err=None, times=None):
    o = small.sim.obs
    return dm.Observations.create(o.times if times is None else times, o.vels,
                                  np.asarray(o.flux) if flux is None else flux,
                                  np.asarray(o.err) if err is None else err)


def _messages(fn):
    with collect_warnings() as seen:
        out = fn()
    return out, list(seen)


# ------------------------------------------------------------------ 1. warnings


def test_clean_data_raise_no_warning(small):
    res, seen = _messages(lambda: dm.invert(small.pre, small.sim.obs, lmbd=1.0))
    assert res.success and seen == []


def test_continuum_normalised_data_without_normalise_warn(small):
    """The reported case: chi2 in the hundreds and success=True, silently."""
    f = np.asarray(small.sim.obs.flux)
    obs = _obs(small, flux=f / f.max(axis=1, keepdims=True))  # continuum 1, mean < 1
    res, seen = _messages(lambda: dm.invert(small.pre, obs))
    assert res.chi2 > 50
    assert any("means far from 1" in m and "normalise=True" in m for m in seen)
    assert any("reduced chi2" in m and "far above 1" in m for m in seen)


def test_flat_profiles_are_refused(small):
    o = small.sim.obs
    with pytest.raises(DopplermapInputError, match="no line in any profile"):
        dm.invert(small.pre, _obs(small, flux=np.ones_like(np.asarray(o.flux))))
    rng = np.random.default_rng(0)  # noise only, no line
    err = np.asarray(o.err)
    with pytest.raises(DopplermapInputError, match="no line"):
        diagnostics.check_observations(_obs(small, flux=1.0 + err * rng.standard_normal(err.shape)))


def test_one_epoch_duplicate_epochs_flat_epoch_warn(small):
    o = small.sim.obs
    with pytest.warns(DopplermapWarning, match="only one epoch"):
        diagnostics.check_observations(dm.Observations.create(o.times[:1], o.vels, np.asarray(o.flux)[:1],
                                                              np.asarray(o.err)[:1]))
    t = np.asarray(o.times).copy()
    t[4] = t[2]
    with pytest.warns(DopplermapWarning, match="duplicate epochs: epochs 2 and 4"):
        diagnostics.check_observations(_obs(small, times=t))
    f = np.asarray(o.flux).copy()
    f[5] = 1.0
    with pytest.warns(DopplermapWarning, match=r"epoch\(s\) 5 show no line"):
        diagnostics.check_observations(_obs(small, flux=f))


def test_iteration_limit_warns(small):
    with pytest.warns(ConvergenceWarning, match=r"iteration limit \(maxiter=3\).*raise maxiter"):
        res = dm.invert(small.pre, small.sim.obs, maxiter=3)
    assert not res.success


def _fake_result(**kw):
    base = dict(success=True, stop_reason="CONVERGENCE", rv=np.zeros(3), amp=np.zeros(3), chi2=1.0, chi2_lc=None)
    return types.SimpleNamespace(**{**base, **kw})


def test_result_checks_name_what_to_check():
    obs = types.SimpleNamespace(vels=np.linspace(-60, 60, 24))
    cases = [
        (dict(success=False, stop_reason="ABNORMAL_TERMINATION_IN_LNSRCH"), "line-search failure"),
        (dict(rv=np.array([0.0, -100.0, 1.0])), "radial-velocity offsets ran away.*systemic velocity"),
        (dict(amp=np.array([0.0, 2100.0, 0.0])), "additive offsets ran away.*line depth"),
        (dict(chi2=0.01), "far below 1.*errors look too large"),
        (dict(chi2=1.0, chi2_lc=40.0), "light curve is 40.*far above 1.*transits, flares"),
        (dict(chi2=1.0, chi2_lc=0.01), "light curve is 0.01.*far below 1.*light curve's errors"),
    ]
    for kw, pattern in cases:
        with pytest.warns(DopplermapWarning, match=pattern) as seen:
            diagnostics.check_result(_fake_result(**kw), obs, tol=1e-5, maxiter=100)
        if "light curve" in pattern:  # a light curve's advice speaks of light curves, not of lines or LSD codes
            said = " ".join(str(w.message) for w in seen)
            assert "line depth" not in said and "LSD" not in said
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diagnostics.check_result(_fake_result(), obs, tol=1e-5, maxiter=100)


def test_line_search_failure_advice_fits_the_tolerance():
    """Below float32's rounding the advice is a larger tol or float64; at or above it (what a grid
    solves at) it does not ask for the tol already given; scipy's bare "ABNORMAL: " is named as such."""
    obs = types.SimpleNamespace(vels=np.linspace(-60, 60, 24))
    failed = _fake_result(success=False, stop_reason="ABNORMAL: ")
    with pytest.warns(DopplermapWarning, match=r"\(ABNORMAL\) before meeting tol=1e-08: .*use tol >= 1e-6") as rec:
        diagnostics.check_result(failed, obs, tol=1e-8, maxiter=100)
    with pytest.warns(DopplermapWarning, match=r"tol=1e-06: the loss may have reached its rounding") as rec:
        diagnostics.check_result(failed, obs, tol=1e-6, maxiter=100)
    assert not any("tol >= 1e-6" in str(w.message) for w in rec)


def test_velocities_in_m_per_s_warn(small):
    with pytest.warns(DopplermapWarning, match="m/s"):
        diagnostics.check_velocity_window(np.linspace(-60000, 60000, 24), 40.0)
    with pytest.warns(DopplermapWarning, match="does not fit"):
        diagnostics.check_velocity_window(np.linspace(-0.06, 0.06, 24), 40.0)


def test_api_arguments_are_checked_where_they_enter(small):
    for kw, name in ((dict(tol=-1.0), "tol"), (dict(tol=0.0), "tol"), (dict(maxiter=0), "maxiter"),
                     (dict(maxiter=-5), "maxiter"), (dict(lmbd=-1.0), "lmbd")):
        with pytest.raises(DopplermapInputError, match=name):
            dm.invert(small.pre, small.sim.obs, **kw)
    from dopplermap.solvers import invert_batch, invert_device

    with pytest.raises(DopplermapInputError, match="tol"):
        invert_device(small.pre, small.sim.obs, tol=-1.0)
    with pytest.raises(DopplermapInputError, match="lmbds"):
        invert_batch(small.pre, small.sim.obs, lmbds=[1.0, -2.0])


# ------------------------------------------------------------ 2. output folders


def _demo(out, *extra):
    return main(["demo", "--n-cell", "100", "--out", str(out), "--no-plots", "--quiet", *extra])


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "res"
    assert _demo(out) == 0
    return out


def test_summary_lists_warnings_and_nonconverged_exit(tmp_path, capsys):
    assert main(["simulate", "--out", str(tmp_path / "sim"), "--n-cell", "100", "--n-epoch", "10"]) == 0
    out = tmp_path / "seed"
    rc = main(["invert-seed", "--problem", str(tmp_path / "sim" / "problem.npz"), "--maxiter", "3", "--out", str(out),
               "--no-plots", "--quiet"])
    err = capsys.readouterr().err
    s = json.loads((out / "summary.json").read_text())
    assert rc == EXIT_NOT_CONVERGED and not s["success"]
    assert any("iteration limit" in w for w in s["warnings"]) and "iteration limit" in err
    assert "did not converge" in err and s["run_id"] and s["input_fingerprint"]


def test_out_is_checked_before_any_work(tmp_path, demo_dir, capsys, monkeypatch):
    import dopplermap.app.demo as demo_mod

    def no_work(*a, **k):
        raise AssertionError("work started before --out was checked")

    monkeypatch.setattr(demo_mod, "run_demo", no_work)
    user = tmp_path / "mine"
    user.mkdir()
    (user / "summary.json").write_text('{"my": "notes"}')
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    cases = [(tmp_path / "no" / "such" / "dir", "parent folder"), (afile, "is a file"),
             (user, "not a dopplermap result folder"), (demo_dir, "--overwrite")]
    for out, pattern in cases:
        assert _demo(out) == 2, out
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("error:") and pattern in err, err
    assert (user / "summary.json").read_text() == '{"my": "notes"}'


def test_invert_seed_and_lambda_never_overwrite_user_files(tmp_path, demo_dir, capsys):
    user = tmp_path / "mine"
    user.mkdir()
    (user / "summary.json").write_text("user's")
    (user / "lambda.json").write_text("user's too")
    before = sorted(p.name for p in demo_dir.iterdir())
    for args in (["invert-seed", "--problem", "x.npz", "--out", str(user)],
                 ["invert-seed", "--problem", "x.npz", "--out", str(demo_dir)],
                 ["lambda", "--out", str(user)],
                 ["plot", str(demo_dir), "--out", str(user)],
                 ["simulate", "--out", str(user)]):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error: --out") and err.count("\n") == 1, err
    assert (user / "summary.json").read_text() == "user's" and (user / "lambda.json").read_text() == "user's too"
    assert sorted(p.name for p in demo_dir.iterdir()) == before
    assert "holds a dopplermap result output, not a seed-result" in (
        main(["invert-seed", "--problem", "x.npz", "--out", str(demo_dir)]) and capsys.readouterr().err)
    npz = tmp_path / "p.npz"
    npz.write_text("mine")
    assert main(["convert", "--idc", "a", "--sg", "b", "--cpcs", "c", "--out", str(npz)]) == 2
    assert "--overwrite" in capsys.readouterr().err and npz.read_text() == "mine"


def test_overwrite_replaces_a_result_atomically(tmp_path, demo_dir):
    out = tmp_path / "res"
    shutil.copytree(demo_dir, out)
    run0 = json.loads((out / "dopplermap.json").read_text())["run_id"]
    assert _demo(out, "--overwrite", "--lmbd", "2") == 0
    m = json.loads((out / "dopplermap.json").read_text())
    assert m["run_id"] != run0 and m["kind"] == "result" and m["complete"]
    assert dm.load_result(out).lmbd == 2.0
    assert [p.name for p in tmp_path.iterdir()] == ["res"]  # no temporary folder left
    mode = (out / "map.fits").stat().st_mode & 0o777
    assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {mode}  # one file mode


def test_plot_refuses_a_folder_that_mixes_runs(tmp_path, demo_dir, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(demo_dir, a)
    assert _demo(b, "--lmbd", "3") == 0
    shutil.copyfile(b / "map.fits", a / "map.fits")
    with pytest.raises(DopplermapInputError, match="map.fits does not match dopplermap.json"):
        dm.load_result(a)
    assert main(["plot", str(a), "--out", str(tmp_path / "figs")]) == 2
    assert "map.fits does not match" in capsys.readouterr().err and not (tmp_path / "figs").exists()
    (a / "dopplermap.json").unlink()  # without the manifest nothing says the files belong together
    with pytest.raises(DopplermapInputError, match="no dopplermap.json"):
        dm.load_result(a)


def test_plot_out_is_an_atomic_folder(tmp_path, demo_dir):
    figs = tmp_path / "figs"
    assert main(["plot", str(demo_dir), "--out", str(figs), "--max-profiles", "4"]) == 0
    m = json.loads((figs / "dopplermap.json").read_text())
    assert m["kind"] == "figures" and m["files"] and all((figs / f).is_file() for f in m["files"])
    assert main(["plot", str(demo_dir), "--out", str(figs)]) == 2  # again only with --overwrite


def _one_error(capsys, *parts) -> str:
    """The command's stderr: one line ``error: ...`` holding every one of ``parts``."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "internal error" not in err, err
    assert all(p in err for p in parts), (parts, err)
    return err


@pytest.fixture(scope="module")
def other_run(tmp_path_factory, demo_dir):
    """A result folder of another run of the same star (same files, another run id): no solve."""
    out = tmp_path_factory.mktemp("other") / "res"
    dm.save_result(dm.load_result(demo_dir), out, plots=False)
    return out


@pytest.mark.parametrize("case", ["summary edited", "map from another run"])
def test_report_plot_and_load_result_refuse_a_tampered_or_mixed_folder(tmp_path, demo_dir, other_run, capsys, case):
    d = tmp_path / "res"
    shutil.copytree(demo_dir, d)
    if case == "summary edited":  # the reported case: chi2 shown as 0.5
        s = json.loads((d / "summary.json").read_text())
        s["chi2"] = 0.5
        (d / "summary.json").write_text(json.dumps(s, indent=2))
        name = "summary.json"
    else:
        shutil.copyfile(other_run / "map.fits", d / "map.fits")
        name = "map.fits"
    with pytest.raises(DopplermapInputError, match=f"{d}: {name} does not match dopplermap.json"):
        dm.load_result(d)
    for args in (["report", str(d), "--overwrite"], ["report", str(d), "--out", str(tmp_path / "r.html")],
                 ["plot", str(d), "--out", str(tmp_path / "figs")], ["plot", str(d), "--overwrite"]):
        assert main(args) == 2, args
        _one_error(capsys, str(d), name, "does not match dopplermap.json", "run ")
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "figs").exists()
    assert not list(d.glob("*.png"))
    # the untouched folders are read and reported
    assert main(["report", str(other_run), "--out", str(tmp_path / "ok.html")]) == 0
    assert dm.load_result(other_run).chi2 == dm.load_result(demo_dir).chi2


def test_a_folder_without_manifest_is_refused_and_never_replaced(tmp_path, demo_dir, capsys):
    """No release wrote result folders without a manifest; without one nothing says the files
    belong together, so such a folder is neither read nor replaced."""
    d = tmp_path / "res"
    shutil.copytree(demo_dir, d)
    (d / "dopplermap.json").unlink()
    with pytest.raises(DopplermapInputError, match="no dopplermap.json"):
        dm.load_result(d)
    for args in (["report", str(d), "--overwrite"], ["plot", str(d), "--out", str(tmp_path / "figs")]):
        assert main(args) == 2
        _one_error(capsys, str(d), "no dopplermap.json")
    before = sorted(p.name for p in d.iterdir())
    assert _demo(d, "--overwrite") == 2
    _one_error(capsys, "is not a dopplermap result folder")
    assert sorted(p.name for p in d.iterdir()) == before


def test_report_and_plot_replace_their_outputs_only_with_overwrite(tmp_path, demo_dir, capsys):
    d = tmp_path / "res"
    shutil.copytree(demo_dir, d)
    report = d / "report.html"
    report.write_text("my edited report")  # the demo's report, edited by hand
    assert main(["report", str(d)]) == 2
    _one_error(capsys, str(report), "exists", "--overwrite")
    assert report.read_text() == "my edited report"
    assert main(["report", str(d), "--overwrite"]) == 0
    assert report.read_text().startswith("<!DOCTYPE html>")
    assert dm.load_result(d).lmbd == 1.0  # a report redrawn in place leaves the folder readable
    capsys.readouterr()
    (d / "map_rect.png").write_text("not drawn by this run")
    assert main(["plot", str(d), "--dpi", "30", "--max-profiles", "2", "-q"]) == 2  # -q: the error line alone
    _one_error(capsys, str(d), "map_rect.png", "--overwrite")
    assert sorted(p.name for p in d.glob("*.png")) == ["map_rect.png"]  # refused before drawing


@pytest.mark.slow
def test_figures_redrawn_in_place_keep_the_folder_readable(tmp_path, demo_dir):
    d = tmp_path / "res"
    shutil.copytree(demo_dir, d)
    (d / "map_rect.png").write_text("not drawn by this run")
    assert main(["plot", str(d), "--dpi", "30", "--max-profiles", "2", "--overwrite"]) == 0
    assert (d / "map_rect.png").read_bytes()[:4] == b"\x89PNG" and (d / "map_mollweide.png").is_file()
    assert main(["report", str(d), "--overwrite"]) == 0  # redrawn figures: still the run's folder
    assert dm.load_result(d).lmbd == 1.0


def test_a_symlinked_out_is_refused_never_replaced(tmp_path, demo_dir, capsys):
    """An output is replaced by a rename, which would put a real folder in place of the link
    and leave the folder it points to with the old result: refused, nothing changed."""
    real = tmp_path / "real"
    shutil.copytree(demo_dir, real)
    link = tmp_path / "link"
    link.symlink_to(real)
    run0 = json.loads((real / "dopplermap.json").read_text())["run_id"]
    for args in (["demo", "--n-cell", "100", "--out", str(link), "--overwrite", "--no-plots", "--quiet"],
                 ["plot", str(demo_dir), "--out", str(link), "--overwrite"],
                 ["simulate", "--out", str(link), "--overwrite"]):
        assert main(args) == 2, args
        _one_error(capsys, f"--out {link} is a symbolic link", str(real))
    html = tmp_path / "report.html"
    html.write_text("mine")
    (tmp_path / "r.html").symlink_to(html)
    assert main(["report", str(demo_dir), "--out", str(tmp_path / "r.html"), "--overwrite"]) == 2
    _one_error(capsys, "is a symbolic link")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    assert main(["simulate", "--out", str(dangling)]) == 2
    _one_error(capsys, "is a symbolic link")
    assert link.is_symlink() and (tmp_path / "r.html").is_symlink() and html.read_text() == "mine"
    assert json.loads((real / "dopplermap.json").read_text())["run_id"] == run0
    assert not (tmp_path / "nowhere").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_killed_runs_leave_no_hidden_work_folder(tmp_path):
    """Every hidden work folder or file of a dead run beside the target (the partial folder,
    the figures drawn for it, an atomic file's temporary) is cleared by the next run; a live
    process's is left alone, and so are the user's hidden files."""
    import subprocess
    import sys

    from dopplermap import atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    out = tmp_path / "res"
    left = [f".res.partial-{dead}-a1b2", f".res.figures-{dead}-c3d4"]
    for name in left:
        (tmp_path / name).mkdir()
        (tmp_path / name / "map_rect.png").write_text("half drawn")
    (tmp_path / f".res.tmp-{dead}-g7h8").write_text("half written")
    live = tmp_path / f".res.figures-{os.getppid()}-i9j0"  # a running process (the test's parent)
    live.mkdir()
    (tmp_path / ".res.notes").write_text("the user's")
    with pytest.warns(dm.DopplermapWarning) as seen:
        atomic.check_out(out, "result")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".res.notes", live.name])
    assert sum("left by a killed run" in str(w.message) for w in seen) == 3
    assert any("belongs to a running dopplermap process" in str(w.message) for w in seen)
    # the work folders a run makes have names the clean-up knows: figures staged for a folder,
    # a partial folder, an atomic file's temporary
    made = atomic.work_folder(out, "figures")
    assert atomic._LEFTOVER.match(made.name)["what"] == "figures" and made.parent == tmp_path
    seen_tmp = []

    def write(fh):  # the temporary file, as a kill at this moment would leave it
        seen_tmp.extend(p.name for p in tmp_path.glob(".report.html.*"))
        fh.write("x")

    atomic.write_file(tmp_path / "report.html", write, binary=False)
    m = atomic._LEFTOVER.match(seen_tmp[0])
    assert m["name"] == "report.html" and m["what"] == "tmp" and int(m["pid"]) == os.getpid()


# ------------------------------------------------------------------ 5. exit codes


def test_exit_codes_are_honest(tmp_path, capsys, monkeypatch):
    import dopplermap.app.demo as demo_mod

    def bug(*a, **k):
        raise ValueError("an internal inconsistency")

    monkeypatch.setattr(demo_mod, "run_demo", bug)
    assert _demo(tmp_path / "a") == 1  # a bare ValueError from inside is a bug
    err = capsys.readouterr().err
    assert "Traceback" in err and "ValueError: an internal inconsistency" in err and "report" in err

    def disk_full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "a" / "map.fits"))

    monkeypatch.setattr(demo_mod, "run_demo", disk_full)
    assert _demo(tmp_path / "a") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: No space left on device")
    assert main(["demo", "--no-such-option"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error:") and "--no-such-option" in err
    assert main(["invert-seed", "--tol", "-1", "--out", str(tmp_path / "s")]) == 2
    assert "--tol" in capsys.readouterr().err
    monkeypatch.undo()
    assert main(["init", str(tmp_path / "t.toml"), "-v"]) == 0  # -v after the subcommand


def test_progress_marks_a_failed_step():
    import io

    from rich.console import Console

    from dopplermap.progress import Reporter

    buf = io.StringIO()
    with pytest.raises(RuntimeError), Reporter(console=Console(file=buf, force_terminal=False, width=100)) as rep:
        with rep.step("read"):
            pass
        with rep.step("precompute"):
            raise RuntimeError("boom")
    lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    read = next(ln for ln in lines if "read" in ln)
    pre = next(ln for ln in lines if "precompute" in ln)
    assert "✓" in read and "✗" in pre and "failed" in pre and "✓" not in pre


def test_dask_scheduler_unreachable_is_a_clear_error():
    pytest.importorskip("dask.distributed")
    with pytest.raises(DopplermapInputError, match=r"could not connect within 0.5 s"):
        search.Cluster("tcp://127.0.0.1:1", connect_timeout=0.5).connect()
    with pytest.raises(DopplermapInputError, match="n_workers"):
        search.Cluster(n_workers=-1).connect()


# ---------------------------------------------------------------- 3. searches


@pytest.fixture(scope="module")
def sprob(small):
    return search.Problem(grid=small.grid, star=small.star, obs=small.sim.obs, components=small.comps)


def test_grid_resume_refuses_other_settings_or_problem(sprob, small, tmp_path):
    table = tmp_path / "grid.csv"
    axes = {"vsini": [38.0, 40.0]}
    settings = Settings(lmbd=1.0, tol=1e-5)
    rows = search.grid_search(sprob.replace(settings=settings), axes, table)
    assert {r["lmbd"] for r in rows} == {1.0} and {r["regulariser_kind"] for r in rows} == {"mem"}
    assert len({r["problem"] for r in rows}) == 1 and {r["tol"] for r in rows} == {1e-5}
    text = table.read_text()
    with pytest.raises(DopplermapInputError, match=r"resume refused.*lmbd 1.0 in the table vs 10.0 now"):
        search.grid_search(sprob.replace(settings=Settings(lmbd=10.0, tol=1e-5)), axes, table, resume=True)
    other = search.Problem(grid=small.grid, star=small.star.replace(inclination=50.0), obs=small.sim.obs,
                           components=small.comps)
    with pytest.raises(DopplermapInputError, match="resume refused.*problem fingerprint"):
        search.grid_search(other.replace(settings=settings), axes, table, resume=True)
    assert table.read_text() == text  # refused before touching the table


@pytest.mark.slow
def test_cli_grid_resume_with_another_lambda_is_refused(tmp_path, capsys):
    out = tmp_path / "g"
    base = ["grid", "--n-cell", "100", "--n-epoch", "8", "--n-vel", "16", "--out", str(out), "--param",
            "vsini=39.5:40:0.5", "--scheduler", "sync", "--tol", "1e-4"]
    assert main(base) == 0
    assert [r["vsini"] for r in search.read_table(out / "grid.csv")] == [39.5, 40.0]  # a float step
    assert main(base + ["--resume", "--lmbd", "10"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error:") and "lmbd 1.0 in the table vs 10.0 now" in err


def test_every_grid_value_is_validated_before_the_first_solve(sprob, tmp_path, monkeypatch):
    monkeypatch.setattr(search, "evaluate_point", lambda *a, **k: pytest.fail("solved before validating"))
    for axes, pattern in (({"inclination": [50.0, 60.0, 120.0]}, "inclination=120"),
                          ({"vsini": [40.0, -1.0]}, "vsini"), ({"macro_gauss": [0.0, -2.0]}, "macro_gauss"),
                          ({"ew_scale": [1.0, 50.0]}, "ew_scale")):
        with pytest.raises(DopplermapInputError, match=pattern):
            search.grid_search(sprob, axes, tmp_path / "t.csv")
        assert not (tmp_path / "t.csv").exists()


# the physics of the refusal, written out (not dopplermap's constants): SI and cgs values
G_CGS, M_SUN_G, R_SUN_CM, DAY = 6.6743e-8, 1.98841e33, 6.957e10, 86400.0


def _radius_rsun(star, inclination):
    return star.period * DAY * star.vsini * 1e5 / (2 * np.pi * np.sin(np.radians(inclination))) / R_SUN_CM


def test_grid_records_a_refused_point_and_solves_the_others(sprob, small, tmp_path):
    mass = 1.0
    prob = sprob.replace(mass=mass, settings=Settings(lmbd=1.0, tol=1e-5))
    # the Roche parameter omega^2 R^3 / (G M) of each point: 10 deg is beyond break-up, 60 deg is not
    omega = 2 * np.pi / (small.star.period * DAY)
    w = {i: omega ** 2 * (_radius_rsun(small.star, i) * R_SUN_CM) ** 3 / (G_CGS * mass * M_SUN_G) for i in (10, 60)}
    assert w[10] > 1 > w[60]
    table = tmp_path / "grid.csv"
    rows = search.grid_search(prob, {"inclination": [10.0, 60.0]}, table)
    assert [r["inclination"] for r in rows] == [10.0, 60.0]
    refused, solved = rows
    assert refused["status"] == "refused" and "break-up" in refused["reason"] and f"{w[10]:.3f}" in refused["reason"]
    assert np.isnan(refused["chi2"]) and np.isnan(refused["chi2_total"]) and refused["iterations"] == 0
    assert solved["status"] == "ok" and solved["reason"] == "" and np.isfinite(solved["chi2"])
    assert solved["iterations"] > 0
    for r in rows:  # the implied radius and log g of every row, refused or not
        radius = _radius_rsun(small.star, r["inclination"])
        assert r["radius"] == pytest.approx(radius, rel=1e-4)
        assert r["logg"] == pytest.approx(np.log10(G_CGS * mass * M_SUN_G / (radius * R_SUN_CM) ** 2), abs=1e-4)
    # the reason holds commas: quoted in the CSV, read back whole
    assert search.read_table(table)[0]["reason"] == refused["reason"]
    # the best point and the intervals are the solved points'; a best point beside refused ones is flagged
    assert search.best_point(rows, ["inclination"], column="chi2_total")["inclination"] == 60.0
    iv = search.delta_chi2_interval(rows, "inclination")
    assert iv["best"] == 60.0 and iv["best_at_edge"] and iv["refused_beyond"]
    assert any("next to refused ones" in f for f in search.interval_flags(iv, "inclination"))
    # without a mass nothing is refused
    assert search.point_refusal(sprob, {"inclination": 10.0}) is None
    with pytest.raises(DopplermapInputError, match="every one of the 1 grid points was refused"):
        search.best_point(rows[:1], ["inclination"])


def test_interval_flags_name_the_edge_and_the_chi2():
    base = dict(best=40.0, best_at_edge=False, refused_beyond=False)
    assert search.interval_flags(dict(base, chi2_best=1.0)) == []
    assert search.interval_flags(dict(base, chi2_best=diagnostics.INTERVAL_CHI2_LOW)) == []
    low = search.interval_flags(dict(base, chi2_best=0.28), "inclination")
    assert len(low) == 1 and "0.28, below" in low[0] and "mis-scaled" in low[0]
    assert "above" in search.interval_flags(dict(base, chi2_best=3.0))[0]
    edge = search.interval_flags(dict(base, best_at_edge=True, chi2_best=1.0), "vsini")
    assert len(edge) == 1 and "best vsini value 40 lies on the grid's edge" in edge[0]


def test_cli_grid_lists_refused_points_radii_and_flags(tmp_path, capsys, monkeypatch):
    import dopplermap.app.search as app_search

    load = app_search.load_problem
    monkeypatch.setattr(app_search, "load_problem", lambda *a, **k: load(*a, **k).replace(mass=1.0))
    out = tmp_path / "g"
    rc = main(["grid", "--n-cell", "100", "--n-epoch", "8", "--n-vel", "16", "--out", str(out), "--param",
               "inclination=5:65:n3", "--scheduler", "sync", "--tol", "1e-4", "-q"])
    assert rc == 0
    cap = capsys.readouterr()
    summary = json.loads((out / "grid.json").read_text())
    assert [r["inclination"] for r in summary["refused"]] == [5.0]
    assert "1 of 3 points refused" in cap.out and "break-up" in cap.out
    table = [ln.split() for ln in cap.out.splitlines() if ln.split()[:1] in (["5"], ["35"], ["65"])]
    assert [t[-1] for t in table] == ["refused", "ok", "ok"]
    rows = search.read_table(out / "grid.csv")
    assert [f"{r['radius']:.3g}" for r in rows] == [t[2] for t in table]  # the radius printed beside each point
    # two solved values: the best is on an edge, flagged in grid.json, on stdout and in a warning naming --calibrate
    iv = summary["intervals"]["inclination"]
    assert iv["best_at_edge"] and any("edge" in f for f in iv["flags"])
    assert "NOT TO BE TRUSTED" in cap.out and "warning: grid interval of inclination" in cap.err
    assert "--calibrate" in cap.err
    assert iv["flags"] == search.interval_flags(search.delta_chi2_interval(rows, "inclination"), "inclination")


def _sleeper():
    """A live process that is not this one (the owner of a lock in the tests)."""
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def test_a_second_process_on_a_grid_is_refused(sprob, tmp_path, capsys):
    import socket

    from dopplermap.atomic import lock_path

    out = tmp_path / "g"
    out.mkdir()
    table = out / "grid.csv"
    table.write_text("point,vsini\n")  # a grid folder another process is working on
    lock = lock_path(table)
    holder = _sleeper()
    try:
        lock.write_text(f"{holder.pid} {socket.gethostname()}\n")
        with pytest.raises(DopplermapInputError, match=f"in use by process {holder.pid} .*{lock.name}"):
            search.grid_search(sprob, {"vsini": [39.0, 40.0]}, table, resume=True)
        rc = main(["grid", "--n-cell", "100", "--n-epoch", "8", "--n-vel", "16", "--out", str(out), "--param",
                   "vsini=39,40", "--scheduler", "sync", "--resume"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and err[-1].startswith("error:") and f"process {holder.pid}" in err[-1]
        assert table.read_text() == "point,vsini\n" and lock.read_text().startswith(f"{holder.pid} ")
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_lock_is_taken_over_and_a_held_one_released(tmp_path):
    import os
    import socket

    from dopplermap.atomic import exclusive_lock, lock_path

    table = tmp_path / "grid.csv"
    lock = lock_path(table)
    dead = _sleeper()
    dead.kill()
    dead.wait()
    lock.write_text(f"{dead.pid} {socket.gethostname()}\n")
    with pytest.warns(DopplermapWarning, match=f"stale lock.*process {dead.pid}, no longer running"):
        with exclusive_lock(table):
            assert lock.read_text() == f"{os.getpid()} {socket.gethostname()}\n"
            with exclusive_lock(table):  # this process again: no second lock, no error
                pass
            assert lock.exists()
    assert not lock.exists()
    with warnings.catch_warnings():  # a free table: no warning
        warnings.simplefilter("error")
        with exclusive_lock(table):
            pass
    # a lock of another host cannot be checked: it is held
    lock.write_text(f"{dead.pid} another-host.example\n")
    with pytest.raises(DopplermapInputError, match="on another-host.example"):
        with exclusive_lock(table):
            pass


@pytest.mark.slow
def test_two_grid_processes_on_one_folder(tmp_path, capsys):
    """Two real processes: the second (a resume) is refused while the first runs; the first
    finishes with every point written once."""
    import subprocess
    import sys
    import time

    out = tmp_path / "g"
    args = ["grid", "--n-cell", "100", "--n-epoch", "8", "--n-vel", "16", "--out", str(out), "--param",
            "vsini=30:50:1", "--scheduler", "sync", "--tol", "1e-4", "-q"]
    first = subprocess.Popen([sys.executable, "-m", "dopplermap.cli", *args], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (out / "grid.csv").exists() and first.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert first.poll() is None, "the first search ended before the second could start"
        assert main([*args, "--resume"]) == 2
        assert f"in use by process {first.pid}" in capsys.readouterr().err
        _, err = first.communicate(timeout=300)
    finally:
        first.kill()
        first.wait()
    assert first.returncode == 0, err[-2000:]
    rows = search.read_table(out / "grid.csv")
    assert [r["point"] for r in rows] == list(range(21))
    assert not (out / "grid.csv.lock").exists()


# ------------------------------------------------------------- 4. size guards


def test_memory_guards_refuse_before_allocating(small, monkeypatch, capsys):
    with pytest.raises(DopplermapInputError, match="reduce n_cell"):
        dm.latitude_band_grid(10 ** 12)
    with pytest.raises(DopplermapInputError, match="use a larger step for vsini"):
        search.grid_points({"vsini": np.arange(1.0, 2e5)})
    assert main(["grid", "--param", "vsini=1:1e9:1", "--out", "x"]) == 2
    assert "1e+09 points" in capsys.readouterr().err
    monkeypatch.setenv("DOPPLERMAP_MAX_MEMORY", "100K")
    with pytest.raises(DopplermapInputError, match=r"precompute .* more than the limit"):
        dm.precompute(small.grid, small.star, small.times, small.vels, small.comps)
    monkeypatch.delenv("DOPPLERMAP_MAX_MEMORY")
    assert main(["--max-memory", "10K", "demo", "--out", "x", "--n-cell", "5000"]) == 2
    assert "reduce n_cell" in capsys.readouterr().err
    assert "DOPPLERMAP_MAX_MEMORY" not in os.environ  # the limit ends with the command
    monkeypatch.setenv("DOPPLERMAP_MAX_MEMORY", "64G")
    assert main(["--max-memory", "10K", "demo", "--out", "x", "--n-cell", "5000"]) == 2
    assert os.environ["DOPPLERMAP_MAX_MEMORY"] == "64G"  # and a limit set before it is restored


def test_healpix_guard():
    pytest.importorskip("healpy")
    with pytest.raises(DopplermapInputError, match="reduce nside"):
        dm.healpix_grid(2 ** 20)


def test_a_warning_raised_by_several_solves_is_listed_once_with_its_count(capsys):
    """The run's summary lists each warning once; one that several solves raised (a sweep's points
    stopping at maxiter) says how many times, so a reader does not take it for one solve's."""
    from dopplermap.cli import _print_warnings
    from dopplermap.errors import collect_warnings, warn

    with collect_warnings() as seen:
        for _ in range(3):
            warn("solve stopped on the iteration limit")
        warn("another")
    assert list(seen) == ["solve stopped on the iteration limit", "another"]
    _print_warnings(seen)
    err = capsys.readouterr().err.splitlines()
    assert err[1:] == ["  warning: solve stopped on the iteration limit (3 times)", "  warning: another"]
