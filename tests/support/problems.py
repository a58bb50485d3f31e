"""Small simulated star shared by the search / uncertainty / joint-fit tests."""

import numpy as np

import dopplermap as dm
from dopplermap import search


def small_problem(n_cell=400, n_epoch=20, n_vel=24, snr=500.0, seed=1, inclination=60.0, vsini=40.0):
    star, grid, times, vels, comps = dm.demo_setup(n_cell=n_cell, n_epoch=n_epoch, n_vel=n_vel, seed=seed)
    star = star.replace(inclination=inclination, vsini=vsini)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=snr, seed=seed)
    return search.Problem(grid=grid, star=star, obs=sim.obs, components=comps,
                          t_phot=5000.0, wavelength_nm=600.0), sim


def form_problem(pre, obs, **settings):
    """The problem of a precomputed model ``pre`` and its observations, with these settings."""
    return dm.Problem(grid=None, star=None, obs=obs, components=None, form=pre, settings=dm.Settings(**settings))


def mem_fitted():
    """A 64-cell star fitted tightly with the maximum-entropy regulariser at lambda 1:
    ``(pre, sim, best)``, for the Laplace and degrees-of-freedom checks."""
    prob, sim = small_problem(n_cell=64, n_epoch=10, n_vel=16, inclination=50.0)
    pre = dm.precompute(prob.grid, prob.star, sim.obs.times, sim.obs.vels, prob.components)
    best = dm.invert(pre, sim.obs, lmbd=1.0, regulariser="mem", tol=1e-10, maxiter=5000)
    return pre, sim, best


def components(profile, u=0.6):
    """Photosphere, cool and hot components with one local profile and linear limb darkening ``u``
    (continuum intensities 1, 0.3, 1.5)."""
    ld = dm.LimbDarkening("linear", (u,))
    return dm.ComponentSet(dm.Component(profile, ld, 1.0), dm.Component(profile, ld, 0.3),
                           dm.Component(profile, ld, 1.5))


def gray_kernel(v, vsini, eps):
    """Gray's rotational broadening kernel for linear limb darkening (normalised to 1)."""
    x = np.clip(v / vsini, -1, 1)
    g = (2 * (1 - eps) * np.sqrt(1 - x**2) + 0.5 * np.pi * eps * (1 - x**2)) / (np.pi * vsini * (1 - eps / 3))
    return np.where(np.abs(v) < vsini, g, 0.0)
