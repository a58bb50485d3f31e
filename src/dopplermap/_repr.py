"""Short reprs of the package's objects: a notebook or a log prints a line, never an array dump.

:func:`compact` writes ``Name(key=value, ...)`` with arrays as their range and shape, nested
objects by their own (short) repr and the whole at most :data:`MAX_CHARS` characters.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["compact", "MAX_CHARS"]

MAX_CHARS = 300
_NESTED = 100  # a nested object's repr longer than this is shown by its type name
_TEXT = 60


def _value(v) -> str:
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        shape = tuple(int(n) for n in v.shape)
        if len(shape) == 1 and 0 < shape[0] and np.issubdtype(np.dtype(v.dtype), np.number):
            a = np.asarray(v)
            if shape[0] <= 3:
                return "[" + ", ".join(f"{x:.4g}" for x in a.tolist()) + "]"
            return f"[{np.nanmin(a):.4g}..{np.nanmax(a):.4g}] ({shape[0]})"
        return f"<{'x'.join(map(str, shape)) or 'scalar'} {np.dtype(v.dtype).name}>"
    if isinstance(v, str):
        return repr(v if len(v) <= _TEXT else v[:_TEXT - 3] + "...")
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (tuple, list)) and len(v) > 4:
        return f"<{len(v)} {type(v).__name__}>"
    if isinstance(v, dict) and len(repr(v)) > _NESTED:
        return f"<dict of {len(v)}>"
    r = repr(v)
    return r if len(r) <= _NESTED else f"{type(v).__name__}(...)"


def compact(obj, fields=None, **extra) -> str:
    """``Type(field=value, ...)`` of ``fields`` (default: every dataclass field) and ``extra``
    (name -> value, e.g. sizes), None values left out, at most :data:`MAX_CHARS` characters."""
    if fields is None:
        fields = [f.name for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) else []
    items = [(k, v) for k, v in extra.items() if v is not None]
    items += [(k, getattr(obj, k)) for k in fields if getattr(obj, k, None) is not None]
    name = type(obj).__name__
    parts, size = [], len(name) + 2
    for k, v in items:
        text = f"{k}={_value(v)}"
        if size + len(text) + 2 > MAX_CHARS - 5:
            parts.append("...")
            break
        parts.append(text)
        size += len(text) + 2
    return f"{name}({', '.join(parts)})"
