"""``dopplermap invert-seed``, ``convert`` and ``simulate``: the seed's problem files.

* ``invert-seed`` solves the seed's problem (three pickles, or a converted ``.npz``) and
  writes ``summary.json``, ``result.npz`` and figures to ``--out``.
* ``convert`` writes the three pickles to a safe ``.npz`` problem file.
* ``simulate`` makes a spotted-star problem at the seed's size, as an ``.npz`` problem
  (default) or as seed-format pickles, plus ``truth.npz``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
import numpy as np

from ..choices import SIMULATION_FORMATS
from ..errors import DopplermapInputError

_PATH = click.Path(dir_okay=False, path_type=Path)


def _load_arguments(idc, sg, cpcs, problem):
    picks = [p for p in (idc, sg, cpcs) if p is not None]
    if problem is not None and picks:
        raise DopplermapInputError("give either --problem FILE.npz or --idc/--sg/--cpcs, not both")
    if problem is None and len(picks) != 3:
        missing = [n for n, p in (("--idc", idc), ("--sg", sg), ("--cpcs", cpcs)) if p is None]
        raise DopplermapInputError(f"missing {', '.join(missing)}: the seed's problem needs all three pickles "
                         "(or --problem FILE.npz from `dopplermap convert`)")


def _load(idc, sg, cpcs, problem, trust_pickle):
    _load_arguments(idc, sg, cpcs, problem)
    if problem is not None:
        from ..io.seed import load_problem

        return load_problem(problem)
    from ..io.seed import read_seed  # after the argument checks: they answer without JAX

    return read_seed(idc, sg, cpcs, trust_pickle=trust_pickle)


def _write_json(path: Path, obj) -> None:
    from ..atomic import write_json

    write_json(path, obj)


def _write_npz(path: Path, **arrays) -> None:
    from ..atomic import write_file

    write_file(path, lambda fh: np.savez(fh, **arrays))


def _is_seed_result(folder: Path) -> bool:
    """An ``invert-seed`` folder written before manifests existed."""
    try:
        return "loss_definition" in json.loads((folder / "summary.json").read_text()) and (folder / "result.npz").is_file()
    except (OSError, ValueError, TypeError):
        return False


def seed_figure_arrays(problem, res) -> dict:
    """What the figures of a seed inversion draw, as plain NumPy arrays (picklable without JAX)."""
    obs = problem.obs
    return dict(fssc=np.asarray(res.fssc), fssh=np.asarray(res.fssh), model=np.asarray(res.model),
                flux=np.asarray(obs.flux), err=np.asarray(obs.err), vels=np.asarray(obs.vels), chi2=float(res.chi2),
                lat=None if problem.lat is None else np.asarray(problem.lat),
                lon=None if problem.lon is None else np.asarray(problem.lon))


def _inch_axes(fig, x0, y0, w, h):
    """Axes at (x0, y0) with size w x h, in inches: a fixed layout (no layout engine to run)."""
    fw, fh = fig.get_size_inches()
    return fig.add_axes((x0 / fw, y0 / fh, w / fw, h / fh))


def _filling_figure(fssc, fssh, lat, lon, **_):
    from .. import style

    fig = style.new_figure(style.TWO_COLUMN, 5.5)
    w = style.TWO_COLUMN
    with style.context():
        for row, (f, name, quantity) in enumerate(((fssc, "cool-spot filling factor fssc", "cool"),
                                                   (fssh, "hot-spot filling factor fssh", "hot"))):
            ax = _inch_axes(fig, 0.75, 3.15 - 2.7 * row, w - 2.1 if lat is not None else w - 1.05, 2.0)
            if lat is not None:
                # markers filled to the size the default edge stroke gave (s=6, 1 pt): 30 % faster to draw
                sc = ax.scatter(np.degrees(np.mod(lon, 2 * np.pi)), np.degrees(lat), c=f, s=12, linewidths=0,
                                cmap=style.cmap(quantity), vmin=0, vmax=max(float(f.max()), 1e-3))
                ax.set(xlim=(0, 360), ylim=(-90, 90), xlabel="longitude (deg)", ylabel="latitude (deg)", title=name)
                fig.colorbar(sc, cax=_inch_axes(fig, w - 1.2, 3.15 - 2.7 * row, 0.12, 2.0), label=style.LABELS[quantity])
            else:
                ax.plot(np.arange(f.size), f, lw=0.6, color="k")
                ax.set(xlabel="cell index (no coordinates in the input: not a map)", ylabel="filling factor",
                       title=name, xlim=(0, f.size - 1))
    return fig


def _residual_figure(flux, err, vels, model, chi2, **_):
    from .. import style

    resid = (flux - model) / err
    fig = style.new_figure(style.TWO_COLUMN, 3.8)
    panel = (style.TWO_COLUMN - 2.6) / 2
    with style.context():
        ext = (vels[0], vels[-1], flux.shape[0] - 0.5, -0.5)
        lim = float(np.percentile(np.abs(resid), 99)) or 1.0
        for i, (img, title, kw, label) in enumerate((
                (flux, "observed profiles", dict(cmap="gray"), "normalised intensity"),
                (resid, f"(obs − model) / err, χ² = {chi2:.3f}",
                 dict(cmap=style.cmap("difference"), vmin=-lim, vmax=lim), "residual (σ)"))):
            x0 = 0.6 + i * (panel + 1.25)
            ax = _inch_axes(fig, x0, 0.55, panel, 2.9)
            im = ax.imshow(img, aspect="auto", extent=ext, **kw)
            ax.set(xlabel="velocity (km/s)", ylabel="epoch index" if i == 0 else None, title=title)
            fig.colorbar(im, cax=_inch_axes(fig, x0 + panel + 0.1, 0.55, 0.1, 2.9), label=label)
    return fig


def plot_seed_figures(out, arrays: dict) -> list[Path]:
    """Figures of a seed inversion (arrays of :func:`seed_figure_arrays`) into the folder ``out``:
    filling factors (a map with cell coordinates, else per cell index) and the normalised
    residuals. Returns the written paths."""
    from .. import style

    return style.save_figures({"filling_factors": lambda: _filling_figure(**arrays),
                               "residuals": lambda: _residual_figure(**arrays)}, out)


def plot_seed_result(problem, res, out: Path) -> list[Path]:
    """:func:`plot_seed_figures` of a :class:`~dopplermap.io.seed.SeedProblem` and its result."""
    return plot_seed_figures(out, seed_figure_arrays(problem, res))


def run_invert_seed(problem, out: Path, *, lmbd: float, tol: float, maxiter: int, quiet: bool, plots: bool,
                    read_time: float = 0.0, overwrite: bool = True, figure_process=None) -> dict:
    """Invert a :class:`~dopplermap.io.seed.SeedProblem` and write the results to ``out``.

    The problem is solved as a :class:`dopplermap.problem.Problem` (:func:`~dopplermap.problem.from_seed`)
    by :func:`dopplermap.invert`. ``out`` is written as one atomic folder
    (:class:`dopplermap.atomic.AtomicFolder`, kind ``seed-result``): ``result.npz``, the
    figures, ``summary.json`` and the manifest, all carrying one run id; a kill leaves the
    previous folder or the complete new one. The figures are drawn by ``figure_process`` (a
    :class:`dopplermap.figure_process.FigureProcess` started with
    ``preload=("dopplermap.commands.seed",)``) while the result file is written, or here.
    """
    from ..atomic import AtomicFolder, check_out, fingerprint
    from ..errors import active_warnings
    from ..figure_process import submit
    from ..problem import Settings, from_seed
    from ..solvers import invert

    check_out(out, "seed-result", overwrite=overwrite, legacy=_is_seed_result)
    t0 = time.perf_counter()

    def progress(it, hist):
        if not quiet and it % 25 == 0:
            click.echo(f"  iteration {it:4d}  loss {hist['loss'][-1]:.8g}", err=True)

    prob = from_seed(problem, settings=Settings(lmbd=lmbd, regulariser="mem", tol=tol, maxiter=maxiter))
    res = invert(prob, callback=progress)
    total = time.perf_counter() - t0 + read_time
    obs = problem.obs
    inputs = fingerprint((obs.times, obs.vels, obs.flux, obs.err), problem.pre.cell_area,
                         {"lmbd": lmbd, "tol": tol, "maxiter": maxiter, "regulariser": "mem"})
    summary = dict(res.summary(), entropy=res.regulariser_value, read_time=read_time, total_time=total,
                   n_cell=problem.n_cell, n_epoch=problem.n_epoch, n_vel=problem.n_vel,
                   n_visible_min=int(problem.n_visible.min()), n_visible_max=int(problem.n_visible.max()),
                   has_coordinates=problem.has_coordinates, source=problem.source,
                   loss_definition="chi2/(n_epoch n_vel) + lmbd * seed MEM (the seed's loss)")
    with AtomicFolder(out, "seed-result", overwrite=overwrite, inputs=inputs, legacy=_is_seed_result) as folder:
        arrays = dict(fssc=res.fssc, fssh=res.fssh, fssp=res.fssp, rv=res.rv, amp=res.amp, model=res.model,
                      flux=np.asarray(obs.flux), err=np.asarray(obs.err), vels=np.asarray(obs.vels),
                      labels=np.array(problem.labels, dtype=str), run_id=np.array(folder.run_id),
                      history_loss=res.history.get("loss", np.zeros(0)),
                      history_chi2=res.history.get("chi2", np.zeros(0)))
        if problem.has_coordinates:
            arrays.update(lat=problem.lat, lon=problem.lon)
        if plots:
            figures = submit(figure_process, "dopplermap.commands.seed:plot_seed_figures", folder.tmp,
                             seed_figure_arrays(problem, res))
        folder.write("result.npz", lambda p: _write_npz(p, **arrays))
        if plots:
            summary["figures"] = [p.name for p in figures()]
            folder.wrote()
            if not problem.has_coordinates:
                summary["figure_note"] = ("no cell coordinates in the input (sg has no grid_lats/grid_longs): "
                                          "filling factor drawn per cell index")
        summary.update(run_id=folder.run_id, input_fingerprint=inputs, warnings=active_warnings(), complete=True)
        folder.write("summary.json", lambda p: _write_json(p, summary))
    return summary


def register(group):
    @group.command("invert-seed")
    @click.option("--idc", type=_PATH, help="The seed's idc pickle (observations).")
    @click.option("--sg", type=_PATH, help="The seed's sg pickle (surface grid).")
    @click.option("--cpcs", type=_PATH, help="The seed's cpcs pickle (per-epoch coefficients).")
    @click.option("--problem", type=_PATH, help="A .npz problem from `dopplermap convert` (instead of pickles).")
    @click.option("--trust-pickle", is_flag=True,
                  help="Allow unpickling (it can run code from the files): only for files you trust.")
    @click.option("--lmbd", type=click.FloatRange(min=0), default=1.0, show_default=True,
                  help="Regularisation weight lambda.")
    @click.option("--tol", type=click.FloatRange(min=0, min_open=True), default=1e-5, show_default=True,
                  help="L-BFGS-B ftol/gtol (the seed's).")
    @click.option("--maxiter", type=click.IntRange(min=1), default=1000, show_default=True, help="Iteration cap.")
    @click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("seed-out"),
                  show_default=True, help="Output folder (an earlier result there is replaced only with --overwrite).")
    @click.option("--overwrite", is_flag=True, help="Replace an earlier invert-seed result in --out.")
    @click.option("-q", "--quiet", is_flag=True, help="No progress display.")
    @click.option("--no-plots", is_flag=True, help="Skip the figures.")
    def invert_seed(idc, sg, cpcs, problem, trust_pickle, lmbd, tol, maxiter, out, overwrite, quiet, no_plots):
        """Solve the seed's problem (idc/sg/cpcs pickles or a converted .npz) with the seed's loss."""
        import contextlib

        from ..atomic import check_out
        from ..cli import exit_status
        from ..figure_process import FigureProcess

        check_out(out, "seed-result", overwrite=overwrite, legacy=_is_seed_result)  # before any work
        _load_arguments(idc, sg, cpcs, problem)
        t0 = time.perf_counter()
        # matplotlib loads in a child on another core while this process reads and solves
        with FigureProcess(preload=("dopplermap.commands.seed",)) if not no_plots else contextlib.nullcontext() as figs:
            prob = _load(idc, sg, cpcs, problem, trust_pickle)
            read_time = time.perf_counter() - t0
            if not quiet:
                click.echo(f"read {prob.n_epoch} epochs x {prob.n_vel} velocities, {prob.n_cell} cells "
                           f"({prob.n_visible.min()}-{prob.n_visible.max()} visible) in {read_time:.2f} s", err=True)
            s = run_invert_seed(prob, out, lmbd=lmbd, tol=tol, maxiter=maxiter, quiet=quiet, plots=not no_plots,
                                read_time=read_time, overwrite=overwrite, figure_process=figs)
        click.echo(f"loss {s['loss']:.10g}  chi2 {s['chi2']:.6g}  entropy {s['entropy']:.6g}  "
                   f"iterations {s['iterations']}  compile {s['compile_time']:.2f} s  solve {s['solve_time']:.2f} s")
        if not no_plots and not prob.has_coordinates:
            click.echo("note: the input has no cell coordinates; filling factors are drawn per cell index, not as a map")
        click.echo(f"results in {out}")
        return exit_status(s)

    @group.command("convert")
    @click.option("--idc", type=_PATH, required=True, help="The seed's idc pickle.")
    @click.option("--sg", type=_PATH, required=True, help="The seed's sg pickle.")
    @click.option("--cpcs", type=_PATH, required=True, help="The seed's cpcs pickle.")
    @click.option("--trust-pickle", is_flag=True,
                  help="Allow unpickling (it can run code from the files): only for files you trust.")
    @click.option("--out", type=_PATH, required=True, help="Output .npz problem file.")
    @click.option("--overwrite", is_flag=True, help="Replace an existing --out file.")
    def convert(idc, sg, cpcs, trust_pickle, out, overwrite):
        """Convert the seed's pickles to a safe .npz problem file (read later without --trust-pickle)."""
        from ..atomic import check_out_file
        from ..io.seed import read_seed, save_problem

        check_out_file(out, overwrite=overwrite)  # before any work

        prob = read_seed(idc, sg, cpcs, trust_pickle=trust_pickle)
        save_problem(out, prob)
        click.echo(f"wrote {out}: {prob.n_epoch} epochs x {prob.n_vel} velocities, {prob.n_cell} cells")

    @group.command("simulate")
    @click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("sim-out"),
                  show_default=True, help="Output folder (an earlier simulation there is replaced only with --overwrite).")
    @click.option("--overwrite", is_flag=True, help="Replace an earlier simulation in --out.")
    @click.option("--format", "fmt", type=click.Choice(SIMULATION_FORMATS), default="npz", show_default=True,
                  help="npz: a safe problem.npz; seed-pickle: idc.pkl, sg.pkl, cpcs.pkl as the seed's script reads them.")
    @click.option("--n-cell", type=int, default=2500, show_default=True, help="Surface cells.")
    @click.option("--n-epoch", type=int, default=150, show_default=True, help="Epochs.")
    @click.option("--n-vel", type=int, default=32, show_default=True, help="Velocities per profile.")
    @click.option("--snr", type=float, default=500.0, show_default=True, help="Signal-to-noise ratio.")
    @click.option("--seed", type=int, default=1, show_default=True, help="Random seed.")
    @click.option("--per-cell-lis", is_flag=True, help="seed-pickle: write lis_* per visible cell, not scalars.")
    @click.option("--no-coordinates", is_flag=True, help="Leave grid_lats/grid_longs out of sg (and the .npz).")
    def simulate(out, overwrite, fmt, n_cell, n_epoch, n_vel, snr, seed, per_cell_lis, no_coordinates):
        """Simulate the demo star (spots from dopplermap.DEMO_SPOTS) and write its problem files."""
        from ..atomic import check_out

        check_out(out, "simulation", overwrite=overwrite, legacy=_is_simulation)  # before any work
        sim_files = simulate_files(out, fmt=fmt, n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, snr=snr, seed=seed,
                                   per_cell_lis=per_cell_lis, coordinates=not no_coordinates, overwrite=overwrite)
        click.echo("wrote " + ", ".join(str(p) for p in sim_files))


def simulate_files(out: Path, *, fmt: str = "npz", n_cell: int = 2500, n_epoch: int = 150, n_vel: int = 32,
                   snr: float = 500.0, seed: int = 1, per_cell_lis: bool = False, coordinates: bool = True,
                   keys=None, as_jax: bool = False, overwrite: bool = True) -> list[Path]:
    """Simulate the demo star and write its problem (``fmt`` "npz" or "seed-pickle") and ``truth.npz``
    into the folder ``out``, as one atomic folder (kind ``simulation``)."""
    for name, v, lo in (("n-cell", n_cell, 50), ("n-epoch", n_epoch, 1), ("n-vel", n_vel, 3)):
        if v < lo:
            raise DopplermapInputError(f"--{name} must be >= {lo}, got {v}")
    if fmt not in ("npz", "seed-pickle"):
        raise DopplermapInputError(f"format must be 'npz' or 'seed-pickle', got {fmt!r}")
    import dopplermap as dm  # after the argument checks: they answer without JAX

    from ..atomic import AtomicFolder
    from ..io.seed import save_problem, seed_dicts, seed_problem, write_seed_pickles

    star, grid, times, vels, comps = dm.demo_setup(n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, seed=seed)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=snr, seed=seed)
    kw = dict(keys=keys, per_cell_lis=per_cell_lis, as_jax=as_jax, coordinates=coordinates)
    out = Path(out)
    with AtomicFolder(out, "simulation", overwrite=overwrite, legacy=_is_simulation,
                      meta={"simulation": {"snr": snr, "seed": seed, "format": fmt}}) as folder:
        tmp = folder.tmp
        if fmt == "seed-pickle":
            names = [p.name for p in write_seed_pickles(sim, tmp, **kw).values()]
        else:
            prob = seed_problem(*seed_dicts(sim, **kw), sources=("simulation",) * 3)
            names = [save_problem(tmp / "problem.npz", prob).name]
        folder.wrote()
        folder.write("truth.npz", lambda p: _write_npz(
            p, fssc=sim.fssc, fssh=sim.fssh, rv=sim.rv, amp=sim.amp, lat=grid.lat, lon=grid.lon,
            times=np.asarray(times), noiseless=sim.noiseless, inclination=star.inclination, vsini=star.vsini_kms,
            period=star.period, snr=snr, run_id=np.array(folder.run_id)))
    return [out / n for n in names] + [out / "truth.npz"]


def _is_simulation(folder: Path) -> bool:
    """A ``simulate`` folder written before manifests existed."""
    return (folder / "truth.npz").is_file()
