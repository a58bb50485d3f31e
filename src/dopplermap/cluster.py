"""Where many solves run: a Dask cluster (local or at a scheduler's address) and the tasks sent
to it. Shared by the searches, the calibration and the bootstrap; Dask is imported only when a
cluster is used."""

from __future__ import annotations

import dataclasses
import logging
import os
import uuid
import warnings

from .errors import DopplermapInputError

__all__ = ["CONNECT_TIMEOUT", "Cluster", "Session", "run_tasks", "usable_cpus"]

log = logging.getLogger(__name__)


CONNECT_TIMEOUT = 5.0
"""Seconds to wait for a Dask scheduler (or a local cluster) before giving up."""


def usable_cpus() -> int:
    """The CPUs this process may run on: a batch job's allocation (its CPU affinity), not the
    node's count that ``os.cpu_count`` gives, which would oversubscribe a shared node."""
    if hasattr(os, "process_cpu_count"):  # Python >= 3.13
        return max(1, os.process_cpu_count() or 1)
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Where :func:`grid_search` solves its points (``cluster=None``: in this process).

    ``scheduler``: ``None``/``"local"`` = a local Dask cluster of ``n_workers`` processes
    (default: one per CPU), otherwise the address of a running Dask scheduler
    (``tcp://host:8786``), which must be trusted: Dask sends it pickled code and data, and it
    runs them. ``connect_timeout``: seconds to wait for that scheduler.
    """

    scheduler: str | None = None
    n_workers: int | None = None
    connect_timeout: float = CONNECT_TIMEOUT

    def __post_init__(self):
        if self.scheduler == "sync":  # one way to say "here": cluster=None
            raise DopplermapInputError("Cluster(scheduler='sync'): pass cluster=None to solve in this process")
        if self.n_workers is not None and (int(self.n_workers) != self.n_workers or self.n_workers < 1):
            raise DopplermapInputError(f"n_workers (--workers) must be an integer >= 1, got {self.n_workers!r}")
        if not (self.connect_timeout > 0):
            raise DopplermapInputError(f"connect timeout must be > 0 s, got {self.connect_timeout!r}")

    @property
    def remote(self) -> bool:
        """Whether the scheduler is a running one at an address (not a local cluster)."""
        return self.scheduler not in (None, "local")

    def describe(self) -> str:
        """Where this cluster's tasks run, in words (for a search's summary)."""
        if self.remote:
            return f"Dask scheduler {self.scheduler}"
        return f"local Dask cluster of {self._local_workers()} worker(s)"

    def _local_workers(self) -> int:
        return self.n_workers or usable_cpus()

    def connect(self):
        """``(client, local_cluster)``: a client of the scheduler (``local_cluster`` None) or of
        a new local cluster, which the caller closes."""
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("parallel grid search needs dask: pip install 'dopplermap[dask]'") from exc
        if not self.remote:
            cluster = LocalCluster(n_workers=self._local_workers(), threads_per_worker=1, processes=True, dashboard_address=None)
            return Client(cluster), cluster
        try:
            return Client(self.scheduler, timeout=self.connect_timeout), None
        except (OSError, TimeoutError, ValueError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DopplermapInputError(f"--scheduler {self.scheduler}: could not connect within "
                                       f"{self.connect_timeout:g} s ({msg}); check the address and that the "
                                       "scheduler is running, or use --scheduler sync") from None


class Session:
    """A client of ``cluster`` whose every worker holds ``shared`` (a problem and its data), as a
    context manager: :meth:`submit` runs ``fn(shared, *args)`` on a worker.

    ``shared`` is sent as a Dask worker plugin, not scattered: the scheduler keeps a copy of its
    plugins and sets them up on every worker that joins later, one a nanny starts again after a
    crash too. Scattered data has no lineage, and Dask's active memory manager leaves one replica
    of it within seconds whenever no task is waiting for it, whatever ``broadcast`` asked: the
    worker holding that replica would take it along when it dies, and every task that needs it
    would be cancelled ("lost dependencies")."""

    def __init__(self, cluster: Cluster, shared):
        self.cluster, self.shared = cluster, shared
        self.client = self._local = None
        self.name = f"dopplermap-shared-{uuid.uuid4().hex}"

    def __enter__(self) -> Session:
        from . import _dask  # Dask is optional: imported only when a cluster is used

        self._call = _dask.call
        self.client, self._local = self.cluster.connect()
        try:
            self.client.register_plugin(_dask.Shared(self.name, self.shared))
        except BaseException:
            self._close()
            raise
        return self

    def submit(self, fn, *args, **kwargs):
        """A future of ``fn(shared, *args, **kwargs)``, run under this process's warning filters
        (:func:`_warning_filters`), read by :meth:`result`; Dask's own keywords of
        ``Client.submit`` (``retries``, ...) are taken from ``kwargs``; never pure (a solve
        has no reason to be shared between two callers)."""
        return self.client.submit(self._call, fn, self.name, _warning_filters(), *args, pure=False, **kwargs)

    @staticmethod
    def result(future, timeout=None):
        """The value of a :meth:`submit` future; the warnings its task gave on the worker are
        raised again here, where the run's summary collects them."""
        value, caught = future.result(timeout=timeout)
        for category, message in caught:
            warnings.warn(message, category, stacklevel=2)
        return value

    def __exit__(self, *exc) -> None:
        try:  # a running scheduler's workers let go of the problem (a local cluster closes anyway)
            if self._local is None:
                self.client.unregister_worker_plugin(self.name)
        except (OSError, TimeoutError, ValueError) as err:  # the session's work is done: say so, go on
            log.warning("could not remove the shared problem from the cluster's workers: %s", err)
        finally:
            self._close()

    def _close(self) -> None:
        try:
            self.client.close()
        finally:
            if self._local is not None:
                self._local.close()


def _warning_filters() -> list:
    """This process's warning filters that a worker can rebuild: those of Python's own
    categories and dopplermap's (another package's category may not import there)."""
    return [f for f in warnings.filters if f[2].__module__ == "builtins" or f[2].__module__.startswith("dopplermap")]


def run_tasks(cluster: Cluster, fn, shared, tasks: list, progress=None) -> list:
    """``[fn(shared, *task) for task in tasks]`` as Dask tasks on ``cluster``, in the tasks'
    order: ``shared`` (the problem) is held by every worker (:class:`Session`); a task lost with
    its worker runs again elsewhere (only that task's solves). ``progress(n_done, n_tasks)`` as
    tasks finish."""
    from dask.distributed import as_completed

    with Session(cluster, shared) as session:
        futs = {session.submit(fn, *task, retries=2): k for k, task in enumerate(tasks)}
        out = [None] * len(tasks)
        for n, fut in enumerate(as_completed(futs), 1):
            out[futs[fut]] = session.result(fut)
            if progress is not None:
                progress(n, len(tasks))
    return out
