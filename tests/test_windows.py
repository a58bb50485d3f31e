"""Maps that change with time (dopplermap.windows): the windowed layout, the temporal
coupling, K = 1 against the static problem, and the inputs refused."""

from __future__ import annotations

import dataclasses
import warnings

import jax
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.errors import DopplermapInputError, DopplermapWarning
from dopplermap.objective import ObjectiveData, data_terms, n_windows
from dopplermap.problem import Settings, demo_problem
from dopplermap.windows import Windows, temporal_difference, window_form


@pytest.fixture(scope="module")
def tiny():
    """A tiny demo star: 200 cells, 12 epochs, 20 velocities."""
    return demo_problem(n_cell=200, n_epoch=12, n_vel=20, snr=400.0, settings=Settings(lmbd=0.5, tol=1e-6))


# one compiled program per shape, shared by the tests
_VALUE_AND_GRAD = jax.jit(jax.value_and_grad(lambda v, p, d: data_terms(v, 0.5, p, d, "mem"), has_aux=True))


def _terms(problem, x, lmbd_time=0.0):
    pre = problem.pre
    data = ObjectiveData.create(pre, problem.obs, lmbd_time=lmbd_time)
    (val, terms), grad = _VALUE_AND_GRAD(jax.numpy.asarray(x), pre, data)
    return float(val), np.asarray(grad), terms


def _a_map(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(1e-3, 0.4, n), rng.uniform(1e-3, 0.3, n)


def test_windows_builders_and_index():
    t = np.array([0.1, 0.5, 1.9, 2.1, 4.0, 6.2])
    w = Windows.count(3, t)
    assert w.n_window == 3 and w.edges[0] == 0.1 and w.edges[-1] >= 6.2
    assert list(w.index(t)) == [0, 0, 0, 0, 1, 2]  # edges 0.1, 2.133, 4.167, 6.2
    r = Windows.rotations(1.0, t, period=2.0, t0=0.0)
    assert r.edges == (0.0, 2.0, 4.0, 6.0, 8.0)
    assert list(r.index(t)) == [0, 0, 0, 1, 2, 3]
    g = Windows.gaps(1.0, t)
    assert g.n_window == 4 and list(g.index(t)) == [0, 0, 1, 1, 2, 3]
    c = Windows.from_cycles([0, 1.5, 4], period=2.0, t0=0.0)
    assert c.edges == (0.0, 3.0, 8.0)
    np.testing.assert_allclose(c.spans, [[0, 3], [3, 8]])


@pytest.mark.parametrize("bad", [(1.0,), (0.0, 0.0), (2.0, 1.0), (0.0, np.nan)])
def test_windows_bad_edges_refused(bad):
    with pytest.raises(DopplermapInputError, match="window edges"):
        Windows(bad)


def test_time_outside_the_windows_refused():
    with pytest.raises(DopplermapInputError, match="1 epochs lie outside the windows"):
        Windows((0.0, 1.0, 2.0)).index([0.5, 2.5])


def test_empty_window_warns(tiny):
    t = np.asarray(tiny.obs.times)
    w = Windows((t.min(), t.min() + 1e-6, t.min() + 2e-6, t.max() + 1.0))
    with pytest.warns(DopplermapWarning, match="hold no line-profile epoch"):
        tiny.replace(windows=w).pre  # noqa: B018


def test_one_window_is_the_static_problem(tiny):
    """K = 1: loss and gradient equal the static problem's to 1e-12."""
    one = tiny.replace(windows=Windows.count(1, tiny.obs.times))
    fc, fh = _a_map(200)
    x = tiny.layout.join(fc, fh, np.full(12, 0.1), np.full(12, 0.01))
    v0, g0, _ = _terms(tiny, x)
    v1, g1, t1 = _terms(one, x)
    assert abs(v1 - v0) <= 1e-12 * abs(v0)
    np.testing.assert_allclose(g1, g0, rtol=0, atol=1e-12 * np.max(np.abs(g0)))
    assert t1.temporal is None


@pytest.mark.slow
def test_one_window_solves_as_the_static_problem(tiny):
    one = tiny.replace(windows=Windows.count(1, tiny.obs.times))
    r0, r1 = dm.invert(tiny), dm.invert(one)
    assert abs(r1.loss - r0.loss) <= 1e-12 * abs(r0.loss)
    assert r1.n_window == 1 and r1.n_cell == r0.n_cell


def test_equal_maps_in_every_window_give_the_static_loss(tiny):
    """The windowed form reads each epoch's window map: with the same map in every window the
    chi-square and (mean) regulariser are the static ones, the coupling is zero, and the
    gradient of each window is the static gradient restricted to that window's epochs (which
    sum to the static one)."""
    t = np.asarray(tiny.obs.times)
    win = tiny.replace(windows=Windows.count(3, t))
    assert n_windows(win.pre) == 3 and win.layout.size == 3 * 2 * 200 + 2 * 12
    fc, fh = _a_map(200, seed=1)
    rv, amp = np.full(12, -0.2), np.full(12, 0.003)
    v0, g0, t0 = _terms(tiny, tiny.layout.join(fc, fh, rv, amp))
    xw = win.layout.join(np.tile(fc, 3), np.tile(fh, 3), rv, amp)
    v3, g3, t3 = _terms(win, xw, lmbd_time=7.0)
    assert abs(v3 - v0) <= 1e-12 * abs(v0)
    assert float(t3.temporal) == 0.0 and abs(float(t3.chi2) - float(t0.chi2)) <= 1e-12 * float(t0.chi2)
    # gradient: the chi-square part of each window's block sums to the static one; the
    # regulariser's part is 1/K of the static one in each window
    gc3 = g3[:600].reshape(3, 200)
    np.testing.assert_allclose(gc3.sum(axis=0), g0[:200], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(g3[1200:], g0[400:], rtol=1e-10, atol=1e-14)
    idx = win.window_index()
    assert set(idx.tolist()) == {0, 1, 2}


def test_temporal_coupling_value_and_weight(tiny):
    t = np.asarray(tiny.obs.times)
    win = tiny.replace(windows=Windows.count(2, t))
    fc, fh = _a_map(200, seed=2)
    gc, gh = _a_map(200, seed=3)
    x = win.layout.join(np.concatenate([fc, gc]), np.concatenate([fh, gh]), np.zeros(12), np.zeros(12))
    area = np.asarray(tiny.grid.area)
    want = np.sum(area / area.sum() * ((gc - fc) ** 2 + (gh - fh) ** 2)) / 2
    v0, _, terms = _terms(win, x, lmbd_time=0.0)
    v5, _, _ = _terms(win, x, lmbd_time=5.0)
    assert float(terms.temporal) == pytest.approx(want, rel=1e-12)
    assert v5 - v0 == pytest.approx(5.0 * want, rel=1e-9)
    assert float(temporal_difference(np.stack([fc, fc]), np.stack([fh, fh]), area)) == 0.0


@pytest.mark.slow
def test_windowed_solve_returns_k_maps(tiny):
    t = np.asarray(tiny.obs.times)
    win = tiny.replace(windows=Windows.count(2, t), settings=tiny.settings.replace(lmbd_time=1.0))
    res = dm.invert(win)
    assert res.n_window == 2 and res.n_cell == 200 and res.fssc.shape == (400,)
    fc, fh = res.window_maps()
    assert fc.shape == (2, 200) and res.lmbd_time == 1.0 and res.temporal is not None
    one = res.window(1)
    assert one.n_window == 1 and np.array_equal(one.fssc, fc[1]) and one.extra["window"] == 1
    assert res.summary()["window_edges"] == list(win.windows.edges)
    html = res._repr_html_()  # a notebook's display: the last window's map
    assert "time windows" in html and "base64" in html and "windows=2" in repr(res)
    # the compiled device loop solves the same windowed problem to the same loss
    dev = dm.invert(win, solver="projected_lbfgs")
    assert dev.n_window == 2 and abs(dev.loss - res.loss) <= 1e-3 * abs(res.loss)


def test_newton_refused_with_windows(tiny):
    win = tiny.replace(windows=Windows.count(2, tiny.obs.times))
    assert not dm.solvers.newton_fits(win)  # read off the configuration: the model is not built for it
    with pytest.raises(DopplermapInputError, match="newton"):
        dm.invert(win, solver="newton")
    assert dm.solvers.choose_solver(win.replace(settings=win.settings.replace(solver="auto", tol=1e-8))) == "lbfgsb"


def test_negative_lmbd_time_refused(tiny):
    win = tiny.replace(windows=Windows.count(2, tiny.obs.times))
    with pytest.raises(DopplermapInputError, match="lmbd_time"):
        dm.invert(win, lmbd_time=-1.0)


def test_window_form_index_checked(tiny):
    with pytest.raises(DopplermapInputError, match="window index"):
        window_form(tiny.pre.line, np.zeros(5, int), 2)


def test_problem_windows_type_checked(tiny):
    with pytest.raises(DopplermapInputError, match="windows takes"):
        dataclasses.replace(tiny, windows=(0.0, 1.0))


# ------------------------------------------------------------------ configuration, files, figures


def _map_table(**map_keys):
    import tomllib

    from dopplermap.config import TEMPLATE

    t = tomllib.loads(TEMPLATE)
    t["map"] = map_keys
    return t


def test_map_section_parsed_and_checked():
    from dopplermap.config import parse_config

    cfg = parse_config(_map_table(windows=3, lmbd_time=2.0), source="t.toml")
    assert cfg.map.windows == 3 and cfg.map.lmbd_time == 2.0 and cfg.map.windowed
    assert parse_config(_map_table(window_edges=[0, 2.5, 6]), source="t.toml").map.window_edges == (0.0, 2.5, 6.0)
    with pytest.raises(DopplermapInputError, match=r"t\.toml: \[map\] windows and window_gap both given"):
        parse_config(_map_table(windows=3, window_gap=2.0), source="t.toml")
    with pytest.raises(DopplermapInputError, match=r"\[map\] window_edges must be"):
        parse_config(_map_table(window_edges=[0, 3, 2]), source="t.toml")
    with pytest.raises(DopplermapInputError, match=r"\[map\] lmbd_time"):
        parse_config(_map_table(windows=2, lmbd_time=-1.0), source="t.toml")
    with pytest.warns(DopplermapWarning, match="lmbd_time = 1.0 has no effect without windows"):
        parse_config(_map_table(lmbd_time=1.0), source="t.toml")


@pytest.mark.slow
def test_windowed_result_files_round_trip(tiny, tmp_path):
    from dopplermap.io.results import load_result, save_result

    win = tiny.replace(windows=Windows.count(3, tiny.obs.times), settings=tiny.settings.replace(lmbd_time=0.5))
    res = dm.invert(win, maxiter=30)
    save_result(res, tmp_path / "r")
    from astropy.io import fits

    with fits.open(tmp_path / "r" / "map.fits") as h:
        maps = [x for x in h if x.name == "MAP"]
        assert [x.header["EXTVER"] for x in maps] == [1, 2, 3]
        np.testing.assert_allclose([(x.header["TSTART"], x.header["TSTOP"]) for x in maps], res.window_spans)
        assert all(x.header["TIMESYS"] == "TDB" and x.header["NWINDOW"] == 3 for x in maps)
    back = load_result(tmp_path / "r")
    assert back.n_window == 3 and back.n_cell == 200
    np.testing.assert_array_equal(back.fssc, res.fssc)
    np.testing.assert_allclose(back.window_edges, res.window_edges)
    assert back.lmbd_time == 0.5


def test_time_longitude_places_a_spot_in_its_band_longitude_and_window():
    from dopplermap.plot import _plot_time_longitude, _plot_window_maps, plot_spot_area

    grid = dm.latitude_band_grid(400)
    lat, lon = np.degrees(grid.lat), np.degrees(grid.lon)
    spot = (lat > 35) & (lat < 55) & (lon > 95) & (lon < 125)
    maps = np.full((3, grid.n_cell), 1e-5)
    maps[1, spot] = 0.8  # the spot in the second window only
    spans = np.array([[0.0, 2.0], [2.0, 4.0], [4.0, 6.0]])
    fig = _plot_time_longitude(grid.lat, grid.lon, grid.area, maps, spans, bands=(-90, 0, 30, 60, 80, 90), n_lon=12)
    panels = [ax for ax in fig.axes if ax.get_ylabel() == "days"]  # not the colour bar
    assert len(panels) == 5  # north first: 80..90, 60..80, 30..60, 0..30, -90..0
    img = np.asarray(panels[2].collections[0].get_array()).reshape(3, 12)
    assert np.argmax(img.max(axis=0)) == 3 and np.argmax(img.max(axis=1)) == 1  # 90-120 deg, window 1
    assert img[0].max() < 1e-3 and img[2].max() < 1e-3
    others = [np.nanmax(np.asarray(p.collections[0].get_array())) for i, p in enumerate(panels) if i != 2]
    assert max(others) < 1e-3
    # fewer cells than 12 in the 80..90 band: no bin left without a value
    assert all(np.isfinite(np.asarray(p.collections[0].get_array())).all() for p in panels)
    assert len(_plot_window_maps(grid.lat, grid.lon, maps, spans, truth=maps).axes) == 7  # 6 panels + colour bar
    area = plot_spot_area(spans, grid.area, maps, truth=maps).axes[0]
    y = area.lines[-1].get_ydata()
    assert y[1] > y[0] == pytest.approx(y[2])
    with pytest.raises(DopplermapInputError, match="window maps"):
        _plot_time_longitude(grid.lat, grid.lon, grid.area, maps[:, :10], spans)


@pytest.mark.slow
def test_invert_command_with_windows(tmp_path, capsys):
    """``[map] windows`` through the CLI with a light curve (whose points reach beyond the
    profiles' epochs: the windows span both): a result folder with one MAP HDU per window
    and the windows' figures; --lmbd-time overrides the TOML's weight and is recorded, and
    the screen names the windows."""
    import json

    from test_config import _dataset

    from dopplermap.cli import main

    _dataset(tmp_path, n_epoch=12, n_cell=200, extra="[map]\nwindows = 2\nlmbd_time = 0.5\n")
    out = tmp_path / "res"
    assert main(["invert", str(tmp_path / "target.toml"), "--out", str(out), "--quiet",
                 "--lmbd-time", "1.0"]) in (0, 3)
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["window_edges"]) == 3 and summary["lmbd_time"] == 1.0
    assert json.loads((out / "config.json").read_text())["overrides"] == {"lmbd_time": 1.0}
    a, b, c = summary["window_edges"]
    assert f"time windows: 2 ({a:.6g}-{b:.6g}, {b:.6g}-{c:.6g} d), lmbd_time 1 (quadratic)" in capsys.readouterr().out
    assert {"map_windows.png", "time_longitude.png", "spot_area.png", "light_curve.png"} <= set(summary["figures"])
    assert summary["windows"].startswith("2 windows") and np.isfinite(summary["chi2_lc"])
    assert dm.load_result(out).n_window == 2


@pytest.mark.slow
def test_windowed_light_curve_reads_each_points_window(tiny):
    """A light curve with windows: with one map in every window chi2_lc is the static one;
    changing one window's map changes only the model of the points in that window."""
    from dopplermap.lightcurve import LightCurveBand, simulate_lightcurve
    from dopplermap.problem import LightCurveData
    from dopplermap.windows import windowed_lightcurve_models

    band = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, 550.0, [dm.LimbDarkening("linear", (0.7,))] * 3)
    t = np.asarray(tiny.obs.times)
    t_lc = np.linspace(t.min(), t.max(), 40)
    fc, fh = _a_map(200, seed=4)
    flux, err, _ = simulate_lightcurve(tiny.grid, tiny.star, t_lc, band, fc, fh, sigma=1e-3, seed=1)
    static = tiny.replace(lightcurve_data=LightCurveData(times=t_lc, flux=flux, err=err, band=band))
    win = static.replace(windows=Windows.count(2, t))
    x0 = static.layout.join(fc, fh, np.zeros(12), np.zeros(12))
    xw = win.layout.join(np.tile(fc, 2), np.tile(fh, 2), np.zeros(12), np.zeros(12))
    d0 = ObjectiveData.create(static.pre, static.obs, lightcurve=static.lightcurve)
    dw = ObjectiveData.create(win.pre, win.obs, lightcurve=win.lightcurve)
    t0 = data_terms(jax.numpy.asarray(x0), 0.5, static.pre, d0)[1]
    tw = data_terms(jax.numpy.asarray(xw), 0.5, win.pre, dw)[1]
    assert float(tw.chi2_lc) == pytest.approx(float(t0.chi2_lc), rel=1e-12)
    idx = win.windows.index(t_lc)
    m_same = windowed_lightcurve_models(np.tile(fc, 2), np.tile(fh, 2), win.lightcurve)[0]
    m_diff = windowed_lightcurve_models(np.concatenate([fc, fc]), np.concatenate([fh, fh + 0.2]), win.lightcurve)[0]
    changed = np.abs(np.asarray(m_diff) - np.asarray(m_same)) > 1e-9
    # window 1's points change; window 0's only by the common mean normalisation
    assert changed[idx == 1].all()
    ratio = np.asarray(m_diff)[idx == 0] / np.asarray(m_same)[idx == 0]
    assert np.ptp(ratio) < 1e-12 and abs(ratio[0] - 1) > 1e-6
    with pytest.raises(DopplermapInputError, match="windowed light curve"):
        ObjectiveData.create(win.pre, win.obs, lightcurve=static.lightcurve)


@pytest.mark.slow
def test_grid_over_domega_with_windows(tiny, tmp_path):
    """A grid search over the shear solves the windowed problem at each point, and its table
    is tied to the windows and their coupling."""
    from dopplermap.search import grid_search, problem_fingerprint

    win = tiny.replace(windows=Windows.count(2, tiny.obs.times), settings=tiny.settings.replace(lmbd_time=1.0))
    rows = grid_search(win, {"domega": [0.0, 0.05]}, tmp_path / "grid.csv")
    assert [r["domega"] for r in rows] == [0.0, 0.05] and all(np.isfinite(r["chi2"]) for r in rows)
    fps = {problem_fingerprint(p) for p in (tiny, win, win.replace(settings=win.settings.replace(lmbd_time=2.0)))}
    assert len(fps) == 3


def test_static_only_analyses_refuse_windows(tiny):
    from dopplermap import uncertainty as U
    from dopplermap.calibrate import check_calibratable
    from dopplermap.jointfit import joint_fit

    win = tiny.replace(windows=Windows.count(2, tiny.obs.times))
    with pytest.raises(DopplermapInputError, match="2 time windows"):
        U.never_visible(win.pre)
    with pytest.raises(DopplermapInputError, match="time windows"):
        check_calibratable(win)
    with pytest.raises(DopplermapInputError, match="time windows"):
        joint_fit(win, fit=("inclination",))


def test_relative_entropy_coupling(tiny):
    """The relative-entropy coupling: zero for equal maps, its value by the formula, chosen by
    the setting (a static part of the data), an unknown name refused."""
    from dopplermap.windows import temporal_relative_entropy

    t = np.asarray(tiny.obs.times)
    win = tiny.replace(windows=Windows.count(2, t))
    fc, fh = _a_map(200, seed=5)
    gc, gh = _a_map(200, seed=6)
    area = np.asarray(tiny.grid.area)
    a = area / area.sum()
    want = np.sum(a * (gc * np.log(gc / fc) - gc + fc + gh * np.log(gh / fh) - gh + fh))
    got = float(temporal_relative_entropy(np.stack([fc, gc]), np.stack([fh, gh]), area))
    assert got == pytest.approx(want, rel=1e-12) and got > 0
    assert float(temporal_relative_entropy(np.stack([fc, fc]), np.stack([fh, fh]), area)) == 0.0
    x = jax.numpy.asarray(win.layout.join(np.concatenate([fc, gc]), np.concatenate([fh, gh]), np.zeros(12),
                                          np.zeros(12)))
    data = ObjectiveData.create(win.pre, win.obs, lmbd_time=1.0, time_coupling="relative_entropy")
    assert float(data_terms(x, 0.5, win.pre, data)[1].temporal) == pytest.approx(want / 2, rel=1e-12)
    with pytest.raises(DopplermapInputError, match="time_coupling must be one of"):
        ObjectiveData.create(win.pre, win.obs, time_coupling="cubic")


def test_windows_screen_line():
    from dopplermap.app.target import windows_line

    assert windows_line({"chi2": 1.0}) is None  # one static map: no line
    line = windows_line({"window_edges": [0.0, 2.5, 5.0], "lmbd_time": 1.0, "time_coupling": "quadratic"})
    assert line == "time windows: 2 (0-2.5, 2.5-5 d), lmbd_time 1 (quadratic)"
    many = windows_line({"window_edges": list(np.arange(17.0)), "lmbd_time": 0.0}, most=4)
    assert many.startswith("time windows: 16 (0-1, 1-2, ... (12 more), 14-15, 15-16 d)")
    assert many.endswith("lmbd_time 0")  # no coupling: its kind is not named
    bjd = windows_line({"window_edges": [2458325.2966, 2458332.4966, 2458339.6966], "lmbd_time": 10.0})
    assert "(2458325.30-2458332.50, 2458332.50-2458339.70 d)" in bjd  # not 2.45833e+06


def test_invert_lmbd_time_override_needs_windows(tmp_path, capsys):
    """--lmbd-time on a target without windows would change nothing: refused before any work."""
    from dopplermap.cli import main
    from dopplermap.config import TEMPLATE

    (tmp_path / "target.toml").write_text(TEMPLATE)  # no [map] windows
    out = tmp_path / "res"
    assert main(["invert", str(tmp_path / "target.toml"), "--out", str(out), "--quiet", "--lmbd-time", "2"]) == 2
    err = capsys.readouterr().err
    assert "--lmbd-time 2" in err and "no time windows" in err and "Traceback" not in err
    assert not out.exists()
    assert main(["invert", str(tmp_path / "target.toml"), "--out", str(out), "--lmbd-time", "-1"]) == 2


def test_sweep_lmbd_time_refuses_what_it_cannot_sweep(tiny):
    from dopplermap.search import lambda_for_chi2, sweep_lmbd_time

    with pytest.raises(DopplermapInputError, match="needs >= 2 time windows"):
        sweep_lmbd_time(tiny, [1.0, 10.0])  # no windows: lmbd_time couples nothing
    win = tiny.replace(windows=Windows.count(2, tiny.obs.times))
    for bad in ([0.0, 1.0], [1.0, np.nan], [1.0, 1.0], []):
        with pytest.raises(DopplermapInputError, match="lmbd_time values"):
            sweep_lmbd_time(win, bad)
    with pytest.raises(DopplermapInputError, match="needs >= 2 time windows"):
        lambda_for_chi2(tiny, 1.0, parameter="lmbd_time")
    with pytest.raises(DopplermapInputError, match="parameter must be"):
        lambda_for_chi2(win, 1.0, parameter="lmbd_times")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:reduced chi2 of the line profiles")  # the demo's errors at small weights
def test_lmbd_time_chosen_by_the_l_curve_corner_and_a_target_chi2(tiny):
    """Sweeping lmbd_time on three windows: chi2 rises and the temporal coupling falls
    monotonically (exact minimisers of a convex objective); the corner lies inside the sweep
    where the coupling has fallen but chi2 has barely risen; a target chi2 between the
    sweep's ends is met by a lmbd_time between the sweep values that bracket it."""
    from dopplermap.search import lambda_for_chi2, lcurve_corner, sweep_lmbd_time

    # rv held: an rv that ends on a velocity-grid point (a kink of the interpolating shift, where
    # the slopes on its two sides point outwards) stops L-BFGS's next warm start at once, on some
    # machines' rounding (chi2 equal to 1e-13 at lmbd_time 0.01 and 0.056); the sweep warns of that
    # (test_a_time_sweep_that_stops_on_one_map_warns), and this test is of the coupling's L-curve
    win = tiny.replace(windows=Windows.count(3, tiny.obs.times), settings=tiny.settings.replace(tol=1e-7, fit_rv=False))
    values = np.logspace(-2, 4, 9)
    sw = sweep_lmbd_time(win, values[::-1])  # any order: solved and returned ascending
    assert sw.parameter == "lmbd_time" and np.array_equal(sw.lmbd, values) and sw.floor == 0.0
    assert [r.lmbd_time for r in sw.results] == pytest.approx(values.tolist())
    assert np.all(np.diff(sw.chi2) > 0) and np.all(np.diff(sw.regulariser) < 0)
    assert sw.regulariser[-1] < 1e-3 * sw.regulariser[0]  # a large weight: nearly one static map
    assert sw.table().splitlines()[0].startswith("lmbd_time,chi2,temporal,")
    corner, kappa = lcurve_corner(sw)
    assert values[1] < corner < values[-2] and kappa.shape == values.shape
    t = np.log(values)
    chi2_c = np.interp(np.log(corner), t, sw.chi2)
    temporal_c = np.exp(np.interp(np.log(corner), t, np.log(sw.regulariser)))
    assert chi2_c - sw.chi2[0] < 0.25 * (sw.chi2[-1] - sw.chi2[0])  # chi2 has barely risen
    assert temporal_c < 0.9 * sw.regulariser[0]  # the change between windows has fallen
    target = float(np.sqrt(sw.chi2[3] * sw.chi2[5]))
    lt, res, trials = lambda_for_chi2(win, target, sweep=sw, parameter="lmbd_time", rtol=2e-3)
    assert abs(res.chi2 / target - 1) < 2e-3 and res.lmbd_time == lt and res.lmbd == tiny.settings.lmbd
    j = int(np.searchsorted(sw.chi2, target))
    assert values[j - 1] <= lt <= values[j] and 0 < len(trials) <= 10


def test_lambda_time_command_needs_a_windowed_target(tmp_path, capsys):
    from dopplermap.cli import main
    from dopplermap.config import TEMPLATE

    (tmp_path / "target.toml").write_text(TEMPLATE)  # no [map] windows
    assert main(["lambda", "--time", "--out", str(tmp_path / "a")]) == 2  # the demo star: one static map
    assert "give a target .toml with [map] windows" in capsys.readouterr().err
    assert main(["lambda", str(tmp_path / "target.toml"), "--time", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "--time: " in err and "has no time windows" in err and "Traceback" not in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:reduced chi2 of the line profiles")
def test_lambda_time_command_finds_the_corner(tmp_path, capsys):
    """``dopplermap lambda --time`` on a windowed target: the sweep of lmbd_time, its corner
    and the table, figure and JSON naming the parameter swept."""
    import json

    from test_config import _dataset

    from dopplermap.cli import main

    _dataset(tmp_path, n_epoch=12, n_cell=200, lightcurve=False, extra="[map]\nwindows = 3\n")
    out = tmp_path / "lt"
    assert main(["lambda", str(tmp_path / "target.toml"), "--time", "--lmbds", "0.01:10000:9", "--out", str(out),
                 "--tol", "1e-7"]) == 0
    io = capsys.readouterr()
    assert "lmbd_time 9/9: 1e+04  chi2" in io.err and "L-curve corner lmbd_time " in io.out
    # the target's maxiter stops its solves short (warned): the two solves added near the corner
    # left no corner candidate, and the sweep is kept as it was before them
    assert "near the corner (2 of at most 8)" in io.err and "(9 solves in" in io.out
    choice = json.loads((out / "lambda.json").read_text())
    assert choice["lmbds_added"] == [] and choice["corner_solves_time"] > 0
    assert choice["parameter"] == "lmbd_time" and 0.01 < choice["lcurve_corner"] < 1e4
    assert (out / "lcurve.csv").read_text().startswith("lmbd_time,chi2,temporal,")
    assert (out / "lcurve.png").is_file()


def test_windowed_fit_with_light_curves_in_two_bands(tiny):
    """Windows and a light curve in two bands: the result names each band's chi2 (the
    windowed light curve carries the bands' names)."""
    from dopplermap.lightcurve import LightCurveBand, simulate_lightcurve
    from dopplermap.problem import LightCurveData

    t = np.asarray(tiny.obs.times)
    fc, fh = _a_map(200, seed=5)
    bands = []
    for name, nm in (("V", 550.0), ("I", 800.0)):
        band = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, nm, [dm.LimbDarkening("linear", (0.6,))] * 3)
        t_lc = np.linspace(t.min(), t.max(), 30)
        flux, err, _ = simulate_lightcurve(tiny.grid, tiny.star, t_lc, band, fc, fh, sigma=1e-3, seed=len(bands))
        bands.append(LightCurveData(times=t_lc, flux=flux, err=err, band=band, name=name))
    win = tiny.replace(lightcurve_data=tuple(bands), windows=Windows.count(2, t),
                       settings=tiny.settings.replace(maxiter=30, tol=1e-5, lmbd_time=1.0))
    assert win.lightcurve.names == ("V", "I")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 30 iterations: not converged, and said so
        res = dm.invert(win)
    assert set(res.chi2_lc_sets) == {"V", "I"} and np.isfinite(res.chi2_lc)


def test_an_empty_window_s_warning_counts_the_light_curve_s_points_in_it(tiny):
    from dopplermap.lightcurve import LightCurveBand
    from dopplermap.problem import LightCurveData

    t = np.asarray(tiny.obs.times)
    band = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, 550.0, [dm.LimbDarkening("linear", (0.7,))] * 3)
    t_lc = np.linspace(t.max() + 0.1, t.max() + 2.0, 25)  # after the profiles: the last window holds only these
    lc = LightCurveData(times=t_lc, flux=np.ones(25), err=np.full(25, 1e-3), band=band)
    edges = [t.min(), t.max() + 0.05, t_lc.max()]
    win = tiny.replace(lightcurve_data=lc, windows=Windows(edges))
    with pytest.warns(DopplermapWarning, match=r"window\(s\) 1 of 2 hold no line-profile epoch; .*the light "
                                               r"curve's 25 point\(s\) in them"):
        assert win.pre is not None


def test_a_time_sweep_that_stops_on_one_map_warns():
    """Neighbouring lmbd_time solves that end on one map (chi2 and coupling equal to tol) are the
    solver's stop, not the data's L-curve: warned, as for a lambda sweep; not where both maps
    are one static map (coupling 0, its floor)."""
    import types

    from dopplermap import search

    def res(chi2, temporal):
        return types.SimpleNamespace(chi2=chi2, temporal=temporal, regulariser_value=1.0)

    stuck = [res(0.4636869432, 0.0237897), res(0.4636869432, 0.0237897), res(0.47, 0.02)]
    with pytest.warns(DopplermapWarning, match="lmbd_time sweep: the solves from lmbd_time 0.01 to 0.05623"):
        search._warn_one_map(np.array([0.01, 0.05623, 0.3162]), stuck, 1e-7, 0.0, parameter="lmbd_time")
    moving = [res(0.46, 0.024), res(0.4637, 0.0238), res(0.47, 0.02)]
    static = [res(0.66, 0.0), res(0.66, 0.0), res(0.66, 0.0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rs in (moving, static):
            search._warn_one_map(np.array([0.01, 0.05623, 0.3162]), rs, 1e-7, 0.0, parameter="lmbd_time")
