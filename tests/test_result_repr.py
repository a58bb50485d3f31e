"""Notebook-facing behaviour of results: short repr, HTML repr with a map thumbnail, context
attached by dm.invert, and the progress display outside a terminal."""

from __future__ import annotations

import base64
import dataclasses
import io
import re
import sys

import matplotlib
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.errors import DopplermapInputError
from dopplermap.progress import Reporter


@pytest.fixture(scope="module")
def fitted(small_problem):
    star, grid, times, vels, comps, sim = small_problem
    problem = dm.Problem(grid=grid, star=star, obs=sim.obs, components=comps)
    return problem.pre, dm.invert(problem, lmbd=0.3, maxiter=60)


def test_invert_attaches_grid_star_observations(small_problem, fitted):
    star, grid, times, vels, comps, sim = small_problem
    pre, res = fitted
    assert res.grid is grid and res.star is star and res.obs is sim.obs
    assert res.intensities == tuple(float(c.intensity) for c in comps)
    np.testing.assert_allclose(res.brightness, dm.result.relative_brightness(res.fssc, res.fssh, res.intensities))
    # a bare precomputed model (the adapter) knows no set-up: its result has the observations only
    res2 = dm.invert(pre, sim.obs, lmbd=0.3, maxiter=2)
    assert res2.obs is sim.obs and res2.grid is None and res2.star is None and res2.intensities is None


def test_repr_is_short_and_has_the_main_numbers(fitted):
    _, res = fitted
    text = repr(res)
    assert len(text) < 300, text
    assert f"chi2={res.chi2:.5g}" in text and f"iterations={res.iterations}" in text
    assert f"n_cell={res.fssc.size}" in text and f"n_epoch={res.rv.size}" in text
    assert "array" not in text and "[" not in text  # no array dump
    long = dataclasses.replace(res, stop_reason="X" * 500)
    assert len(repr(long)) < 300


def _png_pixels(html_text):
    m = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html_text)
    assert m, "no inline PNG"
    raw = base64.b64decode(m.group(1))
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(io.BytesIO(raw), format="png")


def test_html_repr_table_and_thumbnail_shows_the_spots(fitted):
    pre, res = fitted
    backend = matplotlib.get_backend()
    figs = sys.modules["matplotlib.pyplot"].get_fignums() if "matplotlib.pyplot" in sys.modules else None
    page = res._repr_html_()
    assert matplotlib.get_backend() == backend  # no backend switch
    if figs is not None:
        assert sys.modules["matplotlib.pyplot"].get_fignums() == figs  # no pyplot figures left behind
    assert "<table>" in page and f"{res.chi2:.6g}" in page and f"{res.iterations} / {res.n_eval}" in page
    assert "inclination 55 deg" in page
    assert len(page) < 2000  # table and thumbnail together: a small notebook display
    img = _png_pixels(page)
    h, w = img.shape[:2]
    assert w == 2 * h  # longitude 0-360 by latitude -90..90
    lum = img[..., :3].mean(axis=-1)

    def pixel(lat_deg, lon_deg):
        x = min(int(lon_deg / 360.0 * w), w - 1)
        y = min(int((90.0 - lat_deg) / 180.0 * h), h - 1)
        return lum[y, x]

    lat, lon = np.degrees(res.grid.lat), np.degrees(res.grid.lon)
    spot = int(np.argmax(res.fssc))
    clear = int(np.argmin(np.where(lat > 0, res.fssc, np.inf)))  # least spotted visible cell
    # the cool-spot map: a filled cell is drawn darker than an unspotted one
    assert pixel(lat[spot], lon[spot]) < pixel(lat[clear], lon[clear]) - 0.3


def test_html_repr_without_grid_has_no_thumbnail(fitted):
    _, res = fitted
    page = dataclasses.replace(res, grid=None, star=None)._repr_html_()
    assert "<table>" in page and "<img" not in page and len(page) < 3000


def test_progress_is_one_line_per_step_when_stderr_is_not_a_terminal(capsys):
    with Reporter() as rep:  # default console on stderr, which pytest captures (not a tty)
        with rep.step("precompute"):
            pass
        with rep.solve(maxiter=5) as cb:
            cb(1, {"loss": [1.0], "chi2": [2.0]})
        with pytest.raises(DopplermapInputError), rep.step("read"):
            raise DopplermapInputError("bad.toml: [star] inclination must be a number")
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and "\x1b" not in captured.err  # plain lines: no redraws, no colour codes
    assert [ln.split()[:2] for ln in lines] == [["✓", "precompute"], ["✓", "solve"]]
    assert "iteration 1/5" in lines[1]  # a user error's step writes no line: the error's own line says it
    assert set(rep.timings) == {"precompute", "solve", "read"}


def test_fresh_result_saves_without_with_context(small_problem, fitted, tmp_path):
    star, grid, *_ = small_problem
    _, res = fitted
    dm.save_result(res, tmp_path / "r", plots=False)
    back = dm.load_result(tmp_path / "r")
    np.testing.assert_allclose(back.grid.lat, grid.lat)
    assert back.star.inclination == star.inclination and back.intensities == pytest.approx(res.intensities)
    np.testing.assert_allclose(back.brightness, res.brightness, rtol=1e-6)
    assert repr(back).startswith("InversionResult(") and len(repr(back)) < 300
