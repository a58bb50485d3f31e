import numpy as np
import pytest

import dopplermap as dm


def test_gaussian_fwhm_and_depth():
    p = dm.gaussian(0.4, 10.0)
    assert np.isclose(p(0.0), 0.6)
    assert np.isclose(p(5.0), 1 - 0.2) and np.isclose(p(-5.0), 0.8)
    assert np.isclose(p.equivalent_width(), 0.4 * 10.0 * np.sqrt(np.pi / (4 * np.log(2))), rtol=1e-6)


def test_voigt_reduces_to_gaussian_and_has_wider_wings():
    v = np.linspace(-30, 30, 61)
    g = dm.gaussian(0.5, 8.0)
    np.testing.assert_allclose(dm.voigt(0.5, 8.0, 1e-9)(v), g(v), atol=1e-7)
    vo = dm.voigt(0.5, 8.0, 4.0)
    assert np.isclose(vo(0.0), 0.5)
    assert vo(20.0) < g(20.0)


def test_tabulated_resamples_smooth_profile():
    g = dm.gaussian(0.5, 8.0)
    vt = np.linspace(-25, 25, 101)
    t = dm.tabulated(vt, g(vt))
    v = np.linspace(-24, 24, 333)
    np.testing.assert_allclose(t(v), g(v), atol=2e-5)
    assert t(40.0) == 1.0


def test_bad_profiles():
    with pytest.raises(ValueError, match="depth"):
        dm.gaussian(1.2, 5.0)
    with pytest.raises(ValueError, match="fwhm"):
        dm.gaussian(0.5, 0.0)
    with pytest.raises(ValueError, match="increasing"):
        dm.tabulated([0, 2, 1, 3], [1, 0.5, 0.6, 1])
    with pytest.raises(ValueError, match="NaN"):
        dm.tabulated([0, 1, 2, 3], [1, np.nan, 0.6, 1])


@pytest.mark.parametrize("law,coeffs", [("linear", (0.6,)), ("quadratic", (0.4, 0.25)), ("sqrt", (0.2, 0.5))])
def test_limb_darkening_laws(law, coeffs):
    ld = dm.LimbDarkening(law, coeffs)
    mu = np.linspace(0.01, 1, 50)
    val = np.asarray(ld(mu))
    assert np.isclose(val[-1], 1.0)
    assert np.all(np.diff(val) > 0)  # darker towards the limb
    c = coeffs
    ref = {"linear": 1 - c[0] * (1 - mu), "quadratic": 1 - c[0] * (1 - mu) - c[-1] * (1 - mu) ** 2,
           "sqrt": 1 - c[0] * (1 - mu) - c[-1] * (1 - np.sqrt(mu))}[law]
    np.testing.assert_allclose(val, ref)


def test_bad_limb_darkening():
    with pytest.raises(ValueError, match="law"):
        dm.LimbDarkening("cubic", (0.1,))
    with pytest.raises(ValueError, match="coefficient"):
        dm.LimbDarkening("quadratic", (0.1,))


def test_planck_agrees_with_astropy():
    from astropy import units as u
    from astropy.modeling.models import BlackBody

    bb = BlackBody(temperature=4200 * u.K, scale=1.0 * u.W / (u.m**3 * u.sr))
    ours = dm.profiles.planck(550.0, 4200.0)
    theirs = bb(550 * u.nm).to(u.W / (u.m**3 * u.sr), equivalencies=u.spectral_density(550 * u.nm)).value
    assert np.isclose(ours, theirs, rtol=1e-6)
    r = dm.intensity_ratio(3800.0, 5000.0, 600.0)
    assert 0 < r < 1 and dm.intensity_ratio(6000.0, 5000.0, 600.0) > 1
    with pytest.raises(ValueError, match="temperature"):
        dm.intensity_ratio(-1.0, 5000.0, 600.0)


@pytest.mark.parametrize("sigma, gamma", [(3.0, 1.0), (2.0, 0.0), (1.5, 4.0), (8.0, 0.3), (0.5, 10.0), (4.0, 1e-6)])
def test_voigt_table_read_agrees_with_scipy(sigma, gamma):
    from scipy import special

    from dopplermap.profiles import VOIGT_TABLE_MIN, VOIGT_TABLE_TOL, voigt_profile

    rng = np.random.default_rng(int(10 * sigma + gamma))
    v = rng.uniform(-150.0, 150.0, (VOIGT_TABLE_MIN // 8 + 7, 89))  # a dense model's (cells, velocities) block
    v[0, :3] = [0.0, v.min() - 1.0, v.max() + 1.0]  # the peak and both ends of the table
    got, ref = voigt_profile(v, sigma, gamma), special.voigt_profile(v, sigma, gamma)
    assert got.shape == v.shape
    peak = special.voigt_profile(0.0, sigma, gamma)
    assert np.abs(got - ref).max() <= 2 * VOIGT_TABLE_TOL * peak
    assert np.abs(got - ref).max() > 0  # the table was read (the direct path is exact)


def test_voigt_small_or_odd_inputs_are_evaluated_directly():
    from scipy import special

    from dopplermap.profiles import VOIGT_TABLE_MIN, voigt_profile

    small = np.linspace(-40.0, 40.0, 101)
    np.testing.assert_array_equal(voigt_profile(small, 3.0, 1.0), special.voigt_profile(small, 3.0, 1.0))
    with_nan = np.linspace(-40.0, 40.0, VOIGT_TABLE_MIN + 1)
    with_nan[5] = np.nan
    got = voigt_profile(with_nan, 3.0, 1.0)
    np.testing.assert_array_equal(got, special.voigt_profile(with_nan, 3.0, 1.0))
    lorentz = np.linspace(-40.0, 40.0, VOIGT_TABLE_MIN + 1)  # sigma 0: no Gaussian part to tabulate
    np.testing.assert_array_equal(voigt_profile(lorentz, 0.0, 1.0), special.voigt_profile(lorentz, 0.0, 1.0))


def test_voigt_local_profile_reads_the_table_for_many_points():
    from dopplermap.profiles import VOIGT_TABLE_MIN

    prof = dm.voigt(0.5, 9.0, 3.0)
    v = np.linspace(-80.0, 80.0, VOIGT_TABLE_MIN + 3)
    ref = np.concatenate([prof(part) for part in np.array_split(v, 8)])  # each part below the threshold
    np.testing.assert_allclose(prof(v), ref, rtol=0, atol=1e-12)


def test_components_from_temperatures_need_one_profile_and_law_each():
    ld = dm.LimbDarkening("linear", (0.6,))
    prof = dm.gaussian(0.5, 9.0)
    comps = dm.ComponentSet.from_temperatures(5000.0, 4000.0, 6000.0, 600.0, [prof] * 3, [ld] * 3)
    assert comps.cool.intensity < 1.0 < comps.hot.intensity
    with pytest.raises(dm.DopplermapInputError, match="2 profiles and 3 laws"):
        dm.ComponentSet.from_temperatures(5000.0, 4000.0, 6000.0, 600.0, [prof] * 2, [ld] * 3)
