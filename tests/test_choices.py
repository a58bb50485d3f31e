"""``dopplermap.choices``: every registry, the TOML validation and the CLI's options hold exactly its lists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dopplermap as dm
from dopplermap import choices, forms, model, regularisers, solvers
from dopplermap.cli import group
from dopplermap.config import TEMPLATE, parse_config
from dopplermap.constants import FILL_MIN
from dopplermap.errors import DopplermapInputError
from dopplermap.io import seed as seed_io
from dopplermap.solvers.newton import _block_diagonal

SRC = str(Path(dm.__file__).resolve().parents[1])


def test_forms_registry_is_the_forms_list():
    assert tuple(forms.FORMS) == choices.FORMS
    assert choices.SYNTHESIS_METHODS == ("auto", *choices.FORMS)
    assert all(issubclass(c, forms.Form) for c in forms.FORMS.values())
    assert tuple(seed_io._FORM_ARRAYS) == choices.FORMS  # what a problem file can hold


def test_solver_back_ends_are_the_solvers_list():
    assert tuple(solvers._BACKENDS) == choices.SOLVERS
    assert choices.SOLVER_CHOICES == ("auto", *choices.SOLVERS)


def test_regulariser_registry_is_the_regulariser_list():
    assert tuple(regularisers.REGISTRY) == choices.REGULARISERS == tuple(choices.REGULARISER_LABELS)
    assert all(isinstance(r, regularisers.Regulariser) for r in regularisers.REGISTRY.values())
    assert set(choices.WEIGHTED_REGULARISERS) == set(choices.REGULARISERS) - {"none"}


def test_time_couplings_are_the_time_coupling_list():
    from dopplermap.windows import TIME_COUPLINGS

    assert tuple(TIME_COUPLINGS) == choices.TIME_COUPLINGS


def test_rv_shift_mapping_is_the_rv_shift_list():
    assert tuple(model.RV_SHIFTS) == choices.RV_SHIFTS


def test_limb_weight_mapping_is_the_limb_list():
    assert tuple(dm.geometry.LIMB_WEIGHTS) == choices.LIMB_WEIGHTS


@pytest.mark.parametrize("name", choices.REGULARISERS)
def test_newton_reads_the_whole_hessian_diagonal_of_every_regulariser(name):
    # the block reading of the Newton preconditioner plus the entry's newton_diagonal is the
    # exact diagonal of lmbd x the regulariser's Hessian (what the entry promises)
    grid = dm.make_grid("bands", 40)
    n = grid.n_cell
    area, edges = jnp.asarray(grid.area), jnp.asarray(np.asarray(grid.edges, np.int32).reshape(-1, 2))
    reg, lmbd = regularisers.regulariser(name), 0.7
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.uniform(0.01, 0.4, 2 * n))

    def smooth(y):
        return lmbd * reg.value(y[:n], y[n:], area, edges, reg.floor)

    exact = jnp.diagonal(jax.hessian(smooth)(x))
    read = _block_diagonal(lambda v: jax.jvp(jax.grad(smooth), (x,), (v,))[1], (n, n), 2 * n, x.dtype)
    if reg.newton_diagonal is not None:
        d = reg.newton_diagonal(lmbd, edges, n, x.dtype)
        read = read + jnp.concatenate([d, d])
    np.testing.assert_allclose(np.asarray(read), np.asarray(exact), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", choices.REGULARISERS)
def test_every_infimum_bounds_its_regulariser_from_below(name):
    grid = dm.make_grid("bands", 40)
    area, edges = np.asarray(grid.area), jnp.asarray(np.asarray(grid.edges, np.int32).reshape(-1, 2))
    reg = regularisers.regulariser(name)
    low = reg.infimum(area, reg.floor)
    rng = np.random.default_rng(5)
    for top in (1e-4, 1e-2, 0.5):  # maps near the floor, where the entropies are least, and far from it
        fc, fh = (jnp.asarray(rng.uniform(FILL_MIN, top, grid.n_cell)) for _ in range(2))
        assert float(reg.value(fc, fh, jnp.asarray(area), edges, reg.floor)) >= low
    floor_map = jnp.full(grid.n_cell, FILL_MIN)
    at_floor = float(reg.value(floor_map, floor_map, jnp.asarray(area), edges, reg.floor))
    if name == "mem":  # the seed's entropy dips below its value on the flat map at the bound
        assert at_floor > low
    else:  # the others are least there (equal to rounding)
        assert at_floor == pytest.approx(low, rel=1e-12, abs=1e-300)


def _choice_options(cmd, path=()):
    """``(command path, parameter name, flag, choices)`` of every ``click.Choice`` option under ``cmd``."""
    for p in cmd.params:
        if isinstance(p.type, click.Choice):
            yield path, p.name, p.opts[0], tuple(p.type.choices)
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _choice_options(sub, (*path, name))


# the choices list of each option, by its parameter name, or by command and name where the
# same name means different things
BY_NAME = {"solver": choices.SOLVER_CHOICES, "uncertainty": choices.UNCERTAINTY_METHODS,
           "regulariser": choices.WEIGHTED_REGULARISERS, "readout": choices.GRID_READOUTS}
BY_COMMAND = {(("plot",), "fmt"): choices.FIGURE_FORMATS, (("simulate",), "fmt"): choices.SIMULATION_FORMATS}


def test_every_cli_choice_is_its_choices_list():
    found = list(_choice_options(group))
    seen = set()
    for path, name, flag, values in found:
        want = BY_COMMAND.get((path, name), BY_NAME.get(name))
        assert want is not None, f"dopplermap {' '.join(path)} {flag}: a click.Choice with no list in choices.py"
        assert values == want, f"dopplermap {' '.join(path)} {flag}: {values} != {want}"
        seen.add((path, name) if (path, name) in BY_COMMAND else name)
    assert seen == set(BY_NAME) | set(BY_COMMAND)  # the walk reached every option listed here


# (section, key, list): keys of the TOML whose value is one of a list
CONFIG_CHOICES = [
    ("data", "format", choices.PROFILE_FORMATS),
    ("lightcurves", "format", choices.LIGHTCURVE_FORMATS),
    ("lightcurves", "unit", choices.LIGHTCURVE_UNITS),
    ("lightcurves", "bin_unit", choices.BIN_UNITS),
    ("lightcurves", "quality_bitmask", choices.QUALITY_BITMASKS),
    ("line", "profile", choices.LINE_PROFILES),
    ("line", "ew_method", choices.EW_METHODS),
    ("line", "ew_unit", choices.EW_UNITS),
    ("line", "ew_stage", choices.EW_STAGES),
    ("grid", "kind", choices.GRID_KINDS),
    ("star", "shape", choices.STAR_SHAPES),
    ("gravity_darkening", "law", choices.GRAVITY_LAWS),
    ("inversion", "regulariser", choices.REGULARISERS),
    ("inversion", "method", choices.SYNTHESIS_METHODS),
    ("inversion", "rv_shift", choices.RV_SHIFTS),
    ("inversion", "solver", choices.SOLVER_CHOICES),
    ("uncertainty", "methods", choices.UNCERTAINTY_METHODS),
    ("map", "time_coupling", choices.TIME_COUPLINGS),
]


# the (section, key)s whose choices the template's comments list as "a | b | c" (each key's first line)
TEMPLATE_KEYS = ("format", "unit", "quality_bitmask", "profile", "ew_method", "ew_unit", "ew_stage",
                 "shape", "law", "kind", "regulariser", "method", "rv_shift", "solver", "time_coupling")


def _parse(section, key, value):
    t = tomllib.loads(TEMPLATE)
    if section == "lightcurves":  # an array of tables: one light curve
        t[section] = [{"file": "lc.csv", key: value}]
        return parse_config(t, source="t.toml")
    t.setdefault(section, {})[key] = [value] if key == "methods" else value
    if value == "tabulated":
        t["line"]["files"] = ["phot.txt", "cool.txt", "hot.txt"]
    return parse_config(t, source="t.toml")


@pytest.mark.parametrize("section,key,allowed", CONFIG_CHOICES, ids=[f"{s}.{k}" for s, k, _ in CONFIG_CHOICES])
def test_config_accepts_exactly_the_list(section, key, allowed):
    for value in allowed:
        cfg = _parse(section, key, value)
        got = getattr(cfg.lightcurves[0] if section == "lightcurves" else getattr(cfg, section), key)
        assert got == ((value,) if key == "methods" else value)
    where = (f"[{section}] {key}[0]" if key == "methods" else f"[[lightcurves]] 1 ('lightcurve') {key}"
             if section == "lightcurves" else f"[{section}] {key}")
    with pytest.raises(DopplermapInputError) as e:
        _parse(section, key, "no-such-choice")
    message = f"t.toml: {where} must be one of {', '.join(map(repr, allowed))}, got 'no-such-choice'"
    # a quality bit mask may also be an integer, which its message adds
    assert str(e.value) == message + (" (or an integer bit mask >= 0)" if key.endswith("quality_bitmask") else "")


def _template_lists(key):
    """The values the template's comment offers for ``key`` (``a (why) | b | c``, continued on
    lines that start ``# |``)."""
    lines = TEMPLATE.splitlines()
    for i, line in enumerate(lines):
        m = re.match(rf"#? ?{key} = .*?#\s*(.*)$", line)
        if m:
            text = m.group(1)
            for more in lines[i + 1:]:
                c = re.match(r"\s+#\s*(\|.*)$", more)
                if not c:
                    break
                text += " " + c.group(1)
            return {part.split()[0] for part in text.split("|") if part.strip()}
    raise AssertionError(f"the template has no line for {key}")


# the template offers no light-curve format (its first "format" line is the profiles')
_OFFERED = [c for c in CONFIG_CHOICES if c[1] in TEMPLATE_KEYS and c[:2] != ("lightcurves", "format")]


@pytest.mark.parametrize("section,key,allowed", _OFFERED, ids=[f"{s}.{k}" for s, k, _ in _OFFERED])
def test_the_template_offers_exactly_the_list(section, key, allowed):
    assert _template_lists(key) == set(allowed)


def test_config_fit_components_are_the_spot_components():
    for comps in ([c] for c in choices.SPOT_COMPONENTS):
        assert _parse("inversion", "fit_components", comps).inversion.fit_components == tuple(comps)
    assert parse_config(tomllib.loads(TEMPLATE)).inversion.fit_components == choices.SPOT_COMPONENTS
    with pytest.raises(DopplermapInputError, match="fit_components"):
        _parse("inversion", "fit_components", ["warm"])


def test_check_names_where_the_value_and_the_list():
    assert choices.check("dense", choices.FORMS, "method") == "dense"
    with pytest.raises(DopplermapInputError) as e:
        choices.check("gauss", choices.SOLVER_CHOICES, "t.toml: [inversion] solver")
    assert str(e.value) == ("t.toml: [inversion] solver must be one of 'auto', 'lbfgsb', 'projected_lbfgs', "
                            "'newton', got 'gauss'")
    with pytest.raises(DopplermapInputError, match=r"cube_dtype must be one of .*None, got \['float32'\]"):
        choices.check(["float32"], choices.CUBE_DTYPES, "cube_dtype")  # unhashable: refused, not a TypeError


def test_choices_import_no_jax():
    code = "import dopplermap.choices, sys; heavy = {'jax', 'numpy'} & set(sys.modules); assert not heavy, heavy"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": SRC})
    assert p.returncode == 0, p.stderr
