"""The comparison's bookkeeping on records written here: unsound-comparison flags, level matching by
concurrency and occurrence, crossovers, repeats combined."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from specload.record.runs import load_run
from specload.report.compare import Side, compare
from specload.stats.level_metrics import level_keys
from tests.unit.test_level_metrics import req, write_record

# each comparison estimates only the metrics its test reads (every metric of every level is a
# bootstrap of 2000 resamples; the report's tests compare them all)
THROUGHPUT = ("throughput",)


def record(path: Path, label: str, levels: list[tuple[int, float]] | list[tuple[int, float, int]], *,
           extra: list[dict] | None = None,
           shape: dict | None = None, bad: set[int] | None = None, estimated: bool = False) -> Path:
    """A closed-loop record: per level (concurrency, request duration) 40 requests in rounds."""
    lines: list[dict] = [{"type": "run", "version": 1, "api": "chat", "model": "m", "max_tokens": 50,
                          "ignore_eos": True, "prompt_tokens": 128, "prompt_source": "synthetic", "rate": None,
                          "label": label, **(shape or {})}]
    t = 0.0
    rid = 0
    rng = np.random.default_rng(zlib.crc32(label.encode()))
    for idx, (c, dur, *rep) in enumerate(levels):
        value = {"index": idx, "concurrency": c, **({"repeat": rep[0]} if rep and rep[0] else {})}
        lines.append({"type": "event", "t_s": t, "kind": "level", "value": value})
        for k in range(40):
            d = dur * rng.uniform(0.95, 1.05)
            r = req(rid, c, idx, t + (k // c) * dur * 1.1, d, ok=rid not in (bad or set()))
            r["tokens_estimated"] = estimated
            lines.append(r)
            rid += 1
        t += (40 // c + 2) * dur * 1.1
    lines += extra or []
    lines.append({"type": "end", "reason": "completed", "elapsed_s": t, "requests": rid, "ok": rid})
    write_record(path, lines)
    return path


def test_flags_for_unsound_levels(tmp_path: Path) -> None:
    a = record(tmp_path / "a.jsonl", "a", [(1, 0.3), (4, 0.3)])
    b = record(tmp_path / "b.jsonl", "b", [(1, 0.3), (4, 0.3)], bad={3}, estimated=True,
               shape={"max_tokens": 64},
               extra=[{"type": "client", "t_s": 2.0, "saturated": True, "starved": False},
                      {"type": "client", "t_s": 3.0, "saturated": False, "starved": True},
                      {"type": "crash", "t_s": 15.0, "first_seen_s": 15.0, "signature": "s1",
                       "exception_type": "RuntimeError"}])
    c = compare([Side("a", (load_run(str(a)),)), Side("b", (load_run(str(b)),))], metrics=THROUGHPUT)
    kinds = {str(lc.key): {f.kind for f in lc.flags} for lc in c.levels}
    assert {"errors", "estimated_tokens", "client_saturated", "client_starved"} <= kinds["C=1"]
    assert "crash" in kinds["C=4"] and "client_saturated" not in kinds["C=4"]
    assert any("max_tokens 50 vs 64" in f.detail for f in c.shape_flags)
    # a side of two runs names the one flagged: by its label, or by its number when the runs all
    # carry the side's (a sweep's repeats), not "b (b)"
    for labels, named in ((("b1", "b2"), "b (b2)"), (("b", "b"), "b (run 2 of 2)")):
        two = Side("b", (load_run(str(a), label=labels[0]), load_run(str(b), label=labels[1])))
        c2 = compare([Side("a", (load_run(str(a)),)), two], metrics=THROUGHPUT)
        (sat,) = [f for lc in c2.levels for f in lc.flags if f.kind == "client_saturated"]
        assert sat.detail.startswith(f"{named}: specload's client was saturated 1 s"), sat.detail
    clean = compare([Side("a", (load_run(str(a)),)), Side("a2", (load_run(str(a), label="a2"),))], metrics=THROUGHPUT)
    assert all(not lc.flags for lc in clean.levels) and not clean.shape_flags


def test_levels_pair_by_concurrency_and_occurrence(tmp_path: Path) -> None:
    # a TUI session that went 1, 4, then back to 1: the second C=1 pairs with the other run's second C=1
    run = load_run(str(record(tmp_path / "t.jsonl", "t", [(1, 0.3), (4, 0.3), (1, 0.2)])))
    keys = list(level_keys(run.levels))
    assert [str(k) for k in keys] == ["C=1", "C=4", "C=1 #2"]


def test_crossover_where_a_side_goes_from_better_to_worse(tmp_path: Path) -> None:
    base = record(tmp_path / "base.jsonl", "base", [(1, 0.30), (4, 0.30), (8, 0.30)])
    # faster at C=1 and 4 (shorter requests), slower at C=8
    other = record(tmp_path / "spec.jsonl", "spec", [(1, 0.20), (4, 0.25), (8, 0.45)])
    c = compare([Side("base", (load_run(str(base)),)), Side("spec", (load_run(str(other)),))], metrics=THROUGHPUT)
    verdicts = [lc.result("spec", "throughput").decision.verdict for lc in c.levels]  # type: ignore[union-attr]
    assert verdicts == ["better", "better", "worse"]
    x = [x for x in c.crossovers if x.metric == "throughput"]
    assert len(x) == 1 and (x[0].low, x[0].high, x[0].below, x[0].above, x[0].decided) == (4, 8, "better", "worse",
                                                                                           True)
    assert 4 < x[0].at < 8


def test_repeats_within_one_record_give_the_run_to_run_variation(tmp_path: Path) -> None:
    # --repeat 3: each level three times in a row; the repeats are runs of that level for the comparison
    a = record(tmp_path / "a.jsonl", "a", [(1, 0.30, 0), (1, 0.31, 1), (1, 0.29, 2), (4, 0.3, 0), (4, 0.33, 1),
                                           (4, 0.3, 2)])
    b = record(tmp_path / "b.jsonl", "b", [(1, 0.20, 0), (1, 0.21, 1), (1, 0.2, 2), (4, 0.3, 0), (4, 0.3, 1),
                                           (4, 0.31, 2)])
    ra, rb = load_run(str(a)), load_run(str(b))
    assert [str(k) for k in level_keys(ra.levels)] == ["C=1", "C=4"]
    assert [len(v) for v in level_keys(ra.levels).values()] == [3, 3]
    c = compare([Side("a", (ra,)), Side("b", (rb,))], metrics=THROUGHPUT)
    assert c.run_to_run_accounted and not c.notes
    assert c.between["throughput"] is not None and c.between["throughput"].df == 2 * 2 * 2
    res = c.levels[0].result("b", "throughput")
    assert res is not None and len(res.per_run) == 3 and res.decision.verdict == "better"  # type: ignore[union-attr]


def verdict(c, key: str, side: str, metric: str = "throughput") -> str:
    lc = next(x for x in c.levels if str(x.key) == key)
    res = lc.result(side, metric)
    assert res is not None and res.decision is not None
    return res.decision.verdict


def test_a_level_whose_client_was_starved_reads_unsound_not_better(tmp_path: Path) -> None:
    # issue 24: on a loaded machine an A/A' pair read "better" at C=1 with a warning beside it
    a = record(tmp_path / "a.jsonl", "a", [(1, 0.30), (4, 0.30)])
    b = record(tmp_path / "b.jsonl", "b", [(1, 0.20), (4, 0.20)],
               extra=[{"type": "client", "t_s": 2.0, "saturated": False, "starved": True}])
    c = compare([Side("a", (load_run(str(a)),)), Side("b", (load_run(str(b)),))], metrics=("throughput", "tpot_p50"))
    assert verdict(c, "C=1", "b") == "unsound"
    assert verdict(c, "C=1", "b", "tpot_p50") == "unsound"  # no metric of that level gets a verdict
    lc = c.levels[0]
    res = lc.result("b", "throughput")
    assert res is not None and res.ratio is not None and res.ratio.ratio > 1.3  # the figures are still shown
    assert "client_starved" in (res.decision.reason if res.decision else "")
    assert verdict(c, "C=4", "b") == "better"  # the other level was sound
    # the baseline's starved second makes the level unsound too
    c2 = compare([Side("b", (load_run(str(b)),)), Side("a", (load_run(str(a)),))], metrics=THROUGHPUT)
    assert verdict(c2, "C=1", "a") == "unsound" and verdict(c2, "C=4", "a") == "worse"


def test_runs_whose_workloads_differ_get_no_verdict(tmp_path: Path) -> None:
    a = record(tmp_path / "a.jsonl", "a", [(1, 0.30), (4, 0.30)])
    for shape, said in (({"max_tokens": 128}, "max_tokens 50 vs 128"), ({"ignore_eos": False}, "ignore_eos True vs False"),
                        ({"temperature": 0.7}, "temperature 'server default' vs 0.7"),
                        ({"prompt_tokens": 512}, "prompt_tokens 128 vs 512"),
                        ({"prompt_source": "dataset", "prompts": {"dataset": {"name": "builtin", "sha256": "ab12"}}},
                         "prompt_source 'synthetic' vs 'dataset'")):
        b = record(tmp_path / "b.jsonl", "b", [(1, 0.20), (4, 0.20)], shape=shape)
        c = compare([Side("a", (load_run(str(a)),)), Side("b", (load_run(str(b)),))], metrics=THROUGHPUT)
        assert verdict(c, "C=1", "b") == verdict(c, "C=4", "b") == "unsound", shape
        assert any(said in n for n in c.notes), (shape, c.notes)
    # the model's name may differ (an EAGLE-3 deployment served under another name): still judged
    b = record(tmp_path / "b.jsonl", "b", [(1, 0.20), (4, 0.20)], shape={"model": "m-eagle3"})
    c = compare([Side("a", (load_run(str(a)),)), Side("b", (load_run(str(b)),))], metrics=THROUGHPUT)
    assert verdict(c, "C=1", "b") == "better"


def test_the_soundness_rule() -> None:
    from specload.stats.judgement import unsound_reason, workload_differences, workload_warnings

    base = {"api": "chat", "dataset": "builtin (sha256 1)", "max_tokens": 128, "temperature": None}
    assert workload_differences(base, {**base, "temperature": 0.0}) == []  # a side that does not say
    assert workload_differences(base, {**base, "max_tokens": 256}) == ["max_tokens 128 vs 256"]
    # prompt lengths follow the README's 5 %: 1.6 % apart (a peer tool's mean vs the length asked) is
    # the same workload, 10 % apart is not
    with_len = {**base, "prompt_tokens": 128}
    assert workload_differences(with_len, {**with_len, "prompt_tokens": 126}) == []
    assert workload_differences(with_len, {**with_len, "prompt_tokens": 141}) == ["prompt_tokens 128 vs 141"]
    assert unsound_reason([]) is None and unsound_reason([], ["errors: b: 1/40 failed"]) is None
    assert "client_saturated" in (unsound_reason([], ["client_saturated: b: 3 s"]) or "")
    assert "max_tokens" in (unsound_reason(["max_tokens 128 vs 256"]) or "")
    synthetic = {"prompt_source": "synthetic", "ignore_eos": True, "api": "completions"}
    assert workload_warnings(synthetic, speculative=False) == []
    said = workload_warnings(synthetic, speculative=True)
    assert len(said) == 3 and "synthetic" in said[0] and "ignore_eos" in said[1] and "chat template" in said[2]
    assert workload_warnings({"prompt_source": "dataset", "ignore_eos": False, "api": "chat"}, True) == []


def test_categories_are_judged_each_a_configuration_may_win_on_code_and_lose_on_chat(tmp_path: Path) -> None:
    def run(path: Path, label: str, coding_s: float, chat_s: float) -> Path:
        lines: list[dict] = [{"type": "run", "version": 1, "api": "chat", "model": "m", "max_tokens": 50,
                              "ignore_eos": False, "prompt_source": "dataset", "label": label},
                             {"type": "event", "t_s": 0.0, "kind": "level", "value": {"index": 0, "concurrency": 2}}]
        rng = np.random.default_rng(zlib.crc32(label.encode()))
        t = {"coding": 0.0, "chat": 0.0}
        for i in range(80):
            cat = "coding" if i % 2 else "chat"
            dur = (coding_s if cat == "coding" else chat_s) * rng.uniform(0.95, 1.05)
            r = req(i, 2, 0, t[cat], dur)
            r["category"] = cat
            r["tpot_ms"] = dur * 1e3 / 50
            r["spec_accepted"], r["spec_drafted"] = (40, 48) if cat == "coding" else (10, 30)
            lines.append(r)
            t[cat] += dur
        lines.append({"type": "end", "reason": "completed", "requests": 80, "ok": 80})
        write_record(path, lines)
        return path

    a = run(tmp_path / "a.jsonl", "a", 0.30, 0.30)
    b = run(tmp_path / "b.jsonl", "b", 0.20, 0.40)  # faster on code, slower on chat
    c = compare([Side("a", (load_run(str(a)),)), Side("b", (load_run(str(b)),))],
                metrics=("per_request_tok_s", "request_accept_rate", "tpot_p50"))
    (lc,) = c.levels
    assert set(lc.categories) == {"chat", "coding"}
    cat = {k: t[("b", "per_request_tok_s")].decision.verdict for k, t in lc.categories.items()}  # type: ignore[union-attr]
    assert cat == {"coding": "better", "chat": "worse"}
    acc = lc.categories["coding"][("a", "request_accept_rate")].estimate.value
    assert acc is not None and abs(acc - 40 / 48) < 1e-9
    from specload.report.compare import to_json

    doc = to_json(c)["levels"][0]["categories"]
    assert doc["coding"]["b"]["per_request_tok_s"]["verdict"] == "better"
    assert doc["chat"]["b"]["tpot_p50"]["verdict"] == "worse"  # lower is better: a longer TPOT is worse


def test_the_live_judge_applies_the_same_rule(tmp_path: Path) -> None:
    from specload.datatypes import RequestRecord
    from specload.stats.live_judge import LiveJudge

    base = load_run(str(record(tmp_path / "a.jsonl", "a", [(1, 0.30), (4, 0.30)],
                               extra=[{"type": "client", "t_s": 2.0, "saturated": True, "starved": False}])))
    shape = base.description.request_shape()

    def judge(workload: dict) -> LiveJudge:
        j = LiveJudge(t0_ns=0, baseline=base, workload=workload)
        for index, c in enumerate((1, 4)):
            j.level_started(index, c)
            for k in range(40):
                s = int((k // c) * 0.22e9 + index * 100e9)
                j.add(RequestRecord(k, c, index, False, s, s + int(0.2e9), int(0.02e9), int(0.2e9), 50, False, 130,
                                    20))
            j.level_finished(index)
        return j

    same = judge(shape)
    assert same.differences == []
    v1, v4 = same.view(0), same.view(1)
    assert v1 is not None and v1.decision is not None and v1.decision.verdict == "unsound"  # the baseline's client
    assert "client_saturated: the baseline" in v1.decision.reason
    assert v4 is not None and v4.decision is not None and v4.decision.verdict == "better"
    same.client_flag(1, "client_starved")  # this run's client starved at C=4
    assert same.judgement(1).verdict == "unsound"  # type: ignore[union-attr]
    other = judge({**shape, "max_tokens": 256})
    assert other.differences == ["max_tokens 50 vs 256"]
    assert other.judgement(1).verdict == "unsound"  # type: ignore[union-attr]
