"""compile_cached: the exported-program cache beside JAX's persistent compilation cache."""

import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dopplermap import compiled
from dopplermap.compiled import EXPORT_FOLDER, compile_cached

SRC = str(Path(__file__).resolve().parents[1] / "src")


def body(x, w, *, power):
    return {"y": jnp.sum(w["a"] * x ** power), "g": jax.grad(lambda z: jnp.sum(w["a"] * z ** power))(x)}


def args(n=5):
    x = jnp.linspace(0.1, 1.0, n)
    return x, {"a": jnp.arange(1.0, n + 1.0)}


@pytest.fixture(autouse=True)
def fresh_process_memo():
    """Each test starts as a new process would: no program compiled yet."""
    compiled.forget_compiled()
    yield
    compiled.forget_compiled()


@pytest.fixture
def cache_dir(tmp_path):
    """Point JAX's compilation cache at a fresh folder for one test."""
    old = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "jax"))
    try:
        yield tmp_path / "jax"
    finally:
        jax.config.update("jax_compilation_cache_dir", old)


def compile_again(*a, **kw):
    """compile_cached as a later process calls it (this process's programs forgotten)."""
    compiled.forget_compiled()
    return compile_cached(*a, **kw)


def exported_files(folder):
    return sorted((folder / EXPORT_FOLDER).glob("*.jaxexport"))


def reference(a, power):
    return jax.jit(lambda x, w: body(x, w, power=power))(*a)


def test_without_a_cache_folder_it_is_plain_jit():
    old = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", None)
    try:
        fn, timing = compile_cached("t", body, args(), {"power": 3})
    finally:
        jax.config.update("jax_compilation_cache_dir", old)
    assert timing["exported"] is False
    out, ref = fn(*args()), reference(args(), 3)
    np.testing.assert_array_equal(out["y"], ref["y"])
    np.testing.assert_array_equal(out["g"], ref["g"])


def test_first_call_writes_the_program_and_a_later_one_reads_it(cache_dir):
    fn, timing = compile_cached("t", body, args(), {"power": 3})
    assert timing["exported"] is False
    files = exported_files(cache_dir)
    assert len(files) == 1 and files[0].name.startswith("t-")
    ref = reference(args(), 3)
    out = fn(*args())
    np.testing.assert_allclose(out["y"], ref["y"], rtol=1e-15)
    np.testing.assert_allclose(out["g"], ref["g"], rtol=1e-15)
    again, timing = compile_again("t", body, args(), {"power": 3})
    assert timing["exported"] is True and exported_files(cache_dir) == files
    np.testing.assert_array_equal(again(*args())["g"], out["g"])


def test_the_key_follows_static_arguments_shapes_and_source(cache_dir, monkeypatch):
    compile_cached("t", body, args(), {"power": 3})
    compile_cached("t", body, args(), {"power": 2})
    compile_cached("t", body, args(7), {"power": 3})
    assert len(exported_files(cache_dir)) == 3
    fn, _ = compile_again("t", body, args(), {"power": 2})
    np.testing.assert_allclose(fn(*args())["y"], reference(args(), 2)["y"], rtol=1e-15)
    monkeypatch.setattr(compiled, "source_digest", lambda: "a changed package")
    _, timing = compile_again("t", body, args(), {"power": 3})
    assert timing["exported"] is False and len(exported_files(cache_dir)) == 4


def test_a_damaged_file_is_a_miss_and_is_replaced(cache_dir):
    compile_cached("t", body, args(), {"power": 3})
    (path,) = exported_files(cache_dir)
    path.write_bytes(b"not a program")
    fn, timing = compile_again("t", body, args(), {"power": 3})
    assert timing["exported"] is False
    np.testing.assert_allclose(fn(*args())["y"], reference(args(), 3)["y"], rtol=1e-15)
    _, timing = compile_again("t", body, args(), {"power": 3})
    assert timing["exported"] is True


def test_called_with_another_tree_it_refuses(cache_dir):
    fn, _ = compile_cached("t", body, args(), {"power": 3})
    x, w = args()
    with pytest.raises(TypeError, match="compiled for arguments"):
        fn(x, {"b": w["a"]})


def test_a_host_callback_is_compiled_without_the_file(cache_dir):
    seen = []

    def with_callback(x):
        jax.debug.callback(lambda v: seen.append(float(v)), jnp.sum(x))
        return 2.0 * x

    fn, timing = compile_cached("cb", with_callback, (jnp.ones(3),))
    assert timing["exported"] is False and exported_files(cache_dir) == []
    np.testing.assert_array_equal(fn(jnp.ones(3)), 2.0 * np.ones(3))
    assert seen == [3.0]


def test_a_new_process_reads_the_program(tmp_path):
    """The point of the cache: a second process skips the trace and gets the same numbers."""
    script = textwrap.dedent(f"""
        import json
        import jax, jax.numpy as jnp
        from dopplermap import _x64
        from dopplermap.cache import enable_compilation_cache
        from dopplermap.compiled import compile_cached
        from test_compiled import args, body
        enable_compilation_cache({str(tmp_path / "jax")!r})
        fn, timing = compile_cached("t", body, args(), {{"power": 3}})
        print(json.dumps({{"exported": timing["exported"], "g": [float(v) for v in fn(*args())["g"]]}}))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    import json

    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first["exported"] is False and second["exported"] is True
    assert first["g"] == second["g"]
    np.testing.assert_allclose(second["g"], np.asarray(reference(args(), 3)["g"]), rtol=1e-15)


def test_an_unwritable_folder_only_costs_the_file(cache_dir):
    cache_dir.mkdir(parents=True)
    (cache_dir / EXPORT_FOLDER).write_text("a file where the folder should be")
    fn, timing = compile_cached("t", body, args(), {"power": 3})
    assert timing["exported"] is False
    np.testing.assert_allclose(fn(*args())["y"], reference(args(), 3)["y"], rtol=1e-15)
    assert sorted(p.name for p in cache_dir.iterdir()) == [EXPORT_FOLDER]


def test_this_process_keeps_its_programs(cache_dir):
    fn, timing = compile_cached("t", body, args(), {"power": 3})
    assert timing["cached"] is False and timing["compile"] > 0
    again, timing = compile_cached("t", body, args(), {"power": 3})
    assert again is fn and timing["cached"] is True and timing["compile"] == timing["trace_lower"] == 0.0
    assert compiled.compiled_program("t", body, args(), {"power": 3}) is fn
    # another static argument, shape or dtype is another program
    assert compiled.compiled_program("t", body, args(), {"power": 2}) is None
    assert compiled.compiled_program("t", body, args(6), {"power": 3}) is None
    x, w = args()
    assert compiled.compiled_program("t", body, (x.astype(jnp.float32), w), {"power": 3}) is None
    other, timing = compile_cached("t", body, args(6), {"power": 3})
    assert other is not fn and timing["cached"] is False
    compiled.forget_compiled()
    assert compiled.compiled_program("t", body, args(), {"power": 3}) is None


def test_call_cached_is_the_function_compiled_once(cache_dir):
    out = compiled.call_cached("t", body, *args(), power=3)
    np.testing.assert_allclose(out["g"], reference(args(), 3)["g"], rtol=1e-15)
    fn = compiled.compiled_program("t", body, args(), {"power": 3})
    assert fn is not None and len(exported_files(cache_dir)) == 1
    compiled.call_cached("t", body, *args(), power=3)
    assert compiled.compiled_program("t", body, args(), {"power": 3}) is fn


@pytest.mark.parametrize("folder", [False, True])
def test_xla_options_make_another_program_with_the_same_values(folder, tmp_path):
    """A program compiled with XLA options of its own (the solver loops' cheaper CPU code
    generation) is kept apart from the default one, and computes the same values."""
    old = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "jax") if folder else None)
    try:
        opts = compiled.loop_options()
        assert opts == (compiled.LOOP_OPTIONS if jax.default_backend() == "cpu" else {})
        plain, _ = compile_cached("t", body, args(), {"power": 3})
        light, timing = compile_cached("t", body, args(), {"power": 3}, options=opts)
        assert timing["cached"] is False and light is not plain
        again, timing = compile_cached("t", body, args(), {"power": 3}, options=opts)
        assert again is light and timing["cached"] is True
        assert compiled.program_state("t", body, args(), {"power": 3}, opts) == "memo"
        ref = reference(args(), 3)
        for fn in (plain, light):
            np.testing.assert_allclose(fn(*args())["y"], ref["y"], rtol=1e-14)
            np.testing.assert_allclose(fn(*args())["g"], ref["g"], rtol=1e-14)
        if folder:  # one lowered program on disk serves both compilations
            assert len(exported_files(tmp_path / "jax")) == 1
    finally:
        jax.config.update("jax_compilation_cache_dir", old)


def test_an_xla_option_this_jaxlib_does_not_know_falls_back_to_the_defaults():
    """XLA options come and go between versions: an unknown one compiles with XLA's defaults
    (same values) instead of failing every solve; any other compile error still raises."""
    fn, _ = compile_cached("t-unknown-option", body, args(), {"power": 3},
                           options={"xla_no_such_option_in_any_version": True})
    np.testing.assert_allclose(fn(*args())["y"], reference(args(), 3)["y"], rtol=1e-14)
    with pytest.raises(jax.errors.JaxRuntimeError):
        compiled._xla_compile(jax.jit(lambda x: x).lower(jnp.ones(2)), {"xla_backend_optimization_level": "x"})


def test_threads_asking_for_one_program_compile_it_once(monkeypatch):
    """Grid points and members on threads ask for the same program at once: one compiles it, the
    others wait for it and get the same program."""
    calls = []
    real = compiled._compile

    def slow(*a, **kw):  # a compile long enough for every thread to ask meanwhile
        calls.append(1)
        time.sleep(0.3)
        return real(*a, **kw)

    monkeypatch.setattr(compiled, "_compile", slow)
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: compile_cached("body", body, args(), {"power": 2}, cache=False), range(4)))
    assert len(calls) == 1
    assert sorted(t["cached"] for _, t in outs) == [False, True, True, True]
    assert len({id(fn) for fn, _ in outs}) == 1
    np.testing.assert_allclose(outs[0][0](*args())["y"], reference(args(), 2)["y"])
