import json
import re

from dopplermap.cli import main


def test_demo_small_runs_and_writes_summary(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--n-cell", "300", "--out", str(out), "--no-plots", "--no-report"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["n_cell"] == 300 and s["n_epoch"] == 150 and s["n_vel"] == 32
    assert s["iterations"] > 0 and s["chi2"] > 0
    cap = capsys.readouterr()
    assert "chi2" in cap.out
    # stderr is not a terminal: one plain line per stage, with its time, no redraws
    err = cap.err.splitlines()
    assert [line.split()[1] for line in err] == ["simulate", "precompute", "compile", "write"], err
    for line in err:
        assert re.match(r"✓ .+ \d+\.\d\d s\b", line) and "\r" not in line and "\x1b" not in line, line
    assert f"iteration {s['iterations']}/" in err[2]


def test_bare_command_prints_the_help(capsys):
    assert main([]) in (0, 2)  # as click does (2 from click 8.2)
    cap = capsys.readouterr()
    assert cap.out.startswith("Usage: dopplermap") and "Commands:" in cap.out and "invert" in cap.out
    assert "error:" not in cap.err and "error:" not in cap.out


def test_grid_help_names_every_grid_parameter(capsys):
    from dopplermap import search
    from dopplermap.choices import GRID_PARAMETERS

    assert main(["grid", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in GRID_PARAMETERS), text
    assert search.GRID_PARAMETERS is GRID_PARAMETERS  # the search accepts what the help lists


def test_quiet_on_every_command(capsys):
    from dopplermap.cli import group

    for name, cmd in _commands(group):
        opts = {o for p in cmd.params for o in getattr(p, "opts", ())}
        assert {"-q", "--quiet"} <= opts, name
        assert main([*name.split(), "-q", "--help"]) == 0, name
        assert "-q, --quiet" in capsys.readouterr().out, name


def test_user_error_is_one_line(tmp_path, capsys):
    rc = main(["demo", "--snr", "-5", "--n-cell", "300", "--out", str(tmp_path / "x"), "--no-plots", "--quiet"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "snr" in err[0]


def test_version(capsys):
    assert main(["--version"]) == 0
    assert "dopplermap, version" in capsys.readouterr().out


def _commands(group, prefix=""):
    """``(name, command)`` of every command under the click group, subgroups included."""
    import click

    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", cmd


def test_one_word_for_replacing_an_output():
    """No command takes ``--force``; every flag that replaces an existing output is
    ``--overwrite`` (and nothing else), and every command writing an ``--out`` or a path has one."""
    import re

    import click

    from dopplermap.cli import group

    replaces = re.compile(r"\b(overwrite|replace|clobber)", re.IGNORECASE)
    commands = dict(_commands(group))
    assert {"init", "import-zdipy", "invert", "demo", "report"} <= set(commands)
    bad = []
    for name, cmd in commands.items():
        options = [p for p in cmd.params if isinstance(p, click.Option)]
        words = [o for p in options for o in p.opts + p.secondary_opts]
        if "--force" in words or "-f" in words:
            bad.append(f"{name}: has --force/-f")
        for p in options:
            if p.is_flag and replaces.search(p.help or "") and (p.opts, p.secondary_opts, p.name) != (
                    ["--overwrite"], [], "overwrite"):
                bad.append(f"{name}: output-replacing flag {p.opts + p.secondary_opts} is not --overwrite")
        if ("--out" in words or name == "init") and "--overwrite" not in words:
            bad.append(f"{name}: writes an output but has no --overwrite")
    assert not bad, "\n".join(bad)


def test_init_and_import_zdipy_refuse_force(tmp_path, capsys):
    import re

    p = tmp_path / "target.toml"
    assert main(["init", str(p)]) == 0
    assert main(["init", str(p), "--force"]) == 2
    assert re.search(r"no such option\W+--force", capsys.readouterr().err, re.IGNORECASE)
    assert main(["init", str(p), "--overwrite"]) == 0
    assert main(["import-zdipy", str(tmp_path / "inzdi.dat"), "--force"]) == 2
    assert re.search(r"no such option\W+--force", capsys.readouterr().err, re.IGNORECASE)


def test_a_missing_dependency_is_one_line_not_a_bug_report(monkeypatch, capsys):
    """A third-party package missing from the environment is named in one line (exit 2); a module
    of dopplermap's own that cannot be found stays a bug (exit 1, traceback)."""
    import dopplermap.cli as cli

    def missing(name):
        def command(*args, **kwargs):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return command

    monkeypatch.setattr(cli.group, "main", missing("jax._src"))
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'jax' is not installed" in err and "internal error" not in err, err
    monkeypatch.setattr(cli.group, "main", missing("dopplermap.forms.gone"))
    assert main(["demo"]) == 1
    assert "internal error" in capsys.readouterr().err
