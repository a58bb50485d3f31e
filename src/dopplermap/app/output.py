"""A pipeline's output options: one keyword-only object instead of five loose keywords.

Light (no JAX, no matplotlib), so a command can build it before the pipeline loads.
"""

from __future__ import annotations

import dataclasses

from .._options import options_of
from ..cluster import Cluster
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
        scheduler: None or ``"sync"``: in this process;
            ``"local"``: a local Dask cluster of ``workers`` processes (default one per CPU);
            else the address of a running Dask scheduler, waited for ``connect_timeout`` seconds.
    """

    scheduler: str | None = None
    workers: int | None = None
    connect_timeout: float = 5.0

    def cluster(self) -> Cluster | None:
        """The Dask cluster of ``--scheduler`` and ``--workers`` (None: this process).
        ``--workers`` alone asks for a local cluster of that size; beside ``sync`` or an address
        it means nothing and is refused. An address is connected to once here, so an
        unreachable scheduler fails before any work."""
        if self.workers is not None and self.scheduler not in (None, "local"):
            raise DopplermapInputError(f"--workers {self.workers}: it sizes a local cluster (--scheduler local), "
                                       f"not --scheduler {self.scheduler}")
        if self.scheduler == "sync" or (self.scheduler is None and self.workers is None):
            return None
        cluster = Cluster(self.scheduler or "local", self.workers, self.connect_timeout)
        if cluster.remote:
            client, _ = cluster.connect()
            client.close()
        return cluster


def output_options(where: str, output: Output | None, loose: dict, default: Output = Output()) -> Output:
    """The :class:`Output` of a pipeline called as ``where(..., output=Output(...))`` or, the
    older form its callers may still use, with the fields as loose keywords (``plots=False``)."""
    given = options_of(where, Output, output, loose, keyword="output")  # checks both forms
    return given if output is not None else default.replace(**loose)
