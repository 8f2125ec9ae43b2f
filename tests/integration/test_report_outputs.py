"""``specload report ... --html/--plot`` and peer files through the CLI, as a user runs them: real
records made against the simulator, real subprocesses, the files checked."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from tests.processes import specload
from tests.unit.test_peers import PEERS, needs_fixtures

# one worker runs this module: its fixture is set up once (xdist --dist loadgroup)
pytestmark = pytest.mark.xdist_group("report_outputs")


SIM = "--ttft-ms 5 --itl-ms 2 --spec-tokens 0 --seed {seed}"


@pytest.fixture(scope="module")
def two_records(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("records")
    out = []
    for label, itl, seed in (("base", 2, 1), ("slower", 3, 2)):
        rec = d / f"{label}.jsonl"
        p = specload("run", "-c", "1,4", "-n", "24", "--max-tokens", "24", "--ignore-eos", "--label", label,
                     "--record", str(rec), "--sim-args", f"--ttft-ms 5 --itl-ms {itl} --spec-tokens 0 --seed {seed}")
        assert p.returncode == 0, p.stderr[-800:]
        out.append(rec)
    return out[0], out[1]


@pytest.mark.slow
def test_html_and_plot_of_a_comparison(two_records: tuple[Path, Path], tmp_path: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:  # not imported here: it would grow this process
        pytest.skip('matplotlib is the [report] extra: pip install "specload[report]"')
    base, slower = two_records
    html, png = tmp_path / "cmp.html", tmp_path / "cmp.png"
    p = specload("report", str(base), str(slower), "--html", str(html), "--plot", str(png))
    assert p.returncode == 0, p.stderr[-800:]
    assert f"wrote {html}" in p.stderr and f"wrote {png}" in p.stderr
    assert "C=" in p.stdout  # the comparison table is printed as well
    text = html.read_text()
    data = json.loads(text.split('<script id="specload-data" type="application/json">', 1)[1].split("</script>", 1)[0])
    labels = [s["label"] for s in data["series"]]
    assert labels == ["base", "slower"] and data["baseline"] == "base"
    # the table carries ratios and verdicts against the baseline
    assert 'class="verdict ' in text and "×" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 30_000


def test_html_of_one_run_with_its_command_masked(tmp_path: Path) -> None:
    rec = tmp_path / "one.jsonl"
    env = dict(os.environ, MY_API_KEY="sk-secret-123")
    p = specload("run", "-c", "2", "-n", "10", "--max-tokens", "16", "--record", str(rec), "--api-key-env",
                 "MY_API_KEY", "--header", "X-Api-Key: hdr-secret-456", "--sim-args", SIM.format(seed=3), env=env)
    assert p.returncode == 0, p.stderr[-800:]
    html = tmp_path / "one.html"
    p = specload("report", str(rec), "--html", str(html))
    assert p.returncode == 0, p.stderr[-800:]
    text = html.read_text()
    assert "specload run -c 2 -n 10" in text  # the command, as given ...
    assert "hdr-secret-456" not in text and "sk-secret-123" not in text  # ... with its secrets masked
    assert "X-Api-Key: ***" in text


@needs_fixtures
def test_vllm_file_as_a_report(tmp_path: Path) -> None:
    assert PEERS is not None
    f = PEERS / "vllm-bench-spec-ngram-c4.json"
    p = specload("report", str(f))
    assert p.returncode == 0, p.stderr[-800:]
    assert "vllm bench serve" in p.stdout and "128/128" in p.stdout
    assert "2493.48 tok/s" in p.stdout  # vLLM's own summary, as it printed it
    assert "per chunk" in p.stdout  # the note on its ITL
    html = tmp_path / "vllm.html"
    p = specload("report", str(PEERS / "specload-spec-ngram-c4.jsonl"), str(f), "--html", str(html))
    assert p.returncode == 0, p.stderr[-800:]
    text = html.read_text()
    assert "vllm bench serve&#x27;s own summary" in text and "role-only chunk" in text


def test_bad_outputs_fail_at_once_in_one_line(two_records: tuple[Path, Path], tmp_path: Path) -> None:
    base, _ = two_records
    p = specload("report", str(base), "--plot", str(tmp_path / "x.pdf"))
    assert p.returncode == 2 and p.stderr.strip().endswith("the file must end in .png or .svg")
    p = specload("report", str(base), "--html", str(tmp_path / "nowhere" / "x.html"))
    assert p.returncode == 2 and "does not exist" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    # without matplotlib: the one-line error names the extra
    (tmp_path / "matplotlib.py").write_text("raise ImportError('not here')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    p = specload("report", str(base), "--plot", str(tmp_path / "x.png"), env=env)
    assert p.returncode == 2
    assert p.stderr.strip() == ('specload report: --plot needs matplotlib, which is not installed: '
                                'pip install "specload[report]"')
    assert "Traceback" not in p.stderr


async def _vllm_error(url: str, timeout: float | None = None) -> str:
    """The error text vLLM's client keeps for a failed request: the aiohttp exception, formatted as
    ``traceback.format_exception`` writes it (``lib/endpoint_request_func.py``)."""
    import traceback

    import aiohttp

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.post(url=url, json={"model": "tiny", "stream": True}) as response:
                await response.read()
    except (aiohttp.ClientError, TimeoutError):
        return "".join(traceback.format_exception(*sys.exc_info()))
    raise AssertionError("the request did not fail")


@needs_fixtures
async def test_vllm_errors_are_classified_by_their_exception(tmp_path: Path) -> None:
    # before: the word "timeout" among a traceback's frames (aiohttp's connector passes a 'timeout'
    # parameter) made every "Cannot connect to host" a timeout
    import asyncio
    import socket

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)  # never answers; the client's timeout ends it

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        writer.close()

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    quiet = await asyncio.start_server(silent, "127.0.0.1", 0)
    rude = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    try:
        errors = [
            await _vllm_error(f"http://127.0.0.1:{closed}/v1/chat/completions"),
            await _vllm_error(f"http://127.0.0.1:{quiet.sockets[0].getsockname()[1]}/v1/chat/completions", 0.2),
            await _vllm_error(f"http://127.0.0.1:{rude.sockets[0].getsockname()[1]}/v1/chat/completions"),
        ]
    finally:
        quiet.close()
        rude.close()
    assert "Cannot connect to host" in errors[0] and "timeout" in errors[0]  # the word, in a frame
    d = json.loads((PEERS.parent / "vllm-0.32-cpu-2" / "vllm_r1_c4.json").read_text())
    for i, text in enumerate([*errors, "Internal Server Error"]):  # vLLM's record of a failed request
        d["errors"][i], d["output_lens"][i], d["ttfts"][i], d["itls"][i], d["latencies"][i] = text, 0, 0.0, [], 0.0
    path = tmp_path / "vllm_failed.json"
    path.write_text(json.dumps(d))
    p = specload("report", str(path), "--json")
    assert p.returncode == 0, p.stderr[-800:]
    (level,) = json.loads(p.stdout)["levels"]
    assert level["errors"] == {"connect": 1, "timeout": 1, "disconnect": 1, "http": 1}
