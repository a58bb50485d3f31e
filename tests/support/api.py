"""The package's public callables and how many parameters each takes.

Public: a function, or a method or hand-written constructor of a class, whose name and whose
module's dotted path have no part starting with ``_``, defined in that module (a name a module
re-exports is counted where it is defined). Parameters: all but ``self``/``cls``; ``*args`` and
``**kwargs`` count one each. A dataclass's or named tuple's generated constructor is a record of
fields (an options object), not a door, and is not counted.

``python tests/support/api.py [limit]`` prints those over the limit (8 by default).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import sys


def public_modules(package="dopplermap"):
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, prefix=package + "."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        names.append(info.name)
    return [importlib.import_module(name) for name in sorted(names)]


def _count(fn):
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    return len(params)


def _generated_init(cls):
    """Whether ``cls.__init__`` is written by ``dataclasses`` or ``typing.NamedTuple``."""
    init = cls.__dict__.get("__init__")
    if init is None:
        return True
    if dataclasses.is_dataclass(cls):
        return init.__code__.co_filename != inspect.getsourcefile(cls)
    return False


def public_callables(package="dopplermap"):
    """``(qualified name, parameter count)`` of every public callable, sorted by name."""
    out = {}
    for module in public_modules(package):
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                out[f"{module.__name__}.{name}"] = _count(obj)
            elif inspect.isclass(obj):
                if not _generated_init(obj):
                    out[f"{module.__name__}.{name}.__init__"] = _count(obj.__dict__["__init__"])
                for attr, member in obj.__dict__.items():
                    if attr.startswith("_"):
                        continue
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if inspect.isfunction(member):
                        out[f"{module.__name__}.{name}.{attr}"] = _count(member)
    return sorted((k, v) for k, v in out.items() if v is not None)


def too_long(limit=8, package="dopplermap"):
    return [(name, n) for name, n in public_callables(package) if n > limit]


if __name__ == "__main__":
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    rows = too_long(limit)
    for name, n in sorted(rows, key=lambda r: (-r[1], r[0])):
        print(f"{n:3d}  {name}")
    print(f"{len(rows)} public callables take more than {limit} parameters")
