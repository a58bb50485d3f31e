"""Progress display and logging."""

from __future__ import annotations

import io
import logging

import numpy as np

from dopplermap.objective import Terms
from dopplermap.progress import Reporter
from dopplermap.solvers.scipy_lbfgsb import lbfgsb


def quadratic(x):
    """(value, grad, aux) of a bounded quadratic, in the solver's protocol."""
    target = np.linspace(-1, 2, x.size)
    r = x - target
    val = float(r @ r)
    return val, 2 * r, Terms(val / x.size, 0.5, 0.0)


def console():
    from rich.console import Console

    buf = io.StringIO()
    return Console(file=buf, force_terminal=False, width=120), buf


def test_steps_and_solve_are_displayed_and_logged(caplog):
    con, buf = console()
    caplog.set_level(logging.DEBUG, logger="dopplermap.progress")
    with Reporter(console=con) as rep:
        with rep.step("precompute"):
            pass
        with rep.solve("solve", maxiter=50) as cb:
            res, hist = lbfgsb(quadratic, np.zeros(10), np.full(10, -5.0), np.full(10, 1.5), callback=cb)
    out = buf.getvalue()
    assert "precompute" in out and "solve" in out
    n_it = len(hist["loss"])
    assert n_it >= 2
    assert f"iteration {n_it}/50" in out
    assert f"chi2 {hist['chi2'][-1]:.5g}" in out
    assert set(rep.timings) == {"precompute", "solve"}
    msgs = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("precompute:") for m in msgs)
    assert any(m.startswith(f"solve: {n_it} iterations") for m in msgs)
    assert sum("iteration" in m and r.levelno == logging.DEBUG for m, r in zip(msgs, caplog.records, strict=True)) == n_it


def test_quiet_shows_nothing_but_still_logs(caplog):
    con, buf = console()
    caplog.set_level(logging.INFO, logger="dopplermap.progress")
    with Reporter(quiet=True, console=con) as rep:
        with rep.step("precompute"):
            pass
        with rep.solve(maxiter=20) as cb:
            lbfgsb(quadratic, np.zeros(5), np.full(5, -5.0), np.full(5, 5.0), callback=cb)
    assert buf.getvalue() == ""
    assert any(r.getMessage().startswith("solve:") for r in caplog.records)


def test_step_records_time_even_on_error():
    con, _ = console()
    rep = Reporter(console=con)
    with rep:
        try:
            with rep.step("failing"):
                raise ValueError("bad input")
        except ValueError:
            pass
    assert "failing" in rep.timings


def test_cli_verbose_logging_and_quiet_demo_flag():
    from dopplermap.cli import group

    demo = group.commands["demo"]
    assert any(p.name == "quiet" for p in demo.params)
    assert any(p.name == "no_plots" for p in demo.params)


def test_not_a_terminal_gets_a_line_per_finished_step(capsys):
    """Into a log or a pipe: each step's line is written when the step ends (before the next
    one ends), with its time; the solve's line has its iterations; nothing is redrawn."""
    import sys

    with Reporter() as rep:
        with rep.step("precompute"):
            pass
        with rep.solve("solve", maxiter=50) as cb:
            assert sys.stderr.getvalue().startswith("✓ precompute")  # already written
            res, hist = lbfgsb(quadratic, np.zeros(10), np.full(10, -5.0), np.full(10, 1.5), callback=cb)
        try:
            with rep.step("writing"):
                raise OSError("disk full")
        except OSError:
            pass
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    assert lines[0].split()[:2] == ["✓", "precompute"] and lines[0].endswith(" s")
    assert lines[1].split()[:2] == ["✓", "solve"] and f"iteration {len(hist['loss'])}/50" in lines[1]
    assert lines[2].split()[:2] == ["✗", "writing"] and lines[2].endswith(" s  failed")
    assert not any("\r" in x or "\x1b" in x for x in lines)
