"""Helpers shared by the benchmark scripts (run as ``python benchmarks/<script>.py``)."""

import json
import math
import os
import resource
import subprocess
import time
from pathlib import Path


def strict(obj):
    """``obj`` with every non-finite float as None: strict JSON (``json.dump`` would write
    ``Infinity``/``NaN``, which most parsers reject)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj


def write_json(path: str, obj) -> None:
    """Write ``obj`` as indented strict JSON (non-finite numbers as null) to ``path`` through a
    temporary file (no half-written results)."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(strict(obj), fh, indent=2, allow_nan=False)
    os.replace(tmp, path)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, env=None, log=None, timeout=3600):
    """Wall seconds of ``cmd`` and the completed process; ``timed.cpu`` holds the CPU seconds
    of its process tree (children included), which the machine's load does not inflate."""
    c0, t0 = _children_cpu(), time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    timed.cpu = _children_cpu() - c0
    if log is not None:
        Path(log).write_text(p.stdout + "\n" + p.stderr)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd[:4]))} ... exit {p.returncode}:\n{p.stderr[-3000:]}")
    return wall, p


SINGLE_THREADED = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                   "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}


def single_threaded():
    """A spawned worker's set-up before it imports JAX: one thread, the CPU backend."""
    os.environ.update(SINGLE_THREADED)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def pool_rows(jobs, procs: int, res: dict, out=None, line=None) -> list:
    """Each ``(fn, args)`` of ``jobs`` in ``procs`` single-threaded worker processes; each result,
    as it finishes, appended to ``res["stars"]``, printed as ``line(result)`` and, with ``out``,
    ``res`` written there (its ``wall_s`` so far). Returns ``res["stars"]``."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    t0 = time.perf_counter()
    rows = res.setdefault("stars", [])
    with ProcessPoolExecutor(procs, initializer=single_threaded) as ex:
        for f in as_completed([ex.submit(fn, *args) for fn, args in jobs]):
            rows.append(f.result())
            if line is not None:
                print(line(rows[-1]), flush=True)
            res["wall_s"] = time.perf_counter() - t0
            if out:
                write_json(out, res)
    return rows
