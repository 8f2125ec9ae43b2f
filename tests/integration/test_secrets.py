"""Secrets (API keys, Authorization headers, URL passwords) never reach the record or the screen."""

from __future__ import annotations

import asyncio
import sys

from specload.cli_run import build_config, run_command
from specload.secrets import redact_command
from specload.session import Session
from tests import processes
from tests.conftest import Heard
from tests.integration.conftest import free_port

KEY = "sk-SECRET-0123456789"


def test_redact_command_hides_values_of_secret_flags_only() -> None:
    cmd = "HF_TOKEN=hf_x vllm serve m --api-key sk-1 --max-tokens 9 --tokenizer t --hf-token=abc"
    assert redact_command(cmd) == "HF_TOKEN=*** vllm serve m --api-key *** --max-tokens 9 --tokenizer t --hf-token=***"


async def test_key_in_env_header_url_and_server_log_is_never_recorded(tmp_path, monkeypatch) -> None:
    # the launched "server" prints its arguments, API key included, as vLLM does at start-up
    monkeypatch.setenv("MY_KEY", KEY)
    port = free_port()
    rec = tmp_path / "r.jsonl"
    launch = (f"echo 'args: api_key={KEY}'; SIM_API_KEY={KEY} {sys.executable} -m specload.sim --port {port} "
              f"--ttft-ms 1 --itl-ms 1")
    params = dict(run_command.make_context("run", [
        f"http://user:pw-{KEY}@127.0.0.1:{port}", "--launch", launch, "--api-key-env", "MY_KEY",
        "--header", f"X-Api-Key: {KEY}", "-c", "1", "-n", "2", "--max-tokens", "4", "--record", str(rec),
    ]).params)
    cfg = build_config(params, ui=False)
    assert "@" not in cfg.target.url  # the URL's password moved into a (redacted) header
    heard = Heard()
    session = Session(cfg, listener=heard.listener)
    await asyncio.wait_for(session.run(), 60)
    text = rec.read_text()
    assert KEY not in text and "pw-" not in text
    assert heard.of("notice") and all(KEY not in str(n) for n in heard.calls)
    assert all(KEY not in line for _, line in session.log_lines)
    assert any("args: api_key=***" in line for _, line in session.log_lines)


def test_url_passwords_in_other_options_are_masked(tmp_path) -> None:
    """--metrics-url and log commands may carry a URL password: not in the record, not on screen."""
    rec = tmp_path / "m.jsonl"
    p = processes.run(
        [sys.executable, "-m", "specload.cli", "run", "-c", "1", "-n", "2", "--max-tokens", "4",
         "--metrics-url", "http://scraper:hunter2-pw@127.0.0.1:1/metrics",
         "--server-log-cmd", "curl -sN http://admin:hunter2-log@127.0.0.1:1/logs",
         "--sim-args", "--ttft-ms 1 --itl-ms 1 --quiet", "--record", str(rec)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    text = rec.read_text()
    for secret in ("hunter2-pw", "hunter2-log"):
        assert secret not in text and secret not in p.stderr and secret not in p.stdout
    # the URLs themselves stay readable, password masked
    assert "http://scraper:***@127.0.0.1:1/metrics" in text and "http://admin:***@127.0.0.1:1/logs" in text
