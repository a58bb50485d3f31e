"""Error scales: ``[data] error_scale`` and :mod:`dopplermap.errorscale` on stars whose errors are
known to be too large, the options refused, the warning that points at them, and LO Peg."""

import dataclasses
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import dopplermap as dm
from dopplermap.cli import main
from dopplermap.config import load_config
from dopplermap.diagnostics import check_result
from dopplermap.errors import DopplermapInputError, DopplermapWarning
from dopplermap.errorscale import continuum_error_scale, line_margin, scale_errors
from dopplermap.io.lsd import write_lsd
from dopplermap.problem import Problem, Settings, from_config
from dopplermap.search import apply_error_scale
from dopplermap.uncertainty import effective_dof

LOPEG = Path(__file__).resolve().parents[2] / "shared" / "data" / "lopeg"


def _star(vmax=120.0, n_vel=60, n_epoch=12, n_cell=200, inflate=2.0, seed=5):
    """The demo star (vsini 40 km/s, local FWHM 9 km/s), its errors ``inflate`` times its noise."""
    star, grid, times, _, comps = dm.demo_setup(n_cell=n_cell, n_epoch=n_epoch, seed=seed)
    sim = dm.simulate(grid, star, times, np.linspace(-vmax, vmax, n_vel), comps, dm.DEMO_SPOTS, snr=500.0, seed=seed,
                      method="dense")
    return Problem(grid=grid, star=star, obs=scale_errors(sim.obs, inflate), components=comps,
                   settings=Settings(tol=1e-5), source="simulated star")


def _target(root: Path, prob: Problem, data_extra: str = "", sets=None) -> Path:
    """A target TOML (and its profile files) of ``prob``'s observations; ``sets``: several
    ``[[lines]]`` tables, ``(name, error inflation, data_extra)`` each, from the same profiles."""
    obs = prob.obs

    def files(folder, inflate=1.0):
        (root / folder).mkdir()
        rows = []
        for k, t in enumerate(np.asarray(obs.times)):
            write_lsd(root / folder / f"ep{k:02d}.lsd", obs.vels, obs.flux[k], inflate * obs.err[k], columns=3)
            rows.append(f"ep{k:02d}.lsd,{t:.10f}")
        (root / f"{folder}.csv").write_text("file,time\n" + "\n".join(rows) + "\n")

    line = ('wavelength_nm = 600.0\ndepth = [0.50, 0.60, 0.42]\nfwhm = 9.0\n'
            'ld_phot = [0.65]\nld_cool = [0.75]\nld_hot = [0.60]\n')
    head = (f"[star]\ninclination = 60.0\nvsini = 40.0\nperiod = 2.0\n\n[temperatures]\nphot = 5000.0\ncool = 3800.0\n"
            f"hot = 6000.0\n\n[grid]\nn_cell = {prob.grid.n_cell}\n\n[inversion]\nmaxiter = 40\n")
    if sets is None:
        files("obs")
        text = f'[data]\nprofiles = ["obs/*.lsd"]\ntimes_table = "obs.csv"\n{data_extra}\n\n[line]\n{line}\n{head}'
    else:
        text = head
        for name, inflate, extra in sets:
            files(name, inflate)
            text += (f'\n[[lines]]\nname = "{name}"\n[lines.data]\nprofiles = ["{name}/*.lsd"]\n'
                     f'times_table = "{name}.csv"\n{extra}\n[lines.line]\n{line}')
    (root / "target.toml").write_text(text)
    return root / "target.toml"


def test_continuum_finds_errors_twice_too_large():
    prob = _star()
    est = continuum_error_scale(prob.obs, 40.0, line_margin(prob.components))
    assert est.method == "continuum" and len(est.per_epoch) == prob.obs.n_epoch
    assert est.factor == pytest.approx(0.5, rel=0.1)
    # the margin is the local line's: a 9 km/s Gaussian falls to 1 % of its depth at 9 / (2 sqrt(ln 2)) sqrt(ln 100)
    assert line_margin(prob.components) == pytest.approx(9.0 / (2 * np.sqrt(np.log(2))) * np.sqrt(np.log(100)), abs=0.06)
    scaled = apply_error_scale(prob, "auto")
    assert scaled.error_scale[0].method == "continuum"
    assert np.allclose(np.asarray(scaled.obs.err), est.factor * np.asarray(prob.obs.err), rtol=1e-12)
    assert "pre" not in prob.__dict__ or scaled.pre is prob.pre  # the errors enter no derived array


def test_a_given_factor_is_applied_exactly_and_only_once(tmp_path):
    prob = _star(n_epoch=6, n_vel=24, n_cell=100)
    plain = from_config(load_config(_target(tmp_path, prob)))
    assert plain.error_scale == ()
    text = (tmp_path / "target.toml").read_text().replace('times_table = "obs.csv"',
                                                          'times_table = "obs.csv"\nerror_scale = 0.37')
    (tmp_path / "target.toml").write_text(text)
    scaled = from_config(load_config(tmp_path / "target.toml"))
    assert np.array_equal(np.asarray(scaled.obs.err), 0.37 * np.asarray(plain.obs.err))
    assert np.array_equal(np.asarray(scaled.obs.flux), np.asarray(plain.obs.flux))
    (e,) = scaled.error_scale
    assert (e.factor, e.method) == (0.37, "given")
    with pytest.raises(DopplermapInputError, match="already scaled"):
        scaled.scale_errors(0.5)
    with pytest.raises(DopplermapInputError, match="already scaled"):
        apply_error_scale(scaled, 0.5)


def test_each_line_data_set_is_scaled_on_its_own(tmp_path):
    prob = _star(inflate=1.0)
    path = _target(tmp_path, prob, sets=[("a", 2.0, 'error_scale = "auto"'), ("b", 4.0, 'error_scale = "continuum"'),
                                         ("c", 1.0, "")])
    scaled = from_config(load_config(path))
    got = {e.name: e for e in scaled.error_scale}
    assert set(got) == {"a", "b"}  # "c" keeps its errors
    assert got["a"].factor == pytest.approx(0.5, rel=0.1) and got["b"].factor == pytest.approx(0.25, rel=0.1)
    assert got["b"].factor / got["a"].factor == pytest.approx(0.5, rel=1e-9)  # the same profiles
    err = {ld.name: np.asarray(ld.obs.err) for ld in scaled.lines}
    assert np.allclose(err["a"], err["c"] * 2.0 * got["a"].factor) and np.allclose(err["b"], err["c"] * 4.0 * got["b"].factor)


@pytest.mark.parametrize("value,shown", [('"bogus"', "'bogus'"), ("0", "0"), ("-0.5", "-0.5"), ("true", "True"),
                                         ("nan", "nan"), ("[0.5]", r"\[0.5\]")])
def test_bad_error_scales_are_refused_in_one_line(tmp_path, capsys, value, shown):
    path = _target(tmp_path, _star(n_epoch=4, n_vel=20, n_cell=60), f"error_scale = {value}")
    want = (r"target\.toml: \[data\] error_scale must be a number > 0 or one of 'auto', 'continuum', 'residuals', "
            rf"got {shown}$")
    with pytest.raises(DopplermapInputError, match=want):
        load_config(path)
    assert main(["invert", str(path), "--out", str(tmp_path / "res"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error_scale must be a number > 0" in err and "Traceback" not in err


def test_continuum_in_a_window_without_continuum_is_refused(tmp_path):
    # +-60 km/s around a line that reaches 40 + 11.6 km/s: 4 points beyond it, fewer than 10
    path = _target(tmp_path, _star(vmax=60.0, n_vel=28, n_epoch=4, n_cell=60), 'error_scale = "continuum"')
    with pytest.raises(DopplermapInputError, match=r"target\.toml: \[data\] error_scale = 'continuum': the velocity "
                                                   r"window .* holds 4 point\(s\) beyond the line .* widen the window"):
        from_config(load_config(path))
    text = path.read_text().replace('"continuum"', '"auto"')
    path.write_text(text)
    (pending,) = from_config(load_config(path)).error_scale  # auto: the residuals of a fit, still to make
    assert pending.pending and pending.method == "residuals" and "too few" in pending.detail


class _Fit:
    success, outcome, stop_reason = True, "ftol", "converged"
    rv = amp = np.zeros(3)

    def __init__(self, chi2):
        self.chi2 = chi2


def test_a_low_chi2_names_the_error_scale_option():
    obs = dm.Observations.create(np.arange(3.0), np.linspace(-50, 50, 20), np.ones((3, 20)), np.full((3, 20), 0.01))
    with pytest.warns(DopplermapWarning, match=r'far below 1: the errors look too large .*error_scale = "auto"'):
        check_result(_Fit(0.3), obs, tol=1e-5, maxiter=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_result(_Fit(0.8), obs, tol=1e-5, maxiter=100)  # near 1: nothing to say


@pytest.mark.slow
def test_residuals_find_errors_twice_too_large_in_a_narrow_window():
    prob = _star(vmax=60.0, n_vel=28, n_epoch=12, n_cell=300)
    assert continuum_error_scale(prob.obs, 40.0, line_margin(prob.components)) is None
    scaled = apply_error_scale(prob, "auto")
    (e,) = scaled.error_scale
    assert e.method == "residuals" and len(e.per_epoch) == 12
    assert e.factor == pytest.approx(0.5, rel=0.1)
    # the fit's share of the noise is put back: the plain sqrt(chi2) of the same fit reads low
    res = dm.invert(prob, lmbd=0.1 * dm.invert(prob, lmbd=0.1).chi2)
    assert np.sqrt(res.chi2) < e.factor


@pytest.mark.slow
def test_invert_reports_the_error_scale(tmp_path, capsys):
    path = _target(tmp_path, _star(n_epoch=6, n_vel=30, n_cell=100), 'error_scale = "auto"')
    assert main(["invert", str(path), "--out", str(tmp_path / "res"), "--quiet", "--no-plots"]) in (0, 3)
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    scale = summary["error_scale"]
    assert scale["method"] == "continuum" and scale["factor"] == pytest.approx(0.5, rel=0.15)
    assert len(scale["sets"][0]["per_epoch"]) == 6 and f"error scale {scale['factor']:.4g} (continuum" in out
    report = (tmp_path / "res" / "report.html").read_text()
    assert "error scale" in report and f"{scale['factor']:.4g} (continuum" in report
    # scaled errors: the chi2 per residual degree of freedom beside the chi2 per point
    dof = summary["chi2_dof"]
    assert dof["chi2"] == pytest.approx(summary["chi2"]) and 0 < dof["p_eff"] < dof["n"] == 6 * 30
    assert dof["chi2_nu"] == pytest.approx(summary["chi2"] * dof["n"] / dof["nu"])
    assert f"({dof['chi2_nu']:.4f} per residual dof" in out
    assert "per residual degree of freedom" in report and f"{dof['chi2_nu']:.4g} (" in report
    # the chi2 is the scaled errors': the fit's residuals against them
    res = dm.load_result(tmp_path / "res")
    assert np.mean(((res.obs.flux - res.model) / res.obs.err) ** 2) == pytest.approx(summary["chi2"], rel=1e-6)
    # lambda and grid solve the same scaled problem, and say so
    assert main(["lambda", str(path), "--out", str(tmp_path / "lam"), "--lmbds", "0.3,3", "--quiet"]) == 0
    assert main(["grid", str(path), "--out", str(tmp_path / "grid"), "--param", "inclination=60", "--scheduler", "sync",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    for name in ("lam/lambda.json", "grid/grid.json"):
        assert json.loads((tmp_path / name).read_text())["error_scale"] == scale
    assert out.count(f"error scale {scale['factor']:.4g} (continuum") == 2


def _lopeg_target(tmp_path, error_scale: str, window=None) -> Path:
    if not (LOPEG / "inzdi.dat").is_file():
        pytest.skip(f"LO Peg data not found at {LOPEG} (the shared data folder is absent)")
    toml = tmp_path / "lopeg.toml"
    assert main(["import-zdipy", str(LOPEG / "inzdi.dat"), str(LOPEG / "model-voigt-line.dat"), "--out", str(toml),
                 "--teff", "4500", "--spot-teff", "3500", "--overwrite"]) == 0
    lines = [ln for ln in toml.read_text().splitlines() if not ln.startswith("error_scale")]
    out = []
    for ln in lines:
        if ln.startswith("velocity_range") and window is not None:
            ln = f"velocity_range = {list(window)}"
        out.append(ln)
        if ln.startswith("velocity_range"):
            out.append(f'error_scale = "{error_scale}"')
    toml.write_text("\n".join(out) + "\n")
    return toml


def test_lopeg_continuum_scale_is_plausible(tmp_path):
    # the LSD files reach +-200 km/s: widened to that, the continuum beyond the line sets the scale
    prob = from_config(load_config(_lopeg_target(tmp_path, "continuum", window=(-180.0, 180.0))))
    (e,) = prob.error_scale
    assert e.method == "continuum" and e.n_points > 50 and len(e.per_epoch) == 16
    # the delivered errors are several times the scatter (the reduced chi2 of any map is far below 1)
    assert 0.1 < e.factor < 0.5 and max(e.per_epoch) < 0.6


@pytest.mark.slow
def test_lopeg_auto_scale_brings_chi2_near_1(tmp_path):
    prob = from_config(load_config(_lopeg_target(tmp_path, "auto")))
    (pending,) = prob.error_scale
    assert pending.pending  # ZDIpy's window, -80..80 km/s at vsini 67.7, holds no continuum
    scaled = apply_error_scale(prob)
    (e,) = scaled.error_scale
    assert e.method == "residuals" and 0.15 < e.factor < 0.45
    unscaled = dm.invert(prob, lmbd=1.0)
    res = dm.invert(scaled, lmbd=1.0 / e.factor ** 2)  # the same map: lambda moves with the errors squared
    assert res.chi2 == pytest.approx(unscaled.chi2 / e.factor ** 2, rel=1e-2)
    small = dm.invert(scaled, lmbd=0.1)
    assert unscaled.chi2 < 0.5 and 0.5 < small.chi2 < 1.5
    # the map absorbs part of the noise: per residual degree of freedom the chi2 is 1
    dof = effective_dof(scaled, small)
    assert small.chi2 < 0.85 and dof.chi2_nu == pytest.approx(1.0, abs=0.1)


def test_grid_refuses_a_bad_value_before_fitting_the_error_scale(tmp_path, capsys, monkeypatch):
    """``--param vsini=0:10:5`` on a target whose errors are scaled from a fit: one line naming the
    value, before the fit's solves (they came first and cost a target seconds to minutes)."""
    from dopplermap import search

    path = _target(tmp_path, _star(n_epoch=6, n_vel=30, n_cell=100), 'error_scale = "residuals"')
    monkeypatch.setattr(search, "apply_error_scale", lambda *a, **k: pytest.fail("the error scale was fitted"))
    assert main(["grid", str(path), "--out", str(tmp_path / "g"), "--param", "vsini=0:10:5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "grid parameter vsini=0: vsini must be > 0 km/s" in err


def test_residuals_scale_fits_the_line_profiles_alone():
    """A joint problem's light curve (here one that pulls the map away: drawn from another map)
    does not enter the line profiles' error scale: the factor is the lines-only problem's, and
    the line model is not rebuilt for the fits."""
    from dopplermap.lightcurve import LightCurveBand, simulate_lightcurve
    from dopplermap.problem import LightCurveData

    prob = _star(vmax=60.0, n_vel=24, n_epoch=6, n_cell=100)
    band = LightCurveBand((dm.LimbDarkening("linear", (0.6,)),) * 3, (1.0, 0.3, 1.4))
    t = np.linspace(0.0, 4.0, 80)
    other = np.roll(np.full(prob.grid.n_cell, 1e-5) + 0.4 * (np.arange(prob.grid.n_cell) % 7 == 0), 3)
    flux, err, _ = simulate_lightcurve(prob.grid, prob.star, t, band, other, np.full(prob.grid.n_cell, 1e-5),
                                       sigma=1e-4, seed=2)
    joint = prob.replace(lightcurve_data=LightCurveData(times=t, flux=flux, err=err, band=band))
    pre = joint.pre
    lines = joint.without_lightcurves()
    assert lines.lightcurve is None and joint.lightcurve is not None
    assert lines.pre is pre  # kept, not rebuilt
    assert prob.without_lightcurves() is prob
    alone_lc = dataclasses.replace(joint, obs=None, components=None)
    with pytest.raises(DopplermapInputError, match="light curves alone has no line profiles to keep"):
        alone_lc.without_lightcurves()
    alone = apply_error_scale(prob, "residuals").error_scale[0]
    both = apply_error_scale(joint, "residuals").error_scale[0]
    assert alone.method == both.method == "residuals"
    assert both.factor == pytest.approx(alone.factor, rel=1e-9) and both.per_epoch == pytest.approx(alone.per_epoch)
