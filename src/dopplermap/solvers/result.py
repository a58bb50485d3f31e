"""Result of an inversion."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["InversionResult", "relative_brightness"]


def relative_brightness(fssc, fssh, intensities):
    """(n_cell,) continuum brightness relative to the photosphere.

    ``(fssp I_phot + fssc I_cool + fssh I_hot) / I_phot`` with ``fssp = 1 - fssc - fssh`` and
    ``intensities = (I_phot, I_cool, I_hot)``.
    """
    ip, ic, ih = intensities
    fssc = np.asarray(fssc, dtype=float)
    fssh = np.asarray(fssh, dtype=float)
    return ((1.0 - fssc - fssh) * ip + fssc * ic + fssh * ih) / ip


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
        cube_dtype: dtype of the (folded) dense cube the solve used, None for the binned model.
        fit_components: the spot components fitted, ``("cool", "hot")`` or one of them; an
            unfitted component's filling factor is held at the floor 1e-5.

    Context for result files and figures (optional; filled by
    :func:`dopplermap.io.results.with_context` and by :func:`dopplermap.load_result`):
        grid: the :class:`~dopplermap.grid.SurfaceGrid`. star: the :class:`~dopplermap.geometry.StarParams`.
        obs: the fitted :class:`~dopplermap.objective.Observations`.
        spotless: (n_epoch, n_vel) model of the unspotted star with the fitted rv and amp.
        intensities: continuum intensities (phot, cool, hot) relative to the photosphere.
        truth: ``{"fssc": (n_cell,), "fssh": (n_cell,)}`` true maps of a simulation.
        light_curve: ``{"times", "flux", "err", "model"}`` (n_obs,) arrays when a light curve was fitted.
        config: the configuration (JSON-ready dict) that produced the run.
        extra: further JSON-ready scalars (timings, recovery scores, ...).
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
    grid: object | None = None
    star: object | None = None
    obs: object | None = None
    spotless: np.ndarray | None = None
    intensities: tuple | None = None
    truth: dict | None = None
    light_curve: dict | None = None
    config: dict = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)
    chi2_lc: float | None = None  # light-curve reduced chi-square of a joint fit
    cube_dtype: str | None = None
    fit_components: tuple = ("cool", "hot")

    def __post_init__(self):
        self.fit_components = tuple(self.fit_components)  # a JSON list after a round trip

    @property
    def fssp(self) -> np.ndarray:
        return 1.0 - self.fssc - self.fssh

    @property
    def brightness(self) -> np.ndarray | None:
        """(n_cell,) continuum brightness relative to the unspotted photosphere (needs ``intensities``)."""
        if self.intensities is None:
            return None
        return relative_brightness(self.fssc, self.fssh, self.intensities)

    @property
    def x(self) -> np.ndarray:
        """The flat parameter vector ``[fssc, fssh, rv, amp]``."""
        return np.concatenate([self.fssc, self.fssh, self.rv, self.amp])

    def summary(self) -> dict:
        """Scalars as a JSON-ready dict."""
        keys = ("loss", "chi2", "regulariser_value", "lmbd", "regulariser", "iterations", "n_eval",
                "success", "stop_reason", "compile_time", "solve_time", "max_sum_excess", "solver", "chi2_lc",
                "cube_dtype", "fit_components")
        out = {}
        for k in keys:
            v = getattr(self, k)
            out[k] = v.item() if isinstance(v, np.generic) else list(v) if isinstance(v, tuple) else v
        return out
