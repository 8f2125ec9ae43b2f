"""Per-level summaries: the numbers of one concurrency level, computed the same way everywhere.

The live run, the headless table, the record's ``level`` lines and ``specload report`` all call
``LevelColumns.summary`` on the same columns, so the numbers cannot drift apart; the README defines
each figure. The session attaches the server's own figures over the level's own span
(``with_server``), beside the acceptance the requests themselves carried. A level's requests of one
dataset category or one conversation turn get the same figures as a group (``GroupFigures``): a
configuration may win on code and lose on chat, and the TTFT of turn n shows what the prefix cache
saves.

A level cut by a crash, the server going down or a pause (``LevelBook.cut_begin``/``cut_end``)
counts its *active* time only (``LevelColumns._cut``), so streams hung after a crash cannot make a
level of 129 tok/s read 29. Such a level carries ``cut`` (what cut it first) and ``lost``.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any

import numpy as np

from specload.datatypes import RequestRecord
from specload.stats.gpu_levels import GpuFigures
from specload.stats.histogram import LogHistogram
from specload.stats.judgement import LevelJudgement
from specload.stats.quantiles import percentiles
from specload.stats.slo import LevelGoodput


@dataclass(frozen=True, slots=True)
class LevelSummary:
    level_index: int
    concurrency: int
    requests: int
    ok: int
    errors: tuple[tuple[str, int], ...]  # (kind, count), most frequent first
    output_tokens: int
    tokens_estimated: bool
    wall_s: float
    throughput_tok_s: float
    per_request_tok_s: float
    req_s: float  # successful requests / wall time (vLLM's request throughput)
    ttft_ms_avg: float | None
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    tpot_ms_p50: float | None
    tpot_ms_p99: float | None
    itl_ms_p50: float | None
    itl_ms_p99: float | None
    e2e_s_avg: float | None
    e2e_s_p50: float | None
    e2e_s_p99: float | None
    # open loop: the offered request rate (req/s) of the level; None in a closed loop
    rate: float | None = None
    # the level against the --slo objectives (stats/goodput.py); None without objectives
    goodput: LevelGoodput | None = None
    # --target-ci / --baseline: the primary figure's interval and the live verdict (stats/judgement.py)
    judged: LevelJudgement | None = None
    # --- what vLLM's client reports besides (issue 15); None where a record cut short lacks it ---
    input_tokens: int | None = None  # the server's usage.prompt_tokens, summed over successful requests
    prompt_tokens_avg: float | None = None  # per request, as the server counted
    prompt_tokens_p50: float | None = None
    prompt_tokens_p99: float | None = None
    prompt_tokens_requested_avg: float | None = None  # synthetic prompts: the length asked for
    prompt_tokens_cached_avg: float | None = None  # of the prompt, served by the server's prefix cache
    peak_tok_s: float | None = None  # output tokens in the best 1 s window of the level
    peak_concurrency: int | None = None  # the most of the level's requests in flight at once
    ttft_ms_std: float | None = None
    tpot_ms_avg: float | None = None
    tpot_ms_std: float | None = None
    itl_ms_avg: float | None = None  # per-token ITL (a chunk of k tokens: gap / k)
    itl_ms_std: float | None = None
    gap_ms_avg: float | None = None  # per-chunk gap: between text chunks (vLLM's and SGLang's "ITL")
    gap_ms_std: float | None = None
    gap_ms_p50: float | None = None
    gap_ms_p99: float | None = None
    e2e_s_std: float | None = None
    # p90 and p95 beside p50/p99 (``vllm bench serve --metric-percentiles 50,90,95,99``)
    ttft_ms_p90: float | None = None
    ttft_ms_p95: float | None = None
    tpot_ms_p90: float | None = None
    tpot_ms_p95: float | None = None
    itl_ms_p90: float | None = None
    itl_ms_p95: float | None = None
    gap_ms_p90: float | None = None
    gap_ms_p95: float | None = None
    e2e_s_p90: float | None = None
    e2e_s_p95: float | None = None
    # --- the server's own figures over the level's span (its /metrics counters or log lines) ---
    accept_len: float | None = None  # speculative decoding: tokens per verify step, bonus included
    accept_rate: float | None = None  # accepted / drafted tokens
    accept_per_pos: tuple[float, ...] | None = None  # acceptance rate of each draft position
    server_gen_tok_s: float | None = None  # generation throughput the server reports
    server_source: str | None = None  # where those came from: metrics, log:vllm, ...
    # --- a level cut by a crash, the server down or a pause (None: not cut) ---
    cut: str | None = None  # crash, server_down, pause: the first that cut it
    active_s: float | None = None  # the time throughput and req/s are over (wall time less the cut)
    lost: int | None = None  # its requests that failed once the cut began
    # the server's GPUs over the level (--gpu-metrics): utilisation, memory, power, energy per token
    gpu: GpuFigures | None = None
    # --- what the requests themselves said (the server's per-request speculative counts) ---
    request_accept_len: float | None = None
    request_accept_rate: float | None = None
    # the level's requests by dataset category and by conversation turn ("1", "2", ...)
    categories: tuple[tuple[str, GroupFigures], ...] | None = None
    turns: tuple[tuple[str, GroupFigures], ...] | None = None
    # the level's first request sent and last ended (clock ns): in memory only, for the server figures
    span_ns: tuple[int, int] | None = field(default=None, compare=False)
    # the part of it in which no other level's request was in flight (LevelBook): the server's
    # figures are over it, so a level's srv tok/s is its own load's, not the next level's
    own_span_ns: tuple[int, int] | None = field(default=None, compare=False)

    def as_record(self) -> dict:
        d = {
            "level_index": self.level_index,
            "concurrency": self.concurrency,
            "requests": self.requests,
            "ok": self.ok,
            "errors": dict(self.errors),
            "output_tokens": self.output_tokens,
            "tokens_estimated": self.tokens_estimated,
        }
        for name in _FLOATS:
            d[name] = _r(getattr(self, name), 4 if name.startswith("e2e_s_") else 3)
        d["input_tokens"] = self.input_tokens
        d["peak_concurrency"] = self.peak_concurrency
        d["accept_per_pos"] = None if self.accept_per_pos is None else [round(v, 4) for v in self.accept_per_pos]
        d["server_source"] = self.server_source
        if self.rate is not None:
            d["rate"] = self.rate
        if self.cut is not None:
            d["cut"] = self.cut
            d["active_s"] = _r(self.active_s)
            d["lost"] = self.lost
        if self.goodput is not None:
            d["goodput"] = self.goodput.as_record()
        if self.judged is not None:
            d["judged"] = self.judged.as_record()
        if self.gpu is not None:
            d["gpu"] = self.gpu.as_record()
        if self.request_accept_len is not None or self.request_accept_rate is not None:
            d["request_accept_len"] = _r(self.request_accept_len, 4)
            d["request_accept_rate"] = _r(self.request_accept_rate, 4)
        for key in ("categories", "turns"):
            groups = getattr(self, key)
            if groups is not None:
                d[key] = {name: g.as_record() for name, g in groups}
        return d

    @classmethod
    def from_record(cls, d: dict) -> LevelSummary:
        errs = d.get("errors") or {}
        per_pos = d.get("accept_per_pos")
        return cls(
            level_index=d.get("level_index", -1),
            concurrency=d["concurrency"],
            requests=d["requests"],
            ok=d["ok"],
            errors=tuple(sorted(errs.items(), key=lambda kv: -kv[1])),
            output_tokens=d.get("output_tokens", 0),
            tokens_estimated=d.get("tokens_estimated", False),
            wall_s=d["wall_s"],
            throughput_tok_s=d["throughput_tok_s"],
            per_request_tok_s=d["per_request_tok_s"],
            req_s=d.get("req_s", 0.0),
            goodput=LevelGoodput.from_record(d.get("goodput")),
            judged=LevelJudgement.from_record(d.get("judged")),
            accept_per_pos=None if per_pos is None else tuple(per_pos),
            gpu=GpuFigures.from_record(d.get("gpu")),
            categories=GroupFigures.groups_from_record(d.get("categories")),
            turns=GroupFigures.groups_from_record(d.get("turns")),
            **{name: d.get(name) for name in (*_FLOATS[4:], *_AS_READ)},
        )

    def with_server(self, fig: ServerFigures | None) -> LevelSummary:
        """The summary with the server's own figures over the level's span."""
        if fig is None:
            return self
        full = replace(
            self,
            accept_len=fig.accept_len,
            accept_rate=fig.accept_rate,
            accept_per_pos=fig.accept_per_pos,
            server_gen_tok_s=fig.gen_tok_s,
            server_source=fig.source,
        )
        return replace(LevelSummary.from_record(full.as_record()), span_ns=self.span_ns,
                       own_span_ns=self.own_span_ns)

    def server_span_ns(self) -> tuple[int, int] | None:
        """The span the server's figures are over: the level's own (``own_span_ns``) where known."""
        if self.own_span_ns is None:
            return self.span_ns
        a, b = self.own_span_ns
        return (a, b) if b > a else None  # none of its own: any server figure would be another level's

    def active_span_ns(self) -> tuple[int, int] | None:
        """The span its GPU energy is over: from its first request to its last end, or to its active
        time's end when a crash, the server down or a pause cut it (a pause inside it stays in)."""
        if self.span_ns is None:
            return None
        a, b = self.span_ns
        return (a, min(b, a + int(self.active_s * 1e9))) if self.cut and self.active_s is not None else (a, b)

    def with_gpu(self, fig: GpuFigures | None) -> LevelSummary:
        """The summary with its GPUs' figures (at the record's precision, as ``with_server``)."""
        if fig is None:
            return self
        return replace(self, gpu=GpuFigures.from_record(fig.as_record()))


# the record's figures at its precision (e2e_s_* to 4 places, the rest 3), in its order
_FLOATS = (
    "wall_s", "throughput_tok_s", "per_request_tok_s", "req_s", "ttft_ms_avg", "ttft_ms_p50", "ttft_ms_p99",
    "tpot_ms_p50", "tpot_ms_p99", "itl_ms_p50", "itl_ms_p99", "e2e_s_avg", "e2e_s_p50", "e2e_s_p99",
    "prompt_tokens_avg", "prompt_tokens_p50", "prompt_tokens_p99", "prompt_tokens_requested_avg",
    "prompt_tokens_cached_avg", "peak_tok_s",
    "ttft_ms_std", "tpot_ms_avg", "tpot_ms_std", "itl_ms_avg", "itl_ms_std", "gap_ms_avg", "gap_ms_std",
    "gap_ms_p50", "gap_ms_p99", "e2e_s_std", "accept_len", "accept_rate", "server_gen_tok_s",
    "ttft_ms_p90", "ttft_ms_p95", "tpot_ms_p90", "tpot_ms_p95", "itl_ms_p90", "itl_ms_p95",
    "gap_ms_p90", "gap_ms_p95", "e2e_s_p90", "e2e_s_p95",
)
# the other fields a level line holds as they are (None where it has none)
_AS_READ = ("rate", "input_tokens", "peak_concurrency", "server_source", "cut", "active_s", "lost",
            "request_accept_len", "request_accept_rate")


@dataclass(frozen=True, slots=True)
class GroupFigures:
    """The figures of a level's requests of one category or one conversation turn."""

    requests: int
    ok: int
    output_tokens: int
    throughput_tok_s: float  # the group's tokens over the level's active time
    per_request_tok_s: float | None
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    tpot_ms_p50: float | None
    tpot_ms_p99: float | None
    e2e_s_p50: float | None
    prompt_tokens_avg: float | None
    prompt_tokens_cached_avg: float | None
    accept_len: float | None  # from the requests' own speculative counts
    accept_rate: float | None

    def as_record(self) -> dict:
        return {k: (_r(v, 4) if isinstance(v, float) else v) for k, v in
                ((f, getattr(self, f)) for f in self.__slots__)}

    @classmethod
    def from_record(cls, d: object) -> GroupFigures | None:
        if not isinstance(d, dict):
            return None
        num = lambda k: d[k] if isinstance(d.get(k), (int, float)) and not isinstance(d.get(k), bool) else None  # noqa: E731
        counts = [num(k) for k in ("requests", "ok", "output_tokens")]
        if any(c is None for c in counts):
            return None
        rest = {f: num(f) for f in cls.__slots__[3:]}
        rest["throughput_tok_s"] = rest["throughput_tok_s"] or 0.0
        return cls(int(counts[0]), int(counts[1]), int(counts[2]), **rest)  # type: ignore[arg-type]

    @staticmethod
    def groups_from_record(d: object) -> tuple[tuple[str, GroupFigures], ...] | None:
        if not isinstance(d, dict):
            return None
        out = tuple((str(k), g) for k, v in d.items() if (g := GroupFigures.from_record(v)) is not None)
        return out or None


class _Spec:
    """Pooled speculative counts of the requests that carried them: accepted of drafted tokens (the
    rate); for the length, verify steps with the accepted tokens of those requests (vLLM, SGLang), or
    with their output tokens where only the steps are known (SGLang's older meta_info)."""

    __slots__ = ("accepted", "drafted", "steps", "steps_accepted", "bare_steps", "bare_tokens")

    def __init__(self) -> None:
        self.accepted = self.drafted = self.steps = self.steps_accepted = self.bare_steps = self.bare_tokens = 0

    def add(self, steps: int | None, accepted: int | None, drafted: int | None, tokens: int) -> None:
        if drafted is not None and accepted is not None:
            self.accepted += accepted
            self.drafted += drafted
            if steps:
                self.steps += steps
                self.steps_accepted += accepted
        elif steps:
            self.bare_steps += steps
            self.bare_tokens += tokens

    def figures(self) -> tuple[float | None, float | None]:
        """(acceptance length, acceptance rate) of the pooled counts."""
        rate = self.accepted / self.drafted if self.drafted else None
        if self.steps:
            return 1.0 + self.steps_accepted / self.steps, rate
        return (self.bare_tokens / self.bare_steps if self.bare_steps else None), rate


class _Group:
    """A level's requests of one category or turn, as compact columns."""

    __slots__ = ("requests", "ok", "tokens", "ttft", "tpot", "e2e", "rate", "prompt", "cached", "spec")

    def __init__(self) -> None:
        self.requests = self.ok = 0
        self.tokens = array("d")
        self.ttft, self.tpot, self.e2e, self.rate = array("d"), array("d"), array("d"), array("d")
        self.prompt, self.cached = array("d"), array("d")
        self.spec = _Spec()

    def add(self, ok: bool, tokens: int, ttft_ns: float | None, tpot_ns: float | None, e2e_ns: float | None,
            prompt: int | None, cached: int | None, spec: tuple[int | None, int | None, int | None]) -> None:
        self.requests += 1
        if not ok:
            return
        self.ok += 1
        self.tokens.append(tokens)
        for col, v in ((self.ttft, ttft_ns), (self.tpot, tpot_ns), (self.e2e, e2e_ns), (self.prompt, prompt),
                       (self.cached, cached)):
            if v is not None:
                col.append(v)
        if e2e_ns:
            self.rate.append(tokens / (e2e_ns / 1e9))
        self.spec.add(*spec, tokens)

    def figures(self, active_s: float) -> GroupFigures:
        total = int(sum(self.tokens))
        ttft, tpot, e2e = _pct(self.ttft, 1e6), _pct(self.tpot, 1e6), _pct(self.e2e, 1e9)
        al, ar = self.spec.figures()
        mean = lambda a: (sum(a) / len(a)) if len(a) else None  # noqa: E731
        return GroupFigures(self.requests, self.ok, total, total / active_s if active_s > 0 else 0.0, mean(self.rate),
                            ttft[1], ttft[4], tpot[1], tpot[4], e2e[1], mean(self.prompt), mean(self.cached), al, ar)


@dataclass(frozen=True, slots=True)
class ServerFigures:
    """What the server said about itself over one level's span (``stats/server_levels.py``)."""

    accept_len: float | None = None
    accept_rate: float | None = None
    accept_per_pos: tuple[float, ...] | None = None
    gen_tok_s: float | None = None
    source: str | None = None


def _r(v: float | None, nd: int = 3) -> float | None:
    return None if v is None else round(float(v), nd)


class _Moments:
    """Count, mean and sum of squared deviations, merged request by request (Chan et al.), so the
    standard deviation of millions of ITLs is exact without keeping them."""

    __slots__ = ("n", "mean", "m2")

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0

    def add(self, values: np.ndarray) -> None:
        nb = values.size
        if nb == 0:
            return
        mb = float(np.add.reduce(values)) / nb  # (the ufunc itself: ndarray.sum's wrapper costs more for 500 values)
        d = values - mb
        # not ``d @ d``: a BLAS dot of a batch's 32k values wakes OpenBLAS's threads, whose spinning
        # took a second of CPU from a 2-core machine's load
        m2b = float(np.add.reduce(d * d))
        na = self.n
        n = na + nb
        delta = mb - self.mean
        self.mean += delta * nb / n
        self.m2 += m2b + delta * delta * na * nb / n
        self.n = n

    def mean_std(self, scale: float) -> tuple[float | None, float | None]:
        if self.n == 0:
            return None, None
        return self.mean / scale, (self.m2 / self.n) ** 0.5 / scale  # population sd, as np.std


# tokens are counted into 100 ms buckets; the best 1 s is the best run of ten consecutive ones
_BUCKET_NS = 100_000_000
_WINDOW_BUCKETS = 10


# the requests' values held before one numpy pass folds them in (the pass costs about as much as one
# request's did: ~8 calls of a few microseconds each, now once per this many requests)
_HOLD = 64


class _Series:
    """A latency's histogram and moments, fed each request's values as an array: the arrays are held
    and folded in together (``fold`` before any figure is read)."""

    __slots__ = ("hist", "moments", "_held")

    def __init__(self) -> None:
        self.hist = LogHistogram()
        self.moments = _Moments()
        self._held: list[np.ndarray] = []

    def add(self, values: np.ndarray) -> None:
        self._held.append(values)
        if len(self._held) >= _HOLD:
            self.fold()

    def fold(self) -> None:
        held = self._held
        if not held:
            return
        a = held[0] if len(held) == 1 else np.concatenate(held)
        self._held = []
        self.hist.add_many(a)
        self.moments.add(a)


class LevelColumns:
    """The columns of one level's requests, kept compact (array('d')) so long runs stay small."""

    __slots__ = (
        "level_index", "concurrency", "requests", "ok", "errors", "estimated",
        "first_start_ns", "last_end_ns", "tokens", "ttft_ns", "tpot_ns", "e2e_ns", "itl", "rate",
        "starts_ns", "ends_ns", "prompt", "requested", "cached", "gap", "buckets", "_held_times",
        "_held_tokens", "_streams", "cuts", "failed_ends_ns", "spec", "groups",
    )

    def __init__(self, level_index: int, concurrency: int, rate: float | None = None) -> None:
        self.level_index = level_index
        self.concurrency = concurrency
        self.rate = rate
        self.requests = 0
        self.ok = 0
        self.errors: dict[str, int] = {}
        self.estimated = False
        self.first_start_ns: int | None = None
        self.last_end_ns: int | None = None
        self.tokens = array("d")  # per ok request
        self.ttft_ns = array("d")
        self.tpot_ns = array("d")
        self.e2e_ns = array("d")
        self.itl = _Series()  # every per-token ITL of the level's successful requests
        self.starts_ns = array("d")  # every request, for the peak concurrency
        self.ends_ns = array("d")
        self.prompt = array("d")  # server-counted prompt tokens of ok requests that report them
        self.requested = array("d")  # synthetic prompts: the asked length, ok requests
        self.cached = array("d")  # prompt tokens the server's prefix cache served, where reported
        self.gap = _Series()  # per-chunk gaps
        self.buckets: dict[int, float] = {}  # 100 ms bucket -> output tokens that arrived in it
        self._held_times: list[np.ndarray] = []  # chunk arrival times (ns) not yet in the buckets ...
        self._held_tokens: list[np.ndarray] = []  # ... and their tokens
        # (chunk offsets, start_ns, ITL tokens per chunk, tokens per chunk) of streams not yet folded in
        self._streams: list[tuple[tuple[int, ...], int, float, float]] = []
        # [begin_ns, end_ns or None (still cut), reason]: crash, server_down, pause (LevelBook.cut_begin)
        self.cuts: list[list] = []
        self.failed_ends_ns = array("d")  # when each failed request ended, for the requests a cut lost
        self.spec = _Spec()  # the requests' own speculative counts
        # ("categories" | "turns", name) -> that group's requests
        self.groups: dict[tuple[str, str], _Group] = {}

    def add(self, rec: RequestRecord) -> None:
        ok = rec.ok
        offs = rec.chunk_offsets_ns
        n = len(offs)
        per = rec.chunk_tokens
        # the usual stream (tokens per chunk not told, two chunks or more): its ITLs, gaps and token
        # times are held as the client's tuple and computed for _HOLD requests at once (_fold_streams)
        held = ok and n > 1 and (per is None or len(per) != n)
        arr = None
        if ok and n > 1 and not held:
            arr = np.asarray(offs, dtype=np.int64)  # once, for the ITLs and the gaps
        self.add_values(
            start_ns=rec.start_ns,
            end_ns=rec.end_ns,
            ok=ok,
            error_kind=rec.error_kind.value if rec.error_kind is not None else None,
            output_tokens=rec.output_tokens,
            estimated=rec.tokens_estimated,
            ttft_ns=rec.ttft_ns,
            e2e_ns=rec.e2e_ns,
            tpot_ns=rec.tpot_ns,
            itl_ns=rec.itl_per_token(arr) if ok and not held else None,
            prompt_tokens=rec.prompt_tokens,
            prompt_tokens_requested=rec.prompt_tokens_requested,
            prompt_tokens_cached=rec.prompt_tokens_cached,
            spec=(rec.spec_verify_ct, rec.spec_accepted, rec.spec_drafted),
            category=rec.category,
            turn=rec.turn,
        )
        if held:
            out, c = rec.output_tokens, max(n, rec.chunks)
            # the ITL's tokens per chunk: the first chunk carries the prefill's token, the others share
            # the rest (over all the chunks that came), as RequestRecord.itl_per_token counts them
            mean = (out - 1) / (c - 1) if out > c - 1 else 1.0
            self._streams.append((offs, rec.start_ns, mean, out / n))
            if len(self._streams) >= _HOLD:
                self._fold_streams()
        elif ok and n:
            self._add_chunks(rec, arr)

    def _add_chunks(self, rec: RequestRecord, offs: np.ndarray | None) -> None:
        if offs is None:  # one chunk: no gap between chunks
            offs = np.asarray(rec.chunk_offsets_ns, dtype=np.int64)
        else:
            self.gap.add(np.diff(offs).astype(np.float64))
        # output tokens over time: each chunk's tokens at its arrival
        per = rec.chunk_tokens
        if per is not None and len(per) == offs.size:
            toks = np.asarray(per, dtype=np.float64)
        else:
            toks = np.full(offs.size, rec.output_tokens / offs.size)
        self._held_times.append(rec.start_ns + offs)
        self._held_tokens.append(toks)
        if len(self._held_times) >= _HOLD:
            self._fold_buckets()

    def _fold_streams(self) -> None:
        """The held streams' ITLs, gaps and token times, in one numpy pass over all their chunks: value
        for value what ``RequestRecord.itl_per_token`` and ``_add_chunks`` give one by one (each
        numpy call costs about a microsecond, and a request took some twenty of them)."""
        streams = self._streams
        if not streams:
            return
        self._streams = []
        lens = np.fromiter((len(s[0]) for s in streams), np.int64, len(streams))
        o = np.fromiter(chain.from_iterable(s[0] for s in streams), np.int64, int(lens.sum()))
        ends = np.cumsum(lens)  # each stream's chunks end before this index
        d = o[1:] - o[:-1]
        inside = np.ones(d.size, dtype=bool)
        inside[ends[:-1] - 1] = False  # (the step from one stream's last chunk to the next one's first)
        self.gap.add(d[inside].astype(np.float64))
        self.gap.fold()  # (a batch is already as large as the series holds)
        # a burst (chunks of one read, one time) begins after each step that is not 0: its ITLs are
        # the step over the burst's tokens, the k-th partial sum of the stream's mean for k chunks
        nz = np.flatnonzero(inside & (d != 0))
        if nz.size:
            sid = np.searchsorted(ends, nz, side="right")  # the stream of each burst
            nxt = np.empty_like(nz)
            nxt[:-1] = nz[1:]
            last = np.empty(nz.size, dtype=bool)
            last[:-1] = sid[1:] != sid[:-1]
            last[-1] = True
            nxt[last] = ends[sid[last]] - 1  # a stream's last burst ends at its last chunk
            counts = nxt - nz  # chunks per burst
            means, which = np.unique(np.array([s[2] for s in streams]), return_inverse=True)
            k, w = counts - 1, which[sid]
            kmax = int(counts.max())
            # the tokens of a burst of k chunks: the k-th partial sum of its stream's mean, as the loop
            # adds them (cumsum is sequential), in a table of each mean's sums; or, when a few long
            # bursts would make that table larger than the batch, each mean's only as far as its own go
            if means.size * kmax <= 2 * o.size:
                sums = np.cumsum(np.repeat(means, kmax).reshape(means.size, kmax), axis=1)[w, k]
            else:
                sums = np.empty(k.size)
                for i, m in enumerate(means.tolist()):
                    sel = w == i
                    if sel.any():
                        ks = k[sel]
                        sums[sel] = np.cumsum(np.full(int(ks.max()) + 1, m))[ks]
            tokens = np.maximum(sums, 1e-9)
            self.itl.add(np.repeat(d[nz].astype(np.float64) / tokens, counts))
            self.itl.fold()
        self._held_times.append(o + np.repeat(np.fromiter((s[1] for s in streams), np.int64, len(streams)), lens))
        self._held_tokens.append(np.repeat(np.array([s[3] for s in streams]), lens))
        self._fold_buckets()

    def _fold_buckets(self) -> None:
        """The held chunks' tokens into their 100 ms buckets, in one pass."""
        if self._streams:
            self._fold_streams()  # (which comes back here)
            return
        if not self._held_times:
            return
        b = np.concatenate(self._held_times) // _BUCKET_NS
        w = np.concatenate(self._held_tokens)
        self._held_times, self._held_tokens = [], []
        lo = int(b.min())
        span = int(b.max()) - lo + 1
        if span <= 4 * b.size + 1024:  # the usual: a few seconds of buckets, counted by index
            rel = b - lo
            sums = np.bincount(rel, weights=w, minlength=span)
            keys = np.flatnonzero(np.bincount(rel, minlength=span))
            pairs = zip((keys + lo).tolist(), sums[keys].tolist(), strict=True)
        else:  # times far apart (a file from elsewhere): only the buckets that have chunks
            keys, inverse = np.unique(b, return_inverse=True)
            pairs = zip(keys.tolist(), np.bincount(inverse, weights=w).tolist(), strict=True)
        buckets = self.buckets
        for k, v in pairs:
            buckets[k] = buckets.get(k, 0.0) + v

    def add_values(
        self,
        *,
        start_ns: int,
        end_ns: int,
        ok: bool,
        error_kind: str | None,
        output_tokens: int,
        estimated: bool,
        ttft_ns: float | None,
        e2e_ns: float | None,
        tpot_ns: float | None,
        itl_ns: list[float] | np.ndarray | None,
        prompt_tokens: int | None = None,
        prompt_tokens_requested: int | None = None,
        prompt_tokens_cached: int | None = None,
        spec: tuple[int | None, int | None, int | None] = (None, None, None),
        category: str | None = None,
        turn: int | None = None,
    ) -> None:
        """One request's values; ``spec``: its own speculative counts (verify steps, accepted, drafted)."""
        for key in (("categories", category), ("turns", None if turn is None else str(turn))):
            if key[1] is not None:
                self.groups.setdefault(key, _Group()).add(  # type: ignore[arg-type]
                    ok, output_tokens, ttft_ns, tpot_ns, e2e_ns, prompt_tokens, prompt_tokens_cached, spec)
        self.requests += 1
        if self.first_start_ns is None or start_ns < self.first_start_ns:
            self.first_start_ns = start_ns
        if self.last_end_ns is None or end_ns > self.last_end_ns:
            self.last_end_ns = end_ns
        self.starts_ns.append(start_ns)
        self.ends_ns.append(end_ns)
        if not ok:
            self.failed_ends_ns.append(end_ns)
            k = error_kind or "error"
            self.errors[k] = self.errors.get(k, 0) + 1
            return
        self.ok += 1
        self.estimated = self.estimated or estimated
        self.tokens.append(output_tokens)
        self.spec.add(*spec, output_tokens)
        if ttft_ns is not None:
            self.ttft_ns.append(ttft_ns)
        if e2e_ns is not None:
            self.e2e_ns.append(e2e_ns)
        if tpot_ns is not None:
            self.tpot_ns.append(tpot_ns)
        if itl_ns is not None and len(itl_ns):
            self.itl.add(np.asarray(itl_ns, dtype=np.float64))
        if prompt_tokens is not None:
            self.prompt.append(prompt_tokens)
        if prompt_tokens_requested is not None:
            self.requested.append(prompt_tokens_requested)
        if prompt_tokens_cached is not None:
            self.cached.append(prompt_tokens_cached)

    def _peak_tok_s(self) -> float | None:
        self._fold_buckets()
        if not self.buckets:
            return None
        lo, hi = min(self.buckets), max(self.buckets)
        series = np.zeros(hi - lo + 1)
        for k, v in self.buckets.items():
            series[k - lo] = v
        if series.size <= _WINDOW_BUCKETS:
            return float(series.sum())  # the level lasted under a second: its tokens in that second
        window = np.convolve(series, np.ones(_WINDOW_BUCKETS), mode="valid")
        return float(window.max())

    def _peak_concurrency(self) -> int | None:
        if not len(self.starts_ns):
            return None
        starts = np.frombuffer(self.starts_ns, dtype=np.float64)
        ends = np.frombuffer(self.ends_ns, dtype=np.float64)
        t = np.concatenate([starts, ends])
        d = np.concatenate([np.ones(starts.size), -np.ones(ends.size)])
        # at equal times an end comes first: a slot freed and refilled is not one more in flight
        order = np.lexsort((d, t))
        return int(np.cumsum(d[order]).max())

    def _end_ns(self, until_ns: int | None) -> int | None:
        """The level's end: its last request's, or ``until_ns`` for a level summarised while it runs
        (requests still in flight, perhaps hung by a crash)."""
        end = self.last_end_ns
        if until_ns is not None and self.first_start_ns is not None and (end is None or until_ns > end):
            return until_ns
        return end

    def _cut(self, until_ns: int | None = None) -> tuple[str, float, int] | None:
        """(what cut the level first, its active seconds, the requests lost) or None: not cut. The
        crash or server-down time is out from its start; a pause only where none of the level's
        requests was in flight (those in flight when it began still streamed, and are counted)."""
        a, b = self.first_start_ns, self._end_ns(until_ns)
        if a is None or b is None:
            return None
        hit = [(c0, b if c1 is None else min(c1, b), why) for c0, c1, why in self.cuts
               if c0 < b and (c1 is None or c1 > a)]
        if not hit:
            return None
        hit.sort(key=lambda c: c[0])
        out: list[tuple[float, float]] = []
        busy: list[tuple[float, float]] | None = None
        for c0, c1, why in hit:
            c0 = max(c0, a)
            if why != "pause":
                out.append((c0, c1))
                continue
            if busy is None:
                busy = _union(np.frombuffer(self.starts_ns, dtype=np.float64),
                              np.frombuffer(self.ends_ns, dtype=np.float64))
            out.extend(_minus((c0, c1), busy))
        cut_ns = sum(e - s for s, e in _union(np.array([s for s, _ in out]), np.array([e for _, e in out])))
        first = hit[0][0]
        lost = int(np.count_nonzero(np.frombuffer(self.failed_ends_ns, dtype=np.float64) >= first)) \
            if len(self.failed_ends_ns) else 0
        if not cut_ns and not lost:
            return None  # a pause while requests streamed took nothing out ("active 10.9 of 10.9 s")
        return hit[0][2], max(0.0, (b - a - cut_ns) / 1e9), lost

    def summary(self, until_ns: int | None = None) -> LevelSummary:
        """The level's figures; ``until_ns``: of a level still running, as if it ended then."""
        start, end = self.first_start_ns, self._end_ns(until_ns)
        wall_ns = end - start if start is not None and end is not None else 0
        wall_s = wall_ns / 1e9
        cut = self._cut(until_ns)
        active_s = wall_s if cut is None else cut[1]
        toks = np.frombuffer(self.tokens, dtype=np.float64) if len(self.tokens) else np.zeros(0)
        e2e = np.frombuffer(self.e2e_ns, dtype=np.float64) if len(self.e2e_ns) else np.zeros(0)
        total = int(toks.sum()) if toks.size else 0
        per_req = 0.0
        if e2e.size and e2e.size == toks.size:
            valid = e2e > 0
            if valid.any():
                per_req = float(np.mean(toks[valid] / (e2e[valid] / 1e9)))
        prompt = _pct(self.prompt, 1.0)
        self._fold_streams()
        self.itl.fold()
        self.gap.fold()
        itl_avg, itl_std = self.itl.moments.mean_std(1e6)
        gap_avg, gap_std = self.gap.moments.mean_std(1e6)
        # (avg, p50, p90, p95, p99) of each latency
        dists = {"ttft_ms": _pct(self.ttft_ns, 1e6), "tpot_ms": _pct(self.tpot_ns, 1e6), "e2e_s": _pct(self.e2e_ns, 1e9),
                 "itl_ms": (itl_avg, *(_scaled(self.itl.hist.percentile(q), 1e6) for q in _QS)),
                 "gap_ms": (gap_avg, *(_scaled(self.gap.hist.percentile(q), 1e6) for q in _QS))}
        full = LevelSummary(
            level_index=self.level_index,
            concurrency=self.concurrency,
            requests=self.requests,
            ok=self.ok,
            errors=tuple(sorted(self.errors.items(), key=lambda kv: -kv[1])),
            output_tokens=total,
            tokens_estimated=self.estimated,
            wall_s=wall_s,
            throughput_tok_s=total / active_s if active_s > 0 else 0.0,
            per_request_tok_s=per_req,
            req_s=self.ok / active_s if active_s > 0 else 0.0,
            **_dist_fields(dists),
            rate=self.rate,
            input_tokens=int(sum(self.prompt)) if len(self.prompt) else None,
            prompt_tokens_avg=prompt[0],
            prompt_tokens_p50=prompt[1],
            prompt_tokens_p99=prompt[4],
            prompt_tokens_requested_avg=(sum(self.requested) / len(self.requested)) if len(self.requested) else None,
            prompt_tokens_cached_avg=(sum(self.cached) / len(self.cached)) if len(self.cached) else None,
            peak_tok_s=self._peak_tok_s(),
            peak_concurrency=self._peak_concurrency(),
            ttft_ms_std=_std(self.ttft_ns, 1e6),
            tpot_ms_std=_std(self.tpot_ns, 1e6),
            itl_ms_std=itl_std,
            gap_ms_std=gap_std,
            e2e_s_std=_std(self.e2e_ns, 1e9),
            cut=None if cut is None else cut[0],
            active_s=None if cut is None else active_s,
            lost=None if cut is None else cut[2],
            request_accept_len=self.spec.figures()[0],
            request_accept_rate=self.spec.figures()[1],
            categories=self._groups("categories", active_s),
            turns=self._groups("turns", active_s),
        )
        # At the record's precision everywhere: the run's table, the TUI, --json and `report` of
        # the record then print the same digits (354.35 in the record was once 354.3 on screen).
        span = None if self.first_start_ns is None or self.last_end_ns is None else (
            int(self.first_start_ns), int(self.last_end_ns))
        return replace(LevelSummary.from_record(full.as_record()), span_ns=span)


    def _groups(self, kind: str, active_s: float) -> tuple[tuple[str, GroupFigures], ...] | None:
        out = sorted(((name, g.figures(active_s)) for (k, name), g in self.groups.items() if k == kind),
                     key=(lambda kv: int(kv[0])) if kind == "turns" else (lambda kv: kv[0]))
        return tuple(out) or None


def _union(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """The intervals [start, end] merged where they overlap, in time order."""
    if not starts.size:
        return []
    order = np.argsort(starts, kind="stable")
    out: list[tuple[float, float]] = []
    s0, e0 = float(starts[order[0]]), float(ends[order[0]])
    for s, e in zip(starts[order[1:]].tolist(), ends[order[1:]].tolist(), strict=True):
        if s <= e0:
            e0 = max(e0, e)
        else:
            out.append((s0, e0))
            s0, e0 = s, e
    out.append((s0, e0))
    return out


def _minus(span: tuple[float, float], busy: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of ``span`` outside the (merged, ordered) ``busy`` intervals."""
    lo, hi = span
    out = []
    for s, e in busy:
        if e <= lo:
            continue
        if s >= hi:
            break
        if s > lo:
            out.append((lo, s))
        lo = max(lo, e)
    if lo < hi:
        out.append((lo, hi))
    return out


def _std(values: array, scale: float) -> float | None:
    if not len(values):
        return None
    return float(np.frombuffer(values, dtype=np.float64).std()) / scale


_QS = (50, 90, 95, 99)  # the percentiles of every latency distribution


def _dist_fields(dists: dict[str, tuple[float | None, ...]]) -> dict[str, Any]:
    """``ttft_ms_avg``, ``ttft_ms_p50``, ... of each distribution's (avg, p50, p90, p95, p99)."""
    return {f"{name}_{stat}": v for name, vals in dists.items()
            for stat, v in zip(("avg", "p50", "p90", "p95", "p99"), vals, strict=True)}


def _pct(values: array, scale: float) -> tuple[float | None, ...]:
    """(mean, p50, p90, p95, p99) in units of ``scale``; linear-interpolated percentiles (numpy default)."""
    if not len(values):
        return None, None, None, None, None
    a = np.frombuffer(values, dtype=np.float64) / scale
    return (float(a.mean()), *percentiles(a, _QS))


def _scaled(v: float | None, scale: float) -> float | None:
    return None if v is None else v / scale


class LevelBook:
    """Which requests belong to which level, and when a level is complete.

    A level's statistics cover the requests it started, including those that end after the ramp
    moved on (no-drain mode). A level is complete when it is closed (no more starts) and none of
    its requests is still in flight. Summaries are released in level order: a level that
    completes before an earlier one waits for it, so tables and records list levels in order.
    """

    def __init__(self) -> None:
        self._cols: dict[int, LevelColumns] = {}
        self._in_flight: dict[int, int] = {}
        self._closed: set[int] = set()
        self._released: set[int] = set()
        self._cut: list | None = None  # the cut going on: [begin_ns, None, reason], shared by the levels
        self._version = 0  # moves with every change the summaries depend on (cut_open's cache)
        self._cut_open: tuple[tuple[int, int], tuple[LevelSummary, ...]] = ((-1, -1), ())
        self._opened: dict[int, int] = {}  # when each level began (its first request may come later)

    def open(self, level_index: int, concurrency: int, rate: float | None = None, now_ns: int | None = None) -> None:
        self._version += 1
        self._cols[level_index] = cols = LevelColumns(level_index, concurrency, rate)
        if now_ns is not None:
            self._opened[level_index] = now_ns
        self._in_flight[level_index] = 0
        if self._cut is not None:  # a level opened while paused or with the server down starts cut
            cols.cuts.append(self._cut)

    def cut_begin(self, reason: str, now_ns: int) -> None:
        """From now the load is cut (``crash``, ``server_down``, ``pause``): every level still open
        gets the cut, until ``cut_end``. A cut already going on keeps its reason (a crash that pauses
        the load is cut by the crash, not the pause); a crash during a pause begins a cut of its own."""
        if self._cut is not None and (self._cut[2] != "pause" or reason == "pause"):
            return
        self._version += 1
        if self._cut is not None:
            self._cut[1] = now_ns
        self._cut = [now_ns, None, reason]
        for idx, cols in self._cols.items():
            if idx not in self._released:
                cols.cuts.append(self._cut)

    def cut_end(self, now_ns: int) -> None:
        """The load resumed."""
        self._version += 1
        if self._cut is not None:
            self._cut[1] = now_ns
            self._cut = None

    def started(self, level_index: int) -> None:
        self._in_flight[level_index] += 1

    def in_flight(self, level_index: int) -> int:
        return self._in_flight.get(level_index, 0)

    def add(self, rec: RequestRecord) -> list[LevelSummary]:
        idx = rec.level_index
        cols = self._cols.get(idx)
        if cols is None:
            return []
        cols.add(rec)
        self._in_flight[idx] -= 1
        self._version += 1
        return self._release()

    def done(self, level_index: int) -> list[LevelSummary]:
        """Something counted in flight with ``started`` that is not a request (a conversation, which
        holds its level open between its turns) has ended."""
        if level_index in self._in_flight:
            self._in_flight[level_index] -= 1
        self._version += 1
        return self._release()

    def close(self, level_index: int) -> list[LevelSummary]:
        self._closed.add(level_index)
        self._version += 1
        return self._release()

    def cut_open(self, now_ns: int) -> tuple[LevelSummary, ...]:
        """While a cut goes on (the load paused by a crash, the server down or a pause): the levels it
        cut that are not complete yet, summarised as if they ended now (their active time is up to the
        cut; requests hung by a crash count as lost once they end). A level paused by a crash stays
        open until the user moves on: the dashboard shows it as cut now, not when it ends. Nothing
        outside a cut (no work while the load is measured); computed again after a change, or once a
        second."""
        if self._cut is None:
            return ()
        key = (self._version, now_ns // 1_000_000_000)
        if self._cut_open[0] != key:
            rows = []
            for idx, cols in sorted(self._cols.items()):
                if idx in self._released or not cols.cuts or cols.first_start_ns is None:
                    continue
                s = cols.summary(now_ns)
                hung = self._in_flight.get(idx, 0)
                if hung > 0 and s.cut in ("crash", "server_down"):
                    # its streams still open on a crashed or dead server end as lost (cancelled at
                    # the latest by the quit): counted now, as the final summary will
                    s = replace(s, requests=s.requests + hung, lost=(s.lost or 0) + hung)
                rows.append(s)
            self._cut_open = (key, tuple(rows))
        return self._cut_open[1]

    def _complete(self, idx: int) -> bool:
        return idx in self._closed and self._in_flight.get(idx, 0) <= 0

    def _release(self, everything: bool = False) -> list[LevelSummary]:
        """Summaries not yet released, in level order, up to the first incomplete level (or all)."""
        out = []
        for idx in sorted(self._cols):
            if idx in self._released:
                continue
            if not everything and not self._complete(idx):
                break
            self._released.add(idx)
            # a level that started no request (skipped, or paused all along) is released too: the
            # table lists every level the run had (the record keeps measured levels only: fanout.py)
            out.append(self._own(idx, self._cols[idx].summary()))
        return out

    def _own(self, idx: int, s: LevelSummary) -> LevelSummary:
        """S with its own span: from when the earlier levels' last request ended (without drain they
        run on into it) to when the next level began (its own run on past that); empty when other
        levels' requests were in flight all along (a level of a second between two key presses)."""
        if s.span_ns is None:
            return s
        a = max([s.span_ns[0], *(c.last_end_ns for i, c in self._cols.items() if i < idx and c.last_end_ns is not None)])
        b = min([s.span_ns[1], *(t for i, t in self._opened.items() if i > idx)])
        return replace(s, own_span_ns=(a, max(a, b)))

    def flush(self) -> list[LevelSummary]:
        """At the end of a run: the summaries of levels not yet released (cut short by a stop)."""
        return self._release(everything=True)
