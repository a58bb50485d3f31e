"""dopplermap: stellar Doppler imaging on JAX.

    import dopplermap as dm
    star, grid, times, vels, comps = dm.demo_setup()
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500)
    pre = dm.precompute(grid, star, times, vels, comps)
    res = dm.invert(pre, sim.obs, lmbd=1.0)

The public names are imported on first use (PEP 562 module ``__getattr__``), so
``import dopplermap`` and the CLI's ``--help`` do not load JAX, SciPy or astropy. The
numeric modules compute in float64: the first of them to be imported turns on
``jax_enable_x64`` for the process (:mod:`dopplermap._x64`); ``import dopplermap`` alone
does not.
"""

import importlib
import sys
import types

from ._version import __version__
from .errors import DopplermapError, DopplermapInputError, DopplermapWarning, MissingFileError

# public name -> submodule that defines it (imported when the name is first used)
_LAZY = {
    **dict.fromkeys(("StarParams", "cell_geometry", "rotation_phase"), "geometry"),
    **dict.fromkeys(("SurfaceGrid", "healpix_grid", "latitude_band_grid", "make_grid"), "grid"),
    **dict.fromkeys(("Precomputed", "fold_dense", "forward", "precompute", "solve_form",
                     "synthesize"), "model"),
    **dict.fromkeys(("Layout", "Observations", "chi2", "loss"), "objective"),
    **dict.fromkeys(("seed_entropy", "tikhonov"), "regularisers"),
    **dict.fromkeys(("Component", "ComponentSet", "LimbDarkening", "LocalProfile", "gaussian",
                     "intensity_ratio", "planck", "tabulated", "voigt"), "profiles"),
    **dict.fromkeys(("DEMO_SPOTS", "Simulation", "Spot", "demo_setup", "simulate", "spot_map"), "simulate"),
    "InversionResult": "result",
    **dict.fromkeys(("invert", "invert_batch", "invert_device"), "solvers"),
    "load_result": "io.results",
    "save_result": "app",
    "enable_compilation_cache": "cache",
}

# submodules reachable as attributes (``dm.model``, ``dm.plot``) without an explicit import
_SUBMODULES = ("app", "broadening", "cache", "choices", "cli", "commands", "config", "constants", "errors", "geometry",
               "gravity", "grid", "io", "jointfit", "lightcurve", "model", "objective", "plot", "profiles", "progress",
               "regularisers", "result", "search", "simulate", "solvers", "uncertainty")

__all__ = [
    "StarParams", "cell_geometry", "rotation_phase", "SurfaceGrid", "healpix_grid", "latitude_band_grid",
    "make_grid", "Precomputed", "forward", "precompute", "synthesize", "solve_form", "fold_dense", "Layout", "Observations",
    "chi2", "loss", "seed_entropy", "tikhonov", "Component", "ComponentSet", "LimbDarkening", "LocalProfile",
    "gaussian", "intensity_ratio", "planck", "tabulated", "voigt", "DEMO_SPOTS", "Simulation", "Spot",
    "demo_setup", "simulate", "spot_map", "InversionResult", "invert", "__version__",
    "load_result", "save_result", "enable_compilation_cache", "invert_batch", "invert_device",
    "DopplermapError", "DopplermapInputError", "DopplermapWarning", "MissingFileError",
]


# ``simulate`` names both a submodule and its function: the function wins (as with the
# eager imports before), so importing the submodule must not rebind the package attribute
_SHADOWED = frozenset(_LAZY) & frozenset(_SUBMODULES)


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            return  # the import system binding the submodule; __getattr__ answers the function
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
