"""Line conventions of other codes: EW per component, the EW's stage, EW in Angstrom."""

import tomllib
import warnings

import astropy.units as u
import numpy as np
import pytest

import dopplermap as dm
from dopplermap import broadening as br
from dopplermap.config import TEMPLATE, parse_config
from dopplermap.errors import DopplermapInputError

C_KMS = 299792.458  # written out: the conversion is checked against the definition of c
R = 65000.0


def _fitted_gaussian(v, i):
    """A Gaussian plus a level fitted by hand (depth/FWHM parametrisation): its area and level."""
    from scipy.optimize import OptimizeWarning, curve_fit

    def g(x, depth, fwhm, centre, level):
        return level - depth * np.exp(-4.0 * np.log(2.0) * (x - centre) ** 2 / fwhm**2)

    with warnings.catch_warnings():  # the covariance is not used (a near-exact fit leaves it undefined)
        warnings.simplefilter("ignore", OptimizeWarning)
        (depth, fwhm, _c, level), _ = curve_fit(g, v, i, p0=[0.3, 10.0, 0.0, 1.0])
    return depth * abs(fwhm) * np.sqrt(np.pi / (4.0 * np.log(2.0))), level


def test_angstrom_to_kms_is_c_dlambda_over_lambda():
    # the analytic conversion EW_v = c EW_lambda / lambda0, for numbers and for Quantities
    assert br.equivalent_width_kms(0.1, 600.0, "angstrom") == pytest.approx(C_KMS * 0.1 / 6000.0, rel=1e-14)
    assert br.equivalent_width_kms(0.1 * u.AA, 600.0) == pytest.approx(C_KMS * 0.1 / 6000.0, rel=1e-14)
    assert br.equivalent_width_kms(0.01 * u.nm, 6000 * u.AA) == pytest.approx(C_KMS * 0.1 / 6000.0, rel=1e-12)
    assert br.equivalent_width_kms(5000 * u.m / u.s, None) == pytest.approx(5.0, rel=1e-14)
    assert br.equivalent_width_kms(4.0) == 4.0  # km/s passes unchanged
    assert br.equivalent_width_kms([0.1 * u.AA, 0.2, 0.05], 500.0, "angstrom") == pytest.approx(
        (C_KMS * 0.1 / 5000.0, C_KMS * 0.2 / 5000.0, C_KMS * 0.05 / 5000.0), rel=1e-12)


def test_angstrom_needs_the_wavelength_and_a_length_needs_conversion():
    with pytest.raises(DopplermapInputError, match="wavelength"):
        br.equivalent_width_kms(0.1, None, "angstrom")
    with pytest.raises(DopplermapInputError, match="equivalent_width must be > 0"):
        br.equivalent_width_kms(-0.1, 600.0, "angstrom")
    with pytest.raises(DopplermapInputError, match="unit must be one of"):
        br.equivalent_width_kms(0.1, 600.0, "nm")
    # scale_equivalent_width takes km/s: a length is refused, not read as km/s
    with pytest.raises(DopplermapInputError, match="equivalent width must be in units convertible to km/s"):
        br.scale_equivalent_width(dm.gaussian(0.3, 9.0), 0.1 * u.AA)


def test_one_equivalent_width_per_component():
    profs = [dm.gaussian(0.3, 9.0)] * 3
    out = br.line_profiles(profs, equivalent_width=(3.0, 4.0, 2.0))
    assert [p.equivalent_width() for p in out] == pytest.approx([3.0, 4.0, 2.0], rel=1e-6)
    with pytest.raises(DopplermapInputError, match="one per component"):
        br.line_profiles(profs, equivalent_width=(3.0, 4.0))


def test_broadened_stage_is_spotdipys_order():
    """``ew_stage = "broadened"``: the Gaussian fitted by hand to the final (instrument-broadened)
    line, over the same table, has the requested area; the intrinsic stage misses it, because the instrument changes
    the shape the fit sees. With the integrated EW both orders agree (a unit-area convolution)."""
    voigt = dm.voigt(0.4, 6.0, 3.0)
    ew = 5.0
    after = br.line_profiles([voigt], equivalent_width=ew, ew_method="gaussian_fit", ew_stage="broadened",
                             resolving_power=R)[0]
    before = br.line_profiles([voigt], equivalent_width=ew, ew_method="gaussian_fit", ew_stage="intrinsic",
                              resolving_power=R)[0]
    v = after.velocity  # the table the code fitted (a Gaussian fit depends on its window)
    ew_after, level = _fitted_gaussian(v, after(v))
    ew_before, _ = _fitted_gaussian(v, before(v))
    assert ew_after == pytest.approx(ew, rel=3e-3)
    assert level == pytest.approx(1.0, abs=3e-3)
    assert abs(ew_before / ew - 1.0) > 5 * abs(ew_after / ew - 1.0)
    a = br.line_profiles([voigt], equivalent_width=ew, ew_stage="broadened", resolving_power=R)[0]
    b = br.line_profiles([voigt], equivalent_width=ew, ew_stage="intrinsic", resolving_power=R)[0]
    assert a.equivalent_width() == pytest.approx(b.equivalent_width(), rel=1e-6)
    assert a.equivalent_width() == pytest.approx(ew, rel=3e-3)  # a Voigt line's wings beyond 60 FWHM left out


def _cfg(**line):
    t = tomllib.loads(TEMPLATE)
    t["line"].update(line)
    return parse_config(t, source="t.toml")


def test_config_takes_ew_per_component_in_angstrom():
    cfg = _cfg(equivalent_width=[0.1, 0.12, 0.08], ew_unit="angstrom", ew_stage="broadened", resolving_power=R)
    assert cfg.line.equivalent_width == (0.1, 0.12, 0.08) and cfg.line.ew_stage == "broadened"
    from dopplermap.problem import _line_components

    comps = _line_components(cfg)
    lam_a = 10.0 * cfg.line.wavelength_nm
    want = [C_KMS * e / lam_a for e in (0.1, 0.12, 0.08)]
    assert [c.profile.equivalent_width() for c in comps] == pytest.approx(want, rel=1e-3)
    assert _cfg().line.ew_stage == "intrinsic" and _cfg().line.ew_unit == "km/s"  # the defaults
    with pytest.raises(DopplermapInputError, match=r"\[line\] equivalent_width must be one value or 3"):
        _cfg(equivalent_width=[0.1, 0.2])
    with pytest.raises(DopplermapInputError, match=r"\[line\] equivalent_width\[1\] must be > 0"):
        _cfg(equivalent_width=[0.1, -0.2, 0.1])
    with pytest.raises(DopplermapInputError, match=r"equivalent_width must be a number or a list of numbers, got 'big'"):
        _cfg(equivalent_width="big")


@pytest.mark.slow
def test_matching_the_ew_stage_keeps_the_offsets_small():
    """Data whose local lines were scaled SpotDIPy's way (Gaussian-fit EW imposed after the
    instrument): inverted with the same stage the continuum offsets stay small; imposed on the
    intrinsic line instead, every epoch's offset moves to make up the different depth (a
    low resolving power, 10000, makes the two orders differ clearly)."""
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=12, n_vel=30, seed=2)
    v = np.linspace(-40.0, 40.0, 161)
    table = dm.tabulated(v, 0.985 - 0.45 * np.exp(-v**2 / 32.0) - 0.05 / (1.0 + (v / 3.0) ** 2))

    def lines(stage):
        profs = br.line_profiles([table] * 3, equivalent_width=(6.0, 7.0, 5.0), ew_method="gaussian_fit",
                                 ew_stage=stage, resolving_power=10000.0)
        return dm.ComponentSet(*[dm.Component(p, c.limb_darkening, c.intensity) for p, c in zip(profs, comps, strict=True)])

    sim = dm.simulate(grid, star, times, vels, lines("broadened"), dm.DEMO_SPOTS, snr=500, seed=2, method="dense")
    amp = {}
    for stage in ("broadened", "intrinsic"):
        pre = dm.precompute(grid, star, times, vels, lines(stage), method="dense")
        amp[stage] = float(np.abs(dm.invert(pre, sim.obs, lmbd=1.0, tol=1e-7).amp).mean())
    assert amp["broadened"] < 0.015 and amp["intrinsic"] > 4.0 * amp["broadened"]
