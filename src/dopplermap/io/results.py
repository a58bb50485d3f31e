"""Result folders: standard files an astronomer can keep, written atomically.

A result folder holds::

    map.fits         HDU 1 "MAP": one row per cell (columns below), header with the star,
                     regularisation and fit statistics; HDU "EDGES": neighbour pairs (I, J);
                     HDU "CONVERGENCE": per-iteration ITER, LOSS, CHI2, REGUL (and CHI2_LC, the
                     light-curve chi-square of a joint fit).
    profiles.fits    HDU "VELS" (n_vel,) km/s; HDU "PROFILES": one row per epoch with TIME (d),
                     PHASE (in [0, 1)), CYCLE ((TIME - t0) / P, not wrapped), RV (km/s), AMP
                     and (n_vel,) vectors OBS, ERR, MODEL, SPOTLESS, RESID;
                     HDU "LIGHTCURVE" (TIME, PHASE, CYCLE, FLUX, ERR, MODEL, RESID) when a light
                     curve was fitted. TIME is BJD_TDB as a full Julian date (the internal
                     convention) with the FITS time keywords TIMESYS = 'TDB', TREFPOS =
                     'BARYCENTER', TIMEREF = 'SOLARSYSTEM', JDREF = 0, TIMEUNIT = 'd':
                     ``QTable.read(path, hdu="PROFILES", astropy_native=True)["TIME"]`` is an
                     astropy ``Time``. Several line data sets: one "VELS" and one "PROFILES"
                     HDU per set (EXTVER 1, 2, ... in set order, header SETNAME, SETCHI2);
                     several light-curve bands: one "LIGHTCURVE" HDU per band (EXTVER,
                     BANDNAME, BANDCHI2).
    config.json      the configuration that produced the run (and a verbatim copy of the
                     user's configuration file when one was given).
    summary.json     scalar results and timings; written last, with ``"complete": true``.
    *.png            figures, when the caller passes a figure writer (``figures=``;
                     :func:`dopplermap.app.save_result` passes :func:`dopplermap.plot.plot_result`).

MAP columns: LAT, LON (deg, cell centre; longitude 0 faces the observer at phase 0),
AREA (sr), FSSC, FSSH, FSSP (cool, hot, unspotted filling factors), BRIGHT (continuum
brightness relative to the unspotted photosphere; NaN when the intensities are unknown),
LAT_MIN, LAT_MAX, LON_MIN, LON_MAX (deg, cell bounds; latitude-band grids only) and
TRUE_FSSC, TRUE_FSSH (simulations only).

Everything is written into a hidden temporary folder next to the target, which is swapped
onto the target only when complete (:class:`dopplermap.atomic.AtomicFolder`; its manifest
``dopplermap.json`` lists every file's SHA-256, the run id and a fingerprint of the inputs):
an interrupted run leaves either the previous result or the complete new one under the
target name. Every FITS HDU carries the run id (``RUNID``) and the standard keywords
OBJECT (the star's name, ``StarParams.name``, when known), DATE (UTC, when written), ORIGIN
and CREATOR (``dopplermap`` and its version). :func:`check_result_folder`,
which :func:`load_result`, ``dopplermap plot`` and ``dopplermap report`` run first, refuses
a folder whose files differ from what the run wrote (an edited ``summary.json``, a
``map.fits`` from another run) or that has no manifest.

This module reads and writes data only: the spotless model is computed by the caller
(:func:`dopplermap.app.with_context`) and figures are drawn by the writer it passes in.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import math
import shutil
import time
from pathlib import Path

import numpy as np

from .._version import __version__
from ..atomic import AtomicFolder, fingerprint, verify_folder
from ..constants import FILL_MIN
from ..errors import DopplermapInputError, MissingFileError, active_warnings, bad_file, reader
from ..grid import SurfaceGrid
from ..result import InversionResult, light_curves, line_sets

__all__ = ["save_result", "load_result", "check_result_folder", "check_result_hdus", "with_context", "prefetch_writers", "RESULT_FILES",
           "CONTEXT"]

log = logging.getLogger(__name__)

RESULT_FILES = ("map.fits", "profiles.fits", "config.json", "summary.json")
_MARKER = "summary.json"
_FORMAT = "dopplermap-result-1"

# header keyword -> (InversionResult attribute, comment)
_SCALARS = {
    "REGUL": ("regulariser", "regulariser (dopplermap.objective)"),
    "LAMBDA": ("lmbd", "regularisation weight lambda"),
    "CHI2": ("chi2", "reduced chi-square of the line profiles"),
    "REGVAL": ("regulariser_value", "value of the regulariser"),
    "LOSS": ("loss", "final objective chi2 + lambda * regulariser"),
    "NITER": ("iterations", "solver iterations"),
    "NEVAL": ("n_eval", "objective evaluations"),
    "SUCCESS": ("success", "solver met its tolerance"),
    "STOPMSG": ("stop_reason", ""),
    "SOLVER": ("solver", "solver back end"),
    "CMPTIME": ("compile_time", "[s] compile time"),
    "SOLVTIME": ("solve_time", "[s] solve time"),
    "MAXEXCS": ("max_sum_excess", "max(fssc + fssh - 1) before projection"),
}
_STAR = {
    "INCLIN": ("inclination", "[deg] inclination of the rotation axis"),
    "VSINI": ("vsini", "[km/s] projected equatorial velocity"),
    "PERIOD": ("period", "[d] equatorial rotation period"),
    "T0": ("t0", "[d] time of rotation phase 0 (BJD_TDB)"),
    "DOMEGA": ("domega", "[rad/d] differential rotation shear"),
    "RADIUS": ("radius", "[R_sun] equatorial radius"),
}


def prefetch_writers(plots: bool = True, report: bool = False):
    """Import astropy's FITS writer (and matplotlib, when ``plots``; its colour maps and the PNG
    encoder, when ``report``) in a background thread.

    Call it before a long step that runs without the GIL (a solve): the imports then overlap
    with that step instead of adding their time to the final write. Returns the (daemon) thread.
    """
    import importlib
    import threading

    names = (["astropy.io.fits"]
             + (["matplotlib.figure", "matplotlib.backends.backend_agg"] if plots else [])
             + (["matplotlib.colors", "matplotlib.cm"] if report else [])
             + (["PIL.Image", "PIL.PngImagePlugin"] if plots or report else []))

    def run():
        try:
            for name in names:
                importlib.import_module(name)
            import io

            from astropy.io import fits

            # astropy loads more on first write: write a tiny table into memory
            hdu = fits.BinTableHDU.from_columns([fits.Column("A", "D", unit="deg", array=np.zeros(2)),
                                                 fits.Column("B", "2D", array=np.zeros((2, 2)))], name="X")
            hdu.header["K"] = ("x" * 100, "long")
            fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(io.BytesIO())
            if report:  # the report's colour maps and its PNG encoder, once
                from PIL import Image

                Image.fromarray(np.zeros((2, 2, 3), np.uint8), "RGB").save(io.BytesIO(), format="PNG")
            if plots:  # load fonts and PNG writer once: draw a tiny figure into memory
                from matplotlib.figure import Figure

                fig = Figure(figsize=(1, 1))
                ax = fig.add_axes((0, 0, 1, 1))
                ax.imshow(np.zeros((2, 2, 4), np.uint8))
                ax.text(0.5, 0.5, "0.5°", fontsize=7)
                fig.savefig(io.BytesIO(), format="png", dpi=20)
        except Exception:  # pragma: no cover - the real import later reports the problem
            log.debug("prefetch failed", exc_info=True)

    global _PREFETCH
    _PREFETCH = threading.Thread(target=run, name="dopplermap-prefetch", daemon=True)
    _PREFETCH.start()
    return _PREFETCH


_PREFETCH = None


CONTEXT = ("grid", "star", "obs", "spotless", "components", "truth", "light_curve", "config", "extra")
"""The keywords of :func:`with_context`."""


def with_context(result, **context):
    """Return ``result`` with the context needed for result files and figures: like
    ``dataclasses.replace``, one keyword per piece of context (:data:`CONTEXT`), each checked
    against the result; a piece given as None is left as it was.

    Args:
        grid: :class:`SurfaceGrid`. star: :class:`StarParams`. obs: :class:`Observations`.
        spotless: (n_epoch, n_vel) model of the unspotted star with the fitted rv and amp
            (:func:`dopplermap.app.with_context` computes it from a precomputed model).
        components: :class:`ComponentSet`; gives the relative continuum intensities.
        truth: ``{"fssc", "fssh"}`` true maps. light_curve: ``{"times", "flux", "err", "model"}``.
        config: JSON-ready dict. extra: JSON-ready scalars merged into ``result.extra``.
    """
    unknown = sorted(set(context) - set(CONTEXT))
    if unknown:
        raise DopplermapInputError(f"with_context: unknown keyword(s) {', '.join(unknown)}; the context is "
                                   f"{', '.join(CONTEXT)}")
    grid, star, obs, spotless, components, truth, light_curve, config, extra = (context.get(k) for k in CONTEXT)
    changes = {}
    if grid is not None:
        if grid.n_cell != result.n_cell:  # cells of one map (a time-windowed result holds several)
            raise DopplermapInputError(f"grid has {grid.n_cell} cells but the result has {result.n_cell}")
        changes["grid"] = grid
    if star is not None:
        changes["star"] = star
    if obs is not None:
        changes["obs"] = tuple(obs) if isinstance(obs, list) else obs
    if spotless is not None:
        sets = (obs if obs is not None else result.obs)
        if isinstance(sets, (tuple, list)):  # several line data sets: one spotless model per set
            spotless = tuple(np.asarray(s, dtype=float) for s in spotless)
            want = [(o.n_epoch, o.n_vel) for o in sets]
            if [s.shape for s in spotless] != want:
                raise DopplermapInputError(f"spotless models must have the sets' shapes {want}, "
                                           f"got {[s.shape for s in spotless]}")
        else:
            spotless = np.asarray(spotless, dtype=float)
            if spotless.ndim != 2 or spotless.shape[0] != len(result.rv):
                raise DopplermapInputError(f"spotless model must be (n_epoch, n_vel) with n_epoch = {len(result.rv)}, "
                                           f"got shape {spotless.shape}")
        changes["spotless"] = spotless
    if components is not None:
        changes["intensities"] = tuple(float(c.intensity) for c in components)
    if truth is not None:
        changes["truth"] = {k: np.asarray(truth[k], dtype=float) for k in ("fssc", "fssh")}
    if light_curve is not None:
        def arrays(lc):
            return {k: (str(v) if k == "name" else np.asarray(v, dtype=float)) for k, v in lc.items()}

        changes["light_curve"] = (arrays(light_curve) if isinstance(light_curve, dict)
                                  else tuple(arrays(b) for b in light_curve))
    if config is not None:
        changes["config"] = dict(config)
    if extra is not None:
        changes["extra"] = {**result.extra, **extra}
    return dataclasses.replace(result, **changes)


def _jsonable(v):
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else (1e308 if v > 0 else -1e308)
    return v


def _seed_entropy_np(fssc, fssh, area, m: float = FILL_MIN) -> float:
    """:func:`dopplermap.objective.seed_entropy` in numpy (no JAX compilation while writing)."""
    wp = area / np.max(area)
    s = fssc + fssh
    term = fssc * np.log(fssc / m) + fssh * np.log(fssh / m) + s * np.log(s / (1.0 - m))
    return float(np.sum(wp * term) / fssc.shape[0])


def _map_hdus(res, fits):
    if res.n_window == 1:
        return _static_map_hdus(res, fits)
    # time windows: one MAP HDU per window (EXTVER 1 .. K) with its span as TSTART/TSTOP
    lists = [_static_map_hdus(res.window(k), fits) for k in range(res.n_window)]
    maps = []
    for k, (hdul, (t0, t1)) in enumerate(zip(lists, res.window_spans, strict=True)):
        h = hdul["MAP"].header
        h["EXTVER"] = (k + 1, "time window")
        h["NWINDOW"] = (res.n_window, "number of time windows (one MAP HDU each)")
        h["TSTART"] = (float(t0), "[d] start of the window, BJD_TDB")
        h["TSTOP"] = (float(t1), "[d] end of the window, BJD_TDB")
        _time_keywords(h)
        if res.lmbd_time is not None:
            h["LMBDTIME"] = (float(res.lmbd_time), "weight of the temporal coupling")
        maps.append(hdul["MAP"])
    first = lists[0]
    return fits.HDUList([first[0], *maps, first["EDGES"], first["CONVERGENCE"]])


def _static_map_hdus(res, fits):
    grid = res.grid
    if grid is None:
        raise DopplermapInputError("result has no grid: call dopplermap.io.results.with_context(result, grid=...) first")
    bright = res.brightness
    cols = [
        fits.Column("LAT", "D", unit="deg", array=np.degrees(grid.lat)),
        fits.Column("LON", "D", unit="deg", array=np.degrees(grid.lon)),
        fits.Column("AREA", "D", unit="sr", array=np.asarray(grid.area, float)),
        fits.Column("FSSC", "D", array=res.fssc),
        fits.Column("FSSH", "D", array=res.fssh),
        fits.Column("FSSP", "D", array=res.fssp),
        fits.Column("BRIGHT", "D", array=np.full(grid.n_cell, np.nan) if bright is None else bright),
    ]
    if grid.lat_bounds is not None and grid.lon_bounds is not None:
        for name, arr, j in (("LAT_MIN", grid.lat_bounds, 0), ("LAT_MAX", grid.lat_bounds, 1),
                             ("LON_MIN", grid.lon_bounds, 0), ("LON_MAX", grid.lon_bounds, 1)):
            cols.append(fits.Column(name, "D", unit="deg", array=np.degrees(arr[:, j])))
    if res.truth is not None and np.size(res.truth["fssc"]) == grid.n_cell:
        cols += [fits.Column("TRUE_FSSC", "D", array=res.truth["fssc"]),
                 fits.Column("TRUE_FSSH", "D", array=res.truth["fssh"])]
    hdu = fits.BinTableHDU.from_columns(cols, name="MAP")
    h = hdu.header
    h["DMVER"] = (__version__, "dopplermap version")
    h["DMFORMAT"] = (_FORMAT, "result folder format")
    h["GRIDKIND"] = (grid.kind, "surface grid: bands or healpix")
    h["NCELL"] = (grid.n_cell, "number of surface cells")
    if res.star is not None:
        for key, (attr, comment) in _STAR.items():
            v = getattr(res.star, attr)
            if v is not None:
                h[key] = (float(v), comment)
    for key, (attr, comment) in _SCALARS.items():
        v = _jsonable(getattr(res, attr))
        h[key] = (v if v is not None else "NaN", comment)
    if getattr(res, "chi2_lc", None) is not None:
        h["CHI2_LC"] = (float(res.chi2_lc), "reduced chi-square of the light curve")
    h["FITCOMP"] = (",".join(res.fit_components), "spot components fitted")
    h["ENTROPY"] = (_seed_entropy_np(res.fssc, res.fssh, np.asarray(grid.area, float)),
                    "seed maximum-entropy term of the map")
    if res.intensities is not None:
        for key, v in zip(("I_PHOT", "I_COOL", "I_HOT"), res.intensities, strict=True):
            h[key] = (float(v), "continuum intensity relative to photosphere")
    h["CONFIG"] = json.dumps(res.config, sort_keys=True, default=str)  # configuration as JSON
    edges = np.asarray(grid.edges, dtype=np.int64).reshape(-1, 2)
    ehdu = fits.BinTableHDU.from_columns([fits.Column("I", "K", array=edges[:, 0]),
                                          fits.Column("J", "K", array=edges[:, 1])], name="EDGES")
    hist = res.history or {}
    n_it = len(hist.get("loss", []))
    hcols = [fits.Column("ITER", "K", array=np.arange(1, n_it + 1))]
    for name, key in (("LOSS", "loss"), ("CHI2", "chi2"), ("REGUL", "regulariser"), ("CHI2_LC", "chi2_lc")):
        if key == "chi2_lc" and key not in hist:
            continue
        hcols.append(fits.Column(name, "D", array=np.asarray(hist.get(key, np.full(n_it, np.nan)), float)))
    chdu = fits.BinTableHDU.from_columns(hcols, name="CONVERGENCE")
    primary = fits.PrimaryHDU()
    primary.header["DMVER"] = (__version__, "dopplermap version")
    primary.header["CONTENT"] = ("dopplermap surface map", "")
    return fits.HDUList([primary, hdu, ehdu, chdu])


def _profile_hdus(res, fits):
    sets = line_sets(res)
    if not sets and not light_curves(res):
        raise DopplermapInputError("result has no observations: call with_context(result, obs=...) first")
    hdus = [fits.PrimaryHDU()]
    for k, d in enumerate(sets, start=1):
        vh, prof = _set_hdus(res, d, fits)
        if len(sets) > 1:  # several line data sets: EXTVER in set order, named
            for h in (vh, prof):
                h.ver = k
                h.header["SETNAME"] = (d["name"], "line data set")
            prof.header["SETCHI2"] = (_jsonable(d["chi2"]) if d["chi2"] is not None else "NaN",
                                      "reduced chi-square of this set")
        hdus += [vh, prof]
    bands = light_curves(res)
    for k, lc in enumerate(bands, start=1):
        lhdu = _lightcurve_hdu(res, lc, fits)
        if len(bands) > 1 or isinstance(res.light_curve, tuple):
            lhdu.ver = k
            lhdu.header["BANDNAME"] = (lc["name"], "light-curve band")
            lhdu.header["BANDCHI2"] = (_jsonable(lc["chi2"]) if lc["chi2"] is not None else "NaN",
                                       "reduced chi-square of this band")
        hdus.append(lhdu)
    return fits.HDUList(hdus)


def _set_hdus(res, d, fits):
    obs = d["obs"]
    times = np.asarray(obs.times, float)
    vels = np.asarray(obs.vels, float)
    flux = np.asarray(obs.flux, float)
    err = np.asarray(obs.err, float)
    n_epoch, n_vel = flux.shape
    model = np.full_like(flux, np.nan) if d["model"] is None else np.asarray(d["model"], float)
    spotless = np.full_like(flux, np.nan) if d["spotless"] is None else np.asarray(d["spotless"], float)
    cycle = np.full(n_epoch, np.nan)
    if res.star is not None:
        cycle = (times - res.star.t0) / res.star.period
    vec = f"{n_vel}D"
    cols = [fits.Column("TIME", "D", unit="d", array=times), fits.Column("PHASE", "D", array=np.mod(cycle, 1.0)),
            fits.Column("CYCLE", "D", array=cycle),
            fits.Column("RV", "D", unit="km/s", array=np.asarray(d["rv"], float)),
            fits.Column("AMP", "D", array=np.asarray(d["amp"], float)),
            fits.Column("OBS", vec, array=flux), fits.Column("ERR", vec, array=err),
            fits.Column("MODEL", vec, array=model), fits.Column("SPOTLESS", vec, array=spotless),
            fits.Column("RESID", vec, array=flux - model)]
    vh = fits.ImageHDU(vels, name="VELS")
    vh.header["BUNIT"] = "km/s"
    prof = fits.BinTableHDU.from_columns(cols, name="PROFILES")
    _time_keywords(prof.header)
    return vh, prof


def _lightcurve_hdu(res, lc, fits):
    lt = np.asarray(lc["times"], float)
    lflux = np.asarray(lc["flux"], float)
    lerr = np.asarray(lc.get("err", np.full_like(lflux, np.nan)), float)
    lmodel = np.asarray(lc.get("model", np.full_like(lflux, np.nan)), float)
    lcols = [fits.Column("TIME", "D", unit="d", array=lt)]
    if res.star is not None:
        lcyc = (lt - res.star.t0) / res.star.period
        lcols += [fits.Column("PHASE", "D", array=np.mod(lcyc, 1.0)), fits.Column("CYCLE", "D", array=lcyc)]
    lcols += [fits.Column("FLUX", "D", array=lflux), fits.Column("ERR", "D", array=lerr),
              fits.Column("MODEL", "D", array=lmodel), fits.Column("RESID", "D", array=lflux - lmodel)]
    lhdu = fits.BinTableHDU.from_columns(lcols, name="LIGHTCURVE")
    _time_keywords(lhdu.header)
    return lhdu


def _time_keywords(h):
    """FITS time keywords (Rots et al. 2015) of a TIME column in the internal BJD_TDB, so that
    ``QTable.read(path, hdu=..., astropy_native=True)`` gives a barycentric TDB ``Time``."""
    h["TIMESYS"] = ("TDB", "time scale of TIME")
    h["TREFPOS"] = ("BARYCENTER", "TIME at the solar-system barycentre")
    h["TIMEREF"] = ("SOLARSYSTEM", "barycentric times (Kepler/TESS keyword)")
    h["JDREF"] = (0.0, "[d] BJD_TDB = TIME + JDREF")
    h["TIMEUNIT"] = ("d", "unit of TIME")


def _standard_keywords(h, res) -> None:
    """The FITS standard's keywords of where a file came from: OBJECT (the star's name, when
    known), DATE (when written, UTC), ORIGIN and CREATOR (the software and its version)."""
    name = getattr(res.star, "name", None)
    if name:
        h["OBJECT"] = (str(name), "star observed")
    h["DATE"] = (datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S"), "UTC date the file was written")
    h["ORIGIN"] = ("dopplermap", "software that wrote the file")
    h["CREATOR"] = (f"dopplermap {__version__}", "program and version")


def _summary(res, timings: dict) -> dict:
    out = {k: _jsonable(v) for k, v in res.summary().items()}
    out.update({k: _jsonable(v) for k, v in res.extra.items()})
    if res.star is not None:
        out["star"] = {k: _jsonable(v) for k, v in dataclasses.asdict(res.star).items()}
    if res.grid is not None:
        out["grid_kind"] = res.grid.kind
    out.update(timings)
    out["dopplermap_version"] = __version__
    out["format"] = _FORMAT
    return out


def _write_files(res, folder, config_file, figures, run_id: str) -> dict:
    """Write every file of a result folder into ``folder.tmp``; returns timings (s)."""
    from astropy.io import fits

    t0 = time.perf_counter()
    for name, make in (("map.fits", _map_hdus), ("profiles.fits", _profile_hdus)):
        hdus = make(res, fits)
        for hdu in hdus:  # every HDU names the run, so mixed folders are detected
            hdu.header["RUNID"] = (run_id, "run that wrote it")
            _standard_keywords(hdu.header, res)
        folder.write(name, hdus.writeto)
    folder.write("config.json", lambda p: p.write_text(
        json.dumps(res.config, indent=2, sort_keys=True, default=str) + "\n"))
    if config_file is not None:
        src = Path(config_file)
        name = "config" + src.suffix if src.suffix and src.suffix != ".json" else "config.input" + src.suffix
        folder.write(name, lambda p: shutil.copyfile(src, p))
    t1 = time.perf_counter()
    names = []
    if figures is not None:
        names = [Path(p).name for p in figures(res, folder.tmp)]
        folder.wrote()
    t2 = time.perf_counter()
    return {"write_time": t1 - t0, "plot_time": t2 - t1, "figures": names}


def input_fingerprint(res) -> str:
    """Fingerprint of what a result was fitted to: data, star, grid and configuration."""
    sets = [(d["obs"].times, d["obs"].vels, d["obs"].flux, d["obs"].err) for d in line_sets(res)]
    data = None if not sets else sets[0] if not isinstance(res.obs, tuple) else tuple(sets)
    grid = None if res.grid is None else (res.grid.lat, res.grid.lon, res.grid.area)
    bands = [{k: b.get(k) for k in ("times", "flux", "err")} for b in light_curves(res)]
    lc = None if not bands else bands[0] if isinstance(res.light_curve, dict) else tuple(bands)
    return fingerprint(data, res.star, grid, lc, json.loads(json.dumps(res.config, sort_keys=True, default=str)))


def save_result(result, path, *, figures=None, config_file=None, overwrite: bool = True, extra_writers=(),
                warnings=None, finishers=()) -> dict:
    """Write a result folder at ``path`` atomically; returns the summary dict written.

    Args:
        result: :class:`InversionResult` with context (see :func:`with_context`).
        path: target folder. It may not exist yet (its parent must), be empty, or hold an
            earlier result folder (replaced when ``overwrite``); anything else is refused
            and left untouched (:func:`dopplermap.atomic.check_out`).
        figures: ``figures(result, folder) -> paths`` draws the figures into the folder (their
            names go into ``summary.json``); None: no figures. :func:`dopplermap.app.save_result`
            (``dopplermap.save_result``) passes :func:`dopplermap.plot.plot_result`.
        config_file: the user's configuration file, copied verbatim.
        extra_writers: callables ``writer(folder)`` that add files (e.g. uncertainty maps)
            to the folder before it is completed and swapped into place.
        warnings: the run's warning messages for ``summary.json`` (default: those collected
            so far by the innermost :func:`dopplermap.errors.collect_warnings`).
        finishers: ``(name, writer)`` pairs; ``writer(folder)`` writes file ``name`` after
            ``summary.json`` (e.g. the HTML report, which reads it), still inside the atomic
            folder; the names are listed in ``summary.json``.
    """
    path = Path(path)
    if _PREFETCH is not None:
        _PREFETCH.join()  # no matplotlib use from two threads at once
    if config_file is not None and not Path(config_file).is_file():
        raise DopplermapInputError(f"config_file {config_file} does not exist")
    fp = input_fingerprint(result)
    with AtomicFolder(path, "result", overwrite=overwrite, inputs=fp, names=("result folder", "overwrite=True")) as folder:
        t0 = time.perf_counter()
        timings = _write_files(result, folder, config_file, figures, folder.run_id)
        for writer in extra_writers:
            writer(folder.tmp)
            folder.wrote()
        summary = _summary(result, {"write_time": timings["write_time"], "plot_time": timings["plot_time"]})
        summary["figures"] = timings["figures"]
        summary["run_id"] = folder.run_id
        summary["input_fingerprint"] = fp
        summary["warnings"] = list(active_warnings() if warnings is None else warnings)
        summary["files"] = sorted([p.name for p in folder.tmp.iterdir()] + [_MARKER, "dopplermap.json"]
                                  + [name for name, _ in finishers])
        summary["complete"] = True
        summary["save_time"] = time.perf_counter() - t0
        folder.write(_MARKER, lambda p: p.write_text(json.dumps(summary, indent=2)))
        for _name, writer in finishers:
            writer(folder.tmp)
            folder.wrote()
    log.info("wrote result folder %s (%.2f s)", path, summary["save_time"])
    return summary


def _header_value(h, key):
    v = h.get(key)
    return float("nan") if v == "NaN" else v


def _check_same_run(path: Path, run_ids: dict) -> None:
    """Refuse a folder whose files name different runs (files without a run id are older)."""
    named = {k: v for k, v in run_ids.items() if v}
    if len(set(named.values())) > 1 or (named and len(named) < len(run_ids)):
        parts = ", ".join(f"{k} from run {v or '(none)'}" for k, v in run_ids.items())
        raise DopplermapInputError(f"{path}: the files come from different runs ({parts}); rerun the inversion "
                                   "into an empty folder")


def read_json(path: Path, what: str) -> dict:
    """The JSON object in the file ``path`` (a ``what``), or a one-line error naming it."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError, OSError) as exc:  # not JSON, not UTF-8, nested too deeply
        raise bad_file(path, what, exc) from None
    if not isinstance(obj, dict):
        raise DopplermapInputError(f"{path}: not a {what} (a JSON object), but a {type(obj).__name__}")
    return obj


def check_result_folder(path, *, manifest: bool = True) -> dict:
    """Check a result folder before anything reads it; returns its ``summary.json``.

    The one check of :func:`load_result`, ``dopplermap plot`` and ``dopplermap report``: the
    folder exists, its manifest (:func:`dopplermap.atomic.verify_folder`) is complete, of a
    result, lists the result's files and matches every file byte for byte (SHA-256; figures
    and report.html, redrawn in place, excepted), and ``summary.json`` names the manifest's
    run. A folder without a manifest is refused: every result folder dopplermap writes has
    one, and nothing else says that its files belong together. Each failure is one line
    (:class:`DopplermapInputError`) naming the folder, the file and what does not match.
    ``manifest=False`` skips the manifest: only for a folder being written by this process.
    """
    path = Path(path)
    if not path.is_dir():
        raise MissingFileError(f"result folder {path} does not exist")
    m = None
    if manifest:
        m = verify_folder(path, "result")
        missing = [n for n in ("map.fits", "profiles.fits", _MARKER) if n not in m["files"]]
        if missing:
            raise DopplermapInputError(f"{path}: its manifest lists no {missing[0]}; not a complete result folder")
    marker = path / _MARKER
    if not marker.is_file():
        raise DopplermapInputError(f"{path} is not a complete dopplermap result folder (no {_MARKER})")
    summary = read_json(marker, "result summary")
    if summary.get("format") != _FORMAT:
        raise DopplermapInputError(f"{marker}: not the summary of a dopplermap result (format {_FORMAT!r})")
    if not summary.get("complete"):
        raise DopplermapInputError(f"{marker}: result folder is incomplete")
    if m is not None and summary.get("run_id") != m.get("run_id"):
        raise DopplermapInputError(f"{path}: {_MARKER} names run {summary.get('run_id')} but the manifest run "
                                   f"{m.get('run_id')}; the folder mixes runs: rerun")
    return summary


_TABLE_HDUS = ("MAP", "EDGES", "CONVERGENCE", "PROFILES", "LIGHTCURVE")  # written as binary tables
_IMAGE_HDUS = ("VELS",)  # written as images


def check_result_hdus(hdul, where) -> None:
    """Refuse in one line an HDU of a result file that astropy reads as another kind than
    :func:`save_result` wrote: damaged bytes can turn a table into an image, or into a corrupted
    HDU whose data cannot be read at all (behind a manifest forged to match, the folder check
    passes them)."""
    from astropy.io import fits

    for i, hdu in enumerate(hdul):
        want = (fits.BinTableHDU if hdu.name in _TABLE_HDUS else fits.ImageHDU if hdu.name in _IMAGE_HDUS
                else None)
        if want is not None and not isinstance(hdu, want):
            raise DopplermapInputError(f"{where}: HDU {i} ({hdu.name}) reads as {type(hdu).__name__.lstrip('_')}, "
                                       f"not the {want.__name__} written there: the file is damaged")


@reader("result folder")
def load_result(path):
    """Read a result folder written by :func:`save_result` into an :class:`InversionResult`.

    The folder is checked first (:func:`check_result_folder`); a folder that is not a
    complete, unaltered result is refused with a :class:`DopplermapInputError`.
    """
    from astropy.io import fits

    # JAX-backed types, imported here so that this module stays light: the CLI imports it for
    # its argument checks and to start prefetch_writers before JAX loads
    from ..geometry import StarParams
    from ..objective import Observations

    path = Path(path)
    summary = check_result_folder(path)
    run_ids = {"summary.json": summary.get("run_id")}

    with fits.open(path / "map.fits") as hdul:
        check_result_hdus(hdul, path / "map.fits")
        if "MAP" not in hdul:
            raise DopplermapInputError(f"{path / 'map.fits'}: no MAP extension")
        m = hdul["MAP"].data
        h = hdul["MAP"].header
        run_ids["map.fits"] = h.get("RUNID")
        names = set(m.columns.names)
        lat = np.radians(np.asarray(m["LAT"], float))
        lon = np.radians(np.asarray(m["LON"], float))
        latb = lonb = None
        if {"LAT_MIN", "LAT_MAX", "LON_MIN", "LON_MAX"} <= names:
            latb = np.radians(np.stack([m["LAT_MIN"], m["LAT_MAX"]], axis=1).astype(float))
            lonb = np.radians(np.stack([m["LON_MIN"], m["LON_MAX"]], axis=1).astype(float))
        edges = np.stack([hdul["EDGES"].data["I"], hdul["EDGES"].data["J"]], axis=1).astype(np.int64)
        grid = SurfaceGrid(lat=lat, lon=lon, area=np.asarray(m["AREA"], float), edges=edges,
                           kind=h.get("GRIDKIND", "bands"), lat_bounds=latb, lon_bounds=lonb)
        fssc = np.asarray(m["FSSC"], float)
        fssh = np.asarray(m["FSSH"], float)
        windows = [x for x in hdul if x.name == "MAP"]
        if len(windows) > 1:  # one MAP HDU per time window, in EXTVER order
            windows.sort(key=lambda x: int(x.header.get("EXTVER", 1)))
            fssc = np.concatenate([np.asarray(x.data["FSSC"], float) for x in windows])
            fssh = np.concatenate([np.asarray(x.data["FSSH"], float) for x in windows])
        truth = None
        if {"TRUE_FSSC", "TRUE_FSSH"} <= names:
            truth = {"fssc": np.asarray(m["TRUE_FSSC"], float), "fssh": np.asarray(m["TRUE_FSSH"], float)}
        star = None
        if "INCLIN" in h:
            star = StarParams(**{attr: (float(h[key]) if key in h else None) for key, (attr, _) in _STAR.items()
                                 if key in h or attr in ("vsini", "radius")}, name=h.get("OBJECT"))
        scalars = {attr: _header_value(h, key) for key, (attr, _) in _SCALARS.items()}
        intens = tuple(float(h[k]) for k in ("I_PHOT", "I_COOL", "I_HOT")) if "I_PHOT" in h else None
        c = hdul["CONVERGENCE"].data
        history = {"loss": np.asarray(c["LOSS"], float), "chi2": np.asarray(c["CHI2"], float),
                   "regulariser": np.asarray(c["REGUL"], float)}
        if "CHI2_LC" in c.columns.names:
            history["chi2_lc"] = np.asarray(c["CHI2_LC"], float)

    with fits.open(path / "profiles.fits") as hdul:
        check_result_hdus(hdul, path / "profiles.fits")
        first = "PROFILES" if "PROFILES" in hdul else "LIGHTCURVE" if "LIGHTCURVE" in hdul else None
        run_ids["profiles.fits"] = hdul[first].header.get("RUNID") if first else None
        _check_same_run(path, run_ids)
        profs = [h for h in hdul if h.name == "PROFILES"]
        vels_hdus = [h for h in hdul if h.name == "VELS"]
        only_lc = not profs and not vels_hdus and first == "LIGHTCURVE"  # a map of light curves alone
        if (not profs and not only_lc) or len(vels_hdus) != len(profs):
            raise DopplermapInputError(f"{path / 'profiles.fits'}: {len(profs)} PROFILES but {len(vels_hdus)} VELS HDUs")
        obs, model, spotless, rv, amp = [], [], [], [], []
        for vh, ph in zip(vels_hdus, profs, strict=True):
            p = ph.data
            obs.append(Observations.create(np.asarray(p["TIME"], float), np.asarray(vh.data, float),
                                           np.asarray(p["OBS"], float), np.asarray(p["ERR"], float),
                                           source=str(path / "profiles.fits")))
            model.append(np.asarray(p["MODEL"], float))
            spotless.append(np.asarray(p["SPOTLESS"], float))
            rv.append(np.asarray(p["RV"], float))
            amp.append(np.asarray(p["AMP"], float))
        rv, amp = (np.zeros(0), np.zeros(0)) if only_lc else (np.concatenate(rv), np.concatenate(amp))
        if only_lc:
            obs, model, spotless = None, None, None
        elif len(profs) == 1:
            obs, model, spotless = obs[0], model[0], spotless[0]
            model = None if np.all(np.isnan(model)) else model
            spotless = None if np.all(np.isnan(spotless)) else spotless
        else:  # several line data sets
            obs = tuple(obs)
            model = None if all(np.all(np.isnan(m)) for m in model) else tuple(model)
            spotless = None if all(np.all(np.isnan(m)) for m in spotless) else tuple(spotless)
        bands = []
        for lh in (h for h in hdul if h.name == "LIGHTCURVE"):
            lc = lh.data
            band = {k.lower(): np.asarray(lc[k], float) for k in ("TIME", "FLUX", "ERR", "MODEL")}
            band["times"] = band.pop("time")
            if "BANDNAME" in lh.header:
                band["name"] = str(lh.header["BANDNAME"])
            bands.append(band)
        light_curve = None if not bands else bands[0] if "name" not in bands[0] else tuple(bands)

    config = read_json(path / "config.json", "configuration") if (path / "config.json").is_file() else {}

    # further scalar fields of InversionResult (e.g. chi2_lc) travel through summary.json
    context = {"fssc", "fssh", "rv", "amp", "history", "model", "grid", "star", "obs", "spotless", "intensities",
               "truth", "light_curve", "config", "extra"}
    more = {f.name for f in dataclasses.fields(InversionResult)} - context - set(scalars)
    known = set(scalars) | more
    bookkeeping = {"star", "grid_kind", "dopplermap_version", "format", "figures", "files", "complete",
                   "write_time", "plot_time", "save_time", "run_id", "input_fingerprint", "warnings"}
    extra = {k: v for k, v in summary.items() if k not in known and k not in bookkeeping}
    types = {"iterations": int, "n_eval": int, "success": bool, "regulariser": str, "stop_reason": str,
             "solver": str}
    scal = {}
    for a, v in scalars.items():  # summary.json is exact (FITS strips trailing blanks from strings)
        v = summary.get(a, v)
        scal[a] = float("nan") if v is None else types.get(a, float)(v)
    scal.update({a: summary[a] for a in more if a in summary})
    return InversionResult(
        fssc=fssc, fssh=fssh, rv=rv, amp=amp, history=history,
        model=model, spotless=spotless,
        grid=grid, star=star, obs=obs, intensities=intens, truth=truth, light_curve=light_curve,
        config=config, extra=extra, **scal)
