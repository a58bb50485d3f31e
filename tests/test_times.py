"""Times with a scale: declared scales to BJD_TDB (io/times.py), the result files' TIME keywords."""

from __future__ import annotations

import contextlib
import re
import warnings

import astropy.units as u
import numpy as np
import pytest
from astropy.constants import c as C_LIGHT
from astropy.coordinates import EarthLocation, SkyCoord, get_body_barycentric
from astropy.table import QTable
from astropy.time import Time

import dopplermap as dm
from dopplermap.errors import DopplermapInputError, DopplermapWarning
from dopplermap.io import results as rio
from dopplermap.io.times import check_time_overlap, epoch_times, parse_time_scale, to_internal
from dopplermap.result import InversionResult

LOPEG = (322.8500, 23.3356)  # LO Peg, ICRS deg (21h31m24s +23d20m08s)


@contextlib.contextmanager
def _strict():
    """Context in which any DopplermapWarning fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        yield


@pytest.mark.parametrize("name,frame,scale,offset", [
    ("BJD_TDB", "barycentric", "tdb", 0.0), ("bjd", "barycentric", "tdb", 0.0),
    ("BTJD", "barycentric", "tdb", 2457000.0), ("BKJD", "barycentric", "tdb", 2454833.0),
    ("BJD-2450000", "barycentric", "tdb", 2450000.0), ("BMJD", "barycentric", "tdb", 2400000.5),
    ("HJD", "heliocentric", "utc", 0.0), ("HJD_TT - 2400000", "heliocentric", "tt", 2400000.0),
    ("JD", "geocentric", "utc", 0.0), ("MJD", "geocentric", "utc", 2400000.5), ("BJD_UTC", "barycentric", "utc", 0.0),
])
def test_parse_time_scale(name, frame, scale, offset):
    ts = parse_time_scale(name)
    assert (ts.frame, ts.scale, ts.offset) == (frame, scale, offset)


@pytest.mark.parametrize("bad", ["GMT", "BJD_XYZ", "BJD+2450000", "BTJD-2457000", "", 2450000])
def test_unknown_time_scale_names_field_and_value(bad):
    with pytest.raises(DopplermapInputError, match=r"^t\.toml: \[data\] time_scale: .*" + re.escape(repr(bad))):
        parse_time_scale(bad, "t.toml: [data] time_scale")


def test_config_rejects_unknown_time_scale(tmp_path):
    from dopplermap.config import parse_config

    table = {"data": {"profiles": ["x"], "time_pattern": "(.*)", "time_scale": "TJD"},
             "star": {"inclination": 60.0, "period": 1.0, "vsini": 30.0},
             "temperatures": {"phot": 5000.0, "cool": 4000.0, "hot": 6000.0}, "line": {"wavelength_nm": 600.0}}
    with pytest.raises(DopplermapInputError, match=r"t\.toml: \[data\] time_scale: unknown time scale 'TJD'"):
        parse_config(table, source="t.toml")


def test_reduced_and_mission_forms_are_exact():
    bjd = 2459500.0 + np.array([0.123456789, 3.5, 27.25])
    with _strict():
        for name, off in (("BTJD", 2457000.0), ("BKJD", 2454833.0), ("BJD-2450000", 2450000.0),
                          ("BMJD", 2400000.5), ("BJD_TDB", 0.0)):
            np.testing.assert_allclose(to_internal(bjd - off, name), bjd, rtol=0, atol=1e-9)


def test_hjd_utc_gets_the_leap_seconds():
    # TDB - UTC = 32.184 s + 37 leap seconds (since 2017) + a periodic term < 1.7 ms
    t = np.array([2459500.5, 2460000.25])
    d = (to_internal(t, "HJD") - t) * 86400.0
    np.testing.assert_allclose(d, 69.184, atol=2e-3)
    d_tt = (to_internal(t, "HJD_TT") - t) * 86400.0
    np.testing.assert_allclose(d_tt, 0.0, atol=2e-3)


def _geo_to_helio_and_bary(t_geo):
    """HJD_TDB and BJD_TDB of geocentric TDB times, by astropy's light_travel_time."""
    c = SkyCoord(LOPEG[0] * u.deg, LOPEG[1] * u.deg)
    geo = EarthLocation.from_geocentric(0, 0, 0, unit="m")
    t = Time(t_geo, format="jd", scale="tdb", location=geo)
    return ((t + t.light_travel_time(c, "heliocentric")).jd, (t + t.light_travel_time(c, "barycentric")).jd)


@pytest.mark.parametrize("n", [3, 3000])  # directly, and through the interpolated light times
def test_hjd_and_jd_to_bjd_with_coordinates(n):
    t_geo = np.array([2456892.015, 2459500.2, 2460100.7]) if n == 3 else 2459500.2 + np.linspace(0, 60, n)
    hjd, bjd = _geo_to_helio_and_bary(t_geo)
    np.testing.assert_allclose(to_internal(hjd, "HJD_TDB", ra=LOPEG[0], dec=LOPEG[1]), bjd, rtol=0, atol=1e-3 / 86400)
    np.testing.assert_allclose(to_internal(t_geo, "JD_TDB", ra=LOPEG[0], dec=LOPEG[1]), bjd, rtol=0,
                               atol=1e-6 / 86400)
    assert np.all(np.abs(bjd - hjd) * 86400 < 8.3) and np.all(np.abs(bjd - t_geo) * 86400 < 8.5 * 60)
    assert np.any(np.abs(bjd - t_geo) * 86400 > 60)


def test_bjd_minus_hjd_is_the_sun_barycentre_light_time():
    """BJD - HJD = (r_sun,bary . n) / c: against the Sun's barycentric position."""
    t = np.array([2456892.015, 2459500.2, 2460100.7])
    bjd = to_internal(t, "HJD_TDB", ra=LOPEG[0], dec=LOPEG[1])
    n = SkyCoord(LOPEG[0] * u.deg, LOPEG[1] * u.deg).cartesian.xyz
    sun = get_body_barycentric("sun", Time(t, format="jd", scale="tdb")).xyz
    expect = np.einsum("i,ij->j", n.value, sun.to_value(u.m)) / C_LIGHT.value
    np.testing.assert_allclose((bjd - t) * 86400.0, expect, atol=1e-4)


def test_geocentric_without_coordinates_warns_with_the_size():
    with pytest.warns(DopplermapWarning, match=r"geocentric.*8\.5 min.*0\.014 of a rotation.*ra/dec"):
        out = to_internal(np.array([59500.0]), "MJD", period=0.4232, where="t.toml")
    np.testing.assert_allclose((out - 2459500.5) * 86400.0, 69.184, atol=2e-3)  # the scale is still converted


def test_times_before_1960_are_left_alone_with_a_warning():
    with pytest.warns(DopplermapWarning, match=r"before 1960.*'HJD-2450000'"):
        out = to_internal(np.array([0.5, 7.5]), "HJD")
    np.testing.assert_array_equal(out, [0.5, 7.5])


def test_full_jd_scale_with_reduced_values_warns():
    with pytest.warns(DopplermapWarning, match=r"9500\.1\.\.9510\.2 are declared BJD.*look like a reduced date"):
        to_internal(np.array([9500.1, 9510.2]), "BJD")
    with pytest.warns(DopplermapWarning, match=r"MJD-like"):
        to_internal(np.array([59500.1]), "BJD")
    with _strict():  # days from an arbitrary zero (simulations) and full dates are fine
        to_internal(np.array([0.0, 8.0]), "BJD_TDB")
        to_internal(np.array([2459500.1]), "BJD_TDB")


def test_epoch_times_converts_t0_in_its_own_scale():
    times, t0 = epoch_times(np.array([9500.25, 9501.5]), 2459500.0 - 2457000.0, time_scale="BJD-2450000",
                            t0_scale="BTJD")
    np.testing.assert_allclose(times, [2459500.25, 2459501.5], atol=1e-9)
    assert t0 == pytest.approx(2459500.0, abs=1e-9)


def test_overlap_check_reported_cases():
    prof = 2459500.0 + np.linspace(0, 10, 12)
    with pytest.warns(DopplermapWarning, match=r"lc\.csv: light curve 0\.0+\.\.27\.0+, profiles 2459500.* do not "
                                               r"overlap: gap 2\.45947e\+06 d"):
        check_time_overlap(prof, np.linspace(0, 27, 100), period=2.0, where="lc.csv")
    for off, name in ((2457000.0, "BTJD"), (2454833.0, "BKJD"), (2400000.5, "MJD"), (2450000.0, "JD-2450000")):
        with pytest.warns(DopplermapWarning, match=rf"about {off:.10g} d, the offset of .*{name}.*light curve times"):
            check_time_overlap(prof, prof[:5] - off + 3.0)
    with pytest.warns(DopplermapWarning, match=r"offset of TESS BTJD.*the profiles times look reduced"):
        check_time_overlap(prof - 2457000.0, np.linspace(2459495, 2459520, 50))
    with _strict():
        assert check_time_overlap(prof, np.linspace(2459490, 2459505, 300)) is None
        assert check_time_overlap(prof, prof[-1] + np.linspace(0.5, 20, 30)) is None  # adjacent, gap < 1 d


def _result_with_times(times, light_curve=None):
    grid = dm.latitude_band_grid(40)
    n_vel = 12
    rng = np.random.default_rng(1)
    vels = np.linspace(-50, 50, n_vel)
    obs = dm.Observations.create(times, vels, 1 + 0.01 * rng.standard_normal((times.size, n_vel)),
                                 np.full((times.size, n_vel), 0.01))
    star = dm.StarParams(inclination=45.0, vsini=67.7, period=0.4232, t0=2456892.015, domega=0.02)
    res = InversionResult(fssc=np.full(grid.n_cell, 0.1), fssh=np.full(grid.n_cell, 1e-5), rv=np.zeros(times.size),
                          amp=np.zeros(times.size), loss=1.0, chi2=1.0, regulariser_value=0.0, lmbd=1.0,
                          regulariser="mem", iterations=1, n_eval=1, success=True, stop_reason="test",
                          compile_time=0.0, solve_time=0.0)
    return rio.with_context(res, grid=grid, star=star, obs=obs, light_curve=light_curve, config={"command": "test"})


def test_result_fits_read_back_as_time(tmp_path):
    """profiles.fits TIME columns come back as barycentric TDB Time equal to the input to 1e-6 d."""
    btjd = np.array([-107.9, -105.2, -101.6])  # LO Peg Aug 2014 in BTJD
    times = to_internal(btjd, "BTJD")
    lt = to_internal(np.linspace(-108.0, -101.0, 30), "BTJD")
    lc = {"times": lt, "flux": np.ones(30), "err": np.full(30, 1e-3), "model": np.ones(30)}
    res = _result_with_times(times, lc)
    rio.save_result(res, tmp_path / "r")
    path = tmp_path / "r" / "profiles.fits"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # astropy must understand every time keyword
        prof = QTable.read(path, hdu="PROFILES", astropy_native=True)
        lct = QTable.read(path, hdu="LIGHTCURVE", astropy_native=True)
    for tab, want in ((prof, times), (lct, lt)):
        t = tab["TIME"]
        assert isinstance(t, Time) and t.scale == "tdb"
        np.testing.assert_allclose(t.jd, want, rtol=0, atol=1e-6)
        np.testing.assert_allclose(t.jd - 2457000.0, want - 2457000.0, atol=1e-6)
        cycle = (want - 2456892.015) / 0.4232
        np.testing.assert_allclose(np.asarray(tab["CYCLE"]), cycle, atol=1e-9)
        np.testing.assert_allclose(np.asarray(tab["PHASE"]), np.mod(cycle, 1.0), atol=1e-9)
    back = dm.load_result(tmp_path / "r")
    np.testing.assert_array_equal(np.asarray(back.obs.times), times)
