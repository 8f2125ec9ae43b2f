"""The one vocabulary shared by every part of specload.

Frozen, slotted dataclasses that flow from producers (the engine, the server watch) to sinks (live
stats, the recorder, the UI). Times are integer nanoseconds from the injected clock; units are in the
field names. Nothing here does I/O or imports anything heavier than the standard library, so every
layer can depend on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal


class ErrorKind(StrEnum):
    """Why a request did not complete. Stored in records by value."""

    HTTP = "http"  # the server answered with a non-2xx status
    CONNECT = "connect"  # connection refused / reset before any byte of the response
    TIMEOUT = "timeout"  # the whole request took longer than the request timeout
    STALL = "stall"  # the stream stopped sending for longer than the stall timeout
    DISCONNECT = "disconnect"  # the connection dropped mid-response
    MALFORMED = "malformed"  # the response could not be parsed (bad SSE, bad JSON, no end of stream)
    STREAM_ERROR = "stream_error"  # the server reported an error inside a 200 stream (`{"error": ...}`)
    CANCELLED = "cancelled"  # specload itself stopped the request (quit, Ctrl-C, stop on crash)
    OVERSIZE = "oversize"  # an SSE event or line grew past the cap (4 MiB) without ending
    REDIRECT = "redirect"  # the server answered 3xx: not followed (credentials stay with the target)
    CLIENT = "client"  # specload itself could not send or read it (out of file descriptors, a bug)
    # the load worker (process or Ray actor) sending it died: what the server did is unknown
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class Output:
    """What one request generated, kept for ``--check-outputs`` (engine/answers.py reads it from the
    stream): its text and, with logprobs, its tokens (as text), each chosen token's logprob and its margin to the runner-up (nats; None where the server
    named no other token). Bounded: the first ``MAX_OUTPUT_CHARS`` characters and ``MAX_OUTPUT_TOKENS``
    tokens are kept; ``chars`` and ``token_count`` count all that were read."""

    text: str
    chars: int
    tokens: tuple[str, ...] | None = None
    logprobs: tuple[float | None, ...] | None = None
    margins: tuple[float | None, ...] | None = None
    token_count: int = 0
    capped: bool = False  # less was kept than came (the text, the tokens or the stream read)
    # pieces of text that came without logprobs (each kept as one token, its logprob None) or whose
    # tokens do not spell them: the tokens are then not the server's, and answers compare by text
    unscored: int = 0


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request, finished or failed. Built once by the client, never mutated."""

    request_id: int
    level: int  # the concurrency level (target) the request was started under
    level_index: int  # index of that level in the ramp; -1 for warm-up
    warmup: bool
    start_ns: int  # clock time the request was sent
    end_ns: int  # clock time the request ended (last byte or error)
    ttft_ns: int | None  # request sent -> first chunk carrying text
    e2e_ns: int | None  # request sent -> last chunk carrying text
    output_tokens: int
    tokens_estimated: bool  # True when the server gave no usage and chunks were counted
    prompt_tokens: int | None
    chunks: int  # chunks carrying text
    # arrival of each text chunk, ns after start_ns; the first equals ttft_ns
    chunk_offsets_ns: tuple[int, ...] = ()
    # tokens carried by each text chunk when the server says so (continuous usage, SGLang meta_info)
    chunk_tokens: tuple[int, ...] | None = None
    error_kind: ErrorKind | None = None
    error_detail: str | None = None
    http_status: int | None = None
    retries: int = 0  # stale pooled connections retried before any byte was sent
    # time lost on those attempts: from the first send to the send of the attempt the server answered
    # (start_ns, TTFT and E2E are of that attempt: the server never saw the ones before it)
    retry_ns: int = 0
    # the request's own speculative counts, where the server returns them (engine/api.py SPEC_SOURCES):
    # verify steps (SGLang, vLLM), draft tokens accepted and proposed (SGLang, vLLM, llama.cpp)
    spec_verify_ct: int | None = None
    spec_accepted: int | None = None
    spec_drafted: int | None = None
    server_timings: dict | None = None  # llama.cpp's non-standard `timings` object, as sent
    finish_reason: str | None = None
    # True when chunk_offsets_ns (and chunk_tokens) hold only the first chunks of a response longer
    # than the client keeps in detail (MAX_CHUNK_DETAIL): ``chunks``, TTFT and E2E stay exact, ITL
    # comes from the chunks kept. An endless stream must not grow memory for the request's life.
    chunk_detail_capped: bool = False
    prompt_tokens_requested: int | None = None  # synthetic prompts: the length asked for (server's count)
    max_tokens: int | None = None  # when drawn per request (an output-length distribution)
    prompt_tokens_cached: int | None = None  # of prompt_tokens, served by the server's prefix cache
    category: str | None = None  # the dataset row's category (the built-in set's: chat, coding, ...)
    conversation: int | None = None  # --multi-turn: the conversation (its row's number in the run) ...
    turn: int | None = None  # ... and the turn in it, from 1
    # the answer's text, when the sender asked for it (a conversation's history needs it); never recorded
    reply: str | None = field(default=None, repr=False)
    # --check-outputs: which prompt this was, the same in every run with the seed ("synthetic:s0:17",
    # "builtin:42"), a short hash of its text (runs compared must have sent the same text), and what
    # the server generated for it
    prompt_id: str | None = None
    prompt_sha: str | None = None
    output: Output | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def tpot_ns(self) -> float | None:
        """(E2E - TTFT) / (output_tokens - 1): the mean time per output token after the first.
        None when all the text came in one chunk (an answer not streamed, ``"stream": false``): the
        time between tokens was not seen, and 0.0 would read as infinitely fast decoding."""
        if self.ttft_ns is None or self.e2e_ns is None or self.output_tokens < 2 or self.chunks < 2:
            return None
        return (self.e2e_ns - self.ttft_ns) / (self.output_tokens - 1)

    def chunk_gaps_ns(self) -> list[int]:
        offs = self.chunk_offsets_ns
        return [offs[i] - offs[i - 1] for i in range(1, len(offs))]

    def itl_per_token_ns(self) -> list[float]:
        """Inter-token latency of each token after the first, in ns.

        Chunks that arrived together (the same socket read, so the same timestamp) form one burst:
        the gap before a burst is shared by all the tokens in it. A chunk carrying k tokens
        (vLLM/SGLang speculative decoding) and k one-token chunks sent in one write (llama.cpp
        speculative decoding) therefore give the same k values of gap / k. Tokens per chunk
        come from the server when it tells them, else from the request's mean (one value per chunk).
        """
        itl = self.itl_per_token()
        return itl if isinstance(itl, list) else itl.tolist()

    def itl_per_token(self, offs_array: Any = None) -> Any:
        """``itl_per_token_ns`` as a list, or as a numpy array where numpy computed it (for the
        level's histogram, which takes either without a copy); ``offs_array``: the chunk offsets as
        an int64 array, when the caller has made one."""
        offs = self.chunk_offsets_ns
        n = len(offs)
        if n < 2:
            return []
        per = self.chunk_tokens
        mean = 0.0
        if per is None or len(per) != n:
            # the first chunk carries the prefill's one token; the others share the rest (over all
            # the chunks that came, also those beyond the detail kept)
            c = max(n, self.chunks)
            mean = (self.output_tokens - 1) / (c - 1) if self.output_tokens > c - 1 else 1.0
            per = None
        if n > 16 and (per is None or min(per) > 0):
            fast = _itl_vectorised(offs if offs_array is None else offs_array, per, mean)
            if fast is not None:
                return fast
        return _itl_loop(offs, per, mean)


def _itl_loop(offs: tuple[int, ...], per: tuple[int, ...] | None, mean: float) -> list[float]:
    """``itl_per_token_ns`` chunk by chunk (``per``: tokens per chunk, else ``mean`` each)."""
    n = len(offs)
    out: list[float] = []
    prev_t = offs[0]
    i = 1
    while i < n and offs[i] == prev_t:  # the rest of the first burst came with the first token
        i += 1
    while i < n:
        t = offs[i]
        j = i
        tokens = 0.0
        while j < n and offs[j] == t:
            tokens += per[j] if per is not None else mean
            j += 1
        if per is None:
            # every chunk carries the mean: one value per chunk weighs each token alike
            out.extend([(t - prev_t) / max(tokens, 1e-9)] * (j - i))
        elif tokens > 0:
            # one value per token, so a level's percentiles pool tokens, not chunks
            out.extend([(t - prev_t) / tokens] * int(tokens))
        else:
            i = j  # no token came in this burst: the next one's gap runs from the last token
            continue
        prev_t = t
        i = j
    return out


def _itl_vectorised(offs: Any, per: tuple[int, ...] | None, mean: float) -> Any:
    """``itl_per_token_ns`` in numpy, value for value the same (the sums as the loop adds them),
    for an answer whose every burst carries tokens: the loop costs ~0.1-0.5 us per chunk, once per
    record, as much as reading the stream did. None where the loop is cheaper (a short answer in
    bursts). numpy is imported here, not with this module."""
    import numpy as np

    o = np.asarray(offs, dtype=np.int64)
    d = o[1:] - o[:-1]
    nz = d.nonzero()[0]  # the chunk before each new burst: a burst's gap is d there
    if not nz.size:
        return []
    gaps = d[nz].astype(np.float64)
    if per is None and nz.size == d.size:  # every chunk at its own time: gap / mean each
        return gaps / max(mean, 1e-9)
    if len(offs) < 200:
        return None  # fewer bursts than chunks, and few chunks: the loop is cheaper
    bounds = np.append(nz, len(offs) - 1)
    counts = bounds[1:] - bounds[:-1]  # chunks per burst
    if per is None:
        # the loop adds the mean once per chunk: a burst of k chunks carries the k-th partial sum
        tokens = np.maximum(np.cumsum(np.full(int(counts.max()), mean))[counts - 1], 1e-9)
        return np.repeat(gaps / tokens, counts)
    tokens = np.add.reduceat(np.asarray(per, dtype=np.float64), nz + 1)  # sums of ints: exact
    return np.repeat(gaps / tokens, tokens.astype(np.int64))


@dataclass(frozen=True, slots=True)
class RunEvent:
    """A discrete change during a run, at ``t_ns``. Each kind is a type below, matched on by type;
    ``kind`` and ``value`` are what the record's event line says of it (record/schema.py), and
    ``event_from_record`` reads one back."""

    t_ns: int
    KIND: ClassVar[str] = ""

    @property
    def kind(self) -> str:
        return self.KIND

    @property
    def value(self) -> object:
        return None

    @classmethod
    def read(cls, t_ns: int, kind: str, value: object) -> RunEvent | None:
        """The event of a record's line of this kind; None when its value is not of the kind's shape."""
        return None


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True, slots=True)
class _OneValue(RunEvent):
    """An event whose record value is its one field, of the type ``SHAPE`` (a bool is no int)."""

    SHAPE: ClassVar[type] = object

    @property
    def value(self) -> object:
        return getattr(self, self.__slots__[0])

    @classmethod
    def read(cls, t_ns: int, kind: str, value: object) -> RunEvent | None:
        return cls(t_ns, value) if isinstance(value, cls.SHAPE) and not isinstance(value, bool) else None  # type: ignore[call-arg]


@dataclass(frozen=True, slots=True)
class LevelStarted(RunEvent):
    """A level begins (the warm-up is no level)."""

    index: int
    concurrency: int
    manual: bool  # set by hand (a key, or a replayed manual level), not by the plan or the search
    repeat: int = 0  # the k-th repeat of this concurrency in a row (--repeat)
    rate: float | None = None  # open loop at this rate, the concurrency its cap
    probe: bool = False  # a capacity search's probe
    KIND: ClassVar[str] = "level"

    @property
    def value(self) -> dict[str, object]:
        v: dict[str, object] = {"index": self.index, "concurrency": self.concurrency, "manual": self.manual}
        if self.repeat:
            v["repeat"] = self.repeat
        if self.rate is not None:
            v["rate"] = self.rate
        if self.probe:
            v["probe"] = True
        return v

    @classmethod
    def read(cls, t_ns: int, kind: str, value: object) -> RunEvent | None:
        if not isinstance(value, dict) or not _int(value.get("index")) or not _int(value.get("concurrency")):
            return None
        repeat, rate = value.get("repeat", 0), value.get("rate")
        return cls(t_ns, value["index"], value["concurrency"], bool(value.get("manual")), repeat if _int(repeat) else 0,
                   float(rate) if isinstance(rate, int | float) and not isinstance(rate, bool) else None,
                   bool(value.get("probe")))


@dataclass(frozen=True, slots=True)
class ConcurrencyChanged(_OneValue):
    """The target concurrency changed (a level's, or one set by hand)."""

    target: int
    KIND: ClassVar[str] = "concurrency"
    SHAPE = int


LoadAction = Literal["pause", "resume", "hold", "next"]


@dataclass(frozen=True, slots=True)
class LoadControl(RunEvent):
    """The load was paused or resumed (``arg``: the target), held or released (True, False), or moved
    on to the next level (the index of the one it left)."""

    action: LoadAction
    arg: int | bool

    @property
    def kind(self) -> str:
        return self.action

    @property
    def value(self) -> int | bool:
        return self.arg

    @classmethod
    def read(cls, t_ns: int, kind: str, value: object) -> RunEvent | None:
        ok = isinstance(value, bool) if kind == "hold" else _int(value)
        return cls(t_ns, kind, value) if ok else None  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class HealthChanged(_OneValue):
    """The server's health endpoint changed its answer: ``state`` "up" or "down"."""

    state: str
    KIND: ClassVar[str] = "health"
    SHAPE = str


@dataclass(frozen=True, slots=True)
class Marker(_OneValue):
    """A mark the user set (``m``, or the session's ``marker``), with its note ("" for none)."""

    note: str
    KIND: ClassVar[str] = "marker"

    @classmethod
    def read(cls, t_ns: int, kind: str, value: object) -> RunEvent | None:
        return cls(t_ns, value or "") if isinstance(value, str | None) else None


@dataclass(frozen=True, slots=True)
class ServerExited(_OneValue):
    """The server specload launched exited: how ("exited with code 1", "was killed by SIGKILL")."""

    description: str
    KIND: ClassVar[str] = "server_exit"
    SHAPE = str


@dataclass(frozen=True, slots=True)
class SearchProgress(_OneValue):
    """A step of the capacity search: its start, a probe's verdict, its result (``progress["phase"]``)."""

    progress: dict
    KIND: ClassVar[str] = "search"
    SHAPE = dict


@dataclass(frozen=True, slots=True)
class WorkerDied(RunEvent):
    """A load worker died: which, what the pool saw (``detail``), and how many are left."""

    worker: int
    detail: str
    left: int
    KIND: ClassVar[str] = "worker_lost"

    @property
    def value(self) -> dict[str, object]:
        return {"worker": self.worker, "detail": self.detail, "left": self.left}

    @classmethod
    def read(cls, t_ns: int, kind: str, value: object) -> RunEvent | None:
        if not isinstance(value, dict) or not _int(value.get("worker")) or not _int(value.get("left")):
            return None
        return cls(t_ns, value["worker"], str(value.get("detail", "")), value["left"])


@dataclass(frozen=True, slots=True)
class OutputDiverged(_OneValue):
    """``--check-outputs`` against a baseline: an answer differs from the baseline's, not at a near-tie
    (``finding``: the prompt, both outputs from the divergence on, the token position; stats/lossless.py)."""

    finding: dict
    KIND: ClassVar[str] = "divergence"
    SHAPE = dict


@dataclass(frozen=True, slots=True)
class Noted(RunEvent):
    """What only the record reads, as it is: the API probe's and the calibration's requests (probe,
    calibration), what a launched server says about itself (server_info), an expected log line
    (expect), prompts counted otherwise (prompt_length), a GPU fault (gpu_fault), the switch to new
    connections (fresh_connections), the run's error (error), --check-outputs' settings, cache resets
    and per-level answers (check_outputs, cache_reset, outputs);
    and a record's line of a kind, or a shape, that no type here reads."""

    name: str
    detail: object = None

    @property
    def kind(self) -> str:
        return self.name

    @property
    def value(self) -> object:
        return self.detail


_TYPED: dict[str, type[RunEvent]] = {
    cls.KIND: cls for cls in (LevelStarted, ConcurrencyChanged, HealthChanged, Marker, ServerExited, SearchProgress,
                              WorkerDied, OutputDiverged)
} | dict.fromkeys(("pause", "resume", "hold", "next"), LoadControl)


def event_from_record(t_ns: int, kind: str, value: object) -> RunEvent:
    """The typed event of an event line (a record's, or a load worker's message)."""
    cls = _TYPED.get(kind)
    return (cls.read(t_ns, kind, value) if cls is not None else None) or Noted(t_ns, kind, value)


@dataclass(frozen=True, slots=True)
class ServerSample:
    """What the server says about itself at one moment (from its log lines or /metrics)."""

    t_ns: int
    source: str  # "log:sglang", "log:vllm", "log:llamacpp", "metrics"
    running: float | None = None
    queued: float | None = None
    gen_tok_s: float | None = None
    prompt_tok_s: float | None = None
    accept_len: float | None = None  # mean tokens per speculative verify step (incl. the bonus token)
    accept_rate: float | None = None  # accepted draft tokens / drafted tokens
    token_usage: float | None = None  # KV-cache usage fraction 0..1
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CrashConsequence:
    """A crash signature that followed a root cause closely (a parent's sigquit line, a process exit,
    the engine client's EngineDeadError): part of the same failure, shown under its cause."""

    signature: str
    exception_type: str
    message: str
    processes: tuple[str, ...]
    count: int  # entries of this signature seen under the root


@dataclass(frozen=True, slots=True)
class CrashEvent:
    """One root-cause crash signature as seen so far; re-emitted when it repeats or a consequence joins.

    ``count`` is the number of failures this signature caused (the same crash on several ranks at once is
    one failure, listed in ``processes``); ``consequences`` are the other signatures those failures
    printed (see ``specload.watch.crashbook.SignatureBook``)."""

    signature: str  # stable id of the group (hash of type, masked message, innermost frame)
    exception_type: str
    message: str
    innermost_frame: str | None
    processes: tuple[str, ...]  # normalised ranks/processes that showed it
    count: int
    first_seen_ns: int
    last_seen_ns: int
    excerpt: str  # the full lines of the first occurrence
    new: bool = True  # False when this is a repeat of a signature already reported
    consequences: tuple[CrashConsequence, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one moment (``specload/watch/gpu.py``): a field the source could not read is None."""

    t_ns: int
    gpu: int  # the index the source gives (nvidia-smi's and NVML's index, DCGM's gpu label)
    source: str  # "nvidia-smi", "nvml", "dcgm", "cmd"
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    temp_c: float | None = None
    name: str | None = None  # the model ("NVIDIA H100 80GB HBM3"), when the source says it


@dataclass(frozen=True, slots=True)
class GpuFault:
    """Something wrong with the GPUs or with reading them: shown and recorded, never a stopped run.

    ``kind``: ``missing`` (no nvidia-smi, no NVML, no driver, no GPU), ``exited`` (the reader died),
    ``unavailable`` (an exporter not answering), ``unsupported`` (a field the GPU does not report,
    once per GPU and field), ``xid`` (an XID error), ``lost`` (a GPU fell off the bus)."""

    t_ns: int
    kind: str
    message: str
    gpu: int | None = None
