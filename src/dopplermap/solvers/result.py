"""The result type, re-exported where the solvers return it (defined in :mod:`dopplermap.result`)."""

from ..result import InversionResult, relative_brightness

__all__ = ["InversionResult", "relative_brightness"]
