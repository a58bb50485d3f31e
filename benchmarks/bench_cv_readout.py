"""The inclination read by cross-validation: each grid node's map fitted to all epochs but one
fold, the fold's profiles predicted (the map held, the fold's own rv shifts and offsets fitted),
the held-out chi2 summed over the folds; against the regularised read-out of the same nodes.

    PYTHONPATH=src python benchmarks/bench_cv_readout.py [--stars 0,1,...] [--cells 1200]
        [--folds 5] [--by phase|interleave] [--lmbds 1] [--procs 2] [--out cv.json]
    PYTHONPATH=src python benchmarks/bench_cv_readout.py --tables cv.json

Stars are :mod:`bench_calibration`'s (its independent disc integrator on 11 740 cells); nodes
10-90 deg every ``--step`` deg, vsini at the truth. A fold is a set of epochs: ``phase``, the
epochs sorted by rotational phase and cut into ``--folds`` contiguous runs (the held-out phases
must be predicted from the map seen at other phases); ``interleave``, every ``--folds``-th
epoch. Training: the node's problem with the held-out epochs' errors multiplied by 1e4 (their
weight 1e-8), solved at ``lambda * (K - 1) / K`` (the same balance of data and regulariser as
the full data at ``lambda``) with the read-out's settings (tol 1e-5). Prediction: the trained
map held, each held-out epoch's rv and offset fitted to its profile (L-BFGS-B on the
differentiable model). ``cv`` is the summed held-out chi2 (un-reduced). Each ``--lmbds`` value is
one profile; ``cv_min`` is the node-wise minimum over them (lambda chosen per node by prediction).
Profiles are read by :func:`bench_calibration.continuous_interval` (Delta <= 1 / 4: not a
calibrated interval for a cross-validation score; its width is shown, not its coverage).
Results: benchmarks/RESULTS.md, "The cross-validated read-out".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import bench_calibration as B  # noqa: E402
from _common import pool_rows  # noqa: E402

HELD_WEIGHT = 1e4  # error factor of a held-out epoch in training (weight 1e-8 in chi2)


def folds(times, period, k, by):
    """``k`` index arrays of held-out epochs."""
    n = len(times)
    if by == "interleave":
        return [np.arange(j, n, k) for j in range(k)]
    if by == "time":
        return [np.sort(c) for c in np.array_split(np.argsort(times), k)]
    order = np.argsort((np.asarray(times) / period) % 1.0)
    return [np.sort(c) for c in np.array_split(order, k)]


def _predictor():
    """A jitted ``(z, x, held, pre, flux, err) -> (chi2_total, grad)`` of the held-out epochs
    with the map in ``x`` held and ``z = [rv_held, amp_held]``."""
    import jax
    import jax.numpy as jnp

    from dopplermap.model import forward
    from dopplermap.objective import Layout

    def f(z, x, held, pre, flux, err):
        lay = Layout(pre.n_cell, pre.n_epoch)
        fssc, fssh, rv, amp = lay.split(x)
        h = held.size
        rv = rv.at[held].set(z[:h])
        amp = amp.at[held].set(z[h:])
        m = forward(fssc, fssh, rv, amp, pre)[held]
        r = (flux[held] - m) / err[held]
        return jnp.sum(r * r)

    return jax.jit(jax.value_and_grad(f))


def predict(vg, x, held, pre, obs):
    """Held-out chi2_total with the map held and the fold's rv and offsets fitted (from 0), and
    the fitted rvs."""
    import jax.numpy as jnp
    from scipy.optimize import minimize

    h = held.size
    args = (jnp.asarray(x), jnp.asarray(held), pre, jnp.asarray(obs.flux), jnp.asarray(obs.err))

    def fun(z):
        v, g = vg(jnp.asarray(z), *args)
        return float(v), np.asarray(g, float)

    r = minimize(fun, np.zeros(2 * h), jac=True, method="L-BFGS-B", options=dict(maxiter=500, ftol=1e-12, gtol=1e-9))
    return float(r.fun), r.x[:h]


def star(k, cells, step, n_fold, by, lmbds, param="inclination", subdivide=1):
    import dopplermap as dm
    from dopplermap.search import apply_parameters, evaluate_point, pad_precomputed

    t0 = time.perf_counter()
    if param == "domega":
        import bench_domega as D

        s = D.make_star(layout=k, n_cell=cells)
        s.update(k=k, inc=s["domega"], vsini=D.VSINI, n_epoch=s["problem"].obs.n_epoch, snr=300.0)
        incs = np.round(np.arange(0.0, 0.1 + 1e-9, step), 6)
        fixed = {"inclination": D.INC, "vsini": D.VSINI}
    else:
        s = B.make_star(k, n_cell=cells)
        incs = np.arange(10.0, 90.0 + 1e-9, step)
        fixed = {"vsini": s["vsini"]}
    p = s["problem"]
    p = p.replace(settings=p.settings.replace(lmbd=1.0, tol=1e-5, maxiter=1000), subdivide=subdivide)
    obs = p.obs
    fl = folds(np.asarray(obs.times), B.PERIOD, n_fold, by)
    vg = _predictor()
    cv = {lm: [] for lm in lmbds}
    reg = []
    rv_err = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for inc in incs:
            params = dict(fixed, **{param: float(inc)})
            reg.append(float(evaluate_point(p, params)["chi2_total"]))
            st, comps = apply_parameters(p, params)
            point = p.replace(star=st, components=comps)
            pre = pad_precomputed(point.pre)
            for lm in lmbds:
                total = 0.0
                for held in fl:
                    err = np.array(obs.err, float)
                    err[held] *= HELD_WEIGHT
                    train = dataclasses.replace(obs, err=err)
                    res = dm.invert(pre, train, **point.invert_kwargs(lmbd=lm * (n_fold - 1) / n_fold))
                    x = np.concatenate([np.asarray(res.fssc, float), np.asarray(res.fssh, float),
                                        np.asarray(res.rv, float), np.asarray(res.amp, float)])
                    c2, rvh = predict(vg, x, held, pre, obs)
                    total += c2
                    if abs(inc - s["inc"]) < step / 2 and lm == lmbds[0]:
                        rv_err.extend((rvh - s["rv"][held]).tolist())
                cv[lm].append(total)
    cvs = {f"cv_{lm:g}": np.asarray(v).tolist() for lm, v in cv.items()}
    cv_min = np.min(np.stack([np.asarray(v) for v in cv.values()]), axis=0)
    row = dict(k=k, param=param, subdivide=subdivide, inc=s["inc"], vsini=s["vsini"], n_epoch=s["n_epoch"], snr=s["snr"], cells=cells, folds=n_fold,
               by=by, lmbds=list(lmbds), incs=incs.tolist(), regularised=reg, cv_min=cv_min.tolist(), **cvs,
               rv_err_near_truth=float(np.sqrt(np.mean(np.square(rv_err)))) if rv_err else None,
               wall_s=time.perf_counter() - t0)
    return row


def _read(incs, prof, truth):
    best, lo, hi = B.continuous_interval(incs, prof, 1.0)
    return best, best - truth, lo, hi


def tables(rows):
    rows = sorted(rows, key=lambda r: r["k"])
    keys = ["regularised"] + [k for k in rows[0] if k.startswith("cv_")]
    print("| star | truth | " + " | ".join(keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    errs = {k: [] for k in keys}
    for r in rows:
        cells = []
        for key in keys:
            best, e, lo, hi = _read(r["incs"], r[key], r["inc"])
            errs[key].append(e)
            cells.append(f"{best:.4g} [{lo:.4g}, {hi:.4g}]")
        print(f"| {r['k']} | {r['inc']:g} | " + " | ".join(cells) + " |")
    print()
    print("| read-out | mean abs error | median | bias | stars |")
    print("|---|---|---|---|---|")
    for key in keys:
        e = np.asarray(errs[key])
        print(f"| {key} | {np.mean(np.abs(e)):.4g} | {np.median(np.abs(e)):.4g} | {np.mean(e):+.4g} | {e.size} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stars", help="star numbers (default: all 12 calibration stars, or 7 layouts for domega)")
    ap.add_argument("--param", choices=("inclination", "domega"), default="inclination")
    ap.add_argument("--subdivide", type=int, default=1)
    ap.add_argument("--cells", type=int, default=1200)
    ap.add_argument("--step", type=float, help="node spacing (default 10 deg, 0.01 rad/d)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--by", choices=("phase", "interleave", "time"), default="phase")
    ap.add_argument("--lmbds", default="1")
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--tables", nargs="*")
    a = ap.parse_args()
    if a.tables:
        rows = [r for f in a.tables for r in json.loads(Path(f).read_text())["stars"]]
        tables(rows)
        return
    lmbds = [float(v) for v in a.lmbds.split(",")]
    stars = a.stars or ",".join(str(i) for i in range(7 if a.param == "domega" else len(B.STARS)))
    step = a.step or (0.01 if a.param == "domega" else 10.0)
    jobs = [(star, (int(k), a.cells, step, a.folds, a.by, lmbds, a.param, a.subdivide)) for k in stars.split(",")]
    res = dict(argv=sys.argv[1:])
    rows = pool_rows(jobs, a.procs, res, a.out,
                     line=lambda r: f"star {r['k']} done in {r['wall_s']:.0f} s")
    tables(rows)


if __name__ == "__main__":
    main()
