"""Shared fixtures. ``sim``: start simulated LLM servers on 127.0.0.1 port 0, stopped at teardown.

    async def test_x(sim):
        server = await sim(ttft_ms=50, itl_ms=10, spec_tokens=0)
        url = server.url  # http://127.0.0.1:PORT

Keyword arguments are ``SimConfig`` fields. Unless the test passes ``log_file`` or ``quiet``, the
server is quiet (no log lines in the captured output) and seeded (``seed=0``) for reproducibility.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from specload.sim.config import SimConfig
from specload.sim.server import SimServer
from tests.hostile import HostileServer

SimFactory = Callable[..., Awaitable[SimServer]]


@pytest.fixture
async def sim() -> AsyncIterator[SimFactory]:
    servers: list[SimServer] = []

    async def start(**options: object) -> SimServer:
        if "log_file" not in options:
            options.setdefault("quiet", True)
        options.setdefault("seed", 0)
        options.setdefault("host", "127.0.0.1")
        options.setdefault("port", 0)
        server = SimServer(SimConfig(**options))  # type: ignore[arg-type]
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()


@pytest.fixture
async def hostile() -> AsyncIterator[Callable[[], Awaitable[HostileServer]]]:
    """Start hostile servers (``tests/hostile.py``) on 127.0.0.1 port 0, stopped at teardown."""
    servers: list[HostileServer] = []

    async def start() -> HostileServer:
        server = await HostileServer().start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()
