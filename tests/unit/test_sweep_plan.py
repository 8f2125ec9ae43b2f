"""The sweep's pure parts: configurations, grid, order, the launch template, the plan file, the result's
rules (best by level, its schedule, settings that differ), the GPU-memory wait."""

from __future__ import annotations

import asyncio
import socket

import pytest

from specload.report.sweep import best_by_level, config_status, schedule_text
from specload.sweep.loop import wait_gpu_free
from specload.sweep.plan import (
    Config,
    PlanError,
    SweepPlan,
    grid_configs,
    parse_config,
    plan_words,
    port_in_use,
)

A, B, C = Config("A", "-np 4"), Config("B", "--spec"), Config("C", "")


def test_configurations_and_grid() -> None:
    assert parse_config("base=--parallel 4 --x") == Config("base", "--parallel 4 --x")
    assert parse_config("empty=") == Config("empty", "")
    with pytest.raises(PlanError, match="NAME='ARGS'"):
        parse_config("noequals")
    grid = grid_configs(["speculative-num-steps=2,3", "--topk=1,4"])
    assert [c.name for c in grid] == ["speculative-num-steps=2 topk=1", "speculative-num-steps=2 topk=4",
                                      "speculative-num-steps=3 topk=1", "speculative-num-steps=3 topk=4"]
    assert grid[1].args == "--speculative-num-steps 2 --topk 4"
    assert grid_configs([]) == []
    assert grid_configs(["a=x y"])[0].args == "--a 'x y'"
    with pytest.raises(PlanError, match="KEY=V1,V2"):
        grid_configs(["a=1,,2"])


def test_order_is_interleaved_and_the_template_keeps_other_braces() -> None:
    plan = SweepPlan("srv --port {port} --speculative-config '{\"k\": 1}' {args}", (A, B, C), "A", repeats=3)
    order = [(plan.configs[s.config].name, s.repeat) for s in plan.schedule()]
    assert order == [("A", 0), ("B", 0), ("C", 0), ("C", 1), ("B", 1), ("A", 1), ("A", 2), ("B", 2), ("C", 2)]
    assert plan.command(A, 8123) == "srv --port 8123 --speculative-config '{\"k\": 1}' -np 4"
    assert plan.server_url(8123) == "http://127.0.0.1:8123"
    assert not plan.fixed_port
    two = SweepPlan("s {args} {port}", (A, B), "B", repeats=2)
    assert [two.configs[s.config].name for s in two.schedule()] == ["A", "B", "B", "A"]


@pytest.mark.parametrize(("kw", "message"), [
    ({"launch": "srv {port}"}, "needs {args}"),
    ({"launch": "srv --port 8000 {args}"}, "has no {port}"),
    ({"baseline": "Z"}, "none of the configurations"),
    ({"configs": (A, Config("A", "x"))}, "two configurations are called 'A'"),
    ({"configs": ()}, "no configurations"),
])
def test_plan_errors(kw: dict, message: str) -> None:
    args = {"launch": "srv --port {port} {args}", "configs": (A, B), "baseline": "A", **kw}
    with pytest.raises(PlanError, match=message):
        SweepPlan(**args)


def test_fixed_url_without_port() -> None:
    plan = SweepPlan("srv --port 8100 {args}", (A,), "A", url="http://127.0.0.1:8100")
    assert plan.fixed_port and plan.server_url(None) == "http://127.0.0.1:8100"


FLAGS = {"--launch": "value", "--config": "multiple", "--grid": "multiple", "--concurrency": "value",
         "--ignore-eos": "flag", "--drain": "flag", "--no-drain": "negative", "--expect-log": "multiple",
         "--repeats": "value"}


def test_plan_file_is_the_command_line(tmp_path) -> None:
    plan = tmp_path / "p.toml"
    plan.write_text("""
launch = "srv --port {port} {args}"
repeats = 2
[configs]
base = "-np 4"
spec = "-np 4 --spec-type ngram-mod"
[grid]
topk = [1, 4]
[run]
concurrency = [1, 4, 16]
ignore-eos = true
drain = false
expect-log = ["ready", "fired up"]
""")
    words = plan_words(str(plan), flags=FLAGS)
    assert words == ["--launch", "srv --port {port} {args}", "--repeats", "2", "--config", "base=-np 4",
                     "--config", "spec=-np 4 --spec-type ngram-mod", "--grid", "topk=1,4", "--concurrency", "1,4,16",
                     "--ignore-eos", "--no-drain", "--expect-log", "ready", "--expect-log", "fired up"]
    entries = tmp_path / "e.toml"
    entries.write_text('[[config]]\nname = "a"\nargs = "-x"\n[[config]]\nname = "b"\n')
    assert plan_words(str(entries), flags=FLAGS) == ["--config", "a=-x", "--config", "b="]


@pytest.mark.parametrize(("text", "message"), [
    ("launch = ", "is not a TOML plan"),
    ("nonsense = 1", "'nonsense' is not an option"),
    ("ignore-eos = 3", "takes true or false"),
    ("configs = 5", "configurations are a"),
])
def test_plan_file_errors(tmp_path, text: str, message: str) -> None:
    plan = tmp_path / "p.toml"
    plan.write_text(text)
    with pytest.raises(PlanError, match=message):
        plan_words(str(plan), flags=FLAGS)
    with pytest.raises(PlanError, match="cannot read"):
        plan_words(str(tmp_path / "missing.toml"), flags=FLAGS)


def _level(c: int, verdicts: dict[str, tuple[str, float]], metric: str = "throughput") -> dict:
    sides = {"base": {"metrics": {metric: {"ratio": None, "verdict": None}}}}
    for name, (verdict, ratio) in verdicts.items():
        sides[name] = {"metrics": {metric: {"verdict": verdict, "ratio": ratio, "ratio_ci_low": ratio * 0.9,
                                                  "ratio_ci_high": ratio * 1.1}}}
    return {"concurrency": c, "occurrence": 0, "sides": sides}


def test_best_by_level_and_its_schedule() -> None:
    levels = [_level(1, {"x": ("better", 1.7), "y": ("better", 1.8)}), _level(4, {"x": ("better", 1.3),
              "y": ("insufficient", 1.4)}), _level(16, {"x": ("worse", 0.8), "y": ("no_difference", 1.01)}),
              _level(64, {"x": ("worse", 0.6), "y": ("insufficient", 1.2)})]
    best = best_by_level(levels, ["x", "y"], "base", "throughput")
    assert best["1"]["config"] == "y" and best["1"]["also_better"] == ["x"]
    assert best["4"]["config"] == "x"  # y's higher point ratio is not decided
    assert best["16"]["config"] == "base" and best["16"]["verdict"] == "baseline"
    assert best["64"]["undecided"] == ["y"]
    assert schedule_text(best) == "C ≤ 1: y; C = 4: x; C ≥ 16: base (not decided at C=64: y)"
    assert schedule_text({"1": {"config": "a"}, "4": {"config": "a"}}) == "every level: a"
    # a latency headline: lower is better
    lat = [_level(1, {"x": ("better", 0.7), "y": ("better", 0.5)}, "tpot_p50")]
    assert best_by_level(lat, ["x", "y"], "base", "tpot_p50")["1"]["config"] == "y"


def test_config_status() -> None:
    assert config_status([{"status": "ok"}, {"status": "ok"}]) == "ok"
    assert config_status([{"status": "ok"}, {"status": "crashed"}]) == "crashed"
    assert config_status([{"status": "failed_to_start"}]) == "failed_to_start"
    assert config_status([{"status": "ok"}, {"status": "pending"}]) == "pending"


def test_gpu_memory_wait() -> None:
    before = {0: (1000.0, 81559.0), 1: (1100.0, 81559.0)}
    readings = iter([{0: (41000.0, 81559.0), 1: (1100.0, 81559.0)}, {0: (9000.0, 81559.0), 1: (1100.0, 81559.0)},
                     {0: (1300.0, 81559.0), 1: (1150.0, 81559.0)}])
    slept: list[float] = []

    async def read() -> dict:
        return next(readings)

    async def sleep(s: float) -> bool:
        slept.append(s)
        return True

    assert asyncio.run(wait_gpu_free(read, before, 60, sleep)) is None  # within 2 % of the total
    assert len(slept) == 2

    async def held() -> dict:
        return {0: (41000.0, 81559.0)}

    assert asyncio.run(wait_gpu_free(held, before, 0, sleep)) == "GPU 0 +39.1 GiB"


def test_port_in_use() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert port_in_use("127.0.0.1", port)
    assert not port_in_use("127.0.0.1", port)


@pytest.mark.parametrize("width", [80, 120])
def test_the_table_is_never_cut(width: int) -> None:
    """The sweep's level table at the terminal's width: wrapped into parts that each repeat the level
    and the configuration, no name or figure cut, no line wider than the width."""
    import io

    from rich.console import Console

    from specload.report.sweep import render

    def side(v: float, ratio: float | None, verdict: str | None) -> dict:
        est = {"value": v, "ci_low": v * 0.9, "ci_high": v * 1.1, "ratio": ratio, "verdict": verdict,
               "ratio_ci_low": ratio and ratio * 0.9, "ratio_ci_high": ratio and ratio * 1.1}
        return {"metrics": {"throughput": est, "ttft_p50": {**est, "value": v / 10}, "tpot_p50": {**est, "value": 3.0}}}

    names = ["baseline-config", "speculative-num-steps=3 topk=1"]
    levels = [{"key": f"C={c}", "concurrency": c, "sides": {names[0]: side(1000.0 * c, None, None),
                                                          names[1]: side(1234.5 * c, 1.2345, "better")}}
              for c in (1, 16)]
    result = {"primary": "throughput", "baseline": names[0], "min_effect": 0.02, "levels": levels,
              "configs": [{"name": n, "status": "ok", "runs": [{"status": "ok"}], "startup_s": 1.0, "args": "-x",
                           "crash": None} for n in names], "schedule_text": "", "crossovers": [], "notes": []}
    out = io.StringIO()
    render(result, Console(file=out, width=width, color_system=None), title="sw")
    text = out.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text and text.count(names[1]) >= 2 and "19,752 [17,777, 21,727]" in text


def test_a_root_cause_in_one_line() -> None:
    from specload.report.sweep import describe

    exited = {"kind": "failed_to_start", "exit": "exited with code 127",
              "message": "launched server exited with code 127 before it was ready: bash: srv: command not found"}
    assert describe(exited) == exited["message"]  # said once, not again after it
    crash = {"kind": "crashed", "exception_type": "AttributeError", "error": "no draft_model_runner",
             "innermost_frame": "eagle_worker_v2.py:431 in forward", "ranks": ["TP0", "TP1"], "at_concurrency": 16,
             "exit": "exited with code 1", "phase": "load"}
    assert describe(crash) == ("AttributeError: no draft_model_runner at eagle_worker_v2.py:431 in forward on TP0, "
                               "TP1; during C=16; server exited with code 1")
    assert describe({**crash, "at_concurrency": None, "phase": "ready", "exit": None}).endswith("; during the warm-up")
    assert describe({"kind": "failed_to_start", "message": "port 8000 is in use"}) == \
        "port 8000 is in use; before it was ready"
