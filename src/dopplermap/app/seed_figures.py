"""The figures of an ``invert-seed`` result, drawn from plain arrays (those of
:func:`dopplermap.app.seed.seed_figure_arrays`): the module the figure child preloads, so it
imports nothing that loads JAX.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import style

__all__ = ["plot_seed_figures"]


def _inch_axes(fig, x0, y0, w, h):
    """Axes at (x0, y0) with size w x h, in inches: a fixed layout (no layout engine to run)."""
    fw, fh = fig.get_size_inches()
    return fig.add_axes((x0 / fw, y0 / fh, w / fw, h / fh))


def _filling_figure(fssc, fssh, lat, lon, **_):
    fig = style.new_figure(style.TWO_COLUMN, 5.5)
    w = style.TWO_COLUMN
    with style.context():
        for row, (f, name, quantity) in enumerate(((fssc, "cool-spot filling factor fssc", "cool"),
                                                   (fssh, "hot-spot filling factor fssh", "hot"))):
            ax = _inch_axes(fig, 0.75, 3.15 - 2.7 * row, w - 2.1 if lat is not None else w - 1.05, 2.0)
            if lat is not None:
                # markers filled to the size the default edge stroke gave (s=6, 1 pt): 30 % faster to draw
                sc = ax.scatter(np.degrees(np.mod(lon, 2 * np.pi)), np.degrees(lat), c=f, s=12, linewidths=0,
                                cmap=style.cmap(quantity), vmin=0, vmax=max(float(f.max()), 1e-3))
                ax.set(xlim=(0, 360), ylim=(-90, 90), xlabel="longitude (deg)", ylabel="latitude (deg)", title=name)
                fig.colorbar(sc, cax=_inch_axes(fig, w - 1.2, 3.15 - 2.7 * row, 0.12, 2.0), label=style.LABELS[quantity])
            else:
                ax.plot(np.arange(f.size), f, lw=0.6, color="k")
                ax.set(xlabel="cell index (no coordinates in the input: not a map)", ylabel="filling factor",
                       title=name, xlim=(0, f.size - 1))
    return fig


def _residual_figure(flux, err, vels, model, chi2, **_):
    resid = (flux - model) / err
    fig = style.new_figure(style.TWO_COLUMN, 3.8)
    panel = (style.TWO_COLUMN - 2.6) / 2
    with style.context():
        ext = (vels[0], vels[-1], flux.shape[0] - 0.5, -0.5)
        lim = float(np.percentile(np.abs(resid), 99)) or 1.0
        for i, (img, title, kw, label) in enumerate((
                (flux, "observed profiles", dict(cmap="gray"), "normalised intensity"),
                (resid, f"(obs − model) / err, χ² = {chi2:.3f}",
                 dict(cmap=style.cmap("difference"), vmin=-lim, vmax=lim), "residual (σ)"))):
            x0 = 0.6 + i * (panel + 1.25)
            ax = _inch_axes(fig, x0, 0.55, panel, 2.9)
            im = ax.imshow(img, aspect="auto", extent=ext, **kw)
            ax.set(xlabel="velocity (km/s)", ylabel="epoch index" if i == 0 else None, title=title)
            fig.colorbar(im, cax=_inch_axes(fig, x0 + panel + 0.1, 0.55, 0.1, 2.9), label=label)
    return fig


def plot_seed_figures(out, arrays: dict) -> list[Path]:
    """Figures of a seed inversion (arrays of :func:`dopplermap.app.seed.seed_figure_arrays`) into ``out``:
    filling factors (a map with cell coordinates, else per cell index) and the normalised
    residuals. Returns the written paths."""
    return style.save_figures({"filling_factors": lambda: _filling_figure(**arrays),
                               "residuals": lambda: _residual_figure(**arrays)}, out)
