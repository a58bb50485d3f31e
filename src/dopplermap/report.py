"""One self-contained HTML report of a result folder (``report.html``), readable offline.

Everything is inlined: the figures as base64 PNG, the star and fit parameters, the
warnings of ``summary.json``, the uncertainties, the configuration, and an interactive
3-D star (plain JavaScript on a 2-D canvas, no library, no network) that the reader rotates
by dragging: the brightness or a filling factor is painted on the sphere from an
equirectangular texture made here with the colour maps of :mod:`dopplermap.style`.

The globe reads its view from the URL hash (``report.html#phase=0.25&inc=60&q=cool``)
and exposes ``window.dopplermapGlobe`` (``setView({phase, inclination, quantity, window})``,
``render()``), so a test or a reader can set the rotation exactly. A result with time
windows gets a time slider over the windows' maps (``#w=2``: the third window), each
shown with its time span and its own observations' meridians.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import numpy as np

from . import style
from ._version import __version__
from .atomic import read_manifest, write_text
from .errors import reader
from .io.results import check_result_folder, check_result_hdus, read_json
from .plot import colour_limits, grid_raster

__all__ = ["report_html", "write_report", "FIGURE_ORDER"]

FIGURE_ORDER = ("map_mollweide", "orthographic", "polar", "map_rect", "profiles", "dynamic_spectrum", "light_curve",
                "convergence")
"""Figures first in this order, then any other PNG of the folder (uncertainty maps ...)."""

_CAPTIONS = {
    "map_mollweide": "Filling factors and brightness, Mollweide projection (ticks: central meridian at each "
                     "observation; hatched: never visible).",
    "map_rect": "The same maps in longitude and latitude.",
    "orthographic": "The star as seen at six rotation phases (receding limb on the right; a cross marks the "
                    "visible pole, the arrow the sense of rotation).",
    "polar": "Flattened polar view: the north pole at the centre, latitude rings every 30°, longitude 0 at the "
             "bottom; ticks outside mark the central meridian of each observation.",
    "profiles": "Line-profile fits and residuals (scale bar in units of the continuum).",
    "dynamic_spectrum": "Dynamic spectra by rotation cycle and phase; grey: no observation.",
    "light_curve": "Light-curve fit and residuals.",
    "convergence": "Loss, reduced chi-square and regulariser against iteration.",
}

_FIT_KEYS = (("chi2", "reduced χ² (line profiles)"), ("chi2_lc", "reduced χ² (light curve)"),
             ("lmbd", "λ (regularisation weight)"), ("windows", "time windows"),
             ("lmbd_time", "λ_time (weight of the windows' coupling)"), ("temporal", "temporal coupling"),
             ("regulariser", "regulariser"),
             ("regulariser_value", "regulariser value"), ("offset_prior", "offset prior term"), ("loss", "loss"), ("iterations", "iterations"),
             ("n_eval", "objective evaluations"), ("solver", "solver"), ("success", "met tolerance"),
             ("stop_reason", "stop reason"), ("n_cell", "cells"), ("n_epoch", "epochs"), ("n_vel", "velocities"),
             ("n_lc", "light-curve points"), ("compile_time", "compile (s)"), ("solve_time", "solve (s)"),
             ("total_time", "total (s)"))
_STAR_LABELS = {"inclination": "inclination (deg)", "vsini": "v sin i (km/s)", "period": "period (d)",
                "t0": "t0 (d)", "domega": "dΩ (rad/d)", "radius": "radius (R☉)", "name": "name"}


def _caption(name: str) -> str:
    if name in _CAPTIONS:
        return _CAPTIONS[name]
    for kind, text in _CAPTIONS.items():  # one data set's figure: profiles_<set>, light_curve_<band>
        if name.startswith(kind + "_"):
            return f"{text} Data set {name[len(kind) + 1:]}."
    return "Uncertainty map." if name.startswith("uncertainty") else ""


def _fmt(v) -> str:
    if isinstance(v, bool) or v is None:
        return "—" if v is None else ("yes" if v else "no")
    if isinstance(v, float):  # Julian dates keep their decimals
        return f"{v:.12g}" if abs(v) >= 1e5 else f"{v:.6g}"
    return str(v)


def _table(rows) -> str:
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(_fmt(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _png_data(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _texture_png(rgb: np.ndarray) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, format="PNG", compress_level=6)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _globe_data(folder: Path, summary: dict) -> dict:
    """Equirectangular textures (360 x 180 px, longitude 0..360 left to right, north up)
    of the quantities of ``map.fits``, with the colour-bar stops of each. A result with
    time windows (one MAP HDU per window) gives one texture per window and quantity, on
    one colour scale per quantity over all windows, and the windows' spans (``windows``)."""
    from astropy.io import fits

    with fits.open(folder / "map.fits") as hdul:
        check_result_hdus(hdul, folder / "map.fits")
        hdus = [h for h in hdul if h.name == "MAP"]
        m = hdus[0].data
        names = set(m.columns.names)
        lat, lon = np.radians(np.asarray(m["LAT"], float)), np.radians(np.asarray(m["LON"], float))
        latb = lonb = None
        if {"LAT_MIN", "LAT_MAX", "LON_MIN", "LON_MAX"} <= names:
            latb = np.radians(np.stack([m["LAT_MIN"], m["LAT_MAX"]], axis=1).astype(float))
            lonb = np.radians(np.stack([m["LON_MIN"], m["LON_MAX"]], axis=1).astype(float))
        fitted = str(hdus[0].header.get("FITCOMP", "cool,hot")).split(",")
        per_window = []  # each window's {quantity: values}
        for h in hdus:
            values = {"cool": np.asarray(h.data["FSSC"], float), "hot": np.asarray(h.data["FSSH"], float)}
            bright = np.asarray(h.data["BRIGHT"], float)
            if np.all(np.isfinite(bright)):
                values = {"brightness": bright, **values}
            per_window.append(values)
        windows = []
        if len(hdus) > 1:
            for k, h in enumerate(hdus):
                t0, t1 = float(h.header["TSTART"]), float(h.header["TSTOP"])
                windows.append({"start": t0, "stop": t1, "label": f"window {k + 1} of {len(hdus)}: "
                                f"{_fmt_time(t0)} – {_fmt_time(t1)} d ({t1 - t0:.3g} d)"})
    names_q = [q for q in per_window[0] if all(q in v for v in per_window)]
    if "hot" not in fitted or all(np.all(v["hot"] <= 2e-5) for v in per_window):  # hot spots not fitted
        names_q.remove("hot")
    raster = grid_raster(lat, lon, latb, lonb, "rect", 180)
    quantities = []
    for q in names_q:
        lo, hi = colour_limits(q, [v[q] for v in per_window])  # one scale over the windows
        cm = style.cmap(q)
        textures = []
        for v in per_window:
            rgba = cm((v[q] - lo) / (hi - lo) if hi > lo else np.zeros_like(v[q]), bytes=True)
            textures.append(_texture_png(np.ascontiguousarray(rgba[raster.index][..., :3])))
        stops = [f"rgb({r},{g},{b}) {100 * t:.0f}%"
                 for t, (r, g, b, _) in zip(np.linspace(0, 1, 11), cm(np.linspace(0, 1, 11), bytes=True), strict=True)]
        quantities.append({"name": q, "label": style.LABELS[q], "textures": textures, "vmin": lo, "vmax": hi,
                           "gradient": ", ".join(stops)})
    star = summary.get("star") or {}
    phases, epochs = [], []
    if (folder / "profiles.fits").is_file():
        with fits.open(folder / "profiles.fits") as hdul:
            check_result_hdus(hdul, folder / "profiles.fits")
            for hdu in hdul:
                if hdu.name == "PROFILES" and "PHASE" in hdu.columns.names:
                    ph = np.asarray(hdu.data["PHASE"], float)
                    t = np.asarray(hdu.data["TIME"], float) if "TIME" in hdu.columns.names else np.full_like(ph, np.nan)
                    keep = np.isfinite(ph)
                    phases += ph[keep].tolist()
                    epochs += [[float(a), float(b)] for a, b in zip(ph[keep], t[keep], strict=True)]
    # the never-visible band (below latitude -i) is hatched and the central meridian of each
    # observation ticked on the equator, as the maps show them (with windows: the window's own)
    return {"quantities": quantities, "inclination": float(star.get("inclination") or 60.0),
            "hidden": star.get("inclination") is not None, "phases": sorted(phases),
            "epochs": epochs if windows else [], "windows": windows}


def _fmt_time(t: float) -> str:
    return f"{t:.4f}" if abs(t) >= 1e4 else f"{t:.4g}"


@reader("result folder", arg="result_dir")
def report_html(result_dir, *, check: bool = True) -> str:
    """The report of the result folder ``result_dir`` as one HTML string (nothing written).

    The folder is checked first, as :func:`dopplermap.load_result` checks it
    (:func:`dopplermap.io.results.check_result_folder`): an edited or mixed folder is refused,
    and only files its run wrote are shown. ``check=False`` skips the manifest: for the
    folder being written by this process (the report inside an atomic result folder).
    """
    folder = Path(result_dir)
    summary = check_result_folder(folder, manifest=check)
    listed = (read_manifest(folder) or {}).get("files", {}) if check else None

    def ours(paths):  # a file put into the folder later is not the run's: not reported as its
        return sorted(p for p in paths if listed is None or p.name in listed)

    config = read_json(folder / "config.json", "configuration") if (folder / "config.json").is_file() else {}
    inputs = ours(p for p in folder.glob("config.*") if p.name != "config.json")

    pngs = {p.stem: p for p in folder.glob("*.png") if not p.name.startswith(".")}
    # a data set's figures (profiles_<set>, light_curve_<band>) follow their kind's place
    order = [m for n in FIGURE_ORDER for m in ([n] if n in pngs else []) + sorted(
        k for k in pngs if k.startswith(n + "_") and k not in FIGURE_ORDER)]
    order += sorted(n for n in pngs if n not in order)
    figures = "".join(
        f'<figure id="fig-{html.escape(n)}"><img alt="{html.escape(n)}" data-name="{html.escape(n)}" '
        f'src="{_png_data(pngs[n])}"><figcaption><b>{html.escape(n)}</b>. '
        f'{html.escape(_caption(n))}</figcaption></figure>'
        for n in order) or "<p>No figures in this folder (run with figures, or <code>dopplermap plot</code>).</p>"

    warnings = summary.get("warnings") or []
    if isinstance(warnings, str | dict):
        warnings = [warnings]
    warn_html = ("<ul class='warn'>" + "".join(
        f"<li>{html.escape(w if isinstance(w, str) else json.dumps(w, default=str))}</li>" for w in warnings)
        + "</ul>") if warnings else "<p>No warnings.</p>"

    fit_rows = []
    for k, label in _FIT_KEYS:
        if k in summary and summary[k] is not None:
            fit_rows.append((label + (", all sets" if k == "chi2" and summary.get("chi2_sets") else
                                      ", all bands" if k == "chi2_lc" and summary.get("chi2_lc_sets") else ""),
                             summary[k]))
        if k in ("chi2", "chi2_lc"):  # several line data sets / bands: one row each
            what = "line profiles" if k == "chi2" else "light curve"
            fit_rows += [(f"reduced χ² ({what} {name})", v) for name, v in (summary.get(f"{k}_sets") or {}).items()]
    dof = summary.get("chi2_dof")
    if isinstance(dof, dict) and dof.get("chi2_nu") is not None:  # the chi2 to read against 1 (see effective_dof)
        fit_rows.insert(1, ("reduced χ² per residual degree of freedom",
                            f"{dof['chi2_nu']:.4g} ({dof['p_eff']:.1f} effective parameters, "
                            f"{dof['nu']:.1f} residual degrees of freedom of {dof['n']} points)"))
    scale = summary.get("error_scale")
    if isinstance(scale, dict):  # the errors the chi2 above is measured in: scaled by these factors
        for d in scale.get("sets") or []:
            if not isinstance(d, dict) or d.get("factor") is None:
                continue
            spread = f"; per epoch {d['min']:.3g}..{d['max']:.3g}" if d.get("min") is not None else ""
            detail = f"; {d['detail']}" if d.get("detail") else ""
            where = f" ({d.get('name')})" if len(scale.get("sets")) > 1 else ""
            fit_rows.append((f"error scale{where}", f"{d['factor']:.4g} ({d.get('method')}{spread}{detail})"))
    star_rows = [(_STAR_LABELS.get(k, k), v) for k, v in (summary.get("star") or {}).items() if v is not None]
    unc_rows = [(k, v) for k, v in summary.items() if k.startswith(("sigma_", "uncertainty_"))]
    unc_files = [p.name for p in ours(folder.glob("uncertainty_*.npz"))]
    unc_html = (_table(unc_rows) if unc_rows else "<p>No uncertainties were computed for this run "
                "(<code>dopplermap invert --uncertainty laplace</code> adds them).</p>")
    if unc_files:
        unc_html += "<p>Files: " + ", ".join(f"<code>{html.escape(f)}</code>" for f in unc_files) + "</p>"
    cfg_html = f"<pre>{html.escape(json.dumps(config, indent=2, sort_keys=True, default=str))}</pre>"
    for p in inputs:
        cfg_html += f"<h3>{html.escape(p.name)} (as given)</h3><pre>{html.escape(p.read_text(errors='replace'))}</pre>"

    globe = _globe_data(folder, summary) if (folder / "map.fits").is_file() else None
    name = (summary.get("star") or {}).get("name")
    title = f"dopplermap result: {name or summary.get('target') or config.get('command') or folder.name}"

    return _TEMPLATE.format(
        title=html.escape(str(title)), version=html.escape(str(summary.get("dopplermap_version", __version__))),
        warnings=warn_html, n_warn=len(warnings), fit=_table(fit_rows) if fit_rows else "<p>—</p>",
        star=_table(star_rows) if star_rows else "<p>—</p>", unc=unc_html, figures=figures, config=cfg_html,
        globe_json=json.dumps(globe).replace("</", "<\\/"), css=_CSS, js=_JS,
        globe_note="" if globe else "<p>No map.fits in this folder: no globe.</p>")


def write_report(result_dir, path=None, *, check: bool = True) -> Path:
    """Write :func:`report_html` of ``result_dir`` to ``path`` (default ``result_dir/report.html``),
    through a temporary file; returns the path. ``check``: as in :func:`report_html`."""
    text = report_html(result_dir, check=check)
    path = Path(result_dir) / "report.html" if path is None else Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text(path, text)


_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1100px;padding:0 1.2em 3em;
color:#1b1b1b;line-height:1.45}
h1{font-size:1.5em;margin:.8em 0 .2em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em}
nav a{margin-right:1em}table{border-collapse:collapse;margin:.4em 0}th,td{padding:.15em .8em;border-bottom:1px solid #eee;
text-align:left;vertical-align:top}th{font-weight:600;color:#333}.cols{display:flex;flex-wrap:wrap;gap:2em}
figure{margin:1.2em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:.92em;color:#333}
pre{background:#f6f6f6;padding:.6em;overflow:auto;font-size:.85em;max-height:28em}
.warn li{color:#8a4b00}#globe-box{display:flex;gap:1.5em;align-items:flex-start;flex-wrap:wrap}
#globe{cursor:grab;touch-action:none;background:#fff;border:1px solid #ddd}#globe:active{cursor:grabbing}
.bar{height:12px;width:260px;border:1px solid #777}.barlabels{display:flex;justify-content:space-between;width:262px;
font-size:.85em}button.q{margin:0 .3em .3em 0}button.q.on{font-weight:700;border:2px solid #333}
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{css}</style></head>
<body>
<h1>{title}</h1>
<p>Written by dopplermap {version}. Self-contained: this file needs no network.</p>
<nav><a href="#star3d">3-D star</a><a href="#parameters">parameters</a><a href="#warnings">warnings ({n_warn})</a>
<a href="#uncertainties">uncertainties</a><a href="#figures">figures</a><a href="#configuration">configuration</a></nav>
<h2 id="star3d">The star in 3-D</h2>
{globe_note}
<div id="globe-box"><canvas id="globe" width="420" height="420" aria-label="rotatable map of the star"></canvas>
<div style="max-width:420px"><div id="qbuttons"></div><div id="bar" class="bar"></div><div class="barlabels"><span id="vmin"></span>
<span id="qlabel"></span><span id="vmax"></span></div>
<div id="timebox" hidden><label for="window">time window</label>
<input type="range" id="window" min="0" max="0" step="1" value="0" aria-label="time window">
<div id="wlabel"></div></div>
<p>Drag to rotate (left-right: rotation phase; up-down: inclination); arrow keys work too.
<span id="timehelp" hidden>The slider steps through the time windows' maps (one colour scale for all);
the ticks are then the observations of the window shown.</span><br>
<span id="view"></span></p><label><input type="checkbox" id="shade" checked> shade the limb for depth</label>
<p style="font-size:.9em">The view follows the observer's convention: phase 0 shows longitude 0 at the centre,
north up, the receding limb on the right. Latitude and longitude lines every 30°; hatched: the band
never visible from Earth (below latitude −i); black ticks on the equator: the central meridian of each
observation.</p></div></div>
<h2 id="parameters">Parameters</h2>
<div class="cols"><div><h3>Fit</h3>{fit}</div><div><h3>Star</h3>{star}</div></div>
<h2 id="warnings">Warnings</h2>{warnings}
<h2 id="uncertainties">Uncertainties</h2>{unc}
<h2 id="figures">Figures</h2>{figures}
<h2 id="configuration">Configuration</h2>{config}
<script id="globe-data" type="application/json">{globe_json}</script>
<script>{js}</script>
</body></html>
"""

_JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("globe-data").textContent);
  var canvas = document.getElementById("globe");
  var api = {ready: false, phase: 0, inclination: 60, quantity: null, rendered: 0};
  window.dopplermapGlobe = api;
  if (!data || !canvas) { return; }
  var ctx = canvas.getContext("2d");
  var W = canvas.width, H = canvas.height, R = Math.min(W, H) / 2 - 6;
  var textures = {}, pending = 0;
  data.quantities.forEach(function (q) { pending += q.textures.length; });
  var hidden = !!data.hidden, hiddenLat = -data.inclination * Math.PI / 180;
  var windows = data.windows || [];
  api.window = 0; api.nWindow = Math.max(1, windows.length);
  // central meridian of each observation: longitude -2 pi phase (docs/conventions.md)
  function meridians(phases) {
    return phases.map(function (p) {
      var l = -2 * Math.PI * p; return l - 2 * Math.PI * Math.floor(l / (2 * Math.PI));
    });
  }
  function windowPhases(k) {  // the observations of time window k (the last one holds its end)
    if (!windows.length || !(data.epochs || []).length) { return data.phases || []; }
    var w = windows[k], last = k === windows.length - 1;
    return data.epochs.filter(function (e) {
      return e[1] >= w.start && (e[1] < w.stop || (last && e[1] <= w.stop));
    }).map(function (e) { return e[0]; });
  }
  var cms = meridians(windowPhases(0));
  api.observedPhases = cms.length;
  api.inclination = data.inclination;
  api.quantity = data.quantities.length ? data.quantities[0].name : null;

  function parseHash() {
    var h = window.location.hash.replace(/^#/, "");
    h.split("&").forEach(function (kv) {
      var p = kv.split("="), k = p[0], v = decodeURIComponent(p[1] || "");
      if (k === "phase" && isFinite(parseFloat(v))) { api.phase = parseFloat(v); }
      if ((k === "inc" || k === "inclination") && isFinite(parseFloat(v))) { api.inclination = parseFloat(v); }
      if (k === "q" && textures.hasOwnProperty(v)) { api.quantity = v; }
      if (k === "q" && !textures.hasOwnProperty(v)) { api.wantQuantity = v; }
      if (k === "w" && isFinite(parseInt(v, 10))) { setWindow(parseInt(v, 10)); }
    });
  }

  function setWindow(k) {
    api.window = Math.max(0, Math.min(api.nWindow - 1, Math.round(k)));
    cms = meridians(windowPhases(api.window));
    api.observedPhases = cms.length;
  }

  function render() {
    var tex = textures[api.quantity] && textures[api.quantity][api.window];
    if (!tex) { return; }
    var img = ctx.createImageData(W, H), out = img.data;
    var inc = Math.max(-90, Math.min(90, api.inclination)) * Math.PI / 180;
    var ci = Math.cos(inc), si = Math.sin(inc), rot = 2 * Math.PI * api.phase;
    var tw = tex.width, th = tex.height, tp = tex.pixels, shade = document.getElementById("shade").checked;
    var step = Math.PI / 6, line = 0.006;
    for (var j = 0; j < H; j++) {
      var Y = (H / 2 - j - 0.5) / R;
      for (var i = 0; i < W; i++) {
        var X = (i + 0.5 - W / 2) / R, r2 = X * X + Y * Y, o = 4 * (j * W + i);
        if (r2 >= 1) { out[o] = 255; out[o + 1] = 255; out[o + 2] = 255; out[o + 3] = 0; continue; }
        var Z = Math.sqrt(1 - r2);
        // sky -> star frame (as dopplermap.plot._ortho_image): right = +y, up = (-cos i, 0, sin i)
        var px = -Y * ci + Z * si, py = X, pz = Y * si + Z * ci;
        var lat = Math.asin(Math.max(-1, Math.min(1, pz)));
        var lon = Math.atan2(py, px) - rot;
        lon = lon - 2 * Math.PI * Math.floor(lon / (2 * Math.PI));
        var u = Math.min(tw - 1, Math.floor(lon / (2 * Math.PI) * tw));
        var v = Math.min(th - 1, Math.floor((Math.PI / 2 - lat) / Math.PI * th));
        var t = 4 * (v * tw + u), f = shade ? 0.55 + 0.45 * Z : 1.0;
        var grid = Math.abs(lat / step - Math.round(lat / step)) * step < line ||
                   (Math.abs(lon / step - Math.round(lon / step)) * step * Math.cos(lat) < line && Math.abs(lat) < 1.4);
        if (grid) { f *= 0.8; }
        if (hidden && lat < hiddenLat && ((i + j) % 9) < 3) { f *= 0.45; }  // hatched: never visible
        var tick = false;
        if (Math.abs(lat) < 0.09) {
          for (var k = 0; k < cms.length; k++) {
            var dl = Math.abs(lon - cms[k]); dl = Math.min(dl, 2 * Math.PI - dl);
            if (dl < 0.014) { tick = true; break; }
          }
        }
        if (tick) { f = 0; }
        out[o] = tp[t] * f; out[o + 1] = tp[t + 1] * f; out[o + 2] = tp[t + 2] * f; out[o + 3] = 255;
      }
    }
    ctx.clearRect(0, 0, W, H);
    ctx.putImageData(img, 0, 0);
    ctx.beginPath(); ctx.arc(W / 2, H / 2, R, 0, 2 * Math.PI); ctx.strokeStyle = "#333"; ctx.lineWidth = 1; ctx.stroke();
    document.getElementById("view").textContent = "phase " + (api.phase - Math.floor(api.phase)).toFixed(3) +
      ", inclination " + api.inclination.toFixed(1) + "°";
    api.rendered += 1;
  }

  function showBar() {
    var q = data.quantities.filter(function (x) { return x.name === api.quantity; })[0];
    if (!q) { return; }
    document.getElementById("bar").style.background = "linear-gradient(to right, " + q.gradient + ")";
    document.getElementById("vmin").textContent = q.vmin.toPrecision(3);
    document.getElementById("vmax").textContent = q.vmax.toPrecision(3);
    document.getElementById("qlabel").textContent = q.label;
    Array.prototype.forEach.call(document.querySelectorAll("button.q"), function (b) {
      b.className = "q" + (b.getAttribute("data-q") === api.quantity ? " on" : "");
    });
    if (windows.length) {
      document.getElementById("window").value = String(api.window);
      document.getElementById("wlabel").textContent = windows[api.window].label;
      api.windowLabel = windows[api.window].label;
    }
  }

  api.setView = function (view) {
    view = view || {};
    if (isFinite(view.phase)) { api.phase = view.phase; }
    if (isFinite(view.inclination)) { api.inclination = Math.max(-90, Math.min(90, view.inclination)); }
    if (view.quantity && textures.hasOwnProperty(view.quantity)) { api.quantity = view.quantity; }
    if (isFinite(view.window)) { setWindow(view.window); }
    showBar(); render();
    return {phase: api.phase, inclination: api.inclination, quantity: api.quantity, window: api.window};
  };
  api.render = render;

  data.quantities.forEach(function (q) {
    var b = document.createElement("button");
    b.className = "q"; b.setAttribute("data-q", q.name); b.textContent = q.name;
    b.addEventListener("click", function () { api.setView({quantity: q.name}); });
    document.getElementById("qbuttons").appendChild(b);
    textures[q.name] = new Array(q.textures.length);
    q.textures.forEach(function (src, k) {
      var im = new Image();
      im.onload = function () {
        var c = document.createElement("canvas");
        c.width = im.width; c.height = im.height;
        var cx = c.getContext("2d");
        cx.drawImage(im, 0, 0);
        textures[q.name][k] = {width: im.width, height: im.height,
                               pixels: cx.getImageData(0, 0, im.width, im.height).data};
        pending -= 1;
        if (pending === 0) {
          parseHash();
          if (api.wantQuantity && textures.hasOwnProperty(api.wantQuantity)) { api.quantity = api.wantQuantity; }
          api.ready = true; showBar(); render();
        }
      };
      im.src = src;
    });
  });
  if (windows.length) {  // the time slider: one map per window
    var slider = document.getElementById("window");
    slider.max = String(windows.length - 1);
    document.getElementById("timebox").hidden = false;
    document.getElementById("timehelp").hidden = false;
    slider.addEventListener("input", function () { api.setView({window: parseInt(slider.value, 10)}); });
  }

  var drag = null;
  canvas.addEventListener("pointerdown", function (e) {
    drag = {x: e.clientX, y: e.clientY, phase: api.phase, inc: api.inclination};
    canvas.setPointerCapture(e.pointerId);
  });
  canvas.addEventListener("pointermove", function (e) {
    if (!drag) { return; }
    // the surface follows the pointer: right = later phase, down = the pole tilts towards us
    api.setView({phase: drag.phase + (e.clientX - drag.x) / (2 * Math.PI * R),
                 inclination: drag.inc - (e.clientY - drag.y) * 90 / (Math.PI * R)});
  });
  canvas.addEventListener("pointerup", function () { drag = null; });
  canvas.tabIndex = 0;
  canvas.addEventListener("keydown", function (e) {
    var d = {ArrowLeft: [-0.02, 0], ArrowRight: [0.02, 0], ArrowUp: [0, 3], ArrowDown: [0, -3]}[e.key];
    if (d) { e.preventDefault(); api.setView({phase: api.phase + d[0], inclination: api.inclination + d[1]}); }
  });
  document.getElementById("shade").addEventListener("change", render);
  window.addEventListener("hashchange", function () { parseHash(); showBar(); render(); });
})();
"""
