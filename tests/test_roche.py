"""Distorted (Roche) surfaces and gravity darkening, against analytic limits and published formulae."""

import math

import numpy as np
import pytest

import dopplermap as dm
from dopplermap import gravity, roche
from dopplermap.constants import R_SUN_KM
from dopplermap.errors import DopplermapInputError
from dopplermap.geometry import cell_geometry
from dopplermap.grid import latitude_band_grid, with_surface
from dopplermap.lightcurve import LightCurveBand, simulate_lightcurve

GRID = latitude_band_grid(300)
POLE, SIDE = np.array([[0.0, 0.0, 1.0]]), np.array([[0.0, 1.0, 0.0]])


def test_sphere_is_the_zero_distortion_limit():
    """w = 0 gives the unit vectors, the cells' solid angles and the spherical geometry to round-off."""
    s = roche.rotating_surface(GRID, w=0.0)
    cl = np.cos(GRID.lat)
    unit = np.stack([cl * np.cos(GRID.lon), cl * np.sin(GRID.lon), np.sin(GRID.lat)], axis=1)
    np.testing.assert_allclose(s.position, unit, rtol=0, atol=1e-15)
    np.testing.assert_allclose(s.normal, unit, rtol=0, atol=1e-15)
    np.testing.assert_allclose(s.area, GRID.area, rtol=1e-15)
    np.testing.assert_allclose(s.gravity, 1.0, rtol=1e-15)
    times = np.linspace(0.0, 1.7, 9)
    a = cell_geometry((GRID.lat, GRID.lon, GRID.area), times, (55.0, 30.0, 1.3, 0.2), xp=np)
    b = cell_geometry((GRID.lat, GRID.lon, GRID.area), times, (55.0, 30.0, 1.3, 0.2), xp=np, surface=s)
    for k in ("mu", "v_los", "proj_area"):
        np.testing.assert_allclose(getattr(b, k), getattr(a, k), rtol=0, atol=1e-13 * (30.0 if k == "v_los" else 1.0))
    # the model built on it: the same weights and local lines, cell by cell
    star = dm.StarParams(inclination=55.0, vsini=30.0, period=1.3, t0=0.2)
    comps = dm.ComponentSet(*[dm.Component(dm.gaussian(0.5, 9.0), dm.LimbDarkening("linear", (0.6,)), i)
                              for i in (1.0, 0.3, 1.5)])
    vels = np.linspace(-45.0, 45.0, 20)
    pres = [dm.precompute(g, star, times, vels, comps, method="dense").line for g in (GRID, with_surface(GRID, s))]
    assert np.array_equal(np.asarray(pres[1].cell), np.asarray(pres[0].cell))
    for k in ("weight", "local"):
        np.testing.assert_allclose(np.asarray(getattr(pres[1], k)), np.asarray(getattr(pres[0], k)), rtol=0, atol=1e-13)


@pytest.mark.parametrize("fraction", [0.3, 0.9, 0.99])
def test_polar_to_equatorial_radius_of_a_rotating_star(fraction):
    """The surface's R_eq / R_p against the closed form of the Roche equator's cubic
    (3 cos((pi + arccos f) / 3) / f, f = omega / omega_crit), which is 1.5 at break-up."""
    w = 8.0 / 27.0 * fraction**2 * roche.polar_to_equatorial(fraction) ** 3
    assert roche.critical_omega_fraction(w) == pytest.approx(fraction, rel=1e-12)
    r_p = roche.surface_radius(POLE, 0.0, w, 1.0 + 0.5 * w)[0]
    r_eq = roche.surface_radius(SIDE, 0.0, w, 1.0 + 0.5 * w)[0]
    assert r_eq == pytest.approx(1.0, rel=1e-13)
    closed = 3.0 * math.cos((math.pi + math.acos(fraction)) / 3.0) / fraction
    assert r_eq / r_p == pytest.approx(closed, rel=1e-12)
    s = roche.rotating_surface(GRID, omega_fraction=fraction)
    assert s.radius.max() <= 1.0 + 1e-12 and s.radius.min() >= r_p - 1e-12
    assert roche.polar_to_equatorial(1.0) == pytest.approx(1.5, rel=1e-15)


@pytest.mark.parametrize("q_star", [0.1, 0.5, 1.0, 3.0, 10.0])
def test_roche_lobe_volume_radius_against_eggleton(q_star):
    """The lobe's volume-equivalent radius against Eggleton (1983), good to 1 % for every q;
    at q = 1 Eggleton quotes the exact value 0.3799."""
    q = 1.0 / q_star  # this module's q is the companion's mass over the star's
    nu = 1.0 + q
    x1 = roche.lagrange_l1(q, nu)
    r_l = roche.volume_radius(q, nu, float(roche.roche_potential(np.array([x1, 0.0, 0.0]), q, nu)))
    assert r_l == pytest.approx(roche.eggleton_radius(q_star), rel=0.01)
    if q_star == 1.0:
        assert x1 == pytest.approx(0.5, abs=1e-12) and r_l == pytest.approx(0.3799, abs=2e-4)


def test_tidal_surface_fills_the_asked_fraction_of_its_lobe():
    s = roche.tidal_surface(GRID, 1.0, 0.8)
    x1 = roche.lagrange_l1(1.0, 2.0)
    lobe = roche.volume_radius(1.0, 2.0, float(roche.roche_potential(np.array([x1, 0.0, 0.0]), 1.0, 2.0)))
    assert roche.volume_radius(1.0, 2.0, s.potential) == pytest.approx(0.8 * lobe, rel=1e-6)
    # elongated towards the companion (longitude 0), its side radius the reference
    sub = np.argmin(np.hypot(GRID.lat, np.angle(np.exp(1j * GRID.lon))))
    assert s.radius[sub] > 1.02 and s.radius.min() < 1.0
    assert s.gravity[sub] < 1.0  # the tide lowers gravity at the sub-companion point


def test_ellipsoidal_variation_against_morris_1985():
    """The light curve of a tidally distorted star (no spots, no gravity darkening) against
    Morris's (1985) semi-amplitude 0.15 (15 + u) / (3 - u) q (R / a)^3 sin^2 i, a first-order
    expansion in R / a: within 1 % at R / a = 0.11 (fill 0.3)."""
    grid = latitude_band_grid(1000)
    q, fill, u = 1.0, 0.3, 0.6
    s = roche.tidal_surface(grid, q, fill)
    x1 = roche.lagrange_l1(q, 1.0 + q)
    r_over_a = fill * roche.volume_radius(q, 1.0 + q, float(roche.roche_potential(np.array([x1, 0.0, 0.0]), q, 1.0 + q)))
    star = dm.StarParams(inclination=90.0, vsini=30.0, period=1.0)
    band = LightCurveBand(tuple(dm.LimbDarkening("linear", (u,)) for _ in range(3)), (1.0, 0.3, 1.5))
    phase = np.linspace(0.0, 1.0, 32, endpoint=False)
    zero = np.zeros(grid.n_cell)
    _, _, flux = simulate_lightcurve(with_surface(grid, s), star, phase, band, zero, zero)
    a2 = 2.0 * np.mean(flux * np.cos(4.0 * np.pi * phase)) / np.mean(flux)
    morris = 0.15 * (15.0 + u) / (3.0 - u) * q * r_over_a**3
    assert -a2 == pytest.approx(morris, rel=0.01)  # minima at conjunctions (phases 0 and 0.5)
    _, _, sphere = simulate_lightcurve(grid, star, phase, band, zero, zero)
    assert abs(2.0 * np.mean(sphere * np.cos(4.0 * np.pi * phase))) < 0.02 * morris


def test_elr_gravity_darkening_limits():
    """Espinosa Lara & Rieutord (2011): the flux over g tends to exp(2 omega^2 r_p^3 / 3) at
    the pole and to (1 - omega^2)^(-2/3) at the equator; beta -> 1/4 as omega -> 0."""
    w = 0.6
    r_p = 1.0 / (1.0 + 0.5 * w)
    assert gravity.elr_flux_ratio(2e-3, r_p, w) == pytest.approx(math.exp(2.0 * w * r_p**3 / 3.0), rel=1e-5)
    assert gravity.elr_flux_ratio(0.5 * np.pi - 2e-3, 1.0, w) == pytest.approx((1.0 - w) ** (-2.0 / 3.0), rel=1e-5)
    assert gravity.elr_flux_ratio(0.7, 0.9, 0.0) == pytest.approx(1.0, abs=1e-12)
    slow = with_surface(GRID, roche.rotating_surface(GRID, omega_fraction=0.05))
    t_elr = gravity.temperature_ratio(slow, law="elr")
    t_vz = gravity.temperature_ratio(slow, law="von_zeipel", beta=0.25)
    np.testing.assert_allclose(t_elr, t_vz, rtol=1e-5)
    fast = with_surface(GRID, roche.rotating_surface(GRID, omega_fraction=0.9))
    t_elr, t_vz = (gravity.temperature_ratio(fast, law=law) for law in ("elr", "von_zeipel"))
    # ELR darkens the equator less than beta = 1/4 (their Fig. 4); both 1 at the pole
    assert t_vz.min() < t_elr.min() < 1.0 and t_elr.max() == pytest.approx(1.0, abs=3e-3)


def test_bad_roche_input_is_one_clear_error():
    with pytest.raises(DopplermapInputError, match="fill must be in"):
        roche.tidal_surface(GRID, 1.0, 1.0)
    with pytest.raises(DopplermapInputError, match="must be in \\[0, 1\\)"):
        roche.rotating_surface(GRID, w=1.2)
    with pytest.raises(DopplermapInputError, match="domega must be 0"):
        cell_geometry((GRID.lat, GRID.lon, GRID.area), np.zeros(2), (60.0, 30.0, 1.0, 0.0, 0.1), xp=np, surface=roche.rotating_surface(GRID, w=0.3))
    tidal = with_surface(GRID, roche.tidal_surface(GRID, 0.5, 0.5))
    with pytest.raises(DopplermapInputError, match="single rotating stars"):
        gravity.temperature_ratio(tidal, law="elr")


def test_separation_gives_the_fill_of_the_surface_through_the_star_radius():
    """The fill from a radius over separation builds (by a root search on the volume radius)
    the equipotential through that radius: the same potential, the radius back to 1e-10."""
    rho = 0.3
    fill = roche.fill_from_separation(1.0, rho)
    s = roche.tidal_surface(GRID, 1.0, fill)
    want = float(roche.roche_potential(np.array([0.0, rho, 0.0]), 1.0, 2.0))
    assert s.potential == pytest.approx(want, rel=1e-12)
    assert roche.surface_radius(SIDE, 1.0, 2.0, s.potential)[0] == pytest.approx(rho, rel=1e-10)


def test_separation_of_a_small_star_against_eggleton():
    # a star far inside its lobe is a sphere: fill -> (R / a) / (R_L / a), Eggleton's R_L to 1 %
    for q in (0.5, 1.0, 2.0):
        got = roche.fill_from_separation(q, 0.01)
        assert got == pytest.approx(0.01 / roche.eggleton_radius(1.0 / q), rel=0.012)
    with pytest.raises(DopplermapInputError, match="overflow the lobe"):
        roche.fill_from_separation(1.0, 0.4)
    with pytest.raises(DopplermapInputError, match="needs a companion"):
        roche.fill_from_separation(0.0, 0.1)


def test_separation_in_the_configuration(tmp_path):
    import tomllib
    import warnings
    from types import SimpleNamespace

    from dopplermap.config import TEMPLATE, parse_config
    from dopplermap.errors import DopplermapWarning
    from dopplermap.problem import _fill_from_separation

    def cfg(**star):
        t = tomllib.loads(TEMPLATE)
        t["star"].update(star)
        return parse_config(t, source="t.toml")

    s = cfg(shape="roche", mass_ratio=1.0, separation=10.0, mass=1.0).star
    assert s.separation == 10.0 and s.roche_fill is None
    for bad, msg in ((dict(separation=10.0), "set shape = 'roche'"),
                     (dict(shape="roche", separation=10.0), "give mass_ratio > 0"),
                     (dict(shape="roche", mass_ratio=1.0, separation=10.0, roche_fill=0.5), "not both"),
                     (dict(shape="roche", mass_ratio=1.0, separation=-1.0), "separation must be > 0"),
                     (dict(shape="roche", mass_ratio=1.0), "or give separation")):
        with pytest.raises(DopplermapInputError, match=msg):
            cfg(**bad)
    # a 1 + 1 M_sun pair 10 R_sun apart orbits in 2.590 d (Kepler's third law)
    p_orb = 2.0 * math.pi * math.sqrt((10.0 * R_SUN_KM * 1e3) ** 3 / (6.6743e-11 * 2.0 * 1.98840987e30)) / 86400.0
    star = SimpleNamespace(radius_rsun=3.0, period=p_orb)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        fill = _fill_from_separation("t.toml", s, star)
    assert fill == roche.fill_from_separation(1.0, 0.3)
    with pytest.warns(DopplermapWarning, match="give an orbit of 2.59 d"):
        _fill_from_separation("t.toml", s, SimpleNamespace(radius_rsun=3.0, period=1.5))
    with pytest.raises(DopplermapInputError, match=r"t.toml: \[star\] separation = 10.0 R_sun: .*overflow"):
        _fill_from_separation("t.toml", s, SimpleNamespace(radius_rsun=4.0, period=p_orb))


def _brute_force_profiles(q, nu, potential, r_ref, times, vels, inclination, vsini, spot, n_t=90, n_p=180):
    """An independent disc integration: a fine colatitude-longitude mesh of the equipotential,
    each element's area and normal from the cross product of the surface's tangent vectors
    (finite differences), not from grad Omega; a sharp-edged cool spot (intensity 0.3)."""
    th = (np.arange(n_t) + 0.5) * np.pi / n_t
    ph = (np.arange(n_p) + 0.5) * 2.0 * np.pi / n_p
    tt, pp = np.meshgrid(th, ph, indexing="ij")

    def pos(t, p):
        d = np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], -1).reshape(-1, 3)
        return (roche.surface_radius(d, q, nu, potential)[:, None] * d).reshape((*t.shape, 3)) / r_ref

    h = 1e-5
    p = pos(tt, pp).reshape(-1, 3)
    da = np.cross((pos(tt + h, pp) - pos(tt - h, pp)) / (2 * h), (pos(tt, pp + h) - pos(tt, pp - h)) / (2 * h))
    da = da.reshape(-1, 3) * (np.pi / n_t) * (2.0 * np.pi / n_p)
    area = np.linalg.norm(da, axis=1)
    n = da / area[:, None]
    lat, lon = 0.5 * np.pi - tt.ravel(), pp.ravel()
    lat0, lon0, rad = spot
    in_spot = np.sin(lat) * np.sin(lat0) + np.cos(lat) * np.cos(lat0) * np.cos(lon - lon0) > np.cos(rad)
    inc = np.radians(inclination)
    out = []
    for t in times:
        ca, sa = np.cos(2.0 * np.pi * t), np.sin(2.0 * np.pi * t)  # period 1 d
        mu = np.sin(inc) * (n[:, 0] * ca - n[:, 1] * sa) + np.cos(inc) * n[:, 2]
        vis = mu > 0
        w = area[vis] * mu[vis] * (1.0 - 0.6 * (1.0 - mu[vis])) * np.where(in_spot[vis], 0.3, 1.0)
        v_los = vsini * (p[vis, 0] * sa + p[vis, 1] * ca)
        prof = w @ (1.0 - 0.5 * np.exp(-4.0 * np.log(2.0) * ((vels[None, :] - v_los[:, None]) / 9.0) ** 2))
        out.append(prof / prof.mean())
    return np.array(out)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rotating", "tidal"])
def test_a_spot_is_recovered_on_a_distorted_star(kind):
    """Profiles of a star at 90 % of break-up, and of a giant filling 80 % of its Roche lobe
    (q = 1), made by the brute-force integrator above: inverted on the Roche surface the fit
    reaches the noise and the spot is found where it is; the sphere finds it worse."""
    grid = latitude_band_grid(400)
    if kind == "rotating":
        surf = roche.rotating_surface(grid, omega_fraction=0.9)
        q, nu, pot, r_ref = 0.0, surf.nu, 1.0 + 0.5 * surf.nu, 1.0
    else:
        surf = roche.tidal_surface(grid, 1.0, 0.8)
        q, nu, pot = surf.q, surf.nu, surf.potential
        r_ref = float(roche.surface_radius(SIDE, q, nu, pot)[0])
    star = dm.StarParams(inclination=60.0, vsini=40.0, period=1.0)
    times, vels = np.linspace(0.0, 1.0, 12, endpoint=False), np.linspace(-70.0, 70.0, 36)
    spot = (np.radians(30.0), np.radians(90.0), np.radians(20.0))
    clean = _brute_force_profiles(q, nu, pot, r_ref, times, vels, 60.0, 40.0, spot)
    err = np.full_like(clean, 1e-3)
    obs = dm.Observations.create(times, vels, clean + np.random.default_rng(3).normal(size=clean.shape) * err, err)
    comps = dm.ComponentSet(*[dm.Component(dm.gaussian(0.5, 9.0), dm.LimbDarkening("linear", (0.6,)), x)
                              for x in (1.0, 0.3, 1.5)])
    cosd = np.sin(grid.lat) * np.sin(spot[0]) + np.cos(grid.lat) * np.cos(spot[0]) * np.cos(grid.lon - spot[1])
    truth, seen = (cosd > np.cos(spot[2])).astype(float), np.degrees(grid.lat) > -50.0
    out = {}
    for name, g in (("roche", with_surface(grid, surf)), ("sphere", grid)):
        res = dm.invert(dm.precompute(g, star, times, vels, comps, method="dense"), obs, lmbd=1.0, tol=1e-6,
                        fit_components=("cool",))
        fc = np.asarray(res.fssc)
        out[name] = (float(res.chi2), np.corrcoef(fc[seen], truth[seen])[0, 1])
    assert out["roche"][0] < 1.1
    assert out["roche"][1] > 0.85 and out["roche"][1] > out["sphere"][1] + 0.05


def test_a_rotating_surface_follows_the_star_in_a_problem():
    """Problem.replace(star=...) rebuilds a rotating star's shape (w follows period and radius)."""
    from dopplermap.gravity import roche_parameter, star_surface
    from dopplermap.problem import Problem

    star, grid, times, vels, comps = dm.demo_setup(n_cell=150, n_epoch=4, n_vel=20, seed=1)
    star = star.replace(vsini=None, radius=1.5, period=0.5)
    obs = dm.Observations.create(times, vels, np.ones((times.size, vels.size)), np.full((times.size, vels.size), 1e-3))
    prob = Problem(grid=with_surface(grid, star_surface(grid, star, mass=1.0)), star=star, obs=obs,
                   components=comps, mass=1.0)
    faster = prob.replace(star=star.replace(period=0.4))
    w_new = roche_parameter(1.0, 0.4, 1.5 * R_SUN_KM)
    assert faster.grid.surface.nu == pytest.approx(w_new, rel=1e-3) and prob.grid.surface.nu < w_new


@pytest.mark.slow  # healpy's import
def test_the_grid_kinds_carry_the_same_surface():
    """HEALPix and latitude-band cells on one Roche surface: the same total area and volume
    (each cell's area r^2 dOmega / (n . r_hat), its volume r^3 dOmega / 3) to the grids' resolution."""
    pytest.importorskip("healpy")
    from dopplermap.grid import healpix_grid

    totals = []
    for g in (healpix_grid(8), latitude_band_grid(768)):
        s = roche.rotating_surface(g, omega_fraction=0.9)
        totals.append((s.area.sum(), np.sum(g.area * s.radius**3) / 3.0))
    np.testing.assert_allclose(totals[0], totals[1], rtol=2e-3)
    w = 8.0 / 27.0 * 0.81 * roche.polar_to_equatorial(0.9) ** 3
    v = roche.volume_radius(0.0, w, 1.0 + 0.5 * w) ** 3 * 4.0 * np.pi / 3.0
    assert totals[0][1] == pytest.approx(v, rel=2e-3)


@pytest.mark.parametrize("law", ["von_zeipel", "elr"])
def test_gravity_darkening_on_the_surface_matches_the_spherical_grids_roche_model(law):
    """A spherical grid's darkening (gravity from the 1-D Roche model of mass, period and radius)
    and the same star's Roche surface (gravity from grad Omega at each cell) agree."""
    star = dm.StarParams(inclination=60.0, vsini=None, period=0.4, radius=1.6)
    w = gravity.roche_parameter(1.2, star.period, star.radius * R_SUN_KM)
    surf = with_surface(GRID, roche.rotating_surface(GRID, w=w))
    a = gravity.temperature_ratio(GRID, star, 1.2, beta=0.25, law=law)
    b = gravity.temperature_ratio(surf, beta=0.25, law=law)
    np.testing.assert_allclose(b, a, rtol=1e-9)
    assert a.min() < 0.97  # a real darkening at this rotation
