"""Binned (memory-light) synthesis against the exact dense model and a direct per-cell loop."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap.model import eval_profile, is_mu_dependent


@dataclasses.dataclass(frozen=True)
class WideningGaussian:
    """mu-dependent test profile: the Gaussian widens towards the limb."""

    depth: float = 0.5
    fwhm0: float = 9.0
    widen: float = 5.0
    mu_dependent = True

    def __call__(self, v, mu):
        fwhm = self.fwhm0 + self.widen * (1.0 - np.asarray(mu))
        return 1.0 - self.depth * np.exp(-4.0 * np.log(2.0) * (np.asarray(v) / fwhm) ** 2)

    @property
    def half_width(self):
        return 3.0 * (self.fwhm0 + self.widen)


@pytest.fixture(scope="module")
def small():
    star, grid, times, vels, comps = dm.demo_setup(n_cell=500, n_epoch=24, n_vel=32)
    fssc, fssh = dm.spot_map(grid, dm.DEMO_SPOTS)
    return star, grid, times, vels, comps, jnp.asarray(fssc), jnp.asarray(fssh)


def _mu_comps(comps):
    return dm.ComponentSet(phot=dataclasses.replace(comps.phot, profile=WideningGaussian(0.5, 9.0, 5.0)),
                           cool=dataclasses.replace(comps.cool, profile=WideningGaussian(0.6, 8.0, 3.0)),
                           hot=comps.hot)


def test_binned_matches_dense(small):
    star, grid, times, vels, comps, fc, fh = small
    dense = dm.precompute(grid, star, times, vels, comps, method="dense")
    for tol in (1e-5, 1e-7):
        binned = dm.precompute(grid, star, times, vels, comps, synthesis_tol=tol, method="binned")
        dev = float(jnp.max(jnp.abs(dm.model.synthesize(fc, fh, binned.line) - dm.model.synthesize(fc, fh, dense.line))))
        assert dev <= tol, (tol, dev)
    assert binned.line.nbytes() < dense.line.nbytes() / 5


def test_binned_gradient_matches_dense(small):
    star, grid, times, vels, comps, fc, fh = small
    dense = dm.precompute(grid, star, times, vels, comps, method="dense")
    binned = dm.precompute(grid, star, times, vels, comps, method="binned")
    rng = np.random.default_rng(3)
    w = jnp.asarray(rng.normal(size=(len(times), len(vels))))

    def obj(c, h, line):
        return jnp.sum(w * dm.model.synthesize(c, h, line))

    gb = jax.grad(obj, argnums=(0, 1))(fc, fh, binned.line)
    gd = jax.grad(obj, argnums=(0, 1))(fc, fh, dense.line)
    for a, b in zip(gb, gd, strict=True):
        assert float(jnp.max(jnp.abs(a - b))) <= 1e-6 * float(jnp.max(jnp.abs(b)))
    # finite differences on the binned model itself
    d = jnp.asarray(rng.normal(size=fc.shape)) * 1e-3
    eps = 1e-4
    fd = (obj(fc + eps * d, fh, binned.line) - obj(fc - eps * d, fh, binned.line)) / (2 * eps)
    assert abs(float(fd) - float(jnp.dot(gb[0], d))) <= 1e-7 * max(1.0, abs(float(fd)))


def _direct_loop(grid, star, times, vels, comps, fc, fh):
    """Per-epoch, per-cell reference of the seed's normalised profile (no rv, amp)."""
    geo = dm.geometry.cell_geometry((grid.lat, grid.lon, grid.area), times, (star.inclination, star.vsini_kms, star.period, star.t0, star.domega))
    # cells in view (the limb's cut ones too), limb darkening and local profile at ld_mu
    mu, vlos, parea, seen = (np.asarray(a) for a in (geo.ld_mu, geo.v_los, geo.proj_area, geo.visible))
    fill = (1 - np.asarray(fc) - np.asarray(fh), np.asarray(fc), np.asarray(fh))
    out = np.zeros((len(times), len(vels)))
    for e in range(len(times)):
        num = np.zeros(len(vels))
        den = 0.0
        for c in np.nonzero(seen[e])[0]:
            for k, comp in enumerate(comps):
                wk = comp.intensity * float(comp.limb_darkening(mu[e, c])) * parea[e, c] * fill[k][c]
                num += wk * eval_profile(comp.profile, vels - vlos[e, c], mu[e, c])
                den += wk
        out[e] = num / den
    return out


def test_mu_dependent_dense_equals_direct_loop_and_binned(small):
    star, grid, times, vels, comps, fc, fh = small
    mcomps = _mu_comps(comps)
    assert is_mu_dependent(mcomps.phot.profile) and not is_mu_dependent(mcomps.hot.profile)
    sel = slice(0, 4)
    ref = _direct_loop(grid, star, times[sel], vels, mcomps, fc, fh)
    dense = dm.precompute(grid, star, times[sel], vels, mcomps, method="dense")
    got = np.asarray(dm.model.synthesize(fc, fh, dense.line))
    assert np.max(np.abs(got - ref) / np.abs(ref)) <= 1e-8
    for tol in (1e-5, 1e-7):
        binned = dm.precompute(grid, star, times[sel], vels, mcomps, synthesis_tol=tol, method="binned")
        assert len(binned.line.col_comp) > 3  # the mu basis has more than one term
        dev = np.max(np.abs(np.asarray(dm.model.synthesize(fc, fh, binned.line)) - ref))
        assert dev <= tol, (tol, dev)
    # the mu dependence matters: ignoring it would be far off
    flat = dm.precompute(grid, star, times[sel], vels, comps, method="dense")
    assert np.max(np.abs(np.asarray(dm.model.synthesize(fc, fh, flat.line)) - ref)) > 1e-3


def test_bad_knobs(small):
    star, grid, times, vels, comps, fc, fh = small
    with pytest.raises(ValueError, match="synthesis_tol"):
        dm.precompute(grid, star, times, vels, comps, synthesis_tol=0.0, method="binned")
    with pytest.raises(ValueError, match="bin_width"):
        dm.precompute(grid, star, times, vels, comps, bin_width=-1.0, method="binned")


def test_mu_basis_that_cannot_reach_the_tolerance_warns():
    """With every mu node used the separation error of a macroturbulent profile stops near
    1e-8 (the spline in mu); a synthesis_tol below it was missed silently before."""
    import warnings

    from dopplermap.broadening import mu_dependent_profile
    from dopplermap.errors import DopplermapWarning
    from dopplermap.forms.binned import MuBasis

    profile = mu_dependent_profile(dm.gaussian(0.5, 9.0), 4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        ok = MuBasis(profile, 1e-7, profile.half_width, 0.5)  # reachable: no warning
    assert ok.error <= 1e-7 and ok.rank < 65
    with pytest.warns(DopplermapWarning, match=r"separates only to .* above synthesis_tol = 1e-15"):
        tight = MuBasis(profile, 1e-15, profile.half_width, 0.5)
    assert tight.error > 1e-15
