"""The HTML report: self-contained, complete, and working in a real headless browser."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import dopplermap as dm
from dopplermap.report import report_html, write_report

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from test_results import small_result

    out = tmp_path_factory.mktemp("report") / "run"
    dm.save_result(small_result(light_curve=True), out, plot_kwargs={"dpi": 40},
                   warnings=["light curve: 3 points with zero error were dropped (check the error column)"])
    write_report(out)
    return out


def test_report_is_self_contained_and_complete(folder):
    text = (folder / "report.html").read_text()
    # nothing fetched from anywhere: no external src/href, no linked scripts or style sheets
    assert not re.findall(r'(?:src|href)\s*=\s*"(?!data:|#)', text)
    assert "<link" not in text and "<script src" not in text and "@import" not in text
    figures = set(re.findall(r'<img alt="[^"]*" data-name="([^"]+)" src="data:image/png;base64,', text))
    assert figures == {p.stem for p in folder.glob("*.png")} and len(figures) >= 7
    for b64 in re.findall(r'src="data:image/png;base64,([^"]+)"', text):
        assert base64.b64decode(b64)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "3 points with zero error" in text  # the warnings of summary.json
    assert "reduced χ² (light curve)" in text and "inclination (deg)" in text  # fit and star parameters
    assert "&quot;lmbd&quot;: 0.75" in text  # the configuration
    assert "No uncertainties were computed" in text
    data = json.loads(re.search(r'<script id="globe-data" type="application/json">(.*?)</script>', text, re.S)[1])
    assert [q["name"] for q in data["quantities"]] == ["brightness", "cool", "hot"]
    # the globe hatches the never-visible band and ticks the observed phases, as the maps do
    assert data["hidden"] is True and data["inclination"] == 60.0
    np.testing.assert_allclose(sorted(data["phases"]), np.sort(np.mod(np.asarray(
        dm.load_result(folder).obs.times) / 2.0, 1.0)))
    assert "never visible" in text and "central meridian of each" in text


def test_report_command(folder, tmp_path):
    from dopplermap.cli import main

    assert main(["report", str(folder), "--out", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text() == report_html(folder)
    assert main(["report", str(tmp_path / "missing")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2


class _DevTools:
    """A minimal Chrome DevTools Protocol client over websocket-client."""

    def __init__(self, ws_url):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.n = 0
        self.events = []

    def call(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def js(self, expression):
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, path: Path) -> np.ndarray:
        from PIL import Image

        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB")).astype(int)


def _skip_or_fail(reason: str):
    # CI sets DOPPLERMAP_REQUIRE_BROWSER=1: there a missing browser is a failure, not a skip
    if os.environ.get("DOPPLERMAP_REQUIRE_BROWSER", "") not in ("", "0"):
        pytest.fail(f"{reason} (DOPPLERMAP_REQUIRE_BROWSER is set)")
    pytest.skip(reason)


@pytest.fixture
def browser(tmp_path):
    # CI sets DOPPLERMAP_REQUIRE_BROWSER=1: there a missing browser fails instead of skipping
    if CHROMIUM is None:
        _skip_or_fail("no Chromium on this machine (Debian: apt-get install chromium)")
    try:
        import websocket  # noqa: F401
    except ImportError:
        _skip_or_fail("websocket-client is needed to drive the browser")
    import urllib.request

    profile = tmp_path / "profile"
    proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             "--disable-extensions", "--remote-debugging-port=0", "--remote-allow-origins=*",
                             f"--user-data-dir={profile}", "--window-size=1100,900", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"
        for _ in range(300):
            if port_file.is_file() and port_file.read_text().strip():
                break
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        pages = []
        for _ in range(100):
            pages = [t for t in json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list").read())
                     if t["type"] == "page"]
            if pages:
                break
            time.sleep(0.1)
        dt = _DevTools(pages[0]["webSocketDebuggerUrl"])
        yield dt
        dt.ws.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _open(dt, folder, fragment: str):
    """Load ``folder``'s report.html at ``fragment`` in the browser, wait for the globe and
    check that the page logged no error."""
    for domain in ("Runtime.enable", "Log.enable", "Page.enable"):
        dt.call(domain)
    dt.call("Page.navigate", url=(folder / "report.html").as_uri() + fragment)
    for _ in range(200):
        if dt.js("!!(window.dopplermapGlobe && window.dopplermapGlobe.ready)"):
            break
        time.sleep(0.05)
    assert dt.js("window.dopplermapGlobe.ready")
    errors = [e for e in dt.events
              if e.get("method") == "Runtime.exceptionThrown"
              or (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
              or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
    assert not errors, errors
    return dt


def test_report_in_headless_chromium(folder, browser, tmp_path):
    """The page loads without console errors, every figure is there and decoded, and the
    globe is drawn and turns when the rotation is set (URL hash, then the JS call)."""
    dt = _open(browser, folder, "#phase=0&q=brightness")
    imgs = dt.js("Array.from(document.images).map(i => [i.dataset.name, i.complete && i.naturalWidth > 0])")
    assert {n for n, _ in imgs} == {p.stem for p in folder.glob("*.png")}
    assert all(ok for _, ok in imgs), imgs
    dt.js("document.getElementById('globe').scrollIntoView()")

    def globe_pixels():
        return dt.js("""(() => { const c = document.getElementById('globe');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0, s = 0;
            for (let i = 0; i < d.length; i += 4) { if (d[i + 3] > 0) { n++; s += d[i] * 3 + d[i + 1] * 7 + d[i + 2]; } }
            return [n, s]; })()""")

    n0, s0 = globe_pixels()
    assert n0 > 0.7 * np.pi * 204**2  # the disc is painted
    shot0 = dt.screenshot(tmp_path / "globe_phase0.png")
    view = dt.js("window.dopplermapGlobe.setView({phase: 0.25})")
    assert view["phase"] == 0.25
    n1, s1 = globe_pixels()
    shot1 = dt.screenshot(tmp_path / "globe_phase025.png")
    assert n1 == n0 and s1 != s0
    for shot in (shot0, shot1):  # not blank: the globe region has shades of grey and colour
        assert shot.std() > 10 and np.unique(shot.reshape(-1, 3)[::37], axis=0).shape[0] > 50
    diff = np.abs(shot1 - shot0).sum(axis=2) > 30
    assert diff.mean() > 0.01, "the screenshot did not change when the star was rotated"
    assert dt.js("window.dopplermapGlobe.observedPhases") == 20
    # equator-on (inclination 90): the band below latitude -60 (the star's -i), at the bottom
    # of the disc, is hatched (dark stripes over the photosphere's grey); the same strip at the
    # top (latitudes above 60, no spot in front at phase 0) is not
    def dark_fraction(y0):
        return dt.js(f"""(() => {{ const c = document.getElementById('globe'); const W = c.width;
            const d = c.getContext('2d').getImageData(W / 2 - 30, {y0}, 60, 14).data; let n = 0, k = 0;
            for (let i = 0; i < d.length; i += 4) {{ if (d[i + 3] > 0) {{ n++; if (d[i] < 70) k++; }} }}
            return k / n; }})()""")

    dt.js("window.dopplermapGlobe.setView({phase: 0, inclination: 90, quantity: 'brightness'})")
    south, north = dark_fraction(394), dark_fraction(12)
    dt.screenshot(tmp_path / "globe_equator_on.png")
    assert 0.15 < south < 0.6 and north < 0.1, (south, north)
    dt.js("window.dopplermapGlobe.setView({phase: 0.25, inclination: 60})")
    assert dt.js("window.dopplermapGlobe.setView({quantity: 'cool'}).quantity") == "cool"
    assert globe_pixels()[1] != s1
    keep = Path(__import__("os").environ.get("DOPPLERMAP_REPORT_SHOTS", ""))
    if keep.name:
        keep.mkdir(parents=True, exist_ok=True)
        for p in tmp_path.glob("globe_*.png"):
            shutil.copy(p, keep / p.name)


def test_demo_writes_the_report_unless_asked_not_to(tmp_path):
    from dopplermap.cli import main

    for flags, expect in (([], True), (["--no-report"], False)):
        out = tmp_path / ("with" if expect else "without")
        assert main(["demo", "--n-cell", "300", "--out", str(out), "--no-plots", "--quiet", *flags]) == 0
        assert (out / "report.html").is_file() == expect
        if expect:
            text = (out / "report.html").read_text()
            assert "No figures in this folder" in text and 'id="globe-data"' in text
            # written inside the atomic result folder: in the manifest and the summary's file list
            manifest = json.loads((out / "dopplermap.json").read_text())
            assert "report.html" in manifest["files"]
            assert "report.html" in json.loads((out / "summary.json").read_text())["files"]


@pytest.fixture(scope="module")
def windowed_folder(tmp_path_factory):
    """A result of three time windows (built without a solve): window 0 the small result's
    map, window 1 a large cool spot added on the equator at longitude 0, window 2 spotless."""
    import dataclasses

    from test_results import small_result

    res = small_result(n_cell=300, n_epoch=12)
    grid = res.grid
    lat, lon = np.degrees(np.asarray(grid.lat)), np.degrees(np.asarray(grid.lon))
    fc0, fh0 = np.asarray(res.fssc), np.asarray(res.fssh)
    big = (np.abs(lat) < 35) & ((lon < 35) | (lon > 325))
    fc1 = np.where(big, 0.9, fc0)
    flat = np.full_like(fc0, 1e-5)
    t = np.asarray(res.obs.times)
    edges = np.array([t.min(), t[4] - 1e-3, t[8] - 1e-3, t.max()])
    res = dataclasses.replace(res, fssc=np.concatenate([fc0, fc1, flat]), fssh=np.concatenate([fh0, fh0, flat]),
                              window_edges=edges, lmbd_time=0.5, temporal=0.01, truth=None)
    out = tmp_path_factory.mktemp("report_windows") / "run"
    dm.save_result(res, out, plots=False)
    write_report(out)
    return out


def test_report_of_time_windows_holds_one_map_per_window(windowed_folder, folder):
    text = (windowed_folder / "report.html").read_text()
    data = json.loads(re.search(r'<script id="globe-data" type="application/json">(.*?)</script>', text, re.S)[1])
    back = dm.load_result(windowed_folder)
    assert [[w["start"], w["stop"]] for w in data["windows"]] == back.window_spans.tolist()
    assert data["windows"][1]["label"].startswith("window 2 of 3: ")
    tex = {q["name"]: q["textures"] for q in data["quantities"]}
    assert set(tex) == {"brightness", "cool", "hot"} and all(len(v) == 3 for v in tex.values())
    # a texture per window: the same where the window's map is (hot spots in windows 0 and 1)
    assert len(set(tex["cool"])) == len(set(tex["brightness"])) == 3
    assert tex["hot"][0] == tex["hot"][1] != tex["hot"][2]
    cool = next(q for q in data["quantities"] if q["name"] == "cool")
    assert cool["vmax"] >= 0.9  # one colour scale over the windows: window 1's spot included
    assert len(data["epochs"]) == 12 and 'id="timebox" hidden' in text
    assert "λ_time (weight of the windows&#x27; coupling)</th><td>0.5<" in text
    static = json.loads(re.search(r'<script id="globe-data" type="application/json">(.*?)</script>',
                                  (folder / "report.html").read_text(), re.S)[1])
    assert static["windows"] == [] and all(len(q["textures"]) == 1 for q in static["quantities"])


def test_report_time_slider_in_headless_chromium(windowed_folder, browser, tmp_path):
    """The slider is shown for a windowed result, switches the globe's map and its label
    (the window's span) and the meridian ticks (the window's epochs); #w= sets it."""
    dt = _open(browser, windowed_folder, "#phase=0&q=cool&w=2")
    assert dt.js("document.getElementById('timebox').hidden") is False
    assert dt.js("window.dopplermapGlobe.window") == 2 and dt.js("document.getElementById('window').value") == "2"
    spans = dm.load_result(windowed_folder).window_spans
    label = dt.js("document.getElementById('wlabel').textContent")
    assert label.startswith("window 3 of 3: ") and f"{spans[2][0]:.4g}" in label
    dt.js("document.getElementById('globe').scrollIntoView()")

    def globe_pixels():  # painted pixels and their summed luminance
        return dt.js("""(() => { const c = document.getElementById('globe');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0, s = 0;
            for (let i = 0; i < d.length; i += 4) { if (d[i + 3] > 0) { n++; s += d[i] * 3 + d[i + 1] * 7 + d[i + 2]; } }
            return [n, s]; })()""")

    sums = {}
    for k in (2, 1, 0):  # moved by the slider, as a reader moves it
        dt.js(f"(() => {{ const s = document.getElementById('window'); s.value = '{k}';"
              "s.dispatchEvent(new Event('input')); })()")
        assert dt.js("window.dopplermapGlobe.window") == k
        assert dt.js("document.getElementById('wlabel').textContent").startswith(f"window {k + 1} of 3: ")
        assert dt.js("window.dopplermapGlobe.observedPhases") == 4  # the window's own epochs
        sums[k] = globe_pixels()[1]
        dt.screenshot(tmp_path / f"globe_window{k}.png")
    assert len(set(sums.values())) == 3
    # window 1's large spot at longitude 0, facing us at phase 0: darker (in luminance) than window 2's bare star
    assert sums[1] < sums[2]
    assert dt.js("window.dopplermapGlobe.setView({window: 7}).window") == 2  # clamped to the last window
