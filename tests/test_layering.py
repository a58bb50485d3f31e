"""Import layering of the package, read from the source with ``ast`` (nothing is imported).

Data flows one way (the project's style guide): io -> physics set-up -> synthesis forms
-> model and Problem -> objective -> solvers -> analysis (search, uncertainty, calibrate,
jointfit) -> plot/report -> app (config -> problem -> solution -> result folder) -> CLI
(``cli.py``, ``commands/``) and the shipped examples. These tests keep it so:

* no import cycle among the imports a module runs when it is imported;
* ``io`` reads and writes data types only: no package root, no figures, no solvers, no
  forward model; the figure modules use no solver;
* nothing below the CLI imports the CLI, and nothing below the app layer imports the app
  layer; inside their functions the commands import only what :data:`COMMANDS_IMPORT`
  lists: the app layer, which holds their pipelines, and a few light modules;
* every import, inside functions and through the registries loaded with importlib (the
  CLI's command modules, the root's lazy names) included, runs down the order of
  :data:`LAYERS`: base -> physics -> forms -> objective -> io -> problem -> solvers ->
  analysis -> app -> CLI;
* imports of dopplermap modules inside functions ("late" imports) are kept for the CLI's
  start-up (``commands/``, ``cli.py``) and for the few cases listed in :data:`ALLOWED_LATE`.

Each failure names the file, the line and the import.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import dopplermap

SRC = Path(dopplermap.__file__).resolve().parent
ROOT = "dopplermap"

# (module, imported module) -> why the import has to wait until the function runs
ALLOWED_LATE = {
    ("dopplermap.result", "dopplermap.style"):
        "notebook thumbnail of a result: the figure colour map sits in the layer above the result type",
    ("dopplermap.result", "dopplermap.plot"):
        "result.plot(kind=...) draws with the figure layer, which sits above the result type",
    ("dopplermap.io.results", "dopplermap.geometry"):
        "load_result's StarParams loads JAX; the CLI imports io.results light, for its --out checks "
        "and to start prefetch_writers before JAX",
    ("dopplermap.io.results", "dopplermap.objective"):
        "load_result's Observations loads JAX (same reason as geometry)",
    ("dopplermap.cluster", "dopplermap._dask"):
        "Dask is optional, imported only when a cluster is used; the workers' plugin must subclass "
        "distributed's WorkerPlugin in a module the workers import by name",
}

# what a command may import inside its function (the CLI imports commands/ before any
# work, so each import there must load no JAX): the app layer, which runs the pipelines,
# and the light modules a command uses before it
COMMANDS_IMPORT = {
    "dopplermap.app": "the pipelines, after the checks of app.preflight (which, like app/__init__, loads no JAX)",
    "dopplermap.config": "init writes the template; invert reads the TOML and applies overrides first",
    "dopplermap.errors": "exit statuses",
    "dopplermap.atomic": "init checks and writes its file",
    "dopplermap.examples": "example writes a shipped script; the examples sit beside the CLI, above the app layer",
}


@dataclass(frozen=True)
class Import:
    module: str          # importing module, e.g. "dopplermap.io.results"
    path: str            # file relative to the package's parent, e.g. "dopplermap/io/results.py"
    line: int
    target: str          # module the statement runs, e.g. "dopplermap.plot"
    names: tuple         # names taken from it (empty for ``import x``)
    late: bool           # inside a function
    type_only: bool      # under ``if TYPE_CHECKING:`` (never runs)

    def __str__(self):
        what = f"from {self.target} import {', '.join(self.names)}" if self.names else f"import {self.target}"
        return f"{self.path}:{self.line}: {what}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(module: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    rel = str(path.relative_to(SRC.parent))
    out = []

    def visit(node, late, type_only):
        for child in ast.iter_child_nodes(node):
            c_late = late or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            c_type = type_only or (isinstance(node, ast.If) and _is_type_checking(node) and child in node.body)
            if isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.split(".")[0] == ROOT:
                        out.append(Import(module, rel, child.lineno, a.name, (), c_late, c_type))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[: len(package) - child.level + 1]
                    source = ".".join(base + ([child.module] if child.module else []))
                else:
                    source = child.module or ""
                if source.split(".")[0] == ROOT:
                    # ``from pkg import sub`` runs the submodule; ``from pkg import name`` runs pkg
                    subs = tuple(a.name for a in child.names if f"{source}.{a.name}" in MODULES)
                    rest = tuple(a.name for a in child.names if f"{source}.{a.name}" not in MODULES)
                    for s in subs:
                        out.append(Import(module, rel, child.lineno, f"{source}.{s}", (), c_late, c_type))
                    if rest:
                        out.append(Import(module, rel, child.lineno, source, rest, c_late, c_type))
            visit(child, c_late, c_type)

    visit(tree, False, False)
    return out


IMPORTS = [imp for m, p in MODULES.items() for imp in _imports(m, p)]


def _runs(imp: Import) -> list[str]:
    """Modules whose top level an import statement runs: the target and the packages above it,
    less the packages that contain the importer (already being imported)."""
    parts = imp.target.split(".")
    prefixes = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    inside = {".".join(imp.module.split(".")[:i]) for i in range(1, imp.module.count(".") + 2)}
    return [p for p in prefixes if p in MODULES and (p == imp.target or p not in inside)]


def _cycles(imports=None) -> list[list[Import]]:
    """Each strongly connected component of the import-time graph, as the imports inside it."""
    edges: dict[str, list[tuple[str, Import]]] = {m: [] for m in MODULES}
    for imp in IMPORTS if imports is None else imports:
        if not imp.late and not imp.type_only:
            for t in _runs(imp):
                if t != imp.module:
                    edges[imp.module].append((t, imp))
    index, low, stack, on, comps = {}, {}, [], set(), []

    def strong(v):  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w, _ in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted({imp for u in comp for w, imp in edges[u] if w in comp}, key=str))

    for v in MODULES:
        if v not in index:
            strong(v)
    return comps


def _under(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


CLI, APP = (f"{ROOT}.cli", f"{ROOT}.commands"), f"{ROOT}.app"
# the top, which may import the CLI: python -m dopplermap, and the examples that run it as a user does
TOP = (*CLI, f"{ROOT}.__main__", f"{ROOT}.examples")


def _layer_violations() -> list[str]:
    io, figures = f"{ROOT}.io", (f"{ROOT}.plot", f"{ROOT}.style", f"{ROOT}.report")
    solvers = f"{ROOT}.solvers"
    bad = []
    for imp in IMPORTS:
        m, t = imp.module, imp.target
        if _under(m, io):
            if t == ROOT:
                bad.append(f"{imp}  (io imports the package root; import the defining module)")
            elif _under(t, *figures):
                bad.append(f"{imp}  (io draws no figures: take a figure writer from the caller)")
            elif _under(t, solvers):
                bad.append(f"{imp}  (io imports no solver)")
            elif _under(t, f"{ROOT}.simulate") or (t == f"{ROOT}.model" and (
                    not imp.names or any(n.startswith("forward") or n == "synthesize" for n in imp.names))):
                bad.append(f"{imp}  (io runs no forward model: the caller computes it)")
        if _under(m, *figures) and _under(t, solvers):
            bad.append(f"{imp}  (figures take results, they import no solver)")
        if not _under(m, *TOP) and _under(t, *TOP):
            bad.append(f"{imp}  (only the CLI and the examples import the CLI and the examples)")
    return bad


def _commands_import_violations() -> list[str]:
    return [f"{imp}  (a command imports only {', '.join(COMMANDS_IMPORT)}: move the work into dopplermap.app)"
            for imp in IMPORTS
            if _under(imp.module, f"{ROOT}.commands") and imp.late and not _under(imp.target, *COMMANDS_IMPORT)]


def _cli_import_violations() -> list[str]:
    return [f"{imp}  (below the CLI: nothing imports dopplermap.cli or dopplermap.commands)"
            for imp in IMPORTS if not _under(imp.module, *TOP) and _under(imp.target, *CLI)]


def _app_import_violations() -> list[str]:
    return [f"{imp}  (below the app layer: the analyses, solvers, objective, forms, model and physics "
            "import no dopplermap.app)"
            for imp in IMPORTS if not _under(imp.module, APP, *TOP) and _under(imp.target, APP)]


# The whole order, bottom to top: a module imports only from its own layer or below. Modules
# not named by a longer prefix take the layer of the shortest one that names them.
LAYERS = (
    ("base", ("_version", "_x64", "_device", "_dask", "_sets", "_linops", "_options", "errors", "constants", "choices", "units",
              "memory", "atomic", "cache", "cluster", "compiled", "diagnostics", "figure_process", "limb_darkening",
              "plan", "fisher", "result", "style", "gridtable", "_repr")),
    ("physics", ("geometry", "grid", "roche", "profiles", "atmosphere", "broadening", "gravity", "lightcurve")),
    ("forms", ("forms", "model", "windows")),
    ("objective", ("objective", "regularisers", "simulate", "errorscale")),
    ("io", ("io",)),
    ("problem", ("problem",)),
    ("solvers", ("solvers",)),
    ("analysis", ("search", "uncertainty", "calibrate", "jointfit")),
    ("app", ("app", "config", "plot", "report", "progress", "")),  # "": the package root, a facade
    ("cli", ("cli", "commands", "__main__", "examples")),
)


def _layer_of(module: str) -> int:
    best = None
    for rank, (_, names) in enumerate(LAYERS):
        for name in names:
            full = f"{ROOT}.{name}" if name else ROOT
            if module == full or (name and module.startswith(full + ".")):
                if best is None or len(full) > best[1]:
                    best = (rank, len(full))
    assert best is not None, f"{module} is in no layer of LAYERS: place it"
    return best[0]


def _registry_imports() -> list[Import]:
    """Imports that run through importlib: the CLI's command modules and the root's lazy names."""
    out = []
    for module, names in ((f"{ROOT}.cli", "COMMAND_MODULES"), (ROOT, "_LAZY")):
        path = MODULES[module]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == names for t in node.targets):
                value = ast.literal_eval(node.value) if names == "COMMAND_MODULES" else None
                if value is None:  # the root's {name: submodule} (built with dict.fromkeys)
                    value = [c.value for c in ast.walk(node.value)
                             if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value[:1].islower()
                             and f"{ROOT}.{c.value}" in MODULES]
                    value = [f"{ROOT}.{v}" for v in value]
                rel = str(path.relative_to(SRC.parent))
                out += [Import(module, rel, node.lineno, t, (), True, False) for t in value]
    return out


def _order_violations(imports=None) -> list[str]:
    bad = []
    for imp in IMPORTS + _registry_imports() if imports is None else imports:
        if imp.type_only or not _under(imp.target, ROOT) or (imp.module, imp.target) in ALLOWED_LATE:
            continue
        lo, hi = _layer_of(imp.target), _layer_of(imp.module)
        if lo > hi:
            bad.append(f"{imp}  ({LAYERS[hi][0]} imports {LAYERS[lo][0]}, a layer above it)")
    return bad


def _late_internal() -> list[Import]:
    return [imp for imp in IMPORTS if imp.late and not _under(imp.module, f"{ROOT}.commands", f"{ROOT}.cli")]


def test_the_scan_sees_the_package():
    # guards the scan itself: known imports are found, at the right place and kind
    found = {(i.module, i.target, i.late) for i in IMPORTS}
    assert ("dopplermap.solvers", "dopplermap.model", False) in found        # from ..model import ...
    assert ("dopplermap.solvers", "dopplermap.plan", False) in found         # from .. import _device, plan
    assert ("dopplermap.commands.demo", "dopplermap.app.demo", True) in found  # inside the command
    assert len(MODULES) > 40


def test_cycle_finder_finds_a_cycle():
    a = Import("dopplermap.solvers", "dopplermap/solvers/__init__.py", 3, "dopplermap.solvers.batch", (), False, False)
    b = Import("dopplermap.solvers.batch", "dopplermap/solvers/batch.py", 5, "dopplermap.solvers", ("start",),
               False, False)
    late = dataclasses.replace(b, late=True)
    assert _cycles([a, b]) == [[a, b]]
    assert _cycles([a, late]) == []  # an import inside a function runs later: no cycle at import time


def test_no_import_cycles():
    cycles = _cycles()
    assert not cycles, "import cycles (move the shared piece into a lower module):\n" + "\n\n".join(
        "\n".join(map(str, c)) for c in cycles)


def test_layer_order():
    bad = _layer_violations()
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_every_import_runs_down_the_layers():
    bad = _order_violations()
    assert not bad, "imports against the layer order (tests/test_layering.py LAYERS):\n" + "\n".join(bad)


def test_the_order_check_follows_registries_and_can_fail():
    regs = {(i.module, i.target) for i in _registry_imports()}
    assert ("dopplermap.cli", "dopplermap.commands.target") in regs and ("dopplermap", "dopplermap.solvers") in regs
    up = [Import("dopplermap.geometry", "dopplermap/geometry.py", 3, "dopplermap.model", ("forward",), False, False),
          Import("dopplermap.forms.dense", "dopplermap/forms/dense.py", 4, "dopplermap.objective", (), True, False),
          Import("dopplermap.search", "dopplermap/search.py", 5, "dopplermap.commands.target", (), True, False)]
    assert [b.split("  ")[0] for b in _order_violations(up)] == [str(i) for i in up]
    assert "physics imports forms" in _order_violations(up)[0]


def test_commands_import_only_the_app_layer():
    bad = _commands_import_violations()
    assert not bad, "imports in commands/ outside the app layer and the light modules:\n" + "\n".join(bad)


def test_nothing_below_the_cli_imports_it():
    bad = _cli_import_violations()
    assert not bad, "imports of the CLI from below it:\n" + "\n".join(bad)


def test_nothing_below_the_app_layer_imports_it():
    bad = _app_import_violations()
    assert not bad, "imports of the app layer from below it:\n" + "\n".join(bad)


def test_late_internal_imports_are_few_and_listed():
    late = _late_internal()
    unlisted = [f"{i}  (move it to the top of the module)" for i in late if (i.module, i.target) not in ALLOWED_LATE]
    assert not unlisted, "imports of dopplermap modules inside functions:\n" + "\n".join(unlisted)
    assert len(late) <= 5, "more than 5 late internal imports outside commands/ and cli.py:\n" + "\n".join(map(str, late))
    stale = set(ALLOWED_LATE) - {(i.module, i.target) for i in late}
    assert not stale, f"ALLOWED_LATE lists imports that no longer exist: {sorted(stale)}"


def test_result_io_stays_light():
    # why ALLOWED_LATE keeps load_result's types late: the CLI imports io.results before JAX
    code = ("import sys, dopplermap.io.results\n"
            "print([m for m in ('jax', 'scipy', 'astropy', 'matplotlib') if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(SRC.parent)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_scan_reports_a_violation():
    # the checks can fail: a fake io module importing plot and the root is caught, by line
    fake = Import("dopplermap.io.fake", "dopplermap/io/fake.py", 7, "dopplermap.plot", (), True, False)
    root = Import("dopplermap.io.fake", "dopplermap/io/fake.py", 8, ROOT, ("__version__",), False, False)
    # a command importing a solver, an analysis importing the CLI and the app layer
    cmd = Import("dopplermap.commands.fake", "dopplermap/commands/fake.py", 9, "dopplermap.solvers", ("invert",),
                 True, False)
    cli = Import("dopplermap.search", "dopplermap/search.py", 10, "dopplermap.cli", ("main",), True, False)
    app = Import("dopplermap.search", "dopplermap/search.py", 11, "dopplermap.app.target", (), False, False)
    IMPORTS.extend([fake, root, cmd, cli, app])
    try:
        bad = _layer_violations()
        assert any(b.startswith("dopplermap/io/fake.py:7: import dopplermap.plot") for b in bad)
        assert any(b.startswith("dopplermap/io/fake.py:8: from dopplermap import __version__") for b in bad)
        assert fake in _late_internal()
        assert [b.split("  ")[0] for b in _commands_import_violations()] == [
            "dopplermap/commands/fake.py:9: from dopplermap.solvers import invert"]
        assert [b.split("  ")[0] for b in _cli_import_violations()] == [
            "dopplermap/search.py:10: from dopplermap.cli import main"]
        assert [b.split("  ")[0] for b in _app_import_violations()] == [
            "dopplermap/search.py:11: import dopplermap.app.target"]
    finally:
        del IMPORTS[-5:]
