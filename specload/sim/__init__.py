"""The built-in simulated LLM server: the zero-setup demo target and the target of integration tests.

``SimConfig`` (config.py) holds every option; ``SimServer`` (server.py) runs it inside the caller's
event loop; ``specload sim`` (cli.py) runs it as a process. The timing model is model.py, the
continuous-batching scheduler scheduler.py, the log formats serverlog.py.

Exports are lazy so that ``specload sim --help`` does not import aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specload.sim.config import SimConfig
    from specload.sim.server import SimServer, SimStats

__all__ = ["SimConfig", "SimServer", "SimStats"]


def __getattr__(name: str) -> object:
    if name == "SimConfig":
        from specload.sim.config import SimConfig

        return SimConfig
    if name in ("SimServer", "SimStats"):
        from specload.sim import server

        return getattr(server, name)
    raise AttributeError(f"module 'specload.sim' has no attribute {name!r}")
