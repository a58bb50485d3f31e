"""float64 for JAX: imported first by the numeric modules (geometry, profiles, _linops).

dopplermap's objective, gradients and reported losses are float64 (the folded cube may be
stored in float32, but it is accumulated in float64), so the numeric modules switch
``jax_enable_x64`` on for the process when the first of them is imported: a JAX program
that uses dopplermap computes in float64 from then on. ``import dopplermap`` and the CLI
up to its argument checks do not import these modules, so they leave JAX alone.
:func:`require_x64` is the check for code that runs later (a user may have switched x64
off again).
"""

import jax

from .errors import DopplermapError

jax.config.update("jax_enable_x64", True)


def require_x64() -> None:
    """Raise a clear error if ``jax_enable_x64`` was switched off after dopplermap enabled it."""
    if not jax.config.jax_enable_x64:
        raise DopplermapError("dopplermap needs float64 JAX, but jax_enable_x64 is off: remove "
                              "jax.config.update('jax_enable_x64', False) or set it back to True")
