"""Benchmark: what a user waits for, whole runs in fresh processes (one process tree, one run).

    PYTHONPATH=src python benchmarks/bench_end_to_end.py [--seed-python PY] [--sizes seed large]
        [--workdir DIR] [--out benchmarks/results/end_to_end-cpu2.json] [--skip-seed]

1. The seed user's pickles (``dopplermap simulate --format seed-pickle``: seed size 2500
   cells x 150 epochs x 32 velocities, and 4010 x 150 x 41): the seed's own script
   (``seed_baseline.py`` in ``--seed-python``, an environment with jaxopt; float64, tol
   1e-5) against ``dopplermap invert-seed`` on the same files, the latter with a cold and
   then a warm persistent compilation cache.
2. A small real-layout data set written by the simulator (8 Donati LSD files x 47
   velocities, times table, a 300-point light curve in detector units, tabulated local
   profiles, macroturbulence; 4000 cells, tol 1e-7): ``dopplermap invert target.toml``
   (figures and files included), cold and warm cache, with the default solver (``"auto"``:
   Newton at this tolerance) and with ``[inversion] solver = "lbfgsb"``.

Wall time is measured around each process; its parts come from the process's own report
(``summary.json``; the seed script's JSON): start-up (the interpreter and the CLI: a
``dopplermap --version`` timed apart), read + set-up (from the command's start, so with the
import of the numeric modules: JAX, SciPy), compile, solve, and the rest (writing files
and figures, plus what the report does not split; both commands draw their figures in a
child interpreter started at the command's start, so what is left of them here is their
tail after the solve). CPU s is the CPU time of the whole process tree (the figure child
included): on a shared machine it shows how far the wall times are stretched by the load.
Ratios are against the seed's script in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

from _common import timed, write_json  # benchmarks/ is the script's folder

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
SIZES = {"seed": (2500, 150, 32), "large": (4010, 150, 41)}




def dm_env(cache):
    return dict(os.environ, PYTHONPATH=str(SRC), DOPPLERMAP_CACHE_DIR=str(cache))


def dm_cmd(*args):
    """The ``dopplermap`` console command (``dopplermap.cli:run``) from this source tree."""
    return [sys.executable, "-c", "from dopplermap.cli import run; run()", *args]


def write_small_dataset(root: Path, n_epoch: int = 8, n_vel: int = 47, n_cell: int = 4000, n_lc: int = 300):
    """The example's observed star (dopplermap/examples/observed_star.py) at 8 epochs x 47 velocities."""
    sys.path.insert(0, str(SRC))
    import jax.numpy as jnp
    import numpy as np

    import dopplermap as dm
    from dopplermap.broadening import mu_dependent_profile, replace_profiles
    from dopplermap.examples import observed_star as ex
    from dopplermap.io.lightcurve import write_lightcurve
    from dopplermap.io.lsd import write_lsd
    from dopplermap.lightcurve import LightCurveBand, simulate_lightcurve

    rng = np.random.default_rng(7)
    star = dm.StarParams(inclination=55.0, vsini=35.0, period=2.4, t0=ex.BJD0)
    truth = dm.latitude_band_grid(2000)
    times = ex.BJD0 + np.sort(rng.uniform(0.0, 3.0 * star.period, n_epoch))
    vels = np.linspace(-55.0, 55.0, n_vel)
    v_tab, tab = ex.synthetic_local_profiles()
    (root / "local").mkdir(parents=True, exist_ok=True)
    for k, i in tab.items():
        (root / "local" / f"{k}.txt").write_text("\n".join(f"{a:.4f} {b:.8f}" for a, b in zip(v_tab, i, strict=True)) + "\n")
    intrinsic = [dm.tabulated(v_tab, tab[k]) for k in ("phot", "cool", "hot")]
    lds = [dm.LimbDarkening("linear", (ex.LD_LINE[k],)) for k in ("phot", "cool", "hot")]
    comps = dm.ComponentSet.from_temperatures(ex.T_PHOT, ex.T_COOL, ex.T_HOT, ex.LAMBDA_NM, intrinsic, lds)
    mu_profiles = [mu_dependent_profile(p, ex.ZETA, resolving_power=ex.R_INSTR) for p in intrinsic]
    fssc, fssh = dm.spot_map(truth, ex.SPOTS)
    pre = dm.precompute(truth, star, times, vels, replace_profiles(comps, mu_profiles))
    zero = jnp.zeros(n_epoch)
    clean = np.asarray(dm.forward(jnp.asarray(fssc), jnp.asarray(fssh), zero, zero, pre))
    sigma = np.full_like(clean, 1.0 / 600.0)
    noisy = clean + rng.normal(size=clean.shape) * sigma
    (root / "profiles").mkdir(exist_ok=True)
    rows = ["file,bjd"]
    for k, t in enumerate(times):
        name = f"star_BJD={t:.5f}.s"
        write_lsd(root / "profiles" / name, vels, noisy[k], sigma[k], fmt="donati", columns=7 if k % 2 else 3)
        rows.append(f"{name},{t:.5f}")
    (root / "times.csv").write_text("\n".join(rows) + "\n")
    band = LightCurveBand.from_temperatures(ex.T_PHOT, ex.T_COOL, ex.T_HOT, 550.0,
                                            [dm.LimbDarkening("linear", (ex.LD_LC[k],)) for k in ("phot", "cool", "hot")])
    t_lc = ex.BJD0 + np.linspace(0.0, 3.0 * star.period, n_lc)
    flux, err, _ = simulate_lightcurve(truth, star, t_lc, band, fssc, fssh, sigma=1.5e-3, seed=8)
    write_lightcurve(root / "lightcurve.csv", t_lc, flux * 2.4e5, err * 2.4e5, fmt="csv")
    toml = ex.TOML.format(t0=ex.BJD0, tp=ex.T_PHOT, tc=ex.T_COOL, th=ex.T_HOT, lam=ex.LAMBDA_NM, R=ex.R_INSTR,
                          zeta=ex.ZETA, ldp=ex.LD_LINE["phot"], ldc=ex.LD_LINE["cool"], ldh=ex.LD_LINE["hot"],
                          lcp=ex.LD_LC["phot"], lcc=ex.LD_LC["cool"], lch=ex.LD_LC["hot"], n_cell=n_cell, maxiter=5000)
    toml = toml.replace("maxiter = 5000", "maxiter = 5000\ntol = 1e-7")
    (root / "target.toml").write_text(toml)


def startup(env):
    """Seconds of ``dopplermap --version`` and of the imports a solve needs, fresh processes (min of 3)."""
    ver = min(timed(dm_cmd("--version"), env=env)[0] for _ in range(3))
    imp = min(timed([sys.executable, "-c", "import dopplermap.cli, dopplermap.app.seed, dopplermap.io.seed, "
                     "dopplermap.solvers.scipy_lbfgsb, dopplermap.config, dopplermap.io.results"], env=env)[0]
              for _ in range(3))
    return ver, imp


def run_seed_size(name, work, seed_python, skip_seed, ver, solvers=()):
    n_cell, n_epoch, n_vel = SIZES[name]
    data = work / f"pickles-{name}"
    if not (data / "cpcs.pkl").exists():
        sys.path.insert(0, str(SRC))
        from dopplermap.app.seed import simulate_files

        simulate_files(data, fmt="seed-pickle", n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, snr=500.0, seed=1)
    out = dict(size=name, n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel,
               pickle_mb=sum(p.stat().st_size for p in data.glob("*.pkl")) / 1e6)
    if not skip_seed:
        rep = work / f"seed-{name}.json"
        wall, _ = timed([seed_python, str(HERE / "seed_baseline.py"), "--dir", str(data), "--lmbd", "1.0",
                         "--tol", "1e-5", "--maxiter", "1000", "--x64", "--out", str(rep)], log=work / f"seed-{name}.log")
        s = json.loads(rep.read_text())
        out["seed"] = dict(wall=wall, cpu=timed.cpu, compile=s["compile_time"] + s["trace_lower_time"], solve=s["solve_time"],
                           startup_read=wall - s["total_time"], iterations=s["iterations"], loss_reported=s["loss_reported"],
                           x_file=s["x_file"])
    for solver in (None, *solvers):  # None: invert-seed's default (L-BFGS-B, the seed's)
        cache = work / f"cache-{name}-{solver or 'default'}"
        shutil.rmtree(cache, ignore_errors=True)
        for label in ("cold", "warm"):
            key = label if solver is None else f"{solver}_{label}"
            res = work / f"dm-{name}-{key}"
            shutil.rmtree(res, ignore_errors=True)  # this script's own output of an earlier run
            extra = () if solver is None else ("--solver", solver)
            wall, _ = timed(dm_cmd("invert-seed", "--idc", str(data / "idc.pkl"), "--sg", str(data / "sg.pkl"), "--cpcs",
                                   str(data / "cpcs.pkl"), "--trust-pickle", "--lmbd", "1.0", "--tol", "1e-5",
                                   "--quiet", *extra, "--out", str(res)), env=dm_env(cache),
                            log=work / f"dm-{name}-{key}.log")
            s = json.loads((res / "summary.json").read_text())
            out[f"dm_{key}"] = dict(wall=wall, cpu=timed.cpu, startup=ver, read=s["read_time"], compile=s["compile_time"],
                                    solve=s["solve_time"], write=wall - ver - s["total_time"], total=s["total_time"],
                                    iterations=s["iterations"], loss=s["loss"], solver=s.get("solver"))
    return out


def run_small(work, ver, forced_newton=False):
    root = work / "observed"
    if not (root / "target.toml").exists():
        write_small_dataset(root)
    # the default solver ("auto": Newton at this tol) against L-BFGS-B, each from a cold cache
    text = (root / "target.toml").read_text()
    (root / "target_lbfgsb.toml").write_text(text.replace("tol = 1e-7", 'tol = 1e-7\nsolver = "lbfgsb"'))
    (root / "target_newton.toml").write_text(text.replace("tol = 1e-7", 'tol = 1e-7\nsolver = "newton"'))
    out = {}
    runs = [("target.toml", "cold"), ("target.toml", "warm"), ("target_lbfgsb.toml", "lbfgsb_cold"),
            ("target_lbfgsb.toml", "lbfgsb_warm")]
    if forced_newton:
        runs += [("target_newton.toml", "newton_cold"), ("target_newton.toml", "newton_warm")]
    for toml, label in runs:
        # each setting from its own empty cache (a shared one would hand one solver's programs to the next)
        cache = work / f"cache-observed-{toml}"
        if label.endswith("cold"):
            shutil.rmtree(cache, ignore_errors=True)
        res = work / f"observed-{label}"
        shutil.rmtree(res, ignore_errors=True)
        wall, _ = timed(dm_cmd("invert", str(root / toml), "--quiet", "--out", str(res)), env=dm_env(cache),
                        log=work / f"observed-{label}.log")
        s = json.loads((res / "summary.json").read_text())
        out[label] = dict(wall=wall, cpu=timed.cpu, startup=ver, setup=s["setup_time"], compile=s["compile_time"], solve=s["solve_time"],
                          write=s.get("save_time"), rest=wall - ver - s["total_time"] - (s.get("save_time") or 0.0),
                          total=s["total_time"],
                          iterations=s["iterations"], loss=s["loss"], solver=s["solver"], n_eval=s["n_eval"])
    return out


def make_table(result) -> str:
    """Markdown table of a run (the parts are re-derived from the raw figures in ``result``)."""
    ver = result["version_s"]
    lines = ["| run | wall s | CPU s | start-up | read + set-up | compile | solve | write + rest | it | loss | x seed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cpu(d):
        return f"{d['cpu']:.1f}" if d.get("cpu") is not None else "-"

    for r in result["seed"]:
        tag = f"{r['n_cell']} x {r['n_epoch']} x {r['n_vel']}"
        s = r.get("seed")
        if s:
            lines.append(f"| {tag}: seed script (jaxopt, float64, tol 1e-5) | {s['wall']:.1f} | {cpu(s)} | {s['startup_read']:.1f} "
                         f"(with read) | | {s['compile']:.1f} | {s['solve']:.1f} | | {s['iterations']} | "
                         f"{s['loss_reported']:.8g} | 1 |")
        for label in [k[3:] for k in r if k.startswith("dm_")]:
            d = dict(r[f"dm_{label}"])
            if "total" not in d:  # a run of the first version of this script: start-up was the import time
                d["total"] = d["wall"] - d["startup"] - d["write"]
            d["startup"], d["write"] = ver, d["wall"] - ver - d["total"]
            ratio = f"{s['wall'] / d['wall']:.1f}x" if s else "-"
            how = f" --solver {label.rsplit('_', 1)[0]}" if "_" in label else ""
            lines.append(f"| {tag}: `invert-seed{how}`, {label.rsplit('_', 1)[-1]} cache | {d['wall']:.2f} | {cpu(d)} | {d['startup']:.2f} | {d['read']:.2f} | "
                         f"{d['compile']:.2f} | {d['solve']:.2f} | {d['write']:.2f} | {d['iterations']} | {d['loss']:.8g} | {ratio} |")
    for label, d in result.get("observed", {}).items():
        d = dict(d)
        if "total" not in d:
            d["total"] = d["wall"] - d["startup"] - d["rest"] - (d["write"] or 0.0)
        d["startup"], d["rest"] = ver, d["wall"] - ver - d["total"] - (d["write"] or 0.0)
        lines.append(f"| 8 x 47 + 300 lc, 4000 cells, tol 1e-7: `invert` ({d['solver']}), {label.rsplit('_', 1)[-1]} cache | "
                     f"{d['wall']:.2f} | {cpu(d)} | {d['startup']:.2f} | {d['setup']:.2f} | {d['compile']:.2f} | {d['solve']:.2f} | "
                     f"{(d['write'] or 0) + d['rest']:.2f} | {d['iterations']} | {d['loss']:.8g} | - |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed-python", default=os.environ.get("DOPPLERMAP_SEED_PYTHON", "/work/venv-seed/bin/python"))
    ap.add_argument("--sizes", nargs="+", default=["seed", "large"], choices=sorted(SIZES))
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--skip-seed", action="store_true", help="no run of the seed's script")
    ap.add_argument("--out", help="JSON output file")
    ap.add_argument("--solvers", nargs="*", default=[],
                    help="also run invert-seed with each of these --solver values, and the real layout with Newton "
                         "forced, each cold then warm from its own empty cache")
    ap.add_argument("--skip-observed", action="store_true", help="no run of the small real-layout set")
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="dopplermap-e2e-"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    env = dm_env(work / "cache-startup")
    ver, imp = startup(env)
    print(f"start-up: dopplermap --version {ver:.2f} s; imports of a solve {imp:.2f} s", flush=True)
    result = dict(machine=platform.node(), processor=platform.processor() or platform.machine(),
                  cpu_count=os.cpu_count(), load_start=load0, version_s=ver, import_s=imp, seed=[], workdir=str(work))
    for name in args.sizes:
        r = run_seed_size(name, work, args.seed_python, args.skip_seed, ver, args.solvers)
        result["seed"].append(r)
        print(json.dumps(r, indent=1), flush=True)
    if not args.skip_observed:
        result["observed"] = run_small(work, ver, forced_newton=bool(args.solvers))
        print(json.dumps(result["observed"], indent=1), flush=True)
    result["load_end"] = os.getloadavg()

    table = make_table(result)
    print("\n" + table)
    print(f"\nmachine {result['machine']} ({result['processor']}, {result['cpu_count']} CPUs); load average "
          f"start {load0[0]:.1f}, end {result['load_end'][0]:.1f}; dopplermap --version {ver:.2f} s")
    result["table"] = table
    if args.out:
        write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
