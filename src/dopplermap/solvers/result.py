"""Result of an inversion."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["InversionResult"]


@dataclasses.dataclass
class InversionResult:
    """Maps, nuisances, fit statistics and timings of one inversion.

    Attributes:
        fssc, fssh: (n_cell,) cool- and hot-spot filling factors; ``fssp = 1 - fssc - fssh``.
        rv: (n_epoch,) km/s. amp: (n_epoch,) additive offsets.
        loss, chi2, regulariser_value: final objective, reduced chi-square, regulariser.
        lmbd: regularisation weight. regulariser: ``"mem"``, ``"tikhonov"`` or ``"none"``.
        iterations, n_eval: solver iterations and objective evaluations.
        success: whether the solver met its tolerance. stop_reason: the solver's message.
        compile_time, solve_time: seconds (compile = trace + lower + XLA compile).
        history: dict of per-iteration arrays (``loss``, ``chi2``, ``regulariser``).
        model: (n_epoch, n_vel) fitted profiles.
        max_sum_excess: largest ``fssc + fssh - 1`` before the final projection.
    """

    fssc: np.ndarray
    fssh: np.ndarray
    rv: np.ndarray
    amp: np.ndarray
    loss: float
    chi2: float
    regulariser_value: float
    lmbd: float
    regulariser: str
    iterations: int
    n_eval: int
    success: bool
    stop_reason: str
    compile_time: float
    solve_time: float
    history: dict = dataclasses.field(default_factory=dict)
    model: np.ndarray | None = None
    max_sum_excess: float = 0.0
    solver: str = "lbfgsb"
    chi2_lc: float | None = None  # light-curve reduced chi-square of a joint fit

    @property
    def fssp(self) -> np.ndarray:
        return 1.0 - self.fssc - self.fssh

    @property
    def x(self) -> np.ndarray:
        """The flat parameter vector ``[fssc, fssh, rv, amp]``."""
        return np.concatenate([self.fssc, self.fssh, self.rv, self.amp])

    def summary(self) -> dict:
        """Scalars as a JSON-ready dict."""
        keys = ("loss", "chi2", "regulariser_value", "lmbd", "regulariser", "iterations", "n_eval",
                "success", "stop_reason", "compile_time", "solve_time", "max_sum_excess", "solver")
        out = {}
        for k in keys:
            v = getattr(self, k)
            out[k] = v.item() if isinstance(v, np.generic) else v
        return out
