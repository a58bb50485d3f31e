"""Error scales and the residual degrees of freedom on LO Peg and on a simulated LO Peg.

LO Peg (``import-zdipy`` of ``shared/data/lopeg``): the error scale from the residuals of a fit
(ZDIpy's window, what ``error_scale = "auto"`` does there) and from the continuum (the window
widened to -180..180 km/s); then, in the scaled errors, a lambda sweep, its L-curve corner and
the lambda of reduced chi2 1, with the influence matrix's effective parameters and residual
degrees of freedom (:func:`dopplermap.uncertainty.effective_dof`) at both.

The control: a star with LO Peg's epochs, velocities, vsini and grid, whose truth is LO Peg's
map at chi2 = 1, noise of LO Peg's scaled size, errors delivered 2x too large (true factor
0.5), white or LSD-like correlated between neighbouring pixels (moving average, lag-1
correlation ``--rho``). Prints one JSON object per step and writes them all to ``--out``.

    PYTHONPATH=src python benchmarks/bench_errorscale_dof.py --out /tmp/errorscale_dof.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from dopplermap import invert, search
from dopplermap import uncertainty as U
from dopplermap.config import load_config
from dopplermap.errors import DopplermapWarning
from dopplermap.errorscale import error_scale_for
from dopplermap.model import forward
from dopplermap.problem import from_config

LOPEG = Path(__file__).resolve().parents[2] / "shared" / "data" / "lopeg"
LMBDS = np.logspace(-3, 2, 16)  # dopplermap lambda's default sweep
OUT: list = []


def emit(**kw):
    kw["load"] = os.getloadavg()[0]
    OUT.append(kw)
    print(json.dumps(kw, default=float), flush=True)


def tomls(folder: Path):
    toml = folder / "lopeg.toml"
    subprocess.run([sys.executable, "-m", "dopplermap.cli", "import-zdipy", str(LOPEG / "inzdi.dat"),
                    str(LOPEG / "model-voigt-line.dat"), "--out", str(toml), "--teff", "4500", "--spot-teff", "3500"],
                   check=True, capture_output=True)
    text = re.sub(r"(?m)^error_scale = .*\n(^ +#.*\n)*", "", toml.read_text())
    (folder / "raw.toml").write_text(text)
    (folder / "wide.toml").write_text(text.replace("velocity_range = [-80.0, 80.0]", "velocity_range = [-180.0, 180.0]"))
    return [from_config(load_config(folder / n)).single("bench") for n in ("raw.toml", "wide.toml")]


def polar_ratio(prob, res):
    lat = np.degrees(np.asarray(prob.grid.lat))
    area = np.asarray(prob.grid.area)
    f = np.asarray(res.fssc)

    def cover(sel):
        return float(np.sum(area[sel] * f[sel]) / np.sum(area[sel]))

    hi, lo, band = cover(lat > 60), cover(lat < 30), cover((lat > -30) & (lat < 30))
    return {"above60": hi, "below30": lo, "ratio": hi / lo, "band30": band, "ratio_band": hi / band}


def factors(narrow, wide):
    """Residuals (narrow window), continuum and residuals (wide window) of unscaled problems."""
    out = {}
    t = time.perf_counter()
    (r,), lm = search.fit_error_scale(narrow)
    out["residuals"] = {"factor": r.factor, "lambda": lm, "detail": r.detail, "time": time.perf_counter() - t}
    c = error_scale_for("continuum", wide.obs, wide.components, wide.star.vsini_kms)
    out["continuum_wide"] = {"factor": c.factor, "per_epoch": [min(c.per_epoch), max(c.per_epoch)], "detail": c.detail}
    t = time.perf_counter()
    (rw,), lmw = search.fit_error_scale(wide)
    out["residuals_wide"] = {"factor": rw.factor, "lambda": lmw, "detail": rw.detail, "time": time.perf_counter() - t}
    return out


def dof_row(prob, res):
    d = U.effective_dof(prob, res)
    return {"lmbd": float(res.lmbd), "chi2_n": d.chi2, "chi2_nu": d.chi2_nu, "p_eff": d.p_eff, "nu": d.nu,
            "n": d.n, "n_free": d.n_free, "time": d.time}


def choose(prob, what, polar=False):
    """Sweep, corner, chi2 = 1 lambda; effective dof at the corner, at chi2 = 1 and along the sweep."""
    t = time.perf_counter()
    sw = search.sweep_lambda(prob, LMBDS)
    corner, _ = search.lcurve_corner(sw)
    near = int(np.argmin(np.abs(np.log(sw.lmbd / corner))))
    at_corner = invert(prob, lmbd=corner, x0=sw.results[near].x)
    lt, rt, trials = search.lambda_for_chi2(prob, 1.0, sweep=sw)
    row = {"what": what, "sweep_time": time.perf_counter() - t, "corner": corner, "target_lambda": lt,
           "target_chi2": rt.chi2, "corner_dof": dof_row(prob, at_corner), "target_dof": dof_row(prob, rt),
           "sweep": [[float(lm), float(c)] for lm, c in zip(sw.lmbd, sw.chi2, strict=True)]}
    row["sweep_dof"] = [dof_row(prob, sw.results[i]) for i in (3, 6, 9)]
    if polar:
        row["target_polar"] = polar_ratio(prob, rt)
        row["corner_polar"] = polar_ratio(prob, at_corner)
    emit(**row)
    return rt


def simulate(narrow, wide, truth, sigma_narrow, sigma_wide, rho, seed):
    """Noisy simulations of ``truth`` in both windows (each its own noise draw), errors 2x the noise."""
    theta = 0.0 if rho == 0 else (1 - np.sqrt(1 - 4 * rho ** 2)) / (2 * rho)  # MA(1) with lag-1 correlation rho
    rng = np.random.default_rng(seed)
    out = []
    for prob, sig in ((narrow, sigma_narrow), (wide, sigma_wide)):
        pre = prob.pre
        nc = pre.n_cell
        clean = np.asarray(forward(jnp.asarray(truth[:nc]), jnp.asarray(truth[nc:2 * nc]),
                                   jnp.zeros(pre.n_epoch), jnp.zeros(pre.n_epoch), pre))
        e = rng.normal(size=(clean.shape[0], clean.shape[1] + 1))
        noise = (e[:, 1:] + theta * e[:, :-1]) / np.sqrt(1 + theta ** 2)
        obs = prob.obs
        sim = type(obs).create(obs.times, obs.vels, clean + noise * sig, 2.0 * sig, source="simulation")
        out.append(prob.with_observations(sim))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="errorscale_dof.json")
    ap.add_argument("--rho", type=float, default=0.23)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    warnings.filterwarnings("ignore", category=DopplermapWarning)
    with tempfile.TemporaryDirectory() as tmp:
        narrow, wide = tomls(Path(tmp))
    fac = factors(narrow, wide)
    emit(what="lopeg factors", **fac)
    f = fac["residuals"]["factor"]
    scaled = narrow.scale_errors([f])
    truth = choose(scaled, "lopeg (auto: residuals)", polar=True).x
    # the continuum's factor gives chi2 per point at small lambda
    sc = narrow.scale_errors([fac["continuum_wide"]["factor"]])
    r = invert(sc, lmbd=0.01 * (f / fac["continuum_wide"]["factor"]) ** 2)
    emit(what="lopeg, continuum factor", chi2_small_lambda=r.chi2, dof=dof_row(sc, r))
    sig_n = f * np.asarray(narrow.obs.err)
    sig_w = f * np.asarray(wide.obs.err)
    for rho in (0.0, a.rho):
        sn, sw_ = simulate(narrow, wide, truth, sig_n, sig_w, rho, a.seed)
        sf = factors(sn, sw_)
        emit(what=f"sim rho={rho}", true_factor=0.5, **sf)
        choose(sn.scale_errors([sf["residuals"]["factor"]]), f"sim rho={rho}, auto factor", polar=True)
        choose(sn.scale_errors([0.5]), f"sim rho={rho}, true factor 0.5", polar=True)
    Path(a.out).write_text(json.dumps(OUT, indent=1, default=float))


if __name__ == "__main__":
    main()
