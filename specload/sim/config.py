"""The simulator's configuration: one frozen dataclass holding every option, validated once.

The CLI (``cli.py``), the Python API (``SimServer``) and the test fixture all build a ``SimConfig``; the
rest of the simulator trusts it. Validation lives here, not in the CLI, so that a bad value passed from
Python fails the same way as a bad flag (``ValueError`` with a one-line message the CLI turns into a
click usage error).

``flavor`` picks which real server the simulator plays: ``vllm`` (the default: vLLM's OpenAI wire
format, vLLM /metrics, SGLang-style log lines) or ``llamacpp`` (llama.cpp's llama-server: its SSE shapes
and ``timings``, ``llamacpp:*`` /metrics, its slot log lines and error bodies; ``max_batch`` plays the
role of ``-np``, each slot gets ``context_size / max_batch`` tokens of context, and streams close their
connection as ``close_after_stream`` does). The flavour changes what the server *looks like*; the timing
model and the scheduler are the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SimConfig:
    flavor: str = "vllm"  # "vllm" | "llamacpp": the real server whose wire format, metrics and logs are copied

    # --- network ------------------------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = 0  # 0: the OS picks a free port; SimServer.port / url tell which
    model_name: str = "sim-llm"

    # --- batching / timing model (used unless pinned or max_speed) ------------------------------
    max_batch: int = 32  # sequences decoded together; more requests wait in a FIFO queue
    step_ms: float = 30.0  # one decode step at batch 1
    step_slope: float = 0.03  # each further sequence in the batch adds this fraction of step_ms
    prefill_base_ms: float = 12.0  # fixed cost of a prefill pass
    prefill_per_token_ms: float = 0.05  # 20k prompt tok/s
    draft_cost: float = 0.08  # a speculative step costs (1 + draft_cost * spec_tokens) plain steps
    # verifying drafts is nearly free while decoding is memory-bound (small batches) and costs in
    # proportion once it is compute-bound: draft_cost grows by this fraction per further sequence in
    # the batch, so speculation wins at low concurrency and can lose at high (0: a constant cost)
    draft_batch_slope: float = 0.0
    # seeded noise, as real servers show it (none in pinned or max-speed mode): each decode step's time
    # and each prefill pass's time are multiplied by a lognormal factor of mean 1 and this sigma (about
    # its coefficient of variation), so two runs with different seeds differ as two real runs do
    step_jitter: float = 0.05
    prefill_jitter: float = 0.10
    kv_capacity_tokens: int = 262_144  # for "token usage" and vllm:kv_cache_usage_perc
    gpus: int = 0  # simulated GPUs on /metrics in a DCGM exporter's names (sim/gpus.py); 0: none

    # --- pinned timing (exact tests): either set turns the batch model off ----------------------
    ttft_ms: float | None = None  # admission -> first token, fixed
    itl_ms: float | None = None  # time of every decode step, fixed

    # --- speculative decoding ------------------------------------------------------------------
    spec_tokens: int = 3  # K draft tokens per step; 0 turns speculation off
    accept_rate: float = 0.7  # independent per-position acceptance probability
    # prompts differ in how well the draft guesses them: each request draws its own acceptance
    # probability from a Beta distribution with mean accept_rate and this standard deviation (0: all equal)
    accept_spread: float = 0.1
    # a share of the speculative steps that accepted drafts emit a wrong token (a broken draft path):
    # the faster configuration is then not lossless (greedy.py)
    spec_bug_rate: float = 0.0
    # a share of the positions of a greedy text whose two best tokens are a near-tie, so that their
    # order flips with the batch's shape: numerics, not a bug (greedy.py)
    near_tie_rate: float = 0.0
    logprobs: bool = True  # False: logprobs asked for are not returned (as by a server without them)

    # --- output length --------------------------------------------------------------------------
    eos_prob: float = 0.002  # per generated token, ignored when the request sets ignore_eos
    default_max_tokens: int = 256  # when the request gives none
    context_size: int = 32_768

    # --- max-speed mode -------------------------------------------------------------------------
    max_speed: bool = False  # no sleeps at all; tokens as fast as the event loop can write them
    burst: int = 16  # SSE events per transport write in max-speed mode

    # --- faults ---------------------------------------------------------------------------------
    fail_rate: float = 0.0  # HTTP 500 with a JSON error body
    disconnect_rate: float = 0.0  # connection dropped after a few chunks
    stall_rate: float = 0.0  # stream stops after a few chunks, connection stays open
    crash_after: int | None = None  # after N finished generation requests the server "crashes"
    crash_exit: bool = False  # CLI only: exit with code 1 after writing the crash (as SGLang does)

    # --- start-up -------------------------------------------------------------------------------
    # "loading the model" for this long after it listens: /health and generation answer 503 meanwhile
    # (llama-server's "Loading model"), then SGLang's "ready to roll" line
    start_delay_s: float = 0.0
    health_while_loading: bool = False  # /health says 200 while loading (a router in front of the engine)
    fail_start: bool = False  # CLI only: the load fails (CUDA out of memory on two ranks), exit 1

    # --- real-server quirks ---------------------------------------------------------------------
    close_after_stream: bool = False  # llama-server: close TCP after each stream, still say Keep-Alive
    # close_after_stream: how long after a complete stream the socket is closed; a request sent on it
    # meanwhile is dropped unanswered. Tests set it long, so that every reuse of a pooled connection
    # meets a stale one whatever the machine's speed (with 3 ms a slow client sees the close first).
    stale_close_ms: float = 3.0
    usage_in_last_chunk: bool = False  # vllm flavour only: last content chunk carries finish_reason + usage
    # SIGTERM (CLI): close the listener, keep open streams silent until their clients leave, then exit 0
    # (llama-server and vLLM under load hang like this; specload's stall and server-down paths need it)
    hang_on_sigterm: bool = False

    # --- prompts ---------------------------------------------------------------------------------
    tokenize_endpoint: bool = True  # POST /tokenize (vLLM/SGLang shape, or llama.cpp's with flavor llamacpp)
    prefix_cache: bool = False  # leading blocks of earlier prompts cost no prefill (prefix_cache.py)
    prefix_block_tokens: int = 16  # vLLM's default block size

    # --- logging / reproducibility --------------------------------------------------------------
    log_file: str | None = None  # None: stdout
    quiet: bool = False  # no log lines at all (tests that do not read the log)
    log_interval: float = 1.0  # seconds between "Decode batch" lines
    seed: int | None = None

    def __post_init__(self) -> None:
        problems = list(_problems(self))
        if problems:
            raise ValueError(problems[0])

    @property
    def pinned(self) -> bool:
        return self.ttft_ms is not None or self.itl_ms is not None

    @property
    def llamacpp(self) -> bool:
        return self.flavor == "llamacpp"

    @property
    def closes_after_stream(self) -> bool:
        # a property rather than rewriting the field in __post_init__: dataclasses.replace() of a
        # llamacpp config back to vllm must not keep a quirk the user never asked for
        return self.close_after_stream or self.llamacpp

    @property
    def slot_context(self) -> int:
        """Context of one request: llama-server splits ``-c`` over its ``-np`` slots; vLLM does not."""
        return self.context_size // self.max_batch if self.llamacpp else self.context_size



def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


FLAVORS = ("vllm", "llamacpp")


def _problems(c: SimConfig):
    if c.log_file is not None and not c.quiet:
        # tried here, so a directory that is missing or read-only is a one-line usage error before the
        # server starts (through --sim-args too), not a traceback that specload reads as a crash
        try:
            with open(c.log_file, "a", encoding="utf-8"):
                pass
        except OSError as e:
            yield f"cannot write --log-file {c.log_file}: {e.strerror or e}"
    if not 0 <= c.gpus <= 64:
        yield "gpus must be between 0 and 64"
    if c.flavor not in FLAVORS:
        yield f"flavor must be one of {', '.join(FLAVORS)}, got {c.flavor!r}"
    if not (0 <= c.port <= 65535):
        yield f"port must be in 0..65535, got {c.port}"
    if not c.model_name:
        yield "model name must not be empty"
    if c.max_batch < 1:
        yield f"max batch must be at least 1, got {c.max_batch}"
    for name in ("step_ms", "step_slope", "prefill_base_ms", "prefill_per_token_ms", "draft_cost",
                 "draft_batch_slope", "step_jitter", "prefill_jitter"):
        v = getattr(c, name)
        if not _finite(v) or v < 0:
            yield f"{name.replace('_', '-')} must be a finite number >= 0, got {v}"
    if c.kv_capacity_tokens < 1:
        yield f"kv capacity must be at least 1 token, got {c.kv_capacity_tokens}"
    if not _finite(c.stale_close_ms) or c.stale_close_ms < 0:
        yield f"stale-close-ms must be a finite number >= 0, got {c.stale_close_ms}"
    for name in ("ttft_ms", "itl_ms"):
        v = getattr(c, name)
        if v is not None and (not _finite(v) or v < 0):
            yield f"{name.replace('_', '-')} must be a finite number >= 0, got {v}"
    if c.spec_tokens < 0 or c.spec_tokens > 64:
        yield f"spec tokens must be in 0..64, got {c.spec_tokens}"
    for name in ("accept_rate", "eos_prob", "fail_rate", "disconnect_rate", "stall_rate", "spec_bug_rate",
                 "near_tie_rate"):
        v = getattr(c, name)
        if not _finite(v) or not (0.0 <= v <= 1.0):
            yield f"{name.replace('_', '-')} must be a probability in [0, 1], got {v}"
    if not _finite(c.accept_spread) or not (0.0 <= c.accept_spread < 0.5):
        yield f"accept-spread must be a standard deviation in [0, 0.5), got {c.accept_spread}"
    if c.fail_rate + c.disconnect_rate + c.stall_rate > 1.0:
        yield "fail-rate + disconnect-rate + stall-rate must not exceed 1"
    if c.default_max_tokens < 1:
        yield f"default max tokens must be at least 1, got {c.default_max_tokens}"
    if c.context_size < 2:
        yield f"context size must be at least 2, got {c.context_size}"
    if c.flavor == "llamacpp" and c.context_size // max(c.max_batch, 1) < 2:
        yield (
            f"context size {c.context_size} split over {c.max_batch} slots leaves under 2 tokens per slot"
        )
    if c.prefix_block_tokens < 1:
        yield f"prefix block tokens must be at least 1, got {c.prefix_block_tokens}"
    if c.burst < 1:
        yield f"burst must be at least 1, got {c.burst}"
    if c.crash_after is not None and c.crash_after < 0:
        yield f"crash-after must be >= 0, got {c.crash_after}"
    if not _finite(c.start_delay_s) or not 0 <= c.start_delay_s <= 3600:
        yield f"start-delay must be in 0..3600 seconds, got {c.start_delay_s}"
    if not _finite(c.log_interval) or c.log_interval <= 0:
        yield f"log interval must be > 0 seconds, got {c.log_interval}"
