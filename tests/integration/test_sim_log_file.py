"""``specload sim --log-file`` where the file cannot be written: a one-line usage error, also through
``--sim-args``, where the simulator's traceback used to be read as a "SERVER CRASH"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.processes import specload


@pytest.mark.parametrize("where", ["missing", "under-a-file", "a-directory"])
def test_sim_log_file_that_cannot_be_written(tmp_path: Path, where: str) -> None:
    (tmp_path / "file").write_text("")
    path = {"missing": tmp_path / "no" / "x.log", "under-a-file": tmp_path / "file" / "x.log",
            "a-directory": tmp_path}[where]
    res = specload("sim", "--port", "0", "--log-file", str(path))
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "Traceback" not in res.stderr
    assert "--log-file" in res.stderr and str(path) in res.stderr


def test_sim_args_log_file_that_cannot_be_written_is_no_crash(tmp_path: Path) -> None:
    res = specload("run", "-c", "1", "-n", "2", "--max-tokens", "4", "--sim-args", f"--log-file {tmp_path}/no/x.log")
    assert res.returncode == 2, res.stderr
    assert "SERVER CRASH" not in res.stderr and "Traceback" not in res.stderr
    assert res.stderr.strip().count("\n") == 0 and "cannot write --log-file" in res.stderr
