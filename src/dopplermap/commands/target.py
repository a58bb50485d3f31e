"""``dopplermap init`` (write a commented target template) and ``dopplermap invert TARGET``."""

from __future__ import annotations

import contextlib
import glob
import time
from pathlib import Path

import click
import numpy as np

from ..errors import DopplermapInputError

__all__ = ["build_problem", "run_target", "register"]


def _components(cfg):
    """Line-band components; with macroturbulence their profiles are :class:`MuProfile` tables
    (RT macroturbulence and instrument, depending on mu), which :func:`dopplermap.precompute`
    handles with either method."""
    from ..broadening import instrumental_broaden, mu_dependent_profile, scale_equivalent_width
    from ..io.lsd import read_local_profile
    from ..profiles import Component, ComponentSet, LimbDarkening, gaussian, intensity_ratio, voigt

    ln, temps = cfg.line, cfg.temperatures
    if ln.profile == "tabulated":
        profiles = [read_local_profile(cfg.path(f)) for f in ln.files]
    elif ln.profile == "gaussian":
        profiles = [gaussian(d, ln.fwhm) for d in ln.depth]
    else:
        profiles = [voigt(d, ln.fwhm, ln.fwhm_lorentz) for d in ln.depth]
    if ln.equivalent_width is not None:
        profiles = [scale_equivalent_width(p, ln.equivalent_width) for p in profiles]
    if ln.macroturbulence > 0:
        profiles = [mu_dependent_profile(p, ln.macroturbulence, resolving_power=ln.resolving_power,
                                         radial_fraction=ln.radial_fraction) for p in profiles]
    elif ln.resolving_power is not None:
        profiles = [instrumental_broaden(p, ln.resolving_power) for p in profiles]
    t = (temps.phot, temps.cool, temps.hot)
    inten = ln.intensity or tuple(intensity_ratio(x, temps.phot, ln.wavelength_nm) for x in t)
    lds = [LimbDarkening(ln.limb_darkening, c) for c in (ln.ld_phot, ln.ld_cool, ln.ld_hot)]
    return ComponentSet(*[Component(p, ld, i) for p, ld, i in zip(profiles, lds, inten, strict=True)])


def _profile_files(cfg):
    files = []
    for pat in cfg.data.profiles:
        full = str(cfg.path(pat))
        hits = sorted(glob.glob(full)) if glob.has_magic(full) else ([full] if Path(full).is_file() else [])
        if not hits:
            raise DopplermapInputError(f"{cfg.source}: [data] profiles: nothing matches {pat!r} (looked for {full})")
        files.extend(hits)
    if len(set(files)) != len(files):
        raise DopplermapInputError(f"{cfg.source}: [data] profiles: some files are matched by more than one pattern")
    return files


def build_problem(cfg):
    """Everything :func:`dopplermap.invert` needs for a :class:`~dopplermap.config.TargetConfig`.

    Returns a dict with ``star, grid, obs, pre, components, lightcurve`` (None without one),
    ``cell_factors`` (None when gravity darkening is off) and ``files``.
    """
    from ..broadening import apply_cell_factors
    from ..geometry import StarParams
    from ..grid import make_grid
    from ..io.lsd import load_observations, read_lsd
    from ..model import precompute

    files = _profile_files(cfg)
    d = cfg.data
    vels = None
    if d.velocity_range is not None:
        v0 = read_lsd(files[0], d.format).vels
        vels = v0[(v0 >= d.velocity_range[0]) & (v0 <= d.velocity_range[1])]
        if vels.size < 3:
            raise DopplermapInputError(f"{cfg.source}: [data] velocity_range {list(d.velocity_range)} keeps {vels.size} points of {files[0]}")
    obs = load_observations(files, times_table=cfg.path(d.times_table) if d.times_table else None,
                            time_pattern=d.time_pattern, vels=vels, fmt=d.format, normalise=True)
    s = cfg.star
    star = StarParams(inclination=s.inclination, vsini=s.vsini, period=s.period, t0=s.t0, domega=s.domega,
                      radius=s.radius)
    grid = make_grid(cfg.grid.kind, cfg.grid.n_cell, cfg.grid.nside)
    comps = _components(cfg)
    pre = precompute(grid, star, np.asarray(obs.times), np.asarray(obs.vels), comps, method=cfg.inversion.method)
    temps = (cfg.temperatures.phot, cfg.temperatures.cool, cfg.temperatures.hot)
    factors = lc_factors = None
    if cfg.gravity_darkening.enabled:
        from ..gravity import gravity_darkening_factors

        factors = gravity_darkening_factors(grid, star, s.mass, temps, cfg.line.wavelength_nm, cfg.gravity_darkening.beta)
        lc_factors = gravity_darkening_factors(grid, star, s.mass, temps, cfg.lightcurve.wavelength_nm,
                                               cfg.gravity_darkening.beta)
        pre = apply_cell_factors(pre, factors)
    lc = None
    if d.lightcurve is not None:
        from ..io.lightcurve import read_lightcurve
        from ..lightcurve import LightCurveBand, precompute_lightcurve
        from ..profiles import LimbDarkening

        lcc = cfg.lightcurve
        lds = [LimbDarkening(lcc.limb_darkening, c) for c in (lcc.ld_phot, lcc.ld_cool, lcc.ld_hot)]
        band = (LightCurveBand(tuple(lds), tuple(lcc.intensity)) if lcc.intensity is not None
                else LightCurveBand.from_temperatures(*temps, lcc.wavelength_nm, lds))
        data = read_lightcurve(cfg.path(d.lightcurve), d.lightcurve_format)
        lc = precompute_lightcurve(grid, star, data.time, data.flux, data.err, band, cell_factors=lc_factors,
                                   source=data.source, fit_dilution=lcc.fit_dilution)
    return dict(star=star, grid=grid, obs=obs, pre=pre, components=comps, lightcurve=lc, cell_factors=factors,
                files=files)


def uncertainty_writers(methods, pre, obs, res, grid, *, n_boot: int = 20, seed: int = 0, plots: bool = True,
                        report=None):
    """Compute the requested uncertainties; return ``(writers, scalars)`` for :func:`save_result`.

    ``methods``: any of ``laplace`` (posterior width), ``sandwich`` and ``bootstrap``. The
    Laplace diagonal is exact (dense Hessian) up to 3000 free parameters, Hutchinson beyond.
    Each method adds ``uncertainty_<name>.npz`` and, with ``plots``, one PNG per component.
    """
    from .. import uncertainty as U

    writers, scalars = [], {}
    hutch = 2 * pre.n_cell + 2 * pre.n_epoch > 3000
    for m in dict.fromkeys(methods):
        step = report.step(f"uncertainty ({m})") if report is not None else contextlib.nullcontext()
        with step:
            if m == "bootstrap":
                unc = U.bootstrap(pre, obs, res, n_boot=n_boot, seed=seed)
            else:
                unc = U.laplace(pre, obs, res, kind="posterior" if m == "laplace" else "sandwich",
                                method="hutchinson" if hutch else "dense")
        seen = ~unc.never_visible
        scalars[f"sigma_fssc_median_{m}"] = float(np.median(unc.sigma_fssc[seen])) if seen.any() else None
        scalars[f"sigma_fssh_median_{m}"] = float(np.median(unc.sigma_fssh[seen])) if seen.any() else None
        scalars[f"uncertainty_time_{m}"] = unc.time

        def write(folder, unc=unc):
            path = U.save_uncertainty(unc, folder)
            if plots:
                for comp, fill in (("cool", res.fssc), ("hot", res.fssh)):
                    U.plot_uncertainty(grid, fill, unc, folder / f"{path.stem}_{comp}.png", component=comp)

        writers.append(write)
    return writers, scalars


def run_target(cfg, out: Path, *, plots: bool = True, quiet: bool = True, config_file=None,
               uncertainty=None, overwrite: bool = True) -> dict:
    """Run the inversion a target config describes and write a result folder at ``out``.

    The folder is the standard one of :func:`dopplermap.io.results.save_result` (map.fits,
    profiles.fits with the light curve of a joint fit, config.json, a copy of the TOML
    file, summary.json and, unless ``plots`` is False, the figures), plus the uncertainty
    maps of ``[uncertainty] methods`` (or of ``uncertainty``, a list overriding them; see
    :func:`uncertainty_writers`; with a light curve they cover the line profiles only).
    Progress goes to stderr unless ``quiet``. Returns the summary written.
    """
    import dataclasses

    import jax.numpy as jnp

    from ..io.results import prefetch_writers, save_result, with_context
    from ..lightcurve import lightcurve_model
    from ..progress import Reporter
    from ..solvers import invert

    t0 = time.perf_counter()
    prefetch_writers(plots)  # imports overlap with set-up / compile / solve
    inv = cfg.inversion
    with Reporter(quiet=quiet) as rep:
        with rep.step("read + precompute"):
            prob = build_problem(cfg)
        t_setup = time.perf_counter() - t0
        with rep.solve("compile + solve", maxiter=inv.maxiter) as callback:
            res = invert(prob["pre"], prob["obs"], lmbd=inv.lmbd, regulariser=inv.regulariser, tol=inv.tol,
                         maxiter=inv.maxiter, fit_rv=inv.fit_rv, fit_amp=inv.fit_amp, lightcurve=prob["lightcurve"],
                         line_weight=inv.line_weight, lc_weight=inv.lc_weight, callback=callback, solver=inv.solver)
        grid, obs, lc = prob["grid"], prob["obs"], prob["lightcurve"]
        light_curve = None
        if lc is not None:
            model = lightcurve_model(jnp.asarray(res.fssc), jnp.asarray(res.fssh), lc)
            light_curve = {"times": np.asarray(lc.times), "flux": np.asarray(lc.flux), "err": np.asarray(lc.err),
                           "model": np.asarray(model)}
        methods = tuple(cfg.uncertainty.methods if uncertainty is None else uncertainty)
        writers, unc_scalars = uncertainty_writers(methods, prob["pre"], obs, res, grid, n_boot=cfg.uncertainty.n_boot,
                                                   seed=cfg.uncertainty.seed, plots=plots, report=rep)
        if methods and lc is not None:
            unc_scalars["uncertainty_note"] = "line profiles only (the light curve is not part of the uncertainty)"
        config = {"command": "invert", **dataclasses.asdict(cfg)}
        extra = dict(target=cfg.source, n_files=len(prob["files"]), n_cell=grid.n_cell, n_epoch=obs.n_epoch,
                     n_vel=obs.n_vel, n_lc=None if lc is None else lc.n_lc, method=prob["pre"].line.method,
                     macroturbulence=cfg.line.macroturbulence, gravity_darkening=cfg.gravity_darkening.enabled,
                     setup_time=t_setup, total_time=time.perf_counter() - t0, **unc_scalars)
        with rep.step("write results" + (" + figures" if plots else "")):
            res = with_context(res, grid=grid, star=prob["star"], obs=obs, pre=prob["pre"],
                               components=prob["components"], light_curve=light_curve, config=config, extra=extra)
            summary = save_result(res, out, plots=plots, config_file=config_file, extra_writers=writers,
                                  overwrite=overwrite)
    return summary


def register(group):
    @group.command()
    @click.argument("path", type=click.Path(dir_okay=False, path_type=Path), default=Path("target.toml"))
    @click.option("--force", "--overwrite", "force", is_flag=True, help="Overwrite an existing file.")
    def init(path, force):
        """Write a commented target-configuration template to PATH (default target.toml)."""
        from ..atomic import check_out_file, write_text
        from ..config import TEMPLATE

        check_out_file(path, overwrite=force, option="PATH", flag="--force")
        write_text(path, TEMPLATE)
        click.echo(f"wrote {path}; edit it, then run: dopplermap invert {path} --out results")

    @group.command()
    @click.argument("target", type=click.Path(dir_okay=False, path_type=Path))
    @click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
                  show_default=True, help="Output folder (an earlier result there is replaced only with --overwrite).")
    @click.option("--overwrite", is_flag=True, help="Replace an earlier result in --out.")
    @click.option("-q", "--quiet", is_flag=True, help="No progress display.")
    @click.option("--no-plots", is_flag=True, help="Skip the figures.")
    @click.option("--uncertainty", "uncertainty", multiple=True,
                  type=click.Choice(["laplace", "sandwich", "bootstrap"]),
                  help="Also write per-cell uncertainty maps (repeatable; overrides [uncertainty] methods).")
    def invert(target, out, overwrite, quiet, no_plots, uncertainty):
        """Map the star described by the TOML file TARGET; write a result folder to --out."""
        from ..atomic import check_out
        from ..cli import exit_status
        from ..config import load_config
        from ..io.results import _is_result_dir

        cfg = load_config(target)
        check_out(out, "result", overwrite=overwrite, legacy=_is_result_dir)  # before any work
        s = run_target(cfg, out, plots=not no_plots, quiet=quiet, config_file=target,
                       uncertainty=list(uncertainty) if uncertainty else None, overwrite=overwrite)
        lc = f"  chi2(lc) {s['chi2_lc']:.4f}" if s.get("chi2_lc") is not None else ""
        click.echo(f"chi2 {s['chi2']:.4f}{lc}  iterations {s['iterations']}  {s['stop_reason']}  "
                   f"solve {s['solve_time']:.2f} s")
        click.echo(f"results in {out}")
        return exit_status(s)
