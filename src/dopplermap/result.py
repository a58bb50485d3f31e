"""Result of an inversion: a data type (NumPy only), below the solvers that make it and the io,
figures and reports that read it."""

from __future__ import annotations

import base64
import dataclasses
import enum
import html
import io

import numpy as np

from ._repr import compact
from .choices import SPOT_COMPONENTS
from .errors import DopplermapInputError

__all__ = ["InversionResult", "Outcome", "relative_brightness", "line_sets", "light_curves", "Uncertainty"]


class Outcome(enum.StrEnum):
    """How a solve ended, in one vocabulary for every solver (``result.outcome``).

    ``FTOL``/``GTOL`` met the tolerance (relative reduction of the loss / projected
    gradient); the others did not: the iteration cap, the evaluation cap, a failed line
    search. ``result.stop_reason`` keeps the back end's own words.
    """

    FTOL = "ftol"
    GTOL = "gtol"
    MAX_ITERATIONS = "max_iterations"
    MAX_EVALUATIONS = "max_evaluations"
    LINE_SEARCH = "line_search_failed"

    @property
    def converged(self) -> bool:
        return self in (Outcome.FTOL, Outcome.GTOL)

    @classmethod
    def from_status(cls, status: int) -> Outcome:
        """The compiled loops' status codes (1 ftol, 2 gtol, 3 iteration cap, 4 line search)."""
        return {1: cls.FTOL, 2: cls.GTOL, 3: cls.MAX_ITERATIONS, 4: cls.LINE_SEARCH}[int(status)]

    @classmethod
    def from_scipy(cls, message: str, status: int) -> Outcome:
        """scipy L-BFGS-B's ``(message, status)``."""
        up = str(message).upper()
        if status == 0:
            return cls.GTOL if "GRADIENT" in up else cls.FTOL
        if "ITERATION" in up:
            return cls.MAX_ITERATIONS
        if status == 1:
            return cls.MAX_EVALUATIONS
        return cls.LINE_SEARCH


def relative_brightness(fssc, fssh, intensities):
    """(n_cell,) continuum brightness relative to the photosphere.

    ``(fssp I_phot + fssc I_cool + fssh I_hot) / I_phot`` with ``fssp = 1 - fssc - fssh`` and
    ``intensities = (I_phot, I_cool, I_hot)``.
    """
    ip, ic, ih = intensities
    fssc = np.asarray(fssc, dtype=float)
    fssh = np.asarray(fssh, dtype=float)
    return ((1.0 - fssc - fssh) * ip + fssc * ic + fssh * ih) / ip


def line_sets(result) -> list[dict]:
    """The line data sets of a result, each ``{"name", "obs", "model", "spotless", "rv", "amp",
    "chi2"}`` (model / spotless None when unknown): one entry for a single set, whose name is
    ``"lines"`` and chi2 the result's. Empty without observations."""
    obs = result.obs
    if obs is None:
        return []
    if not isinstance(obs, (tuple, list)):
        return [dict(name="lines", obs=obs, model=result.model, spotless=result.spotless, rv=result.rv,
                     amp=result.amp, chi2=result.chi2)]
    names = list(result.chi2_sets or {}) or [f"lines{i + 1}" for i in range(len(obs))]
    chi2 = result.chi2_sets or {}
    out, start = [], 0
    for i, (name, o) in enumerate(zip(names, obs, strict=True)):
        sl = slice(start, start + o.n_epoch)
        start = sl.stop
        out.append(dict(name=name, obs=o, model=None if result.model is None else result.model[i],
                        spotless=None if result.spotless is None else result.spotless[i],
                        rv=np.asarray(result.rv)[sl], amp=np.asarray(result.amp)[sl], chi2=chi2.get(name)))
    return out


def light_curves(result) -> list[dict]:
    """The fitted light curves of a result, each ``{"name", "times", "flux", "err", "model",
    "chi2"}`` (one band: name ``"lightcurve"``, chi2 the result's ``chi2_lc``)."""
    lc = result.light_curve
    if lc is None:
        return []
    if isinstance(lc, dict):
        return [{"name": "lightcurve", **lc, "chi2": result.chi2_lc}]
    chi2 = result.chi2_lc_sets or {}
    return [{**b, "chi2": chi2.get(b.get("name"))} for b in lc]


_CELL_COLUMNS = {
    "lat": "latitude of the cell centre", "lon": "longitude of the cell centre (0 faces the observer at phase 0)",
    "area": "solid angle of the cell on the unit sphere", "fssc": "cool-spot filling factor",
    "fssh": "hot-spot filling factor", "fssp": "photosphere filling factor 1 - fssc - fssh",
    "brightness": "continuum brightness relative to the unspotted photosphere",
    "true_fssc": "true cool-spot filling factor of the simulation", "true_fssh": "true hot-spot filling factor",
    "sigma_fssc": "1-sigma uncertainty of fssc", "sigma_fssh": "1-sigma uncertainty of fssh",
    "never_visible": "the cell is never seen at any epoch",
}
_EPOCH_COLUMNS = {
    "time": "mid-exposure time, BJD (TDB)", "phase": "rotation phase (time - t0) / period mod 1",
    "cycle": "rotations since t0", "rv": "fitted radial-velocity shift of the epoch",
    "offset": "fitted additive continuum offset of the epoch",
    "chi2": "reduced chi-square of the epoch's profile against the model", "n_vel": "velocity points of the epoch",
    "set": "line data set",
}

# notebooks show results through these; arrays are never printed (a result holds tens of kB)
_REPR_STOP_CHARS = 60


@dataclasses.dataclass(repr=False, frozen=True)
class InversionResult:
    """Maps, nuisances, fit statistics and timings of one inversion (immutable: derive
    changed copies with ``dataclasses.replace``).

    Attributes:
        fssc, fssh: (n_cell,) cool- and hot-spot filling factors; ``fssp = 1 - fssc - fssh``.
        rv: (n_epoch,) km/s. amp: (n_epoch,) additive offsets.
        loss, chi2, regulariser_value: final objective, reduced chi-square, regulariser.
        lmbd: regularisation weight. regulariser: ``"mem"``, ``"tikhonov"`` or ``"none"``.
        iterations, n_eval: solver iterations and objective evaluations.
        success: whether the solver met its tolerance (``outcome.converged``).
        stop_reason: the solver's message. outcome: the :class:`Outcome` (None for a result
            read from files written before it existed).
        compile_time, solve_time: seconds (compile = trace + lower + XLA compile).
        history: dict of per-iteration arrays (``loss``, ``chi2``, ``regulariser``).
        model: (n_epoch, n_vel) fitted profiles; several line data sets: a tuple, one per set
            (``obs`` and ``spotless`` likewise; ``rv`` and ``amp`` hold the sets one after another).
        chi2_sets, chi2_lc_sets: ``{name: reduced chi2}`` of each line data set / light-curve
            band when there are several (``chi2`` / ``chi2_lc`` are then pooled over all
            points, see :mod:`dopplermap.objective`), else None.
        offset_prior: the offset prior's term in the loss, ``sum_e (amp_e / sigma_e)^2 /
            n_points`` (:mod:`dopplermap.objective`), or None without a prior.
        max_sum_excess: largest ``fssc + fssh - 1`` before the final projection.
        cube_dtype: dtype of the (folded) dense cube the solve used, None for the binned model.
        fit_components: the spot components fitted, ``("cool", "hot")`` or one of them; an
            unfitted component's filling factor is held at the floor 1e-5.
        window_edges: with time windows (:mod:`dopplermap.windows`): the (K + 1,) edges of
            the windows, days; ``fssc`` and ``fssh`` then hold the K maps one after another
            (:meth:`window_maps`, :meth:`window`). None: one static map.
        lmbd_time, temporal: the weight and value of the windows' temporal coupling (None
            without windows).

    Context for result files and figures (optional; filled by :func:`dopplermap.invert` from a
    model made by :func:`dopplermap.precompute`, by :func:`dopplermap.io.results.with_context`
    and by :func:`dopplermap.load_result`):
        grid: the :class:`~dopplermap.grid.SurfaceGrid`. star: the :class:`~dopplermap.geometry.StarParams`.
        obs: the fitted :class:`~dopplermap.objective.Observations`.
        spotless: (n_epoch, n_vel) model of the unspotted star with the fitted rv and amp.
        intensities: continuum intensities (phot, cool, hot) relative to the photosphere.
        truth: ``{"fssc": (n_cell,), "fssh": (n_cell,)}`` true maps of a simulation.
        light_curve: ``{"times", "flux", "err", "model"}`` (n_obs,) arrays when a light curve was
            fitted; several bands: a tuple of such dicts, each with its ``"name"``
            (:func:`light_curves` reads either; :func:`line_sets` the line data sets).
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
    fit_components: tuple = SPOT_COMPONENTS
    outcome: Outcome | None = None
    chi2_sets: dict | None = None  # {name: reduced chi2} of several line data sets (chi2: the pooled one)
    chi2_lc_sets: dict | None = None  # {name: reduced chi2} of several light-curve bands (chi2_lc: pooled)
    offset_prior: float | None = None  # the offset prior's term in the loss (None: no prior)
    window_edges: np.ndarray | None = None  # (K + 1,) days: fssc, fssh hold K maps (dopplermap.windows)
    lmbd_time: float | None = None
    temporal: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "fit_components", tuple(self.fit_components))  # a JSON list after a round trip
        if self.window_edges is not None:
            object.__setattr__(self, "window_edges", np.asarray(self.window_edges, dtype=float))
        if self.outcome is not None:
            object.__setattr__(self, "outcome", Outcome(self.outcome))

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
                "success", "outcome", "stop_reason", "compile_time", "solve_time", "max_sum_excess", "solver", "chi2_lc",
                "cube_dtype", "fit_components", "chi2_sets", "chi2_lc_sets", "offset_prior")
        out = {}
        for k in keys:
            v = getattr(self, k)
            out[k] = v.item() if isinstance(v, np.generic) else list(v) if isinstance(v, tuple) else \
                dict(v) if isinstance(v, dict) else v
        if self.window_edges is not None:
            out.update(window_edges=[float(v) for v in self.window_edges], lmbd_time=self.lmbd_time,
                       temporal=self.temporal)
        return out

    @property
    def name(self) -> str | None:
        """The star's name (``star.name``, ``[star] name``), or None."""
        return getattr(self.star, "name", None)

    def to_table(self, uncertainty=None, window: int | None = None):
        """The map as an astropy ``QTable``, one row per cell (with time windows: one row per
        cell and window, columns ``window``, ``t_start`` and ``t_end`` (TDB ``Time``) first;
        ``window=k``: window ``k``'s map only).

        Columns: ``lat``, ``lon`` (deg), ``area`` (sr), ``fssc``, ``fssh``, ``fssp`` (filling
        factors), ``brightness`` (relative to the photosphere, when ``intensities`` are
        known), ``true_fssc``/``true_fssh`` (a simulation's truth) and, given an
        :class:`~dopplermap.uncertainty.Uncertainty` (or anything with ``sigma_fssc``,
        ``sigma_fssh``, ``never_visible`` and ``method``), ``sigma_fssc``, ``sigma_fssh`` and
        ``never_visible``. ``meta`` holds the star's name and parameters, lambda, chi2 and
        the regulariser. Needs the grid (a result of :func:`dopplermap.invert` on a Problem,
        or one read by :func:`dopplermap.load_result`).
        """
        import astropy.units as u
        from astropy.table import QTable, vstack
        from astropy.time import Time

        if self.n_window > 1:
            ks = range(self.n_window) if window is None else [window]
            parts = []
            for k in ks:
                t = self.window(k).to_table(uncertainty)
                span = self.window_spans[k]
                t.add_column(np.full(len(t), k % self.n_window), name="window", index=0)
                t.add_column(Time(np.full(len(t), span[0]), format="jd", scale="tdb"), name="t_start", index=1)
                t.add_column(Time(np.full(len(t), span[1]), format="jd", scale="tdb"), name="t_end", index=2)
                parts.append(t)
            return parts[0] if len(parts) == 1 else vstack(parts, metadata_conflicts="silent")
        if self.grid is None:
            raise DopplermapInputError("to_table: this result has no grid (invert a Problem, or attach one with "
                                       "dopplermap.io.results.with_context)")
        g = self.grid
        t = QTable(meta=self._table_meta())
        t["lat"] = np.degrees(np.asarray(g.lat, float)) * u.deg
        t["lon"] = np.degrees(np.mod(np.asarray(g.lon, float), 2 * np.pi)) * u.deg
        t["area"] = np.asarray(g.area, float) * u.sr
        for k in ("fssc", "fssh", "fssp"):
            t[k] = np.asarray(getattr(self, k), float) * u.dimensionless_unscaled
        if self.intensities is not None:
            t["brightness"] = np.asarray(self.brightness, float) * u.dimensionless_unscaled
        if self.truth is not None:
            for k in ("fssc", "fssh"):
                t[f"true_{k}"] = np.asarray(self.truth[k], float) * u.dimensionless_unscaled
        if uncertainty is not None:
            for k in ("sigma_fssc", "sigma_fssh"):
                v = np.asarray(getattr(uncertainty, k), float)
                if v.shape != (self.n_cell,):
                    raise DopplermapInputError(f"to_table: uncertainty {k} has shape {v.shape}, the map "
                                               f"({self.n_cell},) cells")
                t[k] = v * u.dimensionless_unscaled
            t["never_visible"] = np.asarray(uncertainty.never_visible, bool)
            t.meta["uncertainty_method"] = str(uncertainty.method)
        for k, desc in _CELL_COLUMNS.items():
            if k in t.colnames:
                t[k].info.description = desc
        return t

    def epochs_table(self):
        """The epochs as an astropy ``QTable``, one row per epoch (line data sets one after another).

        Columns: ``time`` (a ``Time``, BJD in the TDB scale), ``phase`` (0..1) and ``cycle``
        (rotations since ``t0``; NaN without the star), ``rv`` (km/s) and ``offset`` (the
        additive continuum offset) fitted per epoch, ``chi2`` (the reduced chi-square of the
        epoch's profile, NaN without the model), ``n_vel`` and, with several line data sets,
        ``set``. Needs the observations.
        """
        import astropy.units as u
        from astropy.table import QTable
        from astropy.time import Time

        sets = line_sets(self)
        if not sets:
            raise DopplermapInputError("epochs_table: this result has no observations (invert a Problem, or load "
                                       "the result folder with dopplermap.load_result)")
        times, chi2, n_vel, names = [], [], [], []
        for d in sets:
            o = d["obs"]
            flux, err = np.asarray(o.flux, float), np.asarray(o.err, float)
            times.append(np.asarray(o.times, float))
            if d["model"] is None:
                chi2.append(np.full(flux.shape[0], np.nan))
            else:
                chi2.append(np.mean(((flux - np.asarray(d["model"], float)) / err) ** 2, axis=1))
            n_vel.append(np.full(flux.shape[0], flux.shape[1]))
            names += [d["name"]] * flux.shape[0]
        times = np.concatenate(times)
        cycle = np.full(times.shape, np.nan)
        if self.star is not None:
            cycle = (times - self.star.t0) / self.star.period
        t = QTable(meta=self._table_meta())
        t["time"] = Time(times, format="jd", scale="tdb")
        t["phase"] = np.mod(cycle, 1.0) * u.dimensionless_unscaled
        t["cycle"] = cycle * u.dimensionless_unscaled
        t["rv"] = np.asarray(self.rv, float) * (u.km / u.s)
        t["offset"] = np.asarray(self.amp, float) * u.dimensionless_unscaled
        t["chi2"] = np.concatenate(chi2) * u.dimensionless_unscaled
        t["n_vel"] = np.concatenate(n_vel).astype(int)
        if len(sets) > 1:
            t["set"] = names
        for k, desc in _EPOCH_COLUMNS.items():
            if k in t.colnames:
                t[k].info.description = desc
        return t

    def _table_meta(self) -> dict:
        meta = {"object": self.name, "chi2": float(self.chi2), "lambda": float(self.lmbd),
                "regulariser": str(self.regulariser)}
        if self.star is not None:
            meta.update(inclination_deg=float(self.star.inclination), vsini_kms=float(self.star.vsini_kms),
                        period_d=float(self.star.period), t0_bjd_tdb=float(self.star.t0))
        return {k: v for k, v in meta.items() if v is not None}

    def plot(self, kind: str = "map", *, ax=None, **kwargs):
        """One figure of this result, drawn by :mod:`dopplermap.plot`; returns the Figure.

        ``kind``: one of :data:`dopplermap.choices.RESULT_PLOT_KINDS`: ``"map"`` (one
        quantity, ``quantity="cool"``, ``projection=``), ``"maps"`` (every quantity),
        ``"orthographic"``, ``"polar"``, ``"profiles"``, ``"dynamic_spectrum"``,
        ``"light_curve"``, ``"convergence"``. ``ax``: an Axes to draw into (``"map"``,
        ``"polar"`` and ``"convergence"``; the others fill a Figure, ``fig=``). With time
        windows, ``window=k`` picks the map of ``"map"``, ``"orthographic"`` and ``"polar"``
        (default the last) and ``"maps"`` draws the windows' sequence. Further keywords go
        to the plot function.
        """
        from .plot import plot_result_kind

        return plot_result_kind(self, kind, ax=ax, **kwargs)

    @property
    def n_window(self) -> int:
        """The number of time windows (1: one static map)."""
        return 1 if self.window_edges is None else int(np.size(self.window_edges)) - 1

    @property
    def window_spans(self) -> np.ndarray | None:
        """(K, 2) start and end of each window, days (None: one static map)."""
        if self.window_edges is None:
            return None
        e = np.asarray(self.window_edges, dtype=float)
        return np.stack([e[:-1], e[1:]], axis=1)

    def window_maps(self) -> tuple[np.ndarray, np.ndarray]:
        """``(fssc, fssh)`` as (K, n_cell) arrays, one row per window (K = 1: the static map)."""
        k = self.n_window
        return np.reshape(self.fssc, (k, -1)), np.reshape(self.fssh, (k, -1))

    def window(self, k: int) -> InversionResult:
        """This result with window ``k``'s maps only: a static result that every figure and
        writer of one map takes (fit statistics, rv, amp and model are the whole fit's)."""
        fc, fh = self.window_maps()
        if not -self.n_window <= k < self.n_window:
            raise IndexError(f"window {k} of {self.n_window}")
        return dataclasses.replace(self, fssc=fc[k], fssh=fh[k], window_edges=None,
                                   extra={**self.extra, "window": int(k % self.n_window),
                                          "window_span": [float(v) for v in self.window_spans[k]]})

    @property
    def n_cell(self) -> int:
        """Cells of one map."""
        return int(np.shape(self.fssc)[0]) // self.n_window

    @property
    def n_epoch(self) -> int:
        return int(np.shape(self.rv)[0])

    def __repr__(self) -> str:
        stop = str(self.stop_reason)
        if len(stop) > _REPR_STOP_CHARS:
            stop = stop[:_REPR_STOP_CHARS - 3] + "..."
        lc = "" if self.chi2_lc is None else f", chi2_lc={self.chi2_lc:.5g}"
        lc += "".join(f", chi2[{k}]={v:.5g}" for k, v in (self.chi2_sets or {}).items())
        lc += "".join(f", chi2_lc[{k}]={v:.5g}" for k, v in (self.chi2_lc_sets or {}).items())
        lc += "" if self.offset_prior is None else f", offset_prior={self.offset_prior:.5g}"
        lc += "" if self.n_window == 1 else f", windows={self.n_window}"
        return (f"InversionResult(chi2={self.chi2:.5g}{lc}, loss={self.loss:.6g}, lmbd={self.lmbd:g}, "
                f"iterations={self.iterations}, success={self.success}, stop={stop!r}, "
                f"n_cell={self.n_cell}, n_epoch={self.n_epoch})")

    def _repr_html_(self) -> str:
        """A table of the main numbers and, when the grid is known, a cool-spot map thumbnail."""
        esc = html.escape
        rows = [("reduced chi-square", f"{self.chi2:.6g}")]
        rows += [(f"chi-square of {k}", f"{v:.6g}") for k, v in (self.chi2_sets or {}).items()]
        if self.chi2_lc is not None:
            rows.append(("light-curve chi-square", f"{self.chi2_lc:.6g}"))
        rows += [(f"chi-square of light curve {k}", f"{v:.6g}") for k, v in (self.chi2_lc_sets or {}).items()]
        if self.offset_prior is not None:
            rows.append(("offset prior term", f"{self.offset_prior:.6g}"))
        rows += [
            ("loss", f"{self.loss:.8g}"),
            ("regulariser", f"{self.regulariser}, lambda {self.lmbd:g}, value {self.regulariser_value:.6g}"),
            ("iterations / evaluations", f"{self.iterations} / {self.n_eval}"),
            ("stopped", f"{'converged' if self.success else 'not converged'}: {self.stop_reason}"),
            ("solver", f"{self.solver}; compile {self.compile_time:.2f} s, solve {self.solve_time:.2f} s"),
            ("sizes", f"{self.n_cell} cells, {self.n_epoch} epochs"
                      + (f", {int(np.shape(self.model)[1])} velocities" if isinstance(self.model, np.ndarray)
                         else f", {len(self.model)} line data sets" if self.model is not None else "")),
        ]
        if self.star is not None:
            s = self.star
            rows.append(("star", f"inclination {s.inclination:g} deg, vsini {s.vsini_kms:.4g} km/s, "
                                 f"period {s.period:g} d"))
        shown = self  # with time windows: the last window's map
        if self.n_window > 1:
            shown = self.window(self.n_window - 1)
            t0, t1 = self.window_spans[0, 0], self.window_spans[-1, 1]
            rows.append(("time windows", f"{self.n_window} over {t1 - t0:.4g} d, lmbd_time {self.lmbd_time}, "
                                         f"coupling {self.temporal}; map: the last window"))
        table = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
        thumb = ""
        if self.grid is not None:
            top = max(float(np.max(shown.fssc)), 1e-3)
            thumb = (f"<div><img alt='cool-spot filling factor map' width='240' style='image-rendering:pixelated' "
                     f"src='data:image/png;base64,{shown._thumbnail_png()}'/><br/><small>cool-spot filling factor "
                     f"0 (white) to {top:.2f} (dark), longitude 0-360 deg</small></div>")
        return (f"<div style='display:flex;gap:1em;text-align:left'><table><caption><b>InversionResult</b>"
                f"</caption>{table}</table>{thumb}</div>")

    def _thumbnail_png(self, width_px: int = 120, levels: int = 16) -> str:
        """Base64 PNG of ``fssc`` on a longitude-latitude raster (each pixel shows its nearest cell).

        A palette image of ``levels`` colours of the cool-spot map, drawn with Pillow (what
        matplotlib saves through) rather than a Figure: a few hundred bytes, so a notebook's
        result display stays small; the browser scales it up."""
        from PIL import Image
        from scipy.spatial import cKDTree

        from .style import cmap

        g = self.grid
        ny = width_px // 2
        lat = np.linspace(np.pi / 2, -np.pi / 2, ny, endpoint=False) - np.pi / (2 * ny)
        lon = (np.arange(2 * ny) + 0.5) * np.pi / ny
        la, lo = np.meshgrid(lat, lon, indexing="ij")

        def unit(b, lam):
            return np.stack([np.cos(b) * np.cos(lam), np.cos(b) * np.sin(lam), np.sin(b)], axis=-1)

        _, idx = cKDTree(unit(np.asarray(g.lat), np.asarray(g.lon))).query(unit(la, lo).reshape(-1, 3))
        image = np.asarray(self.fssc, dtype=float)[idx].reshape(la.shape)
        top = max(float(np.nanmax(image)), 1e-3)
        q = np.clip(np.rint(image / top * (levels - 1)), 0, levels - 1).astype(np.uint8)
        cm = cmap("cool")
        palette = (np.array([cm(i / (levels - 1))[:3] for i in range(levels)]) * 255).round().astype(np.uint8)
        img = Image.fromarray(q, mode="P")
        img.putpalette(palette.ravel().tolist())
        buf = io.BytesIO()
        img.save(buf, format="PNG", optimize=True)
        return base64.b64encode(buf.getvalue()).decode("ascii")


@dataclasses.dataclass
class Uncertainty:
    """Per-cell 1-sigma uncertainties of the filling factors.

    Attributes:
        sigma_fssc, sigma_fssh: (n_cell,) standard deviations (``inf`` where the method
            cannot constrain a cell, see the module docstring).
        method: ``"bootstrap"`` or ``"laplace-<width>-<diagonal>"`` (width posterior/sandwich,
            diagonal dense/lowrank/hutchinson).
        never_visible: (n_cell,) cells with zero weight at every epoch.
        samples: (n_boot, 2, n_cell) bootstrap maps (bootstrap only).
        time: wall seconds.
        mode: how the bootstrap's refits ran (``"vmap"``, ``"sequential"`` or ``"resample"``).
        lower, upper: (2, n_cell) 1-sigma intervals (cool, hot) inside [0, 1]
            (:func:`bounded_interval`; Laplace only).
        at_bound: (2, n_cell) factors on a bound (not free; their sigma is the conditional
            width and their interval reaches the bound; Laplace only).
        n_crossing: free seen factors whose Gaussian 1-sigma range crosses a bound (Laplace only).
        note: how the diagonal was computed (low-rank: the basis' rank and what it left out).
    """

    sigma_fssc: np.ndarray
    sigma_fssh: np.ndarray
    method: str
    never_visible: np.ndarray
    samples: np.ndarray | None = None
    time: float = 0.0
    mode: str | None = None
    lower: np.ndarray | None = None
    upper: np.ndarray | None = None
    at_bound: np.ndarray | None = None
    n_crossing: int = 0
    note: str = ""

    def __repr__(self) -> str:
        return compact(self, ("method", "sigma_fssc", "sigma_fssh", "time"))
