"""What the calibration stars' profiles can tell about the inclination: the information bound.

    PYTHONPATH=src python benchmarks/bench_inclination_bound.py [--stars 0,1] [--no-map]
        [--out benchmarks/results/inclination_bound-cpu2.json]
    ... --profile all [--profile-lambdas 1,0.1] [--profile-data own,indep,noisy] [--profile-cells N]
    ... --mc all [--mc-draws 2] [--mc-lambdas 0.1] [--mc-full]
    ... --fd-check 3,5   |   --fine 7   |   --report

For each star of ``bench_calibration.STARS`` (the same simulated data, imported), with
dopplermap's differentiable dense model (:func:`dopplermap.jointfit.dense_model`, the one
``joint_fit`` fits) and the parameters ``theta = [fssc (300), fssh (300), rv (E), amp (E),
inclination, vsini]``:

* ``F_d = J^T W J``, the Gauss-Newton information of the line profiles at the truth
  (``W = 1 / err^2``, the simulation's errors), ``J`` by forward-mode autodiff;
* the prior: ``joint_fit`` minimises ``chi2_reduced + lambda R``, i.e. ``-log posterior =
  SSR / 2 + (N / 2) lambda R`` with ``N = E n_vel`` points, so the prior's Hessian is
  ``(N / 2) lambda d^2R`` (the MEM term, evaluated by JAX); rv and amp have flat priors;
* sd(inclination), sd(vsini) = the marginal ``[F^-1]`` with the map, rv and amp integrated
  out (:func:`dopplermap.fisher.parameter_bound`, a Schur complement).

The true map has exact zeros, where the entropy's curvature ``1 / f`` is infinite: the
map is evaluated at the truth clipped into the interior, ``max(truth, F_EMPTY)`` with
``F_EMPTY`` = 8.2e-4, the entropy's own minimum for an empty cell (the value the
regulariser alone gives a cell no data constrain), and the clip is varied (1e-5, 1e-2).
Bound variants (all at the truth):

* ``prior lambda`` for lambda 1, 0.1, 0.01, 1e-4, and no prior at all (``none``): the
  posterior width; without a prior, the Cramer-Rao bound for unbiased estimators
  (inf where the map directions leave the inclination unconstrained);
* ``support``: no prior, the cells whose true fill is < 0.01 held at it (each component
  apart): an estimator told where the spots are not. It has more information than any real
  one, so its sd is a lower limit for unbiased estimators;
* ``known map``: the whole map held, only rv, amp, inclination, vsini free;
* ``fitted``: at the MAP of the noisy data (``invert`` at the true inclination and vsini,
  lambda 1; cells at their bounds held): the Laplace sd one could report from real data.

The prior's pull (bias): ``-[F^-1 g]_inc`` with ``g = (N/2) lambda grad R`` at the truth
(linear prediction), and the discretisation error's: ``[F^-1 J^T W r0]_inc`` with ``r0`` the
noise-free independent simulation minus the dense model at the (clipped) truth. Measured:
the inclination of ``joint_fit`` (inclination, vsini and the map) started at the truth, on
noise-free data made by the dense model itself (the prior alone) and on the noise-free
independent simulation (prior + surface grid). ``--no-map`` skips those fits; these
``joint_fit`` runs often stop at a limb kink (:func:`kink_distance`), so the MAP itself is
measured by ``--profile`` (:func:`profile_map`: the minimum of the profiled loss over the
inclination, on own-model, independent and noisy data) and its scatter over noise draws by
``--mc`` (:func:`mc_check`). ``--fd-check``: the bound with finite-difference star-parameter
columns (:func:`fd_check`); ``--fine``: ``joint_fit`` on 1200 cells (:func:`fine_fits`);
``--report``: RESULTS.md's tables from the results files in ``benchmarks/results/``. Results: benchmarks/RESULTS.md,
"The information bound".
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_json  # noqa: E402  (benchmarks/ is the script's folder)
from bench_calibration import N_CELL, PERIOD, STARS, make_star  # noqa: E402

FILL_M = 1e-5  # the seed entropy's default map m
# minimum of the seed entropy for a cell with fssc = fssh = f: 2 f^2 / (m (1 - m)) = e^-2
F_EMPTY = math.sqrt(FILL_M * (1 - FILL_M) * math.exp(-2.0) / 2.0)
LAMBDAS = (1.0, 0.1, 0.01, 1e-4)
SUPPORT_MIN = 0.01
MAE_TARGET = 3.0
RESULTS_DIR = Path(__file__).resolve().parent / "results"  # the results files --report reads


def _setup(k, clip=F_EMPTY):
    import jax
    import jax.numpy as jnp

    from dopplermap.fisher import fisher_matrix, jacobian
    from dopplermap.jointfit import dense_model
    from dopplermap.objective import regulariser_value

    s = make_star(k)
    p = s["problem"]
    grid, obs = p.grid, p.obs
    n, e, v = grid.n_cell, obs.n_epoch, obs.n_vel
    model = dense_model(grid, obs.times, obs.vels, p.components)
    area, edges = jnp.asarray(grid.area), jnp.asarray(np.asarray(grid.edges, dtype=np.int32))

    def f(th):
        return model(th[:n], th[n:2 * n], th[2 * n:2 * n + e], th[2 * n + e:2 * n + 2 * e], th[-2], th[-1], 0.0,
                     PERIOD, 0.0)

    def reg(z):
        return regulariser_value("mem", z[:n], z[n:], area, edges)

    fc = np.clip(s["truth_fssc"], clip, 1 - clip)
    fh = np.clip(s["truth_fssh"], clip, 1 - clip)
    th0 = np.concatenate([fc, fh, s["rv"], np.zeros(e), [s["inc"], s["vsini"]]])
    t0 = time.perf_counter()
    jac = jacobian(f, th0)
    t_jac = time.perf_counter() - t0
    sigma = np.asarray(obs.err).ravel()
    fd = fisher_matrix(jac, sigma)
    z0 = jnp.asarray(th0[:2 * n])
    hr = np.asarray(jax.hessian(reg)(z0))
    gr = np.asarray(jax.grad(reg)(z0))
    m0 = np.asarray(f(jnp.asarray(th0)))
    # the autodiff inclination column against a central difference (0.01 deg)
    dz = np.zeros(th0.size)
    dz[-2] = 1e-2
    fdiff = (np.asarray(f(jnp.asarray(th0 + dz))) - np.asarray(f(jnp.asarray(th0 - dz)))).ravel() / 2e-2
    jac_fd = float(np.max(np.abs(fdiff - jac[:, -2])) / np.max(np.abs(fdiff)))
    return dict(jac_fd_inc=jac_fd, s=s, p=p, n=n, e=e, v=v, npt=e * v, th0=th0, jac=jac, sigma=sigma, fd=fd, hr=hr, gr=gr, m0=m0,
                f=f, reg=reg, t_jac=t_jac)


def _embed(block, size, n2):
    out = np.zeros((size, size)) if block.ndim == 2 else np.zeros(size)
    if block.ndim == 2:
        out[:n2, :n2] = block
    else:
        out[:n2] = block
    return out


def bounds(c):
    """The sd variants and the linear shifts of one star (``c`` from :func:`_setup`)."""
    from dopplermap.fisher import parameter_bound

    n, size = c["n"], c["th0"].size
    n2 = 2 * n
    idx = [size - 2, size - 1]
    half_n = 0.5 * c["npt"]
    out = {}

    def rec(name, b):
        out[f"sd_inc_{name}"] = float(b.sd[0])
        out[f"sd_vsini_{name}"] = float(b.sd[1])
        if b.sampling_covariance is not None:
            out[f"sdmap_inc_{name}"] = float(np.sqrt(b.sampling_covariance[0, 0]))
        if b.shift is not None:
            out[f"shift_inc_{name}"] = float(b.shift[0])
            out[f"shift_vsini_{name}"] = float(b.shift[1])

    for lm in LAMBDAS:
        hp = _embed(half_n * lm * c["hr"], size, n2)
        gp = _embed(half_n * lm * c["gr"], size, n2)
        rec(f"lam{lm:g}", parameter_bound(c["fd"], idx, prior_hessian=hp, gradient=gp, data_fisher=c["fd"]))
    rec("none", parameter_bound(c["fd"], idx))
    truth = np.concatenate([c["s"]["truth_fssc"], c["s"]["truth_fssh"]])
    held = np.zeros(size, bool)
    held[:n2] = truth < SUPPORT_MIN
    out["n_support"] = int((~held[:n2]).sum())
    rec("support", parameter_bound(c["fd"], idx, held=held))
    held = np.zeros(size, bool)
    held[:n2] = True
    rec("known_map", parameter_bound(c["fd"], idx, held=held))
    # the discretisation error's pull: one Gauss-Newton step from the truth towards the
    # independent simulation's noise-free profiles, with the prior at lambda 1
    clean = _clean_profiles(c)
    r0 = (clean - c["m0"]).ravel()
    out["chi2_discretisation"] = float(np.sum((r0 / c["sigma"]) ** 2))
    g = -(c["jac"].T @ (r0 / c["sigma"] ** 2))
    for lm in (1.0, 0.1):
        hp = _embed(half_n * lm * c["hr"], size, n2)
        b = parameter_bound(c["fd"], idx, prior_hessian=hp, gradient=g)
        out[f"shift_inc_grid_lam{lm:g}"] = float(b.shift[0])
        out[f"shift_vsini_grid_lam{lm:g}"] = float(b.shift[1])
    return out


def _grid_setup(k, n_cell, clip=F_EMPTY, limb="smooth"):
    """Star ``k`` on a surface grid of ``n_cell`` cells (``make_star``'s discretisation, the
    one ``bench_readout.py --cells`` inverts on): the dense model, the clipped truth and the
    true support, the cells with simulated fill > ``SUPPORT_MIN`` on that grid, not grown
    (``support_mask``, as ``bench_readout.py``'s ``support_truth`` oracle), each component apart."""
    import jax.numpy as jnp

    from dopplermap.jointfit import dense_model
    from dopplermap.search import support_mask

    s = make_star(k, n_cell=n_cell)
    p = s["problem"]
    grid, obs = p.grid, p.obs
    n, e = grid.n_cell, obs.n_epoch
    model = dense_model(grid, obs.times, obs.vels, p.components, limb=limb)

    def f(th):
        return model(th[:n], th[n:2 * n], th[2 * n:2 * n + e], th[2 * n + e:2 * n + 2 * e], th[-2], th[-1], 0.0,
                     PERIOD, 0.0)

    fc = np.clip(s["truth_fssc"], clip, 1 - clip)
    fh = np.clip(s["truth_fssh"], clip, 1 - clip)
    th0 = np.concatenate([fc, fh, s["rv"], np.zeros(e), [s["inc"], s["vsini"]]])
    sup = np.concatenate([support_mask(grid, s["truth_fssc"], SUPPORT_MIN, 0.0),
                          support_mask(grid, s["truth_fssh"], SUPPORT_MIN, 0.0)])
    # the free columns of the support bound: the support's cells, rv, amp, inclination, vsini
    fidx = np.concatenate([np.nonzero(sup)[0], np.arange(2 * n, th0.size)])

    def f_free(z):
        return f(jnp.asarray(th0).at[fidx].set(z))

    return dict(s=s, p=p, n=n, e=e, npt=e * obs.n_vel, th0=th0, f=f, sup=sup, fidx=fidx, f_free=f_free,
                sigma=np.asarray(obs.err).ravel(), m0=np.asarray(f(jnp.asarray(th0))))


def _mem_hessian(n, z, area, edges):
    """The MEM regulariser's Hessian at ``z = [fssc, fssh]`` (2n, 2n): the entropy is a sum over
    cells, so the Hessian is one 2x2 block a cell, read from two Hessian-vector products."""
    import jax
    import jax.numpy as jnp

    from dopplermap.objective import regulariser_value

    def reg(x):
        return regulariser_value("mem", x[:n], x[n:], area, edges)

    z = jnp.asarray(z)
    hvp = jax.jit(lambda v: jax.jvp(jax.grad(reg), (z,), (v,))[1])
    one = np.concatenate([np.ones(n), np.zeros(n)])
    a, b = np.asarray(hvp(jnp.asarray(one))), np.asarray(hvp(jnp.asarray(1.0 - one)))
    h = np.zeros((2 * n, 2 * n))
    i = np.arange(n)
    h[i, i], h[i + n, i], h[i, i + n], h[i + n, i + n] = a[:n], a[n:], b[:n], b[n:]
    # the two products read the Hessian right only if it has no other off-diagonal terms
    v = np.random.default_rng(0).normal(size=2 * n)
    err = float(np.max(np.abs(h @ v - np.asarray(hvp(jnp.asarray(v))))) / np.max(np.abs(h @ v)))
    return h, err


def grid_bounds(k, n_cell, lmbd=1.0, full=True, limb="smooth"):
    """The bounds of star ``k`` on ``n_cell`` cells (:func:`_grid_setup`): ``support`` (no prior,
    the cells outside the true support held), ``known map``; with ``full``, also ``no prior``
    and ``prior lambda`` over the whole map. Only the free columns of ``J`` are computed for the
    support and known-map bounds; the full ones use the whole ``J`` (2 n_cell + 2E + 2 columns)
    and the MEM Hessian, which is one 2x2 block a cell."""
    import jax.numpy as jnp

    from dopplermap.fisher import fisher_matrix, jacobian, parameter_bound

    t0 = time.perf_counter()
    c = _grid_setup(k, n_cell, limb=limb)
    s, n, sig, fidx = c["s"], c["n"], c["sigma"], c["fidx"]
    out = {key: s[key] for key in ("k", "inc", "vsini", "n_epoch", "gap", "snr")}
    n_sup = int(c["sup"].sum())
    out.update(n_cell=n_cell, limb=limb, n_data=c["npt"], n_support=n_sup, n_support_cool=int(c["sup"][:n].sum()),
               n_support_hot=int(c["sup"][n:].sum()), n_free_support=int(fidx.size))
    jac = jacobian(c["f_free"], c["th0"][fidx])
    fd = fisher_matrix(jac, sig)
    idx = [fidx.size - 2, fidx.size - 1]
    b = parameter_bound(fd, idx)
    out["sd_inc_support"], out["sd_vsini_support"] = float(b.sd[0]), float(b.sd[1])
    # the same without parameter_bound's eigenvalue cut-off (which drops the nuisance directions
    # below 1e-13 of the largest and with them their share of the inclination's variance): the
    # whitened J's SVD, every singular value kept; meaningful while its condition is well below 1e16
    _, sv, vt = np.linalg.svd(jac / sig[:, None], full_matrices=False)
    out["cond_support"] = float(sv[0] / sv[-1])
    out["sd_inc_support_svd"] = float(np.sqrt(np.sum(vt[:, -2] ** 2 / sv ** 2)))
    held = np.zeros(fidx.size, bool)
    held[:n_sup] = True
    b = parameter_bound(fd, idx, held=held)
    out["sd_inc_known_map"], out["sd_vsini_known_map"] = float(b.sd[0]), float(b.sd[1])
    # the inclination and vsini columns by central differences (+-0.5 deg, +-0.05 km/s) instead
    z0 = c["th0"][fidx]
    for j, hstep in ((-2, 0.5), (-1, 0.05)):
        dz = np.zeros(z0.size)
        dz[j] = hstep
        jac[:, j] = (np.asarray(c["f_free"](jnp.asarray(z0 + dz))) -
                     np.asarray(c["f_free"](jnp.asarray(z0 - dz)))).ravel() / (2 * hstep)
    out["sd_inc_support_fd"] = float(parameter_bound(fisher_matrix(jac, sig), idx).sd[0])
    out["support_s"] = time.perf_counter() - t0
    if full:
        t1 = time.perf_counter()
        th0, size = c["th0"], c["th0"].size
        jac = jacobian(c["f"], th0, chunk=64)
        out["jacobian_full_s"] = time.perf_counter() - t1
        jw = jac / sig[:, None]
        # no prior: the inclination and vsini columns against the span of all the others
        # (an orthonormal basis of it in place of the 2n + 2E columns: the same Schur complement)
        u, sv, _ = np.linalg.svd(jw[:, :-2], full_matrices=False)
        rank = int(np.sum(sv > 1e-7 * sv[0]))
        out["rank_others_full"], out["min_sv_ratio_others_full"] = rank, float(sv[-1] / sv[0])
        basis = u[:, :rank] * sv[:rank]
        fr = fisher_matrix(np.concatenate([basis, jac[:, -2:]], axis=1), sig)
        b = parameter_bound(fr, [rank, rank + 1])
        out["sd_inc_none"], out["sd_vsini_none"] = float(b.sd[0]), float(b.sd[1])
        # the prior at lambda: F = J^T W J + (N/2) lambda d^2R, solved for the two columns
        grid = c["p"].grid
        h, herr = _mem_hessian(n, th0[:2 * n], jnp.asarray(grid.area),
                               jnp.asarray(np.asarray(grid.edges, dtype=np.int32)))
        out["mem_hessian_check"] = herr
        f = jw.T @ jw
        f[:2 * n, :2 * n] += 0.5 * c["npt"] * lmbd * h
        cols = np.linalg.solve(f, np.eye(size)[:, -2:])
        cov = cols[-2:]
        out[f"sd_inc_lam{lmbd:g}"], out[f"sd_vsini_lam{lmbd:g}"] = (float(x) for x in np.sqrt(np.diag(cov)))
        out["full_s"] = time.perf_counter() - t1
    out["star_s"] = time.perf_counter() - t0
    print(f"star {k} (inc {s['inc']:.0f}, {n_cell} cells): sd(inc) support {out['sd_inc_support']:.3g} "
          f"({n_sup} cells, {c['npt']} points) known map {out['sd_inc_known_map']:.3g} "
          f"none {out.get('sd_inc_none', float('nan')):.3g} lam{lmbd:g} {out.get(f'sd_inc_lam{lmbd:g}', float('nan')):.3g} "
          f"({out['star_s']:.0f} s)", flush=True)
    return out


def oracle_grid(k, n_cell, n_draw=8, max_iter=6):
    """:func:`oracle_mc` on ``n_cell`` cells: Gauss-Newton least squares (no prior, no bounds)
    over the true support's cells (:func:`_grid_setup`), rv, amp, inclination and vsini, the
    other cells held at the clipped truth, on noise draws of the dense model's own profiles at
    the truth; beside it the linearised (one-step) estimator on 400 draws."""
    import jax
    import jax.numpy as jnp

    from dopplermap.fisher import fisher_matrix, jacobian, parameter_bound

    t0 = time.perf_counter()
    c = _grid_setup(k, n_cell)
    f_free, z0, sig = c["f_free"], c["th0"][c["fidx"]], c["sigma"]
    clean = c["m0"].ravel()
    j0 = jacobian(f_free, z0)
    a0 = j0 / sig[:, None]
    bound = float(parameter_bound(fisher_matrix(j0, sig), [z0.size - 2, z0.size - 1]).sd[0])
    rng = np.random.default_rng(9000 + k)
    lin = np.linalg.lstsq(a0, rng.normal(size=(clean.size, 400)), rcond=None)[0][-2]
    # one compiled Jacobian for every Gauss-Newton step (``fisher.jacobian`` compiles a call's own)
    block = jax.jit(lambda z, t: jax.vmap(lambda u: jax.jvp(lambda x: f_free(x).ravel(), (z,), (u,))[1])(t))
    eye = np.eye(z0.size)

    def jac_at(z):
        cols = [np.asarray(block(jnp.asarray(z), jnp.asarray(np.pad(eye[a:a + 32], ((0, max(0, a + 32 - z0.size)), (0, 0))))))
                [:min(32, z0.size - a)] for a in range(0, z0.size, 32)]
        return np.concatenate(cols, axis=0).T

    jac_check = float(np.max(np.abs(jac_at(z0) - j0)) / np.max(np.abs(j0)))
    est, iters = [], []
    for d in range(n_draw):
        rng = np.random.default_rng(7000 + 100 * k + d)
        y = clean + sig * rng.normal(size=clean.size)
        z = z0.copy()
        for it in range(max_iter):
            jac = j0 if it == 0 else jac_at(z)
            r = (y - np.asarray(f_free(jnp.asarray(z))).ravel()) / sig
            step = np.linalg.lstsq(jac / sig[:, None], r, rcond=None)[0]
            z = z + step
            if abs(step[-2]) < 1e-3:
                break
        est.append(float(z[-2]))
        iters.append(it + 1)
        print(f"  star {k} draw {d}: inc {z[-2]:.3f} ({it + 1} GN steps)", flush=True)
    est = np.array(est)
    out = dict(k=k, inc=c["s"]["inc"], n_cell=n_cell, n_support=int(c["sup"].sum()), n_data=c["npt"],
               estimates=est.tolist(), gn_steps=iters, oracle_mean=float(est.mean()),
               oracle_sd=float(est.std(ddof=1)), linear_sd_400=float(lin.std(ddof=1)), sd_support=bound,
               jac_check=jac_check,
               wall_s=time.perf_counter() - t0)
    print(out, flush=True)
    return out


def grid_report(path):
    """RESULTS.md's table of a ``--bound-cells`` run (its results file ``path``)."""
    import json

    rows = json.loads(Path(path).read_text())["stars"]

    def f(x):
        return "inf" if x is None or not np.isfinite(x) else (f"{x:.1f}" if x < 90 else "> 90")

    n = rows[0]["n_cell"]
    out = [f"| star | inc | E | data points | support {N_CELL} (free cells) | support {n} (free cells) | support {n}, "
           f"FD columns | support {n}, no cut-off (condition of J) | known map {N_CELL} / {n} | "
           f"sd(vsini) support {N_CELL} / {n} |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        q = r["ref"]
        out.append(f"| {r['k']} | {r['inc']:.0f} | {r['n_epoch']} | {r['n_data']} | {f(q['sd_inc_support'])} "
                   f"({q['n_support']}) | {f(r['sd_inc_support'])} ({r['n_support']}) | {f(r['sd_inc_support_fd'])} | "
                   f"{f(r['sd_inc_support_svd']) if r['cond_support'] < 1e13 else 'ill-determined'} "
                   f"({r['cond_support']:.0e}) | "
                   f"{q['sd_inc_known_map']:.2f} / {r['sd_inc_known_map']:.2f} | {q['sd_vsini_support']:.2f} / "
                   f"{r['sd_vsini_support']:.2f} |")
    out += ["", f"| mean of 0.80 sd | {N_CELL} cells | {n} cells |", "|---|---|---|"]
    for key, name in (("sd_inc_support", "support"), ("sd_inc_known_map", "known map")):
        a, b = (np.array([np.inf if x is None else x for x in v], float) for v in
                ([r["ref"][key] for r in rows], [r[key] for r in rows]))
        out.append(f"| {name} | {0.7979 * a.mean():.2f} | {0.7979 * b.mean():.2f} |")
    text = "\n".join(out)
    print(text)
    return text


def _clean_profiles(c):
    """The independent simulation's noise-free profiles, normalised as the observations."""
    sn = make_star(c["s"]["k"], noise=False)
    return np.asarray(sn["problem"].obs.flux)


def clip_variants(c, clips=(FILL_M, 1e-2)):
    """sd(inc) at lambda 1 and 0.1 with the true map clipped at other floors: the prior's
    Hessian at the other clip (the profiles' Jacobian kept; it moves by ~1e-3 of itself)."""
    import jax
    import jax.numpy as jnp

    from dopplermap.fisher import parameter_bound

    out = {}
    n, size = c["n"], c["th0"].size
    truth = np.concatenate([c["s"]["truth_fssc"], c["s"]["truth_fssh"]])
    for clip in clips:
        hr = np.asarray(jax.hessian(c["reg"])(jnp.asarray(np.clip(truth, clip, 1 - clip))))
        for lm in (1.0, 0.1):
            hp = _embed(0.5 * c["npt"] * lm * hr, size, 2 * n)
            b = parameter_bound(c["fd"], [size - 2, size - 1], prior_hessian=hp)
            out[f"sd_inc_lam{lm:g}_clip{clip:g}"] = float(b.sd[0])
    return out


def fitted_bound(c):
    """Laplace sd at the MAP of the noisy data at the true inclination and vsini (lambda 1)."""
    import jax.numpy as jnp

    import dopplermap as dm
    from dopplermap.constants import FILL_MAX, FILL_MIN
    from dopplermap.fisher import fisher_matrix, jacobian, parameter_bound

    p = c["p"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best = dm.invert(p.pre, p.obs, **p.invert_kwargs())
    n, size = c["n"], c["th0"].size
    th = np.concatenate([best.fssc, best.fssh, best.rv, best.amp, c["th0"][-2:]])
    jac = jacobian(c["f"], th)
    fd = fisher_matrix(jac, c["sigma"])
    import jax

    hr = np.asarray(jax.hessian(c["reg"])(jnp.asarray(th[:2 * n])))
    held = np.zeros(size, bool)
    held[:2 * n] = (th[:2 * n] <= FILL_MIN * 1.01) | (th[:2 * n] >= FILL_MAX - 1e-7)
    hp = _embed(0.5 * c["npt"] * p.settings.lmbd * hr, size, 2 * n)
    b = parameter_bound(fd, [size - 2, size - 1], prior_hessian=hp, held=held, data_fisher=fd)
    return dict(sd_inc_fitted=float(b.sd[0]), sd_vsini_fitted=float(b.sd[1]),
                sdmap_inc_fitted=float(np.sqrt(b.sampling_covariance[0, 0])), fitted_n_held=int(held.sum()),
                fitted_chi2=float(best.chi2))


def map_shifts(c, lambdas=(1.0,)):
    """Inclination of joint_fit started at the truth on noise-free data: the dense model's own
    (the prior's pull alone) and the independent simulation's (prior + surface grid)."""
    import dopplermap as dm
    from dopplermap.jointfit import joint_fit

    p, s = c["p"], c["s"]
    obs = p.obs
    own = dm.Observations.create(np.asarray(obs.times), np.asarray(obs.vels), c["m0"], np.asarray(obs.err),
                                 source=f"star {s['k']} dense model, noise-free")
    indep = make_star(s["k"], noise=False)["problem"].obs
    star = p.star.replace(inclination=s["inc"], vsini=s["vsini"])
    x0 = c["th0"][:-2]
    out = {}
    for lm in lambdas:
        for name, o in (("own", own), ("indep", indep)):
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                q = p.replace(star=star, obs=o, settings=p.settings.replace(lmbd=lm))
                r = joint_fit(q, x0=x0, tol=1e-10, maxiter=4000)
            out[f"map_inc_{name}_lam{lm:g}"] = float(r.star.inclination)
            out[f"map_vsini_{name}_lam{lm:g}"] = float(r.star.vsini)
            out[f"map_{name}_lam{lm:g}_iter"] = int(r.map.iterations)
            out[f"map_{name}_lam{lm:g}_s"] = time.perf_counter() - t0
    return out


def fine_fits(k, n_cell=1200, lmbd=1.0):
    """The joint MAP on a finer surface grid: does the surface grid's bias go?

    ``joint_fit`` of inclination, vsini and the map on ``n_cell`` cells, started at the truth
    (the true map averaged into the cells, clipped at ``F_EMPTY``), on the noise-free and on
    the noisy independent simulation (the benchmark's draw); and on 300 cells with the same
    start for comparison, plus the noise-free simulation with rv = 0 (no rv interpolation
    error) on 300 cells.
    """
    from dopplermap.jointfit import joint_fit

    out = {}
    for tag, nc, kw in (("fine_nf", n_cell, dict(noise=False)), ("fine_noisy", n_cell, {}),
                        ("coarse_noisy", None, {}), ("coarse_nf_rv0", None, dict(noise=False, rv_sigma=0.0))):
        s = make_star(k, **kw) if nc is None else make_star(k, n_cell=nc, **kw)
        p = s["problem"]
        e = p.obs.n_epoch
        x0 = np.concatenate([np.clip(s["truth_fssc"], F_EMPTY, 1 - F_EMPTY), np.clip(s["truth_fssh"], F_EMPTY, 1 - F_EMPTY),
                             s["rv"], np.zeros(e)])
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = joint_fit(p.replace(settings=p.settings.replace(lmbd=lmbd)), x0=x0, tol=1e-10, maxiter=4000)
        out[f"{tag}_inc"] = float(r.star.inclination)
        out[f"{tag}_vsini"] = float(r.star.vsini)
        out[f"{tag}_iter"] = int(r.map.iterations)
        out[f"{tag}_chi2"] = float(r.map.chi2)
        out[f"{tag}_s"] = time.perf_counter() - t0
        print(f"  star {k} {tag}: inc {r.star.inclination:.2f} vsini {r.star.vsini:.2f} chi2 {r.map.chi2:.3f} "
              f"({r.map.iterations} it, {out[f'{tag}_s']:.0f} s)", flush=True)
    return out


def fd_check(k, h_inc=0.5, h_vsini=0.05):
    """The limb makes the model kinked in the inclination (a cell's weight ``max(mu, 0)``): the
    bound with the inclination and vsini columns of ``J`` from central differences over
    +-``h_inc`` deg, +-``h_vsini`` km/s (the mean slope over a fraction of the sd) instead of
    autodiff's derivative at the point."""
    import jax.numpy as jnp

    from dopplermap.fisher import fisher_matrix, parameter_bound

    c = _setup(k)
    th, f = c["th0"], c["f"]
    jac = c["jac"].copy()
    for j, h in ((-2, h_inc), (-1, h_vsini)):
        dz = np.zeros(th.size)
        dz[j] = h
        jac[:, j] = (np.asarray(f(jnp.asarray(th + dz))) - np.asarray(f(jnp.asarray(th - dz)))).ravel() / (2 * h)
    fd = fisher_matrix(jac, c["sigma"])
    size, n2 = th.size, 2 * c["n"]
    idx = [size - 2, size - 1]
    hp = _embed(0.5 * c["npt"] * c["hr"], size, n2)
    truth = np.concatenate([c["s"]["truth_fssc"], c["s"]["truth_fssh"]])
    sup = np.zeros(size, bool)
    sup[:n2] = truth < SUPPORT_MIN
    known = np.zeros(size, bool)
    known[:n2] = True
    out = dict(k=k, inc=c["s"]["inc"], jac_fd_inc=c["jac_fd_inc"])
    for tag, fmat in (("autodiff", c["fd"]), ("fd", fd)):
        out[f"sd_inc_lam1_{tag}"] = float(parameter_bound(fmat, idx, prior_hessian=hp).sd[0])
        out[f"sd_inc_support_{tag}"] = float(parameter_bound(fmat, idx, held=sup).sd[0])
        out[f"sd_inc_known_map_{tag}"] = float(parameter_bound(fmat, idx, held=known).sd[0])
    print(out, flush=True)
    return out


def _profiled_minimum(q, coarse, half):
    """Minimum of problem ``q``'s profiled loss over the inclination: the nodes ``coarse``, then
    1 deg steps +-``half`` about the lowest, a parabola through the lowest node and its
    neighbours. Returns (minimum, inclinations, losses)."""
    from bench_calibration import continuous_interval

    from dopplermap.search import evaluate_point

    prof = {}

    def at(inc):
        if inc not in prof:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prof[inc] = float(evaluate_point(q, {"inclination": float(inc)})["loss"])

    for inc in coarse:
        at(float(inc))
    best = min(prof, key=prof.get)
    for inc in np.arange(max(best - half, 2.0), min(best + half, 90.0) + 0.01, 1.0):
        at(float(inc))
    v = np.array(sorted(prof))
    pr = np.array([prof[x] for x in v])
    return continuous_interval(v, pr, 0.0)[0], v.tolist(), pr.tolist()


def own_data(s):
    """Noise-free profiles of star ``s`` made by the inversion's own (binned) model from the true
    map (averaged into the cells, clipped at ``F_EMPTY``) with the true rv: what the inversion
    would fit exactly."""
    import dopplermap as dm

    p = s["problem"]
    fc = np.clip(s["truth_fssc"], F_EMPTY, 1 - F_EMPTY)
    fh = np.clip(s["truth_fssh"], F_EMPTY, 1 - F_EMPTY)
    return np.asarray(dm.model.forward(fc, fh, np.asarray(s["rv"]), np.zeros(p.obs.n_epoch), p.pre))


def mc_check(k, n_draw=12, lmbd=1.0, span=25.0):
    """Scatter of the profiled MAP over noise draws of the own-model data (the forward model
    exact), to set beside the linearised sampling sd of the MAP (``sdmap_inc``). ``span``:
    the coarse nodes cover truth +-span (None: the benchmark's 10-90 deg)."""
    from bench_calibration import INC_GRID

    import dopplermap as dm

    s = make_star(k)
    p = s["problem"]
    model, err = own_data(s), np.asarray(p.obs.err)
    coarse = INC_GRID if span is None else np.arange(max(5.0, s["inc"] - span), min(90.0, s["inc"] + span) + 0.01, 5.0)
    est = []
    for d in range(n_draw):
        rng = np.random.default_rng(5000 + 100 * k + d)
        obs = dm.Observations.create(np.asarray(p.obs.times), np.asarray(p.obs.vels),
                                     model + err * rng.normal(size=model.shape), err, source=f"star {k} draw {d}")
        est.append(_profiled_minimum(p.replace(obs=obs, settings=p.settings.replace(lmbd=lmbd)), coarse, 4.0)[0])
    est = np.array(est)
    out = dict(k=k, inc=s["inc"], lmbd=lmbd, estimates=est.tolist(), mc_mean=float(est.mean()),
               mc_sd=float(est.std(ddof=1)), mc_mae=float(np.mean(np.abs(est - s["inc"]))))
    print(out, flush=True)
    return out


def profile_map(k, lambdas=(1.0, 0.1), coarse=None, half=4.0, which=("own", "indep", "noisy"), n_cell=None):
    """The MAP inclination as the minimum of the profiled loss (vsini at the truth): at each
    inclination the map, rv and amp are solved (the binned model ``grid`` uses, at fixed
    inclination, so no optimiser meets the limb's kinks), on a 5 deg grid then 1 deg steps
    +-``half`` deg about its lowest node; the minimum by a parabola through the lowest node
    and its neighbours. Data: ``own`` (noise-free, made by the same binned model from the
    true map: the prior's pull alone), ``indep`` (the independent simulation, noise-free:
    prior + surface grid + rv interpolation), ``indep_rv0`` (the same with every rv = 0, which
    the interpolating shift reproduces exactly: prior + surface grid) and ``noisy`` (the
    benchmark's draw). ``n_cell``: the inversion's surface grid (default the benchmark's 300)."""
    from bench_calibration import INC_GRID

    import dopplermap as dm

    coarse = INC_GRID if coarse is None else coarse
    kw = {} if n_cell is None else dict(n_cell=n_cell)
    s = make_star(k, **kw)
    p = s["problem"]
    model = own_data(s)
    data = {"own": dm.Observations.create(np.asarray(p.obs.times), np.asarray(p.obs.vels), model, np.asarray(p.obs.err),
                                          source=f"star {k} own model, noise-free"),
            "noisy": p.obs}
    for name, extra in (("indep", {}), ("indep_rv0", dict(rv_sigma=0.0))):
        if name in which:
            data[name] = make_star(k, noise=False, **kw, **extra)["problem"].obs
    data = {name: data[name] for name in which}
    out = {}
    for lm in lambdas:
        for name, obs in data.items():
            q = p.replace(obs=obs, settings=p.settings.replace(lmbd=lm))
            b, v, pr = _profiled_minimum(q, coarse, half)
            out[f"prof_inc_{name}_lam{lm:g}"] = b
            out[f"prof_{name}_lam{lm:g}"] = [v, pr]
        print(f"  star {k} lam {lm:g}: profiled MAP inc " + " ".join(
            f"{name} {out[f'prof_inc_{name}_lam{lm:g}']:.1f}" for name in data) + f" (truth {s['inc']:.0f})", flush=True)
    return out


def oracle_mc(k, n_draw=8, max_iter=8):
    """Is the *support* bound attained? The oracle estimator it describes, on noise draws of
    the dense model's own profiles at the truth: Gauss-Newton least squares (no prior, no
    bounds) over the spotted cells, rv, amp, inclination and vsini, the other cells held at
    the truth. Its scatter should be the support sd where the model is linear enough."""
    import jax.numpy as jnp

    from dopplermap.fisher import jacobian

    c = _setup(k)
    th0, f, sig = c["th0"], c["f"], c["sigma"]
    n2 = 2 * c["n"]
    truth = np.concatenate([c["s"]["truth_fssc"], c["s"]["truth_fssh"]])
    free = np.ones(th0.size, bool)
    free[:n2] = truth >= SUPPORT_MIN
    fidx = np.nonzero(free)[0]

    def f_free(z):
        return f(jnp.asarray(th0).at[fidx].set(z))

    clean = c["m0"].ravel()
    est = []
    for d in range(n_draw):
        rng = np.random.default_rng(7000 + 100 * k + d)
        y = clean + sig * rng.normal(size=clean.size)
        z = th0[fidx].copy()
        for _ in range(max_iter):
            jac = jacobian(f_free, z)
            r = (y - np.asarray(f_free(jnp.asarray(z))).ravel()) / sig
            a = jac / sig[:, None]
            step = np.linalg.lstsq(a, r, rcond=None)[0]
            z = z + step
            if abs(step[-2]) < 1e-4:
                break
        est.append(float(z[-2]))
    est = np.array(est)
    bound = bounds(c)
    out = dict(k=k, inc=c["s"]["inc"], estimates=est.tolist(), oracle_mean=float(est.mean()),
               oracle_sd=float(est.std(ddof=1)), sd_support=bound["sd_inc_support"])
    print(out, flush=True)
    return out


def expected_abs(bias, sd):
    """E|bias + sd Z| for Z ~ N(0, 1)."""
    if not np.isfinite(sd):
        return float("inf")
    if sd == 0:
        return abs(bias)
    a = bias / sd
    return float(sd * math.sqrt(2 / math.pi) * math.exp(-0.5 * a * a) + bias * math.erf(a / math.sqrt(2)))


def table(rows):
    h = ("| star | inc | vsini | E | gap | S/N | sd(inc) lam 1 | lam 0.1 | lam 0.01 | lam 1e-4 | no prior | support, "
         "no prior | known map | fitted, lam 1 | sd(vsini) lam 1 / 1e-4 / support |")
    lines = [h, "|" + "---|" * (h.count("|") - 1)]

    def fmt(x):
        return "inf" if not np.isfinite(x) else (f"{x:.2f}" if x < 10 else f"{x:.0f}")

    for r in rows:
        lines.append(
            f"| {r['k']} | {r['inc']:.0f} | {r['vsini']:.0f} | {r['n_epoch']} | {'y' if r['gap'] else 'n'} | "
            f"{r['snr']:.0f} | {fmt(r['sd_inc_lam1'])} | {fmt(r['sd_inc_lam0.1'])} | {fmt(r['sd_inc_lam0.01'])} | "
            f"{fmt(r['sd_inc_lam0.0001'])} | {fmt(r['sd_inc_none'])} | {fmt(r['sd_inc_support'])} "
            f"({r['n_support']}) | {fmt(r['sd_inc_known_map'])} | {fmt(r.get('sd_inc_fitted', float('nan')))} | "
            f"{r['sd_vsini_lam1']:.3f} / {r['sd_vsini_lam0.0001']:.3f} / {r['sd_vsini_support']:.3f} |")
    return "\n".join(lines)


def bias_table(rows):
    h = ("| star | inc | linear prior pull lam 1 | lam 0.1 | linear grid pull lam 1 | joint MAP own data lam 1 | "
         "joint MAP indep. data lam 1 | sampling sd of the MAP lam 1 | predicted E abs err | measured joint / cal |")
    lines = [h, "|" + "---|" * (h.count("|") - 1)]
    for r in rows:
        own = r.get("map_inc_own_lam1", float("nan")) - r["inc"]
        ind = r.get("map_inc_indep_lam1", float("nan")) - r["inc"]
        lines.append(
            f"| {r['k']} | {r['inc']:.0f} | {r['shift_inc_lam1']:+.1f} | {r['shift_inc_lam0.1']:+.1f} | "
            f"{r['shift_inc_grid_lam1']:+.1f} | {own:+.1f} | {ind:+.1f} | {r['sdmap_inc_lam1']:.2f} | "
            f"{r.get('pred_abs_err', float('nan')):.1f} | {r.get('measured_joint_err', float('nan')):+.1f} / "
            f"{r.get('measured_cal_err', float('nan')):+.1f} |")
    return "\n".join(lines)


def _measured():
    """The joint_fit and calibrated inclinations of ``bench_calibration.py``'s runs (its results
    files in ``benchmarks/results/``: the default run and the calibrated estimator's)."""
    import json

    here = RESULTS_DIR
    out = {}
    for name, key, dst in (("calibration-cpu2.json", "joint_inc", "joint"),
                           ("calibration-cpu2-neyman.json", "cal_inc", "cal")):
        f = here / name
        if not f.exists():
            continue
        for r in json.loads(f.read_text())["stars"]:
            if key in r:
                out.setdefault(r["k"], {})[dst] = float(r[key]) - float(r["inc"])
                if dst == "cal":
                    out[r["k"]]["cal_width68"] = float(r["cal_inc_hi68"] - r["cal_inc_lo68"])
    return out


def summarise(rows):
    def col(key):
        return np.array([r[key] for r in rows if key in r], float)

    out = {}
    for key in ("sd_inc_lam1", "sd_inc_lam0.1", "sd_inc_lam0.01", "sd_inc_lam0.0001", "sd_inc_none",
                "sd_inc_support", "sd_inc_known_map", "sd_inc_fitted", "sdmap_inc_lam1"):
        v = col(key)
        if v.size:
            out[key] = dict(median=float(np.median(v)), min=float(v.min()), max=float(v.max()),
                            n_below_2=int((v < 2).sum()), n_above_3=int((v > 3).sum()),
                            expected_mae_unbiased=float(np.mean(0.7979 * v)))
    for key in ("pred_abs_err",):
        v = col(key)
        if v.size:
            out["predicted_mae_map_lam1"] = float(np.mean(v))
    return out


def kink_distance(k, incs, n_cell=None):
    """Distance (deg) from each inclination in ``incs`` to the nearest inclination at which a cell
    of star ``k``'s grid crosses the limb at an epoch (``mu = 0``): there the dense model's
    weight ``max(mu, 0)`` has a kink, and a gradient optimiser can stop."""
    s = make_star(k) if n_cell is None else make_star(k, n_cell=n_cell)
    g, t = s["problem"].grid, np.asarray(s["problem"].obs.times)
    lat = np.asarray(g.lat)[None, :]
    alpha = np.asarray(g.lon)[None, :] + 2 * np.pi * t[:, None] / PERIOD
    # sin i cos(lat) cos(alpha) + cos i sin(lat) = 0
    kinks = np.sort((np.degrees(np.arctan2(-np.sin(lat), np.cos(lat) * np.cos(alpha))) % 180.0).ravel())
    return [float(np.min(np.abs(kinks - x))) for x in incs]


def report(here=None):
    """The tables of benchmarks/RESULTS.md from the results files of the runs (in
    ``benchmarks/results/`` unless ``here`` names another folder)."""
    import json

    here = RESULTS_DIR if here is None else Path(here)
    # an infinite sd (no information) is stored as null (strict JSON): read it back as inf
    rows = [{k: float("inf") if v is None and k.startswith("sd_") else v for k, v in r.items()}
            for r in json.loads((here / "inclination_bound-cpu2.json").read_text())["stars"]]
    prof_file = here / "inclination_bound-cpu2-profile.json"
    prof = {r["k"]: r for r in json.loads(prof_file.read_text())["stars"]} if prof_file.exists() else {}

    def f(x, nd=1):
        return "inf" if not np.isfinite(x) else (f"{x:.{nd}f}" if x < 90 else "> 90")

    h = ("| star | inc | vsini | E | gap | S/N | lam 1 | lam 0.1 | lam 0.01 | lam 1e-4 | no prior | support (free) | "
         "known map | fitted lam 1 | sd(vsini) lam 1 / support | calibrated 68 % width | 2 sd(lam 1) |")
    out = [h, "|" + "---|" * (h.count("|") - 1)]
    for r in rows:
        out.append(f"| {r['k']} | {r['inc']:.0f} | {r['vsini']:.0f} | {r['n_epoch']} | {'y' if r['gap'] else 'n'} | "
                   f"{r['snr']:.0f} | {f(r['sd_inc_lam1'])} | {f(r['sd_inc_lam0.1'])} | {f(r['sd_inc_lam0.01'])} | "
                   f"{f(r['sd_inc_lam0.0001'])} | {f(r['sd_inc_none'])} | {f(r['sd_inc_support'])} ({r['n_support']}) | "
                   f"{f(r['sd_inc_known_map'])} | {f(r['sd_inc_fitted'])} | {r['sd_vsini_lam1']:.2f} / "
                   f"{r['sd_vsini_support']:.2f} | {r.get('cal_width68', float('nan')):.1f} | "
                   f"{2 * r['sd_inc_lam1']:.1f} |")
    mean = {key: 0.7979 * float(np.mean([r[key] for r in rows])) for key in
            ("sd_inc_lam1", "sd_inc_lam0.1", "sd_inc_lam0.01", "sd_inc_lam0.0001", "sd_inc_support",
             "sd_inc_known_map", "sd_inc_fitted", "sdmap_inc_lam1", "sdmap_inc_lam0.1")}
    n3 = {key: int(sum(r[key] > 3 for r in rows)) for key in mean}
    out.append("")
    out.append("| bound | lam 1 | lam 0.1 | lam 0.01 | lam 1e-4 | no prior | support | known map | fitted lam 1 |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    out.append("| mean of 0.80 sd (the MAE of an unbiased Gaussian estimator) | " + " | ".join(
        f"{mean[k]:.2f}" for k in ("sd_inc_lam1", "sd_inc_lam0.1", "sd_inc_lam0.01", "sd_inc_lam0.0001")) +
        " | inf | " + " | ".join(f"{mean[k]:.2f}" for k in ("sd_inc_support", "sd_inc_known_map", "sd_inc_fitted")) + " |")
    out.append("| stars with sd > 3 deg | " + " | ".join(
        str(n3[k]) for k in ("sd_inc_lam1", "sd_inc_lam0.1", "sd_inc_lam0.01", "sd_inc_lam0.0001")) +
        " | 12 | " + " | ".join(str(n3[k]) for k in ("sd_inc_support", "sd_inc_known_map", "sd_inc_fitted")) + " |")
    out.append("")
    h = ("| star | inc | sd MAP lam 1 / 0.1 | own lam 1 | indep lam 1 | noisy lam 1 | own lam 0.1 | indep lam 0.1 | "
         "noisy lam 0.1 | joint_fit own / indep (stopped at a kink?) | linear pull lam 1 | joint (45 deg start) / calibrated |")
    out += ["", h, "|" + "---|" * (h.count("|") - 1)]
    errs = {}
    for r in rows:
        pr = prof.get(r["k"], {})
        cells = []
        for lm in ("1", "0.1"):
            for name in ("own", "indep", "noisy"):
                v = pr.get(f"prof_inc_{name}_lam{lm}", float("nan")) - r["inc"]
                errs.setdefault(f"{name}_lam{lm}", []).append(v)
                cells.append(f"{v:+.1f}")
        cells = cells[:3] + cells[3:]
        kinks = dict(zip(("own", "indep"), kink_distance(r["k"], [r["map_inc_own_lam1"], r["map_inc_indep_lam1"]]),
                         strict=True))
        jo = r["map_inc_own_lam1"] - r["inc"]
        ji = r["map_inc_indep_lam1"] - r["inc"]
        mark = {n: (" (k)" if kinks.get(n, 1.0) < 1e-4 else "") for n in ("own", "indep")}
        errs.setdefault("joint", []).append(r.get("measured_joint_err", float("nan")))
        errs.setdefault("cal", []).append(r.get("measured_cal_err", float("nan")))
        out.append(f"| {r['k']} | {r['inc']:.0f} | {r['sdmap_inc_lam1']:.1f} / {r['sdmap_inc_lam0.1']:.1f} | "
                   + " | ".join(cells) + f" | {jo:+.1f}{mark['own']} / {ji:+.1f}{mark['indep']} | "
                   f"{r['shift_inc_lam1']:+.1f} | {r.get('measured_joint_err', float('nan')):+.1f} / "
                   f"{r.get('measured_cal_err', float('nan')):+.1f} |")
    out.append("")
    out.append("| errors over the 12 stars | MAE | bias |")
    out.append("|---|---|---|")
    for key, v in errs.items():
        v = np.array(v, float)
        out.append(f"| {key} | {np.nanmean(np.abs(v)):.1f} | {np.nanmean(v):+.1f} |")
    text = "\n".join(out)
    print(text)
    return text


def _run_stars(jobs, out_file):
    """Run ``jobs`` (callables, one result row each); after each the rows so far go to
    ``out_file`` (a partial record), at the end the run's record with machine, load and time."""
    import jax

    load0, t0 = os.getloadavg(), time.perf_counter()
    rows = []
    for job in jobs:
        rows.append(job())
        if out_file:
            write_json(out_file, dict(partial=True, stars=rows))
    out = dict(machine=platform.node(), cpu_count=os.cpu_count(), backend=jax.default_backend(), load_before=load0,
               load_after=os.getloadavg(), wall_s=time.perf_counter() - t0, stars=rows)
    if out_file:
        write_json(out_file, out)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stars", default=None, help="comma-separated star indices (default all 12)")
    ap.add_argument("--no-map", action="store_true", help="skip the joint_fit runs on noise-free data")
    ap.add_argument("--no-fitted", action="store_true", help="skip the Laplace sd at the fitted map")
    ap.add_argument("--no-clip", action="store_true", help="skip the clip variants")
    ap.add_argument("--fine", default=None, help="comma-separated stars: only the joint MAP on 1200 cells (fine_fits)")
    ap.add_argument("--fd-check", default=None, help="comma-separated stars: only fd_check (smoothed J columns)")
    ap.add_argument("--profile", default=None, help="comma-separated stars (or 'all'): only profile_map")
    ap.add_argument("--profile-lambdas", default="1,0.1", help="lambdas of --profile")
    ap.add_argument("--profile-data", default="own,indep,noisy", help="data sets of --profile")
    ap.add_argument("--profile-cells", type=int, default=None, help="surface grid of --profile (default 300)")
    ap.add_argument("--mc", default=None, help="comma-separated stars: only mc_check (noise draws of own data)")
    ap.add_argument("--mc-draws", type=int, default=12, help="noise draws per star of --mc (and of --oracle-cells)")
    ap.add_argument("--mc-lambdas", default="1", help="lambdas of --mc")
    ap.add_argument("--mc-full", action="store_true", help="--mc over the whole 10-90 deg range (not truth +-25)")
    ap.add_argument("--oracle", default=None, help="comma-separated stars: only oracle_mc (is the support bound attained?)")
    ap.add_argument("--bound-cells", type=int, default=None,
                    help="only the support / known-map bounds on this surface grid (grid_bounds), with the 300-cell ones")
    ap.add_argument("--bound-full", action="store_true", help="--bound-cells: also no prior and lambda 1 (whole map)")
    ap.add_argument("--report-cells", default=None, help="print the table of a --bound-cells results file")
    ap.add_argument("--oracle-cells", type=int, default=None, help="--oracle on this surface grid (oracle_grid)")
    ap.add_argument("--report", action="store_true", help="print RESULTS.md's tables from the results files")
    ap.add_argument("--out", default=None, help="JSON results file")
    args = ap.parse_args()
    import jax

    jax.config.update("jax_enable_x64", True)
    if args.report:
        return report()
    def stars(arg):
        return range(len(STARS)) if arg == "all" else [int(x) for x in arg.split(",")]

    if args.report_cells:
        return grid_report(args.report_cells)
    if args.bound_cells:
        return _run_stars([lambda k=k: dict(ref=grid_bounds(k, N_CELL, full=args.bound_full),
                                            **grid_bounds(k, args.bound_cells, full=args.bound_full))
                           for k in stars(args.stars or "all")], args.out)
    if args.oracle and args.oracle_cells:
        return _run_stars([lambda k=k: oracle_grid(k, args.oracle_cells, n_draw=args.mc_draws) for k in stars(args.oracle)],
                          args.out)
    if args.oracle:
        return _run_stars([lambda k=k: oracle_mc(k) for k in stars(args.oracle)], args.out)
    if args.mc:
        span = None if args.mc_full else 25.0
        return _run_stars([lambda k=k, lm=lm: mc_check(k, n_draw=args.mc_draws, lmbd=lm, span=span)
                           for lm in (float(x) for x in args.mc_lambdas.split(",")) for k in stars(args.mc)], args.out)
    if args.profile:
        lambdas, which = [float(x) for x in args.profile_lambdas.split(",")], tuple(args.profile_data.split(","))
        return _run_stars([lambda k=k: dict(k=k, inc=STARS[k][0], vsini=STARS[k][1],
                                            **profile_map(k, lambdas=lambdas, which=which, n_cell=args.profile_cells))
                           for k in stars(args.profile)], args.out)
    if args.fd_check:
        return _run_stars([lambda k=k: fd_check(k) for k in stars(args.fd_check)], args.out)
    if args.fine:
        return _run_stars([lambda k=k: dict(k=k, inc=STARS[k][0], vsini=STARS[k][1], **fine_fits(k))
                           for k in stars(args.fine)], args.out)
    ks = [int(x) for x in args.stars.split(",")] if args.stars else list(range(len(STARS)))
    measured = _measured()
    load0 = os.getloadavg()
    t_all = time.perf_counter()
    rows = []
    for k in ks:
        t0 = time.perf_counter()
        c = _setup(k)
        s = c["s"]
        r = {key: s[key] for key in ("k", "inc", "vsini", "n_epoch", "gap", "snr")}
        r["jacobian_s"], r["jac_fd_inc"] = c["t_jac"], c["jac_fd_inc"]
        r.update(bounds(c))
        if not args.no_clip:
            r.update(clip_variants(c))
        if not args.no_fitted:
            r.update(fitted_bound(c))
        if not args.no_map:
            r.update(map_shifts(c))
        m = measured.get(k, {})
        if "joint" in m:
            r["measured_joint_err"] = m["joint"]
        if "cal" in m:
            r["measured_cal_err"], r["cal_width68"] = m["cal"], m["cal_width68"]
        bias = r.get("map_inc_indep_lam1", float("nan")) - s["inc"]
        if np.isfinite(bias):
            r["pred_abs_err"] = expected_abs(bias, r["sdmap_inc_lam1"])
        r["star_s"] = time.perf_counter() - t0
        rows.append(r)
        print(f"star {k} (inc {s['inc']:.0f}): sd(inc) lam1 {r['sd_inc_lam1']:.2f} lam0.1 {r['sd_inc_lam0.1']:.2f} "
              f"lam0.01 {r['sd_inc_lam0.01']:.2f} lam1e-4 {r['sd_inc_lam0.0001']:.2f} none {r['sd_inc_none']:.3g} "
              f"support {r['sd_inc_support']:.2f} known {r['sd_inc_known_map']:.3f} "
              f"fitted {r.get('sd_inc_fitted', float('nan')):.2f}; pull lam1 {r['shift_inc_lam1']:+.2f} "
              f"grid {r['shift_inc_grid_lam1']:+.2f} (chi2 {r['chi2_discretisation']:.1f}); MAP own {r.get('map_inc_own_lam1', float('nan')):.2f} "
              f"indep {r.get('map_inc_indep_lam1', float('nan')):.2f} ({r['star_s']:.0f} s)", flush=True)
        if args.out:
            write_json(args.out, dict(partial=True, stars=rows, summary=summarise(rows)))
    summ = summarise(rows)
    print(table(rows))
    print(bias_table(rows))
    for k, v in summ.items():
        print(k, v)
    out = dict(machine=platform.node(), cpu=platform.processor() or platform.machine(), cpu_count=os.cpu_count(),
               backend=jax.default_backend(), load_before=load0, load_after=os.getloadavg(),
               wall_s=time.perf_counter() - t_all,
               settings=dict(f_empty=F_EMPTY, lambdas=list(LAMBDAS), support_min=SUPPORT_MIN, period=PERIOD),
               stars=rows, summary=summ)
    if args.out:
        write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()
