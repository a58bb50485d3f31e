"""Model-atmosphere limb darkening from the shipped table, against the published catalogue, offline."""

import socket
import tomllib
import warnings

import numpy as np
import pytest

from dopplermap import atmosphere
from dopplermap.config import TEMPLATE, parse_config
from dopplermap.errors import DopplermapInputError, DopplermapWarning
from dopplermap.limb_darkening import LimbDarkening
from dopplermap.profiles import planck

# rows of Claret & Southworth (2023), VizieR J/A+A/674/A63 table1.dat, read off the catalogue:
# (log g, Teff, g_Kepler, g_TESS, h_Kepler, h_TESS)
CATALOGUE = [(4.00, 3800.0, 0.80087162, 0.76420665, 0.71855180, 0.59523428),
             (4.50, 4900.0, 0.74658600, 0.68454137, 0.83506410, 0.73023499),
             (4.50, 5100.0, 0.73439161, 0.66826361, 0.81258763, 0.70959166),
             (4.50, 5800.0, 0.71389974, 0.63733991, 0.72633317, 0.64468186)]


@pytest.fixture
def no_network(monkeypatch):
    """Every socket refused: what a run with the network unplugged sees."""
    def refuse(*args, **kwargs):
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


@pytest.mark.parametrize("row", CATALOGUE, ids=[f"logg{r[0]}-T{r[1]:.0f}" for r in CATALOGUE])
def test_table_nodes_are_the_published_values(row, no_network):
    logg, teff, g_kep, g_tess, h_kep, h_tess = row
    atmosphere._load.cache_clear()  # read the file with the sockets off
    for band, g, h in (("Kepler", g_kep, h_kep), ("TESS", g_tess, h_tess)):
        ld = atmosphere.passband_limb_darkening(band, teff, logg)
        assert ld.law == "power2" and ld.coeffs == pytest.approx((g, h), abs=1e-12)
        # the law itself: I(mu)/I(1) = 1 - g (1 - mu^h)
        mu = np.array([0.1, 0.5, 1.0])
        np.testing.assert_allclose(ld(mu), 1.0 - g * (1.0 - mu**h), rtol=1e-14)


def test_interpolation_is_bilinear_between_nodes():
    # Teff 5000 K is a hole in the catalogue's grid: the value lies between 4900 and 5100 K
    mid = atmosphere.passband_limb_darkening("TESS", 5000.0, 4.5).coeffs
    a, b = CATALOGUE[1], CATALOGUE[2]
    assert mid == pytest.approx((0.5 * (a[3] + b[3]), 0.5 * (a[5] + b[5])), rel=1e-12)
    teff, logg = atmosphere.table_nodes()
    assert teff[0] == 2300.0 and teff[-1] == 12000.0 and logg[0] == 0.0 and logg[-1] == 6.0


def test_outside_the_table_is_one_clear_error():
    with pytest.raises(DopplermapInputError, match="teff = 1500.0 K is outside"):
        atmosphere.passband_limb_darkening("TESS", 1500.0, 4.5)
    with pytest.raises(DopplermapInputError, match="solar metallicity only"):
        atmosphere.passband_limb_darkening("TESS", 5000.0, 4.5, metallicity=-0.5)
    with pytest.raises(DopplermapInputError, match=r"passband \(of the limb-darkening table\) must be one of"):
        atmosphere.passband_limb_darkening("Bessell_V", 5000.0, 4.5)
    with pytest.raises(DopplermapInputError, match="exponent h > 0"):
        LimbDarkening("power2", (0.6, 0.0))


def _cfg(lightcurve=None, star=None):
    t = tomllib.loads(TEMPLATE)
    t["lightcurve"] = {"wavelength_nm": 550.0, "ld_phot": [0.70], "ld_cool": [0.80], "ld_hot": [0.65],
                       **(lightcurve or {})}  # a band alone (no light curve): what _band reads
    t["star"].update(star or {})
    return parse_config(t, source="t.toml")


def test_config_atmosphere_limb_darkening(no_network):
    from dopplermap.problem import _band

    cfg = _cfg({"limb_darkening": "atmosphere", "passband": "TESS"}, {"logg": 4.5})
    band = _band(cfg, cfg.lightcurve)
    want = [atmosphere.passband_limb_darkening("TESS", t, 4.5) for t in (5000.0, 3800.0, 6000.0)]
    assert band.limb_darkening == tuple(want)
    assert band.intensity == tuple(atmosphere.passband_planck_ratio(t, 5000.0, "TESS") for t in (5000.0, 3800.0, 6000.0))
    kepler = _cfg({"limb_darkening": "atmosphere", "passband": "Kepler"}, {"logg": 4.5})
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)  # every passband has its response: no fallback
        kband = _band(kepler, kepler.lightcurve)
    assert kband.intensity == tuple(atmosphere.passband_planck_ratio(t, 5000.0, "Kepler") for t in (5000.0, 3800.0, 6000.0))
    with pytest.raises(DopplermapInputError, match="give passband"):
        _cfg({"limb_darkening": "atmosphere"})
    with pytest.raises(DopplermapInputError, match=r"\[line\] limb_darkening = 'atmosphere'.*photometric passbands"):
        t = tomllib.loads(TEMPLATE)
        t["line"]["limb_darkening"] = "atmosphere"
        parse_config(t, source="t.toml")
    cfg = _cfg({"limb_darkening": "atmosphere", "passband": "TESS"})
    with pytest.raises(DopplermapInputError, match=r"needs the star's log g"):
        _band(cfg, cfg.lightcurve)


def test_passband_planck_ratio_is_the_response_weighted_integral(no_network):
    """Against a direct sum over the published response (photon-weighted), and the limits: 1 at
    the photosphere's temperature; between the Planck ratios at the band's edges."""
    atmosphere.passband_response.cache_clear()
    wl, resp = atmosphere.passband_response("TESS")
    assert wl[0] == 532.0 and wl[-1] == 1062.0 and resp.max() < 1.0 and np.all(resp >= 0)
    mid = 0.5 * (wl[1:] + wl[:-1])
    r_mid = 0.5 * (resp[1:] + resp[:-1])
    direct = [np.sum(r_mid * planck(mid, t) * mid) for t in (3800.0, 5000.0)]
    got = atmosphere.passband_planck_ratio(3800.0, 5000.0, "TESS")
    assert got == pytest.approx(direct[0] / direct[1], rel=2e-3)  # midpoint against trapezoid rule
    assert atmosphere.passband_planck_ratio(5000.0, 5000.0, "TESS") == 1.0
    edges = [planck(x, 3800.0) / planck(x, 5000.0) for x in (600.0, 1000.0)]
    assert edges[0] < got < edges[1]
    with pytest.raises(DopplermapInputError, match="passband must be one of"):
        atmosphere.passband_planck_ratio(3800.0, 5000.0, "Johnson_V")


# the published curves at a few wavelengths (nm), read off the sources named in
# tools/subset_responses.py: Kepler's high-resolution response, ESA's Gaia (E)DR3 passbands
PUBLISHED = {"Kepler": [(348.0, 0.000112), (600.0, 0.7135), (800.0, 0.4681), (970.0, 0.000121)],
             "Gaia_G": [(325.0, 0.000103648276), (600.0, 0.701281364)],
             "Gaia_BP": [(500.0, 0.631462795), (600.0, 0.627856079)],
             "Gaia_RP": [(700.0, 0.737591134), (800.0, 0.703762968)],
             "TESS": [(580.0, 0.491), (800.0, 0.777), (1060.0, 0.038)],
             # Bessell (1990) table 2
             "Bessell_U": [(370.0, 1.0), (400.0, 0.238)], "Bessell_B": [(440.0, 0.935)],
             "Bessell_V": [(530.0, 1.0), (600.0, 0.359)], "Bessell_R": [(600.0, 1.0)], "Bessell_I": [(800.0, 1.0)]}
# the bands' nominal extents (nm) as the missions describe them: TESS 600-1000 (Ricker et al.
# 2015), Kepler 423-897 (Koch et al. 2010), Gaia G 330-1050, BP 330-680, RP 630-1050
NOMINAL = {"TESS": (600, 1000), "Kepler": (423, 897), "Gaia_G": (330, 1050), "Gaia_BP": (330, 680),
           "Gaia_RP": (630, 1050), "Bessell_U": (300, 420), "Bessell_B": (360, 560), "Bessell_V": (470, 700),
           "Bessell_R": (550, 900), "Bessell_I": (700, 920)}


@pytest.mark.parametrize("band", sorted(NOMINAL))
def test_every_passband_has_its_published_response(band, no_network):
    from dopplermap.choices import PASSBANDS

    assert set(atmosphere.RESPONSES) == set(PASSBANDS) == set(atmosphere.RESPONSE_SOURCES)
    atmosphere.passband_response.cache_clear()
    wl, resp = atmosphere.passband_response(band)
    assert np.all(np.diff(wl) > 0) and np.all(resp >= 0)
    for x, want in PUBLISHED[band]:
        k = np.searchsorted(wl, x)
        assert wl[k] == x and resp[k] == want
    # the right curve under the right name: its peak and its mean wavelength inside the band
    lo, hi = NOMINAL[band]
    mean = np.trapezoid(resp * wl, wl) / np.trapezoid(resp, wl)
    assert lo < wl[np.argmax(resp)] < hi and lo < mean < hi


def test_bluer_bands_see_darker_spots(no_network):
    """A cool spot's blackbody contrast grows toward the red: BP < G < RP and Kepler < TESS."""
    c = {b: atmosphere.passband_planck_ratio(3800.0, 5000.0, b) for b in atmosphere.RESPONSES}
    assert c["Gaia_BP"] < c["Gaia_G"] < c["Gaia_RP"] and c["Kepler"] < c["TESS"]
    assert c["Bessell_U"] < c["Bessell_B"] < c["Bessell_V"] < c["Bessell_R"] < c["Bessell_I"]
    assert all(0.0 < v < 1.0 for v in c.values())


def test_the_numbers_used_are_kept_and_printed():
    from types import SimpleNamespace

    from dopplermap.app.target import band_line, band_values
    from dopplermap.grid import latitude_band_grid
    from dopplermap.problem import _band

    cfg = _cfg({"limb_darkening": "atmosphere", "passband": "TESS"}, {"logg": 4.5})
    band = _band(cfg, cfg.lightcurve)
    kept = band_values(cfg, (SimpleNamespace(name="lightcurve", band=band),), latitude_band_grid(100))
    (b,) = kept["lc_bands"]
    assert b["limb_darkening"]["cool"] == ["power2", *band.limb_darkening[1].coeffs]
    assert b["intensity"]["cool"] == band.intensity[1] and "Claret" in b["limb_darkening_source"]
    assert b["intensity_source"].startswith("Planck over the TESS response: TESS Science Office") and "shape" not in kept
    line = band_line(kept)
    assert line.startswith("bands: lightcurve: limb darkening phot power2(") and f"cool {band.intensity[1]:.4f}" in line


def test_gravity_darkening_in_a_passband_uses_its_response(no_network):
    """With a passband, the light curve's gravity-darkening factors are blackbody ratios over its
    response (as the spots' contrasts), not Planck at the band's wavelength_nm."""
    import dopplermap as dm
    from dopplermap.gravity import gravity_darkening_factors, temperature_ratio
    from dopplermap.grid import latitude_band_grid
    from dopplermap.lightcurve import LightCurveBand
    from dopplermap.problem import GravityDarkening, LightCurveData, Problem

    grid = latitude_band_grid(100)
    star = dm.StarParams(inclination=60.0, vsini=80.0, period=0.5)
    temps = (5000.0, 3800.0, 6000.0)
    times = np.linspace(0.0, 0.5, 12)
    band = LightCurveBand.from_temperatures(*temps, 550.0, [LimbDarkening("linear", (0.6,))] * 3)
    data = LightCurveData(times=times, flux=np.ones(12), err=np.full(12, 1e-3), band=band, passband="TESS")
    grav = GravityDarkening(mass=1.0, beta=0.25, temperatures=temps, line_wavelength_nm=550.0,
                            lc_wavelength_nm=550.0, lc_passband="TESS")
    prob = Problem(grid=grid, star=star, obs=None, components=None, gravity=grav, lightcurve_data=data)
    t = temperature_ratio(grid, star, 1.0, beta=0.25)
    assert t.min() < 0.985  # a fast rotator: the equator darker than the pole
    for k, temp in enumerate(temps):
        want = [atmosphere.passband_planck_ratio(temp * x, temp, "TESS") for x in t]
        np.testing.assert_allclose(prob.lc_factors[:, k], want, rtol=1e-12)
    np.testing.assert_allclose(prob._factors(None, data.passband), prob.lc_factors, rtol=0)
    # redder than 550 nm: the same temperature drop darkens the band less
    at_550 = gravity_darkening_factors(grid, star, 1.0, temps, 550.0, 0.25)
    assert np.all(prob.lc_factors[:, 0] >= at_550[:, 0]) and np.any(prob.lc_factors[:, 0] > at_550[:, 0] + 0.005)


def test_each_cell_can_have_its_own_limb_darkening():
    """Cell factors (n_cell, 3, 3) = (factor, g, h): each cell's power-2 law replaces the band's.
    Cells given law A weigh as the band with law A does, cells given law B as with law B."""
    import dopplermap as dm
    from dopplermap.grid import latitude_band_grid
    from dopplermap.lightcurve import LightCurveBand, _lc_weights

    grid = latitude_band_grid(120)
    star = dm.StarParams(inclination=60.0, vsini=30.0, period=1.0)
    times = np.linspace(0.0, 1.0, 9)
    a, b = (0.65, 0.7), (0.8, 0.45)
    band_a = LightCurveBand(tuple(LimbDarkening("power2", a) for _ in range(3)), (1.0, 0.3, 1.5))
    band_b = LightCurveBand(tuple(LimbDarkening("power2", b) for _ in range(3)), (1.0, 0.3, 1.5))
    fac = np.linspace(0.9, 1.0, grid.n_cell)[:, None] * np.ones(3)
    use_b = np.arange(grid.n_cell) % 3 == 0
    cells = np.empty((grid.n_cell, 3, 3))
    cells[..., 0] = fac
    cells[..., 1:] = np.where(use_b[:, None, None], b, a)
    got = _lc_weights(grid, star, times, band_a, cells)
    want_a = _lc_weights(grid, star, times, band_a, fac)
    want_b = _lc_weights(grid, star, times, band_b, fac)
    np.testing.assert_allclose(got[:, ~use_b], want_a[:, ~use_b], rtol=1e-14, atol=0)
    np.testing.assert_allclose(got[:, use_b], want_b[:, use_b], rtol=1e-14, atol=0)
    with pytest.raises(DopplermapInputError, match="3 x 3 columns"):
        _lc_weights(grid, star, times, band_a, np.ones((grid.n_cell, 3, 2)))


def test_gravity_darkened_cells_get_their_own_temperatures_limb_darkening(no_network):
    import dopplermap as dm
    from dopplermap.gravity import temperature_ratio
    from dopplermap.grid import latitude_band_grid
    from dopplermap.lightcurve import LightCurveBand
    from dopplermap.problem import GravityDarkening, LightCurveData, Problem

    grid = latitude_band_grid(100)
    star = dm.StarParams(inclination=60.0, vsini=80.0, period=0.5)
    temps = (5000.0, 3800.0, 6000.0)
    lds = [atmosphere.passband_limb_darkening("TESS", t, 4.4) for t in temps]
    band = LightCurveBand(tuple(lds), tuple(atmosphere.passband_planck_ratio(t, 5000.0, "TESS") for t in temps))
    data = LightCurveData(times=np.linspace(0.0, 0.5, 12), flux=np.ones(12), err=np.full(12, 1e-3), band=band,
                          passband="TESS", atmosphere_logg=4.4)
    grav = GravityDarkening(mass=1.0, beta=0.25, temperatures=temps, line_wavelength_nm=550.0,
                            lc_wavelength_nm=550.0, lc_passband="TESS")
    prob = Problem(grid=grid, star=star, obs=None, components=None, gravity=grav, lightcurve_data=data)
    cells = prob._cell_limb_darkening(prob.lc_factors, data)
    t = temperature_ratio(grid, star, 1.0, beta=0.25)
    np.testing.assert_array_equal(cells[..., 0], prob.lc_factors)
    for c in (0, grid.n_cell // 2, grid.n_cell - 1):
        for k, temp in enumerate(temps):
            want = atmosphere.passband_limb_darkening("TESS", temp * t[c], 4.4).coeffs
            assert tuple(cells[c, k, 1:]) == pytest.approx(want, rel=1e-14)
    # cooler equator: stronger darkening (larger g) than at the pole, whose law is the band's
    pole, equator = np.argmax(t), np.argmin(t)
    assert tuple(cells[pole, 0, 1:]) == pytest.approx(lds[0].coeffs, abs=2e-3)
    assert cells[equator, 0, 1] > cells[pole, 0, 1]
    # the problem's light-curve model is built with them
    from dopplermap.lightcurve import precompute_lightcurve

    lc = prob._lightcurve(data)
    want = precompute_lightcurve(grid, star, data.times, data.flux, data.err, band, cell_factors=cells)
    plain = precompute_lightcurve(grid, star, data.times, data.flux, data.err, band, cell_factors=prob.lc_factors)
    for name in ("base", "diff"):
        np.testing.assert_array_equal(np.asarray(getattr(lc, name)), np.asarray(getattr(want, name)))
    assert not np.allclose(np.asarray(lc.diff), np.asarray(plain.diff), rtol=1e-4, atol=0)


def test_energy_responses_are_photon_weighted_as_r_over_lambda(no_network):
    """Bessell's passbands are energy responses: the detector's photon count is int R B dlambda
    (Bessell & Murphy 2012), where the missions' photon-counting curves take int R B lambda dlambda."""
    assert atmosphere.ENERGY_RESPONSES == {f"Bessell_{b}" for b in "UBVRI"}
    wl, resp = atmosphere.passband_response("Bessell_V")
    direct = [np.trapezoid(resp * planck(wl, t), wl) for t in (3800.0, 5000.0)]
    assert atmosphere.passband_planck_ratio(3800.0, 5000.0, "Bessell_V") == pytest.approx(direct[0] / direct[1],
                                                                                          rel=1e-13)
    with pytest.raises(DopplermapInputError, match="'Bessell_V' has a response but no limb-darkening table"):
        _cfg({"limb_darkening": "atmosphere", "passband": "Bessell_V"}, {"logg": 4.5})
    cfg = _cfg({"passband": "Bessell_V"})  # a typed law: the band's contrasts from its response
    assert cfg.lightcurve.passband == "Bessell_V"
