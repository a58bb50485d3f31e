"""Helpers shared by the benchmark scripts (run as ``python benchmarks/<script>.py``)."""

import json
import os


def write_json(path: str, obj) -> None:
    """Write ``obj`` as indented JSON to ``path`` through a temporary file (no half-written results)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=2)
    os.replace(tmp, path)
