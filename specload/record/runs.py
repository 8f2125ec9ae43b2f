"""The run model: a recorded run, from whatever file it came from, as one shape for reports.

``load_run(path)`` reads a file into a ``Run``: its label, source, kind, a description (target, model,
API, request shape, tool version, command), its levels as ``LevelRequests`` (the requests as numpy
columns, plus the source's own level summaries) and its timeline (events, server samples, crashes,
client load). ``specload report``, the comparison, the plots and the capacity search read runs only
through this, so a reader for another tool's result files (``vllm bench serve``, SGLang's
``bench_serving``) is one function that returns a ``Run``, registered with ``register_reader``.

What a source lacks is ``None``, never zero or empty: a timeline list that is ``None`` means the
source has no such lines (a peer tool's file has no server samples), while ``()`` means the source
could have had them and there were none (a specload run without a crash). Columns of a level follow
the same rule (see ``LevelRequests``). ``Run.lacks(...)`` answers it by name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from specload.record.reader import RecordData, RecordReadError, read_record
from specload.stats.level_metrics import LevelRequests
from specload.stats.levels import LevelSummary
from specload.stats.lossless import Answer


class RunReadError(RecordReadError):
    """A file that is not a run any reader understands, or that cannot be read; one line."""


@dataclass(frozen=True)
class RunDescription:
    """What was run, as far as the source says (None: it does not say)."""

    tool: str  # "specload", "vllm bench serve", "sglang bench_serving"
    version: str | None = None  # the tool's version
    target: str | None = None  # the server's URL (specload: None for the built-in simulator)
    model: str | None = None
    api: str | None = None  # chat, completions, generate
    max_tokens: int | None = None
    ignore_eos: bool | None = None
    prompt_tokens: int | None = None  # requested (synthetic prompts); the levels have the counted ones
    prompt_source: str | None = None  # synthetic, text, file, dataset
    rate: float | None = None  # open loop: requests/s (None: closed loop)
    command: str | None = None  # the command line, secrets masked
    started_at: str | None = None
    sim_args: tuple[str, ...] | None = None  # the built-in simulator's options, when it was the target
    config: dict = field(default_factory=dict)  # everything else the source recorded

    def request_shape(self) -> dict:
        """The fields two runs must share for their figures to compare (``stats.judgement`` says which
        make a comparison unsound); None where the source does not say."""
        c = self.config
        prompts: dict = c["prompts"] if isinstance(c.get("prompts"), dict) else {}
        source = prompts.get("dataset") or prompts.get("trace")
        dataset = f"{source.get('name')} (sha256 {source.get('sha256')})" if isinstance(source, dict) else None
        if dataset is None and self.prompt_source in ("text", "file"):
            dataset = c.get("prompt_file") or "--prompt"
        # 128 and "128" (a length distribution's spec) are one length
        text = lambda v: int(v) if isinstance(v, str) and v.isdigit() else v  # noqa: E731
        temperature = c.get("temperature")
        if temperature is None and self.tool == "specload":
            temperature = "server default"  # none sent: the server's own, the same for both runs of one server
        return {
            "api": self.api,
            "model": self.model,
            "max_tokens": text(c.get("max_tokens_dist") or self.max_tokens),
            "ignore_eos": self.ignore_eos,
            "prompt_tokens": text(prompts.get("prompt_tokens", self.prompt_tokens)),
            "prompt_source": self.prompt_source,
            "rate": self.rate,
            "dataset": dataset,
            "shared_prefix_tokens": c.get("shared_prefix_tokens"),
            "output_len": c.get("output_len"),
            "temperature": temperature,
        }


@dataclass(frozen=True)
class Timeline:
    """The run's lines over time, each a tuple of dicts as in the record (``t_s`` seconds since the run
    started); ``None``: the source has no such lines."""

    events: tuple[dict, ...] | None = None
    server: tuple[dict, ...] | None = None
    crashes: tuple[dict, ...] | None = None
    client: tuple[dict, ...] | None = None
    gpu: tuple[dict, ...] | None = None  # one line per GPU per sample (--gpu-metrics)

    def gpu_totals(self) -> tuple[dict, ...] | None:
        """The GPUs together, as server-like lines (``source: GPUs``): the power of all of them and their
        mean utilisation at the first GPU's sample times, each other GPU interpolated onto them; None
        without GPU samples."""
        by_gpu: dict[int, list[tuple[float, float, float]]] = {}
        nan = float("nan")
        for g in self.gpu or ():
            t = g.get("t_s")
            if isinstance(t, (int, float)):
                p, u = g.get("power_w"), g.get("util_pct")
                by_gpu.setdefault(int(g.get("gpu", 0)), []).append(
                    (t, p if isinstance(p, (int, float)) else nan, u if isinstance(u, (int, float)) else nan))
        if not by_gpu:
            return None
        series = [np.asarray(sorted(by_gpu[k]), dtype=np.float64) for k in sorted(by_gpu)]
        t = series[0][:, 0]

        def onto(a: np.ndarray, col: int) -> np.ndarray:
            ok = np.isfinite(a[:, col])
            return np.interp(t, a[ok, 0], a[ok, col]) if ok.any() else np.full(t.size, nan)

        power = sum((onto(a, 1) for a in series), np.zeros(t.size))
        util = sum((onto(a, 2) for a in series), np.zeros(t.size)) / len(series)
        return tuple({"t_s": float(x), "source": "GPUs", "gpu_power_w": float(p), "gpu_util_pct": float(u)}
                     for x, p, u in zip(t, power, util, strict=True))

    def gpu_power(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(t_s, watts of all the GPUs together); None without GPU samples with power."""
        lines = [g for g in self.gpu_totals() or () if np.isfinite(g["gpu_power_w"])]
        if not lines:
            return None
        return (np.array([g["t_s"] for g in lines]), np.array([g["gpu_power_w"] for g in lines]))

    def server_series(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(t_s, value) of the server samples that carry ``key`` (e.g. ``accept_len``); None when the
        source has no server samples or none carries it."""
        if self.server is None:
            return None
        pts = [(s["t_s"], s[key]) for s in self.server if isinstance(s.get(key), (int, float))
               and isinstance(s.get("t_s"), (int, float))]
        if not pts:
            return None
        a = np.asarray(pts, dtype=np.float64)
        return a[:, 0], a[:, 1]


@dataclass(frozen=True)
class Run:
    label: str
    source: str  # the file it was read from
    kind: str  # "specload", "vllm-bench-serve", "sglang-bench-serving"
    description: RunDescription
    levels: tuple[LevelRequests, ...]
    timeline: Timeline
    end: dict | None = None  # the end line (reason, elapsed_s, ...); None: cut short or the source has none
    truncated: bool = False
    notes: tuple[str, ...] = ()  # things a reader should know (levels recomputed, definitions that differ)
    # --check-outputs: each request's answer to its identified prompt; None when none was recorded
    answers: tuple[Answer, ...] | None = None

    def lacks(self, what: str) -> bool:
        """True when the source has no such data at all: ``events``, ``server``, ``crashes``, ``client``,
        ``accept_len``, or a request column (``start_s``, ``ttft_ms``, ``itl_ms``, ...)."""
        if what in ("events", "server", "crashes", "client"):
            return getattr(self.timeline, what) is None
        if what == "accept_len":
            return self.timeline.server_series("accept_len") is None
        return all(getattr(lv, what, None) is None for lv in self.levels)

    def level_window(self, level: LevelRequests) -> tuple[float, float] | None:
        """First start to last end of the level's requests, in seconds since the run started."""
        if level.start_s is None or level.end_s is None or level.n == 0:
            return None
        return float(np.nanmin(level.start_s)), float(np.nanmax(level.end_s))

    def during(self, kind: str, level: LevelRequests) -> tuple[dict, ...] | None:
        """Timeline lines of ``kind`` (events, server, crashes, client) inside the level's window."""
        lines = getattr(self.timeline, kind)
        w = self.level_window(level)
        if lines is None or w is None:
            return None
        a, b = w
        out = []
        for x in lines:
            t = x.get("first_seen_s", x.get("t_s")) if kind == "crashes" else x.get("t_s")
            if isinstance(t, (int, float)) and a <= t <= b:
                out.append(x)
        return tuple(out)


# ------------------------------------------------------------------------------------------ readers

Sniff = Callable[[str, bytes], bool]  # (path, the file's first 64 KiB) -> is it mine?
Read = Callable[[str, "str | None"], Run]  # (path, label) -> Run


@dataclass(frozen=True)
class RunReader:
    kind: str
    sniff: Sniff
    read: Read


_READERS: list[RunReader] = []


def register_reader(kind: str, sniff: Sniff, read: Read) -> None:
    """Add a reader for another tool's files; readers are asked in the order registered, the specload
    record reader first."""
    if any(r.kind == kind for r in _READERS):
        return
    _READERS.append(RunReader(kind, sniff, read))


def load_run(path: str, label: str | None = None) -> Run:
    """Read any supported result file as a ``Run``; ``RunReadError`` (one line) otherwise."""
    try:
        with open(path, "rb") as f:
            head = f.read(65536)
    except OSError as e:
        raise RunReadError(f"cannot read {path}: {e.strerror}") from None
    for r in _READERS:
        if r.sniff(path, head):
            return r.read(path, label)
    raise RunReadError(f"{path} is not a specload record or a result file specload can read")


def default_label(path: str) -> str:
    base = os.path.basename(path)
    for ext in (".jsonl", ".json"):
        if base.endswith(ext):
            return base[: -len(ext)]
    return base


# ------------------------------------------------------------------------------------------ specload


def _is_specload(path: str, head: bytes) -> bool:
    first = head.split(b"\n", 1)[0]
    return first.startswith(b"{") and b'"type":"run"' in first.replace(b" ", b"")


def read_specload(path: str, label: str | None = None) -> Run:
    """A specload JSONL record as a ``Run`` (a record cut short keeps every complete line)."""
    try:
        data = read_record(path)
    except RecordReadError as e:
        raise RunReadError(str(e)) from None
    return run_from_record(data, path, label)


def description_from_header(hdr: dict) -> RunDescription:
    """What a specload record's ``run`` header (or a live session's) says was run."""
    return RunDescription(
        tool="specload",
        version=hdr.get("specload"),
        target=hdr.get("target"),
        model=hdr.get("model"),
        api=hdr.get("api"),
        max_tokens=hdr.get("max_tokens"),
        ignore_eos=hdr.get("ignore_eos"),
        prompt_tokens=hdr.get("prompt_tokens") if hdr.get("prompt_source", "synthetic") == "synthetic" else None,
        prompt_source=hdr.get("prompt_source"),
        rate=hdr.get("rate"),
        command=hdr.get("command"),
        started_at=hdr.get("started_at"),
        sim_args=tuple(hdr["sim_args"]) if isinstance(hdr.get("sim_args"), list) and hdr.get("builtin_sim")
        else None,
        config={k: v for k, v in hdr.items() if k != "type"},
    )


def run_from_record(data: RecordData, path: str, label: str | None = None) -> Run:
    hdr = data.run or {}
    rate = hdr.get("rate")
    desc = description_from_header(hdr)
    manual: dict[int, bool] = {}
    repeat: dict[int, int] = {}
    for ev in data.events:
        v = ev.get("value")
        if ev.get("kind") == "level" and isinstance(v, dict) and isinstance(v.get("index"), int):
            manual[v["index"]] = bool(v.get("manual"))
            if isinstance(v.get("repeat"), int):
                repeat[v["index"]] = v["repeat"]
    summaries = {d.get("level_index"): d for d in data.levels}
    by_level: dict[int, list[dict]] = {}
    conc: dict[int, int] = {}
    for r in data.requests:
        if r.get("warmup"):
            continue
        idx = r.get("level_index", 0)
        if not isinstance(idx, int) or idx < 0:
            continue
        by_level.setdefault(idx, []).append(r)
        conc.setdefault(idx, r.get("level", 0))
    answers = tuple(a for r in data.requests if "output" in r and (a := Answer.from_line(r)) is not None)
    levels = []
    notes = []
    for idx in sorted(set(by_level) | {k for k in summaries if isinstance(k, int) and k >= 0}):
        reqs = by_level.get(idx, [])
        sd = summaries.get(idx)
        summary = LevelSummary.from_record(sd) if sd is not None else None
        c = sd.get("concurrency") if sd is not None else conc.get(idx, 0)
        lv = _level_from_lines(idx, int(c or 0), reqs, summary, manual.get(idx, False), rate is not None)
        levels.append(replace(lv, repeat=repeat.get(idx, 0)) if idx in repeat else lv)
        if sd is None and reqs:
            notes.append(f"level {idx} (C={c}) has no level line: recomputed from its requests")
    return Run(
        label=label or hdr.get("label") or default_label(path),
        source=path,
        kind="specload",
        description=desc,
        levels=tuple(levels),
        timeline=Timeline(
            events=tuple(data.events),
            server=tuple(data.servers),
            crashes=tuple(data.crashes),
            client=tuple(data.clients),
            gpu=tuple(data.gpus) or None,
        ),
        end=data.end,
        truncated=data.truncated,
        notes=tuple(notes),
        answers=answers or None,
    )


def _col(reqs: list[dict], key: str, *, ok_only: bool = True) -> np.ndarray:
    out = np.full(len(reqs), np.nan)
    for i, r in enumerate(reqs):
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and (r.get("ok") or not ok_only):
            out[i] = float(v)
    return out


def _level_from_lines(idx: int, concurrency: int, reqs: list[dict], summary: LevelSummary | None,
                      manual: bool, open_loop: bool) -> LevelRequests:
    start = _col(reqs, "start_s", ok_only=False)
    end = np.full(len(reqs), np.nan)
    for i, r in enumerate(reqs):
        e = r.get("end_s")
        if isinstance(e, (int, float)):
            end[i] = float(e)
        elif isinstance(r.get("e2e_ms"), (int, float)) and math.isfinite(start[i]):
            end[i] = start[i] + r["e2e_ms"] / 1e3  # old records without end_s
    kinds: list[str | None] = []
    for r in reqs:
        err = r.get("error")
        kinds.append(None if r.get("ok") else (err.get("kind") if isinstance(err, dict) else "error"))
    tokens = _col(reqs, "output_tokens", ok_only=False)
    return LevelRequests(
        index=idx,
        concurrency=concurrency,
        ok=np.array([bool(r.get("ok")) for r in reqs], dtype=bool),
        start_s=start,
        end_s=end,
        ttft_ms=_col(reqs, "ttft_ms"),
        tpot_ms=_col(reqs, "tpot_ms"),
        e2e_ms=_col(reqs, "e2e_ms"),
        itl_ms=_col(reqs, "itl_ms_p50"),
        output_tokens=tokens,
        prompt_tokens=_col(reqs, "prompt_tokens", ok_only=False),
        tokens_estimated=np.array([bool(r.get("tokens_estimated")) for r in reqs], dtype=bool),
        error_kind=tuple(kinds),
        category=tuple(r["category"] if isinstance(r.get("category"), str) else None for r in reqs),
        spec_accepted=_col(reqs, "spec_accepted"),
        spec_drafted=_col(reqs, "spec_drafted"),
        manual=manual,
        open_loop=open_loop,
        summary=summary,
    )


register_reader("specload", _is_specload, read_specload)
