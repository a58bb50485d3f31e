"""The Problem: what is decided once (plan, solve forms) is decided once, and a pickle leaves it out."""

from __future__ import annotations

import pickle

import pytest

import dopplermap as dm
from dopplermap import plan
from dopplermap.errors import DopplermapInputError


@pytest.fixture(scope="module")
def problem():
    return dm.demo_problem(n_cell=300, n_epoch=10, n_vel=20)


def test_solve_forms_are_built_once_per_choice(problem):
    f32 = problem.solve_form("float32")
    assert problem.solve_form("float32") is f32
    assert problem.solve_form("float64") is not f32
    assert problem.solve_form("float32", blocked=True) is not f32
    assert problem.solve_form(None) is problem.pre  # None: the form as it is


def test_a_pickle_carries_the_data_not_what_is_built_from_it(problem):
    problem.solve_form("float32")
    problem.plan  # noqa: B018
    back = pickle.loads(pickle.dumps(problem))
    assert not ({"pre", "plan", "_solve_forms"} & set(back.__dict__))
    assert back.plan == problem.plan


def test_the_plan_follows_the_thresholds(problem, monkeypatch):
    p = problem.plan
    assert p.method == "dense" and p.cube_dtype == "float32"  # tol 1e-5 >= FLOAT32_MIN_TOL
    assert (p.batch_form, p.batch_mode) == ("blocked", "vmap") and not p.accelerator
    assert "dense synthesis" in p.describe()
    monkeypatch.setattr(plan, "BLOCKED_MAX_BYTES", 0)
    small = plan.Plan.of(problem.pre, 1e-7)
    assert small.cube_dtype == "float64" and (small.batch_form, small.batch_mode) == ("folded", "sequential")
    binned = dm.demo_problem(n_cell=300, n_epoch=10, n_vel=20).replace(method="binned")
    assert binned.plan.method == "binned" and binned.plan.cube_dtype is None


def test_a_tpu_is_named_as_emulating_float64(problem, monkeypatch):
    monkeypatch.setattr(plan.jax, "default_backend", lambda: "tpu")
    with pytest.warns(dm.DopplermapWarning, match="JAX_PLATFORMS=cpu"):
        plan.Plan.of(problem.pre, 1e-5)


def test_the_doors_take_a_problem_or_a_model_and_its_observations(problem):
    with pytest.raises(DopplermapInputError, match="give a dopplermap.Problem"):
        dm.invert(problem.observations)
    with pytest.raises(DopplermapInputError, match="observations are missing"):
        dm.invert(problem.pre)
    with pytest.raises(DopplermapInputError, match="unknown keyword.*lambda_"):
        dm.invert(problem, lambda_=1.0)
    with pytest.raises(DopplermapInputError, match="pass neither obs"):
        dm.invert_batch(problem, problem.observations, lmbds=[1.0])


def test_the_layout_names_every_block_of_the_vector(problem):
    import numpy as np

    lay = problem.layout
    x = np.arange(lay.size, dtype=float)
    blocks = lay.blocks()
    assert list(blocks) == ["cool", "hot", "rv", "amp"]
    for part, name in zip(lay.split(x), blocks, strict=True):
        np.testing.assert_array_equal(part, x[blocks[name]])
    assert sum(s.stop - s.start for s in blocks.values()) == lay.size
    assert dm.invert(problem, maxiter=3).x.shape == (lay.size,)


def test_new_settings_keep_the_built_forms_but_not_the_plan(problem):
    f32 = problem.solve_form("float32")
    assert problem.plan.cube_dtype == "float32"
    tight = problem.replace(settings=problem.settings.replace(tol=1e-8))
    assert tight.pre is problem.pre and tight.solve_form("float32") is f32
    assert tight.plan.cube_dtype == "float64"


def test_the_cube_dtype_is_a_problem_field_decided_once_in_the_plan(problem):
    wide = problem.replace(cube_dtype="float64")
    assert wide.pre is problem.pre  # the choice enters no built model
    assert wide.plan.cube_dtype == "float64" and "float64 cube" in wide.plan.describe()
    assert dm.invert(wide, maxiter=2).cube_dtype == "float64"
    assert dm.invert(problem, maxiter=2).cube_dtype == "float32"  # "auto" at tol 1e-5
    assert dm.invert(wide, maxiter=2, cube_dtype="float32").cube_dtype == "float32"  # one solve's override
    assert problem.replace(cube_dtype=None).plan.cube_dtype is None
    with pytest.raises(DopplermapInputError, match="cube_dtype") as exc:
        problem.replace(cube_dtype="float16")
    assert "\n" not in str(exc.value)


def test_invert_batch_takes_its_form_and_mode_from_the_plan(problem, monkeypatch):
    import dataclasses

    from dopplermap import solvers

    seen = {}

    def stop(setup, lmbds, obs, *, mode, **kw):
        seen.update(mode=mode, form=type(setup.pre.line).__name__)
        raise RuntimeError("stop before solving")

    monkeypatch.setattr(solvers, "solve_batch", stop)
    monkeypatch.setattr(solvers, "solve_sequential", lambda setup, lmbds, obs, **kw: stop(setup, lmbds, obs,
                                                                                          mode="sequential", **kw))
    for form, mode, cls in (("folded", "sequential", "Folded"), ("blocked", "vmap", "Blocked")):
        planned = problem.replace(cube_dtype="float64")
        planned.__dict__["plan"] = dataclasses.replace(planned.plan, batch_form=form, batch_mode=mode)
        with pytest.raises(RuntimeError, match="stop before solving"):
            dm.invert_batch(planned, lmbds=[0.5, 1.0])
        assert seen["mode"] == mode and seen["form"].startswith(cls), seen


def test_a_given_form_of_several_line_sets_is_refused_in_one_line(problem):
    """A LineSets is not a form a Problem holds (its several sets come from ``lines``): the
    constructor says so and names the ways that do take several sets; so for a bare form
    object or a tuple of observations beside one model."""
    from dopplermap.errors import ConvergenceWarning
    from dopplermap.objective import LineSets

    sets = LineSets.create([problem.pre, problem.pre], names=["a", "b"])
    obs = problem.observations
    cases = (
        (dict(obs=(obs, obs), form=sets), r"form takes one line data set's model .*LineSets of 2 sets.*give lines.*"
                                          r"dopplermap\.invert"),
        (dict(obs=obs, form=sets), "LineSets of 2 sets"),
        (dict(obs=obs, form=problem.pre.line), f"form takes a dopplermap.model.Precomputed .*got "
                                               f"{type(problem.pre.line).__name__}"),
        (dict(obs=(obs,), form=problem.pre), "obs takes dopplermap.Observations, got tuple"),
    )
    for kw, match in cases:
        with pytest.raises(DopplermapInputError, match=match) as exc:
            dm.Problem(grid=None, star=None, components=None, source="given", **kw)
        assert "\n" not in str(exc.value) and str(exc.value).startswith("given: ")
    # the one-set form still builds and solves; the sets themselves solve through invert
    given = dm.Problem(grid=None, star=None, obs=obs, components=None, form=problem.pre)
    assert given.pre is problem.pre
    with pytest.warns(ConvergenceWarning):  # two iterations: a solve, not a converged one
        assert set(dm.invert(sets, (obs, obs), maxiter=2).chi2_sets) == {"a", "b"}
