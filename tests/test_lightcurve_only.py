"""Maps from photometry alone: a problem with light curves and no line profiles.

The star is simulated by an independent forward model written here: a sky-plane pixel
integrator with circular spots (no surface cells, none of dopplermap's geometry or weights),
so the recovered spot longitudes test the light-curve model and its inversion, not a model
against itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dopplermap.errors import DopplermapInputError, DopplermapWarning
from dopplermap.geometry import StarParams
from dopplermap.grid import latitude_band_grid
from dopplermap.lightcurve import PHOTOMETRY_LIMITS, LightCurveBand
from dopplermap.limb_darkening import LimbDarkening
from dopplermap.objective import NoLines, Observations
from dopplermap.problem import LightCurveData, Problem, Settings
from dopplermap.solvers import invert

INC, PERIOD, U_LD, SPOT_I = 60.0, 1.7, 0.6, 0.3
SPOTS = ((np.radians(30.0), np.radians(60.0), np.radians(22.0)),    # lat, lon, radius
         (np.radians(-10.0), np.radians(220.0), np.radians(18.0)))


def pixel_lightcurve(times, *, inc=INC, period=PERIOD, spots=SPOTS, n_pix=200):
    """Flux of a linearly limb-darkened star with uniform circular spots of intensity
    ``SPOT_I``, summed over the visible disc sampled on an ``n_pix`` x ``n_pix`` sky grid.

    Sky frame: z towards the observer, rotation axis ``a = (0, sin i, cos i)``; a point's
    angle from the sub-observer meridian is ``beta = atan2(x, p . e1)`` with
    ``e1 = (0, -cos i, sin i)``, and its stellar longitude at time t is ``beta - 2 pi t / P``.
    """
    c = (np.arange(n_pix) + 0.5) / n_pix * 2.0 - 1.0
    x, y = np.meshgrid(c, c)
    r2 = x * x + y * y
    on = r2 < 1.0
    x, y = x[on], y[on]
    z = np.sqrt(1.0 - x * x - y * y)
    i = np.radians(inc)
    sinlat = y * np.sin(i) + z * np.cos(i)
    beta = np.arctan2(x, -y * np.cos(i) + z * np.sin(i))
    coslat = np.sqrt(np.clip(1.0 - sinlat * sinlat, 0.0, None))
    ld = 1.0 - U_LD * (1.0 - z)  # mu = z for a sky pixel
    out = np.empty(len(times))
    for k, t in enumerate(times):
        lon = beta - 2.0 * np.pi * t / period
        inten = np.ones_like(z)
        for slat, slon, rad in spots:
            cosd = np.sin(slat) * sinlat + np.cos(slat) * coslat * np.cos(lon - slon)
            inten[cosd > np.cos(rad)] = SPOT_I
        out[k] = np.sum(ld * inten)
    return out / out.mean()


def _band():
    ld = LimbDarkening("linear", (U_LD,))
    return LightCurveBand((ld, ld, ld), (1.0, SPOT_I, 1.5))


def _spot_longitudes(grid, fssc, n=2):
    """The ``n`` strongest longitudes of the map's spot area (5-degree bins, circularly
    smoothed), each refined by the circular mean of the area within 40 degrees of its peak."""
    w = np.asarray(fssc) * np.asarray(grid.area)
    lon = np.mod(np.asarray(grid.lon), 2 * np.pi)
    bins = np.zeros(72)
    np.add.at(bins, (lon / np.radians(5.0)).astype(int) % 72, w)
    smooth = sum(np.roll(bins, k) for k in (-2, -1, 0, 1, 2))
    found = []
    for _ in range(n):
        peak = np.radians(5.0) * (int(np.argmax(smooth)) + 0.5)
        near = np.abs(np.angle(np.exp(1j * (lon - peak)))) < np.radians(40.0)
        found.append(np.mod(np.angle(np.sum(w[near] * np.exp(1j * lon[near]))), 2 * np.pi))
        centres = np.radians(5.0) * (np.arange(72) + 0.5)
        smooth[np.abs(np.angle(np.exp(1j * (centres - peak)))) < np.radians(60.0)] = -np.inf
    return found


def _dlon_deg(a, b):
    return abs(np.degrees(np.angle(np.exp(1j * (a - b)))))


def _problem(times_sets, n_cell=300, **settings):
    star = StarParams(inclination=INC, vsini=30.0, period=PERIOD, t0=0.0)
    data = []
    for k, t in enumerate(times_sets):
        flux = pixel_lightcurve(t)
        rng = np.random.default_rng(k)
        err = np.full(t.size, 5e-4)
        data.append(LightCurveData(times=t, flux=flux + rng.normal(size=t.size) * err, err=err, band=_band(),
                                   name=f"sector{k + 1}"))
    lc = data[0] if len(data) == 1 else tuple(data)
    return Problem(grid=latitude_band_grid(n_cell), star=star, obs=None, components=None, lightcurve_data=lc,
                   settings=Settings(**{"lmbd": 1.0, "tol": 1e-5, "maxiter": 1000, **settings}))


def test_pixel_integrator_has_the_expected_spot_phases():
    """The simulator itself: the flux is lowest when the larger spot faces the observer
    (longitude + 2 pi t / P = 0), i.e. at phase 1 - 60/360."""
    t = np.linspace(0.0, PERIOD, 181)
    f = pixel_lightcurve(t, spots=SPOTS[:1])
    dip = f.max() - f  # the dip is symmetric about the phase the spot faces the observer
    phase = np.angle(np.sum(dip[:-1] * np.exp(2j * np.pi * t[:-1] / PERIOD))) / (2 * np.pi) % 1.0
    assert abs(phase - (1.0 - 60.0 / 360.0)) < 0.003
    assert 1.02 < f.max() / f.min() < 1.2  # a few per cent deep, not a broken star


def test_lightcurve_only_recovers_two_spot_longitudes():
    times = np.linspace(0.0, 2.0 * PERIOD, 160)
    prob = _problem([times])
    from dopplermap.solvers import newton_fits

    assert not newton_fits(prob)  # read off the configuration, before the model is built
    assert prob.photometry_only and isinstance(prob.pre, NoLines) and prob.layout.size == 2 * prob.grid.n_cell
    res = invert(prob, solver="auto")
    assert res.solver == "newton"  # "auto" on light curves alone (dopplermap.solvers.photometry)
    assert res.rv.size == 0 and res.amp.size == 0 and res.model is None
    assert res.chi2 == pytest.approx(res.chi2_lc)
    assert res.chi2_lc < 2.0
    found = _spot_longitudes(prob.grid, res.fssc)
    for _lat, lon, _ in SPOTS:
        assert min(_dlon_deg(lon, f) for f in found) <= 10.0, (np.degrees(found), np.degrees(lon))


def test_lightcurve_only_several_sectors():
    """Two sectors (two bands of the same photometry, each normalised by its own mean)."""
    prob = _problem([np.linspace(0.0, 1.2 * PERIOD, 80), np.linspace(30.0, 30.0 + 1.2 * PERIOD, 80)])
    res = invert(prob)
    assert set(res.chi2_lc_sets) == {"sector1", "sector2"}
    found = _spot_longitudes(prob.grid, res.fssc)
    for _lat, lon, _ in SPOTS:
        assert min(_dlon_deg(lon, f) for f in found) <= 10.0


def test_lightcurve_only_refusals():
    prob = _problem([np.linspace(0.0, PERIOD, 40)], n_cell=100)
    with pytest.raises(DopplermapInputError, match="newton.*entropy regulariser"):
        invert(prob, solver="newton", regulariser="tikhonov")
    with pytest.raises(DopplermapInputError, match="newton.*lambda > 0"):
        invert(prob, solver="newton", lmbd=0.0)
    assert invert(prob, regulariser="tikhonov", maxiter=5).solver == "lbfgsb"  # "auto" where it does not apply
    from dopplermap.solvers.photometry import MAX_POINTS

    long = _problem([np.linspace(0.0, PERIOD, MAX_POINTS + 1)], n_cell=100)
    with pytest.raises(DopplermapInputError, match=f"newton.*at most {MAX_POINTS} light-curve points, got "
                                                   f"{MAX_POINTS + 1} \\(bin the curve\\)"):
        invert(long, solver="newton")
    _, windowed, _ = _evolving(n_cell=100)
    with pytest.raises(DopplermapInputError, match="newton.*one static map; with time windows"):
        invert(windowed, solver="newton")
    with pytest.raises(DopplermapInputError, match="offset_sigma"):
        prob.replace(settings=prob.settings.replace(offset_sigma=0.01))
    with pytest.raises(DopplermapInputError, match="light curves alone"):
        prob.replace(method="dense")
    with pytest.raises(DopplermapInputError, match="neither"):
        Problem(grid=prob.grid, star=prob.star, obs=None, components=None)
    from dopplermap.search import apply_parameters

    with pytest.raises(DopplermapInputError, match="grid search .* light curves alone"):
        apply_parameters(prob, {"inclination": 40.0})


def _write_target(tmp_path: Path, *, lc_table: str) -> Path:
    t = np.linspace(0.0, 2.0 * PERIOD, 120)
    flux = pixel_lightcurve(t)
    np.savetxt(tmp_path / "lc.csv", np.column_stack([t, flux, np.full(t.size, 5e-4)]), delimiter=",",
               header="time,flux,err", comments="")
    target = tmp_path / "target.toml"
    target.write_text(f"""
[star]
inclination = {INC}
vsini = 30.0
period = {PERIOD}
t0 = 0.0

[temperatures]
phot = 5000.0
cool = 4000.0
hot = 6000.0

{lc_table}

[grid]
n_cell = 200

[inversion]
lmbd = 1.0
tol = 1e-5
maxiter = 1000

[uncertainty]
methods = []
""")
    return target


LC_TABLE = f"""
[[lightcurves]]
file = "lc.csv"
time_scale = "BJD_TDB"
limb_darkening = "linear"
ld_phot = [{U_LD}]
ld_cool = [{U_LD}]
ld_hot = [{U_LD}]
intensity = [1.0, {SPOT_I}, 1.5]
"""


def test_config_without_profiles_parses(tmp_path):
    from dopplermap.config import load_config
    from dopplermap.problem import from_config

    cfg = load_config(_write_target(tmp_path, lc_table=LC_TABLE))
    assert cfg.photometry_only and cfg.line is None and cfg.line_sets() == []
    prob = from_config(cfg)
    assert prob.photometry_only and prob.observations is None


@pytest.mark.parametrize("bad, match", [
    ("[data]\ntime_scale = 'BJD_TDB'\n", "missing required key 'profiles'"),
    (LC_TABLE + "\n[line]\nwavelength_nm = 600.0\n", r"\[line\]"),
    ("[data]\ntime_pattern = 'x'\n" + LC_TABLE, "time_pattern"),
])
def test_config_without_profiles_refusals(tmp_path, bad, match):
    from dopplermap.config import load_config

    with pytest.raises(DopplermapInputError, match=match):
        load_config(_write_target(tmp_path, lc_table=bad))


@pytest.mark.slow
def test_cli_lightcurve_only_target(tmp_path, capsys):
    """``dopplermap invert`` on a light-curve-only target: the result folder, the note on
    what photometry cannot tell (screen and summary.json), the two longitudes."""
    from dopplermap.cli import main
    from dopplermap.io.results import load_result

    target = _write_target(tmp_path, lc_table=LC_TABLE)
    out = tmp_path / "res"
    rc = main(["invert", str(target), "--out", str(out), "--no-plots", "--no-report", "-q"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "longitude / contrast map" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["constraints"] == PHOTOMETRY_LIMITS and summary["n_epoch"] == 0
    res = load_result(out)
    assert res.obs is None and res.light_curve is not None
    found = _spot_longitudes(res.grid, res.fssc)
    for _lat, lon, _ in SPOTS:
        assert min(_dlon_deg(lon, f) for f in found) <= 10.0


def test_config_several_sector_files_are_segments(tmp_path):
    """A ``[[lightcurves]]`` file list: one band, a segment (free scale) per file, in the
    summary's counts and gaps."""
    from dopplermap.config import load_config
    from dopplermap.problem import from_config

    for k, start in enumerate((0.0, 20.0)):
        t = start + np.linspace(0.0, 2.0 * PERIOD, 90)
        np.savetxt(tmp_path / f"s{k}.csv", np.column_stack([t, pixel_lightcurve(t) * (1 + 0.05 * k),
                                                             np.full(t.size, 5e-4)]),
                   delimiter=",", header="time,flux,err", comments="")
    table = LC_TABLE.replace('file = "lc.csv"', 'file = ["s0.csv", "s1.csv"]')
    target = _write_target(tmp_path, lc_table=table)
    prob = from_config(load_config(target))
    d = prob.lightcurve_data
    np.testing.assert_array_equal(d.segment, np.repeat([0, 1], 90))
    assert prob.lightcurve.n_segment == 2
    assert len(d.read.segments) == 2 and d.read.gaps == [pytest.approx(20.0 - 2.0 * PERIOD)]
    res = invert(prob)
    assert res.chi2_lc < 1.5  # the 5 % level step between the files is absorbed by the free scales


@pytest.mark.slow
def test_cli_refuses_a_light_curve_model_past_max_memory(tmp_path, capsys):
    from dopplermap.cli import main

    target = _write_target(tmp_path, lc_table=LC_TABLE)
    rc = main(["--max-memory", "100K", "invert", str(target), "--out", str(tmp_path / "r"), "--no-plots", "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and "light-curve model" in err and 'bin = "auto"' in err


def test_uncertainty_maps_for_light_curves_alone(tmp_path):
    """Laplace and sandwich maps are written; the bootstrap (which resamples line epochs) is refused in one line."""
    from dopplermap.app.target import run_target
    from dopplermap.config import load_config
    from dopplermap.uncertainty import load_uncertainty

    cfg = load_config(_write_target(tmp_path, lc_table=LC_TABLE))
    with pytest.raises(DopplermapInputError, match="'bootstrap' resamples line-profile epochs.*light curves alone"):
        run_target(cfg, tmp_path / "out", plots=False, uncertainty=["bootstrap"], report=False)
    assert not (tmp_path / "out").exists()
    run_target(cfg, tmp_path / "out", plots=False, uncertainty=["laplace", "sandwich"], report=False)
    post = load_uncertainty(tmp_path / "out" / "uncertainty_laplace.npz")
    sand = load_uncertainty(tmp_path / "out" / "uncertainty_sandwich.npz")
    seen = ~post.never_visible
    assert post.method == "laplace-posterior-lowrank" and seen.sum() < seen.size  # inclination 60: a cap unseen
    assert np.all(np.isinf(post.sigma_fssc[~seen])) and np.all(np.isfinite(post.sigma_fssc[seen]))
    free = ~post.at_bound[0] & seen
    assert free.sum() > 10 and np.all(sand.sigma_fssc[free] < post.sigma_fssc[free])  # the prior adds width


# ---------------------------------------------------------------- maps that evolve, from light curves alone

SPOT_EARLY = ((np.radians(20.0), np.radians(60.0), np.radians(25.0)),)
SPOT_LATE = ((np.radians(20.0), np.radians(220.0), np.radians(25.0)),)


def _evolving(n_cell=300, lmbd_time=0.01):
    """Two rotations with a spot at longitude 60, then two with it gone and one at 220 (the
    independent pixel integrator; the same spot elsewhere: each half has the same mean flux)."""
    from dopplermap.windows import Windows

    t = np.linspace(0.0, 4.0 * PERIOD, 240)
    early = t < 2.0 * PERIOD
    flux = np.concatenate([pixel_lightcurve(t[early], spots=SPOT_EARLY), pixel_lightcurve(t[~early], spots=SPOT_LATE)])
    err = np.full(t.size, 5e-4)
    flux = flux + np.random.default_rng(3).normal(size=t.size) * err
    star = StarParams(inclination=INC, vsini=30.0, period=PERIOD, t0=0.0)
    lc = LightCurveData(times=t, flux=flux, err=err, band=_band())
    static = Problem(grid=latitude_band_grid(n_cell), star=star, obs=None, components=None, lightcurve_data=lc,
                     settings=Settings(lmbd=1.0, tol=1e-6, maxiter=3000, lmbd_time=lmbd_time))
    return static, static.replace(windows=Windows.count(2, t)), early


def test_light_curves_alone_map_each_window_with_its_own_spot():
    """One map per time window from photometry alone: each window's map puts its spot at its
    own longitude, and the windows fit the curve a static map cannot."""
    static, win, _ = _evolving()
    assert isinstance(win.pre, NoLines) and win.pre.n_window == 2 and win.layout.size == 4 * win.grid.n_cell
    res = invert(win)
    n = win.grid.n_cell
    maps = np.reshape(res.fssc, (2, n))
    for fc, (spot,) in zip(maps, (SPOT_EARLY, SPOT_LATE), strict=True):
        (found,) = _spot_longitudes(win.grid, fc, n=1)
        assert _dlon_deg(spot[1], found) <= 12.0, np.degrees(found)
    with pytest.warns(DopplermapWarning, match="far above 1"):
        one = invert(static.replace(settings=static.settings.replace(lmbd_time=0.0)))
    assert res.chi2_lc < 2.0 and one.chi2_lc > 100.0, (res.chi2_lc, one.chi2_lc)


def test_light_curves_alone_windows_with_equal_maps_give_the_static_loss():
    import jax

    from dopplermap.objective import ObjectiveData, data_terms

    static, win, _ = _evolving(n_cell=100, lmbd_time=3.0)
    rng = np.random.default_rng(0)
    fc, fh = rng.uniform(1e-3, 0.4, 100), rng.uniform(1e-3, 0.2, 100)
    d0 = ObjectiveData.create(static.pre, None, lightcurve=static.lightcurve)
    dw = ObjectiveData.create(win.pre, None, lightcurve=win.lightcurve, lmbd_time=3.0)
    l0, t0 = data_terms(jax.numpy.asarray(np.concatenate([fc, fh])), 0.7, static.pre, d0)
    lw, tw = data_terms(jax.numpy.asarray(np.concatenate([fc, fc, fh, fh])), 0.7, win.pre, dw)
    assert float(lw) == pytest.approx(float(l0), rel=1e-12) and float(tw.temporal) == 0.0
    lw2, tw2 = data_terms(jax.numpy.asarray(np.concatenate([fc, fc + 0.1, fh, fh])), 0.7, win.pre, dw)
    assert float(tw2.temporal) > 0 and float(lw2) > float(tw2.chi2_lc) + 0.7 * float(tw2.regulariser)


def test_windows_need_a_light_curve_binned_in_time(tmp_path):
    """bin = "auto" bins in time when the target has windows (in phase it would fold the
    rotations into one); a curve binned in phase is refused with windows."""
    from dopplermap.config import load_config
    from dopplermap.io.lightcurve import LightCurveReading
    from dopplermap.problem import from_config
    from dopplermap.windows import Windows

    table = LC_TABLE + 'bin = "auto"\n'
    static = from_config(load_config(_write_target(tmp_path, lc_table=table)))
    assert static.lightcurve_data.read.binned.endswith("phase")
    target = _write_target(tmp_path, lc_table=table + "\n[map]\nwindows = 2\nlmbd_time = 1.0\n")
    win = from_config(load_config(target))
    assert win.lightcurve_data.read.binned.endswith(" d") and win.pre.n_window == 2
    assert np.ptp(win.lightcurve_data.times) > 1.5 * PERIOD  # the points keep their times
    folded = LightCurveData.load(tmp_path / "lc.csv", _band(), star=static.star,
                                 reading=LightCurveReading(bin_width=0.05, bin_unit="phase", time_scale="BJD_TDB"))
    with pytest.raises(DopplermapInputError, match="binned in rotation phase"):
        static.replace(lightcurve_data=folded, windows=Windows.count(2, folded.times))


class _Stopped:
    """A solve of light curves alone that stopped on its tolerance after ``drop`` of its loss fell in its last
    100 iterations."""
    success, outcome, stop_reason, chi2_lc = True, "converged", "CONVERGENCE: REL_REDUCTION_OF_F", 1.0
    rv = amp = np.zeros(0)

    def __init__(self, drop, n=300):
        self.chi2 = 1.0
        head = np.linspace(2.0, 1.0 + drop, max(n - 101, 0), endpoint=False)
        self.history = {"loss": np.concatenate([head, np.linspace(1.0 + drop, 1.0, min(n, 101))])}


def test_a_light_curve_fit_stopped_while_still_falling_is_warned():
    import warnings

    from dopplermap.diagnostics import STILL_FALLING, check_result
    from dopplermap.errors import ConvergenceWarning

    k, fraction = STILL_FALLING
    with pytest.warns(ConvergenceWarning, match=r"still falling, by 2 % over its last 100 iterations"):
        check_result(_Stopped(0.02), None, tol=1e-5, maxiter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_result(_Stopped(0.5 * fraction), None, tol=1e-5, maxiter=1000)  # flat enough
        check_result(_Stopped(0.02, n=k), None, tol=1e-5, maxiter=1000)  # too short a run to judge
        obs = Observations.create(np.arange(3.0), np.linspace(-50, 50, 20), np.ones((3, 20)), np.full((3, 20), 0.01))
        check_result(_Stopped(0.02), obs, tol=1e-5, maxiter=1000)  # line profiles: not this check


TESS = Path(__file__).resolve().parents[2] / "shared" / "data" / "tess" / \
    "tess2018206045859-s0001-0000000025155310-0120-s_lc.fits"


@pytest.mark.slow
@pytest.mark.skipif(not TESS.exists(), reason="the shared TESS sector (../shared/data/tess) is absent")
def test_the_tess_sector_s_early_stop_is_warned(tmp_path):
    """The real sector at the default tolerance: L-BFGS-B stops on one short step while its loss still falls;
    the warning says so, and a tight tolerance reaches a lower loss. Gauss-Newton ("auto"), at the default
    tolerance, ends lower than both."""
    from dopplermap.errors import ConvergenceWarning

    band = LightCurveBand((LimbDarkening("linear", (0.6,)),) * 3, (1.0, 0.5126, 1.2961))
    star = StarParams(inclination=60.0, vsini=5.0, period=7.2, t0=2458325.0)
    lc = LightCurveData.load(TESS, band, star=star, n_cell=2500, bin_width="auto")
    prob = Problem(grid=latitude_band_grid(2500), star=star, obs=None, components=None, lightcurve_data=lc,
                   settings=Settings(lmbd=1.0, tol=1e-5, maxiter=1000))
    with pytest.warns(ConvergenceWarning, match="still falling"):
        quick = invert(prob, solver="lbfgsb")
    tight = invert(prob, tol=1e-9, maxiter=20000, solver="lbfgsb")
    assert tight.loss < quick.loss * (1 - 0.02), (tight.loss, quick.loss)
    gn = invert(prob, solver="auto")
    assert gn.solver == "newton" and gn.success and gn.iterations < 40
    assert gn.loss <= tight.loss * (1 + 1e-6), (gn.loss, tight.loss)


@pytest.mark.skipif(not TESS.exists(), reason="the shared TESS sector (../shared/data/tess) is absent")
def test_the_tess_sector_with_time_windows_is_binned_in_time(tmp_path):
    """The real SPOC file through a target with [map] windows: bin = "auto" bins it in time, the windows
    span its points, and every point reads a window (one per 7.2-d rotation)."""
    from dopplermap.config import load_config
    from dopplermap.problem import from_config

    table = f'[[lightcurves]]\nfile = "{TESS}"\nbin = "auto"\nwavelength_nm = 800.0\n'
    text = _write_target(tmp_path, lc_table=table).read_text()
    text = text.replace(f"period = {PERIOD}\nt0 = 0.0", "period = 7.2\nt0 = 2458325.0")
    target = tmp_path / "tess.toml"
    target.write_text(text + "\n[map]\nwindow_rotations = 1.0\nlmbd_time = 10.0\n")
    prob = from_config(load_config(target))
    read = prob.lightcurve_data.read
    assert not read.folded and read.binned.endswith(" d") and read.n_read == 20076
    assert prob.n_window == 4 and prob.pre.n_window == 4
    idx = prob.window_index()
    assert idx.size == prob.lightcurve_data.times.size and set(np.unique(idx)) == {0, 1, 2, 3}
    assert prob.lightcurve.n_window == 4
