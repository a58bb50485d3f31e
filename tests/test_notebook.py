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


# Each figure function's value in a fresh kernel (no %matplotlib magic, no pyplot): the
# result figures of a tiny result built without a solve, and the array-level ones.
_SETUP = """\
import sys
import matplotlib
backend_before = matplotlib.get_backend()
import numpy as np
from dopplermap import plot, search, style
from dopplermap.uncertainty import Uncertainty
from test_results import small_result
res = small_result(n_cell=150, n_epoch=8, light_curve=True)
figs = plot.result_figures(res)
g = res.grid
sig = np.where(np.degrees(g.lat) < -60, np.inf, 0.01 + 0.02 * res.fssc)
unc = Uncertainty(sigma_fssc=sig, sigma_fssh=sig, method="laplace", never_visible=~np.isfinite(sig), time=0.0)
lm = np.geomspace(0.1, 10, 5)
sweep = search.LambdaSweep(lmbd=lm, chi2=1 + 0.1 * lm, regulariser=1 / lm, floor=0.0, loss=1 + 0.2 * lm,
                           iterations=np.full(5, 10), results=[], total_time=0.0)
rows = [dict(inclination=i, vsini=v, chi2_total=(i - 60) ** 2 / 50 + (v - 40) ** 2 / 2,
            chi2=1 + ((i - 60) ** 2 / 50 + (v - 40) ** 2 / 2) / 500)
        for i in (50.0, 60.0, 70.0) for v in (38.0, 40.0)]
print("FIGURES", " ".join(sorted(figs)))
"""
_CALLS = {
    "plot_map": "plot.plot_map(g.lat, g.lon, res.fssc, view=plot.View.of(g))",
    "plot_uncertainty": "plot.plot_uncertainty(g, res.fssc, unc, view=plot.View.of(g, inclination=60.0))",
    "plot_lcurve": "plot.plot_lcurve(sweep, corner=1.0, target=1.2)",
    "plot_grid": "plot.plot_grid(rows, ['inclination', 'vsini'])",
    "plot_chi2_landscape": "plot.plot_chi2_landscape(rows, ['inclination', 'vsini'])",
    "plot_polar": "plot.plot_polar(g.lat, g.lon, res.fssc, quantity='cool', view=plot.View(inclination=60.0, phases=[0.1, 0.4]))",
    "result.plot": "res.plot('polar')",
}
# result_figures' names for this result: each becomes its own cell, figs[name]()
_RESULT_FIGURES = ("map_mollweide", "map_rect", "orthographic", "polar", "profiles", "dynamic_spectrum", "light_curve",
                   "convergence")


@pytest.fixture(scope="module")
def figures_notebook(tmp_path_factory):
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [new_code_cell(_SETUP)]
    calls = {**{name: f"figs[{name!r}]()" for name in _RESULT_FIGURES}, **_CALLS}
    for name, call in calls.items():
        cells.append(new_code_cell(call, metadata={"figure": name}))
    cells.append(new_code_cell(f"fig = {_CALLS['plot_map']}\ndisplay(fig)", metadata={"figure": "display"}))
    cells.append(new_code_cell('print("PYPLOT", "matplotlib.pyplot" in sys.modules)\n'
                               'print("BACKEND", backend_before, "->", matplotlib.get_backend())'))
    # after the magic, IPython's inline formatter draws the figure: still one image, not two
    cells.append(new_code_cell("%matplotlib inline\n" + _CALLS["plot_lcurve"], metadata={"figure": "after_magic"}))
    nb = new_notebook(cells=cells)
    cwd = tmp_path_factory.mktemp("figures")
    tests = str(Path(__file__).resolve().parent)
    src = str(Path(dopplermap.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, tests, os.environ.get("PYTHONPATH", "")]),
           "DOPPLERMAP_CACHE_DIR": "off"}
    env.pop("MPLBACKEND", None)  # the kernel chooses, as a fresh one does
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute(env=env)
    return nb


def test_every_returned_figure_shows_in_a_fresh_kernel(figures_notebook):
    nb = figures_notebook
    printed = "".join(text_of(o) for _, o in outputs(nb))
    assert " ".join(sorted(_RESULT_FIGURES)) in printed, printed[:500]  # every figure of the result is tried
    for cell in nb.cells[1:]:
        name = cell.metadata.get("figure")
        if name is None:
            continue
        pngs = [o for o in cell.outputs if o.output_type in ("execute_result", "display_data")
                and "image/png" in o.get("data", {})]
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, (name, errors)
        assert len(pngs) == 1, (name, [o.get("data", {}).keys() for o in cell.outputs])
        assert "Figure size" in pngs[0]["data"]["text/plain"]


def test_figures_leave_pyplot_and_the_backend_alone(figures_notebook):
    printed = "".join(text_of(o) for _, o in outputs(figures_notebook))
    assert "PYPLOT False" in printed, printed[-500:]
    m = re.search(r"BACKEND (\S+) -> (\S+)", printed)
    assert m and m.group(1) == m.group(2), printed[-500:]
