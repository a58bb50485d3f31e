"""The user documentation: the API reference covers the names a user starts from, and the
getting-started page shows the demo's figures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dopplermap

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"


def _documented_modules() -> set[str]:
    """Modules rendered by a ``::: module`` directive of the API pages."""
    out = set()
    for page in API.glob("*.md"):
        out |= set(re.findall(r"^::: *([\w.]+)", page.read_text(), re.M))
    return out


def _defining_module(name: str) -> str:
    value = getattr(dopplermap, name)
    module = getattr(value, "__module__", None)
    if isinstance(module, str) and module.startswith("dopplermap") and not isinstance(value, tuple):
        return module
    return f"dopplermap.{dopplermap._LAZY[name]}"  # data (DEMO_SPOTS): where the root imports it from


def _griffe_object(package, module: str, name: str):
    node = package
    for part in module.split(".")[1:]:
        node = node.members[part]
    obj = node.members.get(name)
    if obj is not None and obj.is_alias:
        obj = obj.final_target
    return obj


def test_every_root_name_is_in_the_api_reference():
    """Each name of ``dopplermap.__all__`` and of the root's lazy names, and each ``[section]``
    class of the configuration, is rendered by the API pages: its module has a ``:::``
    directive and it has a docstring (mkdocstrings leaves out objects without one)."""
    griffe = pytest.importorskip("griffe")
    package = griffe.load("dopplermap", search_paths=[str(ROOT / "src")])
    documented = _documented_modules()
    names = {n: _defining_module(n) for n in sorted(set(dopplermap.__all__) | set(dopplermap._LAZY))}
    from dopplermap import config

    names.update({n: "dopplermap.config" for n in config.__all__ if n.endswith("Config")})
    missing = []
    for name, module in names.items():
        if module not in documented:
            missing.append(f"{name}: its module {module} has no ::: directive in docs/api/")
            continue
        obj = _griffe_object(package, module, name)
        if obj is None:
            missing.append(f"{name}: not found in {module}")
        elif not obj.docstring:
            missing.append(f"{name} ({module}): no docstring, so the API page leaves it out")
    assert not missing, "\n".join(missing)
    assert {"DEMO_SPOTS", "save_result", "StarConfig", "DopplermapWarning"} <= set(names)


def test_the_check_finds_an_undocumented_name(monkeypatch):
    griffe = pytest.importorskip("griffe")
    package = griffe.load("dopplermap", search_paths=[str(ROOT / "src")])
    # a module without a directive and an object without a docstring are both caught
    assert "dopplermap._repr" not in _documented_modules()
    assert not _griffe_object(package, "dopplermap.errors", "EXIT_OK").docstring
