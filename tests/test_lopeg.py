"""LO Peg end to end: `dopplermap import-zdipy` on ZDIpy's real set-up, then `dopplermap invert`
on the written TOML without edits (the recipe of docs/observations.md and examples/lopeg.py)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dopplermap as dm
from dopplermap.cli import main

LOPEG = Path(__file__).resolve().parents[2] / "shared" / "data" / "lopeg"


def test_lopeg_import_and_invert(tmp_path):
    if not (LOPEG / "inzdi.dat").is_file():
        pytest.skip(f"LO Peg data not found at {LOPEG} (the shared data folder is absent)")
    toml = tmp_path / "lopeg.toml"
    assert main(["import-zdipy", str(LOPEG / "inzdi.dat"), str(LOPEG / "model-voigt-line.dat"), "--out", str(toml),
                 "--teff", "4500", "--spot-teff", "3500"]) == 0
    # a fresh interpreter, as a user runs it (astropy not yet imported: the result writers are
    # imported in a background thread while the data are read)
    run = subprocess.run([sys.executable, "-m", "dopplermap.cli", "invert", str(toml), "--out", str(tmp_path / "res"),
                          "--quiet", "--no-plots"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert summary["complete"] and summary["n_epoch"] == 16 and summary["n_cell"] == 4584 and summary["n_vel"] == 89
    res = dm.load_result(tmp_path / "res")
    # the importer asks for the LSD errors scaled to the scatter; ZDIpy's window holds no continuum beyond
    # vsini, so the residuals of a fit set the factor (the errors are several times the scatter)
    scale = summary["error_scale"]
    assert scale["method"] == "residuals" and 0.15 < scale["factor"] < 0.45 and len(scale["sets"][0]["per_epoch"]) == 16
    assert f"error scale {scale['factor']:.4g} (residuals" in run.stdout
    # the scaled errors' chi2 per residual degree of freedom beside it (the map absorbs part of the noise)
    dof = summary["chi2_dof"]
    assert dof["n"] == 16 * 89 and 0 < dof["p_eff"] < dof["n"] and dof["chi2_nu"] > summary["chi2"]
    assert f"({dof['chi2_nu']:.4f} per residual dof" in run.stdout
    # the fit explains the spot signatures: far below the spotless star's chi2, and near 1 in the scaled errors
    obs = res.obs
    spotless_chi2 = float(np.mean(((np.asarray(obs.flux) - res.spotless) / np.asarray(obs.err)) ** 2))
    assert 0.5 < res.chi2 < 2.0 and res.chi2 < 0.2 * spotless_chi2
    # cool spots only: the hot map is held at its floor
    assert np.ptp(res.fssh) == 0.0 and summary["fit_components"] == ["cool"]
    # LO Peg's cool spots sit at high latitude (Folsom et al. 2016): the cap is far more spotted
    lat = np.degrees(res.grid.lat)
    area = np.asarray(res.grid.area)

    def cover(sel):
        return float(np.sum(area[sel] * res.fssc[sel]) / np.sum(area[sel]))

    assert cover(lat > 60) > 0.3 and cover(lat > 60) > 3 * cover((lat > -30) & (lat < 30))
