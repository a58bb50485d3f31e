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


def _griffe_object(package, module: str, name: str):
    """The object ``module.name`` as griffe reads it from the source (an alias followed to
    where it is defined; a package's lazy name found in its submodules), or None."""
    node = package
    for part in module.split(".")[1:]:
        node = node.members[part]
    obj = node.members.get(name)
    if obj is None and node.modules:  # a package's lazy name (PEP 562): defined in a submodule
        obj = next((m.members[name] for m in node.modules.values() if name in m.members), None)
    if obj is not None and obj.is_alias:
        obj = obj.final_target
    return obj


@pytest.fixture(scope="module")
def package():
    import griffe  # griffelib, a test requirement
    return griffe.load("dopplermap", search_paths=[str(ROOT / "src")])  # the source only: nothing imported


def test_every_root_name_is_in_the_api_reference(package):
    """Each name of ``dopplermap.__all__`` and of the root's lazy names, and each ``[section]``
    class of the configuration, is rendered by the API pages: the module that defines it has
    a ``:::`` directive and it has a docstring (mkdocstrings leaves out objects without one)."""
    documented = _documented_modules()
    names = {n: f"dopplermap.{dopplermap._LAZY.get(n, 'errors')}"
             for n in sorted(set(dopplermap.__all__) | set(dopplermap._LAZY))}
    config = package.members["config"]
    names.update({n: "dopplermap.config" for n, obj in config.members.items()
                  if n.endswith("Config") and not obj.is_alias and obj.is_class})
    missing = []
    for name, module in names.items():
        obj = _griffe_object(package, module, name)
        if obj is None:
            missing.append(f"{name}: not found in {module}")
            continue
        home = obj.parent.path
        if home not in documented:
            missing.append(f"{name}: its module {home} has no ::: directive in docs/api/")
        elif not obj.docstring:
            missing.append(f"{name} ({home}): no docstring, so the API page leaves it out")
    assert not missing, "\n".join(missing)
    assert {"DEMO_SPOTS", "save_result", "StarConfig", "InversionConfig", "DopplermapWarning"} <= set(names)


def test_the_check_finds_an_undocumented_name(package):
    # a module without a directive and an object without a docstring are both caught
    assert "dopplermap._repr" not in _documented_modules()
    assert not _griffe_object(package, "dopplermap.errors", "EXIT_OK").docstring
    assert _griffe_object(package, "dopplermap.app", "save_result").parent.path == "dopplermap.app.folders"


def test_getting_started_shows_the_demo_figures():
    """The page's images exist, are PNGs the script draws, and each drawn image is shown."""
    import ast

    page = (ROOT / "docs" / "getting-started.md").read_text()
    shown = re.findall(r"!\[[^\]]+\]\((img/[^)]+)\)", page)
    assert len(shown) >= 4
    for rel in shown:
        raw = (ROOT / "docs" / rel).read_bytes()
        assert raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) < 150_000, rel
    script = ast.parse((ROOT / "docs" / "make_figures.py").read_text())
    figures = next(ast.literal_eval(n.value) for n in script.body if isinstance(n, ast.Assign)
                   and getattr(n.targets[0], "id", "") == "FIGURES")
    assert sorted(f"img/demo_{k}.png" for k in figures) == sorted(shown)
    assert sorted(p.name for p in (ROOT / "docs" / "img").glob("*.png")) == sorted(Path(s).name for s in shown)


def test_the_notebook_page_holds_every_cell_and_stored_output():
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("notebook_hook", ROOT / "docs" / "_hooks" / "notebook.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    nb = json.loads((ROOT / "docs" / "quickstart.ipynb").read_text())
    page = hook.render(nb)
    for cell in nb["cells"]:
        source = "".join(cell["source"]).strip()
        if source:
            assert source in page, source[:60]
    # outputs a run stored: text after its cell, a figure as an inline PNG
    run = {"cells": [{"cell_type": "code", "source": "print(1)\nfig", "outputs": [
        {"output_type": "stream", "name": "stdout", "text": ["chi2 1.01\n"]},
        {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}}]}]}
    page = hook.render(run)
    assert "```text\nchi2 1.01\n```" in page and "data:image/png;base64,iVBORw0KGgo=" in page
    assert "<Figure>" not in page
    assert "quickstart.md" in (ROOT / "mkdocs.yml").read_text()


LOPEG = ROOT.parent / "shared" / "data" / "lopeg"


@pytest.mark.slow
def test_lopeg_page_runs_as_written(tmp_path, monkeypatch, capsys):
    """docs/lopeg.md's commands (DIR: the shared LO Peg data) and its Python block, as written."""
    import shlex

    if not (LOPEG / "inzdi.dat").is_file():
        pytest.skip(f"LO Peg data not found at {LOPEG} (the shared data folder is absent)")
    from dopplermap.cli import main

    page = (ROOT / "docs" / "lopeg.md").read_text()
    commands = [ln for block in re.findall(r"```bash\n(.*?)```", page, re.S) for ln in block.splitlines()
                if ln.startswith("dopplermap ")]
    python = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(commands) == 2 and len(python) == 1
    monkeypatch.chdir(tmp_path)
    for line in commands:
        args = shlex.split(line.replace("DIR", str(LOPEG)))[1:]
        assert main(args) == 0, line
    exec(compile(python[0], "docs/lopeg.md", "exec"), {})
    out = capsys.readouterr().out
    assert "cool-spot filling above +60 deg" in out
    high, low = (float(x) for x in re.findall(r"deg: ([0-9.]+)", out))
    assert high > 2 * low  # the polar cap the page describes
    from astropy.io import fits

    with fits.open(tmp_path / "lopeg-results" / "map.fits") as hdul:
        assert hdul["MAP"].header["OBJECT"] == "LOPEG"
    assert (tmp_path / "lopeg-polar.png").stat().st_size > 10_000 and (tmp_path / "lopeg-map.ecsv").is_file()
