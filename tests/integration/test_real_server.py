"""specload against a real inference server: llama.cpp's ``llama-server`` with the tiny model (issue #5).

Every test runs the real CLI (``python -m specload.cli run ...``) as a subprocess and judges it by what
it wrote: the ``--json`` summary on stdout and the ``--record`` JSONL file. The expected values come
from the server itself (its ``usage``, its per-request ``timings``, its ``/metrics`` counters, its
log), never from specload, so a test fails when specload measures or counts wrongly.

Two ways of starting the server, each where it fits:

- through specload's own ``--launch`` (ramp, /metrics and log parsing, rejections): what users do;
  specload starts the server, reads its output, stops it at the end;
- by the test itself (``OwnServer``) when the test must scrape ``/metrics`` before and after
  specload's run (the server's counters are the truth for acceptance and request counts), read the
  server's whole log, or signal the server mid-run (SIGKILL, SIGTERM); specload then gets the URL
  and ``--server-log``.

The specload bugs these tests found (stale connections retried on another stale one, the last
log lines unread at the end, no /metrics scrape at the end) are fixed; the tests assert the fixed
behaviour.

Bounded: every load has a request count and/or duration and every subprocess a timeout; the
file runs in about half a minute on two shared cores. Skipped with a reason when ``shared/real-server/llama-server`` is absent.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.conftest import free_port
from tests.integration.real_server_util import (
    OwnServer,
    SpecloadProcess,
    http_get,
    llama_cmd,
    record_requests,
    require_real_server,
    run_specload,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(150)]


def burst_itl(cm: list[float]) -> list[float]:
    """Per-token ITL of one-token chunks: the gap before each burst of equal arrival times, shared."""
    out: list[float] = []
    prev, i, n = cm[0], 1, len(cm)
    while i < n and cm[i] == prev:
        i += 1
    while i < n:
        t, j = cm[i], i
        while j < n and cm[j] == t:
            j += 1
        out += [(t - prev) / (j - i)] * (j - i)
        prev, i = t, j
    return out

SPEC = ("--spec-type", "ngram-mod")

# Per-request TPOT tolerance against the server's own timings.predicted_per_token_ms. llama-server
# divides predicted_ms (first token -> last token) by n-1 exactly as specload's TPOT does, so the two
# differ only by when the client *read* the first and the last token: a client or server-thread
# scheduling delay of a few ms on two shared cores (the first chunk sent or read late shrinks the
# span). With ~0.2-1 ms per token, 32 tokens decode in only 7-30 ms, so such a delay is large
# relative to it: the median over all requests of the decode span (TTFT -> last token) must be within
# 20 % or 10 ms of the server's predicted_ms (6 ms was exceeded once, 6.66 ms, in a full suite on a
# 2-core machine with other suites running), and at least 3 requests in 4 within 25 % or 1 ms per token
# of the server's TPOT. A systematic error (TTFT counted in, seconds for ms) moves every request by
# far more. Single requests may not agree: a run where llama-server delivered most first chunks a
# few ms late (seen once in ~100 runs: median TPOT ratio 0.46 at 0.235 ms per token) and a fresh-
# clone CI run where one request's 32 chunks all arrived in one read (client TPOT 0, server 1.28
# ms: its HTTP thread had not run while the model thread generated) are real deliveries, not errors.
TPOT_REL_TOL = 0.25
TPOT_ABS_TOL_MS = 1.0
SPAN_REL_TOL = 0.2
SPAN_ABS_TOL_MS = 10.0
# Timings are printed with 3 decimals in the record (ms).
ROUNDING_MS = 0.002


@pytest.fixture(autouse=True)
def _real_server_present() -> None:
    require_real_server()


def _launch_args(port: int, *extra: str, ctx: int = 32768, threads: int = 1) -> list[str]:
    return ["--launch", llama_cmd(port, *extra, ctx=ctx, threads=threads)]


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def _assert_launched_server_gone(run) -> None:  # type: ignore[no-untyped-def]
    assert run.launched_pids, f"specload did not report the launched server; {run.describe()}"
    for pid in run.launched_pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


# --------------------------------------------------------------------------------------------------
# 1. a headless ramp over chat and completions


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_ramp_token_counts_and_timings_match_the_server(api: str, tmp_path: Path) -> None:
    """-c 1,4 -n 8 --max-tokens 32: counts equal the server's usage/timings; TTFT/TPOT agree with its timings."""
    port = free_port()
    # Two model threads here (REPORT.md's command), unlike the other tests: with one and a busy
    # second core, the whole 32-token decode (~7 ms at C=4) often finished before llama-server's
    # HTTP thread ran, so a request's chunks arrived in one read (client TPOT 0 against the
    # server's 1.3 ms; 1 run in 5 failed). Two threads pace the chunks as generated; they are
    # slower when the cores are busy (up to ~30 s for this test with a CPU hog), which the
    # timeouts allow.
    run = run_specload(
        _url(port), *_launch_args(port, threads=2), "--api", api, "-c", "1,4", "-n", "8", "--max-tokens", "32",
        workdir=tmp_path, timeout=90,
    )  # fmt: skip
    assert run.returncode == 0, run.describe()
    s = run.summary
    assert s is not None and s["reason"] == "completed" and s["api"] == api and s["model"] == "tiny"
    assert (s["requests"], s["ok"], s["errors"]) == (16, 16, {}), run.describe()
    assert [(lv["concurrency"], lv["requests"], lv["ok"], lv["output_tokens"]) for lv in s["levels"]] == [
        (1, 8, 8, 256),
        (4, 8, 8, 256),
    ]
    for lv in s["levels"]:
        assert lv["tokens_estimated"] is False
        assert lv["throughput_tok_s"] == pytest.approx(lv["output_tokens"] / lv["wall_s"], rel=0.01)
    _assert_launched_server_gone(run)

    reqs = record_requests(run)
    assert len(reqs) == 16 and all(r["ok"] for r in reqs)
    span_pairs: list[tuple[float, float]] = []
    tpot_outliers: list[tuple[float, float]] = []
    for r in reqs:
        t = r.get("server_timings")
        assert t is not None, f"llama-server sends timings in its final chunk; request {r['id']} has none"
        # The tiny model never stops early: every request runs to max_tokens.
        assert r["finish_reason"] == "length"
        assert r["output_tokens"] == 32 == t["predicted_n"], r
        assert r["tokens_estimated"] is False
        assert r["prompt_tokens"] == t["prompt_n"] + t["cache_n"], r
        # Without speculation llama-server streams one chunk per token.
        assert r["chunks"] == r["output_tokens"], r
        # TTFT contains the server's prompt processing: the first token cannot come earlier.
        assert r["ttft_ms"] >= t["prompt_ms"] - ROUNDING_MS, r
        assert r["ttft_ms"] <= r["e2e_ms"]
        server_tpot = t["predicted_per_token_ms"]
        if abs(r["tpot_ms"] - server_tpot) > max(TPOT_REL_TOL * server_tpot, TPOT_ABS_TOL_MS):
            tpot_outliers.append((r["tpot_ms"], server_tpot))
        span_pairs.append((r["e2e_ms"] - r["ttft_ms"], t["predicted_ms"]))
        # The client sent the request before the server started it and read the last token after
        # the server made it: its E2E holds the server's prompt and decode time.
        assert r["e2e_ms"] >= t["prompt_ms"] + t["predicted_ms"] - ROUNDING_MS, r
    span_gap = statistics.median(abs(a - b) for a, b in span_pairs)
    span = statistics.median(b for _, b in span_pairs)
    assert span_gap <= max(SPAN_REL_TOL * span, SPAN_ABS_TOL_MS), span_pairs
    assert len(tpot_outliers) <= len(reqs) // 4, tpot_outliers

    assert run.record is not None and run.record.end is not None
    assert run.record.end["reason"] == "completed" and run.record.end["requests"] == 16


# --------------------------------------------------------------------------------------------------
# 2. speculative decoding: token counts, bursts, acceptance vs the server's counters


def test_speculative_decoding_counts_bursts_and_acceptance(tmp_path: Path) -> None:
    """ngram-mod speculation: usage-based counts, burst-aware ITL, acceptance equal to the counters.

    Design: the test starts llama-server itself, so it can scrape /metrics right before and right
    after specload's run; the counter deltas are the truth. specload's own view is (a) its /metrics
    samples (per-scrape deltas, at most one per second, and no final scrape at the end: a sum of
    them can only fall short of the truth, never exceed it) and (b) the per-request
    ``draft acceptance`` log lines it parses from --server-log. The levels last >= 3 s in all so
    that specload takes scrapes with drafts in them.
    """
    with OwnServer(tmp_path / "server.log", *SPEC) as srv:
        before = srv.metrics()
        run = run_specload(
            srv.url, "--server-log", str(srv.log_path), "--api", "chat", "-c", "2,4", "-d", "1.6",
            "--max-requests", "800", "--max-tokens", "128", "--record-chunks", workdir=tmp_path, timeout=60,
        )  # fmt: skip
        after = srv.metrics()
    assert run.returncode == 0, run.describe()
    reqs = record_requests(run)
    assert reqs and all(r["ok"] for r in reqs), Counter(str(r["error"]) for r in reqs if not r["ok"])

    def delta(name: str) -> float:
        return after[f"llamacpp:{name}"] - before[f"llamacpp:{name}"]

    # Token counts: from usage, equal to the server's own count, whatever the chunking.
    assert sum(r["output_tokens"] for r in reqs) == delta("tokens_predicted_total")
    zero_gap_share = []
    itl_p50s = []
    for r in reqs:
        assert r["output_tokens"] == 128 == r["server_timings"]["predicted_n"] and not r["tokens_estimated"]
        cm = r["chunk_ms"]
        assert len(cm) == r["chunks"]
        # llama-server (ngram-mod) still sends one token per chunk; the drafts arrive as bursts.
        assert r["chunks"] == r["output_tokens"], "llama-server sent several tokens in one chunk"
        assert abs(cm[0] - r["ttft_ms"]) <= ROUNDING_MS and abs(cm[-1] - r["e2e_ms"]) <= ROUNDING_MS
        gaps = [b - a for a, b in zip(cm, cm[1:], strict=False)]
        # TPOT is the mean per-token gap ...
        assert r["tpot_ms"] == pytest.approx((cm[-1] - cm[0]) / (r["output_tokens"] - 1), abs=ROUNDING_MS)
        # ... and the per-token ITL shares the gap before a burst (chunks read together) among its
        # tokens (here one per chunk), so a verify step's tokens arriving at once are not 0 gaps.
        itl = burst_itl(cm)
        if not itl:  # the whole answer arrived in one read: no gap to speak of
            assert r["itl_ms_p50"] is None
            continue
        assert r["itl_ms_p50"] == pytest.approx(statistics.median(itl), abs=ROUNDING_MS * 2)
        zero_gap_share.append(sum(g <= ROUNDING_MS for g in gaps) / len(gaps))
        itl_p50s.append(r["itl_ms_p50"])
    # Bursts: accepted drafts reach the client together, so many raw chunk gaps are ~0, while the
    # per-token ITL (checked against the chunk times above) shares each burst's gap among its tokens
    # and never collapses to 0. Its ratio to TPOT is the server's and the scheduler's, not asserted:
    # a median of 0.05 on a quiet machine, 3.4 in a CI run on two busy cores, where the client read
    # most of an answer with its first token.
    assert all(p > 0 for p in itl_p50s), itl_p50s
    assert statistics.median(zero_gap_share or [1.0]) > 0.05, zero_gap_share

    # Acceptance, the server's truth over the run.
    drafts, draft_tokens, accepted = (
        delta("spec_decode_num_drafts_total"),
        delta("spec_decode_num_draft_tokens_total"),
        delta("spec_decode_num_accepted_tokens_total"),
    )
    assert drafts > 0 and draft_tokens > 0, "ngram-mod drafted nothing on the tiny model's repeating output"
    true_len = 1 + accepted / drafts
    true_rate = accepted / draft_tokens

    # (a) specload's /metrics view: each sample is internally right, the sums never exceed the truth.
    msamples = [
        s for s in run.record.servers if s["source"] == "metrics" and s.get("extra", {}).get("drafts")
    ]
    assert msamples, f"specload recorded no /metrics sample with drafts in a {run.elapsed_s:.1f} s run"
    for s in msamples:
        x = s["extra"]
        assert s["accept_len"] == pytest.approx(1 + x["accepted_tokens"] / x["drafts"])
        assert s["accept_rate"] == pytest.approx(x["accepted_tokens"] / x["draft_tokens"])
    m_drafts = sum(s["extra"]["drafts"] for s in msamples)
    m_accepted = sum(s["extra"]["accepted_tokens"] for s in msamples)
    m_draft_tokens = sum(s["extra"]["draft_tokens"] for s in msamples)
    assert m_drafts <= drafts and m_accepted <= accepted and m_draft_tokens <= draft_tokens
    assert 1 + m_accepted / m_drafts == pytest.approx(true_len, rel=0.15)
    assert m_accepted / m_draft_tokens == pytest.approx(true_rate, abs=0.05)

    # (b) the per-request log lines: one per request that drafted; specload reads the log to its end
    # before it stops, so their sums are exactly the counters' deltas.
    spec_lines = [
        s for s in run.record.servers if s["source"] == "log:llamacpp" and s["extra"]["kind"] == "spec"
    ]
    assert spec_lines, "no 'draft acceptance' log line parsed"
    l_accepted = sum(s["extra"]["accepted_tokens"] for s in spec_lines)
    l_drafted = sum(s["extra"]["drafted_tokens"] for s in spec_lines)
    l_steps = sum(
        s["extra"]["accepted_tokens"] / (s["accept_len"] - 1) for s in spec_lines if s["accept_len"] > 1
    )
    assert srv.log_text().count("draft acceptance") == len(spec_lines), "draft lines not read"
    assert (l_accepted, l_drafted) == (accepted, draft_tokens)
    assert l_steps == pytest.approx(drafts, rel=0.02)  # mean len is printed with 2 decimals
    assert all(s["accept_rate"] == pytest.approx(s["extra"]["accepted_tokens"] / s["extra"]["drafted_tokens"],
                                                 abs=1e-4) for s in spec_lines)  # fmt: skip


# --------------------------------------------------------------------------------------------------
# 3. /metrics scraping of llamacpp:* and the server's log lines as server stats


@pytest.mark.slow
def test_metrics_and_log_stats_of_a_launched_server(tmp_path: Path) -> None:
    """llamacpp:* gauges and counters become server samples; 'eval time' lines match each request's timings."""
    port = free_port()
    # 12 concurrent requests on 8 slots: 4 wait as "deferred". llama-server's gauge reads 0 for a
    # moment whenever slots free up (about a quarter of the time at C=12, polled here), so one
    # scrape a second over a 2 s level may miss it: scrape every 0.2 s instead.
    run = run_specload(
        _url(port), *_launch_args(port), "--api", "completions", "-c", "1,12", "-d", "2.2",
        "--metrics-interval", "0.2",
        "--max-requests", "600", "--max-tokens", "64", workdir=tmp_path, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.describe()
    reqs = record_requests(run)
    assert reqs and all(r["ok"] for r in reqs)
    servers = run.record.servers

    metrics = [s for s in servers if s["source"] == "metrics"]
    assert len(metrics) >= 10, f"only {len(metrics)} /metrics samples in a {run.elapsed_s:.1f} s run"
    assert all(s["extra"]["engine"] == "llamacpp" for s in metrics)
    # requests_processing / requests_deferred -> running / queued on every sample
    assert all("running" in s and "queued" in s for s in metrics)
    assert all(0 <= s["running"] <= 8 and s["queued"] >= 0 for s in metrics)
    assert max(s["running"] for s in metrics) >= 1, "no scrape saw a request processing"
    assert max(s["queued"] for s in metrics) >= 1, "no scrape saw a deferred request at C=12 on 8 slots"
    # tokens_predicted_total -> gen_tok_s per interval: the tokens it accounts for cannot exceed
    # what the requests received (no final scrape: the last interval is missing), and are > 0.
    rated = [s for s in metrics if s.get("gen_tok_s") is not None]
    assert rated and all("interval_s" in s["extra"] for s in rated)
    counted = sum(s["gen_tok_s"] * s["extra"]["interval_s"] for s in rated)
    total = sum(r["output_tokens"] for r in reqs)
    assert 0 < counted <= total + 0.5, (counted, total)
    # Speculation off: no acceptance is invented from zero drafts.
    assert all("accept_len" not in s and "accept_rate" not in s for s in metrics)

    logs = [s for s in servers if s["source"].startswith("log:llamacpp")]
    evals = [s for s in logs if s["extra"]["kind"] == "eval"]
    prompts = [s for s in logs if s["extra"]["kind"] == "prompt_eval"]
    # One 'prompt eval time' and one 'eval time' line per request, all of them (launched: read
    # from the server's pipe, nothing is lost), the readiness request a launched server answers first
    # (recorded as a probe) included.
    probes = [p for e in run.record.events if e["kind"] == "probe" for p in e["value"]["requests"] if p.get("status")]
    assert len(probes) == 1 and probes[0]["ready_check"]
    assert len(evals) == len(prompts) == len(reqs) + len(probes), (len(evals), len(prompts), len(reqs))
    evals, prompts = evals[len(probes):], prompts[len(probes):]  # the probe came before the load
    assert all(s["extra"]["scope"] == "request" and s["extra"]["tokens"] == 64 for s in evals)
    # The same numbers as each request's timings (the log prints them with 2 decimals).
    assert sorted(round(s["extra"]["ms"], 2) for s in evals) == pytest.approx(
        sorted(round(r["server_timings"]["predicted_ms"], 2) for r in reqs), abs=0.011
    )
    assert sorted(s["extra"]["tokens"] for s in prompts) == sorted(
        r["server_timings"]["prompt_n"] for r in reqs
    )
    assert all(s["gen_tok_s"] > 0 for s in evals) and all(s["prompt_tok_s"] > 0 for s in prompts)
    assert {s["extra"]["slot"] for s in evals} <= set(range(8))


# --------------------------------------------------------------------------------------------------
# 4. llama-server closes every streamed connection while announcing keep-alive

def test_connection_close_after_stream_is_retried_not_double_counted(tmp_path: Path) -> None:
    """C=8, 64 requests with keep-alive, then without: no lost request, no request counted twice."""
    with OwnServer(tmp_path / "server.log") as srv:
        m0 = srv.metrics()
        pooled = run_specload(
            srv.url, "--api", "chat", "-c", "8", "-n", "64", "--max-tokens", "32", workdir=tmp_path,
            timeout=60, name="pooled",
        )  # fmt: skip
        m1 = srv.metrics()
        log_pooled = srv.log_text()
        fresh = run_specload(
            srv.url, "--api", "chat", "-c", "8", "-n", "64", "--max-tokens", "32", "--no-keepalive",
            workdir=tmp_path, timeout=60, name="fresh",
        )  # fmt: skip
        m2 = srv.metrics()
        log_all = srv.log_text()

    for run in (pooled, fresh):
        assert run.returncode == 0, run.describe()
        assert run.summary["requests"] == 64 and run.summary["levels"][0]["requests"] == 64
    reqs = record_requests(pooled)
    assert len(reqs) == 64 and len({r["id"] for r in reqs}) == 64
    # a stale pooled connection is retried on a new connection: no request fails for it
    failed = [r for r in reqs if not r["ok"]]
    assert not failed, Counter(str(r["error"]) for r in failed)
    ok = reqs
    retried = sum(1 for r in reqs if r["retries"])
    # Server side: a request the server processed leaves one 'launch_slot_' line and its tokens in
    # tokens_predicted_total. A stale attempt never reached it, so the server saw exactly the ok
    # requests: a retry counted as a new request (or sent twice) would show here.
    served = log_pooled.count("launch_slot_")
    assert served == len(ok), (
        f"server processed {served} requests, specload got {len(ok)} ok ({retried} retried)"
    )
    assert m1["llamacpp:tokens_predicted_total"] - m0["llamacpp:tokens_predicted_total"] == sum(
        r["output_tokens"] for r in ok
    )
    assert all(r["output_tokens"] == 32 for r in ok)

    # A new connection per request (the workaround REPORT.md names): nothing fails, nothing retries.
    reqs = record_requests(fresh)
    assert len(reqs) == 64 and all(r["ok"] for r in reqs), Counter(str(r["error"]) for r in reqs)
    assert all(r["retries"] == 0 for r in reqs)
    assert log_all.count("launch_slot_") - served == 64
    assert m2["llamacpp:tokens_predicted_total"] - m1["llamacpp:tokens_predicted_total"] == 64 * 32
    print(f"keep-alive run: {retried}/64 requests retried, none failed")


# --------------------------------------------------------------------------------------------------
# 5. the server dies or hangs mid-run

DOWN_TIMEOUT_S = 3  # --down-timeout: how long the server may stay down before the run ends


@pytest.mark.slow
def test_server_killed_mid_run_gives_disconnects_down_event_and_clean_end(tmp_path: Path) -> None:
    """SIGKILL under load: in-flight streams fail as disconnects, health goes down, the run ends by itself."""
    rec = tmp_path / "killed.jsonl"
    with OwnServer(tmp_path / "server.log") as srv:
        proc = SpecloadProcess(
            srv.url,
            ["--server-log", str(srv.log_path), "--api", "chat", "-c", "8", "-n", "2000", "--max-tokens", "4000",
             "--max-duration", "60", "--down-timeout", str(DOWN_TIMEOUT_S), "--record", str(rec), "--json"],
            tmp_path, rec, name="killed",
        )  # fmt: skip
        try:
            # streams open at the server, each with thousands of tokens to go: killed after "2 requests
            # in the record" (256 tokens each), the next 8 had also ended in one CI run, so the kill
            # met only new connections (8 `connect`, no disconnect)
            wait_until(lambda: _streams_open(srv.url, 4), 90, "4 slots streaming")
            os.kill(srv.pid, signal.SIGKILL)
            srv.proc.wait(timeout=10)
            run = proc.finish(timeout=DOWN_TIMEOUT_S + 40)
        finally:
            proc.kill()
    # Documented exit status: 4 ("server down") after the server stayed down for --down-timeout.
    assert run.returncode == 4, run.describe()
    assert run.summary is not None and run.summary["reason"] == "server down"
    rd = run.record
    assert rd is not None and rd.end is not None and not rd.truncated
    assert rd.end["reason"] == "stopped"
    reqs = record_requests(run)
    kinds = Counter(r["error"]["kind"] for r in reqs if not r["ok"])
    assert kinds["disconnect"] >= 1, kinds
    assert set(kinds) <= {"disconnect", "connect"}, kinds
    for r in reqs:
        if not r["ok"] and r["error"]["kind"] == "disconnect" and r["error"]["status"] == 200:
            assert "the connection closed mid-response" in r["error"]["detail"], r["error"]
    downs = [e for e in rd.events if e["kind"] == "health" and e["value"] == "down"]
    assert len(downs) == 1, rd.events
    assert any(e["kind"] == "pause" for e in rd.events), "the runner was not paused while the server is down"
    assert rd.end["requests"] == len(reqs) and rd.end["ok"] == sum(r["ok"] for r in reqs)


def _streams_open(url: str, n: int) -> bool:
    status, body = http_get(url + "/slots", timeout=1.0)
    if status != 200:
        return False
    slots = json.loads(body)
    busy = [
        s
        for s in slots
        if s.get("is_processing") and (s.get("next_token") or [{}])[0].get("n_decoded", 0) >= 8
    ]
    return len(busy) >= n


@pytest.mark.slow
def test_sigterm_hang_ends_in_stalls_and_bounded_run(tmp_path: Path) -> None:
    """SIGTERM with 8 streams open and 8 queued: llama-server hangs; --stall-timeout ends those requests."""
    rec = tmp_path / "hung.jsonl"
    stall_s = 2.0  # the server-down timeout is longer, so silent streams end as stalls, not cancelled
    # more requests than waves of stalls can end before the server is found down (on a busy machine
    # the health verdict comes late: 64 requests stalled out first and the run "completed", exit 5)
    with OwnServer(tmp_path / "server.log") as srv:
        proc = SpecloadProcess(
            srv.url,
            ["--server-log", str(srv.log_path), "--api", "chat", "-c", "16", "-n", "1000", "--max-tokens", "4000",
             "--stall-timeout", str(stall_s), "--max-duration", "60", "--down-timeout", str(stall_s + 6),
             "--record", str(rec), "--json"],
            tmp_path, rec, name="hung",
        )  # fmt: skip
        try:
            wait_until(lambda: _streams_open(srv.url, 4), 30, "4 slots streaming")
            srv.proc.send_signal(signal.SIGTERM)
            run = proc.finish(timeout=DOWN_TIMEOUT_S + 40)
            server_rc = srv.proc.poll()
        finally:
            proc.kill()
    assert run.returncode == 4, run.describe()
    rd = run.record
    assert rd is not None and rd.end is not None and rd.end["reason"] == "stopped"
    reqs = record_requests(run)
    stalls = [r for r in reqs if not r["ok"] and r["error"]["kind"] == "stall"]
    assert len(stalls) >= 4, Counter(str(r["error"]) for r in reqs if not r["ok"])
    for r in stalls:
        assert f"for {stall_s:g} s" in r["error"]["detail"]
    mid_stream = [r for r in stalls if r["chunks"] > 0]
    # llama-server's SIGTERM is racy (REPORT.md): the open streams either go silent (stalls) or are
    # cut at once (disconnects); the queued requests always hang without a byte.
    cut = [r for r in reqs if not r["ok"] and r["error"]["kind"] == "disconnect" and r["chunks"] > 0]
    assert mid_stream or cut, Counter(str(r["error"]) for r in reqs if not r["ok"])
    assert all(r["error"]["status"] == 200 and r["error"]["detail"].startswith("no data") for r in mid_stream)
    assert any(e["kind"] == "health" and e["value"] == "down" for e in rd.events)
    # Bounded: the hang cost the stall timeout, then the server-down timeout, not forever.
    assert run.elapsed_s < DOWN_TIMEOUT_S + 30
    print(f"llama-server after SIGTERM: exit status {server_rc} once specload closed its streams")


# --------------------------------------------------------------------------------------------------
# 6. requests the server rejects


def test_prompt_over_context_is_an_http_error_with_the_server_message(tmp_path: Path) -> None:
    port = free_port()
    run = run_specload(
        _url(port), *_launch_args(port, ctx=256), "--api", "completions", "-c", "1", "-n", "3",
        "--prompt-tokens", "2000", "--max-tokens", "8", workdir=tmp_path, timeout=60,
    )  # fmt: skip
    reqs = record_requests(run)
    assert len(reqs) == 3, run.describe()
    for r in reqs:
        assert not r["ok"]
        err = r["error"]
        assert err["kind"] == "http" and err["status"] == 400, err
        assert "exceeds the available context size" in err["detail"], err
        assert r["output_tokens"] == 0 and r["ttft_ms"] is None
    assert run.summary is not None and run.summary["errors"] == {"http": 3}
    assert run.record.end is not None
    print(f"all requests rejected: exit status {run.returncode}, reason {run.summary['reason']}")


def test_max_tokens_out_of_range_is_an_http_error_with_the_server_message(tmp_path: Path) -> None:
    port = free_port()
    run = run_specload(
        _url(port), *_launch_args(port), "--api", "chat", "-c", "1", "-n", "2", "--max-tokens", "8",
        "--extra-body", '{"max_tokens": -5}', workdir=tmp_path, timeout=60,
    )  # fmt: skip
    reqs = record_requests(run)
    assert len(reqs) == 2, run.describe()
    for r in reqs:
        err = r["error"]
        assert err is not None and err["kind"] == "http" and err["status"] == 400, r
        assert "max_tokens" in err["detail"] and "-5" in err["detail"], err
    assert run.summary is not None and run.summary["errors"] == {"http": 2}


# --------------------------------------------------------------------------------------------------
# the built-in prompt set on the real server, acceptance per category from its timings


@pytest.mark.timeout(300)  # thousands of prompt tokens a request: minutes when the two cores are shared
def test_builtin_categories_with_ngram_speculation_record_acceptance_per_category(tmp_path: Path) -> None:
    """``--dataset builtin`` (the first 4 prompts of each category, passages of thousands of tokens
    in this model's tokenizer among them: 8 slots of 8192) with ngram-mod speculation: each request's drafts from its
    ``timings`` (draft_n, draft_n_accepted), pooled per category in the level line, and the sums
    equal to the server's own /metrics counters; a workload of text people send, sent with the chat
    template and natural stops, draws no workload warning."""
    with OwnServer(tmp_path / "server.log", *SPEC, ctx=65536) as srv:
        before = srv.metrics()
        run = run_specload(
            # 64 tokens: the tiny model's answer repeats itself after a few dozen, and ngram-mod drafts from that
            srv.url, "--api", "chat", "-c", "4", "-n", "32", "--dataset", "builtin", "--max-tokens", "64",
            workdir=tmp_path, timeout=240,
        )  # fmt: skip
        after = srv.metrics()
    assert run.returncode == 0, run.describe()
    reqs = record_requests(run)
    assert len(reqs) == 32 and all(r["ok"] for r in reqs), Counter(str(r["error"]) for r in reqs if not r["ok"])
    assert run.record.run["ignore_eos"] is False
    drafted = [r for r in reqs if r["server_timings"].get("draft_n")]
    assert drafted, "ngram-mod drafted nothing on the built-in prompts"
    for r in reqs:
        t = r["server_timings"]
        assert r.get("spec_drafted") == t.get("draft_n") and r.get("spec_accepted") == t.get("draft_n_accepted"), r
        assert r["prompt_tokens"] == t["prompt_n"] + t.get("cache_n", 0)
    # the requests' own counts are the server's, whole-run
    total = {k: after[f"llamacpp:spec_decode_num_{k}_tokens_total"] - before[f"llamacpp:spec_decode_num_{k}_tokens_total"]
             for k in ("draft", "accepted")}  # fmt: skip
    assert sum(r["spec_drafted"] for r in drafted) == total["draft"]
    assert sum(r["spec_accepted"] for r in drafted) == total["accepted"]
    (level,) = run.record.levels
    cats = level["categories"]
    assert set(cats) == {"chat", "coding", "math", "summarise", "extract", "translate", "rewrite", "creative"}
    report = []
    for name, c in sorted(cats.items()):
        mine = [r for r in reqs if r["category"] == name]
        assert c["requests"] == len(mine) == 4
        d = sum(r.get("spec_drafted") or 0 for r in mine)
        a = sum(r.get("spec_accepted") or 0 for r in mine)
        if d:
            assert c["accept_rate"] == pytest.approx(a / d, abs=1e-4), (name, c)
        else:
            assert c["accept_rate"] is None, (name, c)
        tokens = sorted(r["prompt_tokens"] for r in mine)
        report.append(f"{name} prompt {tokens[0]}-{tokens[-1]} accept {c['accept_rate']} ({a}/{d})")
    assert run.summary is not None and run.summary["workload_warnings"] == []
    print("; ".join(report))
