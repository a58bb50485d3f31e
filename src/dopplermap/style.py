"""One figure style for the package: journal sizes, fonts, PDF font type and colour maps.

Every figure of :mod:`dopplermap.plot` (and of the search plots) is made with
:func:`new_figure` and written with :func:`save_figure`; both apply :data:`RC` through
``matplotlib.rc_context``, so the user's global ``rcParams`` are never changed (the
notebook's own settings stay as they were). Figures are drawn at print size: 3.5 in
(:data:`ONE_COLUMN`) or 7.1 in (:data:`TWO_COLUMN`) wide, as AAS, A&A and MNRAS set them,
so a font of 8 pt in the file is 8 pt on the page.

Colour maps: one per quantity (:data:`CMAPS`), perceptually uniform (lightness changes
evenly along the map) and readable with the common colour-vision deficiencies
(viridis and gray vary monotonically and evenly in lightness;
RdBu is ColorBrewer's colour-blind-safe diverging scheme; the filling-factor maps are
single-hue ramps built here, uniform in CIELAB lightness, symmetric in lightness). The
same quantity has the same map in every figure: maps, orthographic views, dynamic spectra,
uncertainty maps and search plots.

* ``cool``: cool-spot filling factor, ``dm_cool``: white to dark blue at one hue, CIELAB
  lightness falling linearly (:func:`lightness_ramp`).
* ``hot``: hot-spot filling factor, ``dm_hot``: the same ramp in red. A spot is dark in its
  component's map; blue cool and red hot agree with the dynamic spectra below.
* ``total``: ``dm_total``, the same ramp in purple.
* ``brightness``: continuum brightness relative to the photosphere, ``gray`` (the star as
  a photograph would show it).
* ``difference``: residuals and differences from the unspotted star (dynamic spectra),
  ``RdBu`` centred on zero: positive (less absorption, the bump a cool spot makes) blue,
  like cool spots in the maps; negative red. Gaps without data: :data:`GAP_COLOUR` grey.
* ``uncertainty``: 1-sigma widths, ``viridis``. ``chi2``: Delta chi-square surfaces, ``viridis_r``.
"""

from __future__ import annotations

import functools
import gc
import os
import pickle
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .atomic import write_file
from .cluster import usable_cpus
from .errors import DopplermapInputError

__all__ = ["lightness_ramp", "ONE_COLUMN", "TWO_COLUMN", "MIN_FONT_PT", "RC", "CMAPS", "LABELS", "GAP_COLOUR", "MODEL_COLOUR",
           "context", "cmap", "new_figure", "save_figure", "save_figures"]

ONE_COLUMN = 3.5
"""Width (in) of a one-column journal figure."""
TWO_COLUMN = 7.1
"""Width (in) of a two-column (full-page-width) journal figure."""
MIN_FONT_PT = 8.0
"""Smallest font size (pt) in any figure, at print size."""

FONT_PT = 8.0
TITLE_PT = 9.0

RC = {
    "font.size": FONT_PT,
    "axes.titlesize": TITLE_PT,
    "axes.labelsize": FONT_PT,
    "xtick.labelsize": FONT_PT,
    "ytick.labelsize": FONT_PT,
    "legend.fontsize": FONT_PT,
    "legend.title_fontsize": FONT_PT,
    "figure.titlesize": TITLE_PT,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # shipped with matplotlib: the same glyphs on every machine
    "mathtext.fontset": "dejavusans",
    "pdf.fonttype": 42,  # TrueType (Type 42) in PDF and PS: editable text, accepted by journals
    "ps.fonttype": 42,
    "svg.fonttype": "path",
    "axes.linewidth": 0.6,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.minor.width": 0.4,
    "ytick.minor.width": 0.4,
    "xtick.major.size": 3.0,
    "ytick.major.size": 3.0,
    "xtick.direction": "out",
    "ytick.direction": "out",
    "lines.linewidth": 1.0,
    "lines.markersize": 3.0,
    "legend.frameon": False,
    "figure.dpi": 100,
    "savefig.dpi": 300,
    "savefig.facecolor": "white",
    "image.interpolation": "nearest",
}
"""matplotlib settings of every dopplermap figure (applied with ``rc_context``)."""

CMAPS = {
    "cool": "dm_cool",
    "hot": "dm_hot",
    "total": "dm_total",
    "brightness": "gray",
    "difference": "RdBu",
    "uncertainty": "viridis",
    "chi2": "viridis_r",
}
"""Quantity -> matplotlib colour map name (see the module docstring)."""

LABELS = {
    "cool": "cool-spot filling factor",
    "hot": "hot-spot filling factor",
    "total": "total spot filling factor",
    "brightness": "relative brightness",
    "difference": "difference",
    "uncertainty": "1σ uncertainty",
    "chi2": "Δχ²",
}
"""Quantity -> axis / colour-bar label."""

PARAMETER_LABELS = {
    "inclination": "inclination i (deg)",
    "vsini": "v sin i (km/s)",
    "domega": "dΩ (rad/d)",
    "period": "period P (d)",
    "t_cool": "cool-spot temperature (K)",
    "t_hot": "hot-spot temperature (K)",
    "macro_gauss": "Gaussian broadening ζ (km/s)",
    "ew_scale": "line-depth scale (× equivalent width)",
    "lmbd": "regularisation weight λ",
}
"""Search parameter -> axis label with its unit (the grid search's parameters,
``dopplermap.search.GRID_PARAMETERS``, and lambda)."""

GAP_COLOUR = (0.62, 0.62, 0.62, 1.0)
"""Colour of image pixels without data (dynamic-spectrum gaps, unconstrained cells)."""
MODEL_COLOUR = "#c0392b"
"""Colour of model curves (profiles, light curve); data are black."""


# hue (CIELAB hue angle, deg) and darkest lightness of the package's own single-hue ramps
_RAMPS = {"dm_cool": (255.0, 22.0), "dm_hot": (35.0, 25.0), "dm_total": (305.0, 22.0)}


def _lab_to_srgb(L, a, b):
    """CIELAB (D65) -> sRGB in [0, 1] (unclipped) and whether each colour is in gamut."""
    import numpy as np

    fy = (L + 16.0) / 116.0
    fx, fz = fy + a / 500.0, fy - b / 200.0

    def finv(f):
        return np.where(f > 6.0 / 29.0, f**3, 3.0 * (6.0 / 29.0) ** 2 * (f - 4.0 / 29.0))

    xyz = np.stack([0.95047 * finv(fx), finv(fy), 1.08883 * finv(fz)], axis=-1)
    m = np.array([[3.2404542, -1.5371385, -0.4985314], [-0.9692660, 1.8760108, 0.0415560],
                  [0.0556434, -0.2040259, 1.0572252]])
    lin = xyz @ m.T
    ok = np.all((lin >= -1e-9) & (lin <= 1 + 1e-9), axis=-1)
    lin = np.clip(lin, 0.0, 1.0)
    rgb = np.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin ** (1 / 2.4) - 0.055)
    return rgb, ok


def lightness_ramp(name: str, hue: float, l_dark: float, l_light: float = 98.0, n: int = 256):
    """A sequential colour map of one CIELAB hue whose lightness L* falls linearly from
    ``l_light`` to ``l_dark``; the chroma is 85 % of the largest in gamut at each lightness
    (so the hue stays readable at both ends). Lightness carries the value, which is what
    survives any colour-vision deficiency and greyscale printing."""
    import numpy as np
    from matplotlib.colors import ListedColormap

    L = np.linspace(l_light, l_dark, n)
    h = np.radians(hue)
    lo, hi = np.zeros(n), np.full(n, 150.0)
    for _ in range(40):  # bisection on the largest in-gamut chroma per lightness
        mid = 0.5 * (lo + hi)
        _, ok = _lab_to_srgb(L, mid * np.cos(h), mid * np.sin(h))
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    c = 0.85 * lo
    rgb, _ = _lab_to_srgb(L, c * np.cos(h), c * np.sin(h))
    return ListedColormap(rgb, name=name)


_OWN: dict = {}  # the ramps, built on first use (not registered with matplotlib: no global state)


def _colormap(name: str):
    import matplotlib

    if name in _RAMPS:
        if name not in _OWN:
            _OWN[name] = lightness_ramp(name, *_RAMPS[name])
        return _OWN[name]
    return matplotlib.colormaps[name]


def context():
    """``rc_context`` with :data:`RC`: wrap figure creation and saving in it.

    ``rcParams`` is one dict per process, so to draw from several threads enter this once
    around them all (as :func:`dopplermap.plot.plot_result` does): the threads' own
    contexts then set and restore the same values.
    """
    import matplotlib

    return matplotlib.rc_context(RC)


def cmap(quantity: str):
    """The colour map of ``quantity`` (a key of :data:`CMAPS`); missing data drawn :data:`GAP_COLOUR`."""
    if quantity not in CMAPS:
        raise DopplermapInputError(f"quantity must be one of {tuple(CMAPS)}, got {quantity!r}")
    return _colormap(CMAPS[quantity]).with_extremes(bad=GAP_COLOUR)


@functools.cache
def _figure_class():
    """The package's Figure class, built on first use (matplotlib loads only when a figure is made).

    Jupyter shows a plain ``Figure`` only once ``%matplotlib inline`` (or pyplot under the
    inline backend) has registered IPython's PNG formatter for the Figure type; a figure
    made without pyplot in a fresh kernel prints as ``<Figure size ...>``. IPython's rich
    display protocol asks an object for ``_repr_png_`` when no formatter is registered for
    its type, so this subclass carries one: it shows in any kernel, with no backend switch,
    no pyplot and no formatter registered by us. Where the inline backend's formatter is
    registered, IPython uses it instead (a type's formatter comes before ``_repr_png_``):
    one image, drawn with the user's inline settings, never two.
    """
    from matplotlib.figure import Figure

    class InlineFigure(Figure):
        """A :class:`matplotlib.figure.Figure` that Jupyter displays as a PNG without pyplot."""

        def _repr_png_(self):
            import io
            import struct

            buf = io.BytesIO()
            with context():  # drawn at twice the screen resolution, shown at screen size
                self.savefig(buf, format="png", dpi=2 * self.dpi, facecolor="white")
            data = buf.getvalue()
            w, h = struct.unpack(">II", data[16:24])  # the PNG header's size
            return data, {"width": w // 2, "height": h // 2}

    InlineFigure.__module__, InlineFigure.__qualname__ = __name__, "InlineFigure"  # pickle finds it by name
    return InlineFigure


def __getattr__(name):
    if name == "InlineFigure":
        return _figure_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def new_figure(width: float, height: float, **kwargs):
    """A :class:`matplotlib.figure.Figure` of ``width`` x ``height`` inches with an Agg canvas.

    No pyplot: the figure belongs to no GUI and no global state. Jupyter displays it when
    it is the value of a cell or given to ``display``, in a fresh kernel too (its class
    has ``_repr_png_``). ``kwargs`` go to ``Figure`` (e.g. ``layout="constrained"``).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    with context():
        fig = _figure_class()(figsize=(width, height), **kwargs)
        FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path, *, dpi: float | None = None) -> Path:
    """Write ``fig`` to ``path`` (format from the suffix) through a temporary file; returns the path.

    ``dpi`` defaults to 150 for PNG (sharp on screen, small files) and to :data:`RC`'s
    ``savefig.dpi`` for the images inside vector formats.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = path.suffix.lstrip(".").lower() or "png"
    kw = {"pil_kwargs": {"compress_level": 1}} if fmt == "png" else {}

    def draw(fh):
        with context():
            fig.savefig(fh, dpi=dpi if dpi is not None else (150 if fmt == "png" else RC["savefig.dpi"]),
                        format=fmt, facecolor="white", **kw)

    return write_file(path, draw)


def _can_fork() -> bool:
    """Whether this interpreter may fork copies of itself to draw: Linux, no other Python
    thread, and no JAX (whose native threads a forked copy would not have)."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1
            and "jax" not in sys.modules)


def _shares(items, costs: dict, n: int) -> list[list[int]]:
    """Figure indices in ``n`` shares of about equal drawing cost (largest first, each to the
    lightest share), each share in figure order."""
    def cost(name):  # a data set's figure (profiles_<set>) costs what its kind does
        return next((c for k, c in costs.items() if name == k or name.startswith(k + "_")), 1.0)

    load, shares = [0.0] * n, [[] for _ in range(n)]
    for i in sorted(range(len(items)), key=lambda i: -cost(items[i][0])):
        k = min(range(n), key=load.__getitem__)
        shares[k].append(i)
        load[k] += cost(items[i][0])
    return [sorted(s) for s in shares]


def save_figures(makers: dict, out_dir, *, fmt: str = "png", dpi: float | None = None, costs: dict | None = None,
                 processes: int | None = None, workers: int | None = None) -> list[Path]:
    """Draw ``makers`` (``name -> callable returning a Figure``) into ``out_dir`` as
    ``NAME.{fmt}``; returns the paths in the order of ``makers``.

    Drawing holds the GIL, so threads barely overlap it. Where this interpreter can fork
    safely (:func:`_can_fork`: the figure child of :mod:`dopplermap.figure_process` can, a
    process with JAX loaded cannot) the figures are shared among ``processes`` forked copies
    of it (default: one per CPU, at most 4), balanced by ``costs`` (``name -> relative cost``,
    default 1); otherwise they are drawn in ``workers`` threads (default: up to 4).
    """
    out = Path(out_dir)
    items = list(makers.items())

    def one(item):
        name, make = item
        return save_figure(make(), out / f"{name}.{fmt}", dpi=dpi)

    n_cpu = usable_cpus()
    n_proc = processes if processes is not None else min(4, n_cpu, len(items))
    # matplotlib makes many short-lived objects: the cyclic collector's passes cost ~10 % here
    # and find nothing to free until the figures are dropped, so it pauses while they are drawn
    collecting = gc.isenabled()
    gc.disable()
    try:
        with context():  # entered once here: the threads' own rc_contexts then change nothing
            if n_proc > 1 and len(items) > 1 and _can_fork():
                return _draw_forked(one, items, _shares(items, costs or {}, n_proc))
            n = workers if workers is not None else max(1, min(4, n_cpu, len(items)))
            if n <= 1:
                return [one(it) for it in items]
            with ThreadPoolExecutor(max_workers=n, thread_name_prefix="dopplermap-plot") as pool:
                return list(pool.map(one, items))
    finally:
        if collecting:
            gc.enable()


def _draw_forked(one, items, shares) -> list[Path]:
    """Share 0 here, the others in forked copies that send back their paths through pipes."""
    children = []
    for share in shares[1:]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the copy: draw, report, exit without running the parent's exit handlers
            os.close(r)
            code = 0
            try:
                data = pickle.dumps([(i, str(one(items[i]))) for i in share])
            except BaseException:  # noqa: BLE001 - reported to the parent as a failed share
                traceback.print_exc()
                data, code = b"", 1
            with os.fdopen(w, "wb") as fh:
                fh.write(data)
            sys.stderr.flush()
            os._exit(code)
        os.close(w)
        children.append((pid, r))
    failed, paths = [], {}
    try:
        paths.update((i, one(items[i])) for i in shares[0])
    finally:  # the copies are always waited for, also when this share fails
        for pid, r in children:
            with os.fdopen(r, "rb") as fh:
                data = fh.read()
            _, status = os.waitpid(pid, 0)
            if status != 0 or not data:
                failed.append(pid)
                continue
            paths.update((i, Path(p)) for i, p in pickle.loads(data))
    if failed:
        raise RuntimeError(f"drawing figures: {len(failed)} forked process(es) failed (their tracebacks are on stderr)")
    return [paths[i] for i in range(len(items))]
