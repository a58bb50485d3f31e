"""Device-resident bounded quasi-Newton solver: projected L-BFGS in one ``lax.while_loop``.

Each iteration (all inside one compiled loop, no host round trip):

1. free set: variables not held at a bound by the gradient
   (``x = lo`` and ``g > 0``, or ``x = hi`` and ``g < 0``, are fixed);
2. direction ``d = -H g`` on the free set by the L-BFGS two-loop recursion over the last
   ``maxcor`` pairs ``(s, y)`` restricted to the free variables (``H0 = s'y / y'y``);
   steepest descent if ``d'g >= 0``;
3. projected backtracking (Armijo) line search along ``P(x + a d)``, ``a`` halving from 1
   (first iteration: from ``1 / max|g|``);
4. stop when ``(f_old - f) / max(|f_old|, |f|, 1) <= ftol`` or the projected gradient's
   max norm ``<= gtol`` (scipy L-BFGS-B's criteria), or after ``maxiter`` iterations.
   As in the scipy path (:func:`dopplermap.solvers.scipy_lbfgsb.lbfgsb`), a relative-
   reduction stop first restarts the memory (at most ``max_restarts`` times) unless the run
   since the last restart gained less than ``ftol`` in total: one tiny step amid large
   ones stops L-BFGS far from the optimum (seen at lambda 0.1 on the seed-size problem:
   2.4e-4 above scipy's loss with 10 pairs, 3 % with 20).

The function is pure: ``jit`` and ``vmap`` (e.g. over lambda) work on it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from ._common import LBFGSOptions

__all__ = ["LBFGSResult", "LBFGSOptions", "projected_lbfgs", "STOP_REASONS"]

STOP_REASONS = ("running", "ftol: relative reduction of the loss <= tol",
                "gtol: projected gradient <= tol", "maxiter reached", "line search failed")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LBFGSResult:
    """Result of :func:`projected_lbfgs` (arrays; batched under ``vmap``).

    Attributes:
        x: (n,) solution. f: loss. g: (n,) gradient. aux: the objective's auxiliary output.
        n_iter, n_eval: iterations and objective evaluations.
        status: index into ``STOP_REASONS`` (1 ftol, 2 gtol, 3 maxiter, 4 line search).
        history: (maxiter,) loss after each iteration (NaN beyond ``n_iter``).
        restarts: memory restarts after relative-reduction stops.
    """

    x: jnp.ndarray
    f: jnp.ndarray
    g: jnp.ndarray
    aux: object
    n_iter: jnp.ndarray
    n_eval: jnp.ndarray
    status: jnp.ndarray
    history: jnp.ndarray
    restarts: jnp.ndarray


def _h0_scale(s, y, k):
    """``s'y / y'y`` of the newest pair (the L-BFGS initial scale), NaN without a pair."""
    yy = jnp.dot(y, y)
    return jnp.where((k > 0) & (yy > 0), jnp.dot(s, y) / jnp.where(yy > 0, yy, 1.0), jnp.nan)


def _two_loop(g, s_hist, y_hist, rho, k, maxcor, free=None):
    """``H g`` by the L-BFGS two-loop recursion.

    The pairs are stored newest first (row 0 the latest), so every index below is the loop
    counter, never a per-member value: under ``vmap`` (a batch of solves with different
    memory lengths) the rows are plain slices, not gathers (cheaper per iteration; see
    benchmarks/RESULTS.md, solver design measurements).

    With ``free`` (bool mask) the pairs are restricted to the free variables (their
    curvature ``s'y`` recomputed there, pairs without positive curvature skipped): the
    quasi-Newton model of the subspace the step moves in.
    """
    n_pairs = jnp.minimum(k, maxcor)
    m = None
    if free is not None:
        # restricted pairs (m s, m y) without forming them: the vectors q and r are kept
        # masked instead (g is zero on the fixed variables), so s'q = (m s)'q and so on
        m = free.astype(g.dtype)
        ym = y_hist * m
        sy = jnp.sum(s_hist * ym, axis=1)
        ok = sy > 1e-10 * jnp.sum(y_hist * ym, axis=1)
        rho = jnp.where(ok, 1.0 / jnp.where(ok, sy, 1.0), 0.0)
        g = g * m

    def first(i, carry):  # newest to oldest
        q, alpha = carry
        a = jnp.where(i < n_pairs, rho[i] * jnp.dot(s_hist[i], q), 0.0)
        q = q - a * y_hist[i]
        return (q if m is None else q * m), alpha.at[i].set(a)

    q, alpha = jax.lax.fori_loop(0, maxcor, first, (g, jnp.zeros(maxcor, g.dtype)))
    s0, y0 = (s_hist[0], y_hist[0]) if m is None else (s_hist[0] * m, y_hist[0] * m)
    gamma = _h0_scale(s0, y0, k)
    gamma = jnp.where(gamma > 0, gamma, 1.0)  # NaN (no pair) or no curvature: 1
    r = gamma * q

    def second(t, r):  # oldest to newest: rows maxcor - 1 .. 0, those beyond n_pairs skipped
        i = maxcor - 1 - t
        b = rho[i] * jnp.dot(y_hist[i], r)
        rn = r + s_hist[i] * (alpha[i] - b)
        return jnp.where(i < n_pairs, rn if m is None else rn * m, r)

    return jax.lax.fori_loop(0, maxcor, second, r)


def projected_lbfgs(fun: Callable, x0, lower, upper, *args, options: LBFGSOptions | None = None,
                    report: Callable | None = None) -> LBFGSResult:
    """Minimise ``fun(x, *args) -> (loss, grad, aux)`` subject to ``lower <= x <= upper``.

    Args:
        fun: value, gradient and auxiliary output (jax-traceable).
        x0, lower, upper: (n,) start and bounds (``-inf``/``inf`` for free variables).
        args: extra arguments of ``fun`` (e.g. lambda, data); they may be traced.
        options: an :class:`~dopplermap.solvers._common.LBFGSOptions` (static; default its defaults): ``maxiter``,
            ``ftol``/``gtol`` (see module), ``maxcor`` (stored correction pairs), the line
            search's ``max_backtrack`` and ``c1``, ``max_restarts`` (see module).
        report: optional ``report(iteration, loss, aux)``, traced into the loop body after
            every iteration (e.g. a ``jax.debug.callback`` for progress; static).
    """
    options = LBFGSOptions() if options is None else options
    maxiter, ftol, gtol, maxcor = options.maxiter, options.ftol, options.gtol, options.maxcor
    max_backtrack, c1, max_restarts = options.max_backtrack, options.c1, options.max_restarts
    x0 = jnp.clip(jnp.asarray(x0), lower, upper)
    n = x0.shape[0]
    dtype = x0.dtype
    # The objective is written into the program once, in the line search: the first pass of
    # the loop (``init``) only evaluates x0 (loss +inf and zero gradient make its direction
    # zero and its step acceptable). A separate evaluation before the loop compiled the
    # objective twice.
    aux_shape = jax.eval_shape(fun, x0, *args)[2]

    def pgnorm(x, g):
        return jnp.max(jnp.abs(x - jnp.clip(x - g, lower, upper)))

    state0 = dict(x=x0, f=jnp.asarray(jnp.inf, dtype), g=jnp.zeros_like(x0),
                  aux=jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), aux_shape),
                  s=jnp.zeros((maxcor, n), dtype), y=jnp.zeros((maxcor, n), dtype),
                  rho=jnp.zeros(maxcor, dtype), k=jnp.zeros((), jnp.int32), it=jnp.zeros((), jnp.int32),
                  nev=jnp.zeros((), jnp.int32), status=jnp.zeros((), jnp.int32),
                  hist=jnp.full(maxiter, jnp.nan, dtype), f_run=jnp.asarray(jnp.inf, dtype),
                  restarts=jnp.zeros((), jnp.int32), gamma0=jnp.asarray(jnp.nan, dtype), init=jnp.ones((), bool))

    def cond(st):
        return st["status"] == 0

    def body(st):
        x, f, g = st["x"], st["f"], st["g"]
        fixed = ((x <= lower) & (g > 0)) | ((x >= upper) & (g < 0))
        gf = jnp.where(fixed, 0.0, g)
        # pairs restricted to the free variables: without it the solve crawls near the optimum
        # once many bounds are active
        d = -_two_loop(gf, st["s"], st["y"], st["rho"], st["k"], maxcor, free=~fixed)
        d = jnp.where(fixed, 0.0, d)
        descent = jnp.dot(d, gf) < 0
        d = jnp.where(descent, d, -gf)
        # fresh memory: the first step is 1 / max|g| along -g, or after a restart the last
        # run's scale s'y / y'y (as the two-loop recursion's H0), so no backtracking from afar
        first = jnp.where(jnp.isnan(st["gamma0"]), 1.0 / jnp.maximum(jnp.max(jnp.abs(gf)), 1e-300), st["gamma0"])
        a0 = jnp.where(st["k"] == 0, first, 1.0)
        a0 = jnp.where(st["init"], 1.0, a0).astype(dtype)  # init: d = 0, any step evaluates x0

        def ls_cond(c):
            return (~c["ok"]) & (c["i"] < max_backtrack)

        def ls_body(c):
            a = c["a"]
            xn = jnp.clip(x + a * d, lower, upper)
            fn, gn, auxn = fun(xn, *args)
            ok = jnp.isfinite(fn) & (fn <= f + c1 * jnp.dot(g, xn - x))
            return dict(a=jnp.where(ok, a, 0.5 * a), i=c["i"] + 1, ok=ok, x=xn, f=fn, g=gn, aux=auxn)

        ls0 = dict(a=a0, i=jnp.zeros((), jnp.int32), ok=jnp.zeros((), bool), x=x, f=f, g=g, aux=st["aux"])
        ls = jax.lax.while_loop(ls_cond, ls_body, ls0)
        ok = ls["ok"]
        xn = jnp.where(ok, ls["x"], x)
        fn = jnp.where(ok, ls["f"], f)
        gn = jnp.where(ok, ls["g"], g)
        auxn = jax.tree_util.tree_map(lambda u, v: jnp.where(ok, u, v), ls["aux"], st["aux"])
        s, y = xn - x, gn - g
        sy = jnp.dot(s, y)
        keep = ok & (sy > 1e-10 * jnp.dot(y, y)) & ~st["init"]
        # newest first: shift the memory down one row (no per-member index: see _two_loop)
        s_hist = jnp.where(keep, jnp.concatenate([s[None], st["s"][:-1]]), st["s"])
        y_hist = jnp.where(keep, jnp.concatenate([y[None], st["y"][:-1]]), st["y"])
        rho = jnp.where(keep, jnp.concatenate([(1.0 / jnp.where(sy > 0, sy, 1.0))[None], st["rho"][:-1]]), st["rho"])
        it = st["it"] + (~st["init"]).astype(jnp.int32)

        def reduction(a, b):
            return (a - b) / jnp.maximum(jnp.maximum(jnp.abs(a), jnp.abs(b)), 1.0)

        ftol_stop = reduction(f, fn) <= ftol
        gained = jnp.where(jnp.isinf(st["f_run"]), jnp.inf, reduction(st["f_run"], fn))  # since the last (re)start
        restart = ok & ftol_stop & (gained >= ftol) & (st["restarts"] < max_restarts) & (it < maxiter)
        status = jnp.where(~ok, 4, jnp.where(ftol_stop & ~restart, 1, jnp.where(pgnorm(xn, gn) <= gtol, 2,
                                                                                 jnp.where(it >= maxiter, 3, 0))))
        k = st["k"] + keep.astype(jnp.int32)
        gamma = _h0_scale(s_hist[0], y_hist[0], k)
        k = jnp.where(restart, 0, k)
        if report is not None:  # not for the init pass, which only evaluates x0
            jax.lax.cond(st["init"], lambda: None, lambda: report(it, fn, auxn))
        return dict(x=xn, f=fn, g=gn, aux=auxn, s=s_hist, y=y_hist, rho=rho, k=k,
                    it=it, nev=st["nev"] + ls["i"], status=status.astype(jnp.int32),
                    hist=jnp.where(st["init"], st["hist"], st["hist"].at[st["it"]].set(fn)),
                    f_run=jnp.where(restart, fn, st["f_run"]), restarts=st["restarts"] + restart.astype(jnp.int32),
                    gamma0=jnp.where(restart, gamma, st["gamma0"]), init=jnp.zeros((), bool))

    st = jax.lax.while_loop(cond, body, state0)
    return LBFGSResult(x=st["x"], f=st["f"], g=st["g"], aux=st["aux"], n_iter=st["it"], n_eval=st["nev"],
                       status=st["status"], history=st["hist"], restarts=st["restarts"])
