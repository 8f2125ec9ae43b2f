"""Scraping the server's Prometheus ``/metrics`` into one ``ServerSample`` per scrape.

``samples_from_metrics`` is pure (the text and the previous scrape's state in, a sample out), so the
arithmetic is tested without a server; ``MetricsScraper`` polls, ``probe_metrics`` tells whether a URL
serves Prometheus text. Counters become per-interval deltas (acceptance since start hides what the
current level does); counts are summed over series and fractions averaged, as data-parallel servers
label one series per engine. The names read, vLLM's, SGLang's and llama.cpp's, are the tables below.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from specload.clock import SYSTEM_CLOCK, Clock
from specload.datatypes import ServerSample
from specload.watch.tail import NoticeFn, NoticeLog

# Counters whose deltas we use, per engine: (role, metric name).
_COUNTERS: dict[str, dict[str, str]] = {
    "vllm": {
        "gen": "vllm:generation_tokens_total",
        "prompt": "vllm:prompt_tokens_total",
        "drafts": "vllm:spec_decode_num_drafts_total",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "accepted": "vllm:spec_decode_num_accepted_tokens_total",
    },
    "sglang": {
        "gen": "sglang:generation_tokens_total",
        "prompt": "sglang:prompt_tokens_total",
    },
    "llamacpp": {
        "gen": "llamacpp:tokens_predicted_total",
        "prompt": "llamacpp:prompt_tokens_total",
        "drafts": "llamacpp:spec_decode_num_drafts_total",
        "draft_tokens": "llamacpp:spec_decode_num_draft_tokens_total",
        "accepted": "llamacpp:spec_decode_num_accepted_tokens_total",
    },
}
_ENGINES = ("vllm", "sglang", "llamacpp")

# Every sample name read below. A scrape keeps only these lines before parsing: vLLM's /metrics is
# ~600 lines, mostly histogram buckets, and parsing all of it took 6-9 ms of CPU per scrape on the
# event loop that reads the streams; the dozen lines we use parse in well under a millisecond.
# Per engine: its gauges of requests running, requests queued and KV-cache usage (the first it has).
_LOAD: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting",
             ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs", ("sglang:token_usage",)),
    "llamacpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred", ("llamacpp:kv_cache_usage_ratio",)),
}
_GAUGES = (*(n for run, queue, usage in _LOAD.values() for n in (run, queue, *usage)),
           "sglang:gen_throughput", "sglang:spec_accept_length", "sglang:spec_accept_rate")
# accepted tokens per draft position, labelled {position="i"}
_PER_POS = ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "llamacpp:spec_decode_num_accepted_tokens_per_pos_total")
_USED = (frozenset(_GAUGES) | frozenset(n for roles in _COUNTERS.values() for n in roles.values())
         | frozenset(_PER_POS))


@dataclass(frozen=True, slots=True)
class MetricsState:
    """What the next scrape needs from this one: its time and the counter totals."""

    t_ns: int
    engine: str | None
    counters: dict[str, float] = field(default_factory=dict)  # role -> total over series
    per_pos: tuple[float, ...] = ()  # accepted tokens per draft position, totals


class _Series:
    """Sum and count of the samples of each metric name (across label sets)."""

    __slots__ = ("sums", "counts", "per_pos")

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.per_pos: dict[int, float] = {}  # draft position -> accepted tokens, over series

    def add(self, name: str, value: float) -> None:
        if math.isnan(value):
            return
        self.sums[name] = self.sums.get(name, 0.0) + value
        self.counts[name] = self.counts.get(name, 0) + 1

    def total(self, *names: str) -> float | None:
        for n in names:
            if n in self.sums:
                return self.sums[n]
        return None

    def mean(self, *names: str) -> float | None:
        for n in names:
            if n in self.sums:
                return self.sums[n] / self.counts[n]
        return None


def _normalise(name: str) -> str:
    # SGLang shipped releases exposing "sglang_num_running_reqs" instead of "sglang:...".
    if name.startswith("sglang_"):
        return "sglang:" + name[7:]
    return name


def used_lines(text: str) -> str:
    """The sample lines of ``text`` whose metric is one we read (comments and the rest dropped).

    Without their ``# TYPE`` lines the parser reads them as untyped samples of the same names,
    which is all ``parse_metrics_text`` looks at.
    """
    keep = []
    lines = text.splitlines()
    for line in lines:
        if not line or line[0] == "#":
            continue
        end = len(line)
        for sep in ("{", " "):
            i = line.find(sep)
            if 0 <= i < end:
                end = i
        if _normalise(line[:end]) in _USED:
            keep.append(line)
    if not keep:
        # none of ours: still tell Prometheus text from an error page (the parser raises on the
        # latter within its first lines), without parsing a whole unknown server's exposition
        return "\n".join(lines[:20]) + "\n"
    return "\n".join(keep) + "\n"


def parse_metrics_text(text: str) -> _Series:
    """Parse Prometheus text; raises ValueError when it is not Prometheus text."""
    series = _Series()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = s.name
            if name.endswith(("_bucket", "_created")):
                continue  # histogram buckets and creation stamps: never used, skip the work
            name = _normalise(name)
            if name in _PER_POS:
                try:
                    pos = int(s.labels.get("position", ""))
                except ValueError:
                    continue
                if not math.isnan(s.value):
                    series.per_pos[pos] = series.per_pos.get(pos, 0.0) + float(s.value)
                continue
            series.add(name, float(s.value))
    return series


def _detect_engine(series: _Series) -> str | None:
    for name in series.sums:
        head = name.partition(":")[0]
        if head in _ENGINES:
            return head
    return None


def _delta(role: str, now: dict[str, float], prev: MetricsState | None) -> float | None:
    if prev is None or role not in now or role not in prev.counters:
        return None
    d = now[role] - prev.counters[role]
    # A negative delta is a counter reset (the server restarted): no rate for this interval.
    return d if d >= 0 else None


def samples_from_metrics(
    text: str, prev_state: MetricsState | None, t_ns: int
) -> tuple[ServerSample, MetricsState]:
    """One scrape's text -> (sample, state for the next call).

    Rates and acceptance are None on the first scrape, after a counter reset, when the engine
    changed, and when nothing was drafted in the interval (acceptance of zero drafts is unknown,
    not zero). Raises ValueError when ``text`` is not Prometheus text.
    """
    series = parse_metrics_text(used_lines(text))
    engine = _detect_engine(series)
    counters: dict[str, float] = {}
    if engine is not None:
        for role, name in _COUNTERS[engine].items():
            v = series.total(name)
            if v is not None:
                counters[role] = v
    per_pos = tuple(series.per_pos.get(i, 0.0) for i in range(max(series.per_pos) + 1)) if series.per_pos else ()
    state = MetricsState(t_ns=t_ns, engine=engine, counters=counters, per_pos=per_pos)
    prev = prev_state if prev_state is not None and prev_state.engine == engine else None
    dt_s = (t_ns - prev.t_ns) / 1e9 if prev is not None else 0.0
    if dt_s <= 0:
        prev = None

    def rate(role: str) -> float | None:
        d = _delta(role, counters, prev)
        return None if d is None else d / dt_s

    d_drafts = _delta("drafts", counters, prev)
    d_draft_tokens = _delta("draft_tokens", counters, prev)
    d_accepted = _delta("accepted", counters, prev)
    accept_rate = d_accepted / d_draft_tokens if d_accepted is not None and d_draft_tokens else None
    # Mean tokens per verify step including the bonus token, as vLLM's own log line defines it.
    accept_len = 1.0 + d_accepted / d_drafts if d_accepted is not None and d_drafts else None

    extra: dict = {"engine": engine}
    running = queued = token_usage = None
    gen_tok_s = rate("gen")
    prompt_tok_s = rate("prompt")
    if engine is not None:
        run, queue, usage = _LOAD[engine]
        running, queued, token_usage = series.total(run), series.total(queue), series.mean(*usage)
    if engine == "sglang":
        # SGLang's gauge is the last decode-log value and stays stale when idle: prefer the
        # counter delta, fall back to the gauge on the first scrape or without the counter.
        if gen_tok_s is None:
            gen_tok_s = series.total("sglang:gen_throughput")
            if gen_tok_s is not None:
                extra["gen_tok_s_from"] = "gauge"
        al = series.mean("sglang:spec_accept_length")
        accept_len = al if al else None  # 0 means speculation is off
        ar = series.mean("sglang:spec_accept_rate")
        accept_rate = ar if ar else None
    if d_drafts is not None:
        extra["drafts"] = d_drafts
    if d_draft_tokens is not None:
        extra["draft_tokens"] = d_draft_tokens
    if d_accepted is not None:
        extra["accepted_tokens"] = d_accepted
        if prev is not None and per_pos and len(prev.per_pos) == len(per_pos):
            d_pos = [now - before for now, before in zip(per_pos, prev.per_pos, strict=True)]
            if min(d_pos) >= 0:  # a reset (server restart) gives no per-position figures
                extra["accepted_per_pos"] = d_pos
    if prev is not None:
        extra["interval_s"] = dt_s
    sample = ServerSample(
        t_ns=t_ns,
        source="metrics",
        running=running,
        queued=queued,
        gen_tok_s=gen_tok_s,
        prompt_tok_s=prompt_tok_s,
        accept_len=accept_len,
        accept_rate=accept_rate,
        token_usage=token_usage,
        extra=extra,
    )
    return sample, state


async def fetch(session: aiohttp.ClientSession, url: str, timeout: float) -> tuple[int, str]:
    # no redirect followed, as no request specload sends does; no compression asked for
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False,
                           headers={"Accept-Encoding": "identity"}) as resp:
        body = await resp.read()
        return resp.status, body.decode("utf-8", errors="replace")


def _looks_like_metrics(text: str) -> bool:
    try:
        series = parse_metrics_text(text)
    except ValueError:
        return False
    return bool(series.sums)


async def probe_metrics(url: str, timeout: float = 3.0, looks: Callable[[str], bool] = _looks_like_metrics) -> bool:
    """True when ``url`` answers 200 with text that ``looks`` accepts (by default: Prometheus text
    holding at least one sample)."""
    try:
        async with aiohttp.ClientSession() as session:
            status, text = await fetch(session, url, timeout)
    except (TimeoutError, aiohttp.ClientError, OSError):
        return False
    return status == 200 and looks(text)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, asyncio.TimeoutError):
        return "timeout"
    return f"{type(exc).__name__}: {exc}"


class MetricsScraper:
    """Scrape ``url`` every ``interval`` seconds; one ``ServerSample`` per good scrape.

    Nothing the server does makes ``run()`` raise: a refused connection, an error status or a
    body that is not Prometheus text becomes one notice when it starts and one when it is over
    (not one per second), and scraping goes on. ``read`` turns a scrape's text into what
    ``on_sample`` gets (``samples_from_metrics`` by default; a DCGM exporter's GPUs in
    ``watch/gpu.py``), ``name`` is what the notices call the endpoint, and ``on_down``, when given,
    hears the notice that it stopped answering instead of ``on_notice``.
    """

    def __init__(
        self,
        url: str,
        interval: float = 1.0,
        clock: Clock = SYSTEM_CLOCK,
        *,
        timeout: float = 5.0,
        on_sample: Callable[[Any], None] | None = None,
        on_notice: NoticeFn | None = None,
        read: Callable[[str, Any, int], tuple[Any, Any]] = samples_from_metrics,
        name: str = "/metrics",
        on_down: NoticeFn | None = None,
    ) -> None:
        self.url = url
        self.name = name
        self._read = read
        self._on_down = on_down
        self.interval = interval
        self.timeout = timeout
        self.notices = NoticeLog(on_notice)
        self.last_sample: Any = None
        self.scrapes = 0
        self.failures = 0
        self._clock = clock
        self._on_sample = on_sample
        self._state: Any = None  # what ``read`` keeps from one scrape for the next
        self._failing: str | None = None
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()  # set by stop() and scrape_soon(): the timer's sleep ends early
        self._rounds_started = 0  # scrapes the timer loop began, and finished (scrape_fresh waits on them)
        self._rounds_done = 0
        self._round_done = asyncio.Event()

    async def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def scrape_soon(self) -> None:
        """Scrape now rather than at the next tick (at a level boundary: the counters as the level
        ends, not up to an interval later), on the timer's own connection and task."""
        self._wake.set()

    async def scrape_fresh(self, timeout: float) -> None:
        """Wait until the timer loop has finished a scrape that began after this call (at most
        ``timeout`` s): a level's figures then include its last moments. One scraper, one connection."""
        want = self._rounds_started + 1
        self.scrape_soon()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self._rounds_done < want and not self._stop.is_set():
                    self._round_done.clear()
                    await self._round_done.wait()

    def _fail(self, why: str) -> None:
        self.failures += 1
        if self._failing is None:
            (self._on_down or self.notices)(f"{self.name} unavailable ({why}); still trying")
        self._failing = why

    async def scrape_once(self, session: aiohttp.ClientSession) -> Any:
        try:
            status, text = await fetch(session, self.url, self.timeout)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            self._fail(_error_text(exc))
            return None
        t_ns = self._clock.now_ns()
        if status != 200:
            self._fail(f"HTTP {status}")
            return None
        try:
            sample, self._state = self._read(text, self._state, t_ns)
        except ValueError:
            self._fail("not Prometheus text")
            return None
        self.scrapes += 1
        if self._failing is not None:
            self.notices(f"{self.name} answering again")
            self._failing = None
        self.last_sample = sample
        if self._on_sample is not None:
            self._on_sample(sample)
        return sample

    async def scrape_now(self) -> Any:
        """One scrape outside the timer: at a level boundary and at the end of a run, so the last
        interval's counters are not lost when the server is stopped right after the load."""
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            return await self.scrape_once(session)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # A new connection per scrape: at one per second the cost is nil, and a restarted server
        # never shows up as a stale pooled connection.
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            while not self._stop.is_set():
                self._wake.clear()
                t0 = loop.time()
                self._rounds_started += 1
                try:
                    await self.scrape_once(session)
                finally:
                    self._rounds_done += 1
                    self._round_done.set()
                wait = max(0.0, self.interval - (loop.time() - t0))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
