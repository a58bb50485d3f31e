"""``dopplermap plot`` and ``dopplermap report``: the figures again, or the HTML report, of a
result folder already written. Nothing here loads JAX at import (a report needs none).
"""

from __future__ import annotations

from pathlib import Path

from ..atomic import AtomicFolder, check_out, check_out_file, read_manifest
from ..io.results import load_result
from ..plot import plot_result
from ..progress import Reporter
from ..report import write_report

__all__ = ["plot_folder", "report_folder"]


def plot_folder(result_dir: Path, out: Path | None = None, *, overwrite: bool = False, fmt: str = "png",
                dpi: int = 150, max_profiles: int = 24, quiet: bool = True) -> list[Path]:
    """Draw the figures of the result folder ``result_dir`` (:func:`dopplermap.plot.plot_result`)
    into it, or into ``out`` as one atomic folder; returns the written paths. A folder whose
    files come from different runs is refused. Progress on stderr unless ``quiet``."""
    if out is not None and Path(out).resolve() != Path(result_dir).resolve():
        check_out(out, "figures", overwrite=overwrite)  # before any work
    with Reporter(quiet=quiet) as rep:
        with rep.step("read result"):
            res = load_result(result_dir)  # refuses a folder that mixes runs
        with rep.step("figures"):
            if out is None or Path(out).resolve() == Path(result_dir).resolve():
                return plot_result(res, result_dir, fmt=fmt, dpi=dpi, max_profiles=max_profiles)
            source = read_manifest(result_dir) or {}
            with AtomicFolder(out, "figures", overwrite=overwrite, inputs=source.get("run_id"),
                              meta={"result": str(result_dir)}) as folder:
                names = [p.name for p in plot_result(res, folder.tmp, fmt=fmt, dpi=dpi, max_profiles=max_profiles)]
                folder.wrote()
    return [Path(out) / n for n in names]


def report_folder(result_dir: Path, out: Path | None = None, *, overwrite: bool = False, quiet: bool = True) -> Path:
    """Write the HTML report of ``result_dir`` (:func:`dopplermap.report.write_report`) to ``out``
    (default: ``result_dir/report.html``); returns its path. Progress on stderr unless ``quiet``."""
    if out is not None:
        check_out_file(out, overwrite=overwrite)  # before any work
    with Reporter(quiet=quiet) as rep, rep.step("report"):
        return write_report(result_dir, out)
