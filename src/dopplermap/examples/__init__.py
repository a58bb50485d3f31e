"""Worked examples, shipped with the package so that they run from an installed copy.

Each module is a script: ``python -m dopplermap.examples.NAME --help``, or
``dopplermap example NAME DIR`` writes ``DIR/NAME.py`` to read, edit and run. This module is
JAX-free (the CLI lists the examples from it without importing them).
"""

from __future__ import annotations

from importlib import resources

# name -> (what it does, as `dopplermap example` lists it; the arguments of a first run)
EXAMPLES = {
    "observed_star": ("a folder of simulated observations (LSD files, epochs, light curve, local profiles, "
                      "target.toml) mapped end to end", "--out example-run"),
    "lopeg": ("LO Pegasi from ZDIpy's own LSD profiles and configuration (needs ZDIpy's LO Peg test data)",
              "--data ZDIPY_TEST_DATA --out lopeg-run"),
    "tess_lightcurve": ("a spot map (longitudes and contrasts) from a TESS light curve alone, with its uncertainty "
                        "maps (needs a light-curve file)", "--file LC_FILE --period DAYS --out tess-run"),
}


def source(name: str) -> str:
    """The text of example ``name`` (a key of :data:`EXAMPLES`)."""
    if name not in EXAMPLES:
        raise KeyError(name)
    return resources.files(__name__).joinpath(f"{name}.py").read_text(encoding="utf-8")
