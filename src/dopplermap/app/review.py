"""``dopplermap plot`` and ``dopplermap report``: the figures again, or the HTML report, of a
result folder already written. Nothing here loads JAX at import (a report needs none).
"""

from __future__ import annotations

from pathlib import Path

from ..atomic import AtomicFolder, check_out, check_out_file, read_manifest
from ..errors import DopplermapInputError
from ..io.results import check_result_folder, load_result
from ..io.uncertainty import load_uncertainty
from ..plot import DRAW_COST, result_figures, uncertainty_figures
from ..progress import Reporter
from ..report import write_report
from ..style import save_figures

__all__ = ["plot_folder", "report_folder"]


def plot_folder(result_dir: Path, out: Path | None = None, *, overwrite: bool = False, fmt: str = "png",
                dpi: int = 150, max_profiles: int = 24, quiet: bool = True) -> list[Path]:
    """Draw the figures of the result folder ``result_dir`` (those of :func:`dopplermap.plot.plot_result`
    and the uncertainty maps of its ``uncertainty_<method>.npz`` files) into it, or into ``out``
    as one atomic folder; returns the written paths. The folder is
    checked first (:func:`dopplermap.io.results.check_result_folder`: an edited folder, or one
    whose files come from different runs, is refused). Existing figures, in ``out`` or in
    ``result_dir``, are replaced only with ``overwrite``. Progress on stderr unless ``quiet``."""
    in_place = out is None or Path(out).resolve() == Path(result_dir).resolve()
    if not in_place:
        check_out(out, "figures", overwrite=overwrite)  # before any work
    with Reporter(quiet=quiet) as rep:
        with rep.step("read result"):
            res = load_result(result_dir)  # checks the folder first
            uncs = [load_uncertainty(f) for f in sorted(Path(result_dir).glob("uncertainty_*.npz"))]
        figs = {**result_figures(res, max_profiles=max_profiles), **uncertainty_figures(res, uncs)}  # drawn lazily
        if in_place:
            names = [f"{n}.{fmt}" for n in figs]
            there = [n for n in names if (Path(result_dir) / n).exists()]
            if there and not overwrite:
                raise DopplermapInputError(f"{result_dir} already holds {there[0]}" + (
                    f" (and {len(there) - 1} more of its figures)" if len(there) > 1 else "")
                    + "; pass --overwrite to redraw them, or give --out a new folder")
        with rep.step("figures"):
            if in_place:
                return save_figures(figs, result_dir, fmt=fmt, dpi=dpi, costs=DRAW_COST)
            source = read_manifest(result_dir) or {}
            with AtomicFolder(out, "figures", overwrite=overwrite, inputs=source.get("run_id"),
                              meta={"result": str(result_dir)}) as folder:
                names = [p.name for p in save_figures(figs, folder.tmp, fmt=fmt, dpi=dpi, costs=DRAW_COST)]
                folder.wrote()
    return [Path(out) / n for n in names]


def report_folder(result_dir: Path, out: Path | None = None, *, overwrite: bool = False, quiet: bool = True) -> Path:
    """Write the HTML report of ``result_dir`` (:func:`dopplermap.report.write_report`) to ``out``
    (default: ``result_dir/report.html``); returns its path. The folder is checked first
    (:func:`dopplermap.io.results.check_result_folder`); an existing report is replaced only
    with ``overwrite``. Progress on stderr unless ``quiet``."""
    check_result_folder(result_dir)  # a refused folder is named before its report
    if out is None:
        check_out_file(Path(result_dir) / "report.html", overwrite=overwrite, option=None)
    else:
        check_out_file(out, overwrite=overwrite)  # before any work
    with Reporter(quiet=quiet) as rep, rep.step("report"):
        return write_report(result_dir, out)
