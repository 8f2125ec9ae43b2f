"""``specload sweep`` and ``report DIR`` given bad options, plans or folders: one line, exit 2, before
any server starts (the command in-process: nothing is launched on these paths)."""

from __future__ import annotations

import json

import pytest

from specload.cli import main

LAUNCH = "srv --port {port} {args}"


def _fails(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    err = capsys.readouterr().err
    assert e.value.code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(("args", "message"), [
    (("--config", "a=x"), "--launch 'CMD ... {args}' is needed"),
    (("--launch", "srv {port}", "--config", "a="), "needs {args}"),
    (("--launch", "srv --port 8000 {args}", "--config", "a="), "has no {port}"),
    (("--launch", LAUNCH), "no configurations"),
    (("--launch", LAUNCH, "--config", "a=", "--config", "a=-x"), "two configurations are called 'a'"),
    (("--launch", LAUNCH, "--config", "a=", "--baseline", "b"), "--baseline 'b' is none of the configurations"),
    (("--launch", LAUNCH, "--config", "noequals"), "expected NAME='ARGS'"),
    (("--launch", LAUNCH, "--grid", "topk"), "expected KEY=V1,V2"),
    (("--launch", LAUNCH, "--config", "a=", "-c", "0"), "concurrency level 0 must be at least 1"),
    (("--launch", LAUNCH, "--config", "a=", "--max-tokens", "0"), "--max-tokens"),
    (("--launch", LAUNCH, "--config", "a=", "--record", "x.jsonl"), "No such option '--record'"),
])
def test_bad_options_are_one_line(capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str) -> None:
    assert message in _fails(capsys, "sweep", *args)


def test_bad_plans_and_folders(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("launch = [")
    assert "is not a TOML plan" in _fails(capsys, "sweep", str(bad))
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(f'launch = "{LAUNCH}"\nfrobnicate = 3\n')
    assert "'frobnicate' is not an option" in _fails(capsys, "sweep", str(unknown))
    assert "no such folder" in _fails(capsys, "sweep", "--resume", str(tmp_path / "none"))
    assert "holds no sweep" in _fails(capsys, "sweep", "--resume", str(tmp_path))
    (tmp_path / "sweep.json").write_text('{"not": "a sweep"}')
    assert "is not a sweep's state" in _fails(capsys, "sweep", "--resume", str(tmp_path))
    assert "give no other options" in _fails(capsys, "sweep", "--resume", str(tmp_path), "-c", "4")
    assert "is not a sweep's state" in _fails(capsys, "report", str(tmp_path))
    assert "give it alone" in _fails(capsys, "report", str(tmp_path), "--csv")


def test_a_plan_file_is_read_as_its_options(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """The plan's words and the command line's after it make one command: the plan's configurations
    with the command line's baseline; a folder that holds a sweep is not written over."""
    plan = tmp_path / "p.toml"
    plan.write_text(f'launch = "{LAUNCH}"\n[configs]\nbase = "-np 2"\nspec = "-np 4"\n')
    out = tmp_path / "sw"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"specload_sweep": 1}))
    with pytest.raises(SystemExit) as e:
        main(["sweep", str(plan), "--baseline", "nope", "--out", str(out)])
    assert e.value.code == 2 and "none of the configurations (base, spec)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["sweep", str(plan), "--out", str(out)])
    assert e.value.code == 1 and "holds a sweep already" in capsys.readouterr().err
