"""Legal values that are most likely a mistake (a unit, a sign, a time scale, a file listed
twice) get one DopplermapWarning naming the value and the likely mistake, from the layer
that first holds the value (so the Python API and the CLI see it alike); the correct
value gets none. The readers' checks of spectra and velocity grids are in test_lsd_io."""

import contextlib
import json
import math
import re
import warnings

import astropy.constants as const
import astropy.units as u
import numpy as np
import pytest

import dopplermap as dm
from dopplermap import diagnostics
from dopplermap.cli import main
from dopplermap.config import load_config
from dopplermap.errors import DopplermapWarning
from dopplermap.io.lightcurve import read_lightcurve, write_lightcurve
from dopplermap.io.lsd import load_observations, write_lsd
from dopplermap.io.times import to_internal
from dopplermap.lightcurve import LightCurveBand, precompute_lightcurve
from dopplermap.problem import from_config

LD = dm.LimbDarkening("linear", (0.6,))


@contextlib.contextmanager
def _none():
    """A block in which any DopplermapWarning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        yield


def _only(rec, text):
    """The messages of ``rec`` that contain ``text``."""
    return [str(w.message) for w in rec if issubclass(w.category, DopplermapWarning) and text in str(w.message)]


# ----------------------------------------------------------------- star: inclination, radius


def test_inclination_in_radians_warns():
    with pytest.warns(DopplermapWarning, match=r"inclination 0\.96 deg is almost pole-on .* in radians\? "
                                               r"\(0\.96 rad = 55\s?\.?\d* deg\)"):
        dm.StarParams(inclination=0.96, vsini=69.0, period=0.4232)
    with _none():
        dm.StarParams(inclination=55.0, vsini=69.0, period=0.4232)
        dm.StarParams(inclination=0.96 * u.rad, vsini=69.0, period=0.4232)  # a Quantity says what it is


def test_implied_radius_follows_astropy_and_warns_outside_the_stars():
    star = dm.StarParams(inclination=30.0, vsini=69.0, period=0.4232)
    r = (0.4232 * u.d * 69.0 * u.km / u.s / (2 * np.pi * np.sin(np.radians(30.0)))).to(u.R_sun)
    assert star.radius_rsun == pytest.approx(r.value, rel=1e-9)
    assert const.R_sun.to_value(u.km) == pytest.approx(695_700.0)  # the package's nominal radius is astropy's
    big = (400.0 * u.d * 69.0 * u.km / u.s / (2 * np.pi * np.sin(np.radians(60.0)))).to_value(u.R_sun)
    with pytest.warns(DopplermapWarning, match=rf"radius {big:.4g} R_sun \(implied by P vsini / \(2 pi sin i\) with "
                                               r"P = 400 d, vsini = 69 km/s, i = 60 deg\) is outside 0\.1-100 R_sun"):
        dm.StarParams(inclination=60.0, vsini=69.0, period=400.0)  # a period of 400 d with vsini 69 km/s
    with pytest.warns(DopplermapWarning, match=r"radius 0\.0\d+ R_sun \(implied .* P = 0\.04232 d"):
        dm.StarParams(inclination=60.0, vsini=69.0, period=0.04232)
    with pytest.warns(DopplermapWarning, match=r"radius 6\.957e\+05 R_sun \(given\) .* solar radii \(not km\)"):
        dm.StarParams(inclination=60.0, vsini=None, radius=695_700.0, period=2.0)
    with _none():
        dm.StarParams(inclination=60.0, vsini=69.0, period=0.4232)
        dm.StarParams(inclination=60.0, vsini=None, radius=1.2, period=2.0)


# ----------------------------------------------------------------- wavelength, spot contrast


def test_wavelength_in_angstrom_or_micrometres_warns():
    with pytest.warns(DopplermapWarning, match=r"6000 nm is outside the optical/infrared 100-3000 nm, but 6000 "
                                               r"Angstrom = 600 nm is inside: is it in Angstrom\?"):
        dm.intensity_ratio(3800.0, 5000.0, 6000.0)
    with pytest.warns(DopplermapWarning, match=r"0\.6 micrometres = 600 nm"):
        diagnostics.check_wavelength(0.6)
    with pytest.warns(DopplermapWarning, match=r"0\.6 micrometres"), \
            pytest.raises(dm.DopplermapInputError, match=r"Planck intensity ratio .* overflows at 0\.6 nm"):
        dm.intensity_ratio(3800.0, 5000.0, 0.6)  # (an X-ray wavelength: no finite ratio)
    with _none():
        for nm in (380.0, 600.0, 2200.0):  # near UV, optical, K band
            dm.intensity_ratio(3800.0, 5000.0, nm)
        dm.intensity_ratio(3800.0, 5000.0, 6000.0 * u.AA)  # a Quantity is converted
        dm.intensity_ratio(3800.0, 5000.0, 50_000.0)  # far from any range: no guess


def test_spot_hotter_than_the_photosphere_warns_once():
    profs = [dm.gaussian(0.5, 9.0)] * 3
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        dm.ComponentSet.from_temperatures(5000.0, 5500.0, 6000.0, 600.0, profs, [LD] * 3)
    got = _only(rec, "spot")
    assert len(got) == 1 and "temperatures (phot, cool, hot): the cool spot's 5500 K is not below the " \
                               "photosphere's 5000 K" in got[0]  # the temperatures, not the intensities again
    with pytest.warns(DopplermapWarning, match=r"cool spot's 5500 K is not below .* hot spot's 3800 K is not "
                                               r"above .* \(cool and hot swapped\?\)"):
        dm.ComponentSet.from_temperatures(5000.0, 5500.0, 3800.0, 600.0, profs, [LD] * 3)
    with pytest.warns(DopplermapWarning, match=r"line components: continuum intensities .* the hot spot's 1 is not "
                                               r"above the photosphere's 1"):
        dm.ComponentSet(*[dm.Component(p, LD, i) for p, i in zip(profs, (1.0, 0.3, 1.0), strict=True)])
    with pytest.warns(DopplermapWarning, match=r"light-curve band: continuum intensities .* cool spot's 1\.2 is not below"):
        LightCurveBand((LD,) * 3, (1.0, 1.2, 1.5))
    with pytest.warns(DopplermapWarning, match=r"light-curve band: temperatures .* hot spot's 4500 K is not above"):
        LightCurveBand.from_temperatures(5000.0, 3800.0, 4500.0, 550.0, [LD] * 3)
    with _none():
        dm.ComponentSet.from_temperatures(5000.0, 3800.0, 6000.0, 600.0, profs, [LD] * 3)
        dm.ComponentSet(*[dm.Component(p, LD, i) for p, i in zip(profs, (1.0, 0.3, 1.6), strict=True)])
        LightCurveBand((LD,) * 3, (1.0, 0.3, 1.5))
        LightCurveBand.from_temperatures(5000.0, 3800.0, 6000.0, 550.0, [LD] * 3)
        # a spot component that is not fitted has no filling factor: its value is never used
        diagnostics.check_spot_contrast((5000.0, 3800.0, 5000.0), fitted=("cool",))
    with pytest.warns(DopplermapWarning, match=r"cool spot's 5200 is not below"):
        diagnostics.check_spot_contrast((5000.0, 5200.0, 5000.0), fitted=("cool",))


def test_a_target_without_hot_spots_does_not_warn_about_their_temperature(tmp_path):
    """ZDIpy's one-brightness maps, imported: hot = phot with fit_components = ["cool"]."""
    path = _target(tmp_path, temperatures="hot = 5000.0")
    path.write_text(path.read_text() + '[inversion]\nfit_components = ["cool"]\n')
    with _none():
        from_config(load_config(path))


# ----------------------------------------------------------------- times


def test_epochs_far_from_t0_warn():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=120, n_epoch=8, n_vel=20, seed=2)
    bjd = np.asarray(times) + 2459000.0
    with pytest.warns(DopplermapWarning, match=r"line profiles: epochs lie up to 1\.23e\+06 rotations .* from "
                                               r"t0 = 0: is t0 in the epochs' time scale \(t0 = 0 with BJD epochs\?\)"):
        dm.precompute(grid, star, bjd, vels, comps)
    with pytest.warns(DopplermapWarning, match=r"lc: epochs lie up to 1\.23e\+06 rotations"):
        precompute_lightcurve(grid, star, bjd, np.ones(bjd.size), np.full(bjd.size, 1e-3),
                              LightCurveBand((LD,) * 3, (1.0, 0.3, 1.5)), source="lc")
    with _none():
        dm.precompute(grid, star.replace(t0=2459000.0), bjd, vels, comps)
        dm.precompute(grid, star, times, vels, comps)  # days from an arbitrary zero, t0 among them
        diagnostics.check_phase_span([0.0, 9.9e4], 0.0, 1.0)


@pytest.mark.parametrize("values,scale,match", [
    ([2459000.5, 2459001.5], "BTJD", r"2459000\.5\.\.2459001\.5 declared BTJD \(JD - 2457000\) would be JD 4916001\.5, "
                                     r"after the year 2132; they look like full Julian days: declare .*'BJD_TDB'"),
    ([2459000.5], "BKJD", r"declared BKJD \(JD - 2454833\) .* look like full Julian days"),
    ([2459000.5], "MJD", r"declared MJD \(JD - 2400000\.5\) .* look like full Julian days"),
    ([2459000.5], "BJD-2450000", r"look like full Julian days"),
    ([59000.5], "BTJD", r"would be JD 2516000\.5, after the year 2132; they look like MJD"),
    ([59000.5], "JD", r"59000\.5 declared JD lie before 1960.* They look like MJD \(JD - 2400000\.5\): declare 'MJD'"),
])
def test_times_that_contradict_their_scale_warn(values, scale, match):
    with pytest.warns(DopplermapWarning, match=match):
        to_internal(np.asarray(values), scale, where="times")


def test_times_that_fit_their_scale_do_not_warn():
    with _none():
        for values, scale in (([2000.5, 2001.5], "BTJD"), ([1500.2], "BKJD"), ([59000.5, 60000.5], "BMJD"),
                              ([9000.5], "BJD-2450000"), ([2459000.5], "BJD_TDB"), ([0.0, 8.0], "BJD_TDB")):
            to_internal(np.asarray(values), scale)


def test_full_bjd_light_curve_declared_btjd_warns(tmp_path):
    t = 2459000.0 + np.linspace(0.0, 2.0, 50)
    write_lightcurve(tmp_path / "lc.csv", t, 1.0 + 0.01 * np.sin(t), np.full(t.size, 1e-3))
    with pytest.warns(DopplermapWarning, match=r"lc\.csv: time: times .* declared BTJD .* look like full Julian days"):
        read_lightcurve(tmp_path / "lc.csv", time_scale="BTJD")
    with _none():
        read_lightcurve(tmp_path / "lc.csv", time_scale="BJD_TDB")


# ----------------------------------------------------------------- rows and files used twice


def test_repeated_light_curve_rows_warn_with_count_and_lines(tmp_path):
    rows = ["time,flux,err", "2459000.1,1.00,0.01", "2459000.2,1.01,0.01", "2459000.2,1.01,0.01",
            "2459000.3,0.99,0.01", "2459000.3,0.98,0.01", "2459000.4,1.00,0.01"]
    (tmp_path / "dup.csv").write_text("\n".join(rows) + "\n")
    with pytest.warns(DopplermapWarning, match=r"dup\.csv: 2 row\(s\) repeat the time of another row \(1 of them exact "
                                               r"copies\): lines 3 and 4 at 2459000\.2; lines 5 and 6 at 2459000\.3"):
        read_lightcurve(tmp_path / "dup.csv")
    (tmp_path / "ok.csv").write_text("\n".join(rows[:3] + rows[4:5] + rows[6:]) + "\n")
    with _none():
        read_lightcurve(tmp_path / "ok.csv")


def test_a_profile_file_listed_twice_warns(tmp_path):
    v = np.linspace(-60.0, 60.0, 25)
    for k in range(3):
        write_lsd(tmp_path / f"p{k}.lsd", v, 1 - 0.3 * np.exp(-((v - 5 * k) / 20) ** 2), np.full(v.size, 1e-3))
    files = [tmp_path / "p0.lsd", tmp_path / "p1.lsd", tmp_path / "sub" / ".." / "p0.lsd"]
    (tmp_path / "sub").mkdir()
    with pytest.warns(DopplermapWarning, match=r"1 profile file\(s\) listed more than once, each read as one more epoch "
                                               r"\(it weighs double\): p0\.lsd at positions 0, 2"):
        load_observations(files, times=[0.0, 1.0, 2.0])
    with _none():
        load_observations([tmp_path / f"p{k}.lsd" for k in range(3)], times=[0.0, 1.0, 2.0])


# ----------------------------------------------------------------- a target file


def _target(root, *, star="", temperatures="", line="", lines=None, lightcurves=None):
    """A small target (8 epochs, 20 velocities, BJD_TDB times, t0 near them); each keyword adds
    or replaces keys of its section (TOML text). ``lines``: the [[lines]] sets' file globs."""
    st, grid, times, vels, comps = dm.demo_setup(n_cell=120, n_epoch=8, n_vel=20, seed=3)
    sim = dm.simulate(grid, st, times, vels, comps, dm.DEMO_SPOTS, snr=300, seed=3)
    (root / "obs").mkdir()
    rows = []
    for k, t in enumerate(np.asarray(sim.obs.times)):
        write_lsd(root / "obs" / f"e{k}.lsd", sim.obs.vels, sim.obs.flux[k], sim.obs.err[k])
        rows.append(f"e{k}.lsd,{t + 2459000.0:.8f}")
    (root / "times.csv").write_text("file,bjd\n" + "\n".join(rows) + "\n")

    def section(name, base, extra):
        keys = dict(line.split(" = ", 1) for line in base.strip().splitlines())
        keys.update(dict(line.split(" = ", 1) for line in extra.strip().splitlines() if line))
        return f"[{name}]\n" + "\n".join(f"{k} = {v}" for k, v in keys.items()) + "\n"

    line_keys = "wavelength_nm = 600.0\ndepth = [0.5, 0.6, 0.42]\nfwhm = 9.0"
    text = section("star", "inclination = 60.0\nvsini = 40.0\nperiod = 2.0\nt0 = 2459000.0", star)
    text += section("temperatures", "phot = 5000.0\ncool = 3800.0\nhot = 6000.0", temperatures)
    text += "[grid]\nn_cell = 120\n"
    if lines is None:
        text += '[data]\nprofiles = ["obs/*.lsd"]\ntimes_table = "times.csv"\n'
        text += section("line", line_keys, line)
    else:
        for k, pats in enumerate(lines):
            text += f'[[lines]]\nname = "set{k}"\n[lines.data]\nprofiles = {json.dumps(pats)}\ntimes_table = "times.csv"\n'
            text += section("lines.line", line_keys, line)
    for k, f in enumerate(lightcurves or []):
        t = 2459000.0 + np.linspace(0.0, 4.0, 40)
        write_lightcurve(root / f, t, 1.0 + 0.01 * np.sin(t), np.full(t.size, 1e-3))
        text += f'[[lightcurves]]\nname = "band{k}"\nfile = "{f}"\n'
    (root / "target.toml").write_text(text)
    return root / "target.toml"


def _problem_warnings(path):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        from_config(load_config(path))
    return [str(w.message) for w in rec if issubclass(w.category, DopplermapWarning)]


def test_a_correct_target_raises_no_warning(tmp_path):
    assert _problem_warnings(_target(tmp_path)) == []


@pytest.mark.parametrize("kw,expect", [
    (dict(line="wavelength_nm = 6000.0"), r"target\.toml: \[line\] wavelength_nm: 6000 nm is outside .* is it in Angstrom\?"),
    (dict(temperatures="cool = 5500.0"), r"target\.toml: \[temperatures\] phot, cool, hot: the cool spot's 5500 K is not "
                                         r"below the photosphere's 5000 K"),
    (dict(line="intensity = [1.0, 1.2, 1.6]"), r"target\.toml: \[line\] intensity \(phot, cool, hot\): the cool spot's "
                                               r"1\.2 is not below the photosphere's 1"),
    (dict(star="inclination = 0.96"), r"star: inclination 0\.96 deg is almost pole-on .* in radians\?"),
    (dict(star="period = 400.0"), r"star: radius [\d.]+ R_sun \(implied by P vsini .* P = 400 d"),
])
def test_a_wrong_target_value_warns_once_naming_it(tmp_path, kw, expect):
    got = _problem_warnings(_target(tmp_path, **kw))
    assert len(got) == 1, got  # one warning: the objects built from the value do not repeat it
    assert re.search(expect, got[0]), got[0]


def test_files_in_two_line_sets_or_two_light_curve_tables_warn(tmp_path):
    path = _target(tmp_path, lines=[["obs/e[0-4].lsd"], ["obs/e[3-7].lsd"]], lightcurves=["a.csv", "a.csv"])
    got = _problem_warnings(path)
    assert any(m.startswith(f"{path}: 2 file(s) are read by more than one [[lines]] table") and
               "e3.lsd in 'set0', 'set1'; e4.lsd in 'set0', 'set1'" in m for m in got), got
    assert any("1 file(s) are read by more than one [[lightcurves]] table" in m and "a.csv in 'band0', 'band1'" in m
               for m in got), got
    (tmp_path / "b.csv").write_bytes((tmp_path / "a.csv").read_bytes())
    path.write_text(path.read_text().replace('"obs/e[3-7].lsd"', '"obs/e[5-7].lsd"')
                    .replace('name = "band1"\nfile = "a.csv"', 'name = "band1"\nfile = "b.csv"'))
    assert not [m for m in _problem_warnings(path) if "more than one" in m]


def test_a_file_matched_twice_in_one_list_is_refused(tmp_path):
    path = _target(tmp_path)
    path.write_text(path.read_text().replace('profiles = ["obs/*.lsd"]', 'profiles = ["obs/*.lsd", "obs/../obs/e0.lsd"]'))
    with pytest.raises(dm.DopplermapInputError, match=r"\[data\] profiles: 1 file\(s\) are matched more than once "
                                                      r"\(e\.g\. .*e0\.lsd\): list each file once"):
        from_config(load_config(path))


def test_t0_zero_with_bjd_epochs_warns(tmp_path):
    problem = from_config(load_config(_target(tmp_path, star="t0 = 0.0")))
    with pytest.warns(DopplermapWarning, match=r"epochs lie up to 1\.2\d+e\+06 rotations .* from t0 = 0"):
        problem.pre  # noqa: B018  (the synthesis form is built on first use)


@pytest.mark.slow
def test_the_run_summary_lists_the_sanity_warnings(tmp_path, capsys):
    path = _target(tmp_path, line="wavelength_nm = 6000.0", star="inclination = 1.2")
    assert main(["invert", str(path), "--out", str(tmp_path / "res"), "--quiet", "--no-plots", "--no-report",
                 "--maxiter", "3"]) in (0, 3)
    listed = json.loads((tmp_path / "res" / "summary.json").read_text())["warnings"]
    err = capsys.readouterr().err
    for text in ("[line] wavelength_nm: 6000 nm", "inclination 1.2 deg is almost pole-on"):
        assert sum(text in m for m in listed) == 1 and text in err


def test_the_checks_are_silent_on_values_they_cannot_judge():
    with _none():
        diagnostics.check_inclination(math.nan)
        diagnostics.check_radius(None)
        diagnostics.check_spot_contrast((1.0, 2.0))
        diagnostics.check_phase_span([], 0.0, 1.0)
