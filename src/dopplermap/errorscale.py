"""Error scales: the delivered errors of line profiles against the scatter of the profiles.

LSD codes often deliver errors larger than the scatter of the profiles they come with; a
reduced chi-square far below 1 for every reasonable map is the sign. Then the lambda for a
target chi-square, the Delta chi-square intervals of a grid and the uncertainty maps all
read wrong numbers. An :class:`ErrorScale` is one factor on a line data set's errors,
``err -> factor * err``, with how it was found:

* ``"given"``: a number from the configuration (``[data] error_scale = 0.5``);
* ``"continuum"`` (:func:`continuum_error_scale`): where the model is the continuum (beyond
  ``vsini`` plus the local line's width, :func:`line_margin`), the scatter of each profile
  about a straight line per side, in units of its errors; the factor is their median over
  the epochs (robust to a bad epoch), their spread is reported;
* ``"residuals"`` (for profiles with too little continuum): ``sqrt(reduced chi2)`` of a fit
  at small lambda, corrected for the noise the fit absorbs, per epoch and overall; the fit
  is made in :func:`dopplermap.search.fit_error_scale`, above the solvers.

:func:`scale_errors` returns observations with scaled errors. :meth:`dopplermap.problem.Problem.scale_errors`
applies factors to a problem (each line data set its own) and keeps the record that results,
``summary.json`` and the report show.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .choices import check_error_scale
from .errors import DopplermapInputError
from .objective import Observations

__all__ = ["ErrorScale", "line_margin", "continuum_mask", "continuum_error_scale",
           "error_scale_for", "scale_errors", "check_error_scale", "summarise", "describe_all", "MIN_CONTINUUM_POINTS",
           "MARGIN_DEPTH"]

MIN_CONTINUUM_POINTS = 10
"""Fewest continuum points per profile for the ``"continuum"`` estimate (else ``"residuals"``)."""
MARGIN_DEPTH = 0.01
"""The local line ends where its depth falls below this fraction of its central depth."""
_MIN_SEGMENT = 4  # points of one side for its straight line (2 parameters) to leave a scatter
_CLIP = 4.0  # residuals beyond this many sigma (a cosmic, a blend) are left out, once


@dataclasses.dataclass(frozen=True)
class ErrorScale:
    """One line data set's error scale: ``err -> factor * err``.

    Attributes:
        factor: the scale (None: still to be found from a fit, see ``pending``).
        method: ``"given"``, ``"continuum"`` or ``"residuals"``.
        per_epoch: (n_epoch,) the estimate of each profile (empty for a given factor).
        n_points: points per profile the estimate used (continuum points, or the velocities).
        name: the line data set (``"lines"`` for one set).
        detail: what the estimate read (window, lambda), in words.
    """

    factor: float | None
    method: str
    per_epoch: tuple[float, ...] = ()
    n_points: int = 0
    name: str = "lines"
    detail: str = ""

    @property
    def pending(self) -> bool:
        """Whether the factor must still come from the residuals of a fit."""
        return self.factor is None

    def spread(self) -> tuple[float, float] | None:
        """The smallest and largest per-epoch estimate, or None."""
        return (float(min(self.per_epoch)), float(max(self.per_epoch))) if self.per_epoch else None

    def describe(self) -> str:
        """One line: factor, method, per-epoch spread and what was read."""
        if self.pending:
            return f"error scale of {self.name!r}: from the residuals of a fit (not yet made)"
        text = f"error scale {self.factor:.4g} ({self.method}"
        s = self.spread()
        if s is not None:
            text += f"; per epoch {s[0]:.3g}..{s[1]:.3g}"
        if self.detail:
            text += f"; {self.detail}"
        return text + ")"

    def to_dict(self) -> dict:
        """For ``summary.json``: factor, method, per-epoch values and spread, points, detail."""
        s = self.spread()
        return {"name": self.name, "factor": self.factor, "method": self.method,
                "per_epoch": [float(v) for v in self.per_epoch], "min": None if s is None else s[0],
                "max": None if s is None else s[1], "n_points": int(self.n_points), "detail": self.detail}


def _depth_curve(profile, v):
    """``1 - I/Ic`` of a local profile at velocities ``v`` (the widest over mu for a
    mu-dependent one: macroturbulence broadens the line towards the limb)."""
    if getattr(profile, "mu_dependent", False):
        return np.max([1.0 - profile(v, mu) for mu in np.linspace(0.1, 1.0, 10)], axis=0)
    return 1.0 - np.asarray(profile(v), dtype=float)


def line_margin(components, *, depth: float = MARGIN_DEPTH, step: float = 0.05) -> float:
    """Half width of the local lines, km/s: the farthest velocity at which a component's
    line is deeper than ``depth`` times its central depth (the largest over the components).

    A profile whose depth never reaches zero (a tabulated one that ends inside the line)
    is taken to end where its table does."""
    profiles = [c.profile for c in components] if not hasattr(components, "half_width") else [components]
    out = 0.0
    for p in profiles:
        hw = min(float(p.half_width), 2000.0)
        v = np.arange(0.0, hw + step, step)
        d = _depth_curve(p, np.concatenate([-v[::-1], v]))
        d = np.maximum(d[: v.size][::-1], d[v.size:])  # both wings, by |v|
        peak = float(np.max(np.abs(d)))
        if peak <= 0:
            continue
        deep = np.flatnonzero(np.abs(d) > depth * peak)
        out = max(out, float(v[deep[-1]]) if deep.size else 0.0)
    return out


def continuum_mask(vels, vsini: float, margin: float) -> np.ndarray:
    """(n_vel,) True where ``|v| > vsini + margin``: beyond the rotating line, the continuum."""
    return np.abs(np.asarray(vels, dtype=float)) > float(vsini) + float(margin)


def _segments(mask: np.ndarray) -> list[np.ndarray]:
    idx = np.flatnonzero(mask)
    return [s for s in np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1) if s.size]


def _scatter(vels, flux, err, segments) -> tuple[float, int]:
    """Scatter of one profile about a straight line per continuum segment, in units of its errors.

    About the local continuum, not from point-to-point differences: LSD pixels are correlated
    with their neighbours (the deconvolution spreads each spectral pixel over several
    velocity bins), and the variance of a difference is ``2 sigma^2 (1 - rho)``, so a
    point-to-point estimate reads the scatter low by ``sqrt(1 - rho)``, while the scatter about a line is unbiased
    whatever the correlation. A slow wiggle of the continuum reads it high instead: the
    errors come out a little too large, the safe side."""
    res, n_par = [], 0
    for s in segments:
        v, f, e = vels[s], flux[s], err[s]
        a = np.vstack([np.ones(s.size), v - v.mean()]).T
        coef, *_ = np.linalg.lstsq(a, f, rcond=None)
        res.append((f - a @ coef) / e)
        n_par += 2
    r = np.concatenate(res)
    s2 = float(np.sum(r ** 2)) / (r.size - n_par)
    keep = np.abs(r) <= _CLIP * np.sqrt(s2)
    if keep.sum() > n_par + 2 and not keep.all():
        s2 = float(np.sum(r[keep] ** 2)) / (int(keep.sum()) - n_par)
    return float(np.sqrt(s2)), int(keep.sum()) - n_par


def continuum_error_scale(obs: Observations, vsini: float, margin: float, *, name: str = "lines",
                          min_points: int = MIN_CONTINUUM_POINTS) -> ErrorScale | None:
    """The ``"continuum"`` error scale of ``obs``, or None where the window holds fewer than
    ``min_points`` continuum points per profile.

    ``vsini`` (km/s) and ``margin`` (:func:`line_margin`, km/s) bound the line; ``obs.vels``
    are in the star's rest frame (line centre 0). Each profile's scatter about a straight line
    on each side of the line is divided by its errors (``per_epoch``); the factor is the square
    root of the median of their squares over the median of ``chi2_dof / dof`` (robust to a bad
    epoch, and unbiased for Gaussian noise however few the points)."""
    vels = np.asarray(obs.vels, dtype=float)
    segs = [s for s in _segments(continuum_mask(vels, vsini, margin)) if s.size >= _MIN_SEGMENT]
    n = int(sum(s.size for s in segs))
    if n < max(int(min_points), 2 * len(segs) + 3):
        return None
    flux, err = np.asarray(obs.flux, dtype=float), np.asarray(obs.err, dtype=float)
    fits = [_scatter(vels, flux[e], err[e], segs) for e in range(flux.shape[0])]
    per = tuple(f for f, _ in fits)
    # the median of the epochs' variances over the median of chi2_dof / dof: unbiased for
    # Gaussian noise (the median of a few points' scatter alone reads low, by 3 % at 12 dof)
    dof = int(np.median([d for _, d in fits]))
    from scipy import stats  # here, not at the top: scipy.stats costs ~0.9 s of every run's start

    factor = float(np.sqrt(np.median(np.square(per)) * dof / stats.chi2.ppf(0.5, dof)))
    return ErrorScale(factor=factor, method="continuum", per_epoch=per, n_points=n, name=name,
                      detail=f"{n} points per profile at |v| > {vsini + margin:.4g} km/s")


def scale_errors(obs: Observations, factor: float) -> Observations:
    """``obs`` with its errors multiplied by ``factor`` (> 0)."""
    if isinstance(factor, str):
        raise DopplermapInputError(f"error scale factor must be a number > 0, got {factor!r}")
    factor = check_error_scale(factor, "error scale factor")
    return dataclasses.replace(obs, err=obs.err * factor)


def error_scale_for(spec, obs: Observations, components, vsini: float | None, *, name: str = "lines",
                    where: str = "error_scale") -> ErrorScale:
    """The error scale ``spec`` (a number or one of :data:`dopplermap.choices.ERROR_SCALES`) asks
    for one line data set: a given factor, the continuum's estimate, or a pending
    ``"residuals"`` scale that a fit must complete (:func:`dopplermap.search.apply_error_scale`).

    ``"continuum"`` and ``"auto"`` read the continuum in the velocity window of ``obs``
    where it holds :data:`MIN_CONTINUUM_POINTS` points per profile; where it does not,
    ``"continuum"`` is refused and ``"auto"`` turns to the residuals. ``components`` (the
    local lines) and ``vsini`` (km/s) bound the line; None where they are not known (a
    problem whose synthesis form is given as data): then only a number or the residuals.
    ``where`` names the setting in errors (``"target.toml: [data]"``)."""
    spec = check_error_scale(spec, f"{where} error_scale")
    if not isinstance(spec, str):
        return ErrorScale(factor=spec, method="given", name=name)
    if spec == "residuals":
        return ErrorScale(factor=None, method="residuals", name=name, n_points=obs.n_vel, detail="as asked")
    if components is None or vsini is None:
        if spec == "continuum":
            raise DopplermapInputError(f"{where} error_scale = 'continuum' needs the star's vsini and local lines, "
                                       "which this problem does not hold (its synthesis form is given as data): "
                                       "use 'residuals' or a number")
        return ErrorScale(factor=None, method="residuals", name=name, n_points=obs.n_vel,
                          detail="no vsini and local lines to find the continuum by")
    margin = line_margin(components)
    est = continuum_error_scale(obs, vsini, margin, name=name)
    if est is not None:
        return est
    edge = float(vsini) + margin
    v = np.asarray(obs.vels, dtype=float)
    n_out = int(np.sum(np.abs(v) > edge))
    if spec == "continuum":
        raise DopplermapInputError(
            f"{where} error_scale = 'continuum': the velocity window {v[0]:.4g}..{v[-1]:.4g} km/s holds {n_out} "
            f"point(s) beyond the line (|v| > vsini + the local line's width = {edge:.4g} km/s), fewer than "
            f"{MIN_CONTINUUM_POINTS}: widen the window (velocity_range), or use 'auto' or 'residuals'")
    return ErrorScale(factor=None, method="residuals", name=name, n_points=obs.n_vel,
                      detail=f"{n_out} continuum point(s) per profile at |v| > {edge:.4g} km/s in the window, too "
                             "few for the continuum's scatter")


def summarise(scales) -> dict | None:
    """The error scales of a problem for ``summary.json``: ``{"factor", "method", "sets": [...]}``
    (factor and method: the one set's, or None and ``"per set"`` when the sets differ); None
    when no errors were scaled."""
    scales = [e for e in scales if not e.pending]
    if not scales:
        return None
    one = len(scales) == 1 or len({(e.factor, e.method) for e in scales}) == 1
    return {"factor": scales[0].factor if one else None, "method": scales[0].method if one else "per set",
            "sets": [e.to_dict() for e in scales]}


def describe_all(summary: dict | None) -> str | None:
    """One line of the error scales :func:`summarise` gives (what a command prints), or None."""
    if not summary:
        return None
    sets = summary.get("sets") or []

    def one(d):
        text = f"{d['factor']:.4g} ({d['method']}"
        if d.get("min") is not None:
            text += f"; per epoch {d['min']:.3g}..{d['max']:.3g}"
        return text + ")"

    if len(sets) == 1:
        return f"error scale {one(sets[0])}: errors multiplied by it; {sets[0].get('detail', '')}".rstrip("; ")
    return "error scales " + ", ".join(f"{d['name']} {one(d)}" for d in sets) + ": errors multiplied by them"
