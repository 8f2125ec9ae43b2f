"""The configuration of one run: frozen dataclasses, each field an option declared once, checked on build.

The TUI and headless mode build the same ``RunConfig``, so they cannot be configured differently by
accident. Each option is a field declared with ``option()`` (``options.py``): the CLI's options are
generated from them and ``__post_init__`` checks every config, also one built in code, with a one-line
``ConfigError`` naming the flag; the plan is resolved there, once. Plain data: the checks that need
the disk or another layer, and reading --schedule-from, are ``preflight.py``'s. To add an option, add a
field to its section and use it; a rule across fields goes in that section's ``__post_init__``.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote, urlparse

import orjson

from specload.options import (
    ConfigError,
    assemble,
    at_least,
    check_fields,
    not_negative,
    option,
    positive,
    set_field,
    to_dict,
)
from specload.plan import Lengths, LoadPlan, ThinkTime, build_plan, parse_levels, repeat_levels
from specload.secrets import redact_config, secret_values
from specload.stats.slo import SloSpec

__all__ = [
    "CapacityConfig", "CompareConfig", "ConfigError", "LoadConfig", "RecordConfig", "RequestConfig", "RunConfig", "TargetConfig", "WatchConfig",
]

API_CHOICES = ("auto", "chat", "completions", "generate")
TUI_LEVEL_SECONDS = 20.0
# the built-in simulator's profile when no --sim-args are given: speculative decoding worth looking at
DEFAULT_DEMO_SIM = ("--spec-tokens", "3", "--accept-rate", "0.7", "--max-batch", "32")


# ------------------------------------------------------------------------------------- parsers


def _parse_url(url: str):  # urllib's ParseResult
    try:
        return urlparse(url)
    except ValueError as e:  # e.g. an unclosed IPv6 bracket
        raise ConfigError(f"bad URL {url!r}: {e}") from None


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``http://user:pw@host:port`` -> (``http://host:port``, an Authorization header), so that a
    password in a URL is sent as a header (which records redact) and never shown or recorded."""
    u = _parse_url(url)
    if u.username is None and u.password is None:
        return url, None
    import base64

    token = base64.b64encode(f"{unquote(u.username or '')}:{unquote(u.password or '')}".encode()).decode()
    netloc = u.hostname or ""
    if u.port:
        netloc += f":{u.port}"
    return u._replace(netloc=netloc).geturl(), ("Authorization", f"Basic {token}")


def check_url(url: str) -> str:
    """A base URL of an HTTP server; a trailing ``/v1`` or endpoint path is stripped."""
    u = _parse_url(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ConfigError(f"bad URL {url!r}: expected http://HOST:PORT")
    try:
        u.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigError(f"bad URL {url!r}: bad port") from None
    path = u.path.rstrip("/")
    for suffix in ("/v1/chat/completions", "/v1/completions", "/generate", "/v1"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return f"{u.scheme}://{u.netloc}{path}"


def url_dropped(url: str) -> str:
    """What ``check_url`` leaves out of ``url``: an API path (``/v1``, ``/v1/chat/completions``) that
    specload adds itself, a query or a fragment. Empty when nothing."""
    u = _parse_url(url)
    kept = urlparse(check_url(url)).path
    dropped = u.path.rstrip("/")[len(kept):]
    if u.query:
        dropped += "?" + u.query
    if u.fragment:
        dropped += "#" + u.fragment
    return dropped


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token (RFC 9110)


def parse_header(h: str) -> tuple[str, str]:
    name, sep, value = h.partition(":")
    if not sep or not name.strip():
        raise ConfigError(f"bad header {h!r}: expected 'Name: value'")
    name, value = name.strip(), value.strip()
    if not _HEADER_NAME.fullmatch(name):
        raise ConfigError(f"bad header {h!r}: {name!r} is not a header name")
    if any(c in value for c in "\r\n\0"):
        # a line break would end the header early (header injection); aiohttp refused it at send
        # time, inside every request
        raise ConfigError(f"bad header {name!r}: its value contains a line break or a NUL")
    return name, value


def parse_json_object(text: str) -> tuple[tuple[str, Any], ...]:
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise ConfigError("--extra-body is not valid JSON") from None
    if not isinstance(obj, dict):
        raise ConfigError("--extra-body must be a JSON object")
    return tuple(obj.items())


def parse_sim_args(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as e:
        raise ConfigError(f"--sim-args: {e}") from None


MAX_LEVEL = 100_000  # the runner's bound on a concurrency (engine.runner.MAX_CONCURRENCY)


def _workers_check(n: int) -> str | None:
    """Worker processes beyond a few per core only compete for the same cores (and each holds an
    event loop, an HTTP client and a pipe): 100 on this 2-core machine was accepted and thrashed."""
    if n < 1:
        return "must be at least 1"
    cores = os.cpu_count() or 1
    most = min(64, 4 * cores)
    return None if n <= most else f"must be at most {most} (4 per CPU core, {cores} here), not {n}"


def _patterns_check(patterns: tuple[str, ...]) -> str | None:
    """Each --expect-log pattern must compile: '(unclosed' was a traceback once the server started."""
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            return f"{p!r} is not a regular expression: {e}"
    return None


def parse_lengths(text: str, flag: str = "length") -> int | str:
    """``--prompt-tokens``/``--max-tokens``: N (an int) or a distribution spec (``128:32``, ``64,128``;
    kept as its text, parsed where it is drawn: ``plan.Lengths``)."""
    try:
        lengths = Lengths.parse(text, flag)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return lengths.values[0] if lengths.fixed else lengths.spec


def _think_time(text: str) -> str:
    try:
        return ThinkTime.parse(text).spec
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _lengths_check(v: int | str, most: int = 1_000_000_000) -> str | None:
    try:
        high = Lengths.parse(v).high
    except ValueError:
        return "expects N, MEAN:SPREAD (uniform, spread < mean) or a list A,B,C of positive integers"
    if high > most:
        return f"must be at most {most:,}, not {high:,}"
    return None


def _levels_check(levels: tuple[int, ...]) -> str | None:
    if not levels:
        return "needs at least one level"
    bad = [c for c in levels if not isinstance(c, int) or c < 1]
    return f"levels must be whole numbers of at least 1, not {bad[0]!r}" if bad else None


# ------------------------------------------------------------------------------------- sections


@dataclass(frozen=True, slots=True)
class TargetConfig:
    """The server and how to talk to it."""

    url: str | None = option(None, argument=True)  # None: start the built-in simulator
    api: str = option("auto", "--api", choices=API_CHOICES,
                      help="API flavour; auto probes chat, completions, then /generate.")
    model: str | None = option(None, "--model", help="Model name to send (default: the first of /v1/models).")
    headers: tuple[tuple[str, str], ...] = option((), "--header", multiple=True, parse=parse_header,
                                                   help="Extra HTTP header 'Name: value' (repeatable).")
    api_key_env: str | None = option("OPENAI_API_KEY", "--api-key-env",
                                     help="Environment variable holding the API key (sent as a Bearer token).")
    keepalive: bool = option(True, "--no-keepalive", help="A new connection per request.")
    stall_timeout_s: float = option(60.0, "--stall-timeout", check=not_negative,
                                    help="Seconds without a byte before a request counts as stalled.")
    request_timeout_s: float | None = option(600.0, "--request-timeout", check=not_negative,
                                             help="Seconds a request may take in all (0: no limit).")
    connect_timeout_s: float = 10.0
    # what was left out of the URL given (/v1, a query): the session says so at the start
    url_dropped: str = ""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.url is not None:
            # a password in the URL is sent as a header (which records mask) and never shown
            url, basic_auth = split_credentials(self.url)
            if not self.url_dropped:
                set_field(self, "url_dropped", url_dropped(url))
            set_field(self, "url", check_url(url))
            if basic_auth is not None and not any(k.lower() == "authorization" for k, _ in self.headers):
                set_field(self, "headers", (*self.headers, basic_auth))
        if self.request_timeout_s == 0:
            set_field(self, "request_timeout_s", None)
        if self.api_key_env == "":
            set_field(self, "api_key_env", None)


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """The shape of the load: the ramp of concurrency levels, warm-up, drain, arrivals, bounds."""

    concurrency: tuple[int, ...] = option((1, 2, 4, 8, 16), "--concurrency", "-c", parse=parse_levels,
                                          check=_levels_check, show_default="1,2,4,8,16", most=MAX_LEVEL,
                                          help="Concurrency levels of the ramp, comma-separated.")
    requests_per_level: int | None = option(None, "--requests-per-level", "-n", check=at_least(1),
                                            help="Requests started per level (headless default: 4 x C, at least 10).")
    duration_per_level_s: float | None = option(
        None, "--duration-per-level", "-d", check=positive,
        # the dashboard ramps in real time: a level every 20 s reads well; a request count would make
        # low levels of long generations last minutes
        tui_default=lambda given: TUI_LEVEL_SECONDS if given.get("requests_per_level") is None else None,
        help=f"Seconds per level instead of a request count (TUI default: {TUI_LEVEL_SECONDS:g}).")
    warmup_requests: int = option(0, "--warmup-requests", check=not_negative,
                                  help="Requests sent first and not counted.")
    drain: bool = option(True, "--drain/--no-drain", tui_default=False,
                         help="Wait for in-flight requests between levels (default: on headless, off in the TUI).")
    rate: float | None = option(None, "--rate", check=positive,
                                help="Open loop: requests per second (concurrency is then a cap).")
    burstiness: float = option(1.0, "--burstiness", check=positive,
                               help="Gamma shape of open-loop arrivals (1 = Poisson).")
    ramp_up_s: float = option(0.0, "--ramp-up", check=not_negative, metavar="S",
                              help="Open a level's new connections over S seconds, not all at once (its "
                                   "concurrency rises linearly), so the server sees no thundering herd.")
    max_requests: int | None = option(None, "--max-requests", check=at_least(1),
                                      help="Stop after this many requests in all.")
    max_duration_s: float | None = option(None, "--max-duration", check=positive,
                                          help="Stop after this many seconds in all.")

    def __post_init__(self) -> None:
        check_fields(self)

    def plan(self) -> LoadPlan:
        return build_plan(
            self.concurrency,
            requests_per_level=self.requests_per_level,
            duration_per_level=self.duration_per_level_s,
            warmup_requests=self.warmup_requests,
            drain=self.drain,
            rate=self.rate,
            burstiness=self.burstiness,
            max_requests=self.max_requests,
            max_duration_s=self.max_duration_s,
            ramp_up_s=self.ramp_up_s,
        )


@dataclass(frozen=True, slots=True)
class RequestConfig:
    """What every request asks for, and where its prompts come from."""

    # N (int) or a distribution's spec (str); what the server counts, measured before the load
    prompt_tokens: int | str = option(128, "--prompt-tokens", parse=lambda t: parse_lengths(t, "--prompt-tokens"),
                                      # the synthetic prompt is built in the event loop: a million tokens
                                      # is already 40 ms of it
                                      check=lambda v: _lengths_check(v, 1_000_000), most=1_000_000,
                                      help="Length of synthetic prompts in the server's own tokens (measured "
                                           "before the load): N, MEAN:SPREAD (uniform) or a list A,B,C "
                                           "(drawn per request with --seed).")
    tokens_per_word: float | None = option(
        None, "--tokens-per-word", check=positive, metavar="R",
        help="The server counts R tokens a word of the synthetic prompts (the calibration's figure in an "
             "earlier record): sized with it, no calibration requests before the load.")
    shared_prefix_tokens: int = option(0, "--shared-prefix-tokens", check=not_negative,
                                       help="Synthetic prompts all start with the same N tokens (to measure "
                                            "prefix caching); by default every prompt starts differently.")
    prompt: str | None = option(None, "--prompt", help="Send this prompt text.")
    prompt_file: str | None = option(None, "--prompt-file", path=True, help="Send the text of this file.")
    dataset: str | None = option(None, "--dataset", path=True, metavar="FILE|builtin[:CAT,...]",
                                 help="Prompts from a file (JSONL or a JSON array: plain prompts, ShareGPT, OpenAI "
                                      "messages; rows may carry a category) or the built-in multi-domain set: "
                                      "'builtin', or 'builtin:coding,math' for some of its categories.")
    dataset_format: str = option("auto", "--dataset-format", choices=("auto", "plain", "sharegpt", "openai"),
                                 help="The rows' shape in --dataset FILE (auto: detected).")
    trace: str | None = option(None, "--trace", path=True, metavar="FILE",
                               help="Replay a request trace (Mooncake-style JSONL: timestamp in ms, input_length, "
                                    "output_length, hash_ids of shared prefix blocks) at its own times, as one "
                                    "level capped at the largest -c; prompts built to its lengths and shared "
                                    "blocks, its output lengths sent with ignore_eos.")
    trace_speed: float = option(1.0, "--trace-speed", check=positive, most=1e6,
                                help="Replay --trace this many times faster (0.5: half as fast).")
    trace_block_tokens: int = option(512, "--trace-block-tokens", check=at_least(1), most=1_000_000,
                                     help="Tokens per hash_ids block of --trace (Mooncake's: 512).")
    multi_turn: bool = option(False, "--multi-turn",
                              help="Send --dataset conversations (rows of two or more user turns) turn by turn, "
                                   "each in one session with the previous turns and the server's replies in its "
                                   "history; -c counts sessions.")
    think_time: str = option("0", "--think-time", parse=lambda t: _think_time(t), metavar="S",
                             help="With --multi-turn, seconds between a session's turns: S, MEAN:SPREAD "
                                  "(uniform), exp:MEAN (exponential) or a list A,B,C (drawn with --seed).")
    output_len: str = option("max-tokens", "--output-len", choices=("max-tokens", "dataset"),
                             help="max-tokens: answers stop at their natural end, capped at --max-tokens "
                                  "(fixed with --ignore-eos); dataset: each row's reference output length, "
                                  "with ignore_eos, as vLLM's bench does.")
    # the fixed value, or a distribution's mean when max_tokens_dist is set (from "--max-tokens 256:64")
    max_tokens: int = option(256, "--max-tokens", parse=lambda t: parse_lengths(t, "--max-tokens"),
                             help="max_tokens of each request: N, MEAN:SPREAD (uniform) or a list A,B,C "
                                  "(drawn per request with --seed).")
    max_tokens_dist: str | None = None  # a distribution spec drawn per request (seeded), or None
    ignore_eos: bool = option(False, "--ignore-eos", help="Ask the server to ignore EOS (fixed output length).")
    # None: on for the built-in simulator (it supports it, as vLLM does, so the demo's live counts are
    # exact from the first chunk), off for a server that might reject the field; RunConfig decides
    continuous_usage: bool | None = option(
        None, "--continuous-usage/--no-continuous-usage",
        help="Ask for usage on every chunk (vLLM/SGLang) for exact per-chunk token counts "
             "[default: on for the built-in simulator, off otherwise].")
    temperature: float | None = option(None, "--temperature", check=not_negative, most=100,
                                       help="Sampling temperature.")
    extra_body: tuple[tuple[str, Any], ...] = option((), "--extra-body", parse=parse_json_object, metavar="JSON",
                                                     help="JSON object merged into every request body.")
    check_outputs: bool = option(
        False, "--check-outputs",
        help="Record each request's output (capped) and its prompt's identity, at temperature 0 unless "
             "--temperature is given; every level sends the same prompts in the same order (so does every "
             "run with the same --seed), and the server's prefix cache is reset before each measured level "
             "where it offers a reset. 'report A B' then says whether B's outputs are A's (README: Is it "
             "lossless?); with --baseline, live.")
    logprobs: bool | None = option(
        None, "--logprobs/--no-logprobs",
        help="With --check-outputs: ask for each token's logprob and the runner-up's, so that a near-tie "
             "(numerics) is told from a bug [default: on where the server returns them].")
    # the synthetic prompts' nonce (None: a new one per run, so no run meets another's prefix cache); a
    # sweep gives all its runs one, each against a freshly started server: the same prompts for each
    prompt_nonce: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, str):  # a distribution: requests draw it, the field holds its mean
            dist = Lengths.parse(self.max_tokens)
            set_field(self, "max_tokens_dist", dist.spec)
            set_field(self, "max_tokens", round(dist.mean))
        if self.max_tokens_dist is not None:
            dist = Lengths.parse(self.max_tokens_dist)
            if dist.fixed:
                set_field(self, "max_tokens", dist.values[0])
                set_field(self, "max_tokens_dist", None)
        check_fields(self)
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ConfigError("--max-tokens must be at least 1")
        if self.shared_prefix_tokens and self.shared_prefix_tokens >= Lengths.parse(self.prompt_tokens).low:
            raise ConfigError(f"--shared-prefix-tokens must be below the shortest prompt "
                              f"({Lengths.parse(self.prompt_tokens).low} tokens)")
        if sum(1 for v in (self.prompt, self.prompt_file, self.dataset, self.trace) if v) > 1:
            raise ConfigError("give only one of --prompt, --prompt-file, --dataset, --trace")
        if self.trace:
            set_field(self, "ignore_eos", True)  # the trace's output lengths are the output lengths
        elif self.trace_speed != 1.0 or self.trace_block_tokens != 512:
            raise ConfigError("--trace-speed and --trace-block-tokens apply to --trace FILE")
        if self.dataset_format != "auto" and not self.dataset:
            raise ConfigError("--dataset-format applies to --dataset FILE")
        if self.multi_turn and not self.dataset:
            raise ConfigError("--multi-turn needs --dataset (its rows of two or more user turns)")
        if ThinkTime.parse(self.think_time).values != (0.0,) and not self.multi_turn:
            raise ConfigError("--think-time applies to --multi-turn")
        if self.output_len == "dataset":
            if not self.dataset:
                raise ConfigError("--output-len dataset needs --dataset (its rows' reference output lengths)")
            set_field(self, "ignore_eos", True)  # the reference length is the output length
        if self.logprobs is not None and not self.check_outputs:
            raise ConfigError(f"--{'' if self.logprobs else 'no-'}logprobs applies to --check-outputs")
        if self.check_outputs and self.temperature is None:
            set_field(self, "temperature", 0.0)  # greedy: the one setting whose outputs must match


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """The server watch: log sources, a launched server, health, /metrics, what a crash does."""

    server_log: str | None = option(None, "--server-log", path=True, help="Follow this server log file.")
    server_log_from_start: bool = option(False, "--server-log-from-start", help="Read the server log from its start.")
    server_log_cmd: str | None = option(None, "--server-log-cmd", help="Read the server log from this command's output.")
    launch: str | None = option(None, "--launch", help="Start the server with this command and stop it at the end.")
    ready_timeout_s: float = option(900.0, "--ready-timeout", check=not_negative,
                                    help="Seconds to wait for a launched server's health endpoint.")
    stop_grace_s: float = 10.0
    expect_log: tuple[str, ...] = option((), "--expect-log", multiple=True, check=_patterns_check,
                                         help="Regex of a line the server must print (repeatable).")
    expect_timeout_s: float = 30.0
    # None: the server's /metrics if it answers; "off" to disable
    metrics_url: str | None = option(None, "--metrics-url",
                                     help="Prometheus /metrics URL (default: the server's, if it answers; 'off').")
    metrics_interval_s: float = option(1.0, "--metrics-interval", check=at_least(0.1, " s"),
                                       help="Seconds between /metrics scrapes (at least 0.1).")
    gpu_metrics: str = option(
        "auto", "--gpu-metrics", metavar="SOURCE",  # its syntax is checked by preflight (watch.gpu)
        help="The server's GPUs, read every --metrics-interval: auto, nvidia-smi, nvml, dcgm:URL, cmd:'COMMAND' "
             "or off (auto: the server's /metrics if it has DCGM series, else NVML or nvidia-smi when the server "
             "is on this machine).")
    health: bool = option(True, "--no-health", help="Do not poll the health endpoint.")
    on_crash: str = option("stop", "--on-crash", choices=("pause", "stop", "continue"), tui_default="pause",
                           help="What a detected server crash does (TUI: pause, headless: stop).")
    down_timeout_s: float = option(30.0, "--down-timeout", check=not_negative,
                                   help="Headless: stop when the server has been down this long "
                                        "(the load pauses meanwhile).")

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, slots=True)
class RecordConfig:
    """The JSONL record of the run."""

    path: str | None = option(None, "--record", path=True, help="Write a JSONL record of the run to this file.")
    with_chunks: bool = option(False, "--record-chunks", help="Include each chunk's arrival time in the record.")

    def __post_init__(self) -> None:
        check_fields(self)


def parse_slo_option(text: str) -> SloSpec:
    from specload.stats.slo import SloError, parse_slo

    try:
        return parse_slo(text)
    except SloError as e:
        raise ConfigError(str(e)) from None


@dataclass(frozen=True, slots=True)
class CapacityConfig:
    """Latency objectives (goodput for every level) and the search for the best operating point."""

    slo: SloSpec | None = option(
        None, "--slo", parse=parse_slo_option, metavar="SPEC",
        help="Latency objectives, e.g. 'ttft_p99<=500ms,tpot_p50<=40ms,e2e<=10s': every level gets goodput "
             "and a verdict (README: Capacity).")
    find_max: bool = option(False, "--find-max",
                            help="Search the highest concurrency (with --rate: request rate) that meets --slo and "
                                 "still adds throughput, from the first -c level (or --rate) up.")
    search_max: float | None = option(None, "--search-max", check=positive,
                                      help="The highest load the search tries [default: concurrency 1024; "
                                           "rate: no bound].")
    max_probes: int = option(12, "--max-probes", check=at_least(1), help="The search ends after this many probes.")
    search_budget_s: float | None = option(900.0, "--search-budget", check=not_negative,
                                           help="Seconds after which the search starts no new probe (0: no limit).")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.search_budget_s == 0:
            set_field(self, "search_budget_s", None)
        if self.search_max is not None and not self.find_max:
            raise ConfigError("--search-max applies to --find-max")


def _check_ray(value: str | None) -> str | None:
    if value is None:
        return None
    return None if value.strip() else "needs local, auto or a cluster address"


def _metric_names() -> tuple[str, ...]:
    from specload.stats.level_metrics import METRICS

    return tuple(m for m, spec in METRICS.items() if spec.kind not in ("share", "server"))


def _pct_check(v: Any) -> str | None:
    return None if v is None or 0 < v < 100 else "must be a percentage between 0 and 100"


@dataclass(frozen=True, slots=True)
class CompareConfig:
    """Deciding while the run goes: a baseline to compare against live, levels that run until they
    are precise or decided, repeats, and a schedule replayed from an earlier record."""

    baseline: str | None = option(None, "--baseline", path=True, metavar="BASE.jsonl",
                                  help="Compare each level live against this record's level at the same "
                                       "concurrency: its figure, the ratio with a sequential interval, the verdict.")
    primary: str = option("throughput", "--primary", choices=_metric_names(),
                          help="The metric --baseline, --target-ci and --until-decided judge.")
    min_effect_pct: float = option(2.0, "--min-effect", check=_pct_check, metavar="PCT",
                                   help="Differences smaller than this (percent) are 'no difference'.")
    target_ci_pct: float | None = option(None, "--target-ci", check=_pct_check, metavar="PCT",
                                         help="Run each level until the primary metric's 95% interval is within "
                                              "+-PCT percent of its value (at most --max-requests-per-level).")
    max_requests_per_level: int | None = option(
        None, "--max-requests-per-level", check=at_least(1),
        help="The cap of --target-ci and --until-decided [default: 25 x C, at least 200].")
    until_decided: bool = option(False, "--until-decided",
                                 help="With --baseline: end each level as soon as its verdict is decided "
                                      "(or at --max-requests-per-level).")
    on_divergence: str = option("stop", "--on-divergence", choices=("stop", "continue"), tui_default="continue",
                                help="With --baseline and --check-outputs: what an output that diverges from the "
                                     "baseline's (not a near-tie) does: stop the run (exit status 7) or go on "
                                     "(TUI default; headless still exits 7).")
    repeat: int = option(1, "--repeat", check=at_least(1),
                         help="Run each level N times in a row (repeats interleaved level by level): the "
                              "comparison then sees run-to-run variation from one record.")
    schedule_from: str | None = option(None, "--schedule-from", path=True, metavar="RUN.jsonl",
                                       help="Replay the concurrency schedule of an earlier record (its levels, "
                                            "concurrency changes, pauses) instead of -c/-n/-d; headless.")
    schedule: LoadPlan | None = None  # --schedule-from's levels, read from the record by ``preflight``

    def __post_init__(self) -> None:
        check_fields(self)
        if self.until_decided and self.baseline is None:
            raise ConfigError("--until-decided needs --baseline BASE.jsonl")
        if self.max_requests_per_level is not None and not self.judging:
            raise ConfigError("--max-requests-per-level applies to --target-ci and --until-decided")

    @property
    def judging(self) -> bool:
        """Levels run until they have enough, rather than for a fixed count."""
        return self.target_ci_pct is not None or self.until_decided

    def shape(self, plan: LoadPlan) -> LoadPlan | None:
        """The plan as these options change it: a replayed schedule instead of the ramp; judged levels
        that start with enough requests for a steady state and are extended as they go; repeats.
        None while --schedule-from's record is not read yet."""
        if self.schedule_from is not None:
            if self.schedule is None:
                return None
            plan = replace(self.schedule, max_requests=plan.max_requests, max_duration_s=plan.max_duration_s)
        if self.judging:
            from specload.stats.live_judge import min_requests

            plan = replace(plan, levels=tuple(
                replace(lv, requests=max(min_requests(lv.concurrency), lv.requests or 0), duration_s=None)
                for lv in plan.levels))
        return repeat_levels(plan, self.repeat)


@dataclass(frozen=True, slots=True)
class RunConfig:
    """One run: its sections, and the options that belong to the run as a whole."""

    target: TargetConfig = field(default_factory=TargetConfig)
    load: LoadConfig = field(default_factory=LoadConfig)
    request: RequestConfig = field(default_factory=RequestConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    record: RecordConfig = field(default_factory=RecordConfig)
    capacity: CapacityConfig = field(default_factory=CapacityConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    sim_args: tuple[str, ...] = option(DEFAULT_DEMO_SIM, "--sim-args", parse=parse_sim_args, metavar="ARGS",
                                       show_default=" ".join(DEFAULT_DEMO_SIM),
                                       help="Options for the built-in simulator (used when no URL is given).")
    seed: int = option(0, "--seed", most=2**63, help="Seed for prompts and arrivals.")
    workers: int = option(1, "--workers", check=_workers_check,
                          help="Processes sending the load (each its own event loop).")
    on_worker_death: str = option("continue", "--on-worker-death", choices=("continue", "stop"),
                                  help="With --workers: when a worker process dies, go on with the others "
                                       "(its requests in flight are recorded as lost) or stop the run.")
    ray: str | None = option(None, "--ray", metavar="local|auto|ADDRESS", check=_check_ray,
                             help="Run the --workers as Ray actors: 'local' starts Ray on this machine for the "
                                  "run, 'auto' joins this machine's cluster, or a cluster address (HOST:6379). "
                                  "Needs the ray extra.")
    label: str | None = option(None, "--label", help="Name of this run in comparisons ('specload report A B'); "
                                                     "kept in the record (default: the record's file name).")
    command: str | None = None  # the command line that started the run (secrets masked), for reports
    # the load to run, resolved once, when the config is built (None: --schedule-from not read yet)
    _plan: LoadPlan | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.watch.launch and self.target.url is None:
            raise ConfigError("--launch needs the server's URL as well (e.g. http://127.0.0.1:8000)")
        if self.request.continuous_usage is None:
            set_field(self, "request", replace(self.request, continuous_usage=self.target.url is None))
        if self.request.trace:
            c = self.compare
            for flag, used in (("--rate", self.load.rate), ("--find-max", self.capacity.find_max),
                               ("--schedule-from", c.schedule_from), ("--repeat", c.repeat > 1),
                               ("--target-ci", c.target_ci_pct), ("--until-decided", c.until_decided)):
                if used:
                    raise ConfigError(f"{flag} does not go with --trace (the trace decides the arrivals)")
        if self.capacity.find_max:
            c = self.compare
            for flag, used in (("--schedule-from", c.schedule_from), ("--repeat", c.repeat > 1),
                               ("--target-ci", c.target_ci_pct), ("--until-decided", c.until_decided)):
                if used:
                    raise ConfigError(f"{flag} does not go with --find-max (the search decides the levels)")
        set_field(self, "_plan", self.compare.shape(self.load.plan()))

    @classmethod
    def of(cls, url: str | None = None, **fields: Any) -> RunConfig:
        """A config from field values by name, whatever section they are in:
        ``RunConfig.of(url, concurrency=(4,), requests_per_level=40, max_tokens=64, path="run.jsonl")``."""
        return assemble(cls, {"url": url, **fields})

    @property
    def plan(self) -> LoadPlan:
        """The load to run. A config with --schedule-from has one once ``preflight`` read the record."""
        if self._plan is None:
            raise RuntimeError("--schedule-from: the record's schedule is read by specload.preflight.preflight(config)")
        return self._plan

    def api_key(self) -> str | None:
        name = self.target.api_key_env
        return os.environ.get(name) if name else None

    def request_headers(self) -> dict[str, str]:
        """The headers every request carries: ``--header`` values and the API key as a Bearer token
        (unless an Authorization header was given)."""
        headers = dict(self.target.headers)
        key = self.api_key()
        if key and not any(k.lower() == "authorization" for k in headers):
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def secret_values(self) -> tuple[str, ...]:
        """Every secret value this run knows (``specload.secrets``): masked wherever text is written."""
        w = self.watch
        return secret_values(
            api_key=self.api_key(),
            headers=self.request_headers().items(),
            texts=(w.metrics_url, w.server_log_cmd, w.launch, w.gpu_metrics, *self.sim_args),
        )

    def describe(self) -> dict:
        """Every field for the record's run line, by name (names are unique across sections, so the
        line stays flat, as readers of older records expect), secrets masked; plus what the plan and
        the prompt options derive: ``levels`` and ``prompt_source``."""
        d: dict[str, Any] = {}
        for name, value in to_dict(self).items():
            if name == "_plan":
                continue  # the plan's levels follow
            if isinstance(value, dict):
                value.pop("schedule", None)  # the replayed schedule is the plan's levels
                d.update(value)  # a section
            else:
                d[name] = value
        d["levels"] = [
            {"concurrency": lv.concurrency, "requests": lv.requests, "duration_s": lv.duration_s}
            for lv in self.plan.levels
        ]
        r = self.request
        d["prompt_source"] = ("text" if r.prompt else "file" if r.prompt_file else "dataset" if r.dataset
                              else "trace" if r.trace else "synthetic")
        return redact_config(d)  # type: ignore[return-value]

