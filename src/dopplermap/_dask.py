"""The Dask side of :mod:`dopplermap.cluster`, imported only when a cluster is used (Dask is an
optional dependency): what every worker of a :class:`dopplermap.cluster.Session` holds, and the
call that gives it to a task."""

from __future__ import annotations

from dask.distributed import WorkerPlugin, get_worker

__all__ = ["Shared", "call"]


class Shared(WorkerPlugin):
    """A worker plugin that only holds ``obj`` (a session's problem and data). The scheduler keeps
    its plugins and sets each up on every worker that joins, one the nanny starts again after a
    crash too; scattered data has no such copy (below :class:`dopplermap.cluster.Session`)."""

    def __init__(self, name: str, obj):
        self.name = name
        self.obj = obj


def call(fn, name: str, *args, **kwargs):
    """``fn(shared, *args, **kwargs)`` on a worker, ``shared`` the object its plugin ``name`` holds."""
    return fn(get_worker().plugins[name].obj, *args, **kwargs)
