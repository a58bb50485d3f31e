"""Figures: each plot function writes a PNG of the expected size that is not blank."""

from __future__ import annotations

import numpy as np
import pytest

import dopplermap as dm
from dopplermap import plot

DPI = 50


def png_info(path):
    """(width, height, fraction of non-white pixels, number of distinct colours)."""
    from PIL import Image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as im:
        arr = np.asarray(im.convert("RGB"))
    h, w, _ = arr.shape
    ink = np.any(arr < 245, axis=2).mean()
    colours = np.unique(arr.reshape(-1, 3)[::7], axis=0).shape[0]
    return w, h, ink, colours


def check_png(path, size_in, *, min_ink=0.05, min_colours=20):
    w, h, ink, colours = png_info(path)
    exp = (size_in[0] * DPI, size_in[1] * DPI)
    assert abs(w - exp[0]) <= 1 and abs(h - exp[1]) <= 1, f"{path.name}: {w}x{h}, expected {exp}"
    assert ink > min_ink, f"{path.name} is nearly blank ({ink:.3f} inked)"
    assert colours >= min_colours, f"{path.name} has only {colours} colours"


@pytest.fixture(scope="module")
def res():
    from test_results import small_result

    return small_result(light_curve=True)


def mollweide_size(nrow, ncol):
    s = 4.0 / (4 * np.sqrt(2))
    return ((ncol * 4 * np.sqrt(2) + (ncol - 1) * 0.35) * s + 1.5,
            (nrow * (2 * np.sqrt(2) + 0.3) + (nrow - 1) * 0.3) * s + 0.45)


def rect_size(nrow, ncol):
    s = 4.0 / 360
    return (ncol * 360 + (ncol - 1) * 30) * s + 1.6, (nrow * 196 + (nrow - 1) * 14) * s + 0.75


@pytest.mark.parametrize("projection", ["mollweide", "rect"])
@pytest.mark.parametrize("with_truth", [True, False])
def test_maps(res, tmp_path, projection, with_truth):
    g = res.grid
    rec = {"cool": res.fssc, "hot": res.fssh, "total": res.fssc + res.fssh, "brightness": res.brightness}
    tru = {"cool": res.truth["fssc"], "hot": res.truth["fssh"]} if with_truth else None
    p = plot.plot_maps(tmp_path / "m.png", g.lat, g.lon, rec, truth=tru, lat_bounds=g.lat_bounds,
                       lon_bounds=g.lon_bounds, inclination=60.0, phase_lons=np.arange(20) * 18.0,
                       projection=projection, dpi=DPI)
    ncol = 2 if with_truth else 1
    check_png(p, (mollweide_size if projection == "mollweide" else rect_size)(4, ncol))


def test_map_shows_the_spot_where_it_is(tmp_path):
    """A single spot at (lat 30, lon 90) is drawn at that place of the rectangular map."""
    from PIL import Image

    g = dm.latitude_band_grid(800)
    f = np.where(np.degrees(np.arccos(np.sin(g.lat) * np.sin(np.radians(30)) + np.cos(g.lat) * np.cos(np.radians(30))
                                      * np.cos(g.lon - np.radians(90)))) < 12, 0.9, 0.0)
    p = plot.plot_maps(tmp_path / "spot.png", g.lat, g.lon, {"cool": f}, lat_bounds=g.lat_bounds,
                       lon_bounds=g.lon_bounds, projection="rect", dpi=100)
    arr = np.asarray(Image.open(p).convert("RGB")).astype(float)
    # panel: left margin 0.55 in, 4 in wide = 360 deg; top margin 0.3 in + 16/360*4 in tick strip, 2 in = 180 deg
    x0, y0 = 55, int(round(100 * (0.3 + 16 * 4 / 360)))
    panel = arr[y0:y0 + 200, x0:x0 + 400]
    blue = (panel[..., 2] - panel[..., 0] > 80) & (panel.sum(axis=2) < 450)  # the spot's dark blue
    ys, xs = np.nonzero(blue)
    lon = xs.mean() / 400 * 360
    lat = 90 - ys.mean() / 200 * 180
    assert abs(lon - 90) < 4 and abs(lat - 30) < 4, (lon, lat)


def test_orthographic(res, tmp_path):
    g = res.grid
    p = plot.plot_orthographic(tmp_path / "o.png", g.lat, g.lon, res.brightness, truth=res.fssc * 0 + 1,
                               inclination=60.0, phases=[0, 0.25, 0.5, 0.75], lat_bounds=g.lat_bounds,
                               lon_bounds=g.lon_bounds, dpi=DPI)
    s = 0.85
    check_png(p, ((4 * 2.0 + 3 * 0.2) * s + 1.2, (2 * 2.0 + 0.15) * s + 0.43))
    with pytest.raises(ValueError, match="1 to 8"):
        plot.plot_orthographic(tmp_path / "x.png", g.lat, g.lon, res.fssc, inclination=60, phases=np.arange(9) / 9)
    with pytest.raises(ValueError, match="values has shape"):
        plot.plot_orthographic(tmp_path / "x.png", g.lat, g.lon, res.fssc[:-1], inclination=60)


def test_orthographic_receding_limb_on_the_right():
    """A spot at longitude 0 faces us at phase 0 and moves from the approaching (left) limb
    to the receding (right) one; a spot at longitude 90 sits on the receding limb at phase 0."""
    g = dm.latitude_band_grid(2000)
    lookup = plot.cell_lookup(g.lat, g.lon, g.lat_bounds, g.lon_bounds)

    def centre(lon0, phase):
        d = np.degrees(np.arccos(np.cos(g.lat) * np.cos(g.lon - np.radians(lon0))))
        img = plot._ortho_image(lookup, (d < 12).astype(float), 90.0, phase, 101)
        ys, xs = np.nonzero(img.filled(0) > 0.5)
        return xs.mean(), ys.mean()

    x_before, y0 = centre(0.0, -1 / 12)
    x_now, _ = centre(0.0, 0.0)
    x_after, _ = centre(0.0, 1 / 12)
    assert abs(x_now - 50) < 2 and abs(y0 - 50) < 3
    assert x_before < 40 < 60 < x_after
    assert centre(90.0, 0.0)[0] > 85


def test_profiles_and_dynamic_spectrum(res, tmp_path):
    obs = res.obs
    ph = np.mod(np.asarray(obs.times) / res.star.period, 1)
    p = plot.plot_profiles(tmp_path / "p.png", obs.vels, ph, np.asarray(obs.flux), res.model, err=np.asarray(obs.err),
                           spotless=res.spotless, max_profiles=12, dpi=DPI)
    check_png(p, (8.0, 2.0 + 0.36 * 12))
    p = plot.plot_dynamic_spectrum(tmp_path / "d.png", obs.vels, ph, np.asarray(obs.flux), res.model,
                                   spotless=res.spotless, err=np.asarray(obs.err), vsini=40.0, dpi=DPI)
    check_png(p, (2.9 * 3 + 0.7, 4.8))
    with pytest.raises(ValueError, match="n_epoch, n_vel"):
        plot.plot_profiles(tmp_path / "p.png", obs.vels, ph, np.asarray(obs.flux)[:, :-1], res.model)


def test_phase_image_places_rows_by_phase():
    rows = np.arange(4)[:, None] * np.ones((4, 3))
    img = plot._phase_image([0.6, 0.1, 0.35, 0.85], rows, 100)
    assert img[10, 0] == 1 and img[35, 0] == 2 and img[60, 0] == 0 and img[85, 0] == 3


def test_light_curve_and_convergence(res, tmp_path):
    lc = res.light_curve
    p = plot.plot_light_curve(tmp_path / "l.png", lc["times"] / 2.0, lc["flux"], lc["model"], err=lc["err"], dpi=DPI)
    check_png(p, (6.4, 4.6), min_colours=8)
    p = plot.plot_convergence(tmp_path / "c.png", res.history, dpi=DPI)
    check_png(p, (6.0, 1.7 * 3 + 0.7), min_colours=8)
    with pytest.raises(ValueError, match="no per-iteration"):
        plot.plot_convergence(tmp_path / "c.png", {"loss": []})


def test_plot_result_and_cli(res, tmp_path):
    from dopplermap.cli import main

    paths = plot.plot_result(res, tmp_path / "figs", dpi=DPI)
    names = sorted(p.name for p in paths)
    assert names == sorted(["map_mollweide.png", "map_rect.png", "orthographic.png", "profiles.png",
                            "dynamic_spectrum.png", "light_curve.png", "convergence.png"])
    for p in paths:
        w, h, ink, colours = png_info(p)
        assert w > 150 and h > 150 and ink > 0.05 and colours >= 8, p.name
    dm.save_result(res, tmp_path / "run", plots=False)
    assert main(["plot", str(tmp_path / "run"), "--dpi", str(DPI), "--out", str(tmp_path / "cli")]) == 0
    assert (tmp_path / "cli" / "map_mollweide.png").is_file() and (tmp_path / "cli" / "light_curve.png").is_file()
    assert main(["plot", str(tmp_path / "nothing")]) == 2
    assert not list((tmp_path / "cli").glob(".*"))  # no temporary files left


def test_cell_lookup_bands_exact():
    g = dm.latitude_band_grid(500)
    f = plot.cell_lookup(g.lat, g.lon, g.lat_bounds, g.lon_bounds)
    np.testing.assert_array_equal(f(g.lat, g.lon), np.arange(500))
    rng = np.random.default_rng(1)
    lat = np.arcsin(rng.uniform(-1, 1, 5000))
    lon = rng.uniform(0, 2 * np.pi, 5000)
    i = f(lat, lon)
    assert np.all((lat >= g.lat_bounds[i, 0] - 1e-12) & (lat <= g.lat_bounds[i, 1] + 1e-12))
    assert np.all((lon >= g.lon_bounds[i, 0] - 1e-12) & (lon <= g.lon_bounds[i, 1] + 1e-12))


def test_cell_lookup_healpix_nearest_matches_pixels(tmp_path):
    hp = pytest.importorskip("healpy")
    g = dm.healpix_grid(8)
    f = plot.cell_lookup(g.lat, g.lon)  # no bounds: nearest centre
    rng = np.random.default_rng(2)
    lat = np.arcsin(rng.uniform(-1, 1, 4000))
    lon = rng.uniform(0, 2 * np.pi, 4000)
    agree = np.mean(f(lat, lon) == hp.ang2pix(8, np.pi / 2 - lat, lon))
    assert agree > 0.85
    # and a healpix map renders
    p = plot.plot_maps(tmp_path / "h.png",
                       g.lat, g.lon, {"total": np.sin(g.lat) ** 2}, inclination=45.0, dpi=DPI)
    check_png(p, mollweide_size(1, 1))


def test_mollweide_projection_round_trip():
    rng = np.random.default_rng(3)
    lat = rng.uniform(-1.5, 1.5, 1000)
    lam = rng.uniform(-np.pi, np.pi, 1000)
    x, y = plot._mollweide_forward(lat, lam)
    lat2, lam2, inside = plot._mollweide_inverse(x, y)
    assert inside.all()
    np.testing.assert_allclose(lat2, lat, atol=1e-9)
    np.testing.assert_allclose(lam2, lam, atol=1e-9)


def test_central_meridians_convention():
    np.testing.assert_allclose(plot.central_meridians([0, 0.25, 0.5, 1.75]), [0, 270, 180, 90])
