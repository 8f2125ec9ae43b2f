"""Workloads (issue 24) as a user runs them: ``specload run --dataset builtin`` against the built-in
simulator, whose acceptance and answer lengths follow each prompt's category (sim/model.py), and
what the record, ``report --by category``, ``report --json`` and comparisons make of it.

Real subprocesses and real HTTP on 127.0.0.1; every run bounded in requests and seconds.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.processes import specload

FAST_SIM = "--step-ms 2 --prefill-per-token-ms 0.001 --spec-tokens 3 --accept-rate 0.7 --quiet"


def lines(path: Path) -> list[dict]:
    return [orjson.loads(x) for x in path.read_bytes().splitlines()]


def test_acceptance_per_category_from_the_requests_own_counts(tmp_path: Path) -> None:
    """The simulator's per-request acceptance (vLLM's metrics.speculative_decoding) is recorded per
    request, pooled per level beside the server's /metrics figure and per category, where code and
    extraction are accepted far more often than creative writing; answers end at their natural stop."""
    rec = tmp_path / "run.jsonl"
    p = specload("run", "-c", "8", "-n", "64", "--dataset", "builtin", "--max-tokens", "96", "--record", str(rec),
                 "--sim-args", FAST_SIM)
    assert p.returncode == 0, p.stderr
    assert "WARNING speculative decoding" not in p.stderr  # text people send, natural stops, chat
    data = lines(rec)
    reqs = [x for x in data if x["type"] == "request"]
    assert len(reqs) == 64 and all(r["ok"] for r in reqs)
    # an answer of one token (EOS at once) had no verify step, and no speculative counts
    assert all(r["spec_drafted"] == 3 * r["spec_verify_ct"] and 0 <= r["spec_accepted"] <= r["spec_drafted"]
               if r["output_tokens"] > 1 else "spec_drafted" not in r for r in reqs)
    assert sum(r["finish_reason"] == "stop" for r in reqs) > 16  # natural stops, not only the cap
    (level,) = [x for x in data if x["type"] == "level"]
    # the requests' pooled counts and the server's /metrics deltas over the level: the same tokens
    assert abs(level["request_accept_rate"] - level["accept_rate"]) < 0.03, level
    cats = level["categories"]
    assert set(cats) == {"chat", "coding", "math", "summarise", "extract", "translate", "rewrite", "creative"}
    assert all(c["requests"] == 8 for c in cats.values())
    # 8 requests a category, each with its own draw of acceptance: the categories far apart are
    # compared (expected about 0.75 for code and extraction, 0.33 for chat and creative writing)
    rate = {n: c["accept_rate"] for n, c in cats.items()}
    assert (rate["coding"] + rate["extract"]) / 2 > (rate["chat"] + rate["creative"]) / 2 + 0.2, rate
    assert rate["extract"] > rate["creative"] + 0.25, rate
    assert sum(c["output_tokens"] for c in cats.values()) == level["output_tokens"]
    assert abs(sum(c["throughput_tok_s"] for c in cats.values()) - level["throughput_tok_s"]) < 1.0
    assert data[-1]["type"] == "end" and data[-1]["workload_warnings"] == []
    # report --by category prints them; report --json carries them per level
    p = specload("report", str(rec), "--by", "category")
    assert p.returncode == 0, p.stderr
    assert "by category" in p.stdout and "creative" in p.stdout and "all (server:" in p.stdout
    p = specload("report", str(rec), "--json")
    assert orjson.loads(p.stdout)["levels"][0]["categories"]["coding"]["requests"] == 8
    # another run with another --max-tokens: compared, it gets no verdict, per level or per category
    other = tmp_path / "other.jsonl"
    p = specload("run", "-c", "8", "-n", "32", "--dataset", "builtin", "--max-tokens", "48", "--record", str(other),
                 "--sim-args", FAST_SIM)
    assert p.returncode == 0, p.stderr
    p = specload("report", str(rec), str(other), "--json")
    doc = orjson.loads(p.stdout)
    (lv,) = doc["levels"]
    assert lv["headline"] == {"other": "unsound"}
    assert {m["verdict"] for side in lv["categories"].values() for m in side["other"].values()} == {"unsound"}
    assert any("max_tokens 96 vs 48" in n for n in doc["notes"])
    p = specload("report", str(rec), str(other))
    assert "unsound, no verdicts: the workloads differ: max_tokens 96 vs 48" in p.stdout


def test_llamacpp_timings_give_acceptance_per_request_and_synthetic_prompts_are_warned(tmp_path: Path) -> None:
    """As llama-server does, the simulator's llama.cpp flavour says each request's drafts in its
    timings (draft_n, draft_n_accepted); measured on shuffled words with ignore_eos, the run says what
    that workload is worth, in one line each, in the end line and in --json."""
    rec = tmp_path / "run.jsonl"
    p = specload("run", "-c", "2", "-n", "8", "--max-tokens", "32", "--ignore-eos", "--json", "--record", str(rec),
                 "--sim-args", f"--flavor llamacpp {FAST_SIM}")
    assert p.returncode == 0, p.stderr
    reqs = [x for x in lines(rec) if x["type"] == "request"]
    assert all(r["spec_drafted"] == r["server_timings"]["draft_n"] > 0 for r in reqs)
    assert all(r["spec_accepted"] == r["server_timings"]["draft_n_accepted"] for r in reqs)
    summary = orjson.loads(p.stdout)
    assert summary["levels"][0]["request_accept_rate"] > 0
    warned = summary["workload_warnings"]
    assert len(warned) == 2 and "synthetic prompts" in warned[0] and "ignore_eos" in warned[1]
    assert lines(rec)[-1]["workload_warnings"] == warned
    assert sum("WARNING speculative decoding" in line for line in p.stderr.splitlines()) == 2
    # a comparison says each side's, one line each
    again = tmp_path / "again.jsonl"
    again.write_bytes(rec.read_bytes())
    p = specload("report", str(rec), str(again), "--json")
    assert orjson.loads(p.stdout)["workload_warnings"] == {"run": warned, "again": warned}
    p = specload("report", str(rec), str(again))
    assert sum(line.startswith("⚠ workload of ") for line in p.stdout.splitlines()) == 4, p.stdout


def test_conversations_are_sent_turn_by_turn_with_the_replies_and_the_cache_shows_in_ttft(tmp_path: Path) -> None:
    """--multi-turn: each conversation's user turns in order in one session, the server's replies in
    the history (each turn's prompt holds the last answer), --think-time between turns, -c counting
    sessions, and per-turn figures in which the simulator's prefix cache shows in TTFT."""
    from specload.engine.prompts import PromptSource
    from specload.sim.tokenizer import count_text

    sim = "--step-ms 3 --prefill-per-token-ms 0.5 --spec-tokens 3 --quiet --seed 2"
    runs = {}
    # the cached run's requests go through two worker processes: the replies come back over their pipes
    for name, cache, workers in (("cached", "--prefix-cache", "2"), ("uncached", "", "1")):
        rec = tmp_path / f"{name}.jsonl"
        p = specload("run", "-c", "4", "-n", "36", "--dataset", "builtin", "--multi-turn", "--think-time", "0.1",
                     "--max-tokens", "48", "--workers", workers, "--record", str(rec), "--sim-args", f"{sim} {cache}")
        assert p.returncode == 0, p.stderr
        assert "conversations of 2-5 user turns sent turn by turn" in p.stderr
        runs[name] = lines(rec)
    data = runs["cached"]
    assert data[0]["prompts"]["multi_turn"] == {"conversations": 40, "think_time": "0.1"}
    reqs = [x for x in data if x["type"] == "request"]
    assert all(r["ok"] for r in reqs)
    convs: dict[int, list[dict]] = {}
    for r in reqs:
        convs.setdefault(r["conversation"], []).append(r)
    src = PromptSource.from_options(dataset="builtin", multi_turn=True)
    rows = {n: src.next_conversation() for n in range(1, len(convs) + 1)}
    for number, turns in convs.items():
        turns.sort(key=lambda r: r["turn"])
        row = rows[number]
        assert [r["turn"] for r in turns] == list(range(1, len(row.turns) + 1))  # every turn, in order
        assert {r["category"] for r in turns} == {row.category}
        for prev, nxt in zip(turns, turns[1:], strict=False):
            assert nxt["start_s"] >= prev["end_s"] + 0.1 - 0.002  # after the last answer and the think time
            # the history holds the previous prompt, the server's answer to it and the new user turn
            # (plus the two messages' template tokens): without the answer this would be below zero
            added = nxt["prompt_tokens"] - prev["prompt_tokens"] - count_text(row.turns[nxt["turn"] - 1]) - 8
            assert added >= prev["output_tokens"], (number, prev, nxt)
    # -c 4 counts sessions: never more than 4 conversations at once, and 4 at some moment
    spans = sorted((min(r["start_s"] for r in t), max(r["end_s"] for r in t)) for t in convs.values())
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    open_now = peak = 0
    for _, d in events:
        open_now += d
        peak = max(peak, open_now)
    assert peak == 4
    # per turn: the cache serves the history, and later turns start sooner than without it
    (cached,) = [x for x in data if x["type"] == "level"]
    (uncached,) = [x for x in runs["uncached"] if x["type"] == "level"]
    assert cached["turns"]["1"]["prompt_tokens_cached_avg"] == 0
    assert cached["turns"]["2"]["prompt_tokens_cached_avg"] > 0.6 * cached["turns"]["2"]["prompt_tokens_avg"]
    assert cached["turns"]["2"]["ttft_ms_p50"] < uncached["turns"]["2"]["ttft_ms_p50"]
    assert cached["turns"]["3"]["ttft_ms_p50"] < uncached["turns"]["3"]["ttft_ms_p50"]
    p = specload("report", str(tmp_path / "cached.jsonl"), "--by", "turn")
    assert p.returncode == 0 and "by turn" in p.stdout


def _client_lines(src: Path, dst: Path, *, starved: bool) -> None:
    """``src`` rewritten as the recorder would have written it on a quiet machine (``starved``
    False: no second of the client starved or saturated) or on a loaded one (every second starved)."""
    out = []
    for line in src.read_bytes().splitlines():
        x = orjson.loads(line)
        if x["type"] == "client":
            x["starved"] = starved
            if not starved:
                x["saturated"] = False  # a busy machine's client also reads saturated: unsound too
        out.append(orjson.dumps(x))
    dst.write_bytes(b"\n".join(out) + b"\n")


def test_a_configuration_may_win_on_code_and_lose_on_creative_writing(tmp_path: Path) -> None:
    """Comparisons judge each category: speculation whose verify step is dear (draft cost 0.4 a
    token) pays on code, whose drafts are accepted, and costs on creative writing, whose are not;
    the HTML report shows acceptance by category; a level whose client starved reads unsound, not
    better; a live --baseline judges each category at its end, and one whose max_tokens differs
    (256 vs 128) says so and gives no verdict."""
    sim = "--step-ms 4 --prefill-per-token-ms 0.001 --quiet --seed 1"
    runs = {"base": f"{sim} --spec-tokens 0", "spec": f"{sim} --spec-tokens 3 --accept-rate 0.7 --draft-cost 0.4"}
    for name, args in runs.items():
        live = ["--baseline", str(tmp_path / "base.jsonl"), "--json"] if name == "spec" else []
        p = specload("run", "-c", "4", "-n", "128", "--dataset", "builtin", "--max-tokens", "128",
                     "--record", str(tmp_path / f"{name}.jsonl"), "--sim-args", args, *live)
        assert p.returncode == 0, p.stderr
    # the live --baseline's end: each category judged as report BASE RUN judges it
    live_cats = orjson.loads(p.stdout)["baseline_categories"]["C=4"]
    p = specload("report", str(tmp_path / "base.jsonl"), str(tmp_path / "spec.jsonl"), "--json")
    (lv,) = orjson.loads(p.stdout)["levels"]
    def figures(cats: dict, base: str, other: str) -> dict:  # the intervals' bootstrap is seeded by the labels
        return {(c, m): (side[base][m]["value"], side[other][m]["value"], side[other][m]["ratio"])
                for c, side in cats.items() for m in side[other]}

    assert figures(live_cats, "baseline", "this run") == figures(lv["categories"], "base", "spec")
    assert live_cats["coding"]["this run"]["per_request_tok_s"]["ratio"] > 1.2
    # as on a quiet machine (the figures are the server's): judged per category, both ways
    quiet = {n: tmp_path / f"{n}-quiet.jsonl" for n in runs}
    for n, f in quiet.items():
        _client_lines(tmp_path / f"{n}.jsonl", f, starved=False)
    p = specload("report", str(quiet["base"]), str(quiet["spec"]), "--json")
    assert p.returncode == 0, p.stderr
    (lv,) = orjson.loads(p.stdout)["levels"]
    cats = {c: side["spec-quiet"]["per_request_tok_s"] for c, side in lv["categories"].items()}
    assert cats["coding"]["ratio"] > 1.2 and cats["coding"]["verdict"] == "better", cats["coding"]
    assert cats["extract"]["ratio"] > 1.1 and cats["extract"]["verdict"] == "better", cats["extract"]
    assert cats["creative"]["ratio"] < 0.85 and cats["creative"]["verdict"] == "worse", cats["creative"]
    assert lv["headline"]["spec-quiet"] != "unsound"  # the whole level: its mix of both may not decide
    p = specload("report", str(quiet["base"]), str(quiet["spec"]))
    assert p.returncode == 0 and "by category: spec-quiet / base-quiet" in p.stdout
    # the same pair with the spec side's client starved: the same figures, no verdict
    starved = tmp_path / "spec-starved.jsonl"
    _client_lines(tmp_path / "spec.jsonl", starved, starved=True)
    p = specload("report", str(quiet["base"]), str(starved), "--json")
    (lv,) = orjson.loads(p.stdout)["levels"]
    assert lv["headline"] == {"spec-starved": "unsound"}
    assert any(f["kind"] == "client_starved" for f in lv["flags"])
    coding = lv["categories"]["coding"]["spec-starved"]["per_request_tok_s"]
    assert coding["verdict"] == "unsound" and coding["ratio"] == cats["coding"]["ratio"]
    # HTML: the acceptance of each category, as the level line has it
    spec_level = next(x for x in lines(tmp_path / "spec.jsonl") if x["type"] == "level")
    html = tmp_path / "r.html"
    p = specload("report", str(tmp_path / "spec.jsonl"), "--html", str(html))
    assert p.returncode == 0, p.stderr
    text = html.read_text()
    section = text[text.index("<h2>Acceptance by category"):text.index("<h2>Timelines")]
    for name, c in spec_level["categories"].items():
        assert f'<td class="text">{name}</td><td>{c["accept_rate"] * 100:.0f}%' in section, name
    # live --baseline, max_tokens 256 against the baseline's 128: said at the start, no verdict
    rec = tmp_path / "live.jsonl"
    p = specload("run", "-c", "4", "-n", "16", "--dataset", "builtin", "--max-tokens", "256", "--baseline",
                 str(tmp_path / "spec.jsonl"), "--json", "--record", str(rec), "--sim-args", runs["spec"])
    assert p.returncode == 0, p.stderr
    assert "--baseline: unsound, no verdicts: the workloads differ: max_tokens 128 vs 256" in p.stderr
    assert orjson.loads(p.stdout)["levels"][0]["judged"]["verdict"] == "unsound"
    assert next(x for x in lines(rec) if x["type"] == "level")["judged"]["verdict"] == "unsound"


def test_dataset_files_of_other_tools_from_the_command_line(tmp_path: Path) -> None:
    """A ShareGPT file (a JSON array, as ShareGPT_V3_unfiltered) is detected and sent with its rows'
    categories; --dataset-format names a shape, and a file of another shape, or of none, gets one
    line saying what was expected, exit 2, before anything starts."""
    rows = [{"id": "x1", "category": "coding", "conversations": [
                {"from": "human", "value": "Write a Python function that reverses a list"},
                {"from": "gpt", "value": "def rev(xs): return xs[::-1]"}]},
            {"id": "x2", "conversations": []},
            {"id": "x3", "category": "chat", "conversations": [{"from": "human", "value": "How are you today?"}]}]
    sharegpt = tmp_path / "sg.json"
    sharegpt.write_bytes(orjson.dumps(rows))
    rec = tmp_path / "run.jsonl"
    p = specload("run", "-c", "1", "-n", "4", "--dataset", str(sharegpt), "--max-tokens", "16",
                 "--record", str(rec), "--sim-args", FAST_SIM)
    assert p.returncode == 0, p.stderr
    assert f"prompts: {sharegpt} (2 categories, 2 prompts, sharegpt) · answers: natural stops" in p.stderr
    data = lines(rec)
    ds = data[0]["prompts"]["dataset"]
    assert (ds["format"], ds["rows"]) == ("sharegpt", 2), ds
    assert [r["category"] for r in data if r["type"] == "request"] == ["coding", "chat", "coding", "chat"]
    assert data[0]["ignore_eos"] is False
    rows[0]["conversations"].append({"from": "human", "value": "Now in place"})
    sharegpt.write_bytes(orjson.dumps(rows))
    p = specload("run", "-c", "1", "-n", "2", "--dataset", str(sharegpt), "--dataset-format", "sharegpt",
                 "--max-tokens", "8", "--sim-args", FAST_SIM)
    assert p.returncode == 0, p.stderr
    assert "(2 categories, 2 prompts, sharegpt; 1 multi-turn row sent as its first turn)" in p.stderr
    mt_bench = tmp_path / "question.jsonl"  # MT-Bench's own shape: none of the three
    mt_bench.write_text('{"question_id": 81, "category": "writing", "turns": ["Compose a blog post", "Rewrite it"]}\n')
    for args, needles in (
        (["--dataset", str(sharegpt), "--dataset-format", "openai"], ['expected an object with "messages"']),
        (["--dataset", str(mt_bench)], ["(plain)", "(sharegpt)", "(openai)", "found an object with keys question_id"]),
        (["--dataset", str(mt_bench), "--dataset-format", "csv"], ["--dataset-format"]),
    ):
        p = specload("run", "http://127.0.0.1:9", "-c", "1", "-n", "1", *args, timeout=30)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith("specload: error: ") and p.stderr.count("\n") == 1, p.stderr
        assert all(n in p.stderr for n in needles), (args, p.stderr)
