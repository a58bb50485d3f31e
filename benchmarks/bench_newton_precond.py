"""How well a low-rank (Nystrom) preconditioner would serve Newton's CG at a sweep's low lambdas.

The seed-size problem of ``dopplermap lambda`` (2500 cells, 150 epochs, 32 velocities, tol 1e-7)
is swept downwards with Newton (``bench_newton_lowlambda.py``) to ``--at``; at that lambda's
start (the map of the lambda above) the exact Gauss-Newton Hessian on the free variables is
formed densely (``J`` from one VJP per data point), and the CG steps to a relative residual
of 1e-2 are counted for:

* the solver's diagonal preconditioner, with the exact ``diag(2 J'J)`` and with the 8-probe
  estimate the solver uses (emulated: the exact diagonal times chi2_8 / 8 per variable);
* ``2 J'J ~ U L U'`` from a rank-``r`` Nystrom sketch (Gaussian test matrix), plus the rest of the
  diagonal, inverted by Woodbury on the free variables, with the sketch taken at the same point
  ("fresh") or at the solutions of the next one and two lambdas up ("stale": a sketch reused
  along the sweep).

It also times the Gauss-Newton products one at a time and as one vmapped batch of the largest
rank (what the sketch costs). Dense linear algebra on the host (a few minutes); prints a table.

    PYTHONPATH=src python benchmarks/bench_newton_precond.py [--at 0.0028] [--ranks 100,200,400,800]
"""

import argparse
import dataclasses
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import dopplermap as dm
import dopplermap.solvers as S
from dopplermap.app.search import load_problem
from dopplermap.solvers import newton as N


def hessian_parts(setup, x):
    """``2 J'J``, the smooth term's Hessian, the gradient and the free mask at ``x`` (the solver's
    two-metric rule)."""
    lm = setup.lmbd
    xj = jnp.asarray(x)
    r0, vjp = jax.vjp(lambda v: N.line_residuals(v, lm, setup.pre, setup.data), xj)
    m = r0.shape[0]
    rows = jax.jit(jax.vmap(lambda u: vjp(u)[0]))
    J = np.concatenate([np.asarray(rows(jnp.eye(m)[s:s + 400])) for s in range(0, m, 400)])
    sm = lambda v: N.smooth_terms(v, lm, setup.pre, setup.data, regulariser=setup.regulariser,  # noqa: E731
                                  penalty=setup.penalty)
    hs = np.asarray(jax.hessian(sm)(xj))
    g = 2 * J.T @ np.asarray(r0) + np.asarray(jax.grad(sm)(xj))
    lo, hi = np.asarray(setup.lower), np.asarray(setup.upper)
    eps = min(N.EPS_ACTIVE, np.max(np.abs(x - np.clip(x - g, lo, hi))))
    held = (lo >= hi) | ((x <= lo + eps) & (g > 0)) | ((x >= hi - eps) & (g < 0))
    return 2 * J.T @ J, hs, g, ~held


def product_seconds(setup, x, columns):
    """Seconds per Gauss-Newton product ``2 J'J v`` on the solve's product form, one at a time
    and ``columns`` at once through ``jax.vmap`` (what a sketch costs)."""
    form = N.products_form(setup) or setup.pre
    out = {}
    for k in (1, columns):
        @jax.jit
        def products(x, v):
            r0, vjp = jax.vjp(lambda y: N.line_residuals(y, setup.lmbd, form, setup.data), x)
            jv = jax.linear_transpose(lambda u: vjp(u)[0], r0)
            one = lambda c: 2.0 * vjp(jv(c)[0])[0]  # noqa: E731
            return one(v) if v.ndim == 1 else jax.vmap(one)(v)
        v = jnp.asarray(np.random.default_rng(1).standard_normal((k, x.shape[0]) if k > 1 else x.shape[0]))
        products(jnp.asarray(x), v).block_until_ready()
        t = time.perf_counter()
        for _ in range(3):
            products(jnp.asarray(x), v).block_until_ready()
        out[k] = (time.perf_counter() - t) / 3 / k
    return out


def cg_steps(h, b, apply_pinv, tol=1e-2, maxit=1500):
    x, r = np.zeros_like(b), b.copy()
    z = apply_pinv(r)
    p, rz = z.copy(), r @ z
    for k in range(maxit):
        ap = h @ p
        a = rz / (p @ ap)
        x += a * p
        r -= a * ap
        if np.linalg.norm(r) <= tol * np.linalg.norm(b):
            return k + 1
        z = apply_pinv(r)
        rz_new = r @ z
        p, rz = z + rz_new / rz * p, rz_new
    return f">{maxit}"


def nystrom(a, rank, rng):
    """``a ~ U diag(lam) U'`` (Tropp et al. 2017's stable Nystrom), components above 1e-9 of the largest."""
    om = np.linalg.qr(rng.standard_normal((a.shape[0], rank)))[0]
    y = a @ om
    nu = 1e-10 * np.linalg.norm(y)
    y = y + nu * om
    b = np.linalg.solve(np.linalg.cholesky(om.T @ y), y.T).T
    u, sv, _ = np.linalg.svd(b, full_matrices=False)
    lam = np.maximum(sv ** 2 - nu, 0.0)
    keep = lam > 1e-9 * lam[0]
    return u[:, keep], lam[keep]


def woodbury(u, lam, diag, floor):
    """The inverse of ``U diag(lam) U' + E`` with ``E = max(diag - diag(U lam U'), floor)``."""
    e = np.maximum(diag - np.einsum("ij,j,ij->i", u, lam, u), floor)
    chol = np.linalg.cholesky(np.diag(1 / lam) + (u / e[:, None]).T @ u)

    def apply(r):
        t = np.linalg.solve(chol.T, np.linalg.solve(chol, u.T @ (r / e)))
        return r / e - (u @ t) / e
    return apply


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--at", type=float, default=0.0028, help="the lambda whose first Newton system is read")
    ap.add_argument("--ranks", default="100,200,400,800")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    setups = []
    solve = S._BACKENDS["newton"].solve

    def keep_setup(setup, callback=None):
        setups.append(setup)
        return solve(setup, callback)

    S._BACKENDS["newton"] = dataclasses.replace(S._BACKENDS["newton"], solve=keep_setup)
    prob = load_problem(None, quiet=True, tol=1e-7, n_cell=2500, n_epoch=150, n_vel=32)
    lmbds = [v for v in np.logspace(-3, 2, 12)[::-1] if v >= a.at * 0.99]
    x, points = None, []
    t0 = time.perf_counter()
    for lm in lmbds:
        r = dm.invert(prob, lmbd=lm, x0=x, solver="newton")
        points.append((lm, setups[-1], x, np.asarray(r.x)))
        x = r.x
    print(f"sweep to lambda {lmbds[-1]:.4g}: {time.perf_counter() - t0:.1f} s")
    ranks = [int(v) for v in a.ranks.split(",")]
    per = product_seconds(points[-1][1], np.asarray(points[-1][2]), max(ranks))
    print(f"Gauss-Newton products: {1e3 * per[1]:.2f} ms one at a time, {1e3 * per[max(ranks)]:.2f} ms a column "
          f"in a batch of {max(ranks)} ({max(ranks) * per[max(ranks)]:.2f} s)")
    lm, setup, start, _ = points[-1]
    a_b, hs_b, g_b, free = hessian_parts(setup, np.asarray(start))
    h = (a_b + hs_b)[np.ix_(free, free)]
    b = -g_b[free]
    d_exact = np.diag(h).copy()
    rng = np.random.default_rng(0)
    d_probe = (np.diag(a_b) * rng.chisquare(8, a_b.shape[0]) / 8 + np.diag(hs_b))[free]
    floor = np.diag(hs_b)[free] + 1e-12 * d_exact.max()
    print(f"lambda {lm:.4g}: {free.sum()} free of {free.size}; CG steps to a relative residual of 1e-2")
    print("| preconditioner | exact diag(2 J'J) | 8-probe estimate |\n|---|---|---|")
    print(f"| diagonal | {cg_steps(h, b, lambda r: r / d_exact)} | {cg_steps(h, b, lambda r: r / d_probe)} |")
    sources = [("fresh", a_b)] + [(f"stale: the solution at lambda {p[0]:.4g}", hessian_parts(p[1], p[3])[0])
                                  for p in points[-3:-1][::-1]]
    for name, a_src in sources:
        for rank in ranks:
            u, lam = nystrom(a_src, rank, rng)
            uf = u[free]
            cols = [cg_steps(h, b, woodbury(uf, lam, d, floor)) for d in (d_exact, d_probe)]
            print(f"| Nystrom rank {rank}, {name} | {cols[0]} | {cols[1]} |", flush=True)


if __name__ == "__main__":
    main()
