"""The app layer: from a configuration to a problem, its solution and a result folder.

It sits above the analyses (search, uncertainty, calibrate, jointfit) and below the CLI,
whose commands parse their arguments and call one function here:

* :mod:`~dopplermap.app.folders`: result folders with their model context and figures
  (:func:`save_result`, :func:`with_context`, :func:`spotless_model`; what notebooks call);
* :mod:`~dopplermap.app.target` (``invert``), :mod:`~dopplermap.app.search` (``lambda``,
  ``grid``), :mod:`~dopplermap.app.demo`, :mod:`~dopplermap.app.seed` (``invert-seed``,
  ``convert``, ``simulate``), :mod:`~dopplermap.app.zdipy` (``import-zdipy``),
  :mod:`~dopplermap.app.review` (``plot``, ``report``): the pipelines;
* :mod:`~dopplermap.app.preflight`: what a command runs before a pipeline loads JAX;
  :mod:`~dopplermap.app.defaults`: the pipelines' defaults that ``--help`` shows.

The names above are imported on first use (PEP 562), as in :mod:`dopplermap`, so that
the commands can import this package while ``--help`` loads no JAX.
"""

import importlib

__all__ = ["spotless_model", "with_context", "save_result"]


def __getattr__(name: str):
    if name in __all__:
        value = getattr(importlib.import_module(".folders", __name__), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
