"""``dopplermap lambda`` and ``dopplermap grid``: choose lambda; scan stellar parameters.

Problem source: with no PROBLEM argument the built-in demo star is simulated
(``--n-cell``, ``--n-epoch``, ``--n-vel``, ``--snr``); a PROBLEM ending in ``.toml`` is a
target configuration (``dopplermap init``: data files, star, temperatures, profiles; the
same problem ``dopplermap invert`` solves, light curve, gravity darkening, synthesis method
and ``[inversion]`` settings included; options given on the command line override those);
otherwise PROBLEM is an
``.npz`` file holding

* ``times`` (n_epoch,) days, ``vels`` (n_vel,) km/s, ``flux`` and ``err`` (n_epoch, n_vel);
* optional scalars ``inclination`` (deg), ``vsini`` (km/s), ``period`` (d), ``t0`` (d),
  ``domega`` (rad/day), ``n_cell``; missing ones take the demo's values. The local
  profiles, limb darkening and temperatures are the demo's (photosphere 5000 K,
  cool 3800 K, hot 6000 K at 600 nm).

:func:`dopplermap.app.search.save_problem` writes such a file.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..app.defaults import DEFAULT_READOUT, GRID_TOL, LAMBDA_TOL  # shown by --help
from ..choices import GRID_PARAMETERS, GRID_READOUTS, WEIGHTED_REGULARISERS

problem_options = [
    click.argument("problem", required=False, type=click.Path(dir_okay=False, path_type=Path)),
    click.option("--n-cell", type=click.IntRange(min=8), default=400, show_default=True, help="Demo: surface cells."),
    click.option("--n-epoch", type=click.IntRange(min=1), default=30, show_default=True, help="Demo: epochs."),
    click.option("--n-vel", type=click.IntRange(min=3), default=24, show_default=True, help="Demo: velocities."),
    click.option("--snr", type=click.FloatRange(min=0, min_open=True), default=500.0, show_default=True,
                 help="Demo: signal-to-noise."),
    click.option("--regulariser", type=click.Choice(WEIGHTED_REGULARISERS), default=None,
                 help="Default: the target's [inversion] regulariser, else mem."),
    click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="Output folder."),
    click.option("--overwrite", is_flag=True, help="Replace an earlier output of this command in --out."),
    click.option("-q", "--quiet", is_flag=True, help="No progress lines."),
]


def _with_problem_options(fn):
    for opt in reversed(problem_options):
        fn = opt(fn)
    return fn


def register(group):
    @group.command("lambda")
    @_with_problem_options
    @click.option("--lmbds", default="0.001:100:16", show_default=True,
                  help="Lambdas: 'start:stop:count' (log-spaced) or 'v1,v2,...'.")
    @click.option("--target-chi2", type=click.FloatRange(min=0, min_open=True), default=None,
                  help="Also find lambda where reduced chi2 = this.")
    @click.option("--tol", type=click.FloatRange(min=0, min_open=True), default=None,
                  help=f"Solver tolerance (default: the target's [inversion] tol, at most {LAMBDA_TOL:g}).")
    @click.option("--refine-corner/--no-refine-corner", default=True, show_default=True,
                  help="Add solves around the L-curve corner until its neighbours lie within a factor "
                       "1.4 (at most 8): the corner then does not depend on where the sweep's values fell.")
    @click.option("--time", "time_weight", is_flag=True,
                  help="Sweep the time windows' coupling lmbd_time instead (a target with [map] windows; "
                       "--lmbds then lists lmbd_time values, lambda stays the target's).")
    @click.option("--scheduler", default=None,
                  help="Spread the sweep over Dask: a scheduler address (it runs the pickled code Dask sends it: "
                       "use only one you trust) or 'local' (a local cluster); default: in this process.")
    @click.option("--connect-timeout", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
                  help="Seconds to wait for the Dask scheduler.")
    @click.option("--workers", type=click.IntRange(min=1), default=None,
                  help="Local cluster size (--scheduler local, which --workers alone implies; default: CPU count).")
    def lambda_cmd(problem, n_cell, n_epoch, n_vel, snr, regulariser, out, overwrite, quiet, lmbds, target_chi2,
                   tol, refine_corner, time_weight, scheduler, connect_timeout, workers):
        """Sweep lambda; write the L-curve table, its corner, the target-chi2 lambda and a plot.

        PROBLEM: a target .toml, an .npz problem file (see the module docs), or omitted (simulated demo star).
        The output folder is written atomically; lambda.json and every row of lcurve.csv record
        the regulariser, the tolerance and the problem's fingerprint. With --time the weight
        swept is the temporal coupling of the time windows' maps (lmbd_time), its L-curve
        that of the coupling's value against chi2.
        """
        from ..app.output import Scheduling
        from ..app.search import SearchRun, SearchSettings, Source, run_lambda

        run_lambda(Source(problem, n_cell, n_epoch, n_vel, snr), out, lmbds=lmbds, target_chi2=target_chi2,
                   parameter="lmbd_time" if time_weight else "lmbd", refine_corner=refine_corner,
                   settings=SearchSettings(regulariser=regulariser, tol=tol),
                   run=SearchRun(overwrite=overwrite, quiet=quiet,
                                 scheduling=Scheduling(scheduler, workers, connect_timeout)))

    @group.command("grid")
    @_with_problem_options
    @click.option("--param", "params", multiple=True, required=True,
                  help="NAME=start:stop:step (a float step; stop included when within 1e-6 of a step), "
                       "NAME=start:stop:nN (N evenly spaced values, both ends included) or NAME=v1,v2,... "
                       f"({', '.join(GRID_PARAMETERS)}); e.g. "
                       "vsini=38:42:0.5, domega=0:0.1:0.01, inclination=5:85:n9. Repeat for more axes, each "
                       "parameter once.")
    @click.option("--lmbd", type=click.FloatRange(min=0), default=None,
                  help="Regularisation weight (default: the target's [inversion] lmbd, else 1).")
    @click.option("--tol", type=click.FloatRange(min=0, min_open=True), default=None,
                  help=f"Solver tolerance (default: the target's [inversion] tol, at most {GRID_TOL:g}; grid.json's "
                       "chi2_jitter is the best point's chi2 noise from where the solve stops).")
    @click.option("--resume", is_flag=True, help="Continue an interrupted search in OUT (same problem and settings).")
    @click.option("--scheduler", default=None,
                  help="Spread the points over Dask: a scheduler address (it runs the pickled code Dask sends it: "
                       "use only one you trust) or 'local' (a local cluster); default (or 'sync'): in this "
                       "process, a point per CPU at a time.")
    @click.option("--connect-timeout", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True,
                  help="Seconds to wait for the Dask scheduler.")
    @click.option("--workers", type=click.IntRange(min=1), default=None,
                  help="Local cluster size (--scheduler local, which --workers alone implies; default: CPU count).")
    @click.option("--max-points", type=click.IntRange(min=1), default=None,
                  help="Most grid points, and most solves of --calibrate (default 100000; each is one "
                       "inversion).")
    @click.option("--delta-chi2", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
                  help="Delta of the un-reduced chi2 for the intervals.")
    @click.option("--calibrate", "n_sim", type=click.IntRange(min=4), default=None,
                  help="Calibrate each parameter of >= 3 values by simulation with N data sets per trial value "
                       "(parametric-bootstrap Neyman construction, docs/parameters.md), each data set read by "
                       "--readout's read-out (with support: its own support and refits, about 3 times the "
                       "cost); then the best point and the 68 %/95 % intervals printed are the calibrated ones.")
    @click.option("--readout", type=click.Choice(GRID_READOUTS), default=DEFAULT_READOUT, show_default=True,
                  help="regularised: each point solved at lambda with --tol; profiled: at a lambda 100 times "
                       "smaller, to tol 1e-10 (unless --tol), so the regulariser does not pull the chi2 minimum, "
                       "read on chi2 + the solve's effective number of parameters; support: a regularised pass "
                       "chooses the spotted cells (its best map's), then every point's map is refitted with only "
                       "those free and no regulariser, read on that chi2 (docs/parameters.md).")
    @click.option("--calibrate-seed", type=int, default=0, show_default=True, help="Seed of the simulated noise.")
    @click.option("--calibrate-oversample", type=click.IntRange(min=1), default=None,
                  help="Simulate the calibration's data sets on a band grid of this many times the cells, so "
                       "that they carry the grid's discretisation error as observed data do (default 4; 1 for "
                       "the built-in demo star, whose data are made on the inversion grid itself).")
    def grid_cmd(problem, n_cell, n_epoch, n_vel, snr, regulariser, out, overwrite, quiet, params, lmbd, tol,
                 resume, scheduler, connect_timeout, workers, max_points, delta_chi2, n_sim, calibrate_seed,
                 calibrate_oversample, readout):
        """Invert over a grid of stellar parameters; table, best point, intervals and plot.

        PROBLEM: a target .toml, an .npz problem file (see the module docs), or omitted (simulated demo star).
        The table grid.csv is appended as points finish (so --resume can continue a killed
        search); each row records lambda, the regulariser, the tolerance and the problem's
        fingerprint, and a resume with any difference is refused. grid.json, grid.png and the
        manifest are written when the search is complete.

        Each row also holds the radius the point implies (R = P vsini / (2 pi sin i)) and,
        with [star] mass, log g; with a mass, a point beyond break-up is recorded as refused
        (status, reason) and the others are solved. An interval whose best point lies on the
        grid's edge, or whose reduced chi2 is far from 1, is flagged (try --calibrate). A
        second process on the same OUT is refused while the first runs (OUT/grid.csv.lock).
        """
        from ..app.output import Scheduling
        from ..app.search import GridSpec, SearchRun, SearchSettings, Source, run_grid

        run_grid(Source(problem, n_cell, n_epoch, n_vel, snr), out,
                 GridSpec(params=tuple(params), max_points=max_points, delta_chi2=delta_chi2, readout=readout,
                          n_sim=n_sim, calibrate_seed=calibrate_seed, calibrate_oversample=calibrate_oversample),
                 settings=SearchSettings(regulariser=regulariser, lmbd=lmbd, tol=tol),
                 run=SearchRun(overwrite=overwrite, quiet=quiet, resume=resume,
                               scheduling=Scheduling(scheduler, workers, connect_timeout)))
