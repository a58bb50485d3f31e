import os
import shutil
import tempfile

# An xdist worker (pyproject's addopts run one per core) computes on one thread: the XLA and
# BLAS thread pools of several processes sharing the cores otherwise wait for each other and
# slow every small solve. Set before JAX or NumPy is imported.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["XLA_FLAGS"] = " ".join(filter(None, (
        os.environ.get("XLA_FLAGS"), "--xla_cpu_multi_thread_eigen=false", "intra_op_parallelism_threads=1")))
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import numpy as np
import pytest

import dopplermap as dm

# The CLI commands these tests run turn on the persistent compilation cache and the exported
# programs beside it (dopplermap.compiled). Some tests patch code that is traced, which the
# cache key cannot see: a session-own folder keeps such programs out of the user's cache.
_CACHE = tempfile.mkdtemp(prefix="dopplermap-test-cache-")
os.environ["DOPPLERMAP_CACHE_DIR"] = _CACHE


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_CACHE, ignore_errors=True)


def small_components():
    return dm.ComponentSet(
        phot=dm.Component(dm.gaussian(0.5, 9.0), dm.LimbDarkening("linear", (0.65,)), 1.0),
        cool=dm.Component(dm.gaussian(0.6, 9.0), dm.LimbDarkening("linear", (0.75,)), 0.3),
        hot=dm.Component(dm.gaussian(0.4, 9.0), dm.LimbDarkening("quadratic", (0.4, 0.2)), 1.6),
    )


@pytest.fixture(scope="session")
def small_problem():
    """A small spotted star: 600 cells, 24 epochs, 28 velocities, simulated with the exact model."""
    star = dm.StarParams(inclination=55.0, vsini=35.0, period=1.5)
    grid = dm.latitude_band_grid(600)
    times = np.linspace(0.0, 2 * 1.5, 24, endpoint=False) + 0.01
    vels = np.linspace(-55.0, 55.0, 28)
    comps = small_components()
    spots = (dm.Spot(35.0, 60.0, 25.0, "cool", 0.9), dm.Spot(10.0, 220.0, 22.0, "cool", 0.8),
             dm.Spot(50.0, 300.0, 20.0, "hot", 0.7))
    sim = dm.simulate(grid, star, times, vels, comps, spots, snr=800.0, seed=3)
    return star, grid, times, vels, comps, sim
