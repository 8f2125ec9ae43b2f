"""The server's own figures per level: speculative acceptance and generation throughput over the
span of one level of this run.

The server's counters are cumulative since it started, so a ratio of totals mixes every earlier run
and level into this one. Per level, specload adds up what the server did during the level's span
(its first request sent to its last ended) of this run only:

- from ``/metrics`` (vLLM, llama.cpp; SGLang's generation counter): each scrape's counter deltas
  cover the time since the previous scrape; a delta is counted in proportion to how much of that
  interval falls inside the level (the session scrapes at every level's start and end, so the
  intervals mostly line up). Acceptance rate = accepted / drafted tokens, acceptance length =
  1 + accepted / drafts (tokens per verify step, the bonus token included, as vLLM's log and
  ``vllm bench serve`` define it), per position = accepted at that position / drafts; generation
  throughput = generated tokens / the time covered.
- without counters, from log lines inside the span: vLLM's SpecDecoding lines and llama.cpp's
  per-request ``draft acceptance`` lines carry accepted and drafted counts (summed); SGLang's
  ``Decode batch`` lines carry an acceptance-length gauge and a throughput (averaged).
"""

from __future__ import annotations

from collections import deque

from specload.datatypes import ServerSample
from specload.stats.levels import ServerFigures


class ServerLevels:
    def __init__(self, max_samples: int = 50_000) -> None:
        self._metrics: deque[ServerSample] = deque(maxlen=max_samples)
        self._logs: deque[ServerSample] = deque(maxlen=max_samples)

    def add(self, s: ServerSample) -> None:
        if s.source == "metrics":
            if s.extra.get("interval_s"):
                self._metrics.append(s)
        elif s.accept_len is not None or s.accept_rate is not None or s.gen_tok_s is not None:
            if s.extra.get("scope") == "request" and s.extra.get("kind") != "spec":
                return  # llama.cpp's per-request eval rates are not the server's throughput
            self._logs.append(s)

    def figures(self, start_ns: int, end_ns: int) -> ServerFigures | None:
        """The server's figures over [start_ns, end_ns], or None when it said nothing about it."""
        fig = self._from_metrics(start_ns, end_ns)
        logs = self._from_logs(start_ns, end_ns)
        if fig is None:
            return logs
        if logs is not None and fig.accept_len is None and fig.accept_rate is None:
            # counters without speculation counters (SGLang): acceptance from its log lines
            return ServerFigures(logs.accept_len, logs.accept_rate, logs.accept_per_pos, fig.gen_tok_s,
                                 f"{fig.source}+{logs.source}")
        return fig

    def _from_metrics(self, a: int, b: int) -> ServerFigures | None:
        drafts = draft_tokens = accepted = gen = covered = 0.0
        per_pos: list[float] = []
        seen_spec = seen_gen = False
        for s in self._metrics:
            t1 = s.t_ns
            dt_ns = int(s.extra["interval_s"] * 1e9)
            t0 = t1 - dt_ns
            lo, hi = max(a, t0), min(b, t1)
            if hi <= lo or dt_ns <= 0:
                continue
            f = (hi - lo) / dt_ns
            covered += (hi - lo) / 1e9
            x = s.extra
            if "drafts" in x and "accepted_tokens" in x:
                seen_spec = True
                drafts += f * x["drafts"]
                draft_tokens += f * x.get("draft_tokens", 0.0)
                accepted += f * x["accepted_tokens"]
                pos = x.get("accepted_per_pos")
                if pos:
                    if len(per_pos) < len(pos):
                        per_pos += [0.0] * (len(pos) - len(per_pos))
                    for i, v in enumerate(pos):
                        per_pos[i] += f * v
            if s.gen_tok_s is not None:
                seen_gen = True
                gen += f * s.gen_tok_s * s.extra["interval_s"]
        if not covered:
            return None
        accept_len = 1.0 + accepted / drafts if seen_spec and drafts > 0 else None
        accept_rate = accepted / draft_tokens if seen_spec and draft_tokens > 0 else None
        pos_rates = tuple(v / drafts for v in per_pos) if per_pos and drafts > 0 else None
        gen_tok_s = gen / covered if seen_gen else None
        if accept_len is None and accept_rate is None and gen_tok_s is None:
            return None
        return ServerFigures(accept_len, accept_rate, pos_rates, gen_tok_s, "metrics")

    def _from_logs(self, a: int, b: int) -> ServerFigures | None:
        acc = drafted = 0
        lens: list[float] = []
        rates: list[float] = []
        gens: list[float] = []
        sources: set[str] = set()
        for s in self._logs:
            if not a <= s.t_ns <= b:
                continue
            sources.add(s.source)
            x = s.extra
            if "accepted_tokens" in x and "drafted_tokens" in x:
                acc += x["accepted_tokens"]
                drafted += x["drafted_tokens"]
            elif s.accept_rate is not None:
                rates.append(s.accept_rate)
            if s.accept_len is not None and s.source != "log:llamacpp":
                # llama.cpp's "mean len" is its drafts' length, not tokens per verify step
                lens.append(s.accept_len)
            if s.gen_tok_s is not None:
                gens.append(s.gen_tok_s)
        if not sources:
            return None
        rate = acc / drafted if drafted else (sum(rates) / len(rates) if rates else None)
        return ServerFigures(
            accept_len=sum(lens) / len(lens) if lens else None,
            accept_rate=rate,
            gen_tok_s=sum(gens) / len(gens) if gens else None,
            source="+".join(sorted(sources)),
        )
