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

``--whole-run`` measures what the user waits for instead, whole processes back to back in
one run: the seed's script (float64, as in ``bench_end_to_end.py``), then ``dopplermap
invert-seed`` (figures and files included) from an empty compile cache (cold) and
``--warm N`` times warm, with the breakdown of each run (start-up: ``dopplermap
--version``; read + set-up from the command's start, so with the imports; compile; solve;
write + rest: the files, the figures' tail and the exit) and the imports of a solve timed
apart. ``--before SRC`` runs the same cold and warm runs from another source tree,
interleaved, and compares the two trees' results (summary.json numbers and result.npz
arrays); ``--solvers auto lbfgsb newton`` adds first runs (each from its own empty cache)
with each ``--solver``::

    PYTHONPATH=src python benchmarks/bench_seed.py --whole-run --warm 3 [--before OLD/src]
        [--solvers auto lbfgsb newton] [--seed-python PY | --skip-seed] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
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


# ---------------------------------------------------------------- --whole-run

def _timed(cmd, env=None, log=None, timeout=3600):
    """Wall seconds of ``cmd``; ``_timed.cpu``: the CPU seconds of its process tree (children included)."""
    from _common import timed  # benchmarks/ is the script's folder

    wall, _ = timed(cmd, env=env, log=log, timeout=timeout)
    _timed.cpu = timed.cpu
    return wall


def _dm(src, cache, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
               DOPPLERMAP_CACHE_DIR=str(cache))
    return [sys.executable, "-c", "from dopplermap.cli import run; run()", *args], env


def _same_results(a: Path, b: Path) -> str:
    """How two invert-seed result folders differ: summary numbers and result.npz arrays."""
    import numpy as np

    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    timing = ("time", "run_id", "fingerprint")
    keys = [k for k in set(sa) | set(sb) if not any(t in k for t in timing)]
    diff = sorted(k for k in keys if sa.get(k) != sb.get(k))
    worst = 0.0
    with np.load(a / "result.npz") as za, np.load(b / "result.npz") as zb:
        for k in set(za.files) | set(zb.files):
            if k == "run_id":
                continue
            x, y = za[k], zb[k]
            if x.shape != y.shape or x.dtype != y.dtype:
                diff.append(f"result.npz:{k}")
            elif x.dtype.kind == "f":
                worst = max(worst, float(np.max(np.abs(x - y) / np.maximum(np.abs(y), 1e-300), initial=0.0)))
            elif not np.array_equal(x, y):
                diff.append(f"result.npz:{k}")
    figs = [f for f in ("filling_factors.png", "residuals.png")
            if (a / f).exists() and (a / f).read_bytes() != (b / f).read_bytes()]
    return (f"summary keys differing: {diff or 'none'}; result.npz max relative difference {worst:.1e}; "
            f"figures differing byte for byte: {figs or 'none'}")


def whole_run(args) -> int:
    sys.path.insert(0, str(SRC))
    from dopplermap.app.seed import simulate_files

    wd = args.workdir
    wd.mkdir(parents=True, exist_ok=True)
    tag = f"{args.n_cell}x{args.n_epoch}x{args.n_vel}"
    data = wd / f"data-{tag}"
    if not (data / "cpcs.pkl").exists():
        simulate_files(data, fmt="seed-pickle", n_cell=args.n_cell, n_epoch=args.n_epoch, n_vel=args.n_vel,
                       snr=args.snr, seed=1)
    load0 = os.getloadavg()
    trees = {"after": args.dm_src} if args.before is None else {"before": args.before, "after": args.dm_src}
    rep = dict(machine=platform.node(), processor=platform.processor() or platform.machine(), cpu_count=os.cpu_count(),
               affinity=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
               load_start=load0, size=tag, pickle_mb=sum(p.stat().st_size for p in data.glob("*.pkl")) / 1e6,
               trees={k: str(v) for k, v in trees.items()}, runs={})
    for name, src in trees.items():
        cmd, env = _dm(src, wd / "cache-startup", "--version")
        rep.setdefault("startup", {})[name] = min(_timed(cmd, env=env) for _ in range(3))
        imp = [sys.executable, "-c", "import dopplermap.app.seed, dopplermap.app.output"]
        rep.setdefault("imports", {})[name] = min(_timed(imp, env=env) for _ in range(3))
    pick = ["--idc", str(data / "idc.pkl"), "--sg", str(data / "sg.pkl"), "--cpcs", str(data / "cpcs.pkl"),
            "--trust-pickle", "--lmbd", "1.0", "--tol", "1e-5", "--quiet"]

    def one(name, label, cache, extra=()):
        out = wd / f"out-{name}-{label}"
        shutil.rmtree(out, ignore_errors=True)
        cmd, env = _dm(trees[name], cache, "invert-seed", *pick, *extra, "--out", str(out))
        wall = _timed(cmd, env=env, log=wd / f"{name}-{label}.log")
        s = json.loads((out / "summary.json").read_text())
        r = dict(wall=wall, cpu=_timed.cpu, startup=rep["startup"][name], read=s["read_time"], compile=s["compile_time"],
                 solve=s["solve_time"], write=wall - rep["startup"][name] - s["total_time"], iterations=s["iterations"],
                 loss=s["loss"], solver=s.get("solver"), out=str(out))
        rep["runs"].setdefault(name, {})[label] = r
        print(f"{name} {label}: {wall:.2f} s, CPU {r['cpu']:.2f} s (read + set-up {r['read']:.2f}, compile {r['compile']:.2f}, "
              f"solve {r['solve']:.2f}, write + rest {r['write']:.2f}), {r['iterations']} it, loss {r['loss']:.10g}, "
              f"{r['solver']}", flush=True)
        return r

    for name in trees:
        shutil.rmtree(wd / f"cache-{name}", ignore_errors=True)
        one(name, "cold", wd / f"cache-{name}")
    for i in range(args.warm):
        for name in trees:
            one(name, f"warm{i + 1}", wd / f"cache-{name}")
    for solver in args.solvers or ():
        for name in trees:
            cache = wd / f"cache-{name}-{solver}"
            shutil.rmtree(cache, ignore_errors=True)
            one(name, f"first-{solver}", cache, ("--solver", solver))
    if "before" in trees:
        rep["same_results"] = _same_results(Path(rep["runs"]["before"]["warm1"]["out"]),
                                            Path(rep["runs"]["after"]["warm1"]["out"]))
        print("before against after:", rep["same_results"], flush=True)
    # the seed's script last: what dopplermap measured is written before the long run starts
    for last in (False, True) if not args.skip_seed else (True,):
        if last and not args.skip_seed:
            js = wd / f"seed-{tag}-x64.json"
            print("[seed] the user's script (float64) ...", flush=True)
            wall = _timed([args.seed_python, str(HERE / "seed_baseline.py"), "--dir", str(data), "--lmbd", "1.0", "--tol",
                           "1e-5", "--maxiter", "1000", "--x64", "--out", str(js)], log=wd / "seed.log", timeout=args.timeout)
            s = json.loads(js.read_text())
            rep["seed"] = dict(wall=wall, compile=s["compile_time"] + s["trace_lower_time"], solve=s["solve_time"],
                               startup_read=wall - s["total_time"], iterations=s["iterations"], loss=s["loss_reported"],
                               jax=s.get("jax"), jaxopt=s.get("jaxopt"), cpu=_timed.cpu)
            print(f"seed: {wall:.1f} s (compile {rep['seed']['compile']:.1f}, solve {rep['seed']['solve']:.1f})", flush=True)
        rep["load_end"] = os.getloadavg()
        print(_whole_table(rep), flush=True)
        if args.json:
            sys.path.insert(0, str(HERE))
            from _common import write_json

            write_json(args.json, rep)
    return 0


def _whole_table(rep) -> str:
    lines = ["| run | wall s | CPU s | start-up | read + set-up | compile | solve | write + rest | it | loss | solver | x seed |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    seed = rep.get("seed")
    if seed:
        lines.append(f"| seed script (jaxopt {seed['jaxopt']}, jax {seed['jax']}, float64) | {seed['wall']:.1f} | {seed['cpu']:.1f} | "
                     f"{seed['startup_read']:.1f} (with read) | | {seed['compile']:.1f} | {seed['solve']:.1f} | | "
                     f"{seed['iterations']} | {seed['loss']:.8g} | jaxopt L-BFGS-B | 1 |")
    for name, runs in rep["runs"].items():
        warm = [r for k, r in runs.items() if k.startswith("warm")]
        rows = [(k, r) for k, r in runs.items() if not k.startswith("warm")]
        if warm:
            med = {f: statistics.median(r[f] for r in warm) for f in ("wall", "cpu", "read", "compile", "solve", "write")}
            rows.insert(1, (f"warm (median of {len(warm)})", dict(warm[0], **med)))
        for label, r in rows:
            ratio = f"{seed['wall'] / r['wall']:.1f}x" if seed else "-"
            lines.append(f"| `invert-seed` ({name}), {label} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['startup']:.2f} | {r['read']:.2f} | "
                         f"{r['compile']:.2f} | {r['solve']:.2f} | {r['write']:.2f} | {r['iterations']} | "
                         f"{r['loss']:.10g} | {r['solver']} | {ratio} |")
    lines.append("")
    lines.append("imports of invert-seed before it reads (fresh process, min of 3): " + ", ".join(
        f"{k} {v:.2f} s" for k, v in rep["imports"].items()) + "; `dopplermap --version`: " + ", ".join(
        f"{k} {v:.2f} s" for k, v in rep["startup"].items()))
    lines.append(f"machine {rep['machine']} ({rep['processor']}, {rep['cpu_count']} CPUs, {rep['affinity']} usable); "
                 f"load average start {rep['load_start'][0]:.1f}, end {rep['load_end'][0]:.1f}; pickles "
                 f"{rep['pickle_mb']:.1f} MB")
    return "\n".join(lines)


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
    ap.add_argument("--whole-run", action="store_true", help="whole processes with their breakdown (see above)")
    ap.add_argument("--warm", type=int, default=3, help="--whole-run: warm runs of each tree")
    ap.add_argument("--before", type=Path, help="--whole-run: another source tree, run interleaved and compared")
    ap.add_argument("--solvers", nargs="*", help="--whole-run: first runs with each --solver")
    ap.add_argument("--json", type=Path, help="--whole-run: write the measurements to this JSON file")
    ap.add_argument("--worker", choices=["dopplermap"], help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "dopplermap":
        worker_dopplermap(args)
        return 0
    if args.whole_run:
        return whole_run(args)

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
