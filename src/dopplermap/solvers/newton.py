"""Projected Gauss-Newton-CG in one ``lax.while_loop``, for tight tolerances.

The loss has the form ``|R(x)|^2 + S(x)``: ``R`` the normalised residuals of the line
profiles (and of the light curve in a joint fit), scaled so that ``|R|^2`` is the weighted
reduced chi-square, and ``S`` the smooth rest (``lmbd`` x regulariser + the feasibility
penalty), separable over cells for the maximum-entropy term. The model is linear in the
filling factors up to the per-epoch normalisation, so the Gauss-Newton matrix
``2 J'J + hess S`` is close to the Hessian, and the box bounds are simple. Each iteration
(all inside one compiled loop, no host round trip):

1. linearise ``R`` at ``x`` once (``jax.vjp``): the gradient is ``2 J'R + grad S``, and
   ``J v`` is the transpose of the VJP (``jax.linear_transpose``), so the model's linear maps
   need no forward-mode rule (they are ``custom_vjp``); a Gauss-Newton product
   ``J'(J v)`` costs one linearised forward and one backward pass, the work of a gradient;
2. two-metric projection (Bertsekas 1982): variables within ``eps = min(EPS_ACTIVE,
   |x - P(x - g)|_inf)`` of a bound with the gradient pointing outwards, and fixed ones,
   are held; they move along the scaled gradient ``-g / M``;
3. on the free variables, preconditioned CG on ``(2 J'J + hess S + mu M) d = -g``,
   truncated at a relative residual ``min(0.5, sqrt(|g_F| / |g_F(x0)|))`` (superlinear near
   the optimum), at ``max_cg`` steps or at negative curvature. ``M`` is diagonal: the
   exact diagonal of ``hess S`` (for the maximum-entropy term ``lmbd w_c (1/f + 1/s) /
   n_cell``, which is what makes the problem stiff near the lower bound) plus ``diag(2 J'J)``
   estimated once at the start from ``n_probe`` random VJPs (``E[(J'u)^2] = diag(J'J)`` for
   random signs ``u``). ``mu`` (Levenberg damping) grows when the full step is refused and
   shrinks when it is taken;
4. projected backtracking (Armijo) along ``P(x + a d)``, ``a`` from 1 (loss values only);
5. stop as L-BFGS-B does: ``(f_old - f) / max(|f_old|, |f|, 1) <= ftol``, projected
   gradient ``<= gtol``, or ``maxiter``; the ``ftol`` test after a backtracked step (``a < 1``)
   only when the step before met it too: a damped step's small reduction says the model was
   poor, not that the minimum is near.

Cost is counted in objective passes (:attr:`NewtonResult.passes`): a loss evaluation, a
linearisation with its gradient, a Gauss-Newton product and a probe each count as one
(the last two do a forward and a backward, or only a backward, pass). Pure: ``jit`` works.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .. import _device, regularisers
from .._x64 import require_x64
from ..compiled import compile_cached, loop_options, program_state
from ..errors import DopplermapInputError
from ..lightcurve import weighted_residuals
from ..model import apply_nuisance, forward, synthesize
from ..objective import DEFAULT_PENALTY, Layout, ObjectiveData, regulariser_value, sum_excess
from ..result import Outcome
from ._common import RawSolve, SolveSetup, cube_dtype_of, report_progress, run_members

__all__ = ["NewtonResult", "solve_newton", "solve_members", "line_residuals", "smooth_terms",
           "STOP_REASONS", "EPS_ACTIVE", "PRODUCTS", "products_form"]

STOP_REASONS = ("running", "ftol: relative reduction of the loss <= tol",
                "gtol: projected gradient <= tol", "maxiter reached", "line search failed")

EPS_ACTIVE = 1e-6
"""Largest distance to a bound at which a variable pushed outwards is held (two-metric projection)."""

KINK_NUDGE = 1e-7
"""Offset (in kink spacings) left of a kink at which its left-hand slope is read."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class NewtonResult:
    """Result of :func:`_projected_newton` (arrays).

    Attributes:
        x: (n,) solution. f: its loss. g: (n,) gradient at the last linearisation (the
            solution's unless the run stopped on ``ftol``, then the previous iterate's).
        n_iter: Newton iterations. n_fun: loss evaluations (line search). n_lin:
            linearisations (each with a gradient). n_hvp: Gauss-Newton products (CG steps).
            n_probe: VJPs of the preconditioner estimate.
        status: index into ``STOP_REASONS``.
        history: (maxiter,) loss after each iteration (NaN beyond ``n_iter``).
        passes_history: (maxiter,) objective passes spent by the end of each iteration.
    """

    x: jnp.ndarray
    f: jnp.ndarray
    g: jnp.ndarray
    n_iter: jnp.ndarray
    n_fun: jnp.ndarray
    n_lin: jnp.ndarray
    n_hvp: jnp.ndarray
    n_probe: jnp.ndarray
    status: jnp.ndarray
    history: jnp.ndarray
    passes_history: jnp.ndarray

    @property
    def passes(self):
        """Objective passes in all (see the module docstring)."""
        return self.n_fun + self.n_lin + self.n_hvp + self.n_probe


def _block_diagonal(hvp, n_blocks: tuple[int, ...], n: int, dtype):
    # diag of a Hessian that couples variables only within a cell (the fssc/fssh pair of the
    # maximum-entropy term and the penalty): one product per block of the layout, read on
    # that block; exact for such functions, the coupling across cells (Tikhonov) is left out
    out = jnp.zeros(n, dtype)
    start = 0
    for size in n_blocks:
        e = jnp.zeros(n, dtype).at[start:start + size].set(1.0)
        out = out + e * hvp(e)
        start += size
    return out


def _pieces(x, g, g_left, g_right, lower, upper, spacing):
    """Bounds of this step narrowed to one smooth piece, the one-sided gradient, and the V points.

    The line model's radial-velocity shift interpolates linearly, so on a uniform velocity
    grid (step ``dv``) the loss is smooth in ``rv`` between multiples of ``dv`` and has kinks
    at them, often local minima along ``rv`` (a simulated star's optimum sits on one:
    ``rv = 0``). A Newton step that crosses a kink is built from the wrong piece and is
    refused by the line search again and again, so each step keeps such a variable inside
    one piece ``[k dv, (k + 1) dv]``. At a kink (within rounding) the gradient ``g`` is one
    of the two slopes, depending on rounding; ``g_left``, ``g_right`` are read just left and
    right of it: the variable moves right if ``g_right < 0``, left if ``g_left > 0`` (with
    that slope), and is held if neither (a V: the kink is a minimum along it; the search
    of :func:`rv_step` looks further for a lower one).

    Returns ``(lower, upper, gradient, held)``.
    """
    if spacing is None:
        return lower, upper, g, jnp.zeros(x.shape, bool)
    kinked = spacing > 0
    h = jnp.where(kinked, spacing, 1.0)
    q = x / h
    k = jnp.round(q)
    at_kink = kinked & (jnp.abs(q - k) <= 1e-9 * jnp.maximum(1.0, jnp.abs(k)))
    right = g_right < 0
    left = ~right & (g_left > 0)
    base = jnp.where(at_kink, jnp.where(left, k - 1.0, k), jnp.floor(q))
    lo = jnp.where(kinked, jnp.maximum(lower, base * h), lower)
    hi = jnp.where(kinked, jnp.minimum(upper, (base + 1.0) * h), upper)
    g_eff = jnp.where(at_kink, jnp.where(left, g_left, g_right), g)
    held = at_kink & ~right & ~left
    return lo, hi, g_eff, held


def _projected_newton(residual: Callable, smooth: Callable, x0, lower, upper, *args, blocks: tuple[int, ...],
                     kink_spacing=None, kink_step: Callable | None = None, smooth_diag: Callable | None = None, maxiter: int = 200, ftol: float = 1e-8, gtol: float = 1e-8, max_cg: int = 50,
                     n_probe: int = 8, max_backtrack: int = 30, c1: float = 1e-4, seed: int = 0,
                     report: Callable | None = None, product_args: tuple | None = None) -> NewtonResult:
    """Minimise ``|residual(x, *args)|^2 + smooth(x, *args)`` subject to ``lower <= x <= upper``.

    Args:
        residual: ``(x, *args) -> (m,)`` residual vector (jax-traceable; its VJP must be
            linear-transposable, which holds for every dopplermap model form).
        smooth: ``(x, *args) -> ()`` the rest of the loss (twice differentiable, forward mode).
        x0, lower, upper: (n,) start and bounds (``-inf``/``inf`` free; ``lower = upper`` fixed).
        blocks: sizes of the parameter blocks (e.g. ``(n_cell, n_cell, 2 n_epoch)``) whose
            Hessian of ``smooth`` is read as a diagonal (see :func:`_block_diagonal`; static).
        smooth_diag: optional ``(x, *args) -> (n,)`` diagonal of ``smooth``'s Hessian where
            it couples cells (Tikhonov), added to the block reading.
        kink_spacing: optional (n,) spacing of the points where the loss is only piecewise
            smooth in a variable (0: smooth): each step keeps such a variable inside one
            piece (see :func:`_pieces`). kink_step: with it, ``(x, nudge, *args) -> (x',
            g_left, g_right)``: a point ``x'`` no worse than ``x`` that differs only in those
            variables (a cheap search along them), and the gradients of the loss in them
            (others ignored) at ``x' - nudge`` and ``x' + nudge``, the slopes on either side
            of a kink.
        maxiter, max_cg, n_probe, max_backtrack: iteration caps (static).
        ftol, gtol: stopping tolerances (see the module docstring).
        report: optional ``report(iteration, loss)`` traced into the loop after every
            iteration (e.g. a ``jax.debug.callback`` for progress; static).
        product_args: optional arguments that replace ``args`` in the linearisation the
            Gauss-Newton products (CG) are taken on, e.g. a model on a cheaper cube; the
            loss, gradient and line search keep ``args``.
    """
    x0 = jnp.clip(jnp.asarray(x0), lower, upper)
    n = x0.shape[0]
    dtype = x0.dtype
    fixed = lower >= upper
    lower0, upper0 = lower, upper

    def res(x):
        return residual(x, *args)

    def sm(x):
        return smooth(x, *args)

    def loss(x):
        r = res(x)
        return jnp.vdot(r, r) + sm(x)

    grad_sm = jax.grad(sm)

    def hvp_sm(x, v):
        return jax.jvp(grad_sm, (x,), (v,))[1]

    def linearise(x):
        r, vjp = jax.vjp(res, x)

        def jt(u):  # J' u
            return vjp(u)[0]

        if product_args is None:
            r_p, jt_p = r, jt
        else:  # the products from a cheaper linearisation (a float32 cube): CG needs only a direction
            r_p, vjp_p = jax.vjp(lambda x: residual(x, *product_args), x)

            def jt_p(u):
                return vjp_p(u)[0]

        jv = jax.linear_transpose(jt_p, r_p)  # J v = transpose of the VJP

        def gn(v):  # 2 J'J v
            return 2.0 * jt_p(jv(v)[0])

        return r, jt, gn

    def pgnorm(x, g):
        return jnp.max(jnp.abs(x - jnp.clip(x - g, lower, upper)))

    key = jax.random.PRNGKey(seed)
    m_shape = jax.eval_shape(res, x0).shape

    def gradient_and_probes(x, r, jt, first):
        """The gradient ``2 J'r + grad S`` and, at the first iteration, ``diag(2 J'J)`` from
        random-sign probes: all through one loop over ``J'`` (one copy of the backward pass
        in the compiled program instead of two)."""
        n_vec = 1 + jnp.where(first, n_probe, 0)

        def one(c):
            i, jr, acc = c
            u = jnp.where(i == 0, r, jax.random.rademacher(jax.random.fold_in(key, i), m_shape, dtype))
            out = jt(u)
            return i + 1, jnp.where(i == 0, out, jr), acc + jnp.where(i == 0, 0.0, out * out)

        zero = jnp.zeros(n, dtype)
        _, jr, acc = jax.lax.while_loop(lambda c: c[0] < n_vec, one, (jnp.zeros((), jnp.int32), zero, zero))
        return 2.0 * jr + grad_sm(x), 2.0 * acc / max(n_probe, 1)

    def precond(x, d_gn):
        m = d_gn + _block_diagonal(lambda v: hvp_sm(x, v), blocks, n, dtype)
        if smooth_diag is not None:
            m = m + smooth_diag(x, *args)
        floor = 1e-12 * jnp.maximum(jnp.max(m), 1e-300)
        return jnp.maximum(m, floor)

    def cg(x, g, free, gn, m_diag, mu, gf0):
        mask = free.astype(dtype)
        b = -g * mask
        minv = mask / m_diag
        bnorm = jnp.linalg.norm(b)
        eta = jnp.minimum(0.5, jnp.sqrt(bnorm / jnp.maximum(gf0, 1e-300)))

        def op(p):
            p = p * mask
            return mask * (gn(p) + hvp_sm(x, p) + mu * m_diag * p)

        z0 = minv * b
        st0 = dict(k=jnp.zeros((), jnp.int32), d=jnp.zeros(n, dtype), r=b, p=z0, rz=jnp.vdot(b, z0),
                   done=bnorm == 0.0)

        def cond(s):
            return (~s["done"]) & (s["k"] < max_cg)

        def body(s):
            p = s["p"]
            ap = op(p)
            pap = jnp.vdot(p, ap)
            neg = pap <= 0.0
            alpha = s["rz"] / jnp.where(neg, 1.0, pap)
            d = jnp.where(neg, s["d"], s["d"] + alpha * p)
            r = jnp.where(neg, s["r"], s["r"] - alpha * ap)
            z = minv * r
            rz = jnp.vdot(r, z)
            p_new = z + (rz / jnp.where(s["rz"] > 0, s["rz"], 1.0)) * p
            done = neg | (jnp.linalg.norm(r) <= eta * bnorm)
            return dict(k=s["k"] + 1, d=d, r=r, p=p_new, rz=rz, done=done)

        s = jax.lax.while_loop(cond, body, st0)
        d = jnp.where(jnp.any(s["d"] != 0.0), s["d"], z0)  # negative curvature at once: scaled gradient
        return d, s["k"]

    def step(x, f, g, lower, upper, at_v, gn, d_gn, mu, gf0):
        """One projected Newton step from x within [lower, upper] (the bounds, narrowed to the
        kink pieces): (new x, its loss, accepted, loss evaluations, CG steps)."""
        m_diag = precond(x, d_gn)
        eps = jnp.minimum(EPS_ACTIVE, pgnorm(x, g))
        held = fixed | at_v | ((x <= lower + eps) & (g > 0)) | ((x >= upper - eps) & (g < 0))
        d_free, k_cg = cg(x, g, ~held, gn, m_diag, mu, gf0)
        d = jnp.where(held, jnp.where(fixed | at_v, 0.0, -g / m_diag), d_free)

        def ls_cond(c):
            return (~c["ok"]) & (c["i"] < max_backtrack)

        def ls_body(c):
            a = (0.5 ** c["i"]).astype(dtype)
            xn = jnp.clip(x + a * d, lower, upper)
            fn = loss(xn)
            ok = jnp.isfinite(fn) & (fn <= f + c1 * jnp.vdot(g, xn - x))
            return dict(a=a, i=c["i"] + 1, ok=ok, x=xn, f=fn)

        ls = jax.lax.while_loop(ls_cond, ls_body, dict(a=jnp.ones((), dtype), i=jnp.zeros((), jnp.int32),
                                                       ok=jnp.zeros((), bool), x=x, f=f))
        return ls["x"], ls["f"], ls["ok"], ls["i"], k_cg

    state0 = dict(x=x0, f=jnp.asarray(jnp.inf, dtype), g=jnp.zeros(n, dtype), it=jnp.zeros((), jnp.int32),
                  nfun=jnp.zeros((), jnp.int32), nlin=jnp.zeros((), jnp.int32), nhvp=jnp.zeros((), jnp.int32),
                  status=jnp.asarray(3 if maxiter <= 0 else 0, jnp.int32), mu=jnp.zeros((), dtype),
                  d_gn=jnp.zeros(n, dtype), gf0=jnp.zeros((), dtype), small=jnp.zeros((), bool),
                  hist=jnp.full(max(maxiter, 1), jnp.nan, dtype), phist=jnp.zeros(max(maxiter, 1), jnp.int32))

    def cond(st):
        return st["status"] == 0

    def body(st):
        x = st["x"]
        kinks = kink_spacing is not None and kink_step is not None
        if kinks:  # a cheap search along the kinked variables, and the slopes on both sides of the kinks
            x, g_left, g_right = kink_step(x, KINK_NUDGE * kink_spacing, *args)
            x = jnp.clip(x, lower0, upper0)
        # one linearisation per iteration: loss, gradient and the Gauss-Newton product at x
        r, jt, gn = linearise(x)
        f = jnp.vdot(r, r) + sm(x)
        first = st["it"] == 0
        g, d_probe = gradient_and_probes(x, r, jt, first)
        d_gn = jnp.where(first, d_probe, st["d_gn"])
        gf0 = jnp.where(first, jnp.linalg.norm(jnp.where(fixed, 0.0, g)), st["gf0"])
        if kinks:
            lower, upper, g, at_v = _pieces(x, g, g_left, g_right, lower0, upper0, kink_spacing)
        else:
            lower, upper, at_v = lower0, upper0, jnp.zeros(n, bool)
        converged = jnp.max(jnp.abs(x - jnp.clip(x - jnp.where(at_v, 0.0, g), lower, upper))) <= gtol

        def stay():
            return x, f, jnp.ones((), bool), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)

        xn, fn, ok, n_ls, k_cg = jax.lax.cond(
            converged, stay, lambda: step(x, f, g, lower, upper, at_v, gn, d_gn, st["mu"], gf0))
        xn = jnp.where(ok, xn, x)
        fn = jnp.where(ok, fn, f)
        full = ok & (n_ls == 1)
        mu = jnp.where(full, 0.25 * st["mu"], jnp.maximum(4.0 * st["mu"], 1e-6))
        it = st["it"] + (~converged).astype(jnp.int32)
        f_prev = jnp.where(first, f, st["f"])  # the loss before the kink search (the previous iterate's)
        reduction = (jnp.maximum(f, f_prev) - fn) / jnp.maximum(jnp.maximum(jnp.abs(f), jnp.abs(fn)), 1.0)
        # a backtracked step's small reduction says the quadratic model was poor there, not that
        # the minimum is near: stop on it only after a full step or a second small one in a row
        small = reduction <= ftol
        status = jnp.where(converged, 2, jnp.where(~ok, 4, jnp.where(small & (full | st["small"]), 1,
                                                                     jnp.where(it >= maxiter, 3, 0))))
        nfun = st["nfun"] + n_ls
        nlin = st["nlin"] + (2 if kinks else 1)  # the kink step: one synthesis, counted as a pass
        nhvp = st["nhvp"] + k_cg
        passes = nfun + nlin + nhvp + n_probe
        slot = jnp.minimum(st["it"], maxiter - 1)
        if report is not None:
            jax.lax.cond(converged, lambda: None, lambda: report(it, fn))
        return dict(x=xn, f=fn, g=g, it=it, nfun=nfun, nlin=nlin, nhvp=nhvp, status=status.astype(jnp.int32),
                    mu=mu, d_gn=d_gn, gf0=gf0, small=small,
                    hist=jnp.where(converged, st["hist"], st["hist"].at[slot].set(fn)),
                    phist=jnp.where(converged, st["phist"], st["phist"].at[slot].set(passes)))

    st = jax.lax.while_loop(cond, body, state0)
    return NewtonResult(x=st["x"], f=st["f"], g=st["g"], n_iter=st["it"], n_fun=st["nfun"], n_lin=st["nlin"],
                        n_hvp=st["nhvp"], n_probe=jnp.asarray(n_probe, jnp.int32), status=st["status"],
                        history=st["hist"], passes_history=st["phist"])


# ---------------------------------------------------------------- dopplermap's loss in this form

def line_residuals(x, lmbd, pre, data: ObjectiveData):
    """``R(x)``: residuals whose squared norm is the (weighted) chi-square of :mod:`dopplermap.objective`.

    ``sqrt(1 / (n_epoch n_vel)) (obs - model) / err`` for the line profiles (times
    ``sqrt(line_weight)`` in a joint fit), followed by ``sqrt(lc_weight)`` times the light
    curves' residuals (:func:`dopplermap.lightcurve.weighted_residuals`: one curve, or the
    bands of a set) when ``data`` holds them.
    With ``data.offset_sigma`` ((n_epoch,)) the offset prior joins as ``n_epoch`` more residuals
    ``amp_e / sigma_e`` on the line profiles' scale: pseudo-data, linear in ``amp``, so the
    Gauss-Newton model holds it exactly.
    """
    lay = Layout(pre.n_cell, pre.n_epoch)
    fssc, fssh, rv, amp = lay.split(x)
    obs, offset_sigma = data.obs, data.offset_sigma
    r = ((obs.flux - forward(fssc, fssh, rv, amp, pre)) / obs.err).reshape(-1)
    n_line = r.size
    if offset_sigma is not None:
        r = jnp.concatenate([r, amp / offset_sigma])
    if data.lightcurve is None:
        return r * (1.0 / jnp.sqrt(n_line))
    w_line, w_lc = data.line_weight, data.lc_weight
    r_lc = weighted_residuals(fssc, fssh, data.lightcurve)
    return jnp.concatenate([r * jnp.sqrt(w_line / n_line), r_lc * jnp.sqrt(w_lc)])


RV_SEARCH = 16
"""The search of :func:`rv_step` tries ``rv + k dv / 8`` and ``rv + k dv / 64`` for ``|k| <= RV_SEARCH``
(two velocity steps each way, and a quarter step finely)."""


def rv_step(x, nudge, lmbd, pre, data: ObjectiveData):
    """The kink step of :func:`_projected_newton` for ``rv``: search, then the slopes at the kinks.

    Only the line chi-square depends on ``rv_e``, and only through the cheap per-epoch shift
    of the synthesised profiles (:func:`dopplermap.model.apply_nuisance`), so with the
    synthesis held fixed each epoch's ``rv`` is tried at ``4 RV_SEARCH + 3`` points around
    its value (coarse and fine, see :data:`RV_SEARCH`) and moved to the best (the current
    value is among them: the loss cannot rise). This escapes the local minima that the
    linear-interpolation shift makes at the kinks, which trap a Newton method (L-BFGS
    sometimes steps over them). Then the gradients in ``rv`` at ``rv -/+ nudge``. One
    synthesis in all, no backward pass through the model.
    """
    lay = Layout(pre.n_cell, pre.n_epoch)
    fssc, fssh, rv, amp = lay.split(x)
    _, _, d_rv, _ = lay.split(nudge)
    raw = jax.lax.stop_gradient(synthesize(fssc, fssh, pre.line))
    obs = data.obs
    w = 1.0 if data.lightcurve is None else data.line_weight
    vels = pre.line.vels

    def chi2_e(rv):  # (n_epoch,) each epoch's share of the line chi-square
        r = (obs.flux - apply_nuisance(raw, vels, rv, amp)) / obs.err
        return w * jnp.sum(r * r, axis=1) / r.size

    dv = (vels[-1] - vels[0]) / (vels.shape[0] - 1)
    k = jnp.arange(-RV_SEARCH, RV_SEARCH + 1, dtype=x.dtype)
    steps = jnp.concatenate([jnp.zeros(1, x.dtype), dv / 8.0 * k, dv / 64.0 * k])  # coarse and fine
    cand = rv[None, :] + steps[:, None]  # (K, n_epoch); row 0 the current values
    vals = jax.lax.map(chi2_e, cand)
    best = jnp.argmin(vals, axis=0)
    better = vals[best, jnp.arange(rv.shape[0])] < vals[0]
    rv = jnp.where(better, cand[best, jnp.arange(rv.shape[0])], rv)

    sl = slice(2 * lay.n_cell, 2 * lay.n_cell + lay.n_epoch)
    # both sides in one vmapped gradient: one copy of the shift's backward pass in the program
    sides = jax.vmap(jax.grad(lambda r: jnp.sum(chi2_e(r))))(jnp.stack([rv - d_rv, rv + d_rv]))
    g_left, g_right = (jnp.zeros_like(x).at[sl].set(sides[i]) for i in (0, 1))
    return x.at[sl].set(rv), g_left, g_right


def smooth_terms(x, lmbd, pre, data=None, *, regulariser: str = "mem",
                 penalty: float = DEFAULT_PENALTY):
    """``S(x) = lmbd * regulariser + penalty * sum max(0, fssc + fssh - 1)^2`` (as the objective's)."""
    lay = Layout(pre.n_cell, pre.n_epoch)
    fssc, fssh, _, _ = lay.split(x)
    reg = regulariser_value(regulariser, fssc, fssh, pre.cell_area, pre.edges).astype(x.dtype)
    return lmbd * reg + penalty * sum_excess(fssc, fssh)


def coupling_diagonal(per_cell, x, lmbd, pre, data=None):
    """``smooth_diag`` of :func:`_projected_newton` from a regulariser's ``newton_diagonal``
    (:class:`dopplermap.regularisers.Regulariser`): its ``(n_cell,)`` diagonal on fssc and
    on fssh, none on rv and amp."""
    d = per_cell(lmbd, pre.edges, pre.n_cell, x.dtype)
    return jnp.concatenate([d, d, jnp.zeros(x.shape[0] - 2 * pre.n_cell, x.dtype)])


def _report(it, f):
    report_progress(it, f)


def _solve(x0, lo, hi, spacing, tol, lmbd, pre, data, pre_products=None, *, regulariser, penalty, maxiter, max_cg, n_probe,
           progress=False, kinks=True):
    n_cell = pre.n_cell
    smooth = functools.partial(smooth_terms, regulariser=regulariser, penalty=penalty)
    per_cell = regularisers.regulariser(regulariser).newton_diagonal
    return _projected_newton(line_residuals, smooth, x0, lo, hi, lmbd, pre, data,
                            blocks=(n_cell, n_cell, x0.shape[0] - 2 * n_cell), kink_spacing=spacing if kinks else None,
                            kink_step=rv_step if kinks else None,
                            smooth_diag=None if per_cell is None else functools.partial(coupling_diagonal, per_cell),
                            maxiter=maxiter, ftol=tol, gtol=tol, max_cg=max_cg, n_probe=n_probe,
                            report=_report if progress else None,
                            product_args=None if pre_products is None else (lmbd, pre_products, data))


def kink_spacing(layout: Layout, vels) -> np.ndarray:
    """(n,) spacing of the kinks of the loss in each parameter: the velocity step for ``rv``
    on a uniform grid (linear-interpolation shift), 0 elsewhere and on non-uniform grids."""
    v = np.asarray(vels, dtype=float)
    dv = np.diff(v)
    out = np.zeros(layout.size)
    if dv.size and np.all(np.abs(dv - dv.mean()) <= 1e-9 * abs(dv.mean())):
        out[2 * layout.n_cell:2 * layout.n_cell + layout.n_epoch] = dv.mean()
    return out


DEFAULT_MAX_CG = 50
DEFAULT_PROBES = 8
NEWTON_MAXITER = 200
"""Newton iteration cap when the caller's ``maxiter`` (sized for L-BFGS) is larger."""


def _compile_newton(x0, lo, hi, spacing, tol, lmbd, pre, data: ObjectiveData, pre_products=None, *, regulariser="mem",
                   penalty=DEFAULT_PENALTY, maxiter=NEWTON_MAXITER, max_cg=DEFAULT_MAX_CG, n_probe=DEFAULT_PROBES,
                   progress=False, kinks=True):
    """AOT-compile the Newton solve for these shapes; returns ``(compiled, seconds)`` (0 when reused).

    The compiled function takes ``(x0, lo, hi, spacing, tol, lmbd, pre, data, pre_products)``
    (the last None, or the form of :func:`products_form`): a new tolerance, lambda, offset
    sigma or data set of the same shapes reuses it. ``kinks``: the program holds the kink
    step (:func:`rv_step`); without free ``rv`` on a uniform velocity grid it has nothing to
    do and is left out, a smaller program to compile (RESULTS.md, "The kink step only where rv
    is free").
    """
    kw = dict(regulariser=regulariser, penalty=float(penalty), maxiter=int(maxiter), max_cg=int(max_cg),
              n_probe=int(n_probe), progress=bool(progress), kinks=bool(kinks))
    args = (x0, lo, hi, spacing, tol, lmbd, pre, data, pre_products)
    # a host callback (progress) cannot be exported: that program is traced every run
    compiled, timing = compile_cached("newton", _solve, args, kw, cache=not kw["progress"], options=loop_options())
    return compiled, timing["trace_lower"] + timing["compile"]


PRODUCTS = ("float32", "float64")
"""``options["products"]`` of the Newton back end (see :func:`products_form`)."""


def products_form(setup: SolveSetup):
    """The form the Gauss-Newton products of ``setup``'s solve are taken on, or None for the
    solve's own.

    A solve on a float64 cube (tight tolerances: the loss must round finer than ``tol``)
    forms its products on the float32 fold of the same model (``options["products"]``,
    default ``"float32"``): CG needs only a direction, which the float64 gradient and line
    search then judge, and a product reads half the bytes (RESULTS.md, "Gauss-Newton
    products on a float32 cube"). ``"float64"``: the solve's own cube.
    """
    which = setup.options.get("products", "float32")
    if which not in PRODUCTS:
        raise DopplermapInputError(f"newton option products must be one of {list(PRODUCTS)}, got {which!r}")
    if which == "float64" or setup.forms is None or cube_dtype_of(setup.pre) != "float64":
        return None
    return setup.forms("float32")


def _program_args(setup: SolveSetup):
    """The arguments and static keywords of the compiled Newton solve of ``setup``."""
    xj, lo_j, hi_j = _device.asarray(setup.x0), _device.asarray(setup.lower), _device.asarray(setup.upper)
    lm = _device.asarray(setup.lmbd, dtype=xj.dtype)
    spacing = kink_spacing(setup.layout, setup.pre.line.vels)
    spacing[np.asarray(setup.lower) >= np.asarray(setup.upper)] = 0.0  # a held rv has no kink to step around
    tol_j = _device.asarray(setup.tol, dtype=xj.dtype)
    kw = dict(regulariser=setup.regulariser, penalty=float(setup.penalty), maxiter=int(min(setup.maxiter, NEWTON_MAXITER)),
              max_cg=int(setup.options.get("max_cg", DEFAULT_MAX_CG)),
              n_probe=int(setup.options.get("n_probe", DEFAULT_PROBES)), progress=False,
              kinks=bool(np.any(spacing > 0)))
    spacing = _device.asarray(spacing)
    return (xj, lo_j, hi_j, spacing, tol_j, lm, setup.pre, setup.data, products_form(setup)), kw


def compile_state(setup: SolveSetup, progress: bool = False) -> str:
    """Where the Newton program of ``setup`` would come from (:func:`dopplermap.compiled.program_state`);
    ``progress``: the program that reports each iteration to the host (never stored on disk)."""
    args, kw = _program_args(setup)
    return program_state("newton", _solve, args, dict(kw, progress=bool(progress)), loop_options())


def _products_dtype(setup: SolveSetup, args) -> str | None:
    """The cube dtype the products of a solve were taken on (``extra["products"]``)."""
    return cube_dtype_of(setup.pre if args[-1] is None else args[-1])


def _raw(r: NewtonResult, n_iter_max: int, compile_time: float, solve_time: float, products: str | None) -> RawSolve:
    status = int(r.status)
    n_it = int(r.n_iter)
    # summed on the host (NewtonResult.passes would run an eager device add)
    parts = dict(loss=int(r.n_fun), linearise=int(r.n_lin), gauss_newton=int(r.n_hvp), probe=int(r.n_probe))
    passes = dict(total=sum(parts.values()), **parts)
    return RawSolve(x=np.asarray(r.x), iterations=n_it, n_eval=passes["total"], outcome=Outcome.from_status(status),
                    stop_reason=STOP_REASONS[status] + (f" ({n_iter_max} Newton iterations)" if status == 3 else ""),
                    history={"loss": np.asarray(r.history)[:n_it], "passes": np.asarray(r.passes_history)[:n_it]},
                    compile_time=compile_time, solve_time=solve_time, extra={"passes": passes, "products": products})


def _check_newton(setup: SolveSetup) -> None:
    require_x64()
    if setup.pre.line.exact_rv:  # its rv search (rv_step) scores moves with the seed's linear shift
        raise DopplermapInputError("solver 'newton' needs the interpolating rv shift; a model precomputed with "
                                   "rv_shift='exact' is solved by 'lbfgsb' or 'projected_lbfgs'")


def solve_newton(setup: SolveSetup, callback=None) -> RawSolve:
    """The ``"newton"`` back end: projected Gauss-Newton-CG in one compiled loop.

    Same problem, bounds, start and tolerance semantics (``tol`` = ftol = gtol) as the
    L-BFGS solvers; the Newton iterations are capped at ``min(maxiter, NEWTON_MAXITER)``;
    ``options`` may set ``max_cg`` and ``n_probe``. ``extra["passes"]`` holds the objective
    passes spent (see the module docstring) and their parts.
    """
    _check_newton(setup)
    args, kw = _program_args(setup)
    fn, t_compile = _compile_newton(*args, **dict(kw, progress=callback is not None))
    t0 = time.perf_counter()
    r = jax.block_until_ready(fn(*args))
    return _raw(r, kw["maxiter"], t_compile, time.perf_counter() - t0, _products_dtype(setup, args))


def solve_members(setup: SolveSetup, members, threads: int = 1) -> tuple[list[RawSolve], float]:
    """Many Newton solves of ``setup``'s shapes through its one compiled program.

    ``members``: callables ``previous_x -> (x0, lmbd, data)`` (``previous_x`` the solution of the
    member before, None for the first: warm starts along a chain), giving a start inside the
    bounds, a lambda and an :class:`~dopplermap.objective.ObjectiveData` of ``setup.data``'s
    shapes. ``threads`` > 1: the members do not chain (each is called with None) and run on
    that many threads (:func:`~dopplermap.solvers._common.run_members`). Returns the raw solves
    and the members' seconds; each solve's ``compile_time`` is the program's (counted once, on
    the first)."""
    _check_newton(setup)
    args, kw = _program_args(setup)
    fn, t_compile = _compile_newton(*args, **kw)
    x0, lo_j, hi_j, spacing, tol_j = args[:5]
    pre_products = args[-1]

    def solve(m, prev):
        x, lm, data = m(prev)
        return jax.block_until_ready(fn(_device.asarray(x, dtype=x0.dtype), lo_j, hi_j, spacing, tol_j,
                                        _device.asarray(lm, dtype=x0.dtype), setup.pre, data, pre_products))

    t0 = time.perf_counter()
    if threads > 1:
        runs = run_members(lambda i: solve(members[i], None), len(members), threads)
    else:
        runs, prev = [], None
        for m in members:
            runs.append(solve(m, prev))
            prev = runs[-1].x
    seconds = time.perf_counter() - t0
    products = _products_dtype(setup, args)
    return [_raw(r, kw["maxiter"], t_compile if i == 0 else 0.0, seconds, products) for i, r in enumerate(runs)], seconds
