"""Levels judged while they run (--target-ci, --until-decided, the live baseline verdict): the runner
with the judge's extend hook against the simulator, in virtual time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from specload.datatypes import RunEvent
from specload.engine.prompts import PromptSource
from specload.engine.runner import Runner
from specload.plan import LevelSpec, LoadPlan
from specload.record.runs import load_run
from specload.sim.config import SimConfig
from specload.sim.server import SimServer
from specload.sim.virtual_time import LoopClock, run_virtual
from specload.stats import intervals as iv
from specload.stats.level_metrics import estimate
from specload.stats.live_judge import LiveJudge, min_requests
from tests.conftest import make_client
from tests.virtual_runs import virtual_record

# one worker runs this module: its fixture is set up once (xdist --dist loadgroup)
pytestmark = pytest.mark.xdist_group("live_judge")


SIM = {"step_ms": 8.0, "spec_tokens": 3, "accept_rate": 0.7}


def judged_run(judge_args: dict, *, concurrency: int = 4, sim: dict = SIM, seed: int = 7) -> tuple[LiveJudge, int]:
    async def main() -> tuple[LiveJudge, int]:
        loop = asyncio.get_running_loop()
        clock = LoopClock(loop)
        server = SimServer(SimConfig(quiet=True, seed=seed, **sim))
        url = await server.start()
        judge = LiveJudge(t0_ns=clock.now_ns(), **judge_args)

        def on_event(ev: RunEvent) -> None:
            if ev.kind == "level":
                v = ev.value
                judge.level_started(v["index"], v["concurrency"], repeat=v.get("repeat", 0))  # type: ignore[index,union-attr]

        client = make_client(url, max_tokens=32, ignore_eos=True, continuous_usage=True, clock=clock)
        plan = LoadPlan((LevelSpec(concurrency, min_requests(concurrency)),), drain_between_levels=True)
        runner = Runner(client, PromptSource(["hello"]), plan, clock=clock, on_record=judge.add, on_event=on_event,
                        on_level=lambda s: judge.level_finished(s.level_index),
                        extend=judge.extend if judge.judging else None)
        await client.start()
        try:
            await asyncio.wait_for(runner.run(), 3600)
        finally:
            await client.close()
            await server.stop()
        return judge, runner.started

    return run_virtual(main())


def test_target_ci_runs_a_level_until_its_interval_is_narrow_enough() -> None:
    judge, started = judged_run({"target_ci_pct": 4.0})
    view = judge.view(0)
    assert view is not None and view.done == "target"
    assert started > min_requests(4)  # the first 16 requests were not enough for ±4%
    # the finished level, measured as report measures it (bootstrap, fill and drain excluded)
    final = estimate(judge.level(0), "throughput")  # type: ignore[arg-type]
    assert final.half_width_pct is not None and final.half_width_pct < 4.5
    wide_judge, wide_started = judged_run({"target_ci_pct": 40.0})
    assert wide_started == min_requests(4) and wide_judge.view(0).done == "target"  # type: ignore[union-attr]
    capped, capped_started = judged_run({"target_ci_pct": 0.1, "max_requests_per_level": 40})
    assert capped_started == 40 and capped.view(0).done == "cap"  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def slow_baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return virtual_record(tmp_path_factory.mktemp("live") / "base.jsonl", levels=(4,), n=200, seed=3,
                          label="base", sim=SIM)


def test_until_decided_ends_a_level_once_the_verdict_is_clear(slow_baseline: Path) -> None:
    base = load_run(str(slow_baseline))
    judge, started = judged_run({"baseline": base, "until_decided": True}, sim={**SIM, "step_ms": 4.0})
    view = judge.view(0)
    assert view is not None and view.done == "decided" and view.decision.verdict == "better"  # type: ignore[union-attr]
    assert view.baseline is not None and view.ratio is not None and view.ratio.ci_low > 1.0
    assert started < 100  # far below the cap of 200: a clear difference needs few requests
    # the sequential interval is wider than a fixed one for the same requests: the price of looking often
    fixed = iv.ratio(view.baseline, view.estimate)
    assert fixed is not None and (view.ratio.ci_high - view.ratio.ci_low) > (fixed.ci_high - fixed.ci_low)


def test_the_live_verdict_is_shown_without_extending_levels(slow_baseline: Path) -> None:
    base = load_run(str(slow_baseline))
    judge, started = judged_run({"baseline": base}, seed=11)
    assert started == min_requests(4) and not judge.judging
    view = judge.view(0)
    assert view is not None and view.baseline is not None and view.decision is not None
    # identical settings, 16 requests: nothing decided, and never a false verdict
    assert view.decision.verdict == "insufficient"
