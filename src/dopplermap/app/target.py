"""``dopplermap invert``: the inversion a target configuration describes, into a result folder."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

import numpy as np

from .. import uncertainty as U
from ..atmosphere import CITATION, RESPONSE_SOURCES
from ..compiled import call_cached
from ..errors import DopplermapInputError
from ..errorscale import describe_all, summarise
from ..figure_process import FigureProcess
from ..io.results import prefetch_writers
from ..lightcurve import PHOTOMETRY_LIMITS, LightCurveFit, lightcurve_residuals
from ..memory import format_bytes
from ..plot import uncertainty_figures
from ..problem import from_config
from ..progress import Reporter
from ..search import apply_error_scale
from ..solvers import choose_solver, invert, photometry
from ..style import save_figure
from ..windows import WindowedLightCurve, windowed_lightcurve_models
from .folders import save_result, with_context
from .output import Output, Scheduling, output_options

__all__ = ["run_target", "summary_line", "error_scale_line", "estimate_line", "band_line", "band_values",
           "windows_line"]


def summary_line(s: dict) -> str:
    """The line ``dopplermap invert`` prints: chi2 (and each line data set's / band's), iterations, stop."""
    lc = f"  chi2(lc) {s['chi2_lc']:.4f}" if s.get("chi2_lc") is not None else ""
    sets = "".join(f"  chi2({k}) {v:.4f}" for k, v in (s.get("chi2_sets") or {}).items())
    sets += "".join(f"  chi2(lc {k}) {v:.4f}" for k, v in (s.get("chi2_lc_sets") or {}).items())
    dof = s.get("chi2_dof")
    if dof:
        sets += f" ({dof['chi2_nu']:.4f} per residual dof, {dof['p_eff']:.0f} effective parameters)"
    return (f"chi2 {s['chi2']:.4f}{lc}{sets}  iterations {s['iterations']}  {s['stop_reason']}  "
            f"solve {s['solve_time']:.2f} s")


def estimate_line(est: dict, n_cell: int, gauss_newton: bool = False) -> str:
    """The estimate of the light-curve model's cost printed before the solve; ``gauss_newton``:
    light curves alone solved by :mod:`dopplermap.solvers.photometry` (its own estimate)."""
    nodes = f" on {est['rows']} phase nodes" if est["nodes"] else ""
    solve = (f"Gauss-Newton, about {photometry.seconds(est['points'], n_cell):.2g} s" if gauss_newton
             else f"about {est['seconds']:.2g} s of the solve")
    return f"light curve: {est['points']} points{nodes} x {n_cell} cells: model about {format_bytes(est['bytes'])}, {solve}"


def error_scale_line(s: dict) -> str | None:
    """The line ``dopplermap invert`` prints about the error scale (None: errors as given)."""
    return describe_all(s.get("error_scale"))


def windows_line(s: dict, *, most: int = 8) -> str | None:
    """The line ``dopplermap invert`` prints about the time windows: their count, each one's
    span in days (the first and last ``most // 2`` of more than ``most``) and ``lmbd_time``
    (None: one static map)."""
    edges = s.get("window_edges")
    if not edges:
        return None
    def day(v):  # a Julian date keeps its hundredths of a day (6 digits would round it to 10 d)
        return f"{v:.2f}" if abs(v) >= 1e5 else f"{v:.6g}"

    spans = [f"{day(a)}-{day(b)}" for a, b in zip(edges[:-1], edges[1:], strict=True)]
    if len(spans) > most:
        spans = [*spans[:most // 2], f"... ({len(spans) - 2 * (most // 2)} more)", *spans[-(most // 2):]]
    lt = s.get("lmbd_time")
    coupling = f", lmbd_time {lt:g}" if lt is not None else ""
    if lt and s.get("time_coupling"):
        coupling += f" ({s['time_coupling']})"
    return f"time windows: {len(edges) - 1} ({', '.join(spans)} d){coupling}"


def band_values(cfg, lcds, grid) -> dict:
    """What the summary keeps of the light-curve bands (each component's limb darkening and
    intensity, and where they came from) and of the star's shape."""
    out = {}
    bands = []
    confs = {lc.name: lc for lc in cfg.lightcurves}
    for d in lcds:
        if d is None:
            continue
        conf = confs.get(d.name, cfg.lightcurve)
        table = conf.limb_darkening == "atmosphere"
        bands.append(dict(name=d.name, limb_darkening={c: [ld.law, *map(float, ld.coeffs)] for c, ld in
                                                       zip(("phot", "cool", "hot"), d.band.limb_darkening, strict=True)},
                          intensity=dict(zip(("phot", "cool", "hot"), map(float, d.band.intensity), strict=True)),
                          limb_darkening_source=CITATION if table else "given",
                          intensity_source=("given" if conf.intensity is not None else
                                            f"Planck over the {conf.passband} response: {RESPONSE_SOURCES[conf.passband]}"
                                            if conf.passband is not None
                                            else f"Planck at {conf.wavelength_nm:g} nm")))
    if bands:
        out["lc_bands"] = bands
    surf = grid.surface
    if surf is not None:
        out["shape"] = dict(kind="roche", mass_ratio=surf.q, nu=surf.nu, potential=surf.potential, fill=surf.fill,
                            r_max=float(surf.radius.max()), r_min=float(surf.radius.min()))
    return out


def band_line(s: dict) -> str | None:
    """The line ``dopplermap invert`` prints about the light-curve bands' numbers (None: no band)."""
    parts = []
    for b in s.get("lc_bands") or ():
        ld = "  ".join(f"{c} {v[0]}({', '.join(f'{x:.4f}' for x in v[1:])})" for c, v in b["limb_darkening"].items())
        inten = ", ".join(f"{c} {v:.4f}" for c, v in b["intensity"].items())
        parts.append(f"{b['name']}: limb darkening {ld}; intensity {inten}")
    return ("bands: " + " | ".join(parts)) if parts else None


def _uncertainty_writers(methods, problem, res, grid, *, n_boot: int = 20, seed: int = 0, plots: bool = True,
                        report=None, cluster=None):
    """Compute the requested uncertainties; return ``(writers, scalars)`` for :func:`save_result`.

    ``methods``: any of ``laplace`` (posterior width), ``sandwich`` and ``bootstrap``. The
    Laplace diagonal is chosen by size (:func:`dopplermap.uncertainty.laplace_cost`: exact
    dense, exact low-rank or Hutchinson); its cost estimate is shown before it starts and
    refused past the memory limit (``--max-memory``). rv and amp are marginalised where the
    map fitted them (the Hessian at unfitted offsets is not that of an optimum).
    Each method adds ``uncertainty_<name>.npz`` and, with ``plots``, one PNG per component.
    ``cluster``: a :class:`dopplermap.search.Cluster` for the bootstrap's refits (None: here).
    """
    # the tolerance the bootstrap's re-solves have always used, whatever the target's [inversion]
    problem = problem.replace(settings=problem.settings.replace(tol=1e-6, maxiter=1000))
    writers, scalars, uncs = [], {}, []
    for m in dict.fromkeys(methods):
        width = "posterior" if m == "laplace" else "sandwich"
        cost = None
        if m != "bootstrap":
            est = report.step(f"uncertainty ({m}): cost estimate") if report is not None else contextlib.nullcontext()
            with est:
                cost = U.laplace_cost(problem, res, width=width, measure=True)
            scalars[f"uncertainty_plan_{m}"] = cost.describe()
        name = f"uncertainty ({m})" if cost is None else f"uncertainty ({m}): {cost.describe()}"
        step = report.step(name) if report is not None else contextlib.nullcontext()
        with step:
            if m == "bootstrap":
                unc = U.bootstrap(problem, res, n_boot=n_boot, seed=seed, cluster=cluster)
            else:
                unc = U.laplace(problem, res, width=width, cost=cost)
                scalars[f"uncertainty_crossing_{m}"] = unc.n_crossing
        seen = ~unc.never_visible
        scalars[f"sigma_fssc_median_{m}"] = float(np.median(unc.sigma_fssc[seen])) if seen.any() else None
        scalars[f"sigma_fssh_median_{m}"] = float(np.median(unc.sigma_fssh[seen])) if seen.any() else None
        scalars[f"uncertainty_time_{m}"] = unc.time
        if unc.mode is not None:
            scalars[f"uncertainty_mode_{m}"] = unc.mode

        uncs.append(unc)
        writers.append(lambda folder, unc=unc: U.save_uncertainty(unc, folder))
    if plots and uncs:  # one colour scale over every method's figure (plot.uncertainty_figures)
        def draw(folder):
            for name, make in uncertainty_figures(with_context(res, grid=grid), uncs).items():
                save_figure(make(), folder / f"{name}.png")

        writers.append(draw)
    return writers, scalars


def run_target(cfg, out: Path, *, output: Output | None = None, config_file=None, uncertainty=None,
               overrides=None, scheduling: Scheduling | None = None, **loose) -> dict:
    """Run the inversion a target config describes and write a result folder at ``out``.

    The folder is the standard one of :func:`dopplermap.io.results.save_result` (map.fits,
    profiles.fits with the light curve of a joint fit, config.json, a copy of the TOML
    file, summary.json and, unless ``output.plots`` is False, the figures), plus the uncertainty
    maps of ``[uncertainty] methods`` (or of ``uncertainty``, a list overriding them; see
    :func:`_uncertainty_writers`; with a light curve they cover the line profiles only; of light
    curves alone, Laplace and sandwich only).
    ``output`` (:class:`~dopplermap.app.output.Output`): figures, progress, report, overwriting
    and the figure process; its fields may also be given as loose keywords (``plots=False``).
    ``scheduling`` (:class:`~dopplermap.app.output.Scheduling`): where the bootstrap's refits
    run (default here). Returns the summary written.
    """
    opts = output_options("run_target", output, loose)
    plots, quiet, report, overwrite = opts.plots, opts.quiet, opts.report, opts.overwrite
    # matplotlib loads in a child on another core meanwhile (it exits on its own if unused)
    figs = opts.figure_process if opts.figure_process is not None or not plots else FigureProcess()
    t0 = time.perf_counter()
    methods = tuple(cfg.uncertainty.methods if uncertainty is None else uncertainty)
    if methods and cfg.map.windowed:  # before any work
        raise DopplermapInputError(f"{cfg.source}: [uncertainty] methods {list(methods)} handle one static map; "
                                   "this target has time windows ([map]): set methods = []")
    if methods and cfg.lines and len(cfg.lines) > 1:  # before any work
        raise DopplermapInputError(f"{cfg.source}: [uncertainty] methods {list(methods)} handle one line data set; "
                                   f"this target has {len(cfg.lines)} ([[lines]]): set methods = []")
    if "bootstrap" in methods and cfg.photometry_only:
        raise DopplermapInputError(f"{cfg.source}: [uncertainty] method 'bootstrap' resamples line-profile epochs; this "
                                   "target has light curves alone: use laplace or sandwich")
    cluster = None if scheduling is None or "bootstrap" not in methods else scheduling.cluster()  # before any work
    inv = cfg.inversion
    with Reporter(quiet=quiet) as rep:
        with rep.step("read + precompute"):
            prob = from_config(cfg)
            est = prob.lightcurve_estimate()
            if est is not None:  # before the light-curve model is built (its size guard refuses past the limit)
                st = prob.settings
                gn = (prob.photometry_only and st.solver in ("auto", "newton")
                      and photometry.why_not_of(prob.n_window, est["points"], st.regulariser, st.lmbd) is None)
                rep.note(estimate_line(est, prob.grid.n_cell, gauss_newton=gn))
            pre, lc = prob.pre, prob.lightcurve  # built here, once
        if any(e.pending for e in prob.error_scale):  # [data] error_scale from the residuals of a fit
            with rep.step("error scale (4 fits)"):
                prob = apply_error_scale(prob)
        t_setup = time.perf_counter() - t0
        # astropy's FITS writer (and what the figures drawn here and the report need) loads in a thread
        # during the solve, which runs without the GIL; during set-up (NumPy) it would slow it
        prefetch_writers(plots and figs is None, report=report)
        with rep.solve("compile + solve", maxiter=inv.maxiter) as callback:
            # live progress from the host loops only (scipy's; Gauss-Newton on light curves alone): a
            # compiled loop that calls back to the host is not kept in JAX's persistent compilation cache
            live = choose_solver(prob) == "lbfgsb" or prob.photometry_only
            res = invert(prob, callback=callback if live else None)
            if not live:
                callback(res.iterations, {"loss": [res.loss], "chi2": [res.chi2]})
        dof = None
        if any(not e.pending for e in prob.error_scale) and U.effective_dof_refusal(prob, res.regulariser) is None:
            # errors scaled to the noise: say what chi2 to read against 1 (the map absorbs part of the noise)
            with rep.step("effective degrees of freedom"):
                dof = U.effective_dof(prob, res)
        grid, obs = prob.grid, prob.observations
        light_curve = None
        if lc is not None:
            fssc, fssh = np.asarray(res.fssc, dtype=np.float64), np.asarray(res.fssh, dtype=np.float64)

            def band(b, name=None):
                # the model as fitted (with the segments' scales and the dilution): obs - residual x err
                resid = np.asarray(call_cached("lightcurve_residuals", lightcurve_residuals, fssc, fssh, b))
                out = {"times": np.asarray(b.times), "flux": np.asarray(b.flux), "err": np.asarray(b.err),
                       "model": np.asarray(b.flux) - resid * np.asarray(b.err)}
                return out if name is None else {"name": name, **out}

            if isinstance(lc, WindowedLightCurve):  # each point from its window's map
                models = windowed_lightcurve_models(fssc, fssh, lc)
                fits = [b for b, _ in lc.bands()]
                named = [{"times": np.asarray(b.times), "flux": np.asarray(b.flux), "err": np.asarray(b.err),
                          "model": np.asarray(m)} for b, m in zip(fits, models, strict=True)]
                light_curve = (named[0] if isinstance(lc.fit, LightCurveFit) else
                               tuple({"name": n, **d} for n, d in zip(lc.fit.names, named, strict=True)))
            else:
                light_curve = (band(lc) if isinstance(lc, LightCurveFit)
                               else tuple(band(b, n) for b, n in zip(lc.bands, lc.names, strict=True)))
        methods = tuple(cfg.uncertainty.methods if uncertainty is None else uncertainty)
        writers, unc_scalars = _uncertainty_writers(methods, prob, res, grid, n_boot=cfg.uncertainty.n_boot,
                                                   seed=cfg.uncertainty.seed, plots=plots, report=rep,
                                                   cluster=cluster)
        if methods and lc is not None:
            unc_scalars["uncertainty_note"] = "line profiles only (the light curve is not part of the uncertainty)"
        config = {"command": "invert", **dataclasses.asdict(cfg), "overrides": dict(overrides or {})}
        sets = cfg.line_sets()
        if prob.photometry_only:  # no line profiles: say what the map can and cannot tell
            per_set = {"n_epoch": 0, "n_vel": None, "method": None, "macroturbulence": None,
                       "constraints": PHOTOMETRY_LIMITS}
        elif prob.multi:  # per set: epochs, velocities, synthesis method, macroturbulence
            per_set = {"n_epoch": sum(o.n_epoch for o in obs), "n_vel": None,
                       "method": ",".join(dict.fromkeys(p.line.kind for p in pre.sets)),
                       "macroturbulence": None,
                       "line_sets": [dict(name=ls.name, weight=ls.weight, n_epoch=o.n_epoch, n_vel=o.n_vel,
                                          method=p.line.kind, macroturbulence=ls.line.macroturbulence,
                                          resolving_power=ls.line.resolving_power)
                                     for ls, o, p in zip(sets, obs, pre.sets, strict=True)]}
        else:
            per_set = {"n_epoch": obs.n_epoch, "n_vel": obs.n_vel, "method": pre.line.kind,
                       "macroturbulence": sets[0].line.macroturbulence}
        extra = dict(target=cfg.source, n_files=len(prob.files), n_cell=grid.n_cell, subdivide=prob.subdivide,
                     **per_set,
                     error_scale=summarise(prob.error_scale),
                     chi2_dof=None if dof is None else {"chi2": dof.chi2, **dof.to_dict()},
                     n_lc=None if lc is None else lc.n_lc, gravity_darkening=cfg.gravity_darkening.enabled,
                     lc_estimate=None if est is None else {k: float(v) for k, v in est.items()},
                     plan=prob.plan.describe(), setup_time=t_setup, total_time=time.perf_counter() - t0,
                     **unc_scalars)
        if prob.windows is not None:
            extra["windows"] = prob.windows.describe()
            extra["time_coupling"] = cfg.map.time_coupling
        lcds = prob.lightcurve_data if isinstance(prob.lightcurve_data, tuple) else (prob.lightcurve_data,)
        extra.update(band_values(cfg, lcds, grid))
        reads = [d.read for d in lcds if d is not None and d.read is not None]
        if len(reads) == 1:  # what was read, dropped and binned, for the summary and the screen
            lcd = reads[0]
            extra.update(lc_cadences=lcd.n_read if lcd.n_read is not None else lcd.n_points,
                         lc_dropped_quality=lcd.n_quality, lc_dropped_by_flag=dict(lcd.dropped_by_flag),
                         lc_quality_bitmask=lcd.quality_bitmask, lc_dropped_nan=lcd.n_invalid, lc_points=lcd.n_points,
                         lc_segments=[dict(sg) for sg in lcd.segments] or None, lc_gaps_days=lcd.gaps or None,
                         lc_note=(f"{lcds[0].name}: " if len(lcds) > 1 else "") + lcd.describe())
        elif reads:
            extra.update(lc_points=sum(r.n_points for r in reads),
                         lc_note="; ".join(f"{d.name}: {d.read.describe()}" for d in lcds),
                         lc_reads=[dict(name=d.name, cadences=d.read.n_read if d.read.n_read is not None else
                                        d.read.n_points, dropped_quality=d.read.n_quality,
                                        dropped_by_flag=dict(d.read.dropped_by_flag),
                                        quality_bitmask=d.read.quality_bitmask, dropped_nan=d.read.n_invalid,
                                        points=d.read.n_points, segments=[dict(sg) for sg in d.read.segments] or None,
                                        gaps_days=d.read.gaps or None) for d in lcds if d.read is not None])
        with rep.step("write results" + (" + figures" if plots else "")):
            res = with_context(res, grid=grid, star=prob.star, obs=obs, pre=pre, light_curve=light_curve, config=config,
                               extra=extra)
            summary = save_result(res, out, plots=plots, config_file=config_file, extra_writers=writers,
                                  overwrite=overwrite, report=report, figure_process=figs)
    return summary
