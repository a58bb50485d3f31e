"""Start-up: the CLI's help, version, init and argument errors, and ``import dopplermap``,
load no heavy library (JAX, SciPy, astropy, matplotlib); the public names still resolve."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dopplermap

HEAVY = ("jax", "scipy", "astropy", "matplotlib")
SRC = str(Path(dopplermap.__file__).resolve().parents[1])

# runs the CLI in-process in a fresh interpreter, then reports its exit status and which
# heavy modules were imported
_PROBE = f"""
import json, sys
from dopplermap.cli import main
rc = main(sys.argv[1:])
print(json.dumps({{"rc": rc, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


def _run(code: str, *args: str, cwd=None) -> dict:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
               DOPPLERMAP_CACHE_DIR="off")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=cwd,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _cli(*args: str, cwd=None) -> dict:
    return _run(_PROBE, *args, cwd=cwd)


@pytest.mark.parametrize("args,rc", [
    (("--help",), 0),
    ((), None),                              # bare: the help, status 0 or 2 as click gives
    (("report", "-q", "--help"), 0),
    (("--version",), 0),
    (("invert", "--help"), 0),
    (("grid", "--help"), 0),                 # its help shows the app layer's defaults
    (("invert",), 2),                        # missing argument
    (("demo", "--n-cell", "-5"), 2),         # bad value
    (("invert-seed", "--lmbd", "1"), 2),     # missing pickles
    (("simulate", "--n-cell", "3"), 2),
    (("no-such-command",), 2),
])
def test_cli_answers_without_heavy_imports(args, rc):
    out = _cli(*args)
    assert out["rc"] in ((0, 2) if rc is None else (rc,))
    assert out["heavy"] == [], f"dopplermap {' '.join(args)} imported {out['heavy']}"


def test_init_writes_a_template_without_heavy_imports(tmp_path):
    out = _cli("init", str(tmp_path / "target.toml"))
    assert out["rc"] == 0 and out["heavy"] == []
    assert "[star]" in (tmp_path / "target.toml").read_text()


def test_import_dopplermap_is_light_and_leaves_x64_alone():
    out = _run("import json, sys, dopplermap as dm; dir(dm); dm.__version__; dm.DopplermapInputError; "
               f"print(json.dumps({{'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}))")
    assert out["heavy"] == []


def test_public_names_resolve_and_first_use_enables_x64():
    code = ("import json, jax, dopplermap as dm\n"
            "before = bool(jax.config.jax_enable_x64)\n"
            "missing = [n for n in dm.__all__ if not hasattr(dm, n)]\n"
            "star = dm.StarParams(inclination=50.0)\n"
            "x = dm.model.jnp.asarray(1.0)\n"
            "print(json.dumps({'before': before, 'after': bool(jax.config.jax_enable_x64), 'missing': missing,\n"
            "                  'dtype': str(x.dtype), 'dir': sorted(set(dm.__all__) - set(dir(dm))),\n"
            "                  'same': dm.StarParams is __import__('dopplermap.geometry').geometry.StarParams}))")
    out = _run(code)
    if not os.environ.get("JAX_ENABLE_X64"):
        assert out["before"] is False  # JAX's default: importing dopplermap did not flip it
    assert out["after"] is True and out["dtype"] == "float64"
    assert out["missing"] == [] and out["dir"] == [] and out["same"] is True


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        dopplermap.no_such_name  # noqa: B018


def test_require_x64_names_the_setting():
    import jax

    from dopplermap._x64 import require_x64

    require_x64()  # on: no error
    jax.config.update("jax_enable_x64", False)
    try:
        with pytest.raises(dopplermap.DopplermapError, match="jax_enable_x64"):
            require_x64()
    finally:
        jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize("args,rc,stream,text", [
    (("--version",), 0, "stdout", dopplermap.__version__),
    (("invert-seed", "--lmbd", "1"), 2, "stderr", "error: missing --idc, --sg, --cpcs"),
])
def test_console_command_exits_with_the_status_after_the_exit_handlers(tmp_path, args, rc, stream, text):
    """``dopplermap`` (cli.run) skips the interpreter's teardown, not its output or exit handlers."""
    marker = tmp_path / "atexit"
    code = ("import atexit, sys\n"
            f"atexit.register(lambda: open({str(marker)!r}, 'w').write('ran'))\n"
            "from dopplermap.cli import run\n"
            "sys.stdout.write('buffered ')\n"
            "run()\n"
            "raise SystemExit('not reached')\n")
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), DOPPLERMAP_CACHE_DIR="off")
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == rc, p.stderr
    assert p.stdout.startswith("buffered ") and text in getattr(p, stream)
    assert marker.read_text() == "ran"
    pyproject = Path(SRC).parent / "pyproject.toml"
    if pyproject.is_file():
        assert 'dopplermap = "dopplermap.cli:run"' in pyproject.read_text()


def test_the_root_exports_what_a_user_starts_from():
    """The root's __all__ is the short list the README teaches, Problem first; old loose parts are
    in their modules only."""
    assert len(dopplermap.__all__) <= 20
    assert {"Problem", "Settings", "Outcome", "invert", "InversionResult"} <= set(dopplermap.__all__)
    for old, module in (("fold_dense", "model"), ("synthesize", "model"), ("loss", "objective"),
                        ("invert_device", "solvers"), ("cell_geometry", "geometry")):
        assert not hasattr(dopplermap, old), old
        assert hasattr(importlib.import_module(f"dopplermap.{module}"), old)


def test_the_seed_run_imports_no_library_it_does_not_use():
    """``invert-seed`` on the seed's pickles needs JAX and, for L-BFGS-B, scipy.optimize (loaded
    while the objective compiles); importing its modules loads no other SciPy package, nor
    matplotlib (the figure child's) or astropy."""
    code = ("import json, sys\n"
            "import dopplermap.commands.seed, dopplermap.app.seed, dopplermap.app.output, dopplermap.problem\n"
            "print(json.dumps({'loaded': sorted(m for m in sys.modules if m.split('.')[0] in "
            "('scipy', 'matplotlib', 'astropy'))}))")
    assert _run(code)["loaded"] == []
