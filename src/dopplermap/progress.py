"""Live progress for long steps (precompute, solve) and logging.

    with Reporter(quiet=False) as rep:
        with rep.step("precompute"):
            pre = dm.precompute(...)
        with rep.solve(maxiter=1000) as cb:
            res = dm.invert(pre, obs, callback=cb)

The display (rich, on stderr) shows each step with a spinner and its elapsed time; the
solve shows iteration, loss and reduced chi-square, updated from the solver's per-iteration
callback (never from inside compiled code). A step that finished is ticked; one that raised
or was interrupted is marked with a red cross and "failed" / "interrupted". In a Jupyter notebook the same lines are one
output cell updated in place (IPython's display, no ipywidgets needed). When stderr is not a
terminal (a log file, a pipe, CI) nothing is redrawn: each step writes one plain line as it
ends, with its elapsed time, so a log shows how far a long run got. ``quiet=True`` shows nothing.
Every step is also logged through :mod:`logging` (logger ``dopplermap.progress``): INFO
when a step ends, DEBUG per iteration.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import time

from .errors import DopplermapInputError

__all__ = ["Reporter"]

log = logging.getLogger(__name__)


class Reporter:
    """Progress display and step logging; a context manager.

    Args:
        quiet: no live display (logging still happens).
        console: a :class:`rich.console.Console` (default: stderr).
        transient: remove the display when it stops (default: keep the final state).
    """

    def __init__(self, quiet: bool = False, console=None, transient: bool = False):
        self.quiet = quiet
        self._console = console
        self._transient = transient
        self._progress = None
        self.timings: dict[str, float] = {}  # wall seconds per step
        self.cpu_timings: dict[str, float] = {}  # process CPU seconds per step (all threads)

    def __enter__(self):
        if not self.quiet:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            console = self._console if self._console is not None else Console(stderr=True)
            if console.is_jupyter and self._console is None:
                self._progress = _NotebookProgress()  # rich's notebook display needs ipywidgets
            elif self._console is None and not console.is_terminal:
                self._progress = _LineProgress()  # a log file or a pipe: no redraws, a line per finished step
            else:
                self._progress = Progress(
                    SpinnerColumn(finished_text=""), TextColumn("{task.fields[mark]}"),
                    TextColumn("{task.description:<24}"),
                    TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                    console=console, transient=self._transient, refresh_per_second=8)
            if self._progress is not None:
                self._progress.start()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        return False

    def _add(self, description: str):
        if self._progress is None:
            return None
        return self._progress.add_task(description, total=None, info="", mark="")

    def _finish(self, task, info: str, failed: BaseException | None = None):
        """End a step: a green tick when it finished, a red cross (and why) when it failed
        or was interrupted."""
        if self._progress is not None and task is not None:
            if isinstance(failed, DopplermapInputError) and isinstance(self._progress, _LineProgress):
                self._progress.drop(task)  # in a log the error's own line says what failed: one line, not two
                return
            if failed is None:
                mark = "[green]✓"
            else:
                why = "interrupted" if isinstance(failed, KeyboardInterrupt) else "failed"
                mark, info = "[red]✗", f"{info}  [red]{why}"
            self._progress.update(task, total=1, completed=1, info=info, mark=mark)
            self._progress.stop_task(task)

    def note(self, text: str) -> None:
        """A finished line of information (an estimate, a choice made) among the steps."""
        log.info("%s", text)
        task = self._add(text)
        if self._progress is not None and task is not None:
            self._progress.update(task, total=1, completed=1, info="", mark="•")
            self._progress.stop_task(task)

    @contextlib.contextmanager
    def step(self, name: str):
        """Show ``name`` with a spinner while the block runs; records and logs its time."""
        task = self._add(name)
        t0, c0 = time.perf_counter(), time.process_time()
        failed = None
        try:
            yield
        except BaseException as exc:
            failed = exc
            raise
        finally:
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            self.timings[name] = dt
            self.cpu_timings[name] = dc
            self._finish(task, f"{dt:.2f} s", failed)
            log.info("%s: %.2f s (cpu %.2f s)%s", name, dt, dc, " - failed" if failed is not None else "")

    @contextlib.contextmanager
    def solve(self, name: str = "solve", maxiter: int | None = None):
        """Yield a ``callback(iteration, history)`` for :func:`dopplermap.invert`.

        Before the first iteration the line reads "compile + solve" (compilation happens
        then); afterwards it shows iteration, loss and chi-square.
        """
        task = self._add(f"{name} (compiling)")
        t0 = time.perf_counter()
        state = {"it": 0, "loss": float("nan"), "chi2": float("nan")}

        def info():
            cap = f"/{maxiter}" if maxiter else ""
            return f"iteration {state['it']}{cap}  loss {state['loss']:.6g}  chi2 {state['chi2']:.5g}"

        def callback(iteration, history):
            state["it"] = int(iteration)
            state["loss"] = float(history["loss"][-1]) if len(history.get("loss", ())) else float("nan")
            chi = history.get("chi2", ())
            state["chi2"] = float(chi[-1]) if len(chi) else float("nan")
            log.debug("%s iteration %d: loss %.8g chi2 %.6g", name, state["it"], state["loss"], state["chi2"])
            if self._progress is not None and task is not None:
                self._progress.update(task, description=name, info=info())

        failed = None
        try:
            yield callback
        except BaseException as exc:
            failed = exc
            raise
        finally:
            dt = time.perf_counter() - t0
            self.timings[name] = dt
            if self._progress is not None and task is not None:
                self._progress.update(task, description=name)
            self._finish(task, info(), failed)
            log.info("%s: %d iterations, loss %.6g, chi2 %.5g, %.2f s", name, state["it"], state["loss"],
                     state["chi2"], dt)


class _NotebookProgress:
    """The part of :class:`rich.progress.Progress` that :class:`Reporter` uses, drawn as one
    text output updated in place through IPython's display (at most 4 redraws a second)."""

    def __init__(self, min_interval: float = 0.25):
        self._tasks: list[dict] = []
        self._handle = None
        self._min_interval = min_interval
        self._last = -float("inf")

    def start(self):
        from IPython.display import display

        self._handle = display({"text/plain": ""}, raw=True, display_id=True)

    def stop(self):
        self._draw(force=True)

    def add_task(self, description: str, total=None, info: str = "", **_):
        self._tasks.append({"description": description, "info": info, "t0": time.perf_counter(), "dt": None})
        self._draw(force=True)
        return len(self._tasks) - 1

    def update(self, task, *, description=None, info=None, total=None, completed=None, mark=None, **_):
        t = _set_fields(self._tasks[task], description, info, mark)
        done = total is not None and completed is not None and completed >= total
        if done and t["dt"] is None:
            t["dt"] = time.perf_counter() - t["t0"]
        self._draw(force=done)

    def stop_task(self, task):
        self._draw(force=True)

    def _draw(self, force: bool = False):
        from rich.text import Text

        now = time.perf_counter()
        if self._handle is None or (not force and now - self._last < self._min_interval):
            return
        self._last = now
        lines = []
        for t in self._tasks:
            dt = t["dt"] if t["dt"] is not None else now - t["t0"]
            mark = Text.from_markup(t["mark"]).plain if t.get("mark") else "✓" if t["dt"] is not None else "…"
            name = Text.from_markup(t["description"]).plain  # descriptions may carry rich markup
            lines.append(f"{mark} {name:<24} {int(dt) // 60}:{dt % 60:04.1f}  {t['info']}")
        self._handle.update({"text/plain": "\n".join(lines)}, raw=True)


def _set_fields(t: dict, description, info, mark) -> dict:
    """A task's fields as :meth:`rich.progress.Progress.update` sets them (None: unchanged)."""
    if mark:
        t["mark"] = mark
    if description is not None:
        t["description"] = description
    if info is not None:
        t["info"] = info
    return t


class _LineProgress:
    """The part of :class:`rich.progress.Progress` that :class:`Reporter` uses, written to a
    stream that is not a terminal: one line per step when it ends (mark, name, elapsed time,
    the step's last information), flushed at once; nothing while it runs."""

    def __init__(self, stream=None):
        self._stream = stream
        self._tasks: list[dict] = []

    def start(self):
        pass

    def stop(self):
        pass

    def add_task(self, description: str, total=None, info: str = "", **_):
        self._tasks.append({"description": description, "info": info, "t0": time.perf_counter(), "done": False})
        return len(self._tasks) - 1

    def update(self, task, *, description=None, info=None, total=None, completed=None, mark=None, **_):
        t = _set_fields(self._tasks[task], description, info, mark)
        if total is not None and completed is not None and completed >= total and not t["done"]:
            t["done"] = True
            self._write(t, time.perf_counter() - t["t0"])

    def stop_task(self, task):
        pass

    def drop(self, task):
        """End ``task`` without a line."""
        self._tasks[task]["done"] = True

    def _write(self, t, dt):
        from rich.text import Text

        failed = "✗" in t.get("mark", "")
        name = Text.from_markup(t["description"]).plain
        info = Text.from_markup(t["info"]).plain
        info = re.sub(r"^[0-9.]+ s\s*", "", info)  # a step's own time: already in the line
        if "•" in t.get("mark", ""):  # a note: no time of its own
            line = f"• {name}"
        else:
            line = f"{'✗' if failed else '✓'} {name:<24} {dt:8.2f} s  {info}".rstrip()
        stream = self._stream if self._stream is not None else sys.stderr  # at write time: redirections apply
        enc = getattr(stream, "encoding", None) or "utf-8"
        try:
            line.encode(enc)
        except (UnicodeEncodeError, LookupError):
            line = line.replace("✓", "+").replace("✗", "x")
        stream.write(line + "\n")
        stream.flush()
