import numpy as np
import pytest

import dopplermap as dm
from dopplermap.solvers import project_feasible
from dopplermap.solvers.scipy_lbfgsb import _CACHE


@pytest.fixture(scope="module")
def fitted(small_problem):
    star, grid, times, vels, comps, sim = small_problem
    pre = dm.precompute(grid, star, times, vels, comps)
    return pre, dm.invert(pre, sim.obs, lmbd=0.3, maxiter=400)


def test_recovers_spots_within_bounds(small_problem, fitted):
    star, grid, times, vels, comps, sim = small_problem
    pre, res = fitted
    assert res.success and res.iterations > 5
    assert res.chi2 < 1.5
    seen = np.degrees(grid.lat) > -star.inclination
    assert np.corrcoef(res.fssc[seen], sim.fssc[seen])[0, 1] > 0.7
    assert np.corrcoef(res.fssh[seen], sim.fssh[seen])[0, 1] > 0.5
    for f in (res.fssc, res.fssh):
        assert np.all(f >= 1e-5 - 1e-12) and np.all(f <= 1 - 1e-5 + 1e-12)
    assert np.all(res.fssc + res.fssh <= 1.0 + 1e-12)
    assert len(res.history["loss"]) == res.iterations
    assert np.all(np.diff(res.history["loss"]) <= 1e-12)
    assert res.model.shape == (len(times), len(vels))


def test_new_lambda_reuses_compiled_function(small_problem, fitted):
    *_, sim = small_problem
    pre, res = fitted
    n = len(_CACHE)
    res2 = dm.invert(pre, sim.obs, lmbd=3.0, maxiter=50)
    assert len(_CACHE) == n and res2.compile_time == 0.0
    # stronger regularisation: lower entropy term, higher chi2
    assert res2.regulariser_value < res.regulariser_value


def test_fixed_nuisances_stay_fixed(small_problem, fitted):
    *_, sim = small_problem
    pre, _ = fitted
    res = dm.invert(pre, sim.obs, lmbd=1.0, fit_rv=False, fit_amp=False, maxiter=20)
    assert np.all(res.rv == 0.0) and np.all(res.amp == 0.0)


def test_tikhonov_regulariser_runs(small_problem, fitted):
    *_, sim = small_problem
    pre, _ = fitted
    res = dm.invert(pre, sim.obs, lmbd=50.0, regulariser="tikhonov", maxiter=60)
    assert np.isfinite(res.loss) and res.regulariser == "tikhonov"


def test_project_feasible():
    fc, fh, ex = project_feasible(np.array([0.7, 0.2]), np.array([0.5, 0.1]))
    assert np.isclose(ex, 0.2) and np.allclose(fc + fh, [1.0, 0.3])


def test_invert_bad_arguments(small_problem, fitted):
    *_, sim = small_problem
    pre, _ = fitted
    with pytest.raises(ValueError, match="regulariser"):
        dm.invert(pre, sim.obs, regulariser="maxent")
    with pytest.raises(ValueError, match="lmbd"):
        dm.invert(pre, sim.obs, lmbd=-1.0)
    with pytest.raises(ValueError, match="x0 must have shape"):
        dm.invert(pre, sim.obs, x0=np.zeros(3))
    other = dm.Observations.create(sim.obs.times[:5], sim.obs.vels, sim.obs.flux[:5], sim.obs.err[:5])
    with pytest.raises(ValueError, match="epochs"):
        dm.invert(pre, other)
