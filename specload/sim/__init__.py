"""The built-in simulated LLM server: the zero-setup demo target and the target of integration tests.

``SimConfig`` (config.py) holds every option; ``SimServer`` (server.py) runs it inside the caller's
event loop; ``specload sim`` (cli.py) runs it as a process. The timing model is model.py, the
continuous-batching scheduler scheduler.py, the wire formats openai.py and llamacpp.py, the log
formats serverlog.py.

Two flavours (``SimConfig.flavor`` / ``--flavor``): ``vllm`` (default) speaks vLLM's OpenAI SSE and
/metrics with SGLang-style log lines and SGLang's ``/generate``; ``llamacpp`` plays llama.cpp's
llama-server as observed on the real binary (llamacpp.py: one chunk per token, ``timings``,
``llamacpp:*`` /metrics; serverlog.py: its slot log lines; llama.cpp error bodies, ``--max-batch`` slots
with the context split over them, connections closed after each stream). ``--hang-on-sigterm`` (any
flavour) reproduces the SIGTERM hang of real servers under load.

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
