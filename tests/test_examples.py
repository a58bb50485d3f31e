"""The worked examples ship in the package: ``dopplermap example`` writes them, and they run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import dopplermap.examples as examples
from dopplermap.cli import main


def test_listing_names_every_example(capsys):
    assert main(["example"]) == 0
    out = capsys.readouterr().out
    for name in examples.EXAMPLES:
        assert out.count(f"{name} ") >= 1


def test_example_writes_the_packaged_script_and_refuses_to_replace_it(tmp_path, capsys):
    assert main(["example", "observed_star", str(tmp_path)]) == 0
    written = tmp_path / "observed_star.py"
    packaged = Path(examples.__file__).with_name("observed_star.py")
    assert written.read_bytes() == packaged.read_bytes()
    assert f"python {written} --out example-run" in capsys.readouterr().out
    written.write_text("# mine\n")
    assert main(["example", "observed_star", str(tmp_path)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert written.read_text() == "# mine\n"  # not touched
    assert main(["example", "observed_star", str(tmp_path), "--overwrite"]) == 0
    assert written.read_bytes() == packaged.read_bytes()


@pytest.mark.parametrize("args, needle", [(["nope"], "'nope' does not exist"),
                                          (["lopeg", "no/such/folder"], "does not exist; create it first")])
def test_bad_example_arguments_are_one_line(tmp_path, capsys, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    assert main(["example", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_every_example_is_a_script_with_help(tmp_path):
    for name in examples.EXAMPLES:
        r = subprocess.run([sys.executable, "-m", f"dopplermap.examples.{name}", "--help"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "usage:" in r.stdout


@pytest.mark.slow
def test_observed_star_runs_as_written_and_recovers_its_spots(tmp_path, capsys):
    assert main(["example", "observed_star", str(tmp_path)]) == 0
    r = subprocess.run([sys.executable, "observed_star.py", "--quick", "--out", "run"], capture_output=True,
                       text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    for f in ("target.toml", "times.csv", "lightcurve.csv", "results/map.fits", "results/summary.json"):
        assert (tmp_path / "run" / f).is_file(), f
    line = next(s for s in r.stdout.splitlines() if s.startswith("correlation with the truth"))
    cool = float(line.split("cool")[1].split()[0])
    assert cool > 0.6, line  # a 300-cell, 16-epoch smoke run: the cool spots are found
    # an earlier run is not replaced without --overwrite
    again = subprocess.run([sys.executable, "observed_star.py", "--quick", "--out", "run"], capture_output=True,
                           text=True, cwd=tmp_path, timeout=120)
    assert again.returncode == 2 and "--overwrite" in again.stderr


def test_lopeg_refuses_a_folder_without_zdipy_data(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dopplermap.examples.lopeg", "--data", str(tmp_path), "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "inzdi.dat" in r.stderr and "Traceback" not in r.stderr


TESS = Path(__file__).resolve().parents[2] / "shared" / "data" / "tess" / \
    "tess2018206045859-s0001-0000000025155310-0120-s_lc.fits"


def test_tess_lightcurve_refuses_a_missing_file_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dopplermap.examples.tess_lightcurve", "--file", str(tmp_path / "no.fits"),
                        "--period", "7.2", "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no such file" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.skipif(not TESS.exists(), reason="the shared TESS sector (../shared/data/tess) is absent")
def test_tess_lightcurve_runs_on_the_real_sector(tmp_path):
    assert main(["example", "tess_lightcurve", str(tmp_path)]) == 0
    args = [sys.executable, "tess_lightcurve.py", "--file", str(TESS), "--period", "7.2", "--n-cell", "800",
            "--out", "run"]
    r = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    for f in ("target.toml", "results/map.fits", "results/summary.json", "results/uncertainty_laplace.npz",
              "results/uncertainty_sandwich.npz"):
        assert (tmp_path / "run" / f).is_file(), f
    assert sum(line.strip().startswith("longitude") for line in r.stdout.splitlines()) == 12
    summary = json.loads((tmp_path / "run" / "results" / "summary.json").read_text())
    assert summary["solver"] == "newton" and summary["n_epoch"] == 0
    again = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert again.returncode == 2 and "--overwrite" in again.stderr
