"""Draw the getting-started page's figures from the demo's result: ``python docs/make_figures.py``.

Runs ``dopplermap demo`` at its full size into a temporary folder (a few minutes on a
laptop's CPU), reads the result back and draws four of its figures at screen resolution
into ``docs/img/demo_<name>.png``, the files the page shows. Rerun it when the figures or
the demo change; the images are committed, so the site builds without running a solve.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import dopplermap as dm
from dopplermap import plot, style

OUT = Path(__file__).resolve().parent / "img"
# figure -> dots per inch: screen resolution, each image under 100 kB (the one-column polar
# view a little finer, to show as large as the others)
FIGURES = {"map_mollweide": 80, "polar": 120, "orthographic": 80, "dynamic_spectrum": 80}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "demo"
        subprocess.run([sys.executable, "-m", "dopplermap", "demo", "--out", str(folder), "--quiet", "--no-plots",
                        "--no-report"], check=True)
        res = dm.load_result(folder)
    figures = plot.result_figures(res)
    OUT.mkdir(exist_ok=True)
    for name, dpi in FIGURES.items():
        path = style.save_figure(figures[name](), OUT / f"demo_{name}.png", dpi=dpi)
        print(f"{path.relative_to(OUT.parent.parent)}  {path.stat().st_size // 1024} kB")


if __name__ == "__main__":
    main()
