"""Set-up arrays onto the device without compiling anything.

``jnp.asarray(numpy_array)`` runs a small compiled conversion per new shape (about 10-25 ms
each on CPU, a few per data set); :func:`asarray` copies with ``jax.device_put`` instead.
"""

import mmap

import jax
import numpy as np

from . import _x64  # noqa: F401  (float64 arrays stay float64)

_ALIGN = 64  # bytes: the alignment JAX's CPU client needs to adopt a NumPy buffer
_MAP_MIN = 1 << 22  # bytes: from here on host_array maps its own pages


def host_array(shape, dtype=np.float64) -> np.ndarray:
    """An uninitialised NumPy array on a 64-byte boundary, for set-up arrays that go to the device.

    JAX's CPU client adopts such a buffer in :func:`asarray` without copying it (NumPy's own
    large arrays are only 16-byte aligned, and are copied), which for the seed's dense cube
    saves a copy of its size; on other devices it is copied as usual. Once handed to
    :func:`asarray` the array may share its memory with the device array: never write to it again.
    """
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n >= _MAP_MIN:
        # fresh pages of an anonymous mapping (page-aligned), without the huge-page advice NumPy
        # gives its own large buffers: their first writes can stall on memory compaction
        return np.frombuffer(mmap.mmap(-1, n), dtype).reshape(shape)
    raw = np.empty(n + _ALIGN, np.uint8)
    off = (-raw.ctypes.data) % _ALIGN
    return raw[off:off + n].view(dtype).reshape(shape)


def asarray(x, dtype=None):
    """``jnp.asarray(x, dtype)`` for set-up data: NumPy (or scalars) in, a device array out."""
    if isinstance(x, jax.Array) and (dtype is None or x.dtype == np.dtype(dtype)):
        return x
    return jax.device_put(np.asarray(x, dtype=dtype))
