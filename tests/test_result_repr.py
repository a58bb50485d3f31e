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


# ---------------------------------------------------------------------- astropy tables, reprs


def test_to_table_has_units_and_round_trips_through_ecsv(fitted, tmp_path):
    import astropy.units as u
    from astropy.table import QTable

    from dopplermap.uncertainty import Uncertainty

    _, res = fitted
    sig = np.where(np.degrees(res.grid.lat) < -55, np.inf, 0.01 + 0.1 * res.fssc)
    unc = Uncertainty(sigma_fssc=sig, sigma_fssh=sig / 2, method="laplace-posterior-dense",
                      never_visible=~np.isfinite(sig))
    t = res.to_table(uncertainty=unc)
    assert len(t) == res.n_cell
    assert t["lat"].unit == u.deg and t["lon"].unit == u.deg and t["area"].unit == u.sr
    np.testing.assert_allclose(t["lat"].to_value(u.rad), res.grid.lat)
    np.testing.assert_allclose(np.sum(t["area"]).to_value(u.sr), 4 * np.pi)
    np.testing.assert_array_equal(t["fssc"].value, res.fssc)
    np.testing.assert_allclose(t["fssp"].value, 1 - res.fssc - res.fssh)
    np.testing.assert_allclose(t["brightness"].value, res.brightness)
    assert t["never_visible"].sum() == (~np.isfinite(sig)).sum() and t.meta["uncertainty_method"].startswith("laplace")
    path = tmp_path / "map.ecsv"
    t.write(path, format="ascii.ecsv")
    back = QTable.read(path, format="ascii.ecsv")
    assert back.colnames == t.colnames
    for name in t.colnames:
        assert getattr(back[name], "unit", None) == getattr(t[name], "unit", None), name
        np.testing.assert_array_equal(np.asarray(back[name]), np.asarray(t[name]), err_msg=name)
    assert back.meta["inclination_deg"] == res.star.inclination
    with pytest.raises(DopplermapInputError, match="grid"):
        dataclasses.replace(res, grid=None).to_table()
    with pytest.raises(DopplermapInputError, match="shape"):
        res.to_table(uncertainty=dataclasses.replace(unc, sigma_fssc=sig[:5]))


def test_epochs_table_times_phases_and_chi2_per_epoch(fitted, tmp_path):
    import astropy.units as u
    from astropy.table import QTable
    from astropy.time import Time

    _, res = fitted
    t = res.epochs_table()
    times = np.asarray(res.obs.times, float)
    assert isinstance(t["time"], Time) and t["time"].scale == "tdb"
    np.testing.assert_allclose(t["time"].jd, times, rtol=0, atol=1e-9)
    np.testing.assert_allclose(t["cycle"].value, (times - res.star.t0) / res.star.period)
    assert np.all((t["phase"].value >= 0) & (t["phase"].value < 1))
    assert t["rv"].unit == u.km / u.s
    np.testing.assert_array_equal(t["rv"].to_value(u.km / u.s), res.rv)
    np.testing.assert_array_equal(t["offset"].value, res.amp)
    # every epoch has as many velocities: the mean of the epochs' reduced chi2 is the fit's
    np.testing.assert_allclose(np.mean(t["chi2"].value), res.chi2, rtol=1e-6)
    path = tmp_path / "epochs.ecsv"
    t.write(path, format="ascii.ecsv")
    back = QTable.read(path, format="ascii.ecsv")
    assert isinstance(back["time"], Time) and back["time"].scale == "tdb"
    np.testing.assert_allclose(back["time"].jd, times, rtol=0, atol=1e-9)
    assert back["rv"].unit == u.km / u.s
    with pytest.raises(DopplermapInputError, match="observations"):
        dataclasses.replace(res, obs=None).epochs_table()


def test_demo_result_table_round_trips_with_time(tmp_path):
    """The demo's result (its set-up, without a solve): map and epochs tables through ECSV."""
    from astropy.table import QTable
    from astropy.time import Time
    from test_results import small_result

    res = small_result(n_cell=150, n_epoch=8)
    for table, name in ((res.to_table(), "map"), (res.epochs_table(), "epochs")):
        p = tmp_path / f"{name}.ecsv"
        table.write(p, format="ascii.ecsv")
        back = QTable.read(p, format="ascii.ecsv")
        assert [getattr(back[c], "unit", None) for c in back.colnames] == \
               [getattr(table[c], "unit", None) for c in table.colnames], name
        if name == "epochs":
            assert isinstance(back["time"], Time)
        else:
            np.testing.assert_array_equal(back["true_fssc"].value, res.truth["fssc"])


def test_result_plot_draws_each_kind(fitted):
    from matplotlib.figure import Figure

    from dopplermap import style

    _, res = fitted
    named = dataclasses.replace(res, star=res.star.replace(name="V889 Her"))
    fig = style.new_figure(6.0, 3.0)
    ax1, ax2 = fig.subplots(1, 2)
    assert named.plot("map", ax=ax2, quantity="hot") is fig
    polar = named.plot("polar")
    assert isinstance(polar, Figure) and polar.axes[0].get_title() == "V889 Her"
    assert named.plot("profiles").texts[-1].get_text() == "V889 Her"  # the name titles the figure
    with pytest.raises(DopplermapInputError, match="kind"):
        named.plot("hammer")
    with pytest.raises(DopplermapInputError, match="ax="):
        named.plot("profiles", ax=ax1)
    with pytest.raises(DopplermapInputError, match="grid"):
        dataclasses.replace(res, grid=None).plot("map")


def test_every_public_object_has_a_short_repr(small_problem, fitted):
    from dopplermap import search
    from dopplermap.calibrate import Calibration
    from dopplermap.uncertainty import Uncertainty

    star, grid, times, vels, comps, sim = small_problem
    pre, res = fitted
    problem = dm.Problem(grid=grid, star=star, obs=sim.obs, components=comps)
    n = 40
    tab = dm.tabulated(np.linspace(-30, 30, 200), 1 - 0.5 * np.exp(-np.linspace(-30, 30, 200) ** 2 / 50))
    arr = np.linspace(0, 1, n)
    sweep = search.LambdaSweep(**{f.name: (arr if f.type in ("np.ndarray",) else 0.0)
                                  for f in dataclasses.fields(search.LambdaSweep)})
    cal_fields = {f.name: f for f in dataclasses.fields(Calibration)}
    cal = Calibration(**{k: (arr if "ndarray" in str(f.type) else "inclination" if f.type == "str"
                             else {} if f.type == "dict" else 1)
                         for k, f in cal_fields.items() if f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING})
    objects = {
        "grid": grid, "healpix grid": dm.healpix_grid(4) if hasattr(dm, "healpix_grid") else grid,
        "observations": sim.obs, "problem": problem, "precomputed": pre, "form": pre.line,
        "named star": star.replace(name="X" * 500), "components": comps, "component": comps.phot,
        "tabulated profile": tab, "component with a table": dm.Component(tab, comps.phot.limb_darkening, 1.0),
        "simulation": sim, "settings": problem.settings, "layout": problem.layout, "plan": problem.plan,
        "result": res, "lambda sweep": sweep, "calibration": cal,
        "uncertainty": Uncertainty(sigma_fssc=res.fssc, sigma_fssh=res.fssh, method="bootstrap",
                                   never_visible=np.zeros(res.n_cell, bool), samples=np.zeros((20, 2, res.n_cell))),
    }
    for name, obj in objects.items():
        text = repr(obj)
        assert len(text) <= 300, (name, len(text), text)
        assert "array(" not in text and "Array(" not in text and "\n" not in text, (name, text)
    assert "n_cell=600" in repr(grid) and "n_epoch=24" in repr(sim.obs) and "n_vel=28" in repr(sim.obs)
    assert "form='dense'" in repr(pre) or "form='binned'" in repr(pre)


def test_warnings_point_at_the_users_line(small_problem, fitted):
    """A warning raised deep inside the package (the solver's convergence check, the star's
    inclination check in a dataclass's generated __init__) names this file and line."""
    import inspect
    import warnings

    star, grid, times, vels, comps, sim = small_problem
    problem = dm.Problem(grid=grid, star=star, obs=sim.obs, components=comps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        dm.invert(problem, lmbd=0.3, maxiter=2)
        line_star = inspect.currentframe().f_lineno + 1
        dm.StarParams(inclination=1.2, vsini=40.0, period=1.0)
    ours = [w for w in caught if issubclass(w.category, dm.DopplermapWarning)]
    assert any("iteration limit" in str(w.message) for w in ours)
    assert {(w.filename, w.lineno) for w in ours} == {(__file__, line), (__file__, line_star)}, \
        [(w.filename, w.lineno, str(w.message)[:40]) for w in ours]


def test_to_table_of_time_windows(fitted, tmp_path):
    """With time windows: one row per cell and window, the window's span as TDB Times."""
    from astropy.table import QTable
    from astropy.time import Time

    _, res = fitted
    two = dataclasses.replace(res, fssc=np.concatenate([res.fssc, 0.5 * res.fssc]),
                              fssh=np.concatenate([res.fssh, res.fssh]), window_edges=np.array([0.0, 1.5, 3.0]))
    t = two.to_table()
    assert len(t) == 2 * res.n_cell and t.colnames[:3] == ["window", "t_start", "t_end"]
    np.testing.assert_array_equal(t["fssc"].value[res.n_cell:], 0.5 * res.fssc)
    assert isinstance(t["t_start"], Time) and t["t_end"][-1].jd == 3.0
    one = two.to_table(window=1)
    assert len(one) == res.n_cell and set(one["window"]) == {1}
    t.write(tmp_path / "w.ecsv", format="ascii.ecsv")
    back = QTable.read(tmp_path / "w.ecsv", format="ascii.ecsv")
    assert isinstance(back["t_start"], Time) and back["t_start"].scale == "tdb"
    assert two.plot("polar", window=0).axes[0].images  # one window's map
