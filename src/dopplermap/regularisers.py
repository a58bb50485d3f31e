"""The regularisers of the objective, one :class:`Regulariser` entry of :data:`REGISTRY` each.

An entry carries all that the package needs of a regulariser: its value (the terms of
:mod:`dopplermap.objective`'s docstring), the floor ``m`` in its logarithms, its infimum over
the allowed maps (the floor of the L-curve's axis, :func:`dopplermap.search.regulariser_floor`)
and the part of its Hessian's diagonal that the Newton solver's block reading cannot see
(:mod:`dopplermap.solvers.newton`). Adding a regulariser is one entry here plus its name
and figure label in :data:`dopplermap.choices.REGULARISER_LABELS` (``tests/test_choices.py``
keeps the two equal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from . import _x64  # noqa: F401  (float64 before the first array)
from .choices import REGULARISERS, check
from .constants import FILL_MIN

__all__ = ["Regulariser", "REGISTRY", "regulariser", "seed_entropy", "spotdipy_entropy", "tikhonov",
           "tikhonov_diagonal", "SPOTDIPY_FLOOR"]

SPOTDIPY_FLOOR = 1e-7
"""SpotDIPy's floor in the three logarithms of its entropy (``mem_spotdipy``)."""


def seed_entropy(fssc, fssh, cell_area, m: float = FILL_MIN):
    """The seed's maximum-entropy term (``mem``, see :mod:`dopplermap.objective`); lower is 'more entropic'."""
    wp = cell_area / jnp.max(cell_area)
    s = fssc + fssh
    term = fssc * jnp.log(fssc / m) + fssh * jnp.log(fssh / m) + s * jnp.log(s / (1.0 - m))
    return jnp.sum(wp * term) / fssc.shape[0]


def spotdipy_entropy(fssc, fssh, cell_area, m: float = SPOTDIPY_FLOOR):
    """SpotDIPy's maximum-entropy term (``mem_spotdipy``, see :mod:`dopplermap.objective`)."""
    a = cell_area / jnp.sum(cell_area)
    s = fssc + fssh
    return jnp.sum(a * (fssc * jnp.log(fssc / m) + fssh * jnp.log(fssh / m) + s * jnp.log(s / m)))


def tikhonov(fssc, fssh, edges):
    """Mean squared difference of filling factors across neighbouring cells."""
    i, j = edges[:, 0], edges[:, 1]
    return (jnp.sum((fssc[i] - fssc[j]) ** 2) + jnp.sum((fssh[i] - fssh[j]) ** 2)) / edges.shape[0]


def tikhonov_diagonal(lmbd, edges, n_cell: int, dtype):
    """(n_cell,) diagonal of ``lmbd`` x the Tikhonov term's Hessian in fssc (and the same in
    fssh): ``2 lmbd deg_c / n_edge``. A graph Laplacian's rows sum to zero, so reading the
    Hessian block by block (as the Newton solver does) sees none of it."""
    i, j = edges[:, 0], edges[:, 1]
    deg = jnp.zeros(n_cell, dtype).at[i].add(1.0).at[j].add(1.0)
    return 2.0 * lmbd * deg / max(int(edges.shape[0]), 1)


def _seed_entropy_infimum(cell_area, m):
    # sum(w) / n_cell * min_{a, b} [a ln(a/m) + b ln(b/m) + (a+b) ln((a+b)/(1-m))]: each cell's
    # term is independent; the least one (negative near the default map) by a 2-D minimisation
    from scipy.optimize import minimize  # SciPy only when an L-curve needs it

    def term(p):
        a, b = np.exp(p)
        s = a + b
        return a * np.log(a / m) + b * np.log(b / m) + s * np.log(s / (1.0 - m))

    best = minimize(term, np.log([1e-3, 1e-3]), method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-16})
    wp = cell_area / cell_area.max()
    return float(wp.sum() / cell_area.size * min(best.fun, term(np.log([FILL_MIN, FILL_MIN]))))


def _spotdipy_infimum(cell_area, m):
    # increasing in both filling factors above m/e: the infimum is at the lower bounds
    f, s = FILL_MIN, 2.0 * FILL_MIN
    return float(2.0 * f * np.log(f / m) + s * np.log(s / m))


@dataclasses.dataclass(frozen=True)
class Regulariser:
    """One regulariser.

    Attributes:
        value: ``(fssc, fssh, cell_area, edges, floor) -> ()`` its value (jax-traceable).
        floor: the floor ``m`` of the filling factors in its logarithms (None: it has none).
        infimum: ``(cell_area, floor) -> float`` its least value over the allowed maps
            (``cell_area`` a NumPy array), subtracted on the L-curve's axis.
        uses_edges: whether it reads the grid's neighbour pairs (a model without them, as
            the seed's files give, cannot take it).
        newton_diagonal: ``(lmbd, edges, n_cell, dtype) -> (n_cell,)`` the diagonal of
            ``lmbd`` x its Hessian in fssc (the same in fssh) where it couples cells, which the
            Newton solver's block reading misses; None where it couples none.
    """

    value: Callable
    floor: float | None
    infimum: Callable
    uses_edges: bool = False
    newton_diagonal: Callable | None = None


def _zero(*_):
    return 0.0


REGISTRY: dict[str, Regulariser] = {
    "mem": Regulariser(value=lambda fssc, fssh, area, edges, m: seed_entropy(fssc, fssh, area, m),
                       floor=FILL_MIN, infimum=_seed_entropy_infimum),
    "mem_spotdipy": Regulariser(value=lambda fssc, fssh, area, edges, m: spotdipy_entropy(fssc, fssh, area, m),
                                floor=SPOTDIPY_FLOOR, infimum=_spotdipy_infimum),
    "tikhonov": Regulariser(value=lambda fssc, fssh, area, edges, m: tikhonov(fssc, fssh, edges),
                            floor=None, infimum=_zero, uses_edges=True, newton_diagonal=tikhonov_diagonal),
    "none": Regulariser(value=lambda fssc, fssh, area, edges, m: jnp.zeros((), jnp.result_type(fssc)),
                        floor=None, infimum=_zero),
}


def regulariser(name: str) -> Regulariser:
    """The entry of the regulariser ``name``, which must be one of :data:`dopplermap.choices.REGULARISERS`."""
    return REGISTRY[check(name, REGULARISERS, "regulariser")]
