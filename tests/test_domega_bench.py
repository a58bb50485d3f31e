"""The differential-rotation benchmark's disc integrator (benchmarks/bench_domega.py) against
dopplermap's model: two independent codes of the same integral, spots drifting with their
latitude's rate."""

import bench_calibration as B
import bench_domega as D
import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm


@pytest.fixture(scope="module")
def cells():
    grid = dm.latitude_band_grid(200)
    fc, fh = B.spot_fill(grid.lat, grid.lon, D.SPOTS)
    # epochs over 3 rotations: a shear of 0.3 rad/d moves the 65-deg spot by ~80 deg against the equator
    return grid, fc, fh, np.linspace(0.0, 6.0, 7), np.linspace(-60.0, 60.0, 40)


@pytest.mark.parametrize("domega", [0.0, 0.3])
def test_differential_rotation_integrator_equals_dense_model(cells, domega):
    grid, fc, fh, times, vels = cells
    star = dm.StarParams(inclination=60.0, vsini=40.0, period=2.0, t0=0.0, domega=domega)
    # the integrator weighs each cell by max(mu, 0): the same sum as the sharp limb
    pre = dm.precompute(grid, star, times, vels, B._components(), method="dense", limb="sharp")
    model = np.asarray(dm.forward(jnp.asarray(fc), jnp.asarray(fh), jnp.zeros(7), jnp.zeros(7), pre))
    bf = D.dr_profiles(np.asarray(grid.lat), np.asarray(grid.lon), np.asarray(grid.area), fc, fh, times, vels,
                       60.0, 40.0, 2.0, domega, np.zeros(7))
    assert np.abs(bf / bf.mean(axis=1, keepdims=True) - model).max() < 1e-9


def test_shear_changes_the_profiles_beyond_the_noise(cells):
    # the benchmark's signal: over 3 rotations a shear of 0.05 rad/d moves the profiles by
    # more than the S/N 300 noise (else no read-out could find it)
    grid, fc, fh, times, vels = cells
    lat, lon, area = np.asarray(grid.lat), np.asarray(grid.lon), np.asarray(grid.area)
    a, b = (D.dr_profiles(lat, lon, area, fc, fh, times, vels, 60.0, 40.0, 2.0, w, np.zeros(7)) for w in (0.0, 0.05))
    assert np.abs(a - b).max() > 3.0 / 300.0
    # at t0 only the slower high latitudes' velocities differ; the drift then grows with time
    assert np.abs(a[-1] - b[-1]).max() > 5 * np.abs(a[0] - b[0]).max()
