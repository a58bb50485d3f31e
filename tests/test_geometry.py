"""Pin the conventions of docs/conventions.md."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.geometry import cell_geometry


def _geo(lat_deg, lon_deg, phases, inc=60.0, vsini=40.0, period=2.0, t0=0.5, domega=0.0):
    times = t0 + np.asarray(phases) * period
    return cell_geometry((np.radians([lat_deg]), np.radians([lon_deg]), np.ones(1)), times, (inc, vsini, period, t0, domega))


def test_longitude_zero_faces_observer_at_phase_zero():
    phases = np.linspace(-0.5, 0.5, 101)
    g = _geo(0.0, 0.0, phases)
    mu = np.asarray(g.mu[:, 0])
    assert np.argmax(mu) == 50
    assert np.isclose(mu[50], np.sin(np.radians(60.0)))


def test_central_meridian_longitude_decreases_with_phase():
    # at phase 0.25 the cell at longitude 270 deg (= -90) is on the central meridian
    g = _geo(0.0, 270.0, [0.25])
    assert np.isclose(float(g.mu[0, 0]), np.sin(np.radians(60.0)))
    assert abs(float(g.v_los[0, 0])) < 1e-9


def test_spot_moves_blue_to_red_and_rv_sign():
    g = _geo(0.0, 0.0, [-0.1, 0.0, 0.1])
    v = np.asarray(g.v_los[:, 0])
    assert v[0] < 0 < v[2]  # approaching (blue) before meridian, receding (red) after
    assert abs(v[1]) < 1e-9
    # equator at the receding limb moves at +vsini
    limb = _geo(0.0, 0.0, [0.25], inc=90.0)
    assert np.isclose(float(limb.v_los[0, 0]), 40.0)


def test_visible_pole_and_hidden_pole():
    north = _geo(89.999, 0.0, np.linspace(0, 1, 9), inc=40.0)
    south = _geo(-89.999, 0.0, np.linspace(0, 1, 9), inc=40.0)
    assert np.all(np.asarray(north.visible)) and not np.any(np.asarray(south.visible))


def test_differential_rotation_high_latitudes_lag():
    # solar-like shear: after 5 days a cell at 60 deg has rotated less than one at the equator
    domega = 0.1  # rad/day
    g_eq = _geo(0.0, 0.0, [2.5], domega=domega, inc=90.0)
    g_hi = _geo(60.0, 0.0, [2.5], domega=domega, inc=90.0)
    lag = domega * np.sin(np.radians(60.0)) ** 2 * 5.0  # rad
    # at whole-phase 2.5 the equator cell is on the far side: alpha = pi; the 60-deg one is at pi - lag
    v_hi = float(g_hi.v_los[0, 0])
    assert v_hi > 0 and np.isclose(float(g_eq.v_los[0, 0]), 0.0, atol=1e-9)
    expected = 40.0 * (1 - domega * 0.75 / np.pi) * np.cos(np.radians(60.0)) * np.sin(np.pi - lag)
    assert np.isclose(v_hi, expected, rtol=1e-12)


def test_rotation_phase():
    assert np.allclose(np.asarray(dm.geometry.rotation_phase([1.0, 3.0], 1.0, 2.0)), [0.0, 1.0])


def test_vsini_from_radius():
    s = dm.StarParams(inclination=90.0, vsini=None, radius=1.0, period=25.38)
    assert np.isclose(s.vsini_kms, 2 * np.pi * 695700.0 / (25.38 * 86400.0))


@pytest.mark.parametrize("kw,match", [
    (dict(inclination=0.0), "inclination"), (dict(inclination=95.0), "inclination"),
    (dict(vsini=0.0), "vsini"), (dict(vsini=-3.0), "vsini"), (dict(period=0.0), "period"),
    (dict(vsini=None), "vsini"),
])
def test_bad_star_parameters(kw, match):
    with pytest.raises(ValueError, match=match):
        dm.StarParams(**kw)


def test_geometry_is_differentiable_in_star_parameters():
    import jax
    lat = np.radians(np.array([10.0, 40.0]))
    lon = np.radians(np.array([20.0, 200.0]))

    def f(inc):
        return jnp.sum(cell_geometry((lat, lon, np.ones(2)), np.array([0.1, 0.3]), (inc, 30.0, 1.0)).mu)

    g = jax.grad(f)(50.0)
    h = 1e-6
    assert np.isclose(g, (f(50.0 + h) - f(50.0 - h)) / (2 * h), rtol=1e-6)


def test_smooth_limb_weight_is_the_cell_average_of_max_mu_zero():
    from dopplermap.geometry import limb_half_width, limb_weight

    h = 0.05
    mu = np.linspace(-0.1, 0.1, 41)
    m = mu[:, None] + np.linspace(-h, h, 200001)[None, :]  # mu spread uniformly over the cell
    np.testing.assert_allclose(limb_weight(mu, h, xp=np), np.maximum(m, 0.0).mean(axis=1), atol=1e-6)
    far = np.array([-0.5, -h, h, 0.5])
    np.testing.assert_array_equal(limb_weight(far, h, xp=np), np.maximum(far, 0.0))
    # continuous first derivative across the band's edges: 0 below, 1 above
    g = jax.vmap(jax.grad(lambda x: limb_weight(x, h)))(jnp.array([-h - 1e-9, -h + 1e-9, h - 1e-9, h + 1e-9]))
    np.testing.assert_allclose(np.asarray(g), [0.0, 0.0, 1.0, 1.0], atol=1e-6)
    # h: half the side of a square cell of the same solid angle
    assert float(limb_half_width(4 * np.pi / 300, xp=np)) == pytest.approx(0.5 * np.sqrt(4 * np.pi / 300))


def test_smooth_limb_steadies_the_disc_flux_over_rotation():
    """A featureless star's continuum flux, sum of area * LD * projected area, is constant in
    phase; on a coarse grid the sharp limb makes it jump as cells cross, the smooth far less."""
    grid = dm.latitude_band_grid(300)
    t = np.linspace(0.0, 1.0, 200, endpoint=False)
    sd = {}
    for limb in ("sharp", "smooth"):
        geo = dm.geometry.cell_geometry((grid.lat, grid.lon, grid.area), t, (60.0, 30.0, 1.0), xp=np, limb=limb)
        flux = (geo.proj_area * (1 - 0.6 * (1 - geo.ld_mu))).sum(axis=1)
        sd[limb] = flux.std() / flux.mean()
        assert abs(flux.mean() / (np.pi * (1 - 0.6 / 3)) - 1) < 5e-3  # the disc integral, analytic
    assert sd["smooth"] < 0.2 * sd["sharp"]
    with pytest.raises(dm.DopplermapInputError, match="limb"):
        dm.geometry.cell_geometry((grid.lat, grid.lon, grid.area), t, (60.0, 30.0, 1.0), xp=np, limb="soft")
