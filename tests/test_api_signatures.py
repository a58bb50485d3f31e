"""Every public callable of the package takes at most eight parameters: more options travel as
one frozen options object (``Output``, ``Synthesis``, ``View``, ...) or a ``Problem``."""

from support.api import public_callables, too_long

LIMIT = 8

# Over the limit still, to be brought under it; each entry must exist and still exceed the
# limit, so the list only shrinks.
KNOWN: frozenset[str] = frozenset()


def test_no_public_callable_takes_more_than_eight_parameters():
    over = dict(too_long(LIMIT))
    new = {name: n for name, n in over.items() if name not in KNOWN}
    assert not new, "public callables over the limit of 8 parameters (group options into a frozen options " \
                    f"object, pass a Problem, or make an internal helper private): {new}"
    assert KNOWN <= set(over), f"no longer over the limit: take them off KNOWN: {sorted(KNOWN - set(over))}"


def test_the_walk_sees_the_public_api():
    names = dict(public_callables())
    # a door of each layer, a method and a hand-written constructor are counted
    for name in ("dopplermap.solvers.invert", "dopplermap.model.precompute", "dopplermap.plot.plot_polar",
                 "dopplermap.io.lightcurve.load_lightcurve", "dopplermap.app.target.run_target",
                 "dopplermap.problem.LightCurveData.load", "dopplermap.atomic.AtomicFolder.__init__"):
        assert name in names, name
    assert not any(part.startswith("_") for name in names for part in name.split(".")[1:-1] if part != "__init__")


def test_options_object_or_its_fields_not_both():
    import pytest

    from dopplermap._options import options_of
    from dopplermap.errors import DopplermapInputError
    from dopplermap.model import Synthesis

    assert options_of("precompute", Synthesis, None, {"method": "dense"}, "synthesis") == Synthesis(method="dense")
    given = Synthesis(limb="sharp")
    assert options_of("precompute", Synthesis, given, {}, "synthesis") is given
    for obj, loose, match in ((None, {"methd": "dense"}, r"precompute: unknown keyword\(s\) methd; the options are "),
                              (given, {"method": "dense"}, r"give synthesis=Synthesis\(...\) or the loose keywords"),
                              ({"method": "dense"}, {}, r"synthesis takes dopplermap\.model\.Synthesis, got dict")):
        with pytest.raises(DopplermapInputError, match=match) as exc:
            options_of("precompute", Synthesis, obj, loose, "synthesis")
        assert "\n" not in str(exc.value)
