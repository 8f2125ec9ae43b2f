"""The configuration of one run: frozen dataclasses built once from the CLI (or a test) and validated.

Everything the session needs to build the engine, the stats, the recorder and the server watch is
here, so the TUI and headless mode cannot be configured differently by accident. Validation errors
are ``ConfigError`` with a one-line message the CLI prints as is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import unquote, urlparse

from specload.engine.load import LoadPlan
from specload.secrets import redact_command, secret_values


class ConfigError(ValueError):
    """A bad option value; the message is one line for the user."""


@dataclass(frozen=True, slots=True)
class TargetConfig:
    url: str | None  # None: start the built-in simulator
    api: str = "auto"  # auto, chat, completions, generate
    model: str | None = None  # None: the first model of /v1/models
    headers: tuple[tuple[str, str], ...] = ()
    api_key_env: str | None = "OPENAI_API_KEY"  # name of the variable holding the key
    keepalive: bool = True
    stall_timeout_s: float = 60.0
    request_timeout_s: float | None = 600.0
    connect_timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class RequestConfig:
    max_tokens: int = 256
    ignore_eos: bool = False
    continuous_usage: bool = False
    temperature: float | None = None
    extra_body: tuple[tuple[str, object], ...] = ()
    prompt: str | None = None
    prompt_file: str | None = None
    dataset: str | None = None
    prompt_tokens: int = 128


@dataclass(frozen=True, slots=True)
class WatchConfig:
    server_log: str | None = None
    server_log_from_start: bool = False
    server_log_cmd: str | None = None
    launch: str | None = None
    ready_timeout_s: float = 900.0
    stop_grace_s: float = 10.0
    expect_log: tuple[str, ...] = ()
    expect_timeout_s: float = 30.0
    metrics_url: str | None = None  # None: the server's /metrics if it answers; "off" to disable
    metrics_interval_s: float = 1.0
    health: bool = True
    on_crash: str = "stop"  # pause, stop, continue
    down_timeout_s: float = 30.0  # headless: stop after the server has been down this long


@dataclass(frozen=True, slots=True)
class RecordConfig:
    path: str | None = None
    with_chunks: bool = False


@dataclass(frozen=True, slots=True)
class RunConfig:
    target: TargetConfig
    plan: LoadPlan
    request: RequestConfig = field(default_factory=RequestConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    record: RecordConfig = field(default_factory=RecordConfig)
    sim_args: tuple[str, ...] = ()  # options for the built-in simulator when no URL is given
    seed: int = 0
    workers: int = 1
    on_worker_death: str = "continue"  # continue (on the other workers) or stop
    label: str | None = None  # names the run in comparisons (report A B); the file name otherwise
    command: str | None = None  # the command line that started the run (secrets masked), for reports

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
            texts=(w.metrics_url, w.server_log_cmd, w.launch, *self.sim_args),
        )

    def describe(self) -> dict:
        """The configuration as written to the record's header (secrets are redacted there)."""
        t, r, w, p = self.target, self.request, self.watch, self.plan
        return {
            "target": t.url,
            "api": t.api,
            "model": t.model,
            "headers": [f"{k}: {v}" for k, v in t.headers],
            "api_key_env": t.api_key_env,
            "keepalive": t.keepalive,
            "stall_timeout_s": t.stall_timeout_s,
            "request_timeout_s": t.request_timeout_s,
            "levels": [
                {"concurrency": lv.concurrency, "requests": lv.requests, "duration_s": lv.duration_s}
                for lv in p.levels
            ],
            "warmup_requests": p.warmup_requests,
            "drain_between_levels": p.drain_between_levels,
            "rate": p.rate,
            "burstiness": p.burstiness,
            "max_tokens": r.max_tokens,
            "ignore_eos": r.ignore_eos,
            "continuous_usage": r.continuous_usage,
            "temperature": r.temperature,
            "extra_body": dict(r.extra_body),
            "prompt_source": "text" if r.prompt else "file" if r.prompt_file else "dataset" if r.dataset else "synthetic",
            "prompt_tokens": r.prompt_tokens,
            "server_log": w.server_log,
            "server_log_cmd": redact_command(w.server_log_cmd),
            "launch": redact_command(w.launch),
            "expect_log": list(w.expect_log),
            "metrics_url": w.metrics_url,
            "metrics_interval_s": w.metrics_interval_s,
            "on_crash": w.on_crash,
            "sim_args": [redact_command(a) for a in self.sim_args],
            "seed": self.seed,
            "workers": self.workers,
            "on_worker_death": self.on_worker_death,
            "label": self.label,
            "command": redact_command(self.command),
        }


def _parse_url(url: str):  # noqa: ANN202 - urllib's ParseResult
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


def parse_header(h: str) -> tuple[str, str]:
    name, sep, value = h.partition(":")
    if not sep or not name.strip():
        raise ConfigError(f"bad header {h!r}: expected 'Name: value'")
    return name.strip(), value.strip()
