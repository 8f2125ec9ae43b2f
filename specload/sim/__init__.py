"""The built-in simulated LLM server: the zero-setup demo target and the target of integration tests.

``SimConfig`` (config.py) holds every option, ``SimServer`` (server.py) runs it in the caller's loop,
``specload sim`` (cli.py) as a process; model.py times it, scheduler.py batches, openai.py and
llamacpp.py are the two flavours' wires (``--flavor vllm``, the default, or ``llamacpp``), serverlog.py
their log lines. Exports are lazy so that ``specload sim --help`` does not import aiohttp.
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
