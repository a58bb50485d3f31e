"""Whether two source trees compile the same value-and-gradient programs (seed size, float64).

A refactor that leaves the optimised XLA program of every synthesis form unchanged
(instruction for instruction, source locations removed) has the same speed by construction;
timings on a loaded machine cannot resolve 5 %, this can.

    python benchmarks/compare_compiled.py /path/to/other/src [/path/to/this/src]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

FORMS = ("binned", "dense", "folded_float64", "folded_float32", "blocked_float32")


def dump(folder: str) -> None:
    import jax
    import jax.numpy as jnp

    import dopplermap as dm
    from dopplermap.objective import Layout, ObjectiveData
    from dopplermap.solvers.program import value_and_grad_body

    star, grid, times, vels, comps = dm.demo_setup()
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=500)
    x = jnp.asarray(Layout(grid.n_cell, len(times)).initial(0.05))
    dense = dm.precompute(grid, star, times, vels, comps, method="dense")
    pres = {"binned": dm.precompute(grid, star, times, vels, comps, method="binned"), "dense": dense,
            "folded_float64": dm.solve_form(dense, "float64"), "folded_float32": dm.solve_form(dense, "float32"),
            "blocked_float32": dm.solve_form(dense, "float32", blocked=True)}
    vg_jit = jax.jit(value_and_grad_body, static_argnames=("regulariser", "penalty"))
    for name, pre in pres.items():
        text = vg_jit.lower(x, jnp.asarray(1.0), pre, ObjectiveData(obs=sim.obs), regulariser="mem",
                            penalty=1e4).compile().as_text()
        with open(os.path.join(folder, name + ".hlo"), "w") as fh:
            fh.write(text)


def _program(path: str) -> str:
    """The compiled module without its debug tables and source locations."""
    text = open(path).read()
    start = text.find("\n\n", text.find("StackFrames")) if "StackFrames" in text else 0
    text = re.sub(r", metadata=\{[^}]*\}", "", text[start:])
    return re.sub(r",?\s*(stack_frame_id|frame_id)=\d+", "", text)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--dump":
        dump(sys.argv[2])
        return
    trees = [sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "src")]
    with tempfile.TemporaryDirectory() as tmp:
        folders = []
        for i, src in enumerate(trees):
            folder = os.path.join(tmp, str(i))
            os.mkdir(folder)
            subprocess.run([sys.executable, __file__, "--dump", folder], check=True,
                           env={**os.environ, "PYTHONPATH": os.path.abspath(src)})
            folders.append(folder)
        same = {f: _program(os.path.join(folders[0], f + ".hlo")) == _program(os.path.join(folders[1], f + ".hlo"))
                for f in FORMS}
    print(json.dumps({"trees": trees, "identical_compiled_program": same}))


if __name__ == "__main__":
    main()
