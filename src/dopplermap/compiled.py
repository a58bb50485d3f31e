"""Compile a solver's program once per machine, skipping the trace on later runs.

JAX's persistent compilation cache (:mod:`dopplermap.cache`) saves XLA's compile, but every
new process still traces the Python function and lowers it to StableHLO before it can look
the executable up: for the Newton loop that is about as long as loading the executable.
:func:`compile_cached` therefore also keeps the lowered program, as a serialized
:mod:`jax.export` module in ``<cache>/dopplermap-exported/``, keyed by everything the trace
depends on: the function, its static arguments, the arguments' tree and shapes, this
package's source, the JAX/NumPy versions and the backend. A later process deserializes it
(milliseconds) and compiles it through the persistent cache.

Within a process every compiled program is kept (by function, static arguments, argument
tree and avals), so a lambda sweep, a bootstrap or a solve's final evaluation reuses it
(:func:`compiled_program` looks one up, :func:`forget_compiled` drops them all).

The program is always compiled from the exported module, on the first run too, so the
executable the persistent cache stores is the one later runs look up. A program may be
compiled with XLA options of its own (:func:`loop_options`: the compiled solver loops take
XLA's cheaper CPU code generation); they are part of its in-process key, and XLA's
persistent cache keys them too. Without a compilation cache folder (API use by default) it
is an ordinary ``jit(...).lower(...).compile()``. A file that cannot be read is replaced;
the cache never changes a result, only when it is computed.
The key cannot see code changed at run time (a test that monkeypatches a traced function):
such a process must not share the folder (the test suite uses its own).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import threading
import time
from pathlib import Path

import jax
import jaxlib
import numpy as np
from jax import export

from . import _x64  # noqa: F401  (float64 JAX for every numeric module)

try:  # jax.export's serializer needs it (a declared dependency; a bare environment runs without the files)
    import flatbuffers  # noqa: F401
    _CAN_SERIALIZE = True
except ImportError:  # pragma: no cover
    _CAN_SERIALIZE = False

__all__ = ["compile_cached", "call_cached", "compiled_program", "program_state", "forget_compiled", "source_digest",
           "loop_options", "EXPORT_FOLDER", "LOOP_OPTIONS"]

EXPORT_FOLDER = "dopplermap-exported"
_SUFFIX = ".jaxexport"

_MEMO: dict = {}  # this process's compiled programs (see the module docstring)
_COMPILING: dict = {}  # a lock per program being compiled: threads asking for it wait for one compile
_COMPILING_LOCK = threading.Lock()

LOOP_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 2}
"""XLA options of the programs that hold a whole solve in one loop (Newton, the device
L-BFGS) and of the one-off final evaluation, on CPU: XLA's elemental code generation
instead of its MLIR fusion emitters, and LLVM at level 2. Such a program has hundreds of
small kernels, each compiled on its own, so their compile is most of a first run on a small
problem; these options make it much cheaper at the cost of a slightly slower solve on
large problems (benchmarks/RESULTS.md, "A 12-value sweep on the demo star"). The hot value-and-gradient
of scipy's L-BFGS-B keeps XLA's defaults: it runs thousands of times."""


def loop_options() -> dict:
    """:data:`LOOP_OPTIONS` on the CPU backend, none elsewhere (an accelerator's compile is
    another code generator)."""
    return dict(LOOP_OPTIONS) if jax.default_backend() == "cpu" else {}


def _avals(leaves) -> tuple:
    # what a compiled program is specific to: shape, dtype and weak type of each argument
    return tuple((tuple(np.shape(v)), str(jax.numpy.result_type(v)), bool(getattr(v, "weak_type", False)))
                 for v in leaves)


def _memo_key(name: str, fun, static: dict, args: tuple, options: dict | None = None):
    leaves, treedef = jax.tree_util.tree_flatten(args)
    key = (name, fun, tuple(sorted(static.items())), treedef, _avals(leaves))
    return key + (tuple(sorted(options.items())),) if options else key


def compiled_program(name: str, fun, args: tuple, static: dict | None = None):
    """The program :func:`compile_cached` compiled in this process for these arguments, or None."""
    try:
        return _MEMO.get(_memo_key(name, fun, dict(static or {}), args))
    except TypeError:  # unhashable static data: never kept
        return None


def program_state(name: str, fun, args: tuple, static: dict | None = None, options: dict | None = None) -> str:
    """Where :func:`compile_cached` would take this program from: ``"memo"`` (compiled in this
    process), ``"disk"`` (its lowered program is in the cache folder, so XLA's persistent cache
    holds the executable too) or ``"cold"`` (traced and compiled anew). Nothing is compiled.
    ``options``: the XLA options it is compiled with (as :func:`compile_cached`'s)."""
    static = dict(static or {})
    try:
        if _MEMO.get(_memo_key(name, fun, static, args, options)) is not None:
            return "memo"
    except TypeError:  # unhashable static data: never kept
        pass
    folder = _export_folder()
    if folder is None:
        return "cold"
    leaves, treedef = jax.tree_util.tree_flatten(args)
    try:
        path = folder / f"{name}-{_key(name, static, treedef, leaves)}{_SUFFIX}"
    except (pickle.PicklingError, TypeError, AttributeError):
        return "cold"
    return "disk" if path.is_file() else "cold"


def forget_compiled() -> None:
    """Drop this process's compiled programs (the cache folder keeps its files)."""
    _MEMO.clear()


@functools.cache
def source_digest() -> str:
    """SHA-256 of this package's Python source: a changed module retraces every program."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _export_folder() -> Path | None:
    folder = jax.config.jax_compilation_cache_dir
    return Path(folder) / EXPORT_FOLDER if folder and _CAN_SERIALIZE else None


def _key(name: str, static: dict, treedef, leaves) -> str:
    avals = _avals(leaves)
    devices = jax.devices()
    parts = (name, sorted(static.items()), pickle.dumps(treedef), avals, source_digest(), jax.__version__,
             jaxlib.__version__, np.__version__,
             jax.default_backend(), devices[0].device_kind, len(devices), bool(jax.config.jax_enable_x64),
             str(jax.config.jax_default_matmul_precision))
    return hashlib.sha256(pickle.dumps(parts)).hexdigest()[:40]


class _Flat:
    """A compiled flat-argument program called with the original pytree arguments."""

    def __init__(self, compiled, in_tree, out_tree):
        self._compiled, self._in_tree, self._out_tree = compiled, in_tree, out_tree

    def __call__(self, *args):
        leaves, tree = jax.tree_util.tree_flatten(args)
        if tree != self._in_tree:  # as a jax Compiled does: never feed leaves to the wrong slots
            raise TypeError(f"compiled for arguments {self._in_tree}, called with {tree}")
        return jax.tree_util.tree_unflatten(self._out_tree, self._compiled(*leaves))


def _read(path: Path):
    try:
        blob, out_tree = pickle.loads(path.read_bytes())
        return export.deserialize(bytearray(blob)), out_tree
    except Exception:  # noqa: BLE001 - a damaged or foreign cache file is only a miss
        return None


def _write(path: Path, exp, out_tree) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(pickle.dumps((bytes(exp.serialize()), out_tree)))
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache folder: the run goes on without it
        if tmp.parent.is_dir():
            tmp.unlink(missing_ok=True)


def compile_cached(name: str, fun, args: tuple, static: dict | None = None, *, cache: bool = True,
                   options: dict | None = None):
    """Compile ``fun(*args, **static)`` for these argument shapes; returns ``(fn, timings)``.

    ``fn(*args)`` takes arguments of the same tree and shapes and returns ``fun``'s output
    tree. ``static`` holds hashable, picklable keyword arguments fixed at compile time.
    ``timings``: ``trace_lower`` and ``compile`` seconds, ``exported`` (True when the
    lowered program came from the cache folder) and ``cached`` (True when this process had
    compiled it already: the seconds are then 0). ``cache=False`` (or no compilation cache
    folder, or a program JAX cannot export, such as one with host callbacks) compiles as
    ``jax.jit`` does. ``options``: XLA compiler options of this program (e.g.
    :func:`loop_options`); default XLA's.
    """
    static = dict(static or {})
    options = dict(options or {})
    try:
        memo_key = _memo_key(name, fun, static, args, options)
        hit = _MEMO.get(memo_key)
    except TypeError:  # unhashable static data: compiled every time
        memo_key = hit = None
    if hit is not None:
        return hit, {"trace_lower": 0.0, "compile": 0.0, "exported": False, "cached": True}
    if memo_key is None:
        compiled, timings = _compile(name, fun, args, static, cache, options)
        return compiled, {**timings, "cached": False}
    with _COMPILING_LOCK:
        lock = _COMPILING.setdefault(memo_key, threading.Lock())
    with lock:  # another thread (grid points, members) may be compiling this very program
        hit = _MEMO.get(memo_key)
        if hit is not None:
            return hit, {"trace_lower": 0.0, "compile": 0.0, "exported": False, "cached": True}
        compiled, timings = _compile(name, fun, args, static, cache, options)
        _MEMO[memo_key] = compiled
    with _COMPILING_LOCK:
        _COMPILING.pop(memo_key, None)
    return compiled, {**timings, "cached": False}


def _xla_compile(lowered, options: dict):
    """``lowered.compile`` with these XLA options; where this jaxlib does not know one of them
    (options come and go between XLA versions) the program is compiled with XLA's defaults."""
    if not options:
        return lowered.compile()
    try:
        return lowered.compile(compiler_options=options)
    except jax.errors.JaxRuntimeError as exc:
        if "No such compile option" not in str(exc):
            raise
        return lowered.compile()


def _compile(name: str, fun, args: tuple, static: dict, cache: bool, options: dict):
    body = functools.partial(fun, **static)
    folder = _export_folder() if cache else None
    t0 = time.perf_counter()
    if folder is None:
        lowered = jax.jit(body).lower(*args)
        t1 = time.perf_counter()
        compiled = _xla_compile(lowered, options)
        return compiled, {"trace_lower": t1 - t0, "compile": time.perf_counter() - t1, "exported": False}
    leaves, treedef = jax.tree_util.tree_flatten(args)
    try:
        path = folder / f"{name}-{_key(name, static, treedef, leaves)}{_SUFFIX}"
    except (pickle.PicklingError, TypeError, AttributeError):  # static data that cannot be keyed
        return _compile(name, fun, args, static, False, options)
    found = _read(path) if path.is_file() else None
    from_file = found is not None
    if found is None:
        out_tree = []

        def flat(*lv):
            out = body(*jax.tree_util.tree_unflatten(treedef, lv))
            out_leaves, tree = jax.tree_util.tree_flatten(out)
            out_tree.append(tree)
            return out_leaves

        try:
            exp = export.export(jax.jit(flat))(*leaves)
        except Exception:  # noqa: BLE001 - not exportable (e.g. a host callback): compile directly
            return _compile(name, fun, args, static, False, options)
        _write(path, exp, out_tree[0])
        found = (exp, out_tree[0])
    exp, out_tree = found
    lowered = jax.jit(exp.call).lower(*leaves)
    t1 = time.perf_counter()
    compiled = _xla_compile(lowered, options)
    timings = {"trace_lower": t1 - t0, "compile": time.perf_counter() - t1, "exported": from_file}
    return _Flat(compiled, treedef, out_tree), timings


def call_cached(name: str, fun, *args, **static):
    """``fun(*args, **static)`` through :func:`compile_cached`: compiled once per shape, its
    trace kept in the cache folder (for set-up and result programs called once per run)."""
    fn, _ = compile_cached(name, fun, args, static)
    return fn(*args)
