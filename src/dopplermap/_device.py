"""Set-up arrays onto the device without compiling anything.

``jnp.asarray(numpy_array)`` runs a small compiled conversion per new shape (about 10-25 ms
each on CPU, a few per data set); :func:`asarray` copies with ``jax.device_put`` instead.
"""

import jax
import numpy as np

from . import _x64  # noqa: F401  (float64 arrays stay float64)


def asarray(x, dtype=None):
    """``jnp.asarray(x, dtype)`` for set-up data: NumPy (or scalars) in, a device array out."""
    if isinstance(x, jax.Array) and (dtype is None or x.dtype == np.dtype(dtype)):
        return x
    return jax.device_put(np.asarray(x, dtype=dtype))
