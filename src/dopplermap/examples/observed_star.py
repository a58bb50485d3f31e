"""Worked example: a folder of observations, as an astronomer would bring it, mapped end to end.

    dopplermap example observed_star .     # writes ./observed_star.py
    python observed_star.py [--out example-run] [--quick] [--overwrite]
    python -m dopplermap.examples.observed_star --out example-run    # the same, from the package

1. Simulates a spotted star with the physics of a real target: tabulated local profiles for
   three temperatures (files), instrument R = 65000, radial-tangential macroturbulence
   zeta = 3 km/s, and a V-band light curve. The truth is simulated on a finer grid
   (2000 cells) than the one inverted (800), so the inversion does not share its grid.
2. Writes the data set in the formats of real observations:
   * ``profiles/*.s`` - Donati-style LSD files; half in the 7-column spectropolarimetric
     layout, half in the 3-column layout; file names carry the BJD;
   * ``times.csv`` - file name, BJD;
   * ``lightcurve.csv`` - BJD, flux in detector units (e-/s), error;
   * ``local/{phot,cool,hot}.txt`` - synthetic local profiles (velocity, I/Ic);
   * ``target.toml`` - the target configuration.
3. Runs ``dopplermap invert target.toml --out results`` (a result folder: map.fits,
   profiles.fits, config, summary.json, figures), reads it back with ``dm.load_result``
   and compares the map with the truth.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import dopplermap as dm
from dopplermap.broadening import mu_dependent_profile, replace_profiles
from dopplermap.cli import main as cli_main
from dopplermap.io.lightcurve import write_lightcurve
from dopplermap.io.lsd import write_lsd
from dopplermap.lightcurve import LightCurveBand, simulate_lightcurve

BJD0 = 2459500.0
T_PHOT, T_COOL, T_HOT = 5000.0, 3800.0, 6000.0
LAMBDA_NM = 600.0
R_INSTR = 65000.0
ZETA = 3.0
LD_LINE = {"phot": 0.65, "cool": 0.75, "hot": 0.60}
LD_LC = {"phot": 0.72, "cool": 0.80, "hot": 0.66}
SPOTS = (dm.Spot(40.0, 40.0, 20.0, "cool", 0.9), dm.Spot(10.0, 160.0, 16.0, "cool", 0.8),
         dm.Spot(-15.0, 280.0, 18.0, "cool", 0.8), dm.Spot(55.0, 240.0, 14.0, "hot", 0.7))


def synthetic_local_profiles():
    """Voigt-like local profiles per temperature sampled every 0.5 km/s (as from a synthesis code)."""
    v = np.arange(-25.0, 25.0 + 1e-9, 0.5)
    shapes = {"phot": (0.55, 6.0, 2.0), "cool": (0.65, 5.5, 2.5), "hot": (0.45, 6.5, 1.5)}
    return v, {k: dm.voigt(*s)(v) for k, s in shapes.items()}


TOML = """# example target written by the observed_star example (dopplermap example observed_star)
[data]
profiles = ["profiles/*.s"]
times_table = "times.csv"
time_scale = "BJD"

[star]
inclination = 55.0
vsini = 35.0
period = 2.4
t0 = {t0}

[temperatures]
phot = {tp}
cool = {tc}
hot = {th}

[line]
wavelength_nm = {lam}
profile = "tabulated"
files = ["local/phot.txt", "local/cool.txt", "local/hot.txt"]
resolving_power = {R}
macroturbulence = {zeta}
limb_darkening = "linear"
ld_phot = [{ldp}]
ld_cool = [{ldc}]
ld_hot = [{ldh}]

[[lightcurves]]
file = "lightcurve.csv"
wavelength_nm = 550.0
limb_darkening = "linear"
ld_phot = [{lcp}]
ld_cool = [{lcc}]
ld_hot = [{lch}]

[grid]
kind = "bands"
n_cell = {n_cell}

[inversion]
regulariser = "mem"
lmbd = 1.0
line_weight = 1.0
lc_weight = 1.0
maxiter = {maxiter}
"""


def write_dataset(root: Path, *, n_epoch: int, n_cell: int, maxiter: int, seed: int = 7) -> dict:
    rng = np.random.default_rng(seed)
    star = dm.StarParams(inclination=55.0, vsini=35.0, period=2.4, t0=BJD0)
    truth_grid = dm.latitude_band_grid(2000)
    times = BJD0 + np.sort(rng.uniform(0.0, 3.0 * star.period, n_epoch))
    vels = np.linspace(-55.0, 55.0, 45)

    v_tab, tab = synthetic_local_profiles()
    (root / "local").mkdir(parents=True, exist_ok=True)
    for k, i in tab.items():
        body = "\n".join(f"{a:.4f} {b:.8f}" for a, b in zip(v_tab, i, strict=True))
        (root / "local" / f"{k}.txt").write_text(f"# velocity_km_s I/Ic  (T = {dict(phot=T_PHOT, cool=T_COOL, hot=T_HOT)[k]:.0f} K)\n{body}\n")
    intrinsic = [dm.tabulated(v_tab, tab[k]) for k in ("phot", "cool", "hot")]
    lds = [dm.LimbDarkening("linear", (LD_LINE[k],)) for k in ("phot", "cool", "hot")]
    comps = dm.ComponentSet.from_temperatures(T_PHOT, T_COOL, T_HOT, LAMBDA_NM, intrinsic, lds)
    mu_profiles = [mu_dependent_profile(p, ZETA, resolving_power=R_INSTR) for p in intrinsic]

    fssc, fssh = dm.spot_map(truth_grid, SPOTS)
    pre = dm.precompute(truth_grid, star, times, vels, replace_profiles(comps, mu_profiles))
    zero = jnp.zeros(n_epoch)
    clean = np.asarray(dm.forward(jnp.asarray(fssc), jnp.asarray(fssh), zero, zero, pre))
    sigma = np.full_like(clean, 1.0 / 600.0)
    noisy = clean + rng.normal(size=clean.shape) * sigma

    (root / "profiles").mkdir(exist_ok=True)
    rows = ["file,bjd"]
    for k, t in enumerate(times):
        name = f"star_BJD={t:.5f}.s"
        write_lsd(root / "profiles" / name, vels, noisy[k], sigma[k], fmt="donati", columns=7 if k % 2 else 3,
                  comment=f"LSD profile, BJD {t:.5f}")
        rows.append(f"{name},{t:.5f}")
    (root / "times.csv").write_text("\n".join(rows) + "\n")

    band = LightCurveBand.from_temperatures(T_PHOT, T_COOL, T_HOT, 550.0,
                                            [dm.LimbDarkening("linear", (LD_LC[k],)) for k in ("phot", "cool", "hot")])
    t_lc = BJD0 + np.linspace(0.0, 3.0 * star.period, 300)
    flux, err, _ = simulate_lightcurve(truth_grid, star, t_lc, band, fssc, fssh, sigma=1.5e-3, seed=seed + 1)
    counts = 2.4e5  # detector units: e-/s
    write_lightcurve(root / "lightcurve.csv", t_lc, flux * counts, err * counts, fmt="csv")

    (root / "target.toml").write_text(TOML.format(
        t0=BJD0, tp=T_PHOT, tc=T_COOL, th=T_HOT, lam=LAMBDA_NM, R=R_INSTR, zeta=ZETA, ldp=LD_LINE["phot"],
        ldc=LD_LINE["cool"], ldh=LD_LINE["hot"], lcp=LD_LC["phot"], lcc=LD_LC["cool"], lch=LD_LC["hot"],
        n_cell=n_cell, maxiter=maxiter))
    return dict(star=star, spots=SPOTS)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("example-run"))
    ap.add_argument("--quick", action="store_true", help="fewer epochs and cells (a smoke test)")
    ap.add_argument("--overwrite", action="store_true", help="replace the files of an earlier run in --out")
    args = ap.parse_args(argv)
    n_epoch, n_cell, maxiter = (16, 300, 150) if args.quick else (40, 800, 1000)
    root = args.out
    if root.is_dir() and any(root.iterdir()) and not args.overwrite:
        ap.exit(2, f"error: --out {root} is not empty; pass --overwrite to replace an earlier run there\n")
    root.mkdir(parents=True, exist_ok=True)
    info = write_dataset(root, n_epoch=n_epoch, n_cell=n_cell, maxiter=maxiter)
    print(f"data set written to {root}: profiles/, times.csv, lightcurve.csv, local/, target.toml")
    rc = cli_main(["invert", str(root / "target.toml"), "--out", str(root / "results"), "--overwrite"])
    if rc not in (0, 3):  # 3: written, but the solve stopped before its tolerance (see the warning)
        return rc
    res = dm.load_result(root / "results")  # map.fits, profiles.fits, summary.json
    true_c, true_h = dm.spot_map(res.grid, info["spots"])
    seen = np.degrees(res.grid.lat) > -info["star"].inclination
    corr_c = float(np.corrcoef(true_c[seen], res.fssc[seen])[0, 1])
    corr_h = float(np.corrcoef(true_h[seen], res.fssh[seen])[0, 1])
    summary = json.loads((root / "results" / "summary.json").read_text())
    print(f"correlation with the truth (cells ever seen): cool {corr_c:.3f}  hot {corr_h:.3f}; "
          f"chi2 {res.chi2:.3f}, light-curve chi2 {res.chi2_lc:.3f}; figures: {', '.join(summary['figures'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
