"""Light curves alone: Gauss-Newton steps whose bounded subproblem is solved exactly.

A map fitted to light curves alone has thousands of filling factors and a few hundred data.
The entropy's curvature ``~ lambda / f`` spans five decades between the floor and a spot, and
L-BFGS-B on it stops "converged" far above the minimum (the real TESS sector at lambda 0.1:
loss 6.25 at the default tolerance, 4.87 after 7,000 iterations at ``tol = 1e-10``, against a
minimum of 4.7146; benchmarks/RESULTS.md). This back end (``solver="newton"`` on such a
problem) takes Gauss-Newton steps instead. Each step minimises the local model

    m(u) = g'u + u'Hu / 2 + |J u|^2

over the bounds and the face ``fssc + fssh <= 1`` exactly, where ``J`` is the light curves'
(weighted) residual Jacobian, explicit, ``(n_data, 2 n_cell)``, and ``H`` the regulariser's
and penalty's Hessian, which is 2 x 2 per cell (the entropies are sums over cells). The
subproblem is solved through its dual over the data (``|Ju|^2 = max_nu nu'Ju - nu'nu / 4``):
for a given ``nu`` every cell's 2-variable problem on its triangle of allowed filling factors
has a closed form, and the dual, concave and piecewise quadratic in ``n_data`` unknowns, is
maximised by a semismooth Newton method (its Hessian ``I / 2 + J M J'``, ``M`` each cell's
inverse curvature on the edge or interior it sits on). Without the exact subproblem the
projected steps leave the model: a projected Newton step on the same data raised the model's
chi2 by up to 380 and its trust region shrank to steps of 1e-3.

The outer loop is a Levenberg-Marquardt trust region in the regulariser's metric
(``H -> (1 + mu) H``), on the host; the Jacobian, the Hessian blocks and the dual solve are
compiled once per problem shape. It needs a regulariser with curvature in every cell
(the entropies ``mem`` and ``mem_spotdipy``), ``lambda > 0``, one static map and at most
:data:`MAX_POINTS` light-curve points (the dual's dense ``n_data x n_data`` system).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .. import _device
from ..compiled import compile_cached
from ..lightcurve import weighted_residuals
from ..objective import NoLines, ObjectiveData, data_terms, n_windows
from ..result import Outcome
from ._common import RawSolve, SolveSetup
from .program import compiled_value_and_grad

__all__ = ["fits", "why_not", "why_not_of", "seconds", "solve", "cell_minimum", "subproblem", "local_model", "MAX_POINTS",
           "REGULARISERS", "DUAL_FLOP_RATE", "TYPICAL_DUAL_ITERATIONS"]

MAX_POINTS = 3000
"""The most light-curve points the back end takes: its dual system is ``n_data x n_data``,
formed against the ``(n_data, 2 n_cell)`` Jacobian on every dual iteration."""

REGULARISERS = ("mem", "mem_spotdipy")
"""The regularisers whose Hessian is positive in every cell (the subproblem's ``H``)."""

DUAL_FLOP_RATE = 6e10
"""Floating-point operations per second of the dual's ``n_data x n_data`` products, as measured
on a 2-core CPU (benchmarks/RESULTS.md, "Light curves alone"): 0.27 s a dual iteration at
1302 points x 2500 cells. For :func:`seconds`, an estimate printed before a solve."""

TYPICAL_DUAL_ITERATIONS = 150
"""Dual iterations of a solve from the flat start, about (15-20 steps of 3-13 each)."""

_MAX_DUAL = 60
_MAX_TRIALS = 40  # trust-region trials per step before it reports a failed step


def seconds(n_data: int, n_cell: int) -> float:
    """About how long a solve of ``n_data`` points on ``n_cell`` cells takes: its dual
    iterations' ``n_data x n_data`` products against the ``(n_data, 2 n_cell)`` Jacobian."""
    return TYPICAL_DUAL_ITERATIONS * 2.0 * n_data * n_data * 2 * n_cell / DUAL_FLOP_RATE


def fits(pre, lightcurve, regulariser: str, lmbd: float) -> bool:
    """Whether this back end can solve the problem: light curves alone, one static map, an
    entropy regulariser with ``lambda > 0`` and at most :data:`MAX_POINTS` points."""
    return why_not(pre, lightcurve, regulariser, lmbd) is None


def why_not(pre, lightcurve, regulariser: str, lmbd: float) -> str | None:
    """Why :func:`fits` is False, in words (None when it fits)."""
    if not isinstance(pre, NoLines) or lightcurve is None:
        return "it fits light curves alone"
    return why_not_of(n_windows(pre), int(lightcurve.n_lc), regulariser, lmbd)


def why_not_of(n_window: int, n_data: int, regulariser: str, lmbd: float) -> str | None:
    """:func:`why_not` of a problem of light curves alone from its counts and settings (before its
    model is built)."""
    if n_window > 1:
        return "it fits one static map; with time windows use 'lbfgsb' or 'projected_lbfgs'"
    if regulariser not in REGULARISERS:
        return f"it needs an entropy regulariser ({', '.join(REGULARISERS)}), not {regulariser!r}"
    if not lmbd > 0:
        return f"it needs lambda > 0, got {lmbd:g}"
    if n_data > MAX_POINTS:
        return f"it takes at most {MAX_POINTS} light-curve points, got {n_data} (bin the curve)"
    return None


def _residuals(x, data: ObjectiveData):
    n = x.shape[0] // 2
    return jnp.sqrt(data.lc_weight) * weighted_residuals(x[:n], x[n:], data.lightcurve)


def _jacobian_body(x, lmbd, pre, data, *, regulariser, penalty):
    """The residuals and their Jacobian ``(n_data, 2 n_cell)`` (reverse mode: one pass per datum)."""
    return _residuals(x, data), jax.jacrev(_residuals)(x, data)


def _blocks_body(x, lmbd, pre, data, *, regulariser, penalty):
    """``(a, c, d)``: each cell's 2 x 2 Hessian block ``[[a, c], [c, d]]`` of the loss less the
    light curves' chi2 (regulariser and penalty, both sums over cells: two products with the
    Hessian, one per component, read every block)."""
    n = x.shape[0] // 2

    def rest(z):
        return data_terms(z, lmbd, pre, data, regulariser, penalty)[0] - jnp.sum(_residuals(z, data) ** 2)

    ones, zeros = jnp.ones(n, x.dtype), jnp.zeros(n, x.dtype)
    grad = jax.grad(rest)
    hc = jax.jvp(grad, (x,), (jnp.concatenate([ones, zeros]),))[1]
    hh = jax.jvp(grad, (x,), (jnp.concatenate([zeros, ones]),))[1]
    return hc[:n], hc[n:], hh[n:]


def _programs(args, regulariser: str, penalty: float):
    """The compiled Jacobian and Hessian-block programs of ``args = (x, lmbd, pre, data)``, and
    their compile seconds."""
    static = {"regulariser": regulariser, "penalty": float(penalty)}
    jacobian, t_j = compile_cached("photometry_jacobian", _jacobian_body, args, static)
    blocks, t_b = compile_cached("photometry_blocks", _blocks_body, args, static)
    return jacobian, blocks, sum(t["trace_lower"] + t["compile"] for t in (t_j, t_b))


def local_model(x, lmbd, pre, data: ObjectiveData, regulariser: str, penalty: float):
    """``(residuals, jacobian, (a, c, d))`` at ``x``: the light curves' weighted residuals (whose
    squared norm is the loss's data term), their Jacobian ``(n_data, 2 n_cell)`` and each
    cell's Hessian block of the rest of the loss (regulariser and penalty), compiled once per
    shape: the Gauss-Newton model of the loss, and of a Laplace approximation."""
    xj = _device.asarray(np.asarray(x, dtype=np.float64))
    args = (xj, _device.asarray(lmbd, dtype=xj.dtype), pre, data)
    jacobian, blocks, _ = _programs(args, regulariser, penalty)
    res, jac = jacobian(*args)
    return res, jac, blocks(*args)


def _block_quad(v1, v2, a, c, d):
    """Each cell's ``v' [[a, c], [c, d]] v``."""
    return v1 * (a * v1 + c * v2) + v2 * (c * v1 + d * v2)


def cell_minimum(h, block, x, lower, upper):
    """Each cell's minimum of ``h'v + v'Hv / 2`` (``H = [[a, c], [c, d]]`` positive definite)
    over ``y = x + v`` in the box ``[l1, u1] x [l2, u2]`` cut by ``y1 + y2 <= 1``. Every
    argument holds one array per cell: ``h = (h1, h2)``, ``block = (a, c, d)``, ``x = (x1, x2)``,
    ``lower = (l1, l2)``, ``upper = (u1, u2)``.

    Returns ``(v1, v2, m11, m12, m22)``: the step and ``M = -dv/dh``, the inverse curvature on
    the piece the minimum lies on (``H^-1`` inside, ``e e' / e'He`` on an edge of direction
    ``e``, 0 at a vertex). The minimum of a convex quadratic on the polygon is the free one
    where allowed, else the least of the edges' 1-D minima (each clipped to its edge)."""
    (h1, h2), (a, c, d), (x1, x2), (l1, l2), (u1, u2) = h, block, x, lower, upper
    det = a * d - c * c
    f1 = x1 - (d * h1 - c * h2) / det
    f2 = x2 - (a * h2 - c * h1) / det
    inside = (f1 >= l1) & (f1 <= u1) & (f2 >= l2) & (f2 <= u2) & (f1 + f2 <= 1.0)

    def q(y1, y2):
        v1, v2 = y1 - x1, y2 - x2
        return h1 * v1 + h2 * v2 + 0.5 * (a * v1 * v1 + 2.0 * c * v1 * v2 + d * v2 * v2)

    def along2(y1, top):  # y1 fixed: y2 in [l2, top]
        t = x2 - (h2 + c * (y1 - x1)) / d
        y2 = jnp.clip(t, l2, top)
        ok = l2 <= top
        return y1, y2, jnp.where(ok, q(y1, y2), jnp.inf), (t > l2) & (t < top)

    def along1(y2, top):  # y2 fixed: y1 in [l1, top]
        t = x1 - (h1 + c * (y2 - x2)) / a
        y1 = jnp.clip(t, l1, top)
        ok = l1 <= top
        return y1, y2, jnp.where(ok, q(y1, y2), jnp.inf), (t > l1) & (t < top)

    # the face y1 + y2 = 1, y1 in [max(l1, 1 - u2), min(u1, 1 - l2)]
    s0 = 1.0 - x1 - x2
    qa = a - 2.0 * c + d
    lo_f, hi_f = jnp.maximum(l1, 1.0 - u2), jnp.minimum(u1, 1.0 - l2)
    t = x1 - (h1 - h2 + (c - d) * s0) / qa
    yf = jnp.clip(t, lo_f, hi_f)
    face = (yf, 1.0 - yf, jnp.where(lo_f <= hi_f, q(yf, 1.0 - yf), jnp.inf), (t > lo_f) & (t < hi_f))
    edges = [along2(l1, jnp.minimum(u2, 1.0 - l1)), along2(u1, jnp.minimum(u2, 1.0 - u1)),
             along1(l2, jnp.minimum(u1, 1.0 - l2)), along1(u2, jnp.minimum(u1, 1.0 - u2)), face]
    k = jnp.argmin(jnp.stack([e[2] for e in edges]), axis=0)
    pick = [jnp.choose(k, [e[i] for e in edges], mode="clip") for i in (0, 1, 3)]
    y1, y2, open_ = pick
    zero = jnp.zeros_like(a)
    # M on the chosen edge: direction (0, 1) for edges 0-1, (1, 0) for 2-3, (1, -1) for the face
    m11 = jnp.where(k >= 2, jnp.where(k == 4, 1.0 / qa, 1.0 / a), zero)
    m22 = jnp.where(k <= 1, 1.0 / d, jnp.where(k == 4, 1.0 / qa, zero))
    m12 = jnp.where(k == 4, -1.0 / qa, zero)
    m11, m12, m22 = (jnp.where(open_, m, zero) for m in (m11, m12, m22))
    v1 = jnp.where(inside, f1 - x1, y1 - x1)
    v2 = jnp.where(inside, f2 - x2, y2 - x2)
    return (v1, v2, jnp.where(inside, d / det, m11), jnp.where(inside, -c / det, m12),
            jnp.where(inside, a / det, m22))


def subproblem(g, jac, block, x, bounds, nu0):
    """The step ``u`` minimising ``g'u + u'Hu/2 + |jac u|^2`` with ``lower <= x + u <= upper``
    (``bounds = (lower, upper)``) and ``fssc + fssh <= 1``, ``H`` the cells' blocks
    ``block = (a, c, d)``, by the dual over the data (module docstring); ``nu0`` the start of
    the dual. Returns ``(u, nu, iterations)``."""
    a, c, d = block
    n = a.shape[0]
    m = jac.shape[0]
    lower, upper = bounds

    def halves(v):
        return v[:n], v[n:]

    def primal(nu):
        h = g + jac.T @ nu
        v1, v2, m11, m12, m22 = cell_minimum(halves(h), block, halves(x), halves(lower), halves(upper))
        v = jnp.concatenate([v1, v2])
        quad = 0.5 * jnp.sum(_block_quad(v1, v2, a, c, d))
        return v, (m11, m12, m22), h @ v + quad - nu @ nu / 4.0

    def cond(st):
        return (~st["done"]) & (st["k"] < _MAX_DUAL)

    def body(st):
        nu, v, (m11, m12, m22), phi = st["nu"], st["v"], st["m"], st["phi"]
        grad = jac @ v - nu / 2.0
        jm = jnp.concatenate([jac[:, :n] * m11 + jac[:, n:] * m12, jac[:, :n] * m12 + jac[:, n:] * m22], axis=1)
        step = jnp.linalg.solve(0.5 * jnp.eye(m, dtype=g.dtype) + jm @ jac.T, grad)
        slope = grad @ step

        def ls_cond(c_):
            return (~c_["ok"]) & (c_["i"] < 40)

        def ls_body(c_):
            nn = nu + c_["t"] * step
            vn, mn, pn = primal(nn)
            ok = pn >= phi + 1e-4 * c_["t"] * slope
            return dict(t=jnp.where(ok, c_["t"], 0.5 * c_["t"]), i=c_["i"] + 1, ok=ok, nu=nn, v=vn, m=mn, phi=pn)

        ls = jax.lax.while_loop(ls_cond, ls_body, dict(t=jnp.ones((), g.dtype), i=0, ok=False, nu=nu, v=v,
                                                        m=(m11, m12, m22), phi=phi))
        small = jnp.max(jnp.abs(grad)) <= 1e-12 * jnp.maximum(1.0, jnp.max(jnp.abs(nu)))
        done = small | ~ls["ok"] | (ls["phi"] - phi <= 1e-15 * jnp.maximum(1.0, jnp.abs(phi)))
        take = ls["ok"] & ~small
        pick = jax.tree_util.tree_map(lambda new, old: jnp.where(take, new, old),
                                      (ls["nu"], ls["v"], ls["m"], ls["phi"]), (nu, v, (m11, m12, m22), phi))
        return dict(nu=pick[0], v=pick[1], m=pick[2], phi=pick[3], k=st["k"] + 1, done=done)

    v0, m0, p0 = primal(nu0)
    st = jax.lax.while_loop(cond, body, dict(nu=nu0, v=v0, m=m0, phi=p0, k=0, done=False))
    return st["v"], st["nu"], st["k"]


def _step_body(g, jac, a, c, d, x, lower, upper, nu0, mu):
    """One trial step at damping ``mu``: the subproblem's step, the point (feasible), its
    predicted reduction of the undamped model, the dual for the next start."""
    k = 1.0 + mu
    v, nu, its = subproblem(g, jac, (k * a, k * c, k * d), x, (lower, upper), nu0)
    n = a.shape[0]
    xn = jnp.clip(x + v, lower, upper)
    excess = jnp.maximum(xn[:n] + xn[n:] - 1.0, 0.0)  # rounding only
    xn = xn - jnp.concatenate([excess, jnp.zeros_like(excess)])
    v = xn - x
    jv = jac @ v
    pred = -(g @ v + jv @ jv + 0.5 * jnp.sum(_block_quad(v[:n], v[n:], a, c, d)))
    return xn, pred, nu, its


def solve(setup: SolveSetup, callback: Callable | None = None) -> RawSolve:
    """The light-curves-alone back end of ``solver="newton"`` (module docstring);
    ``callback(iteration, history)`` after every iteration."""
    x = np.asarray(setup.x0, dtype=np.float64)
    xj = _device.asarray(x)
    lm = _device.asarray(setup.lmbd, dtype=xj.dtype)
    args = (xj, lm, setup.pre, setup.data)
    vg, t_vg = compiled_value_and_grad(*args, setup.regulariser, float(setup.penalty))
    jacobian, blocks, t_model = _programs(args, setup.regulariser, setup.penalty)
    lower, upper = _device.asarray(setup.lower), _device.asarray(setup.upper)
    n_data = int(setup.data.lightcurve.n_lc)
    nu = jnp.zeros(n_data, xj.dtype)
    mu = jnp.asarray(0.0, xj.dtype)
    step_args = (xj, jnp.zeros((n_data, x.size), xj.dtype), *(jnp.zeros(x.size // 2, xj.dtype),) * 3,
                 xj, lower, upper, nu, mu)
    step, t_s = compile_cached("photometry_step", _step_body, step_args)
    compile_time = t_model + sum(t["trace_lower"] + t["compile"] for t in (t_vg, t_s))

    t0 = time.perf_counter()
    f, g, aux = vg(xj, lm, setup.pre, setup.data)
    f = float(f)
    history = {"loss": [], "chi2": [], "regulariser": []}
    damping, n_eval, outcome, reason, it = 1e-3, 1, Outcome.MAX_ITERATIONS, "maxiter reached", 0
    tol = setup.tol
    while it < setup.maxiter:
        _, jac = jacobian(xj, lm, setup.pre, setup.data)
        a, c, d = blocks(xj, lm, setup.pre, setup.data)
        for _trial in range(_MAX_TRIALS):
            xn, pred, nu_n, _its = step(g, jac, a, c, d, xj, lower, upper, nu, jnp.asarray(damping, xj.dtype))
            pred = float(pred)
            if pred <= 0.0:  # nothing left to gain in the model: a stationary point
                break
            fn, gn, auxn = vg(xn, lm, setup.pre, setup.data)
            fn = float(fn)
            n_eval += 1
            rho = (f - fn) / pred
            if rho > 1e-4:
                break
            damping *= 4.0
        else:
            outcome, reason = Outcome.LINE_SEARCH, f"no step reduced the loss ({_MAX_TRIALS} trials)"
            break
        if pred <= 0.0:
            outcome, reason = Outcome.GTOL, "gtol: the model predicts no further reduction"
            break
        it += 1
        damping = max(damping / 4.0, 1e-8) if rho > 0.75 else damping * 2.0 if rho < 0.25 else damping
        scale = max(abs(f), abs(fn), 1.0)
        gained, predicted = (f - fn) / scale, pred / scale
        xj, f, g, aux, nu = xn, fn, gn, auxn, nu_n
        history["loss"].append(f)
        history["chi2"].append(float(aux.chi2))
        history["regulariser"].append(float(aux.regulariser))
        if callback is not None:
            callback(it, history)
        # the step's gain and what the model promised for it both below tol: the minimum is here
        if gained <= tol and predicted <= tol:
            outcome, reason = Outcome.FTOL, "ftol: relative reduction of the loss <= tol"
            break
    return RawSolve(x=np.asarray(xj), iterations=it, n_eval=n_eval, outcome=outcome, stop_reason=reason,
                    history={k: np.asarray(v) for k, v in history.items()}, compile_time=compile_time,
                    solve_time=time.perf_counter() - t0, extra={"damping": damping})
