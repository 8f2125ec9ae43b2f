"""Records made in virtual time: the simulator and a specload session in one process, on a loop whose
clock jumps to the next timer (``specload.sim.virtual_time``). A minute of simulated load takes a few
seconds, and the timings are the simulator's schedule whatever else the machine is doing, so tests
whose assertions depend on timing (verdicts, intervals) cannot be flaky.

    path = virtual_record(tmp / "a.jsonl", levels=(1, 4), n=20, seed=1, label="a", sim={"step_ms": 5})

Call it from a synchronous test or fixture (it runs its own loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from specload.session import Session
from specload.sim.config import SimConfig
from specload.sim.server import SimServer
from specload.sim.virtual_time import LoopClock, run_virtual
from tests.conftest import make_config


def virtual_record(path: Path, *, levels: tuple[int, ...] = (1, 4), n: int | None = None, seed: int = 1,
                   label: str | None = None, max_tokens: int = 32, sim: dict | None = None,
                   fields: dict | None = None, script: Callable[[Session], Awaitable[None]] | None = None,
                   stay_open: bool = False) -> Path:
    """``fields``: more RunConfig fields by name (``target_ci_pct=5``); ``script(session)``: a coroutine
    run beside the load that drives ``session.runner`` as a person at the TUI would (``stay_open``: the
    ramp then waits for it, as the TUI does, until it stops the runner)."""

    async def main() -> None:
        server = SimServer(SimConfig(**{"quiet": True, "seed": seed, **(sim or {})}))
        url = await server.start()
        try:
            cfg = make_config(url, **{"concurrency": levels, "requests_per_level": n, "max_duration_s": 3600,
                                      "max_tokens": max_tokens, "continuous_usage": True, "path": str(path), "label": label,
                                      "command": f"virtual run seed={seed} sim={sim}", **(fields or {})})
            session = Session(cfg, clock=LoopClock(asyncio.get_running_loop()), stay_open=stay_open)
            driver = asyncio.ensure_future(script(session)) if script is not None else None
            result = await session.run()
            if driver is not None:
                await driver
            assert result.reason in ("completed", "stopped"), result
        finally:
            await server.stop()

    run_virtual(main())
    return path
