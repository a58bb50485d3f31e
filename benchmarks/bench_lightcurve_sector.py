"""A whole TESS sector in a joint fit: LO Peg's 16 LSD profiles alone, plus the unbinned SPOC
sector of ../shared/data/tess (a different star: the point is the cost), and plus the same
sector with ``lightcurve_bin = "auto"``.

Each variant runs in its own process (its peak RSS is its own): the printed estimate of the
light-curve model (``Problem.lightcurve_estimate``), then one solve (``invert``, the target's
settings; the error scale fixed at 0.27 so that every variant solves once), timed in wall and
process CPU seconds (the CPU time is the one to compare on a shared machine).

    python benchmarks/bench_lightcurve_sector.py [--out benchmarks/results/lightcurve_sector-cpu2.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
TESS = SHARED / "tess" / "tess2018206045859-s0001-0000000025155310-0120-s_lc.fits"
BAND = '[lightcurve]\nwavelength_nm = 800.0\nlimb_darkening = "linear"\nld_phot = [0.6]\nld_cool = [0.7]\nld_hot = [0.55]\n\n'


def targets(folder: Path) -> dict[str, Path]:
    from dopplermap.cli import main

    base = folder / "lopeg.toml"
    main(["import-zdipy", str(SHARED / "lopeg" / "inzdi.dat"), str(SHARED / "lopeg" / "model-voigt-line.dat"),
          "--out", str(base)])
    text = base.read_text().replace('error_scale = "auto"', "error_scale = 0.27")
    out = {"profiles": folder / "profiles.toml"}
    out["profiles"].write_text(text)
    for name, extra in (("unbinned", ""), ("auto", 'lightcurve_bin = "auto"\n')):
        t = text.replace("[data]\n", f'[data]\nlightcurve = "{TESS}"\n{extra}', 1).replace("[star]", BAND + "[star]", 1)
        out[name] = folder / f"{name}.toml"
        out[name].write_text(t)
    return out


def child(path: str) -> dict:
    from dopplermap.config import load_config
    from dopplermap.problem import from_config
    from dopplermap.solvers import invert

    t0, c0 = time.perf_counter(), time.process_time()
    prob = from_config(load_config(path))
    est = prob.lightcurve_estimate()
    _ = prob.pre, prob.lightcurve
    setup = (time.perf_counter() - t0, time.process_time() - c0)
    t0, c0 = time.perf_counter(), time.process_time()
    res = invert(prob)
    solve = (time.perf_counter() - t0, time.process_time() - c0)
    return dict(estimate=est, setup_wall=setup[0], setup_cpu=setup[1], solve_wall=solve[0], solve_cpu=solve[1],
                solver_time=res.solve_time, iterations=res.iterations, n_eval=res.n_eval, chi2=res.chi2,
                chi2_lc=res.chi2_lc, n_lc=None if prob.lightcurve is None else prob.lightcurve.n_lc,
                peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    if not TESS.is_file():
        sys.exit(f"needs {TESS} and {SHARED / 'lopeg'}")
    rows = {"load_start": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in targets(Path(tmp)).items():
            run = subprocess.run([sys.executable, __file__, "--child", str(path)], capture_output=True, text=True)
            if run.returncode:
                sys.exit(run.stderr)
            rows[name] = json.loads(run.stdout.strip().splitlines()[-1])
            r = rows[name]
            est = r["estimate"] or {}
            print(f"{name:9s} points {r['n_lc']}  est {est.get('bytes', 0) / 2**20:7.0f} MiB {est.get('seconds', 0):5.1f} s"
                  f"  peak {r['peak_rss'] / 2**30:.2f} GiB  solve {r['solve_wall']:.1f} s (cpu {r['solve_cpu']:.1f} s)"
                  f"  {r['iterations']} it  setup {r['setup_wall']:.1f} s", flush=True)
    rows["load_end"] = os.getloadavg()
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1, default=float) + "\n")


if __name__ == "__main__":
    main()
