"""The support refit (``grid --readout support``): the map refitted with only the support's cells free."""

import json

import numpy as np
import pytest
from support.problems import small_problem

from dopplermap import search
from dopplermap.constants import FILL_MIN
from dopplermap.errors import DopplermapInputError


@pytest.fixture(scope="module")
def star():
    return small_problem(n_cell=192, n_epoch=12, n_vel=20, snr=2000.0, inclination=60.0)


def test_support_mask_threshold_and_growth(star):
    prob, sim = star
    grid = prob.grid
    plain = search.support_mask(grid, sim.fssc, 0.05, 0.0)
    assert np.array_equal(plain, sim.fssc > 0.05) and 0 < plain.sum() < grid.n_cell
    grown = search.support_mask(grid, sim.fssc, 0.05, 15.0)
    assert np.all(grown[plain]) and grown.sum() > plain.sum()
    # a grown cell lies within 15 deg of a cell above the threshold, and every cell that does is grown
    xyz = np.stack([np.cos(grid.lat) * np.cos(grid.lon), np.cos(grid.lat) * np.sin(grid.lon), np.sin(grid.lat)], 1)
    dist = np.degrees(np.arccos(np.clip(np.max(xyz @ xyz[plain].T, axis=1), -1.0, 1.0)))
    assert np.all(grown[dist < 15.0 - 1e-6]) and not np.any(grown[dist > 15.0 + 1e-6])
    with pytest.raises(DopplermapInputError, match="fill has shape"):
        search.support_mask(grid, sim.fssc[:-1])


def test_solve_on_support_holds_the_rest_and_recovers_the_inclination(star):
    """On data from the model itself, the refit over the true spots (grown by one cell) holds
    every other cell at the floor and puts the chi2 minimum at the true inclination."""
    prob, sim = star
    sc = search.support_mask(prob.grid, sim.fssc, 0.05, 10.0)
    sh = search.support_mask(prob.grid, sim.fssh, 0.05, 10.0)
    chi2 = {}
    for inc in (50.0, 60.0, 70.0):
        r = search.solve_on_support(prob, {"inclination": inc, "vsini": 40.0}, sc, sh)
        assert np.all(r.fssc[~sc] == FILL_MIN) and np.all(r.fssh[~sh] == FILL_MIN)
        assert r.fssc[sc].max() > 0.3 and r.lmbd == 0.0
        chi2[inc] = r.chi2 * prob.obs.n_epoch * prob.obs.n_vel
    assert min(chi2, key=chi2.get) == 60.0
    assert chi2[50.0] - chi2[60.0] > 4.0 and chi2[70.0] - chi2[60.0] > 4.0
    with pytest.raises(DopplermapInputError, match="shape"):
        search.solve_on_support(prob, {"inclination": 60.0}, sc[:-1], sh)


def test_solve_on_support_refuses_time_windows(star):
    """The refit fits one static map: a problem with time windows is one clear error, not a wrong fit."""
    from dopplermap.windows import Windows

    prob, sim = star
    windowed = prob.replace(windows=Windows.count(2, prob.obs.times))
    sc = search.support_mask(prob.grid, sim.fssc, 0.05, 0.0)
    with pytest.raises(DopplermapInputError, match="time windows"):
        search.solve_on_support(windowed, {"inclination": 60.0}, sc, sc)


def test_solve_on_support_refuses_several_line_data_sets(star):
    """The Gauss-Newton refit fits one line data set: a problem of several is one clear error line."""
    from dopplermap.problem import LineData, Problem

    prob, sim = star
    joint = Problem(grid=prob.grid, star=prob.star, obs=None, components=None,
                    lines=(LineData(sim.obs, prob.components, "a"), LineData(sim.obs, prob.components, "b")))
    keep = np.ones(prob.grid.n_cell, bool)
    with pytest.raises(DopplermapInputError, match=r"solve_on_support .*one line data set only.* has 2") as exc:
        search.solve_on_support(joint, {"inclination": 60.0}, keep, keep)
    assert "\n" not in str(exc.value)


AXES = {"inclination": [50.0, 60.0], "vsini": [40.0]}


@pytest.fixture(scope="module")
def regularised(star):
    """The small star at a grid's lambda and tol."""
    prob, _ = star
    return prob.replace(settings=prob.settings.replace(lmbd=0.5, tol=1e-5))


def _counting_invert(monkeypatch):
    """Count the regularised solves (:func:`dopplermap.solvers.invert`, as the search calls it)."""
    calls = []
    real = search.invert

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "invert", counted)
    return calls


def test_refit_from_the_kept_solves_is_the_double_solve(regularised, tmp_path, monkeypatch):
    """The support and every point's refit from the first pass's kept solves (read back from its
    file) are those of solving each regularised map again, without a regularised solve."""
    prob, at = regularised, {"inclination": 60.0, "vsini": 40.0}
    old_support = search.support_from_point(prob, at)  # the path that solves again
    old = search.grid_search(prob, AXES, tmp_path / "old.csv", support=old_support)
    solves = tmp_path / "solves.jsonl"
    first = search.grid_search(prob, AXES, tmp_path / "first.csv", solutions=solves)
    kept = search.read_solutions(solves, prob, AXES)
    assert sorted(kept) == [0, 1]
    calls = _counting_invert(monkeypatch)
    support = search.support_from_point(prob, at, solve=kept[1])
    assert np.array_equal(support.cool, old_support.cool) and np.array_equal(support.hot, old_support.hot)
    new = search.grid_search(prob, AXES, tmp_path / "new.csv", support=support, solutions=solves)
    assert calls == []  # no regularised map solved again
    for o, n, f in zip(old, new, first, strict=True):
        assert n["chi2_support"] == pytest.approx(o["chi2_support"], rel=1e-12, abs=0.0)
        for col in ("chi2", "chi2_total", "loss", "regulariser", "entropy", "iterations", "success"):
            assert n[col] == o[col] == f[col], col
    # the control: without the file each point's map is solved again (the old path), to the same rows
    again = search.grid_search(prob, AXES, tmp_path / "again.csv", support=support)
    assert len(calls) == 2 and [r["chi2_support"] for r in again] == pytest.approx([r["chi2_support"] for r in new],
                                                                                   rel=1e-12, abs=0.0)


def test_kept_solves_resume_after_a_kill_and_refuse_another_search(regularised, tmp_path, monkeypatch):
    """A solutions file cut off by a kill resumes with only the missing point solved; a file of
    another search, or an existing one without resume, is refused in one line."""
    prob = regularised
    table, solves = tmp_path / "first.csv", tmp_path / "solves.jsonl"
    rows = search.grid_search(prob, AXES, table, solutions=solves)
    lines = solves.read_text().splitlines(keepends=True)
    assert len(lines) == 3 and '"kind": "dopplermap grid-point solves"' in lines[0]
    # killed while writing point 1's solve: its line cut off, its row not written
    solves.write_text("".join(lines[:2]) + lines[2][:len(lines[2]) // 2])
    table.write_text("".join(table.read_text().splitlines(keepends=True)[:2]))
    with pytest.raises(DopplermapInputError, match="exists; pass resume=True"):
        search.grid_search(prob, AXES, tmp_path / "other.csv", solutions=solves)
    calls = _counting_invert(monkeypatch)
    again = search.grid_search(prob, AXES, table, solutions=solves, resume=True)
    assert len(calls) == 1  # point 1 only
    assert [r["chi2_total"] for r in again] == [r["chi2_total"] for r in rows]
    assert solves.read_text() == "".join(lines)  # the same solves, written exactly
    kept = search.read_solutions(solves, prob, AXES)
    assert kept[1].chi2 == rows[1]["chi2"] and kept[1].x.shape == (2 * prob.grid.n_cell + 2 * prob.obs.n_epoch,)
    # a file of other settings or another grid: one line naming the difference, before any solve
    other = prob.replace(settings=prob.settings.replace(lmbd=0.25))
    with pytest.raises(DopplermapInputError, match=r"not the solutions of this search: lmbd 0\.5 in the table vs 0\.25"):
        search.read_solutions(solves, other, AXES)
    with pytest.raises(DopplermapInputError, match="values of inclination"):
        search.read_solutions(solves, prob, {"inclination": [50.0, 65.0], "vsini": [40.0]})
    solves.write_text(lines[0] + '{"point": 7}\n')
    with pytest.raises(DopplermapInputError, match=r"line 2 is malformed \(KeyError") as exc:
        search.read_solutions(solves, prob, AXES)
    assert "\n" not in str(exc.value) and len(calls) == 1


def test_support_counts_its_parameters_and_warns_when_crowded(regularised):
    """The support records the refit's free parameters (its cells, each epoch's rv and offset) and
    data points; one that frees more than SUPPORT_CROWDED of the data is said to be crowded, in one
    line naming both counts; a sparse one is not."""
    prob, at = regularised, {"inclination": 60.0, "vsini": 40.0}
    obs = prob.obs
    support = search.support_from_point(prob, at)
    cells = int(support.cool.sum() + support.hot.sum())
    assert support.n_free == cells + 2 * obs.n_epoch and support.n_data == obs.n_epoch * obs.n_vel
    assert support.summary()["n_free"] == support.n_free and support.summary()["n_data"] == support.n_data
    assert support.n_free <= search.SUPPORT_CROWDED * support.n_data and support.crowded() is None
    no_rv = search.support_from_point(prob.replace(settings=prob.settings.replace(fit_rv=False)), at)
    assert no_rv.n_free == int(no_rv.cool.sum() + no_rv.hot.sum()) + obs.n_epoch  # its own map's support
    every = search.support_from_point(prob, at, readout=search.SupportReadout(threshold=-1.0))
    n_free = 2 * prob.grid.n_cell + 2 * obs.n_epoch
    assert every.n_free == n_free > search.SUPPORT_CROWDED * every.n_data
    why = every.crowded()
    assert why is not None and "\n" not in why
    assert (f"frees {n_free} parameters ({prob.grid.n_cell} cool and {prob.grid.n_cell} hot cells and "
            f"{2 * obs.n_epoch} fitted rv shifts and offsets)") in why
    held = search.support_from_point(prob.replace(settings=prob.settings.replace(fit_rv=False, fit_amp=False)), at,
                                     readout=search.SupportReadout(threshold=-1.0))
    assert f"({prob.grid.n_cell} cool and {prob.grid.n_cell} hot cells) for" in held.crowded()
    assert f"for {obs.n_epoch * obs.n_vel} data points" in why and "[grid] subdivide" in why


def test_cli_support_readout_resumes_between_the_passes(star, tmp_path, monkeypatch, capsys):
    """Killed after the regularised pass, ``grid --readout support --resume`` reads the support and
    starts every refit from the kept solves: no regularised map is solved again."""
    from dopplermap.app.search import SUPPORT_FIRST_SOLVES, SUPPORT_FIRST_TABLE, save_problem
    from dopplermap.cli import main

    prob, sim = star
    npz = save_problem(tmp_path / "p.npz", sim.obs, prob.star, n_cell=prob.grid.n_cell)
    out = tmp_path / "g"
    args = ["grid", str(npz), "--out", str(out), "--param", "inclination=50,60", "--param", "vsini=40",
            "--lmbd", "0.5", "--scheduler", "sync", "--readout", "support", "-q"]

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(search, "support_from_point", killed)
        assert main(args) == 130
    first = search.read_table(out / SUPPORT_FIRST_TABLE)
    assert len(first) == 2 and not (out / "grid.csv").exists()
    assert len((out / SUPPORT_FIRST_SOLVES).read_text().splitlines()) == 3
    calls = _counting_invert(monkeypatch)
    monkeypatch.setattr(search, "chi2_jitter", lambda problem, params, **kw: 0.0)  # its own reference solves
    assert main([*args, "--resume"]) == 0, capsys.readouterr().err
    assert calls == []
    rows = search.read_table(out / "grid.csv")
    assert [r["chi2_total"] for r in rows] == [r["chi2_total"] for r in first]
    assert all(np.isfinite(r["chi2_support"]) for r in rows)
    summary = json.loads((out / "grid.json").read_text())
    assert summary["column"] == "chi2_support" and summary["support"]["cool_cells"] > 0
    said = capsys.readouterr()
    assert "support refit frees" not in said.err
    # the screen shows the column the read-out reads, and labels its intervals with it
    best = min(rows, key=lambda r: r["chi2_support"])
    assert f"chi2_support {best['chi2_support']:.6g}" in said.out and "(Delta chi2_support <= 1)" in said.out
    # a support crowded with parameters is said in the run's warnings (the limit lowered to make it so)
    monkeypatch.setattr(search, "SUPPORT_CROWDED", 0.01)
    assert main([*args, "--overwrite"]) == 0
    assert "warning: grid --readout support: the support refit frees" in capsys.readouterr().err


@pytest.mark.slow
def test_kept_solves_on_a_cluster_are_the_local_ones(regularised, tmp_path):
    """On Dask the tasks return the solves the file keeps, and the refit reads them: the same files
    and tables as in this process."""
    from dask.distributed import LocalCluster

    prob, at = regularised, {"inclination": 60.0, "vsini": 40.0}
    tables = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        for where, on in (("local", None), ("dask", search.Cluster(cluster.scheduler_address))):
            solves = tmp_path / f"{where}.jsonl"
            first = search.grid_search(prob, AXES, tmp_path / f"{where}-first.csv", cluster=on, solutions=solves)
            support = search.support_from_point(prob, at, solve=search.read_solutions(solves, prob, AXES)[1])
            search.grid_search(prob, AXES, tmp_path / f"{where}.csv", cluster=on, support=support, solutions=solves)
            # the solves file in the order the points finished (on Dask, not the grid's): its lines as a set
            header, *lines = solves.read_text().splitlines()
            tables[where] = [(tmp_path / f"{where}-first.csv").read_text(), header, sorted(lines),
                             (tmp_path / f"{where}.csv").read_text()]
            assert len(first) == 2
    assert tables["dask"] == tables["local"]
