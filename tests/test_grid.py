import numpy as np
import pytest

import dopplermap as dm


@pytest.mark.parametrize("n", [100, 2500, 10007])
def test_band_grid_equal_areas_and_count(n):
    g = dm.latitude_band_grid(n)
    assert g.n_cell == n
    assert np.isclose(g.area.sum(), 4 * np.pi)
    # exact equal areas: each band's solid angle divided by its cell count
    lo, hi = g.lat_bounds[:, 0], g.lat_bounds[:, 1]
    dlon = g.lon_bounds[:, 1] - g.lon_bounds[:, 0]
    geometric = dlon * (np.sin(hi) - np.sin(lo))
    np.testing.assert_allclose(geometric, 4 * np.pi / n, rtol=1e-9)
    assert np.all(g.lat > lo) and np.all(g.lat < hi)
    assert np.all((g.lon >= 0) & (g.lon < 2 * np.pi))


def test_band_grid_cells_roughly_square_away_from_poles():
    g = dm.latitude_band_grid(2500)
    mid = np.abs(np.degrees(g.lat)) < 70
    height = g.lat_bounds[mid, 1] - g.lat_bounds[mid, 0]
    width = (g.lon_bounds[mid, 1] - g.lon_bounds[mid, 0]) * np.cos(g.lat[mid])
    assert np.all(np.abs(np.log(width / height)) < np.log(1.6))


def test_neighbours_symmetric_and_adjacent():
    g = dm.latitude_band_grid(800)
    nl = g.neighbour_lists()
    assert all(len(x) >= 3 for x in nl)
    for i, nbrs in enumerate(nl):
        for j in nbrs:
            assert i in nl[j]
    # neighbours are close on the sphere: at most ~2.5 cell sizes apart
    i, j = g.edges.T
    cosd = np.sin(g.lat[i]) * np.sin(g.lat[j]) + np.cos(g.lat[i]) * np.cos(g.lat[j]) * np.cos(g.lon[i] - g.lon[j])
    dist = np.arccos(np.clip(cosd, -1, 1))
    assert dist.max() < 2.5 * np.sqrt(4 * np.pi / g.n_cell)


def test_healpix_grid():
    pytest.importorskip("healpy")
    g = dm.healpix_grid(8)
    assert g.n_cell == 768 and np.isclose(g.area.sum(), 4 * np.pi)
    assert min(len(x) for x in g.neighbour_lists()) >= 7
    assert dm.make_grid("healpix", n_cell=3000).n_cell == 12 * 16**2


def test_bad_grid_arguments():
    with pytest.raises(ValueError, match="n_cell"):
        dm.latitude_band_grid(3)
    with pytest.raises(ValueError, match="nside"):
        dm.healpix_grid(6)
    with pytest.raises(ValueError, match="grid kind"):
        dm.make_grid("hexagons")
