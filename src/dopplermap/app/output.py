"""A pipeline's output options: one keyword-only object instead of five loose keywords.

Light (no JAX, no matplotlib), so a command can build it before the pipeline loads.
"""

from __future__ import annotations

import dataclasses

from ..errors import DopplermapInputError

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
        scheduler: None or ``"sync"``: in this process (the grid: None is a local cluster);
            ``"local"``: a local Dask cluster of ``workers`` processes (default one per CPU);
            else the address of a running Dask scheduler, waited for ``connect_timeout`` seconds.
    """

    scheduler: str | None = None
    workers: int | None = None
    connect_timeout: float = 5.0


_OUTPUT_FIELDS = tuple(f.name for f in dataclasses.fields(Output))


def output_options(where: str, output: Output | None, loose: dict, default: Output = Output()) -> Output:
    """The :class:`Output` of a pipeline called as ``where(..., output=Output(...))`` or, the
    older form its callers may still use, with the fields as loose keywords (``plots=False``)."""
    unknown = sorted(set(loose) - set(_OUTPUT_FIELDS))
    if unknown:
        raise DopplermapInputError(f"{where}: unknown keyword(s) {', '.join(unknown)}; the output options are "
                                   f"{', '.join(_OUTPUT_FIELDS)} (or output=Output(...))")
    if output is not None and loose:
        raise DopplermapInputError(f"{where}: give output=Output(...) or the loose keywords "
                                   f"{', '.join(sorted(loose))}, not both")
    if output is not None and not isinstance(output, Output):
        raise DopplermapInputError(f"{where}: output takes dopplermap.app.output.Output, got {type(output).__name__}")
    return output if output is not None else default.replace(**loose)
