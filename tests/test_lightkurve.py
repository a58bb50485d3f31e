"""Light curves as lightkurve gives them, against lightkurve itself: the SPOC file read with each
quality mask, the same curve written by ``LightCurve.to_fits()`` and passed as an object.

lightkurve is a test dependency only: dopplermap reads its files and objects without importing it.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from dopplermap.errors import DopplermapInputError, DopplermapWarning
from dopplermap.io.lightcurve import read_lightcurve
from dopplermap.io.quality import KEPLER_FLAGS, PRESETS, TESS_FLAGS

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # its import warns about optional extras it lacks
    lk = pytest.importorskip("lightkurve")

TESS_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "tess"
SPOC = TESS_DIR / "tess2018206045859-s0001-0000000025155310-0120-s_lc.fits"


@pytest.fixture(scope="module")
def spoc():
    if not SPOC.is_file():
        pytest.skip(f"TESS SPOC light curve not found at {SPOC} (the shared data folder is absent)")
    return SPOC


@pytest.fixture(scope="module")
def flat(spoc, tmp_path_factory):
    """lightkurve's cleaned curve (default mask, NaNs removed, flattened), as an object and as its
    to_fits() file."""
    lc = lk.read(spoc).remove_nans().flatten()
    path = tmp_path_factory.mktemp("lk") / "flat.fits"
    lc.to_fits(path)
    return lc, path


@pytest.mark.parametrize("mission,flags", [("TESS", lk.utils.TessQualityFlags), ("Kepler", lk.utils.KeplerQualityFlags)])
def test_presets_and_flags_are_lightkurves(mission, flags):
    assert PRESETS[mission] == flags.OPTIONS
    table = TESS_FLAGS if mission == "TESS" else KEPLER_FLAGS
    assert set(table) == set(flags.STRINGS)  # the same defined bits
    # every bit and random combinations of them: the same cadences dropped as lightkurve's mask
    rng = np.random.default_rng(1)
    q = np.concatenate([[0], 2 ** np.arange(22), rng.integers(0, 2**21, 500)])
    from dopplermap.io.quality import apply_bitmask

    for preset, mask in PRESETS[mission].items():
        dropped, _ = apply_bitmask(q, mask, mission)
        np.testing.assert_array_equal(~dropped, flags.create_quality_mask(q, bitmask=preset))


@pytest.mark.parametrize("column,mask", [("SAP_FLUX", "none"), ("SAP_FLUX", "default"), ("SAP_FLUX", "hard"),
                                         ("SAP_FLUX", "hardest"), ("SAP_FLUX", 128), ("PDCSAP_FLUX", "none"),
                                         ("PDCSAP_FLUX", "default")])
def test_spoc_file_matches_lightkurve_with_the_same_mask(spoc, column, mask):
    ref = lk.read(spoc, quality_bitmask=mask, flux_column=column.lower()).remove_nans()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        lc = read_lightcurve(spoc, column=column, quality_bitmask=mask)
    assert lc.n_points == len(ref)
    np.testing.assert_allclose(lc.time, ref.time.tdb.jd, rtol=0, atol=1e-6)  # BJD_TDB
    np.testing.assert_array_equal(lc.flux, ref.flux.value)
    np.testing.assert_array_equal(lc.err, ref.flux_err.value)
    assert lc.n_read == 20076 and lc.n_read - lc.n_points == lc.n_quality + lc.n_invalid


def test_spoc_default_mask_counts_per_flag(spoc):
    from astropy.io import fits

    q = fits.getdata(spoc, "LIGHTCURVE")["QUALITY"]
    lc = read_lightcurve(spoc)
    assert lc.n_quality == int(np.sum((q & PRESETS["TESS"]["default"]) != 0)) == len(q) - len(lk.read(spoc))
    assert lc.dropped_by_flag == {TESS_FLAGS[b]: int(np.sum(q & b != 0)) for b in sorted(TESS_FLAGS)
                                  if np.any(q & b)}


def test_to_fits_file_and_object_give_the_same_curve(spoc, flat):
    lc, path = flat
    want_t = lc.time.tdb.jd
    spoc_read = read_lightcurve(spoc)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DopplermapWarning)
        from_file = read_lightcurve(path)
        from_object = read_lightcurve(lc)
    for got in (from_file, from_object):
        assert got.n_points == len(lc) == spoc_read.n_points
        np.testing.assert_allclose(got.time, want_t, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got.time, spoc_read.time, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(from_object.flux, lc.flux.value)
    np.testing.assert_array_equal(from_object.err, lc.flux_err.value)
    np.testing.assert_array_equal(from_file.flux, lc.flux.value.astype(np.float32))  # to_fits writes float32
    assert from_file.column == "FLUX" and "'btjd'" in from_file.time_scale
    assert "the mask lightkurve applied when reading" in from_object.describe()


def test_object_mask_and_columns(spoc):
    raw = lk.read(spoc, quality_bitmask="none")
    lc = read_lightcurve(raw)  # read with 'none': that is kept
    assert lc.n_quality == 0 and lc.n_points == len(raw.remove_nans())
    hard = read_lightcurve(raw, quality_bitmask="default", column="sap_flux")  # asked for: applied
    ref = lk.read(spoc, flux_column="sap_flux").remove_nans()
    assert hard.column == "sap_flux" and hard.n_points == len(ref)
    np.testing.assert_array_equal(hard.flux, ref.flux.value)
    with pytest.raises(DopplermapInputError, match=r"TessLightCurve\(TIC 25155310, sector 1\): lightcurve_column "
                                                   r"'kspsap_flux' is not a column"):
        read_lightcurve(raw, column="kspsap_flux")


def test_collection_is_joined_each_part_divided_by_its_mean(spoc):
    lc = lk.read(spoc).remove_nans()
    half = len(lc) // 2
    parts = lk.LightCurveCollection([lc[:half], lc[half:]])
    got = read_lightcurve(parts)
    assert got.n_points == len(lc) and "2 light curves joined" in got.describe()
    np.testing.assert_allclose(got.time, lc.time.tdb.jd, rtol=0, atol=1e-6)
    f = read_lightcurve(lc).flux  # lightkurve's float32 fluxes as float64 (equal: test above)
    want = np.concatenate([f[:half] / f[:half].mean(), f[half:] / f[half:].mean()])
    np.testing.assert_allclose(got.flux, want, rtol=1e-12)
    with pytest.warns(DopplermapWarning, match=r"overlap in time"):
        read_lightcurve(lk.LightCurveCollection([lc[:half + 10], lc[half:]]))


def test_time_in_jd_needs_its_reference_point(spoc):
    lc = lk.read(spoc).remove_nans()[:200]
    lc.time.format = "jd"
    with pytest.raises(DopplermapInputError, match=r"time in format 'jd', scale 'tdb': the Time knows its scale but "
                                                   r"not where the times are referred to"):
        read_lightcurve(lc)
    np.testing.assert_allclose(read_lightcurve(lc, time_scale="BJD").time, lc.time.jd, rtol=0, atol=1e-9)


def test_target_pixel_objects_and_folded_curves_are_refused(spoc, tmp_path):
    from astropy.io import fits

    n = 30  # a TESS target-pixel file (Science Data Products Description layout), read by lightkurve
    cube = np.ones((n, 11, 11), np.float32)
    cols = [fits.Column("TIME", "D", unit="BJD - 2457000, days", array=1325.3 + np.arange(n) / 720),
            fits.Column("CADENCENO", "J", array=np.arange(n, dtype=np.int32)),
            fits.Column("FLUX", "121E", dim="(11,11)", unit="e-/s", array=cube),
            fits.Column("FLUX_ERR", "121E", dim="(11,11)", unit="e-/s", array=cube),
            fits.Column("FLUX_BKG", "121E", dim="(11,11)", unit="e-/s", array=0 * cube),
            fits.Column("QUALITY", "J", array=np.zeros(n, np.int32))]
    tab = fits.BinTableHDU.from_columns(cols, name="PIXELS")
    tab.header.update(TIMEREF="SOLARSYSTEM", TIMESYS="TDB", BJDREFI=2457000, BJDREFF=0.0, TIMEUNIT="d",
                      **{"1CRV4P": 100, "2CRV4P": 200})
    prim = fits.PrimaryHDU()
    prim.header.update(TELESCOP="TESS", CREATOR="TargetPixelExporterPipelineModule", ORIGIN="NASA/Ames",
                       OBJECT="TIC 1", TICID=1, SECTOR=1, CAMERA=1, CCD=1, RA_OBJ=10.0, DEC_OBJ=10.0)
    fits.HDUList([prim, tab, fits.ImageHDU(np.full((11, 11), 3, np.int32), name="APERTURE")]).writeto(tmp_path / "tp.fits")
    tpf = lk.read(tmp_path / "tp.fits")
    with pytest.raises(DopplermapInputError, match=r"a target-pixel file \(TessTargetPixelFile: a 11 x 11 pixel image "
                                                   r"per cadence\), not a light curve: make one first"):
        read_lightcurve(tpf)
    with pytest.raises(DopplermapInputError, match=r"item 1: a target-pixel file"):
        read_lightcurve(lk.TargetPixelFileCollection([tpf]))
    with pytest.raises(DopplermapInputError, match=r"a folded light curve \(time is rotation phase\)"):
        read_lightcurve(lk.read(spoc).remove_nans().fold(period=3.3))


def test_problem_takes_a_lightkurve_curve_through_load(spoc):
    from dopplermap.lightcurve import LightCurveBand, precompute_lightcurve
    from dopplermap.problem import LightCurveData, Problem
    from dopplermap.profiles import LimbDarkening

    lc = lk.read(spoc).remove_nans()
    band = LightCurveBand((LimbDarkening("linear", (0.6,)),) * 3, (1.0, 0.3, 1.5))
    d = LightCurveData.load(lc, band, bin_width=0.5)
    assert d.read.n_read == len(lc) and d.times.size == d.read.n_points < 60 and d.read.binned == "0.5 d"
    with pytest.raises(DopplermapInputError, match=r"p: lightcurve_data takes dopplermap\.problem\.LightCurveData .* "
                                                   r"got TessLightCurve; .*LightCurveData\.load\(source, band\)"):
        Problem(grid=None, star=None, obs=None, components=None, lightcurve_data=lc, source="p")  # checked first
    with pytest.raises(DopplermapInputError, match=r"times is a TessLightCurve; precompute_lightcurve takes BJD_TDB "
                                                   r"days as numbers"):
        precompute_lightcurve(None, None, lc, lc.flux, lc.flux_err, band)
