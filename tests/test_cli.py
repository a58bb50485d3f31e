import json

from dopplermap.cli import main


def test_demo_small_runs_and_writes_summary(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--n-cell", "300", "--out", str(out), "--no-plots", "--quiet"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["n_cell"] == 300 and s["n_epoch"] == 150 and s["n_vel"] == 32
    assert s["iterations"] > 0 and s["chi2"] > 0
    assert "chi2" in capsys.readouterr().out


def test_user_error_is_one_line(tmp_path, capsys):
    rc = main(["demo", "--snr", "-5", "--n-cell", "300", "--out", str(tmp_path / "x"), "--no-plots", "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "snr" in err[0]


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "dopplermap, version" in capsys.readouterr().out
