"""Options objects given whole or as their fields: ``f(..., options=Opts(snr=50))`` or
``f(..., snr=50)``, one checked path for both (the documented loose keywords keep working)."""

from __future__ import annotations

import dataclasses

from .errors import DopplermapInputError


def options_of(where: str, cls, given, loose: dict, keyword: str = "options"):
    """The ``cls`` instance of a call ``where(..., keyword=cls(...))`` or of ``cls``'s fields
    given as loose keywords; an unknown keyword, both forms at once, or another type is one
    clear error naming ``where``."""
    fields = tuple(f.name for f in dataclasses.fields(cls))
    unknown = sorted(set(loose) - set(fields))
    if unknown:
        raise DopplermapInputError(f"{where}: unknown keyword(s) {', '.join(unknown)}; the options are "
                                   f"{', '.join(fields)} (or {keyword}={cls.__name__}(...))")
    if given is not None and loose:
        raise DopplermapInputError(f"{where}: give {keyword}={cls.__name__}(...) or the loose keywords "
                                   f"{', '.join(sorted(loose))}, not both")
    if given is not None and not isinstance(given, cls):
        raise DopplermapInputError(f"{where}: {keyword} takes {cls.__module__}.{cls.__name__}, got "
                                   f"{type(given).__name__}")
    return given if given is not None else cls(**loose)
