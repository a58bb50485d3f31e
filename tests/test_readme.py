"""The README's Python examples run as written (the second with profiles of a simulated star)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_examples_run():
    import dopplermap as dm

    blocks = _python_blocks()
    assert len(blocks) >= 2
    first: dict = {}
    exec(compile(blocks[0], "README.md: first Python block", "exec"), first)
    res, res2 = first["res"], first["res2"]
    assert res.outcome.converged and res2.lmbd == 0.3 and res2.chi2 < res.chi2
    assert res.grid is first["problem"].grid  # the result knows its problem

    # the second (after the first's import) builds a problem from its parts: give it a simulated star's profiles
    star, grid, times, vels, comps = dm.demo_setup(n_cell=300, n_epoch=12, n_vel=24)
    sim = dm.simulate(grid, star, times, vels, comps, dm.DEMO_SPOTS, snr=400)
    second = {"dm": dm, "times": np.asarray(times), "vels": np.asarray(vels), "flux": np.asarray(sim.obs.flux),
              "err": np.asarray(sim.obs.err)}
    exec(compile(blocks[1], "README.md: second Python block", "exec"), second)
    problem = second["problem"]
    assert isinstance(problem, dm.Problem) and problem.grid.n_cell == 2500
    assert problem.observations.n_epoch == 12
