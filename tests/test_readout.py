"""The profiled read-out's corrections: the effective number of fitted parameters and the
surface grid's discretisation error in chi2 units."""

from types import SimpleNamespace

import numpy as np
import pytest
from support.problems import small_problem

import dopplermap as dm
from dopplermap import search
from dopplermap.errors import DopplermapInputError


@pytest.fixture(scope="module")
def tiny():
    """A 60-cell star, 6 epochs x 24 velocities: more data points than parameters."""
    prob, _ = small_problem(n_cell=60, n_epoch=6, n_vel=24)
    return prob


def _at(prob, fill=0.2):
    """A map of ``fill`` everywhere (cool and hot), rv 0, amp 0: an interior point of the bounds."""
    n, e = prob.grid.n_cell, prob.obs.n_epoch
    return SimpleNamespace(fssc=np.full(n, fill), fssh=np.full(n, fill), rv=np.zeros(e), amp=np.zeros(e))


@pytest.mark.slow
def test_dof_of_the_nuisance_parameters_alone(tiny):
    """A prior that pins the map leaves rv and amp, each of full rank and without a prior:
    the hat matrix is then the projection onto their 2 per epoch (E with rv held)."""
    res, e = _at(tiny), tiny.obs.n_epoch
    pinned = tiny.replace(settings=tiny.settings.replace(lmbd=1e9))
    assert search.effective_dof(pinned, res) == pytest.approx(2 * e, abs=0.05)
    fixed_rv = pinned.replace(settings=pinned.settings.replace(fit_rv=False))
    assert search.effective_dof(fixed_rv, res) == pytest.approx(e, abs=0.05)


@pytest.mark.slow
def test_dof_falls_as_the_prior_grows(tiny):
    """A stronger prior pins more of the map: fewer effective parameters, never below 0."""
    res = _at(tiny)
    dofs = [search.effective_dof(tiny.replace(settings=tiny.settings.replace(lmbd=lm)), res)
            for lm in (1e-4, 0.01, 1.0, 100.0)]
    assert all(a > b for a, b in zip(dofs, dofs[1:], strict=False)) and dofs[-1] > 0
    # the floor: rv and amp carry no prior, so at least their 2 per epoch remain
    assert dofs[-1] >= 2 * tiny.obs.n_epoch - 1e-6


@pytest.mark.slow
def test_influence_traces_of_a_projection_and_of_a_shrinkage(tiny):
    """tr A'A = tr A where the hat matrix is a projection (the map pinned: rv and amp only);
    below it where the prior shrinks part of the fit (eigenvalues of A between 0 and 1)."""
    res, e = _at(tiny), tiny.obs.n_epoch
    pinned = search.influence(tiny.replace(settings=tiny.settings.replace(lmbd=1e9)), res)
    assert pinned.tr_a2 == pytest.approx(pinned.p_eff, abs=0.05) and pinned.p_eff == pytest.approx(2 * e, abs=0.05)
    low = tiny.replace(settings=tiny.settings.replace(lmbd=0.01))
    counts = search.influence(low, res)
    assert counts.p_eff == pytest.approx(search.effective_dof(low, res))
    assert 2 * e < counts.tr_a2 < counts.p_eff - 0.1
    assert counts.nu == pytest.approx(counts.n - 2 * counts.p_eff + counts.tr_a2)


def test_dof_refuses_what_it_cannot_count(tiny):
    prob = tiny.replace(settings=tiny.settings.replace(offset_sigma=0.01))
    assert "offset_sigma" in search.dof_refusal(prob)
    with pytest.raises(DopplermapInputError, match="offset_sigma"):
        search.effective_dof(prob, _at(tiny))
    assert search.dof_refusal(tiny) is None


@pytest.mark.slow
def test_evaluate_point_reads_chi2_plus_dof(tiny):
    row = search.evaluate_point(tiny.replace(settings=tiny.settings.replace(tol=1e-5)), {"inclination": 55.0},
                                dof=True)
    assert 0 < row["dof"] < 2 * tiny.grid.n_cell + 2 * tiny.obs.n_epoch
    assert row["chi2_dof"] == pytest.approx(row["chi2_total"] + row["dof"])
    plain = search.evaluate_point(tiny.replace(settings=tiny.settings.replace(tol=1e-5)), {"inclination": 55.0})
    assert np.isnan(plain["dof"]) and np.isnan(plain["chi2_dof"])


@pytest.mark.slow
def test_model_grid_error_falls_with_the_cells_and_scales_with_the_errors(tiny):
    """The discretisation error shrinks on finer grids; in chi2 units it goes as 1/err^2."""
    errs = [search.model_grid_error(tiny.replace(grid=dm.latitude_band_grid(n))) for n in (60, 240)]
    assert errs[0] > 4 * errs[1] > 0
    obs = tiny.obs
    doubled = tiny.replace(obs=dm.Observations.create(obs.times, obs.vels, obs.flux, 2 * np.asarray(obs.err)))
    assert search.model_grid_error(doubled) == pytest.approx(errs[0] / 4, rel=1e-9)
    # a steeper star (higher vsini at the point) on the same cells: a coarser sampling of its profile
    assert search.model_grid_error(tiny, {"vsini": 60.0}) > search.model_grid_error(tiny, {"vsini": 20.0})


def test_model_grid_error_is_none_where_it_is_not_estimated(tiny):
    assert search.model_grid_error(tiny.replace(form=tiny.pre, grid=None, star=None, components=None)) is None
