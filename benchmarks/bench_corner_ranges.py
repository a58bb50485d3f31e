"""The L-curve corner of ``dopplermap lambda`` on the demo star across sweeps: three sizes, four
lambda ranges and two signal-to-noise ratios, each a fresh process (the command as a user runs it,
one shared compile cache). Each row: the corner, the reduced chi-square there, the sweep's
seconds (the solves added near the corner included), the lambdas added, or the command's message
where it found no corner.

    python benchmarks/bench_corner_ranges.py --out benchmarks/results/corner-ranges-cpu2.json
    python benchmarks/bench_corner_ranges.py --quick   # the two smaller sizes only
    python benchmarks/bench_corner_ranges.py --no-refine-corner   # the sweeps' own corners

``--control`` instead solves the demo star at S/N 200 over 0.0001..100 (20 lambdas) as the
command does (tol 1e-7) in this process, re-solves every point from its map at tol 1e-12 (Newton,
at most its 200 iterations), keeps the lower loss, and prints how far chi2 and the regulariser
moved, both curves' curvatures and both corners.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _common import write_json  # noqa: E402

SIZES = [(400, 30, 24), (1200, 60, 32), (2500, 150, 32)]
RANGES = ["0.001:100:12", "0.001:100:16", "0.0001:100:20", "0.01:10:10"]
SNRS = [500.0, 200.0]


def control():
    import warnings

    import numpy as np

    import dopplermap as dm
    from dopplermap import search
    from dopplermap.problem import Settings, demo_problem

    warnings.simplefilter("ignore")
    prob = demo_problem(snr=200.0, settings=Settings(tol=1e-7, solver="auto"))
    lm = np.logspace(-4, 2, 20)
    sw = search.sweep_lambda(prob, lm)
    tight = prob.replace(settings=prob.settings.replace(tol=1e-12, maxiter=5000, solver="newton"))
    chi2, reg, loss = sw.chi2.copy(), sw.regulariser.copy(), sw.loss.copy()
    for i in range(lm.size):
        r = dm.invert(tight, lmbd=float(lm[i]), x0=sw.results[i].x)
        if r.loss < loss[i]:
            chi2[i], reg[i], loss[i] = r.chi2, r.regulariser_value, r.loss
        print(f"lambda {lm[i]:.3g}: chi2 {sw.chi2[i]:.6f} -> {chi2[i]:.6f}, regulariser {sw.regulariser[i]:.4f} -> "
              f"{reg[i]:.4f} ({r.iterations} more iterations)", flush=True)
    tighter = search.LambdaSweep(lmbd=lm, chi2=chi2, regulariser=reg, loss=loss, iterations=sw.iterations,
                                 results=[], floor=sw.floor, total_time=0.0)
    for name, s in (("tol 1e-7", sw), ("re-solved", tighter)):
        kappa = search.lcurve_curvature(lm, s.chi2, s.regulariser, sw.floor)
        print(f"{name}: corner {search.lcurve_corner(s)[0]:.4g}; curvature {np.array2string(kappa, precision=3)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="leave out the seed size (2500 x 150 x 32)")
    ap.add_argument("--control", action="store_true", help="the noise-fitting end re-solved tighter (see above)")
    ap.add_argument("--no-refine-corner", action="store_true", help="the command's --no-refine-corner")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.control:
        return control()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, DOPPLERMAP_CACHE_DIR=str(Path(tmp, "cache")))
        for size in SIZES[:2] if a.quick else SIZES:
            for lmbds in RANGES:
                for snr in SNRS:
                    if size[0] == 2500 and (snr != 500.0 or lmbds == "0.01:10:10"):
                        continue  # the seed size: its own S/N and the three wide ranges
                    out = Path(tmp, f"out-{len(rows)}")
                    cmd = [sys.executable, "-m", "dopplermap", "lambda", "--out", str(out), "--lmbds", lmbds, "-q",
                           "--n-cell", str(size[0]), "--n-epoch", str(size[1]), "--n-vel", str(size[2]),
                           "--snr", str(snr)] + (["--no-refine-corner"] if a.no_refine_corner else [])
                    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    if proc.returncode != 0:
                        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
                    s = json.loads(Path(out, "lambda.json").read_text())
                    row = {"size": list(size), "lmbds": lmbds, "snr": snr, "corner": s["lcurve_corner"],
                           "corner_chi2": s.get("corner_chi2"), "message": s.get("lcurve_message"),
                           "sweep_s": round(s["sweep_time"], 2), "repaired": s.get("repaired"),
                           "added": s.get("lmbds_added", [])}
                    rows.append(row)
                    corner = "none" if row["corner"] is None else f"{row['corner']:.4g}"
                    print(f"{size} {lmbds:>14} S/N {snr:>5.0f}: corner {corner}, chi2 {row['corner_chi2']}, "
                          f"sweep {row['sweep_s']} s, {len(row['added'])} added"
                          f"{'; ' + row['message'] if row['message'] else ''}", flush=True)
    if a.out:
        write_json(a.out, {"rows": rows, "refine_corner": not a.no_refine_corner,
                           "load_average_end": os.getloadavg()[0]})
        print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
