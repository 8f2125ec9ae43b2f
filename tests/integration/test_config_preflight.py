"""The configuration sits at the bottom: built in code it imports nothing but data, and what needs the
disk or another layer is checked once, by the preflight, before anything is sent."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import orjson

from tests import processes

SPECLOAD = [sys.executable, "-m", "specload.cli"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def test_a_config_built_in_code_imports_nothing_but_data() -> None:
    code = (
        "import sys\n"
        "from specload.config import RunConfig\n"
        "from specload.stats.slo import parse_slo\n"
        "cfg = RunConfig.of('http://127.0.0.1:9', concurrency=(1, 4), requests_per_level=40, max_tokens='64:16',\n"
        "                   target_ci_pct=5.0, repeat=2, slo=parse_slo('ttft_p99<=500ms'), path='run.jsonl')\n"
        "assert [lv.concurrency for lv in cfg.plan.levels] == [1, 1, 4, 4], cfg.plan\n"
        "cfg.describe()\n"
        "layers = ('specload.engine', 'specload.record', 'specload.report', 'specload.sim', 'specload.session',\n"
        "          'specload.watch', 'specload.ui', 'click', 'textual', 'aiohttp')\n"
        "print([m for m in sys.modules if any(m == x or m.startswith(x + '.') for x in layers)])\n"
    )
    p = processes.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=ENV)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", p.stdout


def test_schedule_from_a_record_without_levels_is_a_usage_error_before_any_load(tmp_path: Path) -> None:
    # a record cut short before its first level: a run header and nothing to replay (issue 22: a traceback,
    # after the server had been probed)
    rec = tmp_path / "cut.jsonl"
    rec.write_bytes(orjson.dumps({"type": "run", "version": 1, "target": "http://127.0.0.1:9", "api": "chat"}) + b"\n")
    with socket.socket() as server:  # the target: any connection to it would be a probe or a request
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        p = processes.run([*SPECLOAD, "run", url, "--schedule-from", str(rec), "--record", str(tmp_path / "out.jsonl")],
                           capture_output=True, text=True, timeout=60, env=ENV)
        try:
            server.accept()
            connected = True
        except BlockingIOError:
            connected = False
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"--schedule-from {rec}: the record has no level events to replay" in p.stderr
    assert not connected
    assert not (tmp_path / "out.jsonl").exists() or (tmp_path / "out.jsonl").stat().st_size == 0
