"""Other tools' result files read as runs: vllm bench serve (the real files in
shared/fixtures/peer-results) and SGLang bench_serving (files built from its documented output fields).
The figures must match what the tools' own summaries say, to the two decimals they print."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from specload.record.reader import read_record
from specload.record.runs import RunReadError, load_run
from specload.report import peers


def shared_peers() -> Path | None:
    candidates = []
    if os.environ.get("SPECLOAD_SHARED"):
        candidates.append(Path(os.environ["SPECLOAD_SHARED"]) / "fixtures" / "peer-results" / "vllm-bench-serve")
    candidates.append(Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "peer-results" / "vllm-bench-serve")
    return next((c for c in candidates if c.is_dir()), None)


PEERS = shared_peers()
needs_fixtures = pytest.mark.skipif(
    PEERS is None, reason="peer-result fixtures not found: set SPECLOAD_SHARED or put shared/ beside the clone"
)
CONCURRENCIES = (1, 4, 16)


def vllm_file(c: int) -> Path:
    assert PEERS is not None
    return PEERS / f"vllm-bench-spec-ngram-c{c}.json"


def two(v: float) -> str:
    return f"{v:.2f}"  # the precision vLLM and SGLang print


@needs_fixtures
@pytest.mark.parametrize("c", CONCURRENCIES)
def test_vllm_summary_matches_its_arrays(c: int) -> None:
    d = json.loads(vllm_file(c).read_text())
    re = peers.recompute_vllm(d)
    printed = [k for k in d if k.endswith("_ms") and any(f"_{m}_" in f"_{k}" for m in ("ttft", "tpot", "itl", "e2el"))]
    assert len(printed) == 4 * 6  # mean, median, std, p50, p90, p99 of each
    for k in [*printed, "output_throughput"]:
        assert two(re[k]) == two(d[k]), k
    assert re["completed"] == d["completed"] and re["failed"] == d["failed"]
    assert re["total_output_tokens"] == d["total_output_tokens"]


@needs_fixtures
@pytest.mark.parametrize("c", CONCURRENCIES)
def test_vllm_file_as_a_run(c: int) -> None:
    path = vllm_file(c)
    d = json.loads(path.read_text())
    run = load_run(str(path))
    assert run.kind == peers.VLLM and run.label == f"vllm-bench-spec-ngram-c{c}"
    assert run.description.tool == "vllm bench serve" and run.description.model == "tiny"
    assert run.description.api == "chat"
    (lv,) = run.levels
    assert lv.concurrency == d["max_concurrency"] == c and lv.n == d["completed"] and lv.n_ok == d["completed"]
    assert np.nansum(lv.output_tokens) == d["total_output_tokens"]
    # the tool's own definitions, recomputed from the columns, give its printed figures
    assert two(float(np.mean(lv.ttft_ms))) == two(d["mean_ttft_ms"])
    assert two(float(np.percentile(lv.ttft_ms, 99))) == two(d["p99_ttft_ms"])
    assert two(float(np.median(lv.e2e_ms))) == two(d["median_e2el_ms"])
    assert two(float(np.nanmean(lv.tpot_ms))) == two(d["mean_tpot_ms"])  # same formula as specload's
    # times start at the first request; each ends at start + latency
    assert lv.start_s is not None and lv.end_s is not None
    assert np.nanmin(lv.start_s) == 0.0 and np.allclose(lv.end_s - lv.start_s, np.array(d["latencies"]))
    # ITL per token: each request's chunk gaps over its mean tokens per chunk, well below vLLM's
    # per-chunk ITL since ngram speculation streams several tokens a chunk
    per_chunk = d["median_itl_ms"]
    per_token = float(np.nanmedian(lv.itl_ms))
    tokens_per_chunk = np.mean([(n - 1) / len(g) for n, g in zip(d["output_lens"], d["itls"], strict=True)])
    assert tokens_per_chunk > 2
    assert per_token == pytest.approx(per_chunk / tokens_per_chunk, rel=0.35)
    # what the file lacks is missing, not empty
    assert run.lacks("server") and run.lacks("events") and run.lacks("crashes")
    notes = " ".join(run.notes)
    assert "per chunk" in notes and "role-only chunk" in notes and "steady state" in notes
    assert "does not match" not in notes
    summary = run.description.config["tool_summary"]
    assert summary["output_throughput"] == d["output_throughput"]


@needs_fixtures
def test_vllm_and_specload_of_the_same_server_agree_where_definitions_do(tmp_path: Path) -> None:
    # the README of the fixtures: both clients' output-token totals equalled the server's counter
    assert PEERS is not None
    for c in CONCURRENCIES:
        v = load_run(str(vllm_file(c)))
        s = read_record(str(PEERS / f"specload-spec-ngram-c{c}.jsonl"))
        assert np.nansum(v.levels[0].output_tokens) == sum(r["output_tokens"] for r in s.requests if r["ok"])


@needs_fixtures
def test_a_summary_that_disagrees_with_its_arrays_is_said(tmp_path: Path) -> None:
    d = json.loads(vllm_file(4).read_text())
    d["mean_ttft_ms"] += 1.0
    p = tmp_path / "edited.json"
    p.write_text(json.dumps(d))
    notes = " ".join(load_run(str(p)).notes)
    assert "does not match its per-request arrays" in notes and "mean_ttft_ms" in notes


@needs_fixtures
def test_vllm_summary_only_file(tmp_path: Path) -> None:
    d = json.loads(vllm_file(4).read_text())
    for k in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors", "generated_texts",
              "queue_times"):
        d.pop(k)
    p = tmp_path / "summary-only.json"
    p.write_text(json.dumps(d))
    run = load_run(str(p))
    (lv,) = run.levels
    assert lv.n == 128 and lv.ttft_ms is None and lv.start_s is None  # missing, not zero
    assert lv.summary is not None and lv.summary.throughput_tok_s == d["output_throughput"]
    assert lv.summary.ttft_ms_p99 == d["p99_ttft_ms"] and lv.summary.e2e_s_p50 == d["median_e2el_ms"] / 1e3
    assert "without --save-detailed" in " ".join(run.notes)


def test_not_a_result_file(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    with pytest.raises(RunReadError, match="not a specload record or a result file"):
        load_run(str(p))
    p.write_text('{"output_throughput": 1, "total_token_throughput": 2, "ttfts": [1, 2], "errors": [""]}')
    with pytest.raises(RunReadError, match="arrays of different lengths"):
        load_run(str(p))


# ------------------------------------------------------------------------------------------ SGLang


def sglang_line(record: Path, concurrency: int, *, fail: bool = False) -> dict:
    """One bench_serving JSONL line with --output-details, built from the documented fields and its
    definitions (bench_serving.calculate_metrics), from a real specload record with chunk times: each
    request's TTFT and chunk gaps, its latency ending a little after its last chunk (the [DONE] line)."""
    reqs = [r for r in read_record(str(record)).requests if r["ok"] and r.get("chunk_ms")]
    rng = np.random.default_rng(concurrency)
    ttfts = [r["ttft_ms"] / 1e3 for r in reqs]
    itls = [list(np.diff(r["chunk_ms"]) / 1e3) for r in reqs]
    lats = [r["chunk_ms"][-1] / 1e3 + rng.uniform(1e-4, 5e-4) for r in reqs]
    lens = [r["output_tokens"] for r in reqs]
    inputs = [r["prompt_tokens"] for r in reqs]
    errors = [""] * len(reqs)
    texts = ["x"] * len(reqs)
    if fail:  # a request refused: SGLang keeps ttft 0, no gaps, output length 0
        ttfts.append(0.0), itls.append([]), lats.append(0.0), lens.append(0), inputs.append(120)
        errors.append("Traceback ...\naiohttp.client_exceptions.ClientConnectorError: Cannot connect to host")
        texts.append("")
    ok = [not e for e in errors]
    duration = max(r["end_s"] for r in reqs) - min(r["start_s"] for r in reqs) + 0.05
    s_ttft = [t for t, o in zip(ttfts, ok, strict=True) if o]
    s_lat = [t for t, o in zip(lats, ok, strict=True) if o]
    s_tpot = [(lat - t) / (n - 1) for t, lat, n, o in zip(ttfts, lats, lens, ok, strict=True) if o and n > 1]
    s_itl = [g for gs, o in zip(itls, ok, strict=True) if o for g in gs]
    ms = lambda f, x: float(f(x)) * 1000  # noqa: E731
    total_out = sum(n for n, o in zip(lens, ok, strict=True) if o)
    return {
        "backend": "sglang-oai-chat", "dataset_name": "random", "request_rate": math.inf,
        "max_concurrency": concurrency, "sharegpt_output_len": None, "random_input_len": 128,
        "random_output_len": 128, "random_range_ratio": 1.0,
        "duration": duration, "completed": sum(ok), "total_input_tokens": sum(i for i, o in zip(inputs, ok, strict=True) if o),
        "total_output_tokens": total_out, "total_output_tokens_retokenized": total_out,
        "request_throughput": sum(ok) / duration, "input_throughput": 0.0, "output_throughput": total_out / duration,
        "mean_e2e_latency_ms": ms(np.mean, s_lat), "median_e2e_latency_ms": ms(np.median, s_lat),
        "std_e2e_latency_ms": ms(np.std, s_lat), "p99_e2e_latency_ms": ms(lambda x: np.percentile(x, 99), s_lat),
        "mean_ttft_ms": ms(np.mean, s_ttft), "median_ttft_ms": ms(np.median, s_ttft),
        "std_ttft_ms": ms(np.std, s_ttft), "p99_ttft_ms": ms(lambda x: np.percentile(x, 99), s_ttft),
        "mean_tpot_ms": ms(np.mean, s_tpot), "median_tpot_ms": ms(np.median, s_tpot),
        "std_tpot_ms": ms(np.std, s_tpot), "p99_tpot_ms": ms(lambda x: np.percentile(x, 99), s_tpot),
        "mean_itl_ms": ms(np.mean, s_itl), "median_itl_ms": ms(np.median, s_itl), "std_itl_ms": ms(np.std, s_itl),
        "p95_itl_ms": ms(lambda x: np.percentile(x, 95), s_itl), "p99_itl_ms": ms(lambda x: np.percentile(x, 99), s_itl),
        "concurrency": sum(s_lat) / duration, "accept_length": None,
        "input_lens": inputs, "output_lens": lens, "ttfts": ttfts, "itls": itls,
        "generated_texts": texts, "errors": errors,
    }


@pytest.fixture
def sglang_file(tmp_path: Path) -> Path:
    if PEERS is None:
        pytest.skip("peer-result fixtures not found: set SPECLOAD_SHARED or put shared/ beside the clone")
    p = tmp_path / "sglang_sweep.jsonl"
    with open(p, "w") as f:  # the tool appends one line per run: a sweep over concurrency
        for c in CONCURRENCIES:
            f.write(json.dumps(sglang_line(PEERS / f"specload-spec-ngram-c{c}.jsonl", c, fail=c == 4)) + "\n")
    assert "Infinity" in p.read_text()  # as json.dumps writes the default request rate
    return p


def test_sglang_sweep_as_one_run(sglang_file: Path) -> None:
    lines = [json.loads(x) for x in sglang_file.read_text().splitlines()]
    run = load_run(str(sglang_file))
    assert run.kind == peers.SGLANG and run.description.api == "chat" and run.description.max_tokens == 128
    assert [lv.concurrency for lv in run.levels] == list(CONCURRENCIES)
    for lv, d in zip(run.levels, lines, strict=True):
        assert lv.n_ok == d["completed"]
        ok_ttft = lv.ttft_ms[lv.ok]
        assert two(float(np.mean(ok_ttft))) == two(d["mean_ttft_ms"])
        assert two(float(np.median(ok_ttft))) == two(d["median_ttft_ms"])
        assert two(float(np.percentile(ok_ttft, 99))) == two(d["p99_ttft_ms"])
        assert lv.summary is not None and lv.summary.throughput_tok_s == d["output_throughput"]
        # no start times or latencies in the file: no timeline; E2E ends at the last chunk, so it is
        # at most SGLang's own latency (which waits for [DONE]) and its TPOT likewise
        assert lv.start_s is None and lv.end_s is None
        assert float(np.nanmax(lv.e2e_ms)) <= d["p99_e2e_latency_ms"] * 1.5
        assert float(np.nanmedian(lv.e2e_ms)) < d["median_e2e_latency_ms"]
        assert float(np.nanmedian(lv.e2e_ms)) == pytest.approx(d["median_e2e_latency_ms"], abs=0.6)
    failed = run.levels[1]
    assert failed.n == lines[1]["completed"] + 1 and failed.error_kind.count("connect") == 1
    assert run.lacks("server") and run.lacks("start_s")
    notes = " ".join(run.notes)
    assert "per chunk" in notes and "no request start times" in notes and "does not match" not in notes


def test_sglang_recomputed_summary_matches(sglang_file: Path) -> None:
    for d in (json.loads(x) for x in sglang_file.read_text().splitlines()):
        re = peers.recompute_sglang(d)
        for k in ("mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "median_itl_ms",
                  "p95_itl_ms", "p99_itl_ms", "output_throughput"):
            assert two(re[k]) == two(d[k]), k


def test_sglang_summary_only_lines(tmp_path: Path) -> None:
    d = {"backend": "sglang", "dataset_name": "random", "request_rate": 8.0, "max_concurrency": 32, "duration": 100.0,
         "completed": 500, "total_output_tokens": 50_000, "output_throughput": 500.0, "mean_e2e_latency_ms": 2000.0,
         "median_e2e_latency_ms": 1900.0, "p99_e2e_latency_ms": 4000.0, "mean_ttft_ms": 90.0,
         "median_ttft_ms": 80.0, "p99_ttft_ms": 300.0, "mean_tpot_ms": 20.0, "median_tpot_ms": 19.0,
         "p99_tpot_ms": 40.0, "mean_itl_ms": 20.0, "median_itl_ms": 18.0, "p99_itl_ms": 60.0, "accept_length": 2.7,
         "total_output_tokens_retokenized": 49_990}
    p = tmp_path / "plain.jsonl"
    p.write_text(json.dumps(d) + "\n")
    run = load_run(str(p))
    (lv,) = run.levels
    assert lv.n == 500 and lv.ttft_ms is None and lv.open_loop  # a rate of 8 req/s: open loop
    assert lv.summary.throughput_tok_s == 500.0 and lv.summary.e2e_s_p99 == 4.0
    assert run.description.api == "generate" and run.description.rate == 8.0
    assert "summary only" in " ".join(run.notes)
    assert run.description.config["tool_summary"]["accept_length"] == 2.7


SECOND = PEERS.parent / "vllm-0.32-cpu-2" if PEERS is not None else None


@needs_fixtures
@pytest.mark.parametrize("name", ["vllm_r1_c1", "vllm_r1_c4", "vllm_spec_c4"])
def test_vllm_level_line_has_gap_input_tokens_acceptance_and_itl_per_token(name: str) -> None:
    # before: the gap per chunk, input tokens and acceptance, all in the file, showed as "-", and
    # itl_ms_avg was the mean of per-request medians (1.56 ms for c1, where per token it is ~2.31)
    assert SECOND is not None
    d = json.loads((SECOND / f"{name}.json").read_text())
    (lv,) = load_run(str(SECOND / f"{name}.json")).levels
    s = lv.summary
    assert s is not None
    # the gap per chunk is vLLM's ITL: its mean exactly, its median within the histogram's bins
    assert s.gap_ms_avg == pytest.approx(d["mean_itl_ms"], abs=0.0011)
    assert s.gap_ms_std == pytest.approx(d["std_itl_ms"], abs=0.0011)
    assert s.gap_ms_p50 == pytest.approx(d["median_itl_ms"], rel=0.006)
    assert s.input_tokens == d["total_input_tokens"]
    assert s.prompt_tokens_avg == pytest.approx(d["total_input_tokens"] / d["completed"], abs=0.001)
    # ITL per token (README): each gap over its request's mean tokens per chunk after the first (at
    # least one), every chunk pooled
    per_token = [g / max(1.0, (n - 1) / len(gaps)) for n, gaps in zip(d["output_lens"], d["itls"], strict=True)
                 for g in gaps]
    assert s.itl_ms_avg == pytest.approx(np.mean(per_token) * 1e3, abs=0.0011)
    assert s.itl_ms_std == pytest.approx(np.std(per_token) * 1e3, abs=0.0011)
    assert s.itl_ms_p50 == pytest.approx(np.median(per_token) * 1e3, rel=0.006)
    if name != "vllm_spec_c4":  # one token a chunk: the decode time over the tokens, within 1 %
        decode = sum(map(sum, d["itls"])) / sum(n - 1 for n in d["output_lens"]) * 1e3
        assert s.itl_ms_avg == pytest.approx(decode, rel=0.01)
        assert s.accept_len is None and s.accept_rate is None
    else:  # the server's acceptance over the run, as vLLM's client counted it
        assert s.accept_len == d["spec_decode_acceptance_length"] == 5.0
        assert s.accept_rate == d["spec_decode_acceptance_rate"] / 100 == 1.0
        assert s.accept_per_pos == tuple(d["spec_decode_per_position_acceptance_rates"])
    # and the table shows them
    from click.testing import CliRunner

    from specload.report.report import report_command

    out = CliRunner().invoke(report_command, [str(SECOND / f"{name}.json")], env={"COLUMNS": "200"}).output  # one part
    row = next(line for line in out.splitlines() if line.startswith(f"{d['max_concurrency']} │"))
    assert f"{s.itl_ms_p50:.2f}/{s.gap_ms_p50:.2f}" in row and f" {round(s.prompt_tokens_avg)} " in row
    assert ("5.00/100%" in row) == (name == "vllm_spec_c4")
