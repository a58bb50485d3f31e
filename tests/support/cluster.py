"""Killing a Dask worker mid-run, as a crash or a pre-empted batch job would (the tests that check
a many-solve command gives the same result when a worker dies)."""

from __future__ import annotations

import os


def kill_one_worker(scheduler_address: str) -> str:
    """Kill the first worker (by address) of the scheduler at ``scheduler_address`` at once,
    with no clean-up; its nanny starts a new one. Returns the killed worker's address."""
    from dask.distributed import Client

    with Client(scheduler_address) as c:
        victim = sorted(c.scheduler_info()["workers"])[0]
        try:
            c.run(os._exit, 1, workers=[victim])
        except Exception:  # noqa: BLE001 - the worker's connection drops with it
            pass
    return victim
