"""``--expect-log REGEX``: lines that must appear in the server log before the load starts.

Typical uses: ``--expect-log "The server is fired up"`` (SGLang), ``"Application startup complete"``
(vLLM), or a speculative-decoding confirmation line, so a run never measures a server that came up
with the wrong configuration. ``ExpectLog`` is fed every log line by the session (``feed`` is a
cheap no-op once everything was seen) and ``wait`` is awaited before the first request.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass

from specload.clock import SYSTEM_CLOCK, Clock


@dataclass(frozen=True, slots=True)
class ExpectMatch:
    pattern: str
    line: str
    t_ns: int


class ExpectLog:
    """Watch lines for a set of regexes (``re.search``); report which were seen, and where."""

    def __init__(self, patterns: Iterable[str], *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.patterns: tuple[str, ...] = tuple(patterns)
        # Compile up front: a bad regex is a configuration error, raised before anything starts.
        self._pending: dict[str, re.Pattern[str]] = {p: re.compile(p) for p in self.patterns}
        self.seen: dict[str, ExpectMatch] = {}
        self._clock = clock
        self._done = asyncio.Event()
        if not self._pending:
            self._done.set()

    @property
    def all_seen(self) -> bool:
        return not self._pending

    @property
    def missing(self) -> list[str]:
        return list(self._pending)

    def feed(self, line: str) -> None:
        if not self._pending:
            return
        for pattern, rx in list(self._pending.items()):
            if rx.search(line):
                self.seen[pattern] = ExpectMatch(pattern, line, self._clock.now_ns())
                del self._pending[pattern]
        if not self._pending:
            self._done.set()

    async def wait(self, timeout: float | None) -> bool:
        """True when every pattern was seen within ``timeout`` seconds (None: wait for ever)."""
        try:
            async with asyncio.timeout(timeout):
                await self._done.wait()
        except TimeoutError:
            return False
        return True
