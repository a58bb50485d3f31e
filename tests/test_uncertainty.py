
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from support import problems
from support.problems import form_problem, small_problem  # noqa: E402

import dopplermap as dm
from dopplermap import plan
from dopplermap import uncertainty as U
from dopplermap.objective import loss

LMBD, REG = 5.0, "tikhonov"


@pytest.fixture(scope="module")
def fitted():
    prob, sim = small_problem(n_cell=200, n_epoch=16, inclination=50.0)
    pre = dm.precompute(prob.grid, prob.star, sim.obs.times, sim.obs.vels, prob.components)
    best = dm.invert(pre, sim.obs, lmbd=LMBD, regulariser=REG, tol=1e-10, maxiter=5000)
    return prob, sim, pre, best


@pytest.mark.slow
def test_hvp_matches_finite_difference_of_gradient():
    prob, sim = small_problem(n_cell=64, n_epoch=10, n_vel=16, inclination=50.0)
    pre = dm.precompute(prob.grid, prob.star, sim.obs.times, sim.obs.vels, prob.components)
    n2 = 2 * pre.n_cell
    rng = np.random.default_rng(0)
    x = jnp.asarray(np.concatenate([rng.uniform(0.05, 0.4, n2), np.zeros(pre.n_epoch), rng.normal(0, 0.01, pre.n_epoch)]))
    v = rng.normal(size=x.size)
    v[n2:n2 + pre.n_epoch] = 0.0  # the seed's rv shift is linear interpolation: piecewise linear in rv
    for reg in ("tikhonov", "mem"):
        hv = np.asarray(U.hvp_function(LMBD, pre, sim.obs, reg)(x, v[None]))[0]
        g = jax.jit(jax.grad(lambda y, reg=reg: loss(y, LMBD, pre, sim.obs, reg)))
        h = 1e-5
        fd = (np.asarray(g(x + h * v)) - np.asarray(g(x - h * v))) / (2 * h)
        np.testing.assert_allclose(hv, fd, rtol=0, atol=1e-6 * np.abs(fd).max())


@pytest.mark.slow
def test_hvp_paths_agree(fitted, monkeypatch):
    """Batched HVPs on the blocked form and one at a time on the folded form (what a dense
    model too big to block gets on CPU) are the same products; so are Hutchinson's
    estimates with probes solved together or one after another."""
    prob, sim, pre, best = fitted
    x = jnp.asarray(best.x)
    vs = np.random.default_rng(3).normal(size=(5, x.size))
    fast = U.hvp_function(LMBD, pre, sim.obs, REG, chunk=4)
    assert fast.batched and U.hvp_form(pre).line.kind == "blocked"
    hut = U.laplace(form_problem(pre, sim.obs), best, diagonal="hutchinson", n_probe=6, options={"chunk": 4})
    monkeypatch.setattr(plan, "HVP_BLOCKED_MAX_BYTES", 0)
    slow = U.hvp_function(LMBD, pre, sim.obs, REG, chunk=4)
    assert U.hvp_form(pre).line.kind == "folded"
    assert slow.batched == (jax.default_backend() != "cpu")
    ref = np.asarray(slow(x, vs))
    np.testing.assert_allclose(np.asarray(fast(x, vs)), ref, rtol=0, atol=1e-10 * np.abs(ref).max())
    hut_slow = U.laplace(form_problem(pre, sim.obs), best, diagonal="hutchinson", n_probe=6, options={"chunk": 4})
    np.testing.assert_allclose(hut.sigma_fssc, hut_slow.sigma_fssc, rtol=1e-5)


def test_resample_identity_keeps_model(fitted):
    prob, sim, pre, best = fitted
    idx = np.arange(pre.n_epoch)[::-1]
    pre_b, obs_b = U.resample_epochs(pre, sim.obs, idx)
    m = dm.forward(best.fssc, best.fssh, best.rv[idx], best.amp[idx], pre_b)
    np.testing.assert_allclose(m, np.asarray(best.model)[idx], atol=1e-12)
    with pytest.raises(ValueError, match="epoch indices"):
        U.resample_epochs(pre, sim.obs, [pre.n_epoch])


@pytest.mark.slow
def test_laplace_and_bootstrap(fitted, tmp_path):
    prob, sim, pre, best = fitted
    hidden = U.never_visible(pre)
    # only cells near the hidden pole (latitude < -inclination, up to a cell size) are never seen
    assert hidden.any() and (np.degrees(prob.grid.lat[hidden]) < -prob.star.inclination + 15).all()
    post = U.laplace(form_problem(pre, sim.obs), best, width="posterior")
    sand = U.laplace(form_problem(pre, sim.obs), best, width="sandwich")
    boot = U.bootstrap(form_problem(pre, sim.obs, tol=1e-9), best, n_boot=8)
    vis = ~hidden
    med_boot, med_sand = np.median(boot.sigma_fssc[vis]), np.median(sand.sigma_fssc[vis])
    med_post = np.median(post.sigma_fssc[vis])
    print(f"median sigma(fssc) over seen cells: bootstrap {med_boot:.4g}, Laplace sandwich {med_sand:.4g}, "
          f"Laplace posterior {med_post:.4g}")
    assert 0.5 <= med_boot / med_sand <= 2.0
    # never-visible cells: unconstrained by the data -> inf (the largest) for every method, finite elsewhere
    for unc in (post, sand, boot):
        for sig in (unc.sigma_fssc, unc.sigma_fssh):
            assert np.all(np.isinf(sig[hidden])) and np.all(np.isfinite(sig[vis]))
        assert np.array_equal(unc.never_visible, hidden)
    # the sampling width is below the posterior width (the prior adds information the data lack)
    assert med_sand < med_post
    path = U.save_uncertainty(post, tmp_path)
    back = np.load(path)
    np.testing.assert_array_equal(back["sigma_fssc"], post.sigma_fssc)
    from dopplermap.plot import plot_uncertainty
    from dopplermap.style import save_figure

    save_figure(plot_uncertainty(prob.grid, best.fssc, boot), tmp_path / "unc.png")
    assert (tmp_path / "unc.png").stat().st_size > 0


@pytest.mark.slow
def test_bootstrap_batch_equals_resampling(fitted):
    """A resample is the full problem with each epoch's chi-square counted as often as it
    was drawn: the batched bootstrap (error sets, one vmapped solve) re-solves the same
    problems as resampling the model and data (its objective at the resampled solution is
    the resampled loss, to rounding), and both give the same uncertainty map."""
    from dopplermap.objective import loss

    prob, sim, pre, best = fitted
    n_e = pre.n_epoch
    idx = np.random.default_rng(4).integers(0, n_e, n_e)
    pre_b, obs_b = U.resample_epochs(pre, sim.obs, idx)
    x0 = np.concatenate([best.fssc, best.fssh, best.rv[idx], best.amp[idx]])
    r = dm.invert(pre_b, obs_b, lmbd=LMBD, regulariser=REG, x0=x0, tol=1e-8)
    rv, amp = np.array(best.rv), np.array(best.amp)
    rv[idx], amp[idx] = r.rv, r.amp  # a repeated epoch's copies share one value (checked next)
    assert np.allclose(r.rv, rv[idx]) and np.allclose(r.amp, amp[idx])
    w = np.bincount(idx, minlength=n_e)
    with np.errstate(divide="ignore"):
        err_w = jnp.asarray(np.asarray(sim.obs.err) / np.sqrt(w)[:, None])
    obs_w = dm.Observations(times=sim.obs.times, vels=sim.obs.vels, flux=sim.obs.flux, err=err_w)
    xw = jnp.asarray(np.concatenate([r.fssc, r.fssh, rv, amp]))
    assert float(loss(xw, LMBD, pre, obs_w, REG)) == pytest.approx(float(loss(jnp.asarray(r.x), LMBD, pre_b, obs_b, REG)),
                                                                   rel=1e-12)
    kw = dict(n_boot=10, seed=4)
    # tighter than the CLI's bootstrap tol (1e-6): there the vmapped and the one-after-another solves
    # stop on their relative-reduction test at rounding-dependent points, and their sigma maps'
    # medians have differed by 4.6 %
    problem = form_problem(pre, sim.obs, tol=1e-8)
    batch = U.bootstrap(problem, best, mode="batch", **kw)
    resample = U.bootstrap(problem, best, mode="resample", **kw)
    seq = U.bootstrap(problem, best, mode="sequential", **kw)
    assert (batch.mode, resample.mode, seq.mode) == ("vmap", "resample", "sequential")
    assert batch.samples.shape == resample.samples.shape == seq.samples.shape == (10, 2, pre.n_cell)
    vis = ~batch.never_visible
    for a, b in ((batch.sigma_fssc, resample.sigma_fssc), (batch.sigma_fssh, resample.sigma_fssh)):
        assert np.corrcoef(a[vis], b[vis])[0, 1] > 0.98
        assert 0.9 < np.median(a[vis]) / np.median(b[vis]) < 1.1
    # the same error sets solved together and one after another: the same minima to the solver's
    # tolerance (a loss tolerance: cells along flat directions may differ by a few 0.01), so the
    # same uncertainty map
    assert np.median(np.abs(seq.samples - batch.samples)) < 5e-3
    for a, b in ((batch.sigma_fssc, seq.sigma_fssc), (batch.sigma_fssh, seq.sigma_fssh)):
        assert np.corrcoef(a[vis], b[vis])[0, 1] > 0.99
        assert 0.97 < np.median(a[vis]) / np.median(b[vis]) < 1.03
    with pytest.raises(ValueError, match="bootstrap mode"):
        U.bootstrap(problem, best, mode="together")


@pytest.mark.slow
def test_hutchinson_agrees_with_dense():
    prob, sim = small_problem(n_cell=64, n_epoch=10, n_vel=16, inclination=50.0)
    pre = dm.precompute(prob.grid, prob.star, sim.obs.times, sim.obs.vels, prob.components)
    best = dm.invert(pre, sim.obs, lmbd=LMBD, regulariser=REG, tol=1e-10, maxiter=5000)
    problem = form_problem(pre, sim.obs)
    dense = U.laplace(problem, best)
    hut = U.laplace(problem, best, diagonal="hutchinson", n_probe=48)
    r = np.median(hut.sigma_fssc) / np.median(dense.sigma_fssc)
    assert 0.8 < r < 1.25
    # the sandwich too (probes solved together, two CG solves each), 70 probes: two chunks of 64
    dense_s = U.laplace(problem, best, width="sandwich")
    hut_s = U.laplace(problem, best, diagonal="hutchinson", width="sandwich", n_probe=70)
    r = np.median(hut_s.sigma_fssc) / np.median(dense_s.sigma_fssc)
    assert 0.7 < r < 1.4, r
    with pytest.raises(ValueError, match="width"):
        U.laplace(problem, best, width="fisher")


def test_never_visible_is_the_same_for_every_model_form():
    """Folded models hold weight differences (here zero for the hot component, as bright as
    the photosphere with the same limb darkening): never_visible must not be fooled."""
    import dataclasses

    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=12)
    comps = dataclasses.replace(comps, hot=dataclasses.replace(comps.phot, profile=comps.hot.profile),
                                cool=dataclasses.replace(comps.cool, intensity=1.0,
                                                         limb_darkening=comps.phot.limb_darkening))
    pd = dm.precompute(grid, star, times, vels, comps, method="dense")
    ref = U.never_visible(pd)
    assert ref.any() and not ref.all()
    np.testing.assert_array_equal(U.never_visible(dm.precompute(grid, star, times, vels, comps, method="binned")), ref)
    for dtype in ("float64", "float32"):
        folded = dm.solve_form(pd, dtype)
        assert np.all(np.asarray(folded.line.weight) == 0)  # both spot weights equal the photosphere's
        np.testing.assert_array_equal(U.never_visible(folded), ref)
        blocked = dm.solve_form(pd, dtype, blocked=True)
        np.testing.assert_array_equal(U.never_visible(blocked), ref)
    with pytest.raises(ValueError, match="blocked"):
        U.resample_epochs(blocked, None, np.arange(pd.n_epoch))


ANALYSES = [(U.laplace, "laplace(problem, best)"), (U.bootstrap, "bootstrap(problem, best)"),
            (dm.search.sweep_lambda, "sweep_lambda(problem, lmbds)"),
            (dm.search.lambda_for_chi2, "lambda_for_chi2(problem, target)")]


@pytest.mark.parametrize("fn, call", ANALYSES)
def test_analyses_take_a_problem(fn, call):
    """A Problem first, at most 8 parameters; a bare precomputed model is refused by name."""
    import inspect

    from dopplermap.errors import DopplermapInputError

    params = list(inspect.signature(fn).parameters)
    assert params[0] == "problem" and len(params) <= 8, params
    star, grid, times, vels, comps = dm.demo_setup(n_cell=50, n_epoch=3, n_vel=8)
    pre = dm.precompute(grid, star, times, vels, comps)
    with pytest.raises(DopplermapInputError, match=rf"^{fn.__name__} takes a dopplermap\.problem\.Problem first, "
                                                   "got Precomputed;"):
        fn(pre, None)


def test_laplace_refuses_unknown_options(fitted):
    prob, sim, pre, best = fitted
    from dopplermap.errors import DopplermapInputError

    with pytest.raises(DopplermapInputError, match="unknown 'chunks'; known: chunk, cg_tol, cg_maxiter, penalty"):
        U.laplace(form_problem(pre, sim.obs), best, options={"chunks": 4})


def test_settings_copy_keeps_the_model(fitted):
    """A problem copy with other settings (the CLI's uncertainty settings) reuses the built model."""
    prob, sim, pre, best = fitted
    built = prob.pre
    tight = prob.replace(settings=prob.settings.replace(tol=1e-6))
    assert tight.pre is built and tight.settings.tol == 1e-6
    assert prob.replace(star=prob.star.replace(inclination=55.0)).pre is not prob.pre


@pytest.fixture(scope="module")
def mem_fitted():
    return problems.mem_fitted()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:laplace. in .* free seen cells")
@pytest.mark.parametrize("width", ["posterior", "sandwich"])
def test_lowrank_agrees_with_dense(mem_fitted, width):
    """The matrix-free low-rank diagonal is the dense one (both exact) to 1e-8, free and
    bound cells alike; rv and amp marginalised."""
    pre, sim, best = mem_fitted
    problem = form_problem(pre, sim.obs)
    dense = U.laplace(problem, best, width=width, diagonal="dense")
    low = U.laplace(problem, best, width=width, diagonal="lowrank")
    assert dense.method == f"laplace-{width}-dense" and low.method == f"laplace-{width}-lowrank"
    assert dense.at_bound.any() and (~dense.at_bound).any()  # both kinds of cells are compared
    for a, b in ((dense.sigma_fssc, low.sigma_fssc), (dense.sigma_fssh, low.sigma_fssh)):
        seen = np.isfinite(a)
        assert np.array_equal(seen, np.isfinite(b))
        np.testing.assert_allclose(b[seen], a[seen], rtol=1e-8)
    np.testing.assert_allclose(low.lower, dense.lower, rtol=1e-8, atol=1e-12)
    assert "outside" in low.note


def test_bounded_interval_stays_inside_the_bounds():
    """The Gaussian truncated to [0, 1], its 68.27 % highest-density interval."""
    from scipy.stats import truncnorm

    from dopplermap.constants import FILL_MIN

    f = np.array([0.5, 0.5, 0.02, 0.98, FILL_MIN, 0.3, 0.4])
    sigma = np.array([1e-4, 2.0, 0.1, 0.1, 0.05, np.inf, 0.0])
    lo, hi = U.bounded_interval(f, sigma)
    assert np.all(lo >= 0) and np.all(hi <= 1) and np.all(lo <= f) and np.all(f <= hi)
    # away from the bounds: f +- sigma
    np.testing.assert_allclose([lo[0], hi[0]], [0.5 - 1e-4, 0.5 + 1e-4], rtol=1e-9)
    # every interval holds 68.27 % of the truncated Gaussian (scipy's truncnorm)
    for i in range(5):
        t = truncnorm(-f[i] / sigma[i], (1 - f[i]) / sigma[i], loc=f[i], scale=sigma[i])
        assert abs(t.cdf(hi[i]) - t.cdf(lo[i]) - 0.6826894921370859) < 1e-9
    # near a bound it reaches the bound (a true 0 can be covered), longer on the open side
    assert lo[2] == 0 and hi[2] - f[2] > f[2] and hi[3] == 1
    # nearly flat (sigma >> 1): about the middle 68 %
    assert 0.15 < lo[1] < 0.17 and 0.83 < hi[1] < 0.85
    # on the floor with its conditional width: half a Gaussian, [0, ~sigma]
    assert lo[4] == 0 and abs(hi[4] - 0.05) < 1e-4
    # unconstrained: the whole range; zero width: the point
    assert (lo[5], hi[5]) == (0.0, 1.0) and lo[6] == hi[6] == 0.4


def test_laplace_auto_choice_and_cost(mem_fitted, fitted, monkeypatch):
    """Small problems get the exact dense diagonal; above DENSE_MAX_FREE a per-cell prior with
    fewer data than parameters gets the low-rank one, a cell-coupling regulariser dense or
    Hutchinson; the cost names it before anything is computed."""
    pre, sim, best = mem_fitted
    problem = form_problem(pre, sim.obs)
    small = U.laplace_cost(problem, best)
    assert small.diagonal == "dense" and small.n_hvp == small.n_free and small.seconds is None
    monkeypatch.setattr(U, "DENSE_MAX_FREE", 10)
    n_data = sim.obs.n_epoch * sim.obs.n_vel + 2 * sim.obs.n_epoch
    big = U.laplace_cost(problem, best)
    assert (big.diagonal == "lowrank") == (n_data < big.n_free)
    assert U.laplace_cost(problem, best, diagonal="lowrank").n_vjp == sim.obs.n_epoch * sim.obs.n_vel
    assert "free parameters" in big.describe() and "B" in big.describe()
    _, sim_t, pre_t, best_t = fitted  # Tikhonov couples cells: no low-rank form
    tik = U.laplace_cost(form_problem(pre_t, sim_t.obs), best_t)
    assert tik.diagonal == "dense" and "couples cells" in tik.reason
    monkeypatch.setattr(U, "DENSE_MAX_FREE_FALLBACK", 10)
    assert U.laplace_cost(form_problem(pre_t, sim_t.obs), best_t).diagonal == "hutchinson"
    from dopplermap.errors import DopplermapInputError

    with pytest.raises(DopplermapInputError, match="'lowrank' needs a regulariser that couples no cells, got 'tikhonov'"):
        U.laplace(form_problem(pre_t, sim_t.obs), best_t, diagonal="lowrank")


def test_laplace_refused_past_the_memory_limit(mem_fitted, monkeypatch):
    from dopplermap.errors import DopplermapInputError
    from dopplermap.memory import ENV

    pre, sim, best = mem_fitted
    monkeypatch.setenv(ENV, "1K")
    with pytest.raises(DopplermapInputError, match=r"the Laplace uncertainty \(dense .* needs about .* more than the "
                                                   r"limit .*1K"):
        U.laplace(form_problem(pre, sim.obs), best)


@pytest.mark.slow
def test_laplace_intervals_and_the_gaussian_warning(mem_fitted, tmp_path):
    """Every interval lies in [0, 1]; the warning counts exactly the free seen cells whose
    Gaussian 1-sigma range crosses 0 or 1; the bounded intervals are saved."""
    from dopplermap.errors import DopplermapWarning

    pre, sim, best = mem_fitted
    with pytest.warns(DopplermapWarning, match=r"laplace: in (\d+) of (\d+) free seen cells the 1-sigma range") as rec:
        unc = U.laplace(form_problem(pre, sim.obs), best)
    fill = np.stack([best.fssc, best.fssh])
    sigma = np.stack([unc.sigma_fssc, unc.sigma_fssh])
    free_seen = ~unc.at_bound & ~unc.never_visible[None]
    crossing = free_seen & ((fill - sigma < 0) | (fill + sigma > 1))
    msg = str([w for w in rec if "1-sigma range" in str(w.message)][0].message)
    assert f"in {crossing.sum()} of {free_seen.sum()} free seen cells" in msg and unc.n_crossing == crossing.sum()
    assert np.all(unc.lower >= 0) and np.all(unc.upper <= 1) and np.all(unc.lower <= fill)
    assert np.all(fill <= unc.upper)
    back = np.load(U.save_uncertainty(unc, tmp_path))
    np.testing.assert_array_equal(back["upper_fssc"], unc.upper[0])
    np.testing.assert_array_equal(back["at_bound_fssh"], unc.at_bound[1])
    read = U.load_uncertainty(tmp_path / "uncertainty_laplace.npz")  # and read back whole
    assert read.method == unc.method
    for key in ("sigma_fssc", "sigma_fssh", "never_visible", "lower", "upper", "at_bound"):
        np.testing.assert_array_equal(getattr(read, key), getattr(unc, key))


def test_an_uncertainty_file_in_the_documented_layout_is_read(tmp_path):
    """A file written by NumPy alone in the layout :func:`save_uncertainty` documents (not by our
    writer) reads back; one that is not an uncertainty file is one line naming it and what it lacks."""
    from dopplermap.io.uncertainty import load_uncertainty

    sig = np.array([0.1, np.inf, 0.05])
    np.savez(tmp_path / "uncertainty_bootstrap.npz", sigma_fssc=sig, sigma_fssh=sig / 2,
             never_visible=np.array([False, True, False]), method="bootstrap")
    unc = load_uncertainty(tmp_path / "uncertainty_bootstrap.npz")
    assert unc.method == "bootstrap" and unc.lower is None
    np.testing.assert_array_equal(unc.sigma_fssh, sig / 2)
    assert unc.never_visible.dtype == bool and unc.never_visible.tolist() == [False, True, False]
    np.savez(tmp_path / "other.npz", sigma_fssc=sig)
    with pytest.raises(dm.DopplermapInputError, match=r"other\.npz: not an uncertainty file .*no sigma_fssh, "
                       r"never_visible, method"):
        load_uncertainty(tmp_path / "other.npz")
    np.savez(tmp_path / "short.npz", sigma_fssc=sig, sigma_fssh=sig[:2], never_visible=np.zeros(3, bool),
             method="bootstrap")
    with pytest.raises(dm.DopplermapInputError, match=r"short\.npz: sigma_fssc, sigma_fssh and never_visible must be"):
        load_uncertainty(tmp_path / "short.npz")
    np.savez(tmp_path / "half.npz", sigma_fssc=sig, sigma_fssh=sig, never_visible=np.zeros(3, bool),
             method="laplace-posterior-dense", lower_fssc=sig, upper_fssc=sig)  # Laplace's intervals, in part
    with pytest.raises(dm.DopplermapInputError, match=r"half\.npz: not an uncertainty file .*no lower_fssh, "
                       r"upper_fssh, at_bound_fssc, at_bound_fssh"):
        load_uncertainty(tmp_path / "half.npz")
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(dm.DopplermapInputError, match=r"text\.npz: not an uncertainty file"):
        load_uncertainty(tmp_path / "text.npz")
    np.savez(tmp_path / "pickled.npz", sigma_fssc=sig, sigma_fssh=sig, never_visible=np.zeros(3, bool),
             method=np.array([{"a": 1}], dtype=object))  # never unpickled
    with pytest.raises(dm.DopplermapInputError, match=r"pickled\.npz: not an uncertainty file"):
        load_uncertainty(tmp_path / "pickled.npz")

