"""The binned form: memory-light synthesis through a fine velocity histogram.

The weights of each epoch are deposited on a fine velocity grid (cubic Lagrange weights, bin
width ``delta``) and the histogram is multiplied by the shifted template ``L_k(v - u_j)``.
Its error versus the exact model is at most ``0.0234 delta^4 max|L''''|``; ``delta`` is
chosen from ``synthesis_tol`` (default 1e-7 of the continuum). Memory grows as
``n_epoch x n_cell``, not times ``n_vel``. mu-dependent local profiles are separated into a
few mu-basis templates (:class:`MuBasis`), one histogram column each.
"""

from __future__ import annotations

import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .. import _device, _linops, plan
from ..errors import DopplermapInputError, warn
from .base import Form, Setup, eval_profile, fill_stack, form_pytree, is_mu_dependent, pad_axis, round_up

__all__ = ["BinnedForm", "MuBasis", "choose_bin_width", "shift_histogram", "SLOTS_PER_CHUNK"]

_LAGRANGE_ERR = 9.0 / 16.0 / 24.0  # max |prod(t - node)| / 4! for 4 nodes

SLOTS_PER_CHUNK = 25_000
"""On CPU, the binned form synthesises epochs in chunks of about this many (epoch, visible
cell) slots (``lax.map``), so each chunk's working set stays cache-sized and the cost grows
linearly with n_epoch x n_cell; accelerators take all epochs at once (measurements:
``benchmarks/RESULTS.md``)."""

MAX_BINS = 200_000
"""Most velocity bins a binned precomputation may use."""


def _max_fourth_derivative(fn, hw: float) -> float:
    h = min(0.02, hw / 2000.0)
    v = np.arange(-hw, hw + h, h)
    d4 = np.abs(np.diff(fn(v), 4)) / h**4
    return float(np.max(d4)) if d4.size else 0.0


def half_width(profile, default: float) -> float:
    """Half width (km/s) beyond which ``profile`` is continuum (``default`` if it does not say)."""
    hw = getattr(profile, "half_width", None)
    return max(float(hw) if hw is not None else default, 1.0)


def choose_bin_width(components, tol: float, vspan: float = 200.0) -> float:
    """Velocity bin width (km/s) whose cubic interpolation error is below ``tol``.

    The binned model deviates from the exact one by at most ``0.0234 delta^4 max|d4L/dv4|``
    (continuum units); mu-dependent profiles are probed at mu = 0.1, 0.4, 0.7, 1.
    """
    m4 = 0.0
    for comp in components:
        hw = half_width(comp.profile, vspan)
        mus = (0.1, 0.4, 0.7, 1.0) if is_mu_dependent(comp.profile) else (None,)
        for mu in mus:
            m4 = max(m4, _max_fourth_derivative(lambda v, p=comp.profile, m=mu: eval_profile(p, v, m), hw))
    if m4 <= 0.0:
        return 1.0
    return float((tol / (_LAGRANGE_ERR * m4)) ** 0.25)


_MU_NODES = 65  # mu nodes of the low-rank separation of mu-dependent profiles


class MuBasis:
    """Low-rank separation ``L(v, mu) ~= sum_r c_r(mu) T_r(v)`` of a local profile.

    ``T_r(v) = sum_i g[i, r] L(v, mu_i)`` is an exact combination of the profile at mu
    nodes (so it can be evaluated at any velocity); ``c_r(mu)`` is a cubic spline through
    the nodes. The rank is the smallest whose reconstruction error, checked on the nodes
    and half-way between them, is below ``tol``. mu-independent profiles: rank 1, c = 1.
    """

    def __init__(self, profile, tol: float, hw: float, delta: float):
        from scipy.interpolate import CubicSpline  # SciPy only where a profile depends on mu

        self.profile = profile
        self.error = 0.0
        if not is_mu_dependent(profile):
            self.rank = 1
            return
        mu = np.linspace(0.0, 1.0, _MU_NODES)
        mid = 0.5 * (mu[1:] + mu[:-1])
        h = min(delta / 2.0, hw / 400.0)
        v = np.arange(-hw - 2 * delta, hw + 2 * delta + h, h)
        a = eval_profile(profile, v[None, :], mu[:, None])
        a_mid = eval_profile(profile, v[None, :], mid[:, None])
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        for rank in range(1, s.size + 1):
            coef = u[:, :rank] * s[:rank]
            spline = CubicSpline(mu, coef, axis=0)
            err = max(np.max(np.abs(coef @ vt[:rank] - a)), np.max(np.abs(spline(mid) @ vt[:rank] - a_mid)))
            if err <= tol:
                break
        else:  # every node's profile used and still short: the binned model misses its tolerance
            warn(f"a mu-dependent local profile separates only to {err:.3g} of the continuum with all "
                 f"{_MU_NODES} mu nodes, above synthesis_tol = {tol:.3g}: the binned model deviates from the "
                 "exact one by up to that much; raise synthesis_tol or use method = 'dense'")
        self.rank = rank
        self.mu_nodes = mu
        self.g = u[:, :rank] / s[:rank]  # T_r = sum_i g[i, r] L(., mu_i)
        self.spline = spline
        self.error = float(err)

    def coefficients(self, mu) -> np.ndarray:
        """(..., rank) coefficients ``c_r(mu)``."""
        mu = np.asarray(mu, dtype=float)
        if not is_mu_dependent(self.profile):
            return np.ones(mu.shape + (1,))
        return self.spline(np.clip(mu, 0.0, 1.0))

    def templates(self, v) -> np.ndarray:
        """(rank, *v.shape) basis templates ``T_r(v)``."""
        v = np.asarray(v, dtype=float)
        if not is_mu_dependent(self.profile):
            return eval_profile(self.profile, v)[None]
        prof = eval_profile(self.profile, v[None], self.mu_nodes.reshape((-1,) + (1,) * v.ndim))
        return np.tensordot(self.g.T, prof, axes=1)

    def continuum(self) -> np.ndarray:
        """(rank,) value of each template in the continuum (1 for a mu-independent profile)."""
        if not is_mu_dependent(self.profile):
            return np.ones(1)
        return self.g.sum(axis=0)


def shift_histogram(hist, rv, delta: float, n_pad: int):
    """The velocity histogram ``hist`` (n_epoch, n_bin, n_col) moved by ``rv`` (n_epoch,) km/s,
    on the bins extended by ``n_pad`` on each side: (n_epoch, n_bin + 2 n_pad, n_col).

    The transpose of cubic Lagrange interpolation on the bin grid (width ``delta``): with it
    ``sum_j h'_j T(v - u_j)`` is ``sum_j h_j T(v - rv - u_j)`` with ``T`` interpolated at the
    shifted velocities, so the shift adds the binned synthesis' own error bound (0.0234
    delta^4 max|d4T/dv4|). Shifts beyond ``n_pad - 2`` bins are clipped there.
    """
    n_e, n_b, n_c = hist.shape
    s = jnp.clip(rv / delta, -(n_pad - 2), n_pad - 2)
    m = jnp.floor(s)
    w = _linops.lagrange_weights(s - m)  # (E, 4): nodes -1, 0, 1, 2
    q = 2 * n_pad
    hz = jnp.pad(hist, ((0, 0), (q, q), (0, 0)))  # hz[k + q] = hist[k]
    take = jax.vmap(lambda h, start: jax.lax.dynamic_slice_in_dim(h, start, n_b + 2 * n_pad, axis=0))
    out = 0.0
    for b in range(4):  # out[o] = sum_b w_b hist[o - n_pad - m - b + 1]
        out = out + w[:, b, None, None] * take(hz, (q - n_pad + 1 - b - m).astype(jnp.int32))
    return out


@form_pytree(meta=("col_comp", "shift_bins", "bin_width"))
class BinnedForm(Form):
    """Binned line synthesis (see the module docstring).

    Attributes:
        weight: (n_epoch, n_slot, n_col) ``I_k LD_k(mu) area mu`` (0 in padding) times, with
            mu-dependent profiles, the mu-basis coefficient ``c_r(mu)`` of each column.
        beta: (n_epoch, n_slot, 4) cubic Lagrange weights of each slot's velocity.
        jbase: (n_epoch, n_slot) int32 first bin of each slot.
        kernel: (n_bin, n_col, n_vel) column templates ``T_i(v - u_j)``.
        cont: (n_col,) continuum value of each column template (1 if mu-independent).
        col_comp: component (0 phot, 1 cool, 2 hot) of each column (static); ``(0, 1, 2)``
            when no profile depends on mu.
        shift_kernel: ``rv_shift="exact"`` only: (n_bin + 2 shift_bins, n_col, n_vel) the
            column templates on the bins extended by ``shift_bins`` (static) on each side;
            the rv shift then moves the histogram (:func:`shift_histogram`) instead of
            interpolating the synthesised profile. None: the seed's interpolation.
        bin_width: the bins' width, km/s (static).
    """

    weight: jnp.ndarray
    beta: jnp.ndarray
    jbase: jnp.ndarray
    kernel: jnp.ndarray
    cont: jnp.ndarray
    col_comp: tuple = (0, 1, 2)
    shift_kernel: jnp.ndarray | None = None
    shift_bins: int = 0
    bin_width: float = 0.0

    kind: ClassVar[str] = "binned"
    epoch_fields: ClassVar[tuple[str, ...]] = ("cell", "pos", "weight", "beta", "jbase")

    @classmethod
    def build(cls, setup: Setup) -> BinnedForm:
        """From the precomputation's geometry: slots sorted by velocity bin (so each epoch's
        deposit runs through the histogram in order)."""
        v_los, visible, vels, dtype, span = setup.v_los, setup.visible, setup.vels, setup.dtype, setup.span
        bw, components = setup.bin_width, setup.components
        delta = float(bw) if bw is not None else choose_bin_width(components, setup.synthesis_tol, span)
        vmax = float(np.max(np.abs(v_los[visible]))) + delta
        u0 = -vmax - 2.0 * delta
        n_base = int(math.floor(2.0 * vmax / delta)) + 3
        if n_base > MAX_BINS:
            raise DopplermapInputError(f"binned synthesis needs {n_base} velocity bins (bin width {delta:.3g} km/s); "
                                       "raise synthesis_tol or set bin_width")
        x = (v_los - u0) / delta
        j0 = np.floor(x).astype(np.int64)
        t = x - j0
        jbase = np.clip(j0 - 1, 0, n_base - 1)
        sl = setup.slots(np.where(visible, jbase, n_base))  # invisible cells sort last
        jb = np.where(sl.slot_ok, np.take_along_axis(jbase, sl.order, axis=1), n_base - 1)
        tt = np.where(sl.slot_ok, np.take_along_axis(t, sl.order, axis=1), 0.0)
        beta = np.where(sl.slot_ok[..., None], _linops.lagrange_weights(tt), 0.0)
        u = u0 + delta * np.arange(n_base + 3)
        # columns: (component, mu-basis term); one per component if no profile depends on mu
        bases = [MuBasis(comp.profile, 0.25 * setup.synthesis_tol, half_width(comp.profile, span), delta)
                 for comp in components]
        col_comp = tuple(k for k, bs in enumerate(bases) for _ in range(bs.rank))
        w_slot = sl.weight
        if col_comp != (0, 1, 2):
            w_slot = np.concatenate([w_slot[..., k:k + 1] * bases[k].coefficients(sl.mu) for k in range(3)], axis=-1)
        dv = vels[None, :] - u[:, None]
        kernel = np.concatenate([bases[k].templates(dv) for k in range(3)], axis=0).transpose(1, 0, 2)
        cont = np.concatenate([bs.continuum() for bs in bases])
        shift = {}
        if setup.rv_margin is not None:  # the templates on bins reaching rv_margin beyond either end
            n_pad = int(math.ceil(setup.rv_margin / delta)) + 2
            u_ext = u0 + delta * np.arange(-n_pad, n_base + 3 + n_pad)
            ext = np.concatenate([bases[k].templates(vels[None, :] - u_ext[:, None]) for k in range(3)], axis=0)
            shift = dict(shift_kernel=_device.asarray(ext.transpose(1, 0, 2), dtype), shift_bins=n_pad)
        return cls(**shift, bin_width=delta, vels=_device.asarray(vels, dtype), cell=_device.asarray(sl.cell), pos=_device.asarray(sl.pos),
                   weight=_device.asarray(w_slot, dtype), beta=_device.asarray(beta, dtype),
                   jbase=_device.asarray(jb.astype(np.int32)), kernel=_device.asarray(kernel, dtype),
                   cont=_device.asarray(cont, dtype), col_comp=col_comp)

    @staticmethod
    def precompute_nbytes(n_cell: int, n_epoch: int, n_vel: int) -> float:
        """Bytes beyond the precomputation's (n_epoch, n_cell) geometry arrays: none that matter."""
        return 0.0

    @property
    def mu_dependent(self) -> bool:
        return self.col_comp != (0, 1, 2)

    @property
    def n_bin(self) -> int:
        return int(self.kernel.shape[0])

    def fill(self, fssc, fssh):
        f = fill_stack(fssc, fssh)
        return f[:, np.asarray(self.col_comp)] if self.mu_dependent else f  # (n_cell, n_col)

    def epoch_numerator_norm(self, f, rv=None):
        a = self.weight * _linops.gather_slots(f, self.cell, self.pos, f.dtype)  # (E, S, n_col)
        norm = jnp.einsum("esc,c->e", a, self.cont) if self.mu_dependent else a.sum(axis=(1, 2))  # (E,)
        hist = _linops.deposit(a, self.beta, self.jbase, self.kernel.shape[0])  # (E, B, n_col)
        if rv is None:
            num = hist.reshape(hist.shape[0], -1) @ self.kernel.reshape(-1, self.kernel.shape[-1])
        else:
            hist = shift_histogram(hist, rv, self.bin_width, self.shift_bins)
            num = hist.reshape(hist.shape[0], -1) @ self.shift_kernel.reshape(-1, self.shift_kernel.shape[-1])
        return num, norm

    @property
    def exact_rv(self) -> bool:
        return self.shift_kernel is not None

    def shifted_profiles(self, fssc, fssh, rv):
        """The seed's interpolation, or (``rv_shift="exact"``) the histogram moved by ``rv``:
        the local profiles' velocities shifted, to the binned synthesis' tolerance."""
        if self.shift_kernel is None:
            return super().shifted_profiles(fssc, fssh, rv)
        num, norm = self.numerator_norm(fssc, fssh, rv)
        return num / norm[:, None]

    def epoch_chunk(self) -> int:
        # the scatters and gathers want a cache-sized working set on the CPU
        if plan.on_accelerator():
            return self.n_epoch
        most = max(1, min(self.n_epoch, SLOTS_PER_CHUNK // max(1, self.n_slot)))
        n_chunk = -(-self.n_epoch // most)
        return -(-self.n_epoch // n_chunk)  # equal chunks: the last overlaps its neighbour by < n_chunk epochs

    def padding(self, s1, n_bin):
        b0 = self.n_bin
        b1 = max(int(n_bin) if n_bin is not None else round_up(b0, 128), b0)
        ds = s1 - self.n_slot
        return {**super().padding(s1, n_bin),
                "weight": lambda a: pad_axis(a, 1, ds),
                "beta": lambda a: pad_axis(a, 1, ds),
                "jbase": lambda a: pad_axis(a, 1, ds, b1 - 4),  # any in-range first bin: the slot's weights are zero
                # bins past the last one receive no weight; edge values keep the templates finite
                "kernel": lambda a: pad_axis(a, 0, b1 - a.shape[0], mode="edge"),
                "shift_kernel": lambda a: pad_axis(a, 0, b1 - b0, mode="edge")}

    def slot_activity(self):
        return np.abs(np.asarray(self.weight)).sum(axis=2)

    def weight_components(self):
        return self.col_comp
