"""Target TOML configuration, ``dopplermap init`` and ``dopplermap invert``."""

import dataclasses
import json
import tomllib

import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.app.defaults import GRID_TOL, LAMBDA_TOL
from dopplermap.cli import main
from dopplermap.config import TEMPLATE, load_config, parse_config
from dopplermap.io.lightcurve import write_lightcurve
from dopplermap.io.lsd import write_lsd
from dopplermap.lightcurve import LightCurveBand, simulate_lightcurve
from dopplermap.model import is_mu_dependent
from dopplermap.problem import from_config


def _table(**changes):
    t = tomllib.loads(TEMPLATE)
    for key, val in changes.items():
        sec, name = key.split("__")
        if val is None:
            t[sec].pop(name, None)
        else:
            t[sec][name] = val
    return t


def test_template_is_valid_and_complete():
    cfg = parse_config(tomllib.loads(TEMPLATE), source="t.toml")
    assert cfg.star.inclination == 60.0 and cfg.line.depth == (0.5, 0.6, 0.42)
    assert cfg.gravity_darkening.enabled is False and cfg.inversion.regulariser == "mem"
    assert cfg.data.times_table == "times.csv"


@pytest.mark.parametrize("changes,match", [
    ({"line__fwmh": 9.0}, r"t\.toml: \[line\]: unknown key 'fwmh'; did you mean 'fwhm'\? \(allowed: "),
    ({"line__colour": 9.0}, r"t\.toml: \[line\]: unknown key 'colour' \(allowed: "),  # nothing close: no guess
    ({"line__fwhm": "nine"}, r"t\.toml: \[line\] fwhm must be a number, got 'nine'"),
    ({"grid__n_cell": 25.5}, r"\[grid\] n_cell must be an integer, got 25\.5"),
    ({"inversion__fit_rv": "yes"}, r"\[inversion\] fit_rv must be true or false"),
    ({"line__depth": [0.5, "x", 0.4]}, r"\[line\] depth\[1\] must be a number"),
    ({"line__depth": [0.5, 0.4]}, r"\[line\] depth must be 3 values"),
    ({"star__inclination": None}, r"\[star\]: missing required key 'inclination'"),
    ({"star__radius": 1.2}, r"\[star\] give exactly one of vsini"),
    ({"star__inclination": 120.0}, r"\[star\] inclination must be in \(0, 90\]"),
    ({"line__ld_cool": [0.5, 0.1]}, r"\[line\] ld_cool: linear limb darkening takes 1"),
    ({"line__macroturbulence": -1.0}, r"\[line\] macroturbulence must be >= 0"),
    ({"gravity_darkening__enabled": True}, r"\[gravity_darkening\] enabled needs \[star\] mass"),
    ({"data__time_pattern": "x(?P<time>.*)"}, r"\[data\] give exactly one of times_table or time_pattern"),
    ({"inversion__regulariser": "maxent"}, r"\[inversion\] regulariser must be"),
    ({"inversion__solver": "gauss"}, r"\[inversion\] solver must be one of 'auto', 'lbfgsb', 'projected_lbfgs', 'newton', "
                                     r"got 'gauss'"),
    ({"line__profile": "tabulated"}, r"\[line\] files must list 3"),
    ({"inversion__rv_shift": "spline"}, r"\[inversion\] rv_shift must be one of 'interpolate', 'exact', got 'spline'"),
    ({"inversion__cube_dtype": "float16"}, r"\[inversion\] cube_dtype must be one of 'auto', 'float32', 'float64', "
                                           r"got 'float16'"),
    ({"data__lightcurve_format": "xlsx"}, r"\[data\] lightcurve_format must be one of 'auto', 'text', 'fits', got 'xlsx'"),
    ({"grid__subdivide": 0}, r"\[grid\] subdivide must be an integer in 1\.\.8, got 0"),
    ({"grid__subdivide": 3, "grid__kind": "healpix"}, r"\[grid\] subdivide on a HEALPix grid must be a power of 2"),
])
def test_bad_values_name_the_key(changes, match):
    with pytest.raises(ValueError, match=match):
        parse_config(_table(**changes), source="t.toml")


def test_unknown_section_and_bad_toml(tmp_path):
    t = tomllib.loads(TEMPLATE)
    t["stars"] = {}
    with pytest.raises(ValueError, match=r"unknown section \[stars\]; did you mean \[star\]\?"):
        parse_config(t, source="t.toml")
    (tmp_path / "bad.toml").write_text("[star\ninclination = 3")
    with pytest.raises(ValueError, match=r"bad\.toml: invalid TOML"):
        load_config(tmp_path / "bad.toml")


def test_init_writes_template_and_refuses_overwrite(tmp_path, capsys):
    p = tmp_path / "target.toml"
    assert main(["init", str(p)]) == 0
    assert p.read_text() == TEMPLATE
    assert main(["init", str(p)]) == 2
    assert "exists; use --overwrite" in capsys.readouterr().err


def _dataset(root, *, n_epoch=10, n_cell=250, lightcurve=True, extra=""):
    star, grid, times, vels, comps = dm.demo_setup(n_cell=n_cell, n_epoch=n_epoch, n_vel=28, seed=4)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=400, seed=4)
    (root / "obs").mkdir()
    rows = []
    for k, t in enumerate(np.asarray(sim.obs.times)):
        name = f"ep{k:02d}_HJD{t + 2458000:.6f}.lsd"
        write_lsd(root / "obs" / name, sim.obs.vels, sim.obs.flux[k], sim.obs.err[k], columns=7)
        rows.append(f"{name},{t:.8f}")
    (root / "times.csv").write_text("file,hjd\n" + "\n".join(rows) + "\n")
    lc_line = ""
    if lightcurve:
        band = LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, 550.0, [dm.LimbDarkening("linear", (0.7,))] * 3)
        t_lc = np.linspace(0, 8, 120)
        f, e, _ = simulate_lightcurve(grid, star, t_lc, band, sim.fssc, sim.fssh, sigma=1e-3)
        write_lightcurve(root / "lc.csv", t_lc, f * 500.0, e * 500.0)
        lc_line = 'lightcurve = "lc.csv"\n'
    text = f"""
[data]
profiles = ["obs/*.lsd"]
times_table = "times.csv"
time_scale = "HJD"
{lc_line}
[star]
inclination = 60.0
vsini = 40.0
period = 2.0

[temperatures]
phot = 5000.0
cool = 3800.0
hot = 6000.0

[line]
wavelength_nm = 600.0
depth = [0.50, 0.60, 0.42]
fwhm = 9.0
ld_phot = [0.65]
ld_cool = [0.75]
ld_hot = [0.60]
{extra}
[lightcurve]
wavelength_nm = 550.0
ld_phot = [0.7]
ld_cool = [0.7]
ld_hot = [0.7]

[grid]
n_cell = {n_cell}

[inversion]
lmbd = 1.0
maxiter = 60
"""
    (root / "target.toml").write_text(text)
    return sim


def test_invert_runs_end_to_end(tmp_path, capsys):
    sim = _dataset(tmp_path)
    out_dir = tmp_path / "res"
    rc = main(["invert", str(tmp_path / "target.toml"), "--out", str(out_dir), "--quiet"])
    out = capsys.readouterr()
    summary = json.loads((out_dir / "summary.json").read_text())
    assert rc == (0 if summary["success"] else 3)  # 3: written, but stopped on maxiter = 60
    # --quiet: no progress display; only the run's warnings (also in summary.json)
    assert "chi2(lc)" in out.out and all(w in out.err for w in summary["warnings"])
    assert "iteration" not in out.err.replace("iteration limit", "")
    assert summary["complete"] and summary["n_epoch"] == 10 and summary["n_lc"] == 120
    assert np.isfinite(summary["chi2_lc"]) and summary["chi2"] < 5.0 and summary["method"] == "dense"  # "auto" at this size
    assert summary["plan"].startswith("dense synthesis") and f"plan: {summary['plan']}" in out.out
    # the band's numbers are kept and printed
    (band,) = summary["lc_bands"]
    assert band["limb_darkening"]["phot"] == ["linear", 0.7] and band["intensity_source"] == "Planck at 550 nm"
    assert "bands: lightcurve: limb darkening phot linear(0.7000)" in out.out
    for name in ("map.fits", "profiles.fits", "config.json", "config.toml"):
        assert (out_dir / name).is_file(), name
    assert (out_dir / "config.toml").read_text() == (tmp_path / "target.toml").read_text()
    figs = summary["figures"]
    assert "light_curve.png" in figs and len(figs) >= 4
    assert all((out_dir / f).stat().st_size > 1000 for f in figs)
    res = dm.load_result(out_dir)
    assert np.allclose(res.obs.times, np.asarray(sim.obs.times), atol=1e-7)
    assert res.fssc.shape == (250,) and res.grid.n_cell == 250
    assert res.light_curve["model"].shape == (120,) and np.isfinite(res.chi2_lc)
    assert res.config["command"] == "invert" and res.config["inversion"]["maxiter"] == 60
    # the model written is the fit's; rerunning replaces the folder, --no-plots draws nothing
    assert np.max(np.abs(res.model - res.obs.flux) / res.obs.err) < 10.0
    assert main(["invert", str(tmp_path / "target.toml"), "--out", str(out_dir), "--quiet", "--no-plots"]) == 2
    assert "--overwrite" in capsys.readouterr().err  # an earlier result is replaced only on request
    assert main(["invert", str(tmp_path / "target.toml"), "--out", str(out_dir), "--quiet", "--no-plots",
                 "--overwrite"]) in (0, 3)
    assert not list(out_dir.glob("*.png")) and json.loads((out_dir / "summary.json").read_text())["figures"] == []
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".res")]  # no partial folders left


def test_invert_command_line_overrides_are_used_and_recorded(tmp_path):
    _dataset(tmp_path, n_epoch=5, n_cell=120, lightcurve=False)
    cfg_path = tmp_path / "target.toml"
    rc = main(["invert", str(cfg_path), "--out", str(tmp_path / "res"), "--quiet", "--no-plots", "--no-report",
               "--lmbd", "0.25", "--tol", "1e-6", "--maxiter", "400", "--solver", "projected_lbfgs"])
    assert rc == 0
    s = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert s["lmbd"] == 0.25 and s["solver"] == "projected_lbfgs"
    cfg = json.loads((tmp_path / "res" / "config.json").read_text())
    assert cfg["inversion"]["tol"] == 1e-6 and cfg["inversion"]["maxiter"] == 400
    assert cfg["overrides"] == {"lmbd": 0.25, "tol": 1e-6, "maxiter": 400, "solver": "projected_lbfgs"}
    assert "lmbd = 1.0" in (tmp_path / "res" / "config.toml").read_text()  # the TOML itself is kept as given
    assert main(["invert", str(cfg_path), "--out", str(tmp_path / "r2"), "--tol", "-1"]) == 2


@pytest.mark.slow  # a whole CLI run (about 9 s)
def test_search_commands_show_progress(tmp_path, capsys):
    _dataset(tmp_path, n_epoch=5, n_cell=120, lightcurve=False)
    cfg_path = tmp_path / "target.toml"
    assert main(["lambda", str(cfg_path), "--out", str(tmp_path / "lam"), "--lmbds", "0.3,3", "--tol", "1e-5"]) == 0
    err = capsys.readouterr().err
    assert "lambda 1/2: 0.3  chi2" in err and "lambda 2/2: 3  chi2" in err
    assert main(["grid", str(cfg_path), "--out", str(tmp_path / "g"), "--param", "vsini=38,40", "--scheduler", "sync",
                 "--tol", "1e-5"]) == 0
    err = capsys.readouterr().err
    assert "point 2/2: vsini=40 chi2" in err and "best so far vsini=" in err and " R_sun" in err
    assert json.loads((tmp_path / "g" / "grid.json").read_text())["tol"] == 1e-5  # --tol as given
    # without --tol, a looser target tol is tightened (solver noise would jag the landscape)
    assert "tol = " not in cfg_path.read_text() or "tol = 1e-5" in cfg_path.read_text()
    assert main(["grid", str(cfg_path), "--out", str(tmp_path / "g2"), "--param", "vsini=40", "--scheduler", "sync",
                 "-q"]) == 0
    assert json.loads((tmp_path / "g2" / "grid.json").read_text())["tol"] == GRID_TOL
    capsys.readouterr()
    assert main(["lambda", str(cfg_path), "--out", str(tmp_path / "lam2"), "--lmbds", "0.3,3", "--tol", "1e-5",
                 "-q"]) == 0
    assert "lambda 1/2" not in capsys.readouterr().err


def test_cool_only_target_writes_a_cool_only_result(tmp_path):
    _dataset(tmp_path, n_epoch=5, n_cell=120, lightcurve=False)
    cfg_path = tmp_path / "target.toml"
    cfg_path.write_text(cfg_path.read_text().replace("[inversion]", '[inversion]\nfit_components = ["cool"]'))
    rc = main(["invert", str(cfg_path), "--out", str(tmp_path / "res"), "--quiet", "--no-plots"])
    res = dm.load_result(tmp_path / "res")
    assert rc == (0 if res.success else 3)  # 3: written, but stopped on maxiter = 60
    assert res.fit_components == ("cool",) and np.all(res.fssh == 1e-5)
    from astropy.io import fits

    assert fits.getheader(tmp_path / "res" / "map.fits", "MAP")["FITCOMP"] == "cool"
    cfg_path.write_text(cfg_path.read_text().replace('fit_components = ["cool"]', 'fit_components = ["warm"]'))
    with pytest.raises(ValueError, match=r"fit_components must list 'cool', 'hot' or both, got \['warm'\]"):
        load_config(cfg_path)


def test_invert_refuses_a_foreign_output_folder(tmp_path, capsys):
    _dataset(tmp_path, n_epoch=4, n_cell=100, lightcurve=False)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "thesis.tex").write_text("keep me")
    assert main(["invert", str(tmp_path / "target.toml"), "--out", str(tmp_path / "busy"), "--quiet",
                 "--no-plots"]) == 2
    assert "not a dopplermap result folder" in capsys.readouterr().err
    assert (tmp_path / "busy" / "thesis.tex").read_text() == "keep me"


def test_invert_user_errors_are_one_line(tmp_path, capsys):
    _dataset(tmp_path, lightcurve=False)
    cfg = tmp_path / "target.toml"
    cfg.write_text(cfg.read_text().replace("fwhm = 9.0", "fwhm = 9.0\nfwhm_gauss = 3.0"))
    assert main(["invert", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown key 'fwhm_gauss'" in err
    cfg.write_text(cfg.read_text().replace("fwhm_gauss = 3.0\n", "").replace('"obs/*.lsd"', '"nothing/*.lsd"'))
    assert main(["invert", str(cfg)]) == 2
    assert "nothing matches 'nothing/*.lsd'" in capsys.readouterr().err
    cfg.write_text(cfg.read_text().replace('"nothing/*.lsd"', '"obs/*.lsd"'))
    bad = sorted((tmp_path / "obs").glob("*.lsd"))[3]
    lines = bad.read_text().splitlines()
    lines[7] = lines[7].split()[0] + " 1.0 nan 0 1 0 1"
    bad.write_text("\n".join(lines) + "\n")
    assert main(["invert", str(cfg)]) == 2
    assert f"{bad.name}:8: error is nan" in capsys.readouterr().err


@pytest.mark.slow
def test_macroturbulence_instrument_and_gravity_darkening_build(tmp_path):
    _dataset(tmp_path, n_epoch=5, n_cell=150,
             extra="resolving_power = 65000.0\nmacroturbulence = 3.0\nequivalent_width = 2.5\n")
    cfg_path = tmp_path / "target.toml"
    text = cfg_path.read_text().replace("period = 2.0", "period = 2.0\nmass = 1.1")
    cfg_path.write_text(text + "\n[gravity_darkening]\nenabled = true\nbeta = 0.08\n")
    cfg = load_config(cfg_path)
    assert cfg.inversion.method == "auto"
    cfg = dataclasses.replace(cfg, inversion=dataclasses.replace(cfg.inversion, method="binned"))
    prob = from_config(cfg)
    assert prob.pre.line.kind == "binned" and prob.line_factors.shape == (150, 3)
    assert prob.lightcurve.diff.shape == (120, 2 * 150) and prob.lightcurve.n_cell == 150
    # the local profiles were EW-scaled then broadened and depend on mu: the binned model
    # holds several mu-basis columns per component, and agrees with the dense one
    phot = prob.components.phot.profile
    assert is_mu_dependent(phot) and phot.zeta == 3.0 and phot.equivalent_width(1.0) == pytest.approx(2.5, rel=1e-3)
    assert len(prob.pre.line.col_comp) > 3
    dense_cfg = dataclasses.replace(cfg, inversion=dataclasses.replace(cfg.inversion, method="auto"))
    dense = from_config(dense_cfg).pre
    assert dense.line.kind == "dense"  # "auto" at this small size
    fc, fh = (jnp.asarray(x) for x in dm.spot_map(prob.grid, dm.DEMO_SPOTS))
    z = jnp.zeros(prob.obs.n_epoch)
    assert float(jnp.max(jnp.abs(dm.forward(fc, fh, z, z, prob.pre) - dm.forward(fc, fh, z, z, dense)))) < 1e-5
    # without gravity darkening or macroturbulence the weights differ and the method is binned
    plain = from_config(load_config(cfg_path).__class__(**{**cfg.__dict__,
                        "gravity_darkening": cfg.gravity_darkening.__class__(enabled=False),
                        "line": cfg.line.__class__(**{**cfg.line.__dict__, "macroturbulence": 0.0})}))
    assert plain.pre.line.kind == "binned" and plain.line_factors is None


@pytest.mark.slow
def test_roche_shape_builds_a_distorted_grid(tmp_path):
    """[star] shape = "roche" with a companion: the grid carries the tidal surface, the light
    curve's weights follow its projected areas, gravity darkening its gravity (no mass needed)."""
    _dataset(tmp_path, n_epoch=5, n_cell=150)
    cfg_path = tmp_path / "target.toml"
    text = cfg_path.read_text().replace("period = 2.0", 'period = 2.0\nshape = "roche"\nmass_ratio = 0.8\nroche_fill = 0.6')
    cfg_path.write_text(text + "\n[gravity_darkening]\nenabled = true\nbeta = 0.08\n")
    prob = from_config(load_config(cfg_path))
    surf = prob.grid.surface
    assert surf is not None and surf.q == 0.8 and surf.fill == 0.6
    assert prob.line_factors.shape == (150, 3) and float(prob.line_factors.min()) < 0.999
    cfg = load_config(cfg_path)
    sphere = from_config(dataclasses.replace(
        cfg, star=dataclasses.replace(cfg.star, shape="sphere", mass_ratio=0.0, roche_fill=None),
        gravity_darkening=dataclasses.replace(cfg.gravity_darkening, enabled=False)))
    assert sphere.grid.surface is None
    lc, lc_sphere = prob.lightcurve, sphere.lightcurve  # the folded weights (the photosphere's and the spots')
    assert np.shape(lc.diff) == np.shape(lc_sphere.diff)
    assert not np.allclose(np.asarray(lc.base), np.asarray(lc_sphere.base))
    assert not np.allclose(np.asarray(lc.diff), np.asarray(lc_sphere.diff))
    bad = text.replace('shape = "roche"', 'shape = "roche"\ndomega = 0.1').replace("domega = 0.0\n", "")
    cfg_path.write_text(bad)
    with pytest.raises(dm.DopplermapInputError, match=r"\[star\] domega must be 0 with shape = 'roche'"):
        load_config(cfg_path)


@pytest.mark.slow
def test_searches_solve_the_problem_invert_solves(tmp_path):
    """`grid` and `lambda` on a target TOML solve what `invert` solves: gravity darkening,
    the light curve, a non-default method and the [inversion] settings all carry over."""
    import json

    from dopplermap import search
    from dopplermap.app.search import load_problem

    _dataset(tmp_path, n_epoch=6, n_cell=150)
    cfg_path = tmp_path / "target.toml"
    text = cfg_path.read_text().replace("period = 2.0", "period = 2.0\nmass = 1.1")
    text = text.replace("lmbd = 1.0\nmaxiter = 60", "method = \"binned\"\nlc_weight = 0.5\nlmbd = 0.7\ntol = 1e-8\n"
                                                     "maxiter = 3000")
    cfg_path.write_text(text + "\n[gravity_darkening]\nenabled = true\nbeta = 0.08\n")
    assert main(["invert", str(cfg_path), "--out", str(tmp_path / "inv"), "--quiet", "--no-plots"]) == 0
    inv = json.loads((tmp_path / "inv" / "summary.json").read_text())
    prob = load_problem(cfg_path)
    assert prob.gravity is not None and prob.lightcurve is not None and prob.pre.line.kind == "binned"
    # the loss of the invert result, evaluated on a grid point's (padded) problem at the TOML's own parameters
    res = dm.load_result(tmp_path / "inv")
    point = prob.replace(star=search.apply_parameters(prob, {"inclination": 60.0})[0])
    kw = point.invert_kwargs()
    at = dict(lightcurve=point.lightcurve, line_weight=kw["line_weight"], lc_weight=kw["lc_weight"])
    x, pre = jnp.asarray(res.x), search.pad_precomputed(point.pre)
    assert float(dm.objective.loss(x, kw["lmbd"], pre, point.obs, kw["regulariser"], **at)) == pytest.approx(inv["loss"], rel=1e-9)
    # without the light curve or the gravity darkening the loss differs
    bare = prob.replace(lightcurve_data=None, gravity=None)
    assert abs(float(dm.objective.loss(x, kw["lmbd"], bare.pre, bare.obs, kw["regulariser"])) - inv["loss"]) > 1e-3
    assert search.evaluate_point(prob, {"inclination": 60.0})["loss"] == pytest.approx(inv["loss"], rel=1e-3)
    assert main(["lambda", str(cfg_path), "--out", str(tmp_path / "lam"), "--lmbds", "0.7,2"]) == 0
    first = (tmp_path / "lam" / "lcurve.csv").read_text().splitlines()
    header, lam07 = first[0].split(","), first[1].split(",")
    assert float(lam07[header.index("loss")]) == pytest.approx(inv["loss"], rel=1e-6)


def test_lambda_command_reads_target_toml(tmp_path):
    _dataset(tmp_path)
    out_dir = tmp_path / "lam"
    assert main(["lambda", str(tmp_path / "target.toml"), "--out", str(out_dir), "--lmbds", "0.1,1,10",
                 "--tol", "1e-4"]) == 0
    rows = (out_dir / "lcurve.csv").read_text().strip().splitlines()
    assert len(rows) == 4  # header + 3 lambdas
    assert (out_dir / "lcurve.png").stat().st_size > 1000
    assert json.loads((out_dir / "lambda.json").read_text())["tol"] == 1e-4  # --tol as given
    # without --tol a target's looser [inversion] tol is tightened to LAMBDA_TOL (its L-curve's solver noise)
    assert load_config(tmp_path / "target.toml").inversion.tol > LAMBDA_TOL
    assert main(["lambda", str(tmp_path / "target.toml"), "--out", str(tmp_path / "tight"), "--lmbds", "1,10",
                 "--quiet"]) == 0
    assert json.loads((tmp_path / "tight" / "lambda.json").read_text())["tol"] == LAMBDA_TOL


@pytest.mark.slow
def test_invert_writes_uncertainty_maps(tmp_path, capsys):
    _dataset(tmp_path, n_epoch=8, n_cell=120, lightcurve=False, extra="")
    cfg_path = tmp_path / "target.toml"
    cfg_path.write_text(cfg_path.read_text() + '\n[uncertainty]\nmethods = ["sandwich"]\nn_boot = 3\n')
    out_dir = tmp_path / "res"
    # the CLI option overrides the TOML's methods
    assert main(["invert", str(cfg_path), "--out", str(out_dir), "--quiet",
                 "--uncertainty", "laplace", "--uncertainty", "bootstrap"]) == 0
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["complete"]
    for m in ("laplace", "bootstrap"):
        name = m  # the file names use the user's choice; the npz keeps the full method
        with np.load(out_dir / f"uncertainty_{name}.npz") as z:
            hidden, sig = z["never_visible"], z["sigma_fssc"]
            assert sig.shape == (120,) and np.all(np.isinf(sig[hidden])) and np.all(np.isfinite(sig[~hidden]))
        assert (out_dir / f"uncertainty_{name}_cool.png").stat().st_size > 0
        assert summary[f"sigma_fssc_median_{m}"] > 0
        assert f"uncertainty_{name}.npz" in summary["files"]
    # the Laplace step names its method and cost before it starts; its intervals stay in the bounds
    assert summary["uncertainty_plan_laplace"].startswith("dense (<= 2000 free parameters): ")
    assert "Hessian products" in summary["uncertainty_plan_laplace"] and "uncertainty_plan_bootstrap" not in summary
    with np.load(out_dir / "uncertainty_laplace.npz") as z:
        assert np.all(z["lower_fssc"] >= 0) and np.all(z["upper_fssc"] <= 1) and z["at_bound_fssh"].shape == (120,)
    assert not list(out_dir.glob("uncertainty_sandwich*"))
    bad = tmp_path / "bad.toml"
    bad.write_text(cfg_path.read_text().replace('methods = ["sandwich"]', 'methods = ["jackknife"]'))
    with pytest.raises(ValueError, match=r"\[uncertainty\] methods\[0\]"):
        load_config(bad)


def test_invert_with_the_device_solver(tmp_path, capsys):
    """[inversion] solver = "projected_lbfgs": the joint fit runs in one compiled loop."""
    _dataset(tmp_path)
    toml = tmp_path / "target.toml"
    toml.write_text(toml.read_text().replace("maxiter = 60", 'maxiter = 60\nsolver = "projected_lbfgs"'))
    out_dir = tmp_path / "res"
    rc = main(["invert", str(toml), "--out", str(out_dir), "--quiet", "--no-plots"])
    summary = json.loads((out_dir / "summary.json").read_text())
    assert rc == (0 if summary["success"] else 3)
    assert summary["solver"] == "projected_lbfgs" and summary["complete"]
    assert np.isfinite(summary["chi2_lc"]) and summary["chi2"] < 5.0


@pytest.mark.slow
def test_invert_default_solver_takes_newton_at_a_tight_tolerance(tmp_path, monkeypatch):
    """The TOML's default solver ("auto"): at --tol 1e-7 Newton once its program is compiled
    (in the persistent cache), L-BFGS-B on this small star while Newton's compile would be
    cold (its compile outweighs the solve), L-BFGS-B at the default 1e-5; an exact-rv model
    stays with L-BFGS-B (Newton cannot fit it)."""
    monkeypatch.setenv("DOPPLERMAP_CACHE_DIR", str(tmp_path / "cache"))  # a cold cache of its own
    _dataset(tmp_path, n_epoch=4, n_cell=80, lightcurve=False)
    toml = tmp_path / "target.toml"
    assert load_config(toml).inversion.solver == "auto"

    runs = iter(range(100))

    def solver(tol, *extra):
        out_dir = tmp_path / f"res-{next(runs)}"
        rc = main(["invert", str(toml), "--out", str(out_dir), "--quiet", "--no-plots", "--no-report", "--tol", tol,
                   *extra])
        summary = json.loads((out_dir / "summary.json").read_text())
        assert rc in (0, 3) and summary["complete"]
        return summary["solver"]

    assert solver("1e-7") == "lbfgsb"  # Newton's compile cold
    assert solver("1e-7", "--solver", "newton") == "newton"  # now in the cache
    assert solver("1e-7") == "newton"
    assert solver("1e-5") == "lbfgsb"
    toml.write_text(toml.read_text().replace("[inversion]", '[inversion]\nrv_shift = "exact"'))
    assert solver("1e-7", "--solver", "auto") == "lbfgsb"


def test_exact_rv_shift_reaches_the_model(tmp_path):
    _dataset(tmp_path, n_epoch=4, n_cell=80, lightcurve=False)
    cfg_path = tmp_path / "target.toml"
    cfg_path.write_text(cfg_path.read_text().replace("[inversion]", '[inversion]\nrv_shift = "exact"'))
    problem = from_config(load_config(cfg_path))
    assert problem.rv_shift == "exact" and problem.pre.line.exact_rv and problem.pre.line.kind == "binned"
    with pytest.raises(dm.DopplermapInputError, match="rv_shift='exact' needs method='binned'"):
        _ = problem.replace(method="dense").pre  # the synthesis form's own rule, one line


def test_the_cube_dtype_key_reaches_the_problem_and_its_plan(tmp_path):
    """``[inversion] cube_dtype`` is the problem's (decided once in its plan, shown in the summary)."""
    assert parse_config(_table(), source="t.toml").inversion.cube_dtype == "auto"
    _dataset(tmp_path, n_epoch=4, n_cell=100, lightcurve=False)
    cfg = load_config(tmp_path / "target.toml")
    cfg = dataclasses.replace(cfg, inversion=dataclasses.replace(cfg.inversion, method="dense", cube_dtype="float64"))
    prob = from_config(cfg)
    assert prob.cube_dtype == "float64" and prob.plan.cube_dtype == "float64"
    assert "float64 cube" in prob.plan.describe()


def test_grid_subdivide_reaches_the_model(tmp_path):
    """``[grid] subdivide``: the problem's cells integrated over sub-cells (its model the finer
    grid's), the light curve's as well."""
    _dataset(tmp_path, n_epoch=5, n_cell=120, lightcurve=False)
    cfg = load_config(tmp_path / "target.toml")
    sub = from_config(dataclasses.replace(cfg, grid=dataclasses.replace(cfg.grid, subdivide=2)))
    plain = from_config(cfg)
    assert sub.subdivide == 2 and sub.pre.n_cell == plain.pre.n_cell == 120
    z = np.zeros(120)
    e = np.zeros(5)
    a, b = (np.asarray(dm.model.forward(z, z, e, e, p.pre)) for p in (sub, plain))
    assert 1e-6 < np.max(np.abs(a - b)) < 0.05  # the same star, integrated more finely
    lc_root = tmp_path / "lc"
    lc_root.mkdir()
    _dataset(lc_root, n_epoch=5, n_cell=120, lightcurve=True)
    lc_cfg = load_config(lc_root / "target.toml")
    lc_sub = from_config(dataclasses.replace(lc_cfg, grid=dataclasses.replace(lc_cfg.grid, subdivide=2)))
    lc_plain = from_config(lc_cfg)
    a, b = (np.asarray(dm.lightcurve.lightcurve_model(jnp.asarray(z), jnp.asarray(z), p.lightcurve))
            for p in (lc_sub, lc_plain))
    assert a.shape == b.shape and 0 < np.max(np.abs(a - b)) < 1e-2
