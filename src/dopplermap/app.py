"""Result folders with their model context and figures: what the CLI and notebooks call.

:mod:`dopplermap.io.results` reads and writes the data only; this layer above it computes
what the files need from the model (the spotless profiles) and passes the figure writer
(:func:`dopplermap.plot.plot_result`) in.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from .io import results as _files
from .model import Precomputed, forward_jit
from .objective import LineSets
from .plot import plot_result
from .report import write_report

__all__ = ["spotless_model", "with_context", "save_result"]


def spotless_model(pre: Precomputed, rv, amp) -> np.ndarray:
    """(n_epoch, n_vel) profiles of the unspotted star (all filling factors 0) with the given
    ``rv`` (n_epoch,) km/s and ``amp`` (n_epoch,) offsets; several line data sets
    (:class:`~dopplermap.objective.LineSets`): a tuple, one per set."""
    if isinstance(pre, LineSets):
        return tuple(spotless_model(p, np.asarray(rv)[sl], np.asarray(amp)[sl])
                     for p, sl in zip(pre.sets, pre.epoch_slices, strict=True))
    zero = jnp.zeros(pre.n_cell)
    return np.asarray(forward_jit(zero, zero, jnp.asarray(rv), jnp.asarray(amp), pre))


def with_context(result, *, pre: Precomputed | None = None, **context):
    """:func:`dopplermap.io.results.with_context`, plus ``pre``: with it the spotless model
    (:func:`spotless_model` at the result's rv and amp) is added."""
    if pre is not None:
        context["spotless"] = spotless_model(pre, result.rv, result.amp)
    return _files.with_context(result, **context)


def save_result(result, path, *, plots: bool = True, plot_kwargs: dict | None = None, report: bool = False,
                **kwargs) -> dict:
    """Write a result folder (:func:`dopplermap.io.results.save_result`, which takes the other
    keyword arguments) with the figures of :func:`dopplermap.plot.plot_result` when ``plots``
    (``plot_kwargs`` are passed to it) and, with ``report``, ``report.html``
    (:func:`dopplermap.report.write_report`) written inside the same atomic folder; returns
    the summary dict written."""
    figures = functools.partial(plot_result, **(plot_kwargs or {})) if plots else None
    finishers = (("report.html", write_report),) if report else ()
    return _files.save_result(result, path, figures=figures, finishers=finishers, **kwargs)
