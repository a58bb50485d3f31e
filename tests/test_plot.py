"""Figures: the Figure API, one style (fonts, PDF fonts, colour maps), labelled panels, and
the drawings put things where they are."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

import dopplermap as dm
from dopplermap import plot, style

SRC = Path(__file__).resolve().parents[1] / "src" / "dopplermap"


@pytest.fixture(scope="module")
def res():
    from test_results import small_result

    r = small_result(light_curve=True)
    hist = dict(r.history, chi2_lc=np.linspace(3.0, 1.1, len(r.history["loss"])))
    return dataclasses.replace(r, history=hist)


@pytest.fixture(scope="module")
def figures(res):
    """Every figure of a joint-fit result, the uncertainty figure and the search plots, drawn once."""
    from dopplermap import search
    from dopplermap.uncertainty import Uncertainty

    figs = {name: make() for name, make in plot.result_figures(res).items()}
    sig = np.where(np.degrees(res.grid.lat) < -60, np.inf, 0.01 + 0.02 * res.fssc)
    unc = Uncertainty(sigma_fssc=sig, sigma_fssh=sig, method="laplace", never_visible=~np.isfinite(sig), time=0.0)
    figs["uncertainty"] = plot.plot_uncertainty(res.grid, res.fssc, unc, view=plot.View(inclination=60.0))
    lm = np.geomspace(0.1, 10, 6)
    fields = {f.name for f in dataclasses.fields(search.LambdaSweep)}
    values = dict(lmbd=lm, chi2=1 + 0.1 * lm, regulariser=1 / lm, floor=0.0, loss=1 + 0.2 * lm,
                  iterations=np.full(6, 10), results=[], total_time=0.0)
    sweep = search.LambdaSweep(**{k: v for k, v in values.items() if k in fields})
    figs["lcurve"] = plot.plot_lcurve(sweep, corner=1.0, target=1.2)
    rows = _grid_rows()
    figs["grid"] = plot.plot_grid(rows, ["inclination", "vsini"],
                                  calibrated={"vsini": dict(estimate=40.2, lo68=39.1, hi68=41.0)})
    figs["grid_1d"] = plot.plot_grid([r for r in rows if r["vsini"] == 40.0], ["inclination"])
    figs["landscape"] = plot.plot_chi2_landscape(rows, ["inclination", "vsini"])
    figs["landscape_1d"] = plot.plot_chi2_landscape([r for r in rows if r["vsini"] == 40.0], ["inclination"])
    figs["polar"] = plot.plot_polar(res.grid.lat, res.grid.lon, res.brightness,
                                    view=plot.View.of(res.grid, inclination=60.0, phases=np.arange(8) / 8),
                                    look=plot.MapStyle(title="test star"))
    for f in figs.values():
        f.canvas.draw()  # tick labels and layouts exist after a draw
    return figs


def _grid_rows():
    """A 3 x 3 grid-search table with its minimum at inclination 60, vsini 40."""
    return [dict(inclination=i, vsini=v, chi2_total=(i - 60) ** 2 / 50 + (v - 40) ** 2 / 2,
                 chi2=1.0 + ((i - 60) ** 2 / 50 + (v - 40) ** 2 / 2) / 500)
            for i in (50.0, 60.0, 70.0) for v in (38.0, 40.0, 42.0)]


def _texts(fig):
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def test_every_function_returns_a_figure_and_takes_fig_or_ax(res):
    from matplotlib.figure import Figure

    from dopplermap.uncertainty import Uncertainty

    unc = Uncertainty(sigma_fssc=0.1 + res.fssc, sigma_fssh=0.1 + res.fssh, method="x",
                      never_visible=np.zeros(res.fssc.size, bool), time=0.0)
    rows = [dict(inclination=i, vsini=v, chi2_total=i + v, chi2=1 + (i + v) / 1e3) for i in (50.0, 60.0)
            for v in (38.0, 40.0)]

    g, obs = res.grid, res.obs
    ph = np.asarray(obs.times) / res.star.period
    flux = np.asarray(obs.flux)
    calls = {
        "_plot_maps": lambda fig: plot._plot_maps(g.lat, g.lon, {"cool": res.fssc}, lat_bounds=g.lat_bounds,
                                                lon_bounds=g.lon_bounds, fig=fig),
        "_plot_orthographic": lambda fig: plot._plot_orthographic(g.lat, g.lon, res.brightness, inclination=60.0,
                                                                fig=fig),
        "plot_profiles": lambda fig: plot.plot_profiles(obs.vels, ph, flux, res.model, fig=fig),
        "_plot_dynamic_spectrum": lambda fig: plot._plot_dynamic_spectrum(obs.vels, ph, flux, res.model, fig=fig),
        "plot_light_curve": lambda fig: plot.plot_light_curve(res.light_curve["times"] / 2.0,
                                                              res.light_curve["flux"], res.light_curve["model"],
                                                              fig=fig),
        "plot_convergence": lambda fig: plot.plot_convergence(res.history, fig=fig),
        "plot_uncertainty": lambda fig: plot.plot_uncertainty(g, res.fssc, unc, fig=fig),
        "plot_grid": lambda fig: plot.plot_grid(rows, ["inclination", "vsini"], fig=fig),
        "plot_chi2_landscape": lambda fig: plot.plot_chi2_landscape(rows, ["inclination", "vsini"], fig=fig),
    }
    for name, call in calls.items():
        mine = style.new_figure(5.0, 4.0)
        assert call(mine) is mine, name
        assert isinstance(call(None), Figure), name
    # a single map into the caller's axes
    fig = style.new_figure(7.0, 3.0)
    ax1, ax2 = fig.subplots(1, 2)
    assert plot.plot_map(g.lat, g.lon, res.fssh, quantity="hot", ax=ax2, view=plot.View.of(g)) is fig
    assert ax2.images and ax2.images[0].get_cmap().name.startswith(style.CMAPS["hot"])
    assert ax2.images[0].get_cmap().get_bad()[3] == 0  # outside the ellipse stays transparent, not grey
    # notebook use: the figures of a result, nothing written
    figs = plot.result_figures(res)
    assert set(figs) == {"map_mollweide", "map_rect", "orthographic", "polar", "profiles", "dynamic_spectrum",
                         "light_curve", "convergence"}


def test_fonts_at_print_size(figures):
    """Figures are drawn at journal size (<= 7.1 in wide), so every font is >= 8 pt in print."""
    for name, fig in figures.items():
        w, _ = fig.get_size_inches()
        assert w <= style.TWO_COLUMN + 1e-9, f"{name}: {w} in wide"
        small = [(t.get_text(), t.get_fontsize()) for t in _texts(fig) if t.get_fontsize() < style.MIN_FONT_PT]
        assert not small, f"{name}: fonts below 8 pt: {small[:5]}"


def test_pdf_uses_truetype_fonts(figures, tmp_path):
    for name in ("map_mollweide", "profiles"):
        p = style.save_figure(figures[name], tmp_path / f"{name}.pdf")
        raw = p.read_bytes()
        assert raw[:5] == b"%PDF-"
        assert b"/FontType 3" not in raw, name
        # Type 42: the TrueType program embedded (FontFile2), as a simple TrueType font or a
        # CID-keyed TrueType font (CIDFontType2), never Type 3 glyph procedures
        assert b"/FontFile2" in raw and (b"/TrueType" in raw or b"/CIDFontType2" in raw), name


def test_style_is_not_global(res):
    import matplotlib

    before = dict(matplotlib.rcParams)
    plot.plot_convergence(res.history).canvas.draw()
    assert dict(matplotlib.rcParams) == before


def test_every_panel_has_labelled_axes(figures):
    for name, fig in figures.items():
        for ax in fig.axes:
            if not ax.axison:  # a sheet of map panels: coordinates labelled on every panel
                panels = {im.get_gid() for im in ax.images if (im.get_gid() or "").startswith("panel:")}
                gids = {t.get_gid() for t in ax.texts}
                for p in panels:
                    rc = p.split(":")[1]
                    if name == "orthographic":
                        assert f"title:{rc}" in gids, (name, p)
                    else:
                        assert {f"lat:{rc}", f"lon:{rc}"} <= gids, (name, p)
                continue
            is_cbar = getattr(ax, "_colorbar", None) is not None
            if is_cbar:
                assert ax.get_xlabel() or ax.get_ylabel(), f"{name}: colour bar without label"
                continue
            assert ax.get_xlabel() and ax.get_ylabel(), f"{name}: axes {ax.get_title()!r} lacks a label"


def test_one_colour_map_per_quantity(figures):
    """Every image of a quantity uses that quantity's map, in every figure."""
    from matplotlib.collections import QuadMesh
    from matplotlib.contour import ContourSet
    from matplotlib.image import AxesImage

    seen = {}
    for name, fig in figures.items():
        for im in fig.findobj(AxesImage):
            q = (im.get_label() or "").removeprefix("colorbar:")
            if q in style.CMAPS:
                seen.setdefault(q, set()).add((im.get_cmap().name, name))
        for cs in fig.findobj(ContourSet):
            if cs.filled:
                seen.setdefault("chi2", set()).add((cs.get_cmap().name, name))
        for mesh in fig.findobj(QuadMesh):  # the chi2 maps of the search
            if mesh.get_label() == "chi2":
                seen.setdefault("chi2", set()).add((mesh.get_cmap().name, name))
    assert {"cool", "hot", "brightness", "difference", "uncertainty", "chi2"} <= set(seen)
    for q, uses in seen.items():
        names = {n for n, _ in uses}
        assert names == {style.CMAPS[q]}, f"{q}: {sorted(uses)}"


def test_own_colour_maps_uniform_in_lightness():
    """The filling-factor ramps: CIELAB lightness falls linearly (within 1 L*), hue fixed."""
    for q in ("cool", "hot", "total"):
        rgb = style.cmap(q)(np.linspace(0, 1, 64))[:, :3]
        lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
        y = lin @ np.array([0.2126729, 0.7151522, 0.0721750])
        L = np.where(y > (6 / 29) ** 3, 116 * np.cbrt(y) - 16, y * (29 / 3) ** 3)
        expected = np.linspace(L[0], L[-1], L.size)
        assert np.all(np.diff(L) < 0) and np.max(np.abs(L - expected)) < 1.0, q
        assert L[0] > 95 and L[-1] < 30, q
    assert style.cmap("difference")(np.ma.masked_invalid([np.nan]))[0].tolist() == list(style.GAP_COLOUR)


def test_no_pyplot_or_backend_switch_in_the_library():
    bad = []
    for p in SRC.rglob("*.py"):
        for i, line in enumerate(p.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if re.search(r"matplotlib\.use\(|import matplotlib\.pyplot|from matplotlib import pyplot|rcParams\[", code):
                bad.append(f"{p.relative_to(SRC)}:{i}: {line.strip()}")
    assert not bad, bad


def test_hot_panel_only_when_hot_spots_are_fitted(res):
    cool_only = dataclasses.replace(res, fssh=np.full_like(res.fssh, 1e-5), truth=None)
    assert plot.fitted_components(cool_only) == ("cool",)  # hot at the floor everywhere
    assert plot.fitted_components(res) == ("cool", "hot")
    if "fit_components" in {f.name for f in dataclasses.fields(res)}:  # flagged not fitted
        assert plot.fitted_components(dataclasses.replace(res, fit_components=("cool",))) == ("cool",)
    for r, expect in ((cool_only, {"cool", "brightness"}), (res, {"cool", "hot", "brightness"})):
        fig = plot.result_figures(r)["map_mollweide"]()
        drawn = {im.get_label() for im in fig.axes[0].images if (im.get_gid() or "").startswith("panel:")}
        assert drawn == expect
    fig = plot._plot_maps(res.grid.lat, res.grid.lon, {"cool": res.fssc, "hot": res.fssh}, components=("cool",))
    assert {im.get_label() for im in fig.axes[0].images if im.get_gid()} == {"cool"}
    with pytest.raises(ValueError, match="components"):
        plot._plot_maps(res.grid.lat, res.grid.lon, {"cool": res.fssc}, components=("warm",))


def test_convergence_shows_line_and_light_curve_chi2(figures):
    fig = figures["convergence"]
    chi_ax = [a for a in fig.axes if a.get_ylabel() == "reduced χ²"]
    assert len(chi_ax) == 1
    labels = {ln.get_label() for ln in chi_ax[0].get_lines()}
    assert {"line profiles", "light curve"} <= labels


def test_sparse_dynamic_spectrum_is_folded_on_one_rotation():
    """One or two profiles per rotation over many rotations (LO Peg: 16 over 12 cycles) are drawn
    folded on one rotation, as the static map that fits them is, each epoch at its phase and the
    unobserved phases in the gap colour; unfolded, a lone profile filled its cycle's whole row."""
    rng = np.random.default_rng(3)
    cycles = np.array([-14, -6, -6, -4, 3, 3, 7, 8, 12, 13, 13, 22])
    phases = cycles + rng.uniform(0.0, 0.45, cycles.size)  # half the rotation never observed
    assert plot._folds(phases) and not plot._folds(np.array([0.1, 0.3, 0.6, 1.1, 1.3, 1.62, 5.1, 5.35]))
    vels = np.linspace(-50, 50, 3)
    rows = np.arange(phases.size)[:, None] * np.ones((phases.size, 3))
    fig = plot._plot_dynamic_spectrum(vels, phases, rows + 1.0, np.zeros_like(rows))  # residual: epoch + 1
    ax = fig.axes[0]
    assert ax.get_ylabel() == "phase (folded: 12 epochs over cycles -14 to 22)"
    assert ax.get_ylim() == (1.0, 0.0)
    img = ax.images[0].get_array()
    np.testing.assert_allclose(np.unique(img.compressed()), 100.0 * np.arange(1, phases.size + 1))  # every epoch
    assert img.mask[int(0.75 * img.shape[0]):].all()  # phases 0.5-1 were never observed


def test_legend_explains_phase_ticks_and_hidden_band(figures):
    for name in ("map_mollweide", "map_rect", "uncertainty"):
        leg = figures[name].axes[0].get_legend()
        texts = {t.get_text() for t in leg.get_texts()}
        assert "never visible" in texts, name
        if name != "uncertainty":
            assert any("central meridian" in t for t in texts), name


def test_dynamic_spectrum_shows_every_epoch_with_cycles():
    """Epochs at the same phase in different rotations all appear (no folding), on rows
    labelled with their cycle; gaps are masked (gap colour), not zero."""
    phases = np.array([0.1, 0.3, 0.6, 1.1, 1.3, 1.62, 5.1, 5.35])  # cycles 0, 1 and 5; phases repeat
    y, cycles = plot._cycle_rows(phases)
    assert cycles.tolist() == [0, 1, 5]
    rows = np.arange(phases.size)[:, None] * np.ones((phases.size, 3))
    img = plot._phase_image(y, rows, 300, span=cycles.size)
    shown = np.unique(img.compressed())
    assert shown.tolist() == list(range(phases.size))
    assert img.mask.any()  # the gaps between observations
    vels = np.linspace(-50, 50, 3)
    fig = plot._plot_dynamic_spectrum(vels, phases, rows + 1.0, rows + 1.0)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert {"0.0", "1.0", "5.0"} <= set(labels)
    assert ax.images[0].get_cmap().get_bad().tolist() == list(style.GAP_COLOUR)


def test_map_shows_the_spot_where_it_is(tmp_path):
    """A single spot at (lat 30, lon 90) is drawn at that place of the rectangular map."""
    g = dm.latitude_band_grid(800)
    f = np.where(np.degrees(np.arccos(np.sin(g.lat) * np.sin(np.radians(30)) + np.cos(g.lat) * np.cos(np.radians(30))
                                      * np.cos(g.lon - np.radians(90)))) < 12, 0.9, 0.0)
    fig = plot._plot_maps(g.lat, g.lon, {"cool": f}, lat_bounds=g.lat_bounds, lon_bounds=g.lon_bounds,
                         projection="rect")
    im = [i for i in fig.axes[0].images if i.get_label() == "cool"][0]
    x0, x1, y0, y1 = im.get_extent()
    data = np.asarray(im.get_array().filled(0))
    ys, xs = np.nonzero(data > 0.5)
    lon = (xs.mean() + 0.5) / data.shape[1] * 360
    lat = 90 - (ys.mean() + 0.5) / data.shape[0] * 180
    assert abs(lon - 90) < 3 and abs(lat - 30) < 3, (lon, lat)
    # and the drawn PNG is that figure
    p = style.save_figure(fig, tmp_path / "spot.png", dpi=50)
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("two_maps", [False, True])
def test_map_legend_stays_inside_the_figure(two_maps):
    """The strip under the maps (phase ticks, never-visible band, unconstrained cells) fits the
    figure's width: on a one-column figure it takes more rows (its three entries in one row ran
    off both sides), and the figure grows to hold them."""
    g = dm.latitude_band_grid(300)
    f = np.where(g.lat > 0.5, 0.8, 0.0)
    sig = np.where(g.lat < -0.3, np.nan, 0.1)  # cells without a value: "unconstrained"
    maps = {"cool": f, "uncertainty": sig}
    fig = plot._plot_maps(g.lat, g.lon, maps, truth=maps if two_maps else None, lat_bounds=g.lat_bounds,
                          lon_bounds=g.lon_bounds, inclination=60.0, phase_lons=np.linspace(0, 6, 8),
                          missing_label="unconstrained")
    from matplotlib.legend import Legend

    fig.canvas.draw()
    (legend,) = [c for c in fig.axes[0].get_children() if isinstance(c, Legend)]
    assert [t.get_text() for t in legend.get_texts()] == ["central meridian of each observation", "never visible",
                                                          "unconstrained"]
    box, page = legend.get_window_extent(), fig.bbox
    assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0, (box, page)
    panels = min(i.get_window_extent().y0 for i in fig.axes[0].images if i.get_label() == "cool")
    assert box.y1 <= panels  # under the panels, not over them


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


def test_input_errors(res):
    g, obs = res.grid, res.obs
    with pytest.raises(ValueError, match="1 to 8"):
        plot._plot_orthographic(g.lat, g.lon, res.fssc, inclination=60, phases=np.arange(9) / 9)
    with pytest.raises(ValueError, match="values has shape"):
        plot._plot_orthographic(g.lat, g.lon, res.fssc[:-1], inclination=60)
    with pytest.raises(ValueError, match="n_epoch, n_vel"):
        plot.plot_profiles(obs.vels, np.zeros(obs.n_epoch), np.asarray(obs.flux)[:, :-1], res.model)
    with pytest.raises(ValueError, match="no per-iteration"):
        plot.plot_convergence({"loss": []})
    with pytest.raises(ValueError, match="quantity"):
        style.cmap("temperature")


def test_plot_result_and_cli(res, tmp_path, capsys):
    from PIL import Image

    from dopplermap.cli import main

    paths = plot.plot_result(res, tmp_path / "figs", dpi=40)
    names = sorted(p.name for p in paths)
    assert names == sorted(["map_mollweide.png", "map_rect.png", "orthographic.png", "polar.png", "profiles.png",
                            "dynamic_spectrum.png", "light_curve.png", "convergence.png"])
    for p in paths:
        with Image.open(p) as im:
            arr = np.asarray(im.convert("RGB"))
        assert arr.shape[1] <= style.TWO_COLUMN * 40 + 1 and np.any(arr < 200, axis=2).mean() > 0.02, p.name
    # the threads draw the same figures as one thread
    serial = plot.plot_result(res, tmp_path / "serial", dpi=40, workers=1)
    for a, b in zip(sorted(paths), sorted(serial), strict=True):
        assert np.array_equal(np.asarray(Image.open(a)), np.asarray(Image.open(b))), a.name
    dm.save_result(res, tmp_path / "run", plots=False)
    assert main(["plot", str(tmp_path / "run"), "--dpi", "40", "--out", str(tmp_path / "cli")]) == 0
    assert (tmp_path / "cli" / "map_mollweide.png").is_file() and (tmp_path / "cli" / "light_curve.png").is_file()
    # stderr is not a terminal here: one line per finished step; -q: none (the written paths stay on stdout)
    err = capsys.readouterr().err.splitlines()
    assert [line.split()[:2] for line in err] == [["✓", "read"], ["✓", "figures"]], err
    assert main(["plot", str(tmp_path / "run"), "--dpi", "40", "--out", str(tmp_path / "cli-q"), "-q"]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and "map_mollweide.png" in cap.out
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")]) == 0
    assert capsys.readouterr().err.split()[:2] == ["✓", "report"]
    assert main(["report", str(tmp_path / "run"), "--out", str(tmp_path / "r-q.html"), "-q"]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and cap.out.strip().endswith("r-q.html")
    assert main(["plot", str(tmp_path / "nothing")]) == 2
    assert not list((tmp_path / "cli").glob(".*"))  # no temporary files left


def test_plot_command_redraws_the_uncertainty_maps(res, tmp_path, capsys):
    """A result folder with an uncertainty file: ``dopplermap plot`` draws its maps again (a PDF for
    the paper), read back from the file alone, as the inversion drew them."""
    from dopplermap.cli import main
    from dopplermap.io.uncertainty import save_uncertainty
    from dopplermap.uncertainty import Uncertainty

    n = res.fssc.size
    sig = np.where(np.arange(n) % 7 == 0, np.inf, 0.05)
    unc = Uncertainty(sigma_fssc=sig, sigma_fssh=sig / 2, method="bootstrap", never_visible=np.zeros(n, bool))
    dm.save_result(res, tmp_path / "run", plots=False, extra_writers=(lambda folder: save_uncertainty(unc, folder),))
    assert main(["plot", str(tmp_path / "run"), "--dpi", "40", "--format", "pdf", "--out", str(tmp_path / "pdf"),
                 "-q"]) == 0
    drawn = {p.name for p in (tmp_path / "pdf").glob("uncertainty_*")}
    assert drawn == {f"uncertainty_bootstrap_{c}.pdf" for c in plot.fitted_components(res)}
    # in place, an existing uncertainty figure is replaced only with --overwrite
    assert main(["plot", str(tmp_path / "run"), "--dpi", "40", "-q"]) == 0
    assert (tmp_path / "run" / "uncertainty_bootstrap_cool.png").is_file()
    assert main(["plot", str(tmp_path / "run"), "--dpi", "40", "-q"]) == 2
    assert "--overwrite" in capsys.readouterr().err


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


def test_cell_lookup_healpix_nearest_matches_pixels():
    hp = pytest.importorskip("healpy")
    g = dm.healpix_grid(8)
    f = plot.cell_lookup(g.lat, g.lon)  # no bounds: nearest centre
    rng = np.random.default_rng(2)
    lat = np.arcsin(rng.uniform(-1, 1, 4000))
    lon = rng.uniform(0, 2 * np.pi, 4000)
    agree = np.mean(f(lat, lon) == hp.ang2pix(8, np.pi / 2 - lat, lon))
    assert agree > 0.85
    fig = plot._plot_maps(g.lat, g.lon, {"total": np.sin(g.lat) ** 2}, inclination=45.0)
    assert [i.get_label() for i in fig.axes[0].images if i.get_gid()] == ["total"]


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


def test_figures_display_in_jupyter_without_pyplot(res):
    """A returned figure answers IPython's PNG request itself (a fresh kernel shows it); a
    formatter registered for Figure (what %matplotlib inline does) takes precedence, so the
    figure is drawn once, by the user's formatter; the figure still pickles."""
    import pickle
    import struct

    from matplotlib.figure import Figure

    formatters = pytest.importorskip("IPython.core.formatters")
    fig = plot.plot_convergence(res.history)
    png = formatters.PNGFormatter()
    data, meta = png(fig)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    assert (meta["width"], meta["height"]) == (w // 2, h // 2)
    assert abs(meta["width"] - fig.get_size_inches()[0] * fig.dpi) <= 1
    png.for_type(Figure, lambda f: b"inline")
    assert png(fig) == b"inline"
    assert isinstance(pickle.loads(pickle.dumps(fig)), type(fig))


def _unit(label):
    return label.endswith(")") and "(" in label


def test_search_figures_label_units_colour_bars_and_mark_the_best_point(figures):
    for name in ("grid", "grid_1d", "landscape", "landscape_1d"):
        fig = figures[name]
        panels = [a for a in fig.axes if getattr(a, "_colorbar", None) is None and a.axison]
        assert panels, name
        for ax in panels:
            assert _unit(ax.get_xlabel()), (name, ax.get_xlabel())
            best = [ln for ln in ax.get_lines() if ln.get_gid() == "best"]
            assert len(best) == 1, (name, ax.get_title())
            assert [ln for ln in ax.get_lines() if ln.get_gid() == "grid_points"], name
        maps = [a for a in panels if a.collections and any(c.get_label() == "chi2" for c in a.collections)]
        if name in ("grid", "landscape"):
            assert maps, name
            for ax in maps:
                assert _unit(ax.get_ylabel()), (name, ax.get_ylabel())
                x, y = (ln for ln in ax.get_lines() if ln.get_gid() == "best").__next__().get_data()
                assert (x[0], y[0]) == (60.0, 40.0)  # the table's minimum
        bars = [a for a in fig.axes if getattr(a, "_colorbar", None) is not None]
        assert len(bars) == len(maps) and all(b.get_ylabel() for b in bars), name
    grid = figures["grid"]
    vsini = next(a for a in grid.axes if a.get_xlabel().startswith("v sin i"))
    assert {p.get_gid() for p in vsini.patches} >= {"calibrated"}
    assert "39.1" in vsini.get_title() and "41" in vsini.get_title()
    inc = next(a for a in grid.axes if a.get_xlabel().startswith("inclination") and a.get_ylabel().startswith("Δχ²"))
    x, y = next(ln for ln in inc.get_lines() if ln.get_gid() == "best").get_data()
    assert (x[0], y[0]) == (60.0, 0.0)


def test_lcurve_marks_corner_and_target_lambda_with_readable_ticks(figures):
    fig = figures["lcurve"]
    a1, a2 = fig.axes[:2]
    assert {ln.get_gid() for ln in a1.get_lines()} >= {"corner", "target"}
    assert {ln.get_gid() for ln in a2.get_lines()} >= {"corner", "target"}
    # the sweep's chi2 = 1 + 0.1 lambda: the target 1.2 is reached at lambda 2
    target = next(ln for ln in a2.get_lines() if ln.get_gid() == "target")
    assert abs(target.get_xdata()[0] - 2.0) < 0.2
    for ax in (a1, a2):
        assert _unit(ax.get_xlabel()) or "λ" in ax.get_xlabel() or "floor" in ax.get_xlabel()
        ticks = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert len(ticks) >= 3 and all("^" not in t and "mathdefault" not in t for t in ticks), ticks


def test_landscape_refuses_three_parameters():
    rows = [dict(a=1.0, b=2.0, c=3.0, chi2=1.0, chi2_total=10.0)]
    with pytest.raises(dm.DopplermapInputError, match="one or two"):
        plot.plot_chi2_landscape(rows, ["a", "b", "c"])
    with pytest.raises(dm.DopplermapInputError, match="'chi2' is not in the grid-search table"):
        plot.plot_chi2_landscape([{k: v for k, v in rows[0].items() if k != "chi2"}], ["a"])


def test_polar_view_puts_the_pole_in_the_centre_and_longitude_counter_clockwise():
    g = dm.latitude_band_grid(800)
    north = np.where(np.degrees(g.lat) > 75, 1.0, 0.0)
    spot = np.where((np.abs(np.degrees(g.lat) - 10) < 12) & (np.abs(np.degrees(g.lon) - 90) < 15), 1.0, 0.0)
    for values, where in ((north, "centre"), (spot, "right")):
        fig = plot.plot_polar(g.lat, g.lon, values, quantity="cool",
                              view=plot.View.of(g, inclination=60.0, phases=[0.0, 0.25]))
        ax = fig.axes[0]
        im = next(i for i in ax.images if i.get_label() == "cool")
        x0, x1, y0, y1 = im.get_extent()
        data = np.asarray(im.get_array().filled(0))
        ys, xs = np.nonzero(data > 0.5)
        x = x0 + (xs.mean() + 0.5) / data.shape[1] * (x1 - x0)
        y = y1 - (ys.mean() + 0.5) / data.shape[0] * (y1 - y0)
        if where == "centre":
            assert abs(x) < 3 and abs(y) < 3, (x, y)
        else:  # longitude 90 at colatitude 80: counter-clockwise from longitude 0 at the bottom
            assert abs(x - 80) < 8 and abs(y) < 8, (x, y)
        assert x1 == 150.0  # the outer ring at latitude -60 (never seen below -inclination)
        gids = {ln.get_gid() for ln in ax.get_lines()} | {p.get_gid() for p in ax.patches}
        assert {"pole", "rotation", "phases"} <= gids
        ticks = next(ln for ln in ax.get_lines() if ln.get_gid() == "phases")
        tx = ticks.get_xdata()
        # phase 0: central meridian at longitude 0 (bottom); phase 0.25: at 270 (the left side)
        assert abs(tx[0]) < 1 and tx[3] < -140, tx
        labels = {t.get_text() for t in ax.texts if t.get_gid() == "lon"}
        assert labels == {"0°", "90°", "180°", "270°"}
    assert fig.axes[1].get_ylabel() == style.LABELS["cool"]


def test_orthographic_views_mark_pole_and_rotation(figures):
    ax = figures["orthographic"].axes[0]
    n_views = len([i for i in ax.images if (i.get_gid() or "").startswith("panel:")])
    assert len([ln for ln in ax.get_lines() if ln.get_gid() == "pole"]) == n_views
    assert len([ln for ln in ax.get_lines() if ln.get_gid() == "rotation"]) == n_views


def test_a_long_title_fits_a_one_column_figure(res):
    """The longest method name over one column of maps: the title is shrunk to the figure's width
    (it ran off both edges before)."""
    from dopplermap.uncertainty import Uncertainty

    sig = 0.01 + 0.02 * res.fssc
    unc = Uncertainty(sigma_fssc=sig, sigma_fssh=sig, method="laplace-sandwich-lowrank",
                      never_visible=np.zeros(sig.size, bool), time=0.0)
    fig = plot.plot_uncertainty(res.grid, res.fssc, unc, component="cool")
    fig.canvas.draw()
    (title,) = [t for t in fig.texts if "Laplace sandwich (exact low-rank diagonal)" in t.get_text()]
    box = title.get_window_extent(fig.canvas.get_renderer())
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width
    short = plot.plot_uncertainty(res.grid, res.fssc, unc, component="cool", look=plot.MapStyle(title="short"))
    (kept,) = [t for t in short.texts if t.get_text() == "short"]
    assert kept.get_fontsize() > title.get_fontsize()  # a title that fits keeps its size
