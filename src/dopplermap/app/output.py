"""A pipeline's output options: one keyword-only object instead of five loose keywords.

Light (no JAX, no matplotlib), so a command can build it before the pipeline loads.
"""

from __future__ import annotations

import dataclasses

from .._options import options_of

__all__ = ["Output", "Scheduling", "output_options"]


@dataclasses.dataclass(frozen=True)
class Output:
    """How a pipeline (:func:`dopplermap.app.target.run_target`, ``run_demo``,
    ``run_invert_seed``) writes its result folder and talks while it runs.

    Attributes:
        plots: draw the figures. quiet: no progress on stderr. report: write ``report.html``.
        overwrite: replace a result folder this package wrote before (never another file).
        figure_process: a started :class:`~dopplermap.figure_process.FigureProcess` that draws
            the figures (the CLI starts it before the pipeline's imports); None: one started
            by the pipeline when it draws.
    """

    plots: bool = True
    quiet: bool = True
    report: bool = True
    overwrite: bool = True
    figure_process: object = None

    def replace(self, **changes) -> Output:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class Scheduling:
    """Where a pipeline's independent solves run (the bootstrap's refits, a lambda sweep's or a
    grid's points).

    Attributes:
        scheduler: None or ``"sync"``: in this process;
            ``"local"``: a local Dask cluster of ``workers`` processes (default one per CPU);
            else the address of a running Dask scheduler, waited for ``connect_timeout`` seconds.
    """

    scheduler: str | None = None
    workers: int | None = None
    connect_timeout: float = 5.0


def output_options(where: str, output: Output | None, loose: dict, default: Output = Output()) -> Output:
    """The :class:`Output` of a pipeline called as ``where(..., output=Output(...))`` or, the
    older form its callers may still use, with the fields as loose keywords (``plots=False``)."""
    given = options_of(where, Output, output, loose, keyword="output")  # checks both forms
    return given if output is not None else default.replace(**loose)
