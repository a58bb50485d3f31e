"""Where many solves run: a Dask cluster (local or at a scheduler's address) and the tasks sent
to it. Shared by the searches, the calibration and the bootstrap; Dask is imported only when a
cluster is used."""

from __future__ import annotations

import dataclasses
import os

from .errors import DopplermapInputError

__all__ = ["CONNECT_TIMEOUT", "Cluster", "run_tasks", "usable_cpus"]


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
    """Where :func:`grid_search` solves its points (``cluster=None``: serially in this process).

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

    def connect(self):
        """``(client, local_cluster)``: a client of the scheduler (``local_cluster`` None) or of
        a new local cluster, which the caller closes."""
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError("parallel grid search needs dask: pip install 'dopplermap[dask]'") from exc
        if not self.remote:
            n = self.n_workers or usable_cpus()
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
            return Client(cluster), cluster
        try:
            return Client(self.scheduler, timeout=self.connect_timeout), None
        except (OSError, TimeoutError, ValueError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise DopplermapInputError(f"--scheduler {self.scheduler}: could not connect within "
                                       f"{self.connect_timeout:g} s ({msg}); check the address and that the "
                                       "scheduler is running, or use --scheduler sync") from None


def run_tasks(cluster: Cluster, fn, shared, tasks: list, progress=None) -> list:
    """``[fn(shared, *task) for task in tasks]`` as Dask tasks on ``cluster``, in the tasks'
    order: ``shared`` (the problem) is sent to every worker once; a task lost with its worker
    runs again elsewhere (only that task's solves). ``progress(n_done, n_tasks)`` as tasks finish."""
    from dask.distributed import as_completed

    client, local = cluster.connect()
    try:
        common = client.scatter(shared, broadcast=True)
        futs = {client.submit(fn, common, *task, pure=False, retries=2): k for k, task in enumerate(tasks)}
        out = [None] * len(tasks)
        for n, fut in enumerate(as_completed(futs), 1):
            out[futs[fut]] = fut.result()
            if progress is not None:
                progress(n, len(tasks))
    finally:
        client.close()
        if local is not None:
            local.close()
    return out
