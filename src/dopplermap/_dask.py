"""The Dask side of :mod:`dopplermap.cluster`, imported only when a cluster is used (Dask is an
optional dependency): what every worker of a :class:`dopplermap.cluster.Session` holds, and the
call that gives it to a task."""

from __future__ import annotations

import warnings

from dask.distributed import WorkerPlugin, get_worker

from .plan import members_in_one_thread

__all__ = ["Shared", "call"]


class Shared(WorkerPlugin):
    """A worker plugin that only holds ``obj`` (a session's problem and data). The scheduler keeps
    its plugins and sets each up on every worker that joins, one the nanny starts again after a
    crash too; scattered data has no such copy (below :class:`dopplermap.cluster.Session`)."""

    def __init__(self, name: str, obj):
        self.name = name
        self.obj = obj


def call(fn, name: str, filters: list, *args, **kwargs):
    """``(fn(shared, *args, **kwargs), warnings)`` on a worker, ``shared`` the object its plugin
    ``name`` holds: run under the client's warning ``filters`` (what a search ignores, such as a
    grid point's chi2 far from 1, is ignored here too), the warnings it gives returned as
    ``(category, message)`` pairs for the client to raise again (a worker process would only
    print them, outside the run's summary). A task solves its members in one thread
    (:func:`dopplermap.plan.members_in_one_thread`): the cluster gives each worker its share of
    the machine."""
    with warnings.catch_warnings(record=True) as caught, members_in_one_thread():
        warnings.filters[:] = filters
        value = fn(get_worker().plugins[name].obj, *args, **kwargs)
    return value, [(w.category, str(w.message)) for w in caught]
