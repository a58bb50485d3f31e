"""Release metadata: one version, licence and citation files, dependency bounds."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

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
               "flatbuffers": "flatbuffers"}
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
