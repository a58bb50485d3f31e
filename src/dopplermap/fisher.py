"""Information bounds on parameters: the Fisher matrix, its Schur complement, the linear shift.

For data ``d = f(theta) + n`` with independent Gaussian noise of standard deviations
``sigma`` and a prior ``-log p(theta) = U(theta)``, the Gauss-Newton (Fisher) information at
``theta`` is::

    F = J^T W J + H_U,        J = df/dtheta,  W = diag(1 / sigma^2),  H_U = d^2 U / dtheta^2

and the marginal covariance of a subset ``i`` of the parameters, the others (``n``)
integrated out, is the block ``[F^-1]_ii`` = the inverse of the Schur complement
``F_ii - F_in F_nn^+ F_ni`` (Laplace approximation; without a prior, the Cramer-Rao bound
of any unbiased estimator). Parameters held at known values are dropped before (their
rows and columns removed), which can only shrink the marginal covariance. The
pseudo-inverse makes the complement the generalised one, right for a positive
semi-definite ``F``: map directions the data and the prior leave free but which do not
touch ``i`` do not matter; a subset the information does not reach has an infinite
standard deviation.

The MAP on data ``d`` moves, to first order in the gradient ``g`` of the negative log
posterior at ``theta``, by ``-F^-1 g`` (one Gauss-Newton step): with ``g = grad U`` this is
the shift a prior alone induces on noise-free data (Kay 1993, ch. 3 and 10; MacKay 2003,
ch. 27).

Pure NumPy after :func:`jacobian`; nothing here knows about maps or stars.
"""

from __future__ import annotations

import dataclasses
import weakref

import jax
import numpy as np

from . import _x64  # noqa: F401  (float64 JAX)
from .errors import DopplermapInputError, warn

__all__ = ["jacobian", "fisher_matrix", "parameter_bound", "Bound"]

# the Schur complement's information below this fraction of the parameter's own information
# (the others held) means: not identifiable
_RTOL = 1e-10


def jacobian(fn, x, *, chunk: int = 32, args: tuple = ()) -> np.ndarray:
    """Dense Jacobian ``(m, p)`` of ``fn: (p,) -> any shape`` (flattened to ``m``) at ``x``.

    Forward mode, ``chunk`` tangents at a time: the memory of ``chunk`` forward passes, not
    of ``p``. ``args``: arrays (any pytree) passed on as ``fn(x, *args)``, as arguments of the
    compiled program rather than constants in it.

    One compiled program per ``fn``, shape of ``x``, ``chunk`` and shapes of ``args``, kept
    across calls: a Gauss-Newton loop calling this with the same ``fn`` at new points, or a
    module-level ``fn`` with other data of the same shapes in ``args``, compiles once. A new
    closure (``lambda``) or bound method each call is a new ``fn`` and compiles again.
    """
    x = jax.numpy.asarray(x, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise DopplermapInputError(f"jacobian needs a 1-D x of at least one parameter, got shape {x.shape}")
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise DopplermapInputError(f"jacobian: chunk must be an integer >= 1, got {chunk!r}")
    if not isinstance(args, tuple):
        raise DopplermapInputError(f"jacobian: args must be a tuple (fn is called as fn(x, *args)), got "
                                   f"{type(args).__name__}")
    p = x.shape[0]
    chunk = min(int(chunk), p)  # no all-zero tangents beyond p
    block = _jvp_block(fn)
    eye = np.eye(p)
    cols = []
    for a in range(0, p, chunk):
        t = np.zeros((chunk, p))  # the last chunk padded: every chunk one shape, one program
        n = min(chunk, p - a)
        t[:n] = eye[a:a + n]
        cols.append(np.asarray(block(x, jax.numpy.asarray(t), args))[:n])
    return np.concatenate(cols, axis=0).T


# fn -> its compiled block, dropped with fn: a static jit argument would keep every fn given, and
# the arrays it closes over, alive in JAX's cache
_BLOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _jvp_block(fn):
    """The compiled ``(x, tangents (k, p), args) -> (k, m)`` directional derivatives of
    ``fn(., *args).ravel()`` at ``x``, one per ``fn`` while it lives (JAX keeps one program per
    shapes under it). A function that cannot be weakly referenced gets a program of its own."""
    try:
        return _BLOCKS[fn]
    except (KeyError, TypeError):
        pass
    try:
        ref = weakref.ref(fn)
    except TypeError:
        ref = lambda: fn  # noqa: E731

    @jax.jit
    def block(x, tangents, args):
        f = ref()  # alive: jacobian holds fn while it calls this

        def along(t):
            return jax.jvp(lambda z: jax.numpy.ravel(f(z, *args)), (x,), (t,))[1]

        return jax.vmap(along)(tangents)

    try:
        _BLOCKS[fn] = block
    except TypeError:
        pass
    return block


def fisher_matrix(jac, sigma) -> np.ndarray:
    """``J^T diag(1 / sigma^2) J`` for ``jac`` ``(m, p)`` and ``sigma`` (m,) (or any shape of m values)."""
    jac = np.asarray(jac, dtype=float)
    sigma = np.asarray(sigma, dtype=float).ravel()
    if jac.ndim != 2 or sigma.size != jac.shape[0]:
        raise DopplermapInputError(f"fisher_matrix: jac must be (m, p) with m = sigma.size = {sigma.size}, got {jac.shape}")
    if np.any(~np.isfinite(sigma)) or np.any(sigma <= 0):
        raise DopplermapInputError("fisher_matrix: sigma must be finite and > 0")
    a = jac / sigma[:, None]
    return a.T @ a


@dataclasses.dataclass(frozen=True)
class Bound:
    """What the information says about the parameters ``index``.

    Attributes:
        index: (k,) the parameters asked about (indices into the full vector).
        covariance: (k, k) marginal covariance, the other free parameters integrated out
            (``inf`` on the diagonal of a parameter the information does not reach).
        sd: (k,) its square-root diagonal.
        conditional_sd: (k,) ``1 / sqrt(F_jj)``: the standard deviation were every other
            parameter known (the smallest the data and prior allow).
        shift: (k,) ``-[F^-1 g]_index`` for the gradient ``g`` given, else None.
        sampling_covariance: (k, k) ``[F^-1 F_d F^-1]_ii``, the covariance over noise draws
            of the MAP (linearised; the sandwich) when the data's own information ``F_d`` is
            given, else None. Without a prior it equals ``covariance``.
        n_free: number of free parameters (not held).
    """

    index: np.ndarray
    covariance: np.ndarray
    sd: np.ndarray
    conditional_sd: np.ndarray
    shift: np.ndarray | None
    sampling_covariance: np.ndarray | None
    n_free: int


COUPLING_RTOL = 1e-10
"""Coupling (relative to ``sqrt(f_ii w_max)``) above which a direction that :func:`parameter_bound`'s
cut-off drops is taken to carry information on the parameters asked about: about 1e6 times the
rounding of a double-precision product."""


def parameter_bound(fisher, index, *, prior_hessian=None, held=None, gradient=None, data_fisher=None,
                    rcond: float = 1e-13) -> Bound:
    """Marginal covariance of the parameters ``index`` from the information ``fisher`` (p, p).

    Args:
        fisher: (p, p) symmetric positive semi-definite information (e.g. :func:`fisher_matrix`).
        index: parameter indices (ints) asked about; none of them held.
        prior_hessian: (p, p) Hessian of the negative log prior, added to ``fisher``.
        held: (p,) bool mask of parameters held at known values (removed before inverting).
        gradient: (p,) gradient of the negative log posterior at the point; gives ``shift``.
        data_fisher: (p, p) the data's information alone (usually ``fisher``); gives
            ``sampling_covariance``.
        rcond: relative eigenvalue cut-off of the pseudo-inverse of the marginalised block.
    """
    f = np.asarray(fisher, dtype=float)
    p = f.shape[0]
    if f.shape != (p, p):
        raise DopplermapInputError(f"parameter_bound: fisher must be square, got shape {f.shape}")
    if prior_hessian is not None:
        h = np.asarray(prior_hessian, dtype=float)
        if h.shape != (p, p):
            raise DopplermapInputError(f"parameter_bound: prior_hessian must be ({p}, {p}), got {h.shape}")
        f = f + h
    f = 0.5 * (f + f.T)
    index = np.atleast_1d(np.asarray(index, dtype=int))
    held = np.zeros(p, bool) if held is None else np.asarray(held, bool)
    if held.shape != (p,):
        raise DopplermapInputError(f"parameter_bound: held must be ({p},), got {held.shape}")
    if np.any((index < 0) | (index >= p)) or np.any(held[index]) or np.unique(index).size != index.size:
        raise DopplermapInputError(f"parameter_bound: index must be distinct free parameters in [0, {p}), got {index.tolist()}")
    others = np.setdiff1d(np.nonzero(~held)[0], index)
    f_ii = f[np.ix_(index, index)]
    f_in = f[np.ix_(index, others)]
    f_nn = f[np.ix_(others, others)]
    w, v = np.linalg.eigh(f_nn) if others.size else (np.zeros(0), np.zeros((0, 0)))
    keep = w > rcond * max(float(w.max()) if w.size else 0.0, 1e-300)
    proj = f_in @ v[:, keep]
    schur = f_ii - (proj / w[keep]) @ proj.T
    schur = 0.5 * (schur + schur.T)
    if not keep.all():
        # A dropped direction (eigenvalue w_d below the cut-off) with coupling c to a parameter takes
        # c^2 / w_d of its information, between c^2 / (rcond w_max) and all of it (c^2 <= w_d f_ii for a
        # positive semi-definite matrix): where c stands clear of rounding (exact null directions, such
        # as cells never seen, have c ~ eps) the pseudo-inverse has treated as known what the data do
        # not fix, and the bound may be far too small
        w_max = max(float(w.max()), 1e-300)
        c = np.abs(f_in @ v[:, ~keep]) / np.sqrt(np.maximum(np.diag(f_ii), 1e-300) * w_max)[:, None]
        coupled = np.max(c, axis=1) > COUPLING_RTOL
        if np.any(coupled):
            warn(f"parameter_bound: {int((~keep).sum())} of {keep.size} directions of the other parameters are "
                 f"below the eigenvalue cut-off (rcond {rcond:g}) but carry information on parameters "
                 f"{index[coupled].tolist()}: the bound treats them as known and may be too small (an "
                 "ill-conditioned information matrix; hold the parameters the data do not fix, or compute the "
                 "bound from the whitened Jacobian's singular values)")
    ws, vs = np.linalg.eigh(schur)
    scale = np.maximum(np.abs(np.diag(f_ii)).max(), 1e-300)
    ok = ws > _RTOL * scale
    with np.errstate(divide="ignore"):
        inv_w = np.where(ok, 1.0 / np.where(ok, ws, 1.0), np.inf)
    cov = (vs * inv_w) @ vs.T if ok.all() else _with_inf(vs, inv_w, ok)
    with np.errstate(divide="ignore"):
        cond = 1.0 / np.sqrt(np.diag(f_ii))
    shift = sampling = None
    if gradient is not None or data_fisher is not None:
        # rows ``index`` of F^-1 over the free parameters (pseudo-inverse)
        free = np.nonzero(~held)[0]
        wf, vf = np.linalg.eigh(f[np.ix_(free, free)])
        kf = wf > rcond * max(float(wf.max()), 1e-300)
        pos = np.searchsorted(free, index)
        rows = (vf[pos][:, kf] / wf[kf]) @ vf[:, kf].T  # (k, n_free)
        bad = ~np.isfinite(np.diag(cov))
        if gradient is not None:
            g = np.asarray(gradient, dtype=float)
            if g.shape != (p,):
                raise DopplermapInputError(f"parameter_bound: gradient must be ({p},), got {g.shape}")
            shift = np.where(bad, np.nan, -(rows @ g[free]))
        if data_fisher is not None:
            fd = np.asarray(data_fisher, dtype=float)
            if fd.shape != (p, p):
                raise DopplermapInputError(f"parameter_bound: data_fisher must be ({p}, {p}), got {fd.shape}")
            sampling = rows @ fd[np.ix_(free, free)] @ rows.T
            sampling[bad, :] = np.inf
            sampling[:, bad] = np.inf
    return Bound(index=index, covariance=cov, sd=np.sqrt(np.diag(cov)), conditional_sd=cond, shift=shift,
                 sampling_covariance=sampling, n_free=int((~held).sum()))


def _with_inf(vs, inv_w, ok):
    """Covariance with the unreached directions infinite: finite part plus ``inf`` wherever an
    unreached eigenvector has weight."""
    cov = (vs[:, ok] * inv_w[ok]) @ vs[:, ok].T
    reach = np.abs(vs[:, ~ok]).max(axis=1) > 1e-8
    cov = cov.copy()
    cov[reach, :] = np.inf
    cov[:, reach] = np.inf
    return cov
