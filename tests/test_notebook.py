"""The quick-start notebook (docs/quickstart.ipynb) runs in a real Jupyter kernel: figures
inline, the inline backend untouched, a progress display without ipywidgets, short reprs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import dopplermap

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "quickstart.ipynb"


# executing the notebook (a kernel, the demo solve) costs ~10 s on 2 cores: the slow tier
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    cwd = tmp_path_factory.mktemp("notebook")
    # the kernel imports the same dopplermap as this test process (a source tree or an install)
    src = str(Path(dopplermap.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})
    client.execute(env=env)
    return nb, cwd


def outputs(nb):
    return [(i, o) for i, c in enumerate(nb.cells) if c.cell_type == "code" for o in c.get("outputs", ())]


def text_of(o):
    if o.output_type == "stream":
        return o.text
    return o.get("data", {}).get("text/plain", "")


def test_figures_are_inline_and_backend_unchanged(executed):
    nb, cwd = executed
    pngs = [o for _, o in outputs(nb) if o.output_type == "display_data" and "image/png" in o.get("data", {})]
    assert pngs, "no inline figure"
    printed = "".join(text_of(o) for _, o in outputs(nb))
    m = re.search(r"backend: (\S+)", printed)
    assert m and "inline" in m.group(1), printed[-500:]
    assert "map_mollweide" in printed  # a fresh dm.invert result knows its grid: maps are drawn
    assert (cwd / "quickstart-figures" / "map_mollweide.png").is_file()


def test_progress_shown_without_widget_warning(executed):
    nb, _ = executed
    shown = [text_of(o) for _, o in outputs(nb) if o.output_type == "display_data"]
    progress = [t for t in shown if "solve" in t and "iteration" in t]
    assert progress, shown
    assert "✓" in progress[0] and re.search(r"iteration [1-9][0-9]*/1000", progress[0])
    errors = "".join(o.text for _, o in outputs(nb) if o.output_type == "stream" and o.name == "stderr")
    assert "ipywidgets" not in errors and "Traceback" not in errors


def test_result_reprs_are_small(executed):
    nb, _ = executed
    results = [o for _, o in outputs(nb) if o.output_type == "execute_result" and "text/html" in o.data]
    assert len(results) == 2  # res and res2
    for o in results:
        assert o.data["text/plain"].startswith("InversionResult(") and len(o.data["text/plain"]) < 2000
        page = o.data["text/html"]
        thumb = re.search(r"data:image/png;base64,[A-Za-z0-9+/=]+", page)
        assert thumb, "no thumbnail"
        assert len(page) - len(thumb.group(0)) < 2000  # the table
        assert len(thumb.group(0)) < 1500 and len(page) < 2000  # the thumbnail; the whole display
