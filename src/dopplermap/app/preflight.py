"""What a command runs before its pipeline's imports load JAX: the checks that answer at
once (the output folder, arguments that do not fit together) and the figure child, which
loads matplotlib on another core meanwhile.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..atomic import check_out
from ..choices import SIMULATION_FORMATS, check
from ..errors import DopplermapInputError
from ..figure_process import FigureProcess

SEED_FIGURES = "dopplermap.app.seed_figures"
"""The module of the seed figures, which the figure child of ``invert-seed`` preloads."""


def figure_process(plots: bool, preload=("dopplermap.plot",)):
    """A :class:`~dopplermap.figure_process.FigureProcess` preloading ``preload`` when ``plots``,
    else a context that gives None; started before the pipeline's imports so that the
    child loads matplotlib while this process loads JAX."""
    return FigureProcess(preload=preload) if plots else contextlib.nullcontext()


def check_result_out(out: Path, overwrite: bool) -> None:
    """``--out`` of ``invert`` and ``demo``: a new folder, or (with ``overwrite``) a result folder."""
    check_out(out, "result", overwrite=overwrite)


def check_seed_out(out: Path, overwrite: bool) -> None:
    """``--out`` of ``invert-seed``."""
    check_out(out, "seed-result", overwrite=overwrite)


def check_seed_arguments(idc, sg, cpcs, problem) -> None:
    """The seed's problem comes from all three pickles or from one ``.npz``."""
    picks = [p for p in (idc, sg, cpcs) if p is not None]
    if problem is not None and picks:
        raise DopplermapInputError("give either --problem FILE.npz or --idc/--sg/--cpcs, not both")
    if problem is None and len(picks) != 3:
        missing = [n for n, p in (("--idc", idc), ("--sg", sg), ("--cpcs", cpcs)) if p is None]
        raise DopplermapInputError(f"missing {', '.join(missing)}: the seed's problem needs all three pickles "
                         "(or --problem FILE.npz from `dopplermap convert`)")


def check_simulation_out(out: Path, overwrite: bool) -> None:
    """``--out`` of ``simulate``."""
    check_out(out, "simulation", overwrite=overwrite)


def check_simulation_arguments(fmt: str, n_cell: int, n_epoch: int, n_vel: int) -> None:
    """The sizes and the format of a simulated problem."""
    for name, v, lo in (("n-cell", n_cell, 50), ("n-epoch", n_epoch, 1), ("n-vel", n_vel, 3)):
        if v < lo:
            raise DopplermapInputError(f"--{name} must be >= {lo}, got {v}")
    check(fmt, SIMULATION_FORMATS, "format")
