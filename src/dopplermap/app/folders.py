"""Result folders with their model context and figures: what the CLI and notebooks call.

:mod:`dopplermap.io.results` reads and writes the data only; this layer above it computes
what the files need from the model (the spotless profiles) and passes the figure writer
(:func:`dopplermap.plot.plot_result`) in.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import types
from pathlib import Path

import numpy as np

from ..atomic import work_folder
from ..compiled import call_cached
from ..figure_process import submit
from ..io import results as _files
from ..model import Precomputed, forward
from ..objective import LineSets, NoLines
from ..plot import plot_result
from ..report import write_report

__all__ = ["spotless_model", "with_context", "save_result"]


def spotless_model(pre: Precomputed, rv, amp) -> np.ndarray:
    """(n_epoch, n_vel) profiles of the unspotted star (all filling factors 0) with the given
    ``rv`` (n_epoch,) km/s and ``amp`` (n_epoch,) offsets; several line data sets
    (:class:`~dopplermap.objective.LineSets`): a tuple, one per set."""
    if isinstance(pre, LineSets):
        return tuple(spotless_model(p, np.asarray(rv)[sl], np.asarray(amp)[sl])
                     for p, sl in zip(pre.sets, pre.epoch_slices, strict=True))
    zero = np.zeros(pre.n_cell)
    return np.asarray(call_cached("forward", forward, zero, zero, np.asarray(rv, dtype=np.float64),
                                  np.asarray(amp, dtype=np.float64), pre))


def with_context(result, *, pre: Precomputed | None = None, **context):
    """:func:`dopplermap.io.results.with_context`, plus ``pre``: with it the spotless model
    (:func:`spotless_model` at the result's rv and amp) is added."""
    if pre is not None and not isinstance(pre, NoLines):  # light curves alone: no profiles
        context["spotless"] = spotless_model(pre, result.rv, result.amp)
    return _files.with_context(result, **context)


def figure_view(result):
    """``result`` with plain NumPy stand-ins for its star and observations, holding what
    :func:`dopplermap.plot.result_figures` reads: picklable to a figure process that has no JAX."""
    star, obs = result.star, result.obs
    if star is not None:
        star = types.SimpleNamespace(inclination=float(star.inclination), t0=float(star.t0), period=float(star.period),
                                     vsini_kms=None if star.vsini_kms is None else float(star.vsini_kms),
                                     name=getattr(star, "name", None))

    def plain(o):
        return types.SimpleNamespace(times=np.asarray(o.times), vels=np.asarray(o.vels), flux=np.asarray(o.flux),
                                     err=np.asarray(o.err), n_epoch=int(o.n_epoch), n_vel=int(o.n_vel))

    if obs is not None:  # several line data sets: a tuple, one per set
        obs = tuple(plain(o) for o in obs) if isinstance(obs, tuple) else plain(obs)
    model = result.model
    if model is not None:
        model = tuple(np.asarray(m) for m in model) if isinstance(model, tuple) else np.asarray(model)
    return dataclasses.replace(result, star=star, obs=obs, model=model)


def save_result(result, path, *, plots: bool = True, plot_kwargs: dict | None = None, report: bool = False,
                figure_process=None, **kwargs) -> dict:
    """Write a result folder (:func:`dopplermap.io.results.save_result`, which takes the other
    keyword arguments) with the figures of :func:`dopplermap.plot.plot_result` when ``plots``
    (``plot_kwargs`` are passed to it) and, with ``report``, ``report.html``
    (:func:`dopplermap.report.write_report`) written inside the same atomic folder; returns
    the summary dict written.

    With ``figure_process`` (a :class:`dopplermap.figure_process.FigureProcess`, started
    early) the figures are drawn there while this process writes the other files, into a
    staging folder next to ``path`` whose files then move into the result folder.
    """
    # the report is written inside the atomic folder, before its manifest: nothing to check yet
    finishers = (("report.html", functools.partial(write_report, check=False)),) if report else ()
    if not plots or figure_process is None:
        figures = functools.partial(plot_result, **(plot_kwargs or {})) if plots else None
        return _files.save_result(result, path, figures=figures, finishers=finishers, **kwargs)
    parent = Path(path).absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = work_folder(Path(parent) / Path(path).name, "figures")  # a killed run's is cleared by check_out
    collected = []
    try:
        finish = submit(figure_process, "dopplermap.plot:plot_result", figure_view(result), staging,
                        **(plot_kwargs or {}))

        def figures(_result, folder):
            for p in finish():
                os.replace(p, Path(folder) / p.name)
                collected.append(Path(folder) / p.name)
            return collected

        return _files.save_result(result, path, figures=figures, finishers=finishers, **kwargs)
    finally:
        if not collected:  # refused or failed before the figures: stop the child writing into staging
            figure_process.close()
        shutil.rmtree(staging, ignore_errors=True)
