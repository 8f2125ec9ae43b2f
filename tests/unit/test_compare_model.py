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
    c = compare([Side("a", (load_run(str(a)),)), Side("b", (load_run(str(b)),))])
    kinds = {str(lc.key): {f.kind for f in lc.flags} for lc in c.levels}
    assert {"errors", "estimated_tokens", "client_saturated", "client_starved"} <= kinds["C=1"]
    assert "crash" in kinds["C=4"] and "client_saturated" not in kinds["C=4"]
    assert any("max_tokens 50 vs 64" in f.detail for f in c.shape_flags)
    clean = compare([Side("a", (load_run(str(a)),)), Side("a2", (load_run(str(a), label="a2"),))])
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
    c = compare([Side("base", (load_run(str(base)),)), Side("spec", (load_run(str(other)),))])
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
    c = compare([Side("a", (ra,)), Side("b", (rb,))])
    assert c.run_to_run_accounted and not c.notes
    assert c.between["throughput"] is not None and c.between["throughput"].df == 2 * 2 * 2
    res = c.levels[0].result("b", "throughput")
    assert res is not None and len(res.per_run) == 3 and res.decision.verdict == "better"  # type: ignore[union-attr]
