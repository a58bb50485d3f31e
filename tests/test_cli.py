import json

from dopplermap.cli import main


def test_demo_small_runs_and_writes_summary(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--n-cell", "300", "--out", str(out), "--no-plots", "--quiet"])
    assert rc == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["n_cell"] == 300 and s["n_epoch"] == 150 and s["n_vel"] == 32
    assert s["iterations"] > 0 and s["chi2"] > 0
    assert "chi2" in capsys.readouterr().out


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
