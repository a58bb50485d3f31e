"""Helpers shared by the benchmark scripts (run as ``python benchmarks/<script>.py``)."""

import json
import math
import os


def strict(obj):
    """``obj`` with every non-finite float as None: strict JSON (``json.dump`` would write
    ``Infinity``/``NaN``, which most parsers reject)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj


def write_json(path: str, obj) -> None:
    """Write ``obj`` as indented strict JSON (non-finite numbers as null) to ``path`` through a
    temporary file (no half-written results)."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(strict(obj), fh, indent=2, allow_nan=False)
    os.replace(tmp, path)
