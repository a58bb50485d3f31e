"""Several line data sets and several light-curve bands in one inversion: the joint
map, how the objective pools and weights the sets, the lines/light-curve tables from config
to CLI, and the errors of bad tables and unsupported paths."""

import json

import bench_multi as BM  # noqa: E402
import jax.numpy as jnp
import numpy as np
import pytest
from support.helpers import write_lsd_set

import dopplermap as dm
from dopplermap import uncertainty
from dopplermap.broadening import instrumental_broaden
from dopplermap.cli import main
from dopplermap.config import parse_config
from dopplermap.errors import DopplermapInputError
from dopplermap.io.lightcurve import write_lightcurve
from dopplermap.lightcurve import (
    LightCurveBand,
    LightCurveSet,
    lightcurve_model,
    precompute_lightcurve,
    simulate_lightcurve,
)
from dopplermap.objective import LineSets, objective_terms, regulariser_value
from dopplermap.problem import LineData, Problem, Settings


def _ssr(obs, model):
    r = (np.asarray(obs.flux) - np.asarray(model)) / np.asarray(obs.err)
    return float(np.sum(r * r))


@pytest.fixture(scope="module")
def two_instruments():
    return BM.two_instruments(n_lat=60, n_cell=300)


@pytest.mark.slow
def test_two_instruments_map_better_jointly(two_instruments):
    # simulated by the NumPy fine-grid integrator with each instrument applied exactly;
    # dopplermap synthesises each set on its own velocity grid with its own resolving power
    case = two_instruments
    probs = BM.problems(case, Settings(lmbd=1.0, tol=1e-6, maxiter=2000))
    res = {name: dm.invert(p) for name, p in probs.items()}
    corr = {name: BM.correlation(r.fssc, case["truth_fssc"]) for name, r in res.items()}
    assert corr["joint"] > max(corr["espadons"], corr["narval"]) + 0.02, corr
    joint = res["joint"]
    assert list(joint.chi2_sets) == ["espadons", "narval"]
    assert all(0.8 < c < 1.25 for c in joint.chi2_sets.values()), joint.chi2_sets
    # the reported chi2 of each set is its own points' (recomputed here from the result)
    (_, oa, _), (_, ob, _) = case["sets"]
    assert joint.rv.shape == (oa.n_epoch + ob.n_epoch,) and isinstance(joint.obs, tuple)
    assert [m.shape for m in joint.model] == [(oa.n_epoch, oa.n_vel), (ob.n_epoch, ob.n_vel)]
    na, nb = oa.flux.size, ob.flux.size
    sa, sb = _ssr(oa, joint.model[0]), _ssr(ob, joint.model[1])
    assert joint.chi2_sets["espadons"] == pytest.approx(sa / na, rel=1e-6)
    assert joint.chi2_sets["narval"] == pytest.approx(sb / nb, rel=1e-6)
    assert joint.chi2 == pytest.approx((sa + sb) / (na + nb), rel=1e-6)  # pooled over all points
    assert "chi2[espadons]" in repr(joint) and "chi-square of narval" in joint._repr_html_()
    # the same sets through the device solver: the same map
    dev = dm.invert(probs["joint"], solver="projected_lbfgs")
    assert BM.correlation(dev.fssc, case["truth_fssc"]) == pytest.approx(corr["joint"], abs=0.01)
    assert dev.chi2_sets["narval"] == pytest.approx(joint.chi2_sets["narval"], rel=0.01)


@pytest.mark.slow
def test_objective_pools_and_weights_the_sets(two_instruments):
    case = two_instruments
    (na, oa, ca), (nb, ob, cb) = case["sets"]
    grid, star = case["grid"], case["star"]
    pa = dm.precompute(grid, star, np.asarray(oa.times), np.asarray(oa.vels), ca)
    pb = dm.precompute(grid, star, np.asarray(ob.times), np.asarray(ob.vels), cb)
    rng = np.random.default_rng(0)
    n_e = oa.n_epoch + ob.n_epoch
    x = np.concatenate([rng.uniform(0.01, 0.4, 2 * grid.n_cell), rng.normal(0, 0.5, n_e), rng.normal(0, 0.01, n_e)])
    fssc, fssh = x[:grid.n_cell], x[grid.n_cell:2 * grid.n_cell]
    rv, amp = x[2 * grid.n_cell:2 * grid.n_cell + n_e], x[2 * grid.n_cell + n_e:]
    # each set's model alone, at its own slice of rv and amp
    ma = np.asarray(dm.forward(jnp.asarray(fssc), jnp.asarray(fssh), jnp.asarray(rv[:12]), jnp.asarray(amp[:12]), pa))
    mb = np.asarray(dm.forward(jnp.asarray(fssc), jnp.asarray(fssh), jnp.asarray(rv[12:]), jnp.asarray(amp[12:]), pb))
    sa, sb, n = _ssr(oa, ma), _ssr(ob, mb), oa.flux.size + ob.flux.size
    reg = float(regulariser_value("mem", jnp.asarray(fssc), jnp.asarray(fssh), pa.cell_area, pa.edges))
    sets = LineSets.create([pa, pb], weights=[2.0, 0.5], names=["a", "b"])
    loss, terms = objective_terms(jnp.asarray(x), 0.7, sets, (oa, ob), with_model=True)
    assert float(loss) == pytest.approx((2.0 * sa + 0.5 * sb) / n + 0.7 * reg, rel=1e-10)
    assert float(terms.chi2) == pytest.approx((sa + sb) / n, rel=1e-10)
    assert [float(c) for c in terms.chi2_sets] == pytest.approx([sa / oa.flux.size, sb / ob.flux.size], rel=1e-10)
    assert np.allclose(terms.model[1], mb, atol=1e-12)
    # one set as LineSets is the plain objective
    xa = np.concatenate([x[:2 * grid.n_cell], rv[:12], amp[:12]])
    one, _ = objective_terms(jnp.asarray(xa), 0.7, LineSets.create([pa]), (oa,))
    plain, _ = objective_terms(jnp.asarray(xa), 0.7, pa, oa)
    assert float(one) == pytest.approx(float(plain), rel=1e-13)


def test_profiles_and_two_band_light_curve_in_one_fit():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=16, n_vel=28, seed=3)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500, seed=3)
    ld = [dm.LimbDarkening("linear", (0.7,))] * 3
    bands, data = {}, []
    for k, (name, lam, n_lc, sigma) in enumerate((("B", 440.0, 300, 1.5e-3), ("I", 800.0, 200, 1e-3))):
        band = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, lam, ld)
        t_lc = np.linspace(0.0, 4.0, n_lc) + 0.01 * k
        f, e, _ = simulate_lightcurve(grid, star, t_lc, band, sim.fssc, sim.fssh, sigma=sigma, seed=10 + k)
        bands[name] = precompute_lightcurve(grid, star, t_lc, f, e, band)
        data.append(dm.problem.LightCurveData(times=t_lc, flux=f, err=e, band=band, name=name))
    # through a Problem with a tuple of bands, as from_config builds it
    prob = Problem(grid=grid, star=star, obs=sim.obs, components=comps, lightcurve_data=tuple(data),
                   settings=Settings(lmbd=1.0, tol=1e-6))
    assert isinstance(prob.lightcurve, LightCurveSet) and prob.lightcurve.names == ("B", "I")
    res = dm.invert(prob)
    assert list(res.chi2_lc_sets) == ["B", "I"]
    assert all(0.6 < c < 1.5 for c in res.chi2_lc_sets.values()), res.chi2_lc_sets
    assert 0.7 < res.chi2 < 1.4
    ssr = {}
    for name, lc in bands.items():  # each band's chi2 recomputed from the maps
        r = (np.asarray(lc.flux) - np.asarray(lightcurve_model(jnp.asarray(res.fssc), jnp.asarray(res.fssh), lc))) \
            / np.asarray(lc.err)
        ssr[name] = float(np.sum(r * r))
        assert res.chi2_lc_sets[name] == pytest.approx(ssr[name] / lc.n_lc, rel=1e-6)
    assert res.chi2_lc == pytest.approx(sum(ssr.values()) / 500, rel=1e-6)
    # the cool spots are recovered (not only fitted)
    assert np.corrcoef(res.fssc, sim.fssc)[0, 1] > 0.6


TARGET = """
[star]
inclination = 60.0
vsini = 40.0
period = 2.0

[temperatures]
phot = 5000.0
cool = 3800.0
hot = 6000.0

[[lines]]
name = "espadons"
[lines.data]
profiles = ["espadons/*.lsd"]
times_table = "espadons.csv"
[lines.line]
wavelength_nm = 600.0
depth = [0.50, 0.60, 0.42]
fwhm = 9.0
resolving_power = 65000.0
ld_phot = [0.65]
ld_cool = [0.75]
ld_hot = [0.60]

[[lines]]
name = "narval"
weight = 1.0
[lines.data]
profiles = ["narval/*.lsd"]
times_table = "narval.csv"
[lines.line]
wavelength_nm = 600.0
depth = [0.50, 0.60, 0.42]
fwhm = 9.0
resolving_power = 35000.0
ld_phot = [0.65]
ld_cool = [0.75]
ld_hot = [0.60]

[[lightcurves]]
name = "V"
file = "lc_v.csv"
wavelength_nm = 550.0
ld_phot = [0.7]
ld_cool = [0.7]
ld_hot = [0.7]

[[lightcurves]]
name = "I"
file = "lc_i.csv"
wavelength_nm = 800.0
ld_phot = [0.7]
ld_cool = [0.7]
ld_hot = [0.7]

[grid]
n_cell = 200

[inversion]
lmbd = 1.0
maxiter = 80
"""


@pytest.mark.slow
def test_lines_and_lightcurves_tables_end_to_end(tmp_path, capsys):
    star, grid, _, _, base = dm.demo_setup(n_cell=200, seed=2)
    for name, R, dv, times in (("espadons", 65000.0, 1.8, np.linspace(0.0, 1.2, 7)),
                               ("narval", 35000.0, 4.0, np.linspace(1.0, 2.2, 5))):
        comps = dm.ComponentSet(*[dm.Component(instrumental_broaden(c.profile, R), c.limb_darkening, c.intensity)
                                  for c in base])
        vels = np.arange(-60.0, 60.0 + 1e-9, dv)
        write_lsd_set(tmp_path, name, dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=400,
                                                  seed=len(name)).obs)
    sim = dm.simulate(grid, star, [0.0], np.linspace(-60, 60, 30), base, dm.DEMO_SPOTS, snr=400)  # the maps
    for name, lam in (("v", 550.0), ("i", 800.0)):
        band = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, lam, [dm.LimbDarkening("linear", (0.7,))] * 3)
        t_lc = np.linspace(0.0, 2.2, 50)
        f, e, _ = simulate_lightcurve(grid, star, t_lc, band, sim.fssc, sim.fssh, sigma=1e-3)
        write_lightcurve(tmp_path / f"lc_{name}.csv", t_lc, f, e)
    (tmp_path / "target.toml").write_text(TARGET)
    out_dir = tmp_path / "res"
    rc = main(["invert", str(tmp_path / "target.toml"), "--out", str(out_dir), "--quiet"])
    printed = capsys.readouterr().out
    summary = json.loads((out_dir / "summary.json").read_text())
    assert rc in (0, 3), printed
    assert set(summary["chi2_sets"]) == {"espadons", "narval"} and set(summary["chi2_lc_sets"]) == {"V", "I"}
    assert "chi2(espadons)" in printed and "chi2(lc I)" in printed
    assert summary["n_epoch"] == 12 and [s["n_vel"] for s in summary["line_sets"]] == [67, 31]
    for f in ("profiles_espadons.png", "dynamic_spectrum_narval.png", "light_curve_V.png", "light_curve_I.png"):
        assert f in summary["figures"], summary["figures"]
    report = (out_dir / "report.html").read_text()
    assert "reduced χ² (line profiles narval)" in report and "reduced χ² (light curve V)" in report
    res = dm.load_result(out_dir)  # the files hold every set
    assert isinstance(res.obs, tuple) and [o.n_vel for o in res.obs] == [67, 31]
    assert res.chi2_sets == pytest.approx(summary["chi2_sets"]) and res.rv.shape == (12,)
    assert [m.shape for m in res.model] == [(7, 67), (5, 31)] and len(res.spotless) == 2
    assert [b["name"] for b in res.light_curve] == ["V", "I"]
    assert res.chi2_sets["narval"] == pytest.approx(_ssr(res.obs[1], res.model[1]) / res.obs[1].flux.size, rel=1e-6)
    # what handles one set says so, in one line
    assert main(["lambda", str(tmp_path / "target.toml"), "--out", str(tmp_path / "lam"), "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "the lambda and grid searches: one line data set only" in err and "Traceback" not in err


def _tables():
    import tomllib

    return tomllib.loads(TARGET)


@pytest.mark.parametrize("change, match", [
    (lambda t: t.update(data={"profiles": ["a"], "times_table": "t.csv"}), r"\[data\] and \[\[lines\]\] both"),
    (lambda t: t.update(lightcurve={"wavelength_nm": 500.0}), r"\[lightcurve\] and \[\[lightcurves\]\] both"),
    (lambda t: t["lines"][1].update(name="espadons"), "names must differ"),
    (lambda t: t["lines"][0]["data"].update(lightcurve="x.csv"), "belongs in a \\[\\[lightcurves\\]\\] table"),
    (lambda t: t["lines"][1]["line"].update(fwhm=-1.0), r"\[\[lines\]\] 2 \('narval'\) line fwhm must be > 0"),
    (lambda t: t["lines"][0].pop("line"), "missing sub-table"),
    (lambda t: t["lightcurves"][0].update(weight=-1.0), r"\[\[lightcurves\]\] 1 \('V'\) weight must be >= 0"),
    (lambda t: t["lightcurves"][1].update(unit="counts"), "unit must be one of 'flux', 'mag', got 'counts'"),
])
def test_bad_tables_name_the_table(change, match):
    t = _tables()
    change(t)
    with pytest.raises(DopplermapInputError, match=match):
        parse_config(t, source="t.toml")


def test_one_lines_table_is_the_plain_problem():
    t = _tables()
    t["lines"] = t["lines"][:1]
    cfg = parse_config(t, source="t.toml")
    assert cfg.data is None and len(cfg.line_sets()) == 1 and cfg.lines[0].line.resolving_power == 65000.0


def test_unsupported_paths_say_so(two_instruments):
    case = two_instruments
    joint = BM.problems(case, Settings(maxiter=5))["joint"]
    assert not dm.solvers.newton_fits(joint)
    with pytest.raises(DopplermapInputError, match="newton"):
        dm.invert(joint, solver="newton")
    with pytest.raises(DopplermapInputError, match="invert_batch"):
        dm.invert_batch(joint.pre, joint.observations, lmbds=[1.0, 2.0])
    with pytest.raises(DopplermapInputError, match="2 Observations"):
        dm.invert(joint.pre, joint.observations[:1])
    with pytest.raises(DopplermapInputError, match="narval.*\\(n_epoch, n_vel\\)"):
        dm.invert(joint.pre, (joint.observations[0], joint.observations[0]))
    with pytest.raises(DopplermapInputError, match="the grid search: one line data set only"):
        dm.search.evaluate_point(joint, {"inclination": 50.0})
    with pytest.raises(DopplermapInputError, match="got both"):
        Problem(grid=case["grid"], star=case["star"], obs=case["sets"][0][1], components=case["sets"][0][2],
                lines=(LineData(case["sets"][0][1], case["sets"][0][2]),))
    with pytest.raises(DopplermapInputError, match="laplace: one line data set only, got 2 sets"):
        uncertainty.laplace(joint, None)
    with pytest.raises(DopplermapInputError, match="never_visible: one line data set only"):
        uncertainty.never_visible(joint.pre)
