"""The pipelines' output options: one object, the loose keywords still accepted."""

import inspect

import pytest

from dopplermap.app.output import Output, output_options
from dopplermap.errors import DopplermapInputError


def test_loose_keywords_give_the_same_options_as_the_object():
    figs = object()
    loose = dict(plots=False, quiet=False, report=False, overwrite=False, figure_process=figs)
    assert output_options("run_target", None, loose) == Output(**loose)
    assert output_options("run_target", None, {}) == Output()
    given = Output(plots=False)
    assert output_options("run_target", given, {}) is given


@pytest.mark.parametrize("output, loose, message", [
    (None, {"plot": False}, "unknown keyword.*plot.*options are plots"),
    (Output(), {"plots": False}, "not both"),
    ({"plots": False}, {}, "output takes dopplermap.app.output.Output, got dict"),
])
def test_bad_output_options_are_one_line_errors(output, loose, message):
    with pytest.raises(DopplermapInputError, match=message) as exc:
        output_options("run_target", output, loose)
    assert "\n" not in str(exc.value) and "run_target" in str(exc.value)


def test_pipelines_take_at_most_eight_parameters():
    from dopplermap.app.demo import run_demo
    from dopplermap.app.seed import run_invert_seed
    from dopplermap.app.target import run_target

    for fn in (run_target, run_demo, run_invert_seed):
        params = inspect.signature(fn).parameters.values()
        named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        assert len(named) <= 8, fn.__name__
        assert "output" in inspect.signature(fn).parameters
