"""dopplermap: stellar Doppler imaging on JAX.

    import dopplermap as dm
    star, grid, times, vels, comps = dm.demo_setup()
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500)
    pre = dm.precompute(grid, star, times, vels, comps)
    res = dm.invert(pre, sim.obs, lmbd=1.0)
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from ._version import __version__  # noqa: E402
from .geometry import StarParams, cell_geometry, rotation_phase  # noqa: E402
from .grid import SurfaceGrid, healpix_grid, latitude_band_grid, make_grid  # noqa: E402
from .model import LineModel, Precomputed, fold_dense, forward, precompute, solve_form, synthesize  # noqa: E402
from .objective import Layout, Observations, chi2, loss, seed_entropy, tikhonov  # noqa: E402
from .profiles import (  # noqa: E402
    Component,
    ComponentSet,
    LimbDarkening,
    LocalProfile,
    gaussian,
    intensity_ratio,
    planck,
    tabulated,
    voigt,
)
from .simulate import DEMO_SPOTS, Simulation, Spot, demo_setup, simulate, spot_map  # noqa: E402
from .solvers import InversionResult, invert  # noqa: E402

__all__ = [
    "StarParams", "cell_geometry", "rotation_phase", "SurfaceGrid", "healpix_grid", "latitude_band_grid",
    "make_grid", "LineModel", "Precomputed", "forward", "precompute", "synthesize", "solve_form", "fold_dense", "Layout", "Observations",
    "chi2", "loss", "seed_entropy", "tikhonov", "Component", "ComponentSet", "LimbDarkening", "LocalProfile",
    "gaussian", "intensity_ratio", "planck", "tabulated", "voigt", "DEMO_SPOTS", "Simulation", "Spot",
    "demo_setup", "simulate", "spot_map", "InversionResult", "invert", "__version__",
]

from .io.results import load_result, save_result  # noqa: E402

__all__ += ["load_result", "save_result"]

from .cache import enable_compilation_cache  # noqa: E402
from .solvers.batch import invert_batch, invert_device  # noqa: E402

__all__ += ["enable_compilation_cache", "invert_batch", "invert_device"]

from .errors import DopplermapError, DopplermapInputError, DopplermapWarning, MissingFileError  # noqa: E402

__all__ += ["DopplermapError", "DopplermapInputError", "DopplermapWarning", "MissingFileError"]
