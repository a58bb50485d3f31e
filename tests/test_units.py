"""Units at the Python API: astropy Quantities and Times are converted, plain numbers kept."""

from __future__ import annotations

import astropy.units as u
import numpy as np
import pytest
from astropy.time import Time, TimeDelta

import dopplermap as dm
from dopplermap.errors import DopplermapInputError
from dopplermap.geometry import rotation_phase

T0 = 2459500.0


def _components(fwhm, wavelength):
    ld = dm.LimbDarkening("linear", (0.65,))
    return dm.ComponentSet(
        phot=dm.Component(dm.gaussian(0.5, fwhm), ld, 1.0),
        cool=dm.Component(dm.voigt(0.6, fwhm, 0.3 * fwhm), ld, dm.intensity_ratio(3800.0, 5000.0, wavelength)),
        hot=dm.Component(dm.gaussian(0.42, fwhm), ld, dm.intensity_ratio(6000.0 * u.K, 5000.0 * u.K, wavelength)))


def test_quantities_give_the_same_model_as_plain_numbers():
    grid = dm.latitude_band_grid(200)
    times = T0 + np.linspace(0.0, 2.0, 6)
    vels = np.linspace(-60.0, 60.0, 24)
    spots = dm.DEMO_SPOTS[:2]
    plain = dm.simulate(grid, dm.StarParams(inclination=60.0, vsini=40.0, period=2.0, t0=T0, domega=0.02), times,
                        vels, _components(9.0, 600.0), spots, snr=300, seed=1)
    star_q = dm.StarParams(inclination=(np.pi / 3) * u.rad, vsini=40_000.0 * u.m / u.s, period=48.0 * u.h,
                           t0=Time(T0, format="jd", scale="tdb"), domega=0.02 * u.rad / u.day)
    quant = dm.simulate(grid, star_q, Time(times, format="jd", scale="tdb"), vels * 1000.0 * u.m / u.s,
                        _components(9000.0 * u.m / u.s, 6000.0 * u.AA), spots, snr=300, seed=1)
    np.testing.assert_allclose(quant.noiseless, plain.noiseless, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.asarray(quant.obs.vels), vels, rtol=1e-15)
    np.testing.assert_allclose(np.asarray(quant.obs.times), times, rtol=0, atol=1e-9)
    assert abs(plain.noiseless - plain.noiseless.mean()).max() > 1e-3  # the model is not trivially flat


def test_time_objects_give_the_same_phases_as_floats():
    bjd = T0 + np.array([0.1234567, 1.5, 3.75, 10.0])
    star_f = dm.StarParams(period=0.4232, t0=2456892.015)
    star_t = dm.StarParams(period=0.4232 * u.day, t0=Time(2456892.015, format="jd", scale="tdb"))
    obs_f = dm.Observations.create(bjd, np.linspace(-50, 50, 5), np.ones((4, 5)), np.full((4, 5), 0.01))
    obs_t = dm.Observations.create(Time(bjd, format="jd", scale="tdb"), np.linspace(-50, 50, 5) * u.km / u.s,
                                   np.ones((4, 5)), np.full((4, 5), 0.01))
    ph_f = rotation_phase(obs_f.times, star_f.t0, star_f.period)
    ph_t = rotation_phase(obs_t.times, star_t.t0, star_t.period)
    np.testing.assert_allclose(np.asarray(ph_t), np.asarray(ph_f), rtol=0, atol=1e-8)  # 1e-8 cycles = 0.4 ms
    # a Time in another scale is converted to TDB first (UTC: 69.184 s behind in 2021)
    obs_utc = dm.Observations.create(Time(bjd, format="jd", scale="utc"), np.linspace(-50, 50, 5), np.ones((4, 5)),
                                     np.full((4, 5), 0.01))
    np.testing.assert_allclose((np.asarray(obs_utc.times) - bjd) * 86400.0, 69.184, atol=2e-3)


def test_plain_numbers_keep_the_documented_units():
    s = dm.StarParams(inclination=60.0, vsini=40.0, period=2.0, t0=1.5, domega=0.02)
    assert (s.inclination, s.vsini, s.period, s.t0, s.domega) == (60.0, 40.0, 2.0, 1.5, 0.02)
    assert dm.gaussian(0.5, 9.0).fwhm == 9.0
    assert dm.intensity_ratio(3800.0, 5000.0, 600.0) == dm.intensity_ratio(3800 * u.K, 5000 * u.K, 0.6 * u.um)
    np.testing.assert_allclose(dm.profiles.planck(600.0 * u.nm, 5000.0), dm.profiles.planck(600.0, 5000.0), rtol=1e-15)
    # a frequency is a wavelength too (spectral equivalence), deg_C a temperature
    nu = (600.0 * u.nm).to(u.THz, equivalencies=u.spectral())
    assert dm.intensity_ratio(3800.0, 5000.0, nu) == pytest.approx(dm.intensity_ratio(3800.0, 5000.0, 600.0),
                                                                     rel=1e-12)
    assert dm.StarParams(radius=1.0 * u.R_sun, vsini=None).radius == pytest.approx(1.0)
    v = np.linspace(-20.0, 20.0, 9)
    np.testing.assert_allclose(dm.tabulated(v * 1e3 * u.m / u.s, 1 - 0.5 * np.exp(-v**2 / 50)).velocity, v, rtol=1e-15)
    ph = rotation_phase(Time(T0 + 1.0, format="jd", scale="tdb"), Time(T0, format="jd", scale="tdb"), 12 * u.h)
    assert float(ph) == pytest.approx(2.0, abs=1e-9)
    assert dm.StarParams(period=TimeDelta(1.5, format="jd")).period == pytest.approx(1.5)


@pytest.mark.parametrize("call,match", [
    (lambda: dm.StarParams(vsini=40 * u.nm), r"^vsini must be in units convertible to km/s, got a Quantity in nm$"),
    (lambda: dm.StarParams(inclination=60 * u.m), r"^inclination must be in units convertible to deg, got .* m$"),
    (lambda: dm.StarParams(period=2 * u.km), r"^period must be in units convertible to d, got a Quantity in km$"),
    (lambda: dm.StarParams(t0=TimeDelta(1.0, format="jd")), r"^t0 must be an epoch .* got a TimeDelta"),
    (lambda: dm.StarParams(vsini=Time(T0, format="jd")), r"^vsini must be a number or a Quantity in km/s, got an astropy Time"),
    (lambda: dm.gaussian(0.5, 9 * u.AA), r"^fwhm must be in units convertible to km/s, got a Quantity in Angstrom$"),
    (lambda: dm.intensity_ratio(3800.0, 5000.0, 600 * u.km / u.s), r"^wavelength_nm must be in units convertible to nm"),
    (lambda: dm.intensity_ratio(3800 * u.m, 5000.0, 600.0), r"^temperature must be in units convertible to K"),
    (lambda: dm.Observations.create([1.0, 2.0], np.linspace(-5, 5, 4) * u.K, np.ones((2, 4)), np.ones((2, 4)),
                                    source="obs.lsd"), r"^obs\.lsd: vels must be in units convertible to km/s, got .* K$"),
    (lambda: dm.Observations.create(np.array([1.0, 2.0]) * u.m, np.linspace(-5, 5, 4), np.ones((2, 4)),
                                    np.ones((2, 4))), r"^observations: times must be in units convertible to d"),
])
def test_incompatible_units_are_one_clear_error(call, match):
    with pytest.raises(DopplermapInputError, match=match):
        call()


def test_velocity_grid_in_m_s_given_as_numbers_is_refused():
    with pytest.raises(DopplermapInputError, match=r"^star\.lsd: vels span 120000 km/s, which only makes sense in m/s"):
        dm.Observations.create([1.0], np.linspace(-60e3, 60e3, 25), np.ones((1, 25)), np.ones((1, 25)),
                               source="star.lsd")
    obs = dm.Observations.create([1.0], np.linspace(-60e3, 60e3, 25) * u.m / u.s, np.ones((1, 25)), np.ones((1, 25)))
    assert float(obs.vels[-1]) == 60.0
