"""Release metadata: one version, licence and citation files, dependency bounds."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import dopplermap
from dopplermap.cli import main

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION_FILE = ROOT / "src" / "dopplermap" / "_version.py"


def file_version() -> str:
    m = re.search(r'^__version__ = "([^"]+)"$', VERSION_FILE.read_text(), re.M)
    assert m, f"{VERSION_FILE} has no __version__ line"
    return m.group(1)


def test_version_has_one_source(capsys):
    project = PYPROJECT["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "src/dopplermap/_version.py"
    assert dopplermap.__version__ == file_version()
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dopplermap, version {file_version()}"


def test_installed_metadata_matches():
    try:
        installed = importlib.metadata.version("dopplermap")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("dopplermap is not installed (tests run from the source tree only)")
    assert installed == dopplermap.__version__


def test_license_file_matches_declaration():
    text = (ROOT / "LICENSE").read_text()
    assert PYPROJECT["project"]["license"] == "BSD-3-Clause"
    assert "LICENSE" in PYPROJECT["project"]["license-files"]
    assert text.startswith("BSD 3-Clause License")
    assert re.search(r"Copyright \(c\) \d{4}, dopplermap developers", text)
    assert "Neither the name of the copyright holder" in text  # clause 3


def test_citation_is_valid_cff():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    for key in ("cff-version", "message", "title", "authors"):  # required by CFF 1.2.0
        assert cff.get(key), f"CITATION.cff: missing {key}"
    assert cff["cff-version"] == "1.2.0"
    assert all(a.get("name") or a.get("family-names") for a in cff["authors"])
    assert cff["version"] == dopplermap.__version__
    assert cff["license"] == PYPROJECT["project"]["license"]


def test_changelog_has_unreleased_section():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "keepachangelog.com" in text and re.search(r"^## \[Unreleased\]$", text, re.M)


def all_requirements():
    project = PYPROJECT["project"]
    reqs = list(project["dependencies"]) + list(PYPROJECT["build-system"]["requires"])
    for extra in project["optional-dependencies"].values():
        reqs += [r for r in extra if not r.startswith("dopplermap[")]
    return [Requirement(r) for r in reqs]


def test_no_upper_caps_unless_documented():
    # a cap is allowed only with a "# cap NAME: reason" line in pyproject.toml
    documented = set(re.findall(r"^# cap ([A-Za-z0-9_.-]+):", (ROOT / "pyproject.toml").read_text(), re.M))
    capped = {r.name for r in all_requirements() for s in r.specifier if s.operator in ("<", "<=", "==", "~=", "===")}
    assert capped <= documented, f"undocumented upper caps: {sorted(capped - documented)}"
    for r in all_requirements():
        assert any(s.operator == ">=" for s in r.specifier), f"{r}: no lower bound"


def test_every_runtime_dependency_is_imported():
    modules = {"jax": "jax", "numpy": "numpy", "scipy": "scipy", "matplotlib": "matplotlib", "astropy": "astropy",
               "rich": "rich", "click": "click", "threadpoolctl": "threadpoolctl",
               "flatbuffers": "flatbuffers", "jaxlib": "jaxlib", "pillow": "PIL"}
    # declared only to constrain a dependency's dependency (each with its "# cap" reason)
    transitive = {"ml_dtypes"}
    source = "\n".join(p.read_text() for p in (ROOT / "src" / "dopplermap").rglob("*.py"))
    for req in map(Requirement, PYPROJECT["project"]["dependencies"]):
        if req.name in transitive:
            assert re.search(rf"^# cap {req.name}:", (ROOT / "pyproject.toml").read_text(), re.M)
            continue
        assert req.name in modules, f"{req.name}: add its import name to this test"
        mod = modules[req.name]
        assert re.search(rf"^\s*(import|from) {mod}\b", source, re.M), f"{req.name} is declared but never imported"


def _imported_top_modules(files) -> dict[str, str]:
    """Top-level modules imported (or ``pytest.importorskip``-ed) by ``files``: name -> first file."""
    import ast
    import sys

    found: dict[str, str] = {}
    for path in files:
        tree = ast.parse(path.read_text(), str(path))
        guarded = set()  # imports inside `try: ... except ImportError:` are optional by design
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and any(
                    isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                    for h in node.handlers):
                guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in guarded:
                continue
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "importorskip" and node.args and isinstance(node.args[0], ast.Constant)):
                names = [node.args[0].value]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "dopplermap":
                    found.setdefault(top, path.name)
    return found


def _declared(*groups: str) -> set[str]:
    project = PYPROJECT["project"]
    reqs = list(project["dependencies"])
    for g in groups:
        reqs += [r for r in project["optional-dependencies"][g] if not r.startswith("dopplermap[")]
    return {canonicalize_name(Requirement(r).name) for r in reqs}


# the tests that run a benchmark's own code import it from benchmarks/ (shipped in the sdist)
BENCHMARK_MODULES = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
# imported only inside a running IPython kernel (the notebook progress display), which brings it
PRESENT_WHERE_USED = {"IPython"}


def _undeclared(files, declared: set[str]) -> list[str]:
    dists = importlib.metadata.packages_distributions()
    local = {p.stem for p in files} | {p.parent.name for p in files} | BENCHMARK_MODULES
    missing = []
    for mod, where in sorted(_imported_top_modules(files).items()):
        if mod in local or mod in PRESENT_WHERE_USED:
            continue
        names = {canonicalize_name(d) for d in dists.get(mod, [])}
        if not names & declared:
            missing.append(f"{where} imports {mod!r} (distribution {sorted(names) or 'not installed'}), "
                           "which no requirement declares")
    return missing


def test_every_test_import_is_declared_in_the_test_extra():
    # A fresh `pip install -e ".[test]"` must give the suite everything it imports; a package that
    # only happens to be installed (pulled in by another one, or by hand) would hide a gap.
    missing = _undeclared(sorted((ROOT / "tests").rglob("*.py")), _declared("test"))
    assert not missing, "\n".join(missing)


def test_every_package_import_is_declared():
    # the package itself: the core dependencies, or an extra for the optional back ends (healpy, dask)
    extras = [g for g in PYPROJECT["project"]["optional-dependencies"] if g not in ("test", "dev", "docs")]
    missing = _undeclared(sorted((ROOT / "src" / "dopplermap").rglob("*.py")), _declared(*extras))
    assert not missing, "\n".join(missing)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The sdist and wheel, built from this tree without network (the back end is in [test])."""
    import subprocess
    import sys
    import tarfile
    import zipfile

    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (whl,), (sdist,) = out.glob("*.whl"), out.glob("*.tar.gz")
    with zipfile.ZipFile(whl) as z:
        wheel_names = set(z.namelist())
        entry_points = z.read(f"dopplermap-{dopplermap.__version__}.dist-info/entry_points.txt").decode()
    with tarfile.open(sdist) as t:
        sdist_names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    return wheel_names, entry_points, sdist_names


def test_wheel_holds_the_package_and_its_examples_only(built):
    wheel_names, entry_points, _ = built
    package = {p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src" / "dopplermap").rglob("*.py")}
    assert package <= wheel_names, sorted(package - wheel_names)
    assert {"dopplermap/examples/observed_star.py", "dopplermap/examples/lopeg.py"} <= wheel_names
    assert "dopplermap/data/claret2023_power2.csv" in wheel_names  # the limb-darkening table, read offline
    top = {n.split("/")[0] for n in wheel_names}
    assert top == {"dopplermap", f"dopplermap-{dopplermap.__version__}.dist-info"}, top
    assert "dopplermap = dopplermap.cli:run" in entry_points


def test_sdist_holds_what_the_tests_and_docs_need(built):
    _, _, names = built
    tracked = [p.relative_to(ROOT).as_posix() for d in ("src", "tests", "docs") for p in (ROOT / d).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts]
    missing = [n for n in tracked if n not in names]
    assert not missing, missing
    assert {"README.md", "LICENSE", "CITATION.cff", "CHANGELOG.md", "pyproject.toml", "mkdocs.yml"} <= names
    # the tests import the benchmarks' own code (tests/test_calibration.py, tests/test_multi.py)
    assert {"benchmarks/bench_calibration.py", "benchmarks/bench_multi.py", "benchmarks/_common.py"} <= names
    assert "tools/subset_claret_power2.py" in names  # how the shipped limb-darkening table was made
    assert not [n for n in names if n.startswith((".ci/", ".git/", "notes/", "site/"))]
