"""The support refit (``grid --readout support``): the map refitted with only the support's cells free."""

import numpy as np
import pytest
from support.problems import small_problem

from dopplermap import search
from dopplermap.constants import FILL_MIN
from dopplermap.errors import DopplermapInputError


@pytest.fixture(scope="module")
def star():
    return small_problem(n_cell=192, n_epoch=12, n_vel=20, snr=2000.0, inclination=60.0)


def test_support_mask_threshold_and_growth(star):
    prob, sim = star
    grid = prob.grid
    plain = search.support_mask(grid, sim.fssc, 0.05, 0.0)
    assert np.array_equal(plain, sim.fssc > 0.05) and 0 < plain.sum() < grid.n_cell
    grown = search.support_mask(grid, sim.fssc, 0.05, 15.0)
    assert np.all(grown[plain]) and grown.sum() > plain.sum()
    # a grown cell lies within 15 deg of a cell above the threshold, and every cell that does is grown
    xyz = np.stack([np.cos(grid.lat) * np.cos(grid.lon), np.cos(grid.lat) * np.sin(grid.lon), np.sin(grid.lat)], 1)
    dist = np.degrees(np.arccos(np.clip(np.max(xyz @ xyz[plain].T, axis=1), -1.0, 1.0)))
    assert np.all(grown[dist < 15.0 - 1e-6]) and not np.any(grown[dist > 15.0 + 1e-6])
    with pytest.raises(DopplermapInputError, match="fill has shape"):
        search.support_mask(grid, sim.fssc[:-1])


def test_solve_on_support_holds_the_rest_and_recovers_the_inclination(star):
    """On data from the model itself, the refit over the true spots (grown by one cell) holds
    every other cell at the floor and puts the chi2 minimum at the true inclination."""
    prob, sim = star
    sc = search.support_mask(prob.grid, sim.fssc, 0.05, 10.0)
    sh = search.support_mask(prob.grid, sim.fssh, 0.05, 10.0)
    chi2 = {}
    for inc in (50.0, 60.0, 70.0):
        r = search.solve_on_support(prob, {"inclination": inc, "vsini": 40.0}, sc, sh)
        assert np.all(r.fssc[~sc] == FILL_MIN) and np.all(r.fssh[~sh] == FILL_MIN)
        assert r.fssc[sc].max() > 0.3 and r.lmbd == 0.0
        chi2[inc] = r.chi2 * prob.obs.n_epoch * prob.obs.n_vel
    assert min(chi2, key=chi2.get) == 60.0
    assert chi2[50.0] - chi2[60.0] > 4.0 and chi2[70.0] - chi2[60.0] > 4.0
    with pytest.raises(DopplermapInputError, match="shape"):
        search.solve_on_support(prob, {"inclination": 60.0}, sc[:-1], sh)


def test_solve_on_support_refuses_time_windows(star):
    """The refit fits one static map: a problem with time windows is one clear error, not a wrong fit."""
    from dopplermap.windows import Windows

    prob, sim = star
    windowed = prob.replace(windows=Windows.count(2, prob.obs.times))
    sc = search.support_mask(prob.grid, sim.fssc, 0.05, 0.0)
    with pytest.raises(DopplermapInputError, match="time windows"):
        search.solve_on_support(windowed, {"inclination": 60.0}, sc, sc)
