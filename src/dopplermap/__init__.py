"""dopplermap: stellar Doppler imaging on JAX.

One :class:`Problem` describes an inversion - surface grid, star, observations, local-line
components, synthesis method, light curve and solver :class:`Settings` - and builds what it
needs once; every analysis takes it::

    import dopplermap as dm
    problem = dm.demo_problem(settings=dm.Settings(lmbd=1.0))  # or dopplermap.problem.from_config
    res = dm.invert(problem)                                  # an InversionResult; res.outcome: an Outcome
    res2 = dm.invert(problem, lmbd=0.3, x0=res.x)             # another lambda: no recompilation

``__all__`` holds the names a user starts from. The building blocks stay importable from
their modules (:mod:`dopplermap.model` ``precompute``/``forward``, :mod:`dopplermap.simulate`
``demo_setup``/``DEMO_SPOTS``, :mod:`dopplermap.grid`, :mod:`dopplermap.profiles`, ...) and,
for scripts, by name from the root.

The public names are imported on first use (PEP 562 module ``__getattr__``), so
``import dopplermap`` and the CLI's ``--help`` do not load JAX, SciPy or astropy. The
numeric modules compute in float64: the first of them to be imported turns on
``jax_enable_x64`` for the process (:mod:`dopplermap._x64`); ``import dopplermap`` alone
does not.
"""

import importlib
import sys
import types

from ._version import __version__  # noqa: F401  (the package version, outside __all__ by convention)

# the errors a caller catches; DopplermapInputError and MissingFileError are DopplermapError's kinds
from .errors import DopplermapError, DopplermapInputError, DopplermapWarning, MissingFileError  # noqa: F401

# public name -> submodule that defines it (imported when the name is first used)
_LAZY = {
    **dict.fromkeys(("Problem", "Settings", "demo_problem"), "problem"),
    **dict.fromkeys(("InversionResult", "Outcome"), "result"),
    **dict.fromkeys(("invert", "invert_batch"), "solvers"),
    "load_result": "io.results",
    "save_result": "app",
    "StarParams": "geometry",
    **dict.fromkeys(("SurfaceGrid", "healpix_grid", "latitude_band_grid", "make_grid"), "grid"),
    **dict.fromkeys(("Precomputed", "forward", "precompute", "solve_form"), "model"),
    **dict.fromkeys(("Layout", "Observations"), "objective"),
    **dict.fromkeys(("Component", "ComponentSet", "LimbDarkening", "LocalProfile", "gaussian",
                     "intensity_ratio", "tabulated", "voigt"), "profiles"),
    **dict.fromkeys(("DEMO_SPOTS", "Simulation", "Spot", "demo_setup", "simulate", "spot_map"), "simulate"),
}

# submodules reachable as attributes (``dm.model``, ``dm.plot``) without an explicit import
_SUBMODULES = ("app", "broadening", "cache", "choices", "cli", "commands", "config", "constants", "errors",
               "geometry", "gravity", "grid", "io", "jointfit", "lightcurve", "model", "objective", "plot",
               "problem", "profiles", "progress", "regularisers", "result", "search", "simulate", "solvers",
               "uncertainty")

# what a user starts from (the module docstring); the rest is in its module
__all__ = [
    "Problem", "Settings", "demo_problem", "invert", "invert_batch", "InversionResult", "Outcome",
    "load_result", "save_result", "StarParams", "make_grid", "Observations", "Component", "ComponentSet",
    "LimbDarkening", "gaussian", "voigt", "simulate", "DopplermapError", "DopplermapWarning",
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
