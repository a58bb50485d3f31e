"""Benchmark: the user's script (jaxopt.ScipyBoundedMinimize on a Python-loop loss) against
dopplermap on the same seed-format pickles.

    PYTHONPATH=src python benchmarks/bench_seed.py [--n-cell 2500 --n-epoch 150 --n-vel 32]
        [--lmbd 1.0 0.1] [--seed-python /work/venv-seed/bin/python] [--md /tmp/bench_seed.md]

1. Writes idc.pkl, sg.pkl, cpcs.pkl of a simulated spotted star (``dopplermap simulate
   --format seed-pickle``) at the seed's size into ``--workdir``.
2. For each lambda, in fresh processes (both sides pay their compilation):
   (a) ``seed_baseline.py`` - the user's code as written - in ``--seed-python``, an
       environment with jaxopt (not a dopplermap dependency);
   (b) dopplermap: ``read_seed`` (trusted pickles) + ``invert`` (same loss, bounds, start,
       tol and maxiter).
3. Prints compile / solve / total seconds, iterations, final losses (both evaluated in
   float64 with the seed's loss, verified against it to 1e-10 in tests/test_seed_io.py)
   and the ratio seed total / dopplermap total.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def worker_dopplermap(args) -> None:
    """Runs in a fresh process: read the pickles and invert; print a JSON report."""
    t0 = time.perf_counter()
    import jax

    import dopplermap as dm
    from dopplermap.io.seed import read_seed

    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    d = Path(args.workdir)
    prob = read_seed(d / "idc.pkl", d / "sg.pkl", d / "cpcs.pkl", trust_pickle=True)
    jax.block_until_ready(prob.pre)
    t_read = time.perf_counter() - t0
    res = dm.invert(prob.pre, prob.obs, lmbd=float(args.lmbd[0]), tol=args.tol, maxiter=args.maxiter)
    total = time.perf_counter() - t0
    import numpy as np

    np.save(Path(args.out).with_suffix(".x.npy"), res.x)
    rep = dict(total_time=total, read_time=t_read, compile_time=res.compile_time, solve_time=res.solve_time,
               import_time=t_import, iterations=res.iterations, n_eval=res.n_eval, success=res.success,
               stop_reason=res.stop_reason, loss=res.loss, chi2=res.chi2, entropy=res.regulariser_value,
               max_sum_excess=res.max_sum_excess, cube_dtype=res.cube_dtype, backend=jax.default_backend(), jax=jax.__version__,
               n_slot=int(prob.pre.line.cell.shape[1]), line_bytes=prob.pre.line.nbytes())
    Path(args.out).write_text(json.dumps(rep, indent=2))


def _dm_dtype(d: dict) -> str:
    cube = d.get("cube_dtype")
    return "float64" if cube in (None, "float64") else f"float64, {cube} cube"


def seed_loss64(prob, x, lmbd):
    """The seed's loss in float64 (dopplermap's objective without the feasibility penalty)."""
    import jax.numpy as jnp

    from dopplermap.objective import objective_terms

    val, t = objective_terms(jnp.asarray(x, dtype=jnp.float64), lmbd, prob.pre, prob.obs, "mem", 0.0)
    c2, reg = t.chi2, t.regulariser
    return float(val), float(c2), float(reg)


def run(cmd, log: Path, timeout: float, env=None):
    with log.open("w") as fh:
        p = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, env=env)
    if p.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{' '.join(map(str, cmd[:3]))} ... failed (exit {p.returncode}); log {log}:\n{tail}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/dopplermap-bench-seed"))
    ap.add_argument("--n-cell", type=int, default=2500)
    ap.add_argument("--n-epoch", type=int, default=150)
    ap.add_argument("--n-vel", type=int, default=32)
    ap.add_argument("--snr", type=float, default=500.0)
    ap.add_argument("--lmbd", type=float, nargs="+", default=[1.0, 0.1])
    ap.add_argument("--tol", type=float, default=1e-5, help="L-BFGS-B tol of both codes (the seed's 1e-5)")
    ap.add_argument("--dm-tol", type=float, nargs="+",
                    help="dopplermap tolerances to run (default: --tol); each is a row, timed cold")
    ap.add_argument("--dm-src", type=Path, default=SRC, help="dopplermap source tree for the dopplermap runs")
    ap.add_argument("--maxiter", type=int, default=1000)
    ap.add_argument("--seed-python", default=os.environ.get("DOPPLERMAP_SEED_PYTHON", "/work/venv-seed/bin/python"))
    ap.add_argument("--seed-x64", action="store_true", help="run the user's script with float64 enabled")
    ap.add_argument("--skip-seed", action="store_true", help="only dopplermap (reuses earlier seed reports)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--md", type=Path, help="also write the table as Markdown to this file")
    ap.add_argument("--worker", choices=["dopplermap"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "dopplermap":
        worker_dopplermap(args)
        return 0

    sys.path.insert(0, str(SRC))
    from dopplermap.app.seed import simulate_files

    wd = args.workdir
    tag = f"{args.n_cell}x{args.n_epoch}x{args.n_vel}"
    data = wd / f"data-{tag}"
    if not (data / "cpcs.pkl").exists():
        t0 = time.perf_counter()
        simulate_files(data, fmt="seed-pickle", n_cell=args.n_cell, n_epoch=args.n_epoch, n_vel=args.n_vel,
                       snr=args.snr, seed=1)
        print(f"wrote seed-format pickles to {data} in {time.perf_counter() - t0:.1f} s", flush=True)
    sizes = {p.name: p.stat().st_size for p in data.glob("*.pkl")}

    rows = []
    from dopplermap.io.seed import read_seed

    prob = read_seed(data / "idc.pkl", data / "sg.pkl", data / "cpcs.pkl", trust_pickle=True)
    import numpy as np

    for lmbd in args.lmbd:
        seed_json = wd / f"seed-{tag}-l{lmbd:g}{'-x64' if args.seed_x64 else ''}.json"
        if not args.skip_seed or not seed_json.exists():
            cmd = [args.seed_python, str(HERE / "seed_baseline.py"), "--dir", str(data), "--lmbd", str(lmbd),
                   "--maxiter", str(args.maxiter), "--tol", str(args.tol), "--out", str(seed_json)]
            if args.seed_x64:
                cmd.append("--x64")
            print(f"[seed] lambda={lmbd:g}: running the user's script ...", flush=True)
            run(cmd, seed_json.with_suffix(".log"), args.timeout)
        seed = json.loads(seed_json.read_text())
        seed_loss, seed_chi2, seed_mem = seed_loss64(prob, np.load(seed["x_file"]), lmbd)
        for dm_tol in args.dm_tol or [args.tol]:
            dm_json = wd / f"dm-{tag}-l{lmbd:g}-tol{dm_tol:g}.json"
            print(f"[dopplermap] lambda={lmbd:g} tol={dm_tol:g} ...", flush=True)
            run([sys.executable, str(Path(__file__).resolve()), "--worker", "dopplermap", "--workdir", str(data),
                 "--lmbd", str(lmbd), "--tol", str(dm_tol), "--maxiter", str(args.maxiter), "--out", str(dm_json)],
                dm_json.with_suffix(".log"), args.timeout, env=dict(os.environ, PYTHONPATH=str(args.dm_src)))
            dmr = json.loads(dm_json.read_text())
            dmr["tol"] = dm_tol
            dm_loss, _, _ = seed_loss64(prob, np.load(dm_json.with_suffix(".x.npy")), lmbd)
            rows.append(dict(lmbd=lmbd, seed=seed, dm=dmr, seed_loss64=seed_loss, seed_chi2=seed_chi2,
                             dm_loss64=dm_loss, rel_diff=(dm_loss - seed_loss) / abs(seed_loss),
                             ratio=seed["total_time"] / dmr["total_time"],
                             ratio_no_read=seed["total_time"] / (dmr["total_time"] - dmr["read_time"])))

    lines = [f"problem: {args.n_epoch} epochs x {args.n_vel} velocities, {args.n_cell} cells "
             f"({int(prob.n_visible.min())}-{int(prob.n_visible.max())} visible), "
             f"{2 * args.n_cell + 2 * args.n_epoch} parameters; pickles "
             + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items())),
             f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
             f"load average at end {os.getloadavg()[0]:.1f}; tol {args.tol:g}, maxiter {args.maxiter}",
             ""]
    hdr = ("| lambda | code | dtype | compile s | solve s | total s | iterations | evals | final loss (float64) |",
           "|---|---|---|---|---|---|---|---|---|")
    lines += list(hdr)
    done = set()
    for r in rows:
        s, d = r["seed"], r["dm"]
        if r["lmbd"] not in done:
            done.add(r["lmbd"])
            lines.append(f"| {r['lmbd']:g} | seed (jaxopt {s['jaxopt']}, jax {s['jax']}), tol {args.tol:g} | {s['dtype']} | "
                         f"{s['compile_time'] + s['trace_lower_time']:.1f} | {s['solve_time']:.1f} | {s['total_time']:.1f} | "
                         f"{s['iterations']} | {s['n_eval']} | {r['seed_loss64']:.10g} |")
        lines.append(f"| {r['lmbd']:g} | dopplermap (jax {d['jax']}, {d['backend']}), tol {d['tol']:g} | {_dm_dtype(d)} | "
                     f"{d['compile_time']:.1f} | {d['solve_time']:.1f} | {d['total_time']:.1f} (read {d['read_time']:.1f}) | "
                     f"{d['iterations']} | {d['n_eval']} | {r['dm_loss64']:.10g} |")
    lines.append("")
    for r in rows:
        ok_loss = r["rel_diff"] <= 1e-6
        lines.append(f"lambda {r['lmbd']:g}, dopplermap tol {r['dm']['tol']:g}: ratio seed/dopplermap end to end {r['ratio']:.1f}x "
                     f"(without reading the pickles {r['ratio_no_read']:.1f}x); "
                     f"dopplermap loss - seed loss = {r['rel_diff']:+.2e} relative "
                     f"({'no higher' if ok_loss else 'HIGHER'} than the seed's within 1e-6); "
                     f"per evaluation: seed {r['seed']['eval_time'] * 1e3:.0f} ms, "
                     f"dopplermap {r['dm']['solve_time'] / max(r['dm']['n_eval'], 1) * 1e3:.0f} ms; "
                     f"seed stop status {r['seed']['status']}, dopplermap: {r['dm']['stop_reason']}")
    text = "\n".join(lines)
    print(text)
    if args.md:
        args.md.write_text("# bench_seed results\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
