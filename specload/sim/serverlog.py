"""What the simulator writes to its log, in the shapes real servers use. Owns every log line format.

Lines go to stdout or to ``--log-file`` (appended, line-buffered, flushed per line) so specload's log
watcher can tail the simulator exactly as it tails SGLang. Formats:

- per finished request (one line, ``key=value``; ``-`` when not measured):
  ``[2026-11-30 12:00:00] Finish request: id=chatcmpl-sim-1 status=200 outcome=length prompt_tokens=17
  completion_tokens=128 ttft_ms=50.123 tpot_ms=10.004 e2e_ms=1320.611 spec_verify_ct=41``
- every ``log_interval`` s while anything runs or waits, SGLang's decode line (``accept len`` only with
  speculation on, as SGLang prints it):
  ``[2026-11-30 12:00:00 TP0] Decode batch. #running-req: 3, #token: 1234, token usage: 0.02,
  accept len: 2.41, gen throughput (token/s): 512.33, #queue-req: 0``
- the crash: SGLang's scheduler traceback (first line prefixed ``[... TP0]``, frames unprefixed), a
  blank line, then the parent's ``Received sigquit from a child process`` line.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_TS = "%Y-%m-%d %H:%M:%S"


def stamp(tp: bool = False, wall: float | None = None) -> str:
    t = time.strftime(_TS, time.localtime(time.time() if wall is None else wall))
    return f"[{t} TP0]" if tp else f"[{t}]"


def fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000.0:.3f}"


def finish_line(
    *,
    rid: str,
    status: int,
    outcome: str,
    prompt_tokens: int,
    completion_tokens: int,
    ttft_s: float | None,
    tpot_s: float | None,
    e2e_s: float | None,
    spec_verify_ct: int,
) -> str:
    return (
        f"{stamp()} Finish request: id={rid} status={status} outcome={outcome} "
        f"prompt_tokens={prompt_tokens} completion_tokens={completion_tokens} "
        f"ttft_ms={fmt_ms(ttft_s)} tpot_ms={fmt_ms(tpot_s)} e2e_ms={fmt_ms(e2e_s)} "
        f"spec_verify_ct={spec_verify_ct}"
    )


def decode_batch_line(
    *,
    running: int,
    tokens: int,
    token_usage: float,
    accept_len: float | None,
    gen_tok_s: float,
    queued: int,
) -> str:
    accept = f"accept len: {accept_len:.2f}, " if accept_len is not None else ""
    return (
        f"{stamp(tp=True)} Decode batch. #running-req: {running}, #token: {tokens}, "
        f"token usage: {token_usage:.2f}, {accept}gen throughput (token/s): {gen_tok_s:.2f}, "
        f"#queue-req: {queued}"
    )


# SGLang's EAGLE v2 worker crashing inside the overlap scheduler loop. Paths and line numbers are those
# of an sglang checkout in the usual docker image, so a crash-signature grouper sees a realistic
# innermost frame (eagle_worker_v2.py in _draft_extend_for_decode).
_CRASH_FRAMES = """\
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2958, in run_scheduler_process
    scheduler.event_loop_overlap()
  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 120, in decorate_context
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1045, in event_loop_overlap
    batch_result = self.run_batch(batch)
                   ^^^^^^^^^^^^^^^^^^^^^
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2101, in run_batch
    batch_result = self.model_worker.forward_batch_generation(batch_or_worker_batch)
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/sgl-workspace/sglang/python/sglang/srt/speculative/eagle_worker_v2.py", line 612, in forward_batch_generation
    self._draft_extend_for_decode(model_worker_batch, batch_output)
  File "/sgl-workspace/sglang/python/sglang/srt/speculative/eagle_worker_v2.py", line 431, in _draft_extend_for_decode
    self.draft_model_runner.attn_backend.init_forward_metadata(forward_batch)
    ^^^^^^^^^^^^^^^^^^^^^^^
AttributeError: 'EAGLEWorkerV2' object has no attribute 'draft_model_runner'"""

CRASH_EXCEPTION_LINE = "AttributeError: 'EAGLEWorkerV2' object has no attribute 'draft_model_runner'"
SIGQUIT_MESSAGE = "Received sigquit from a child process. It usually means the child failed."


def crash_lines() -> list[str]:
    lines = [f"{stamp(tp=True)} Scheduler hit an exception: Traceback (most recent call last):"]
    lines.extend(_CRASH_FRAMES.splitlines())
    lines.append("")
    lines.append(f"{stamp()} {SIGQUIT_MESSAGE}")
    return lines


class ServerLog:
    """A line sink: stdout, an appended file, or nothing. Every line is flushed at once."""

    def __init__(self, path: str | None, quiet: bool = False) -> None:
        self._own = False
        self._out: TextIO | None
        if quiet:
            self._out = None
        elif path is None:
            self._out = sys.stdout
        else:
            # line buffering: a tailer sees each line the moment it is written
            self._out = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
            self._own = True

    def line(self, text: str) -> None:
        out = self._out
        if out is None:
            return
        try:
            out.write(text + "\n")
            out.flush()
        except (ValueError, OSError):
            pass  # closed stdout / full disk must not take the server down

    def lines(self, texts: list[str]) -> None:
        for t in texts:
            self.line(t)

    def close(self) -> None:
        if self._own and self._out is not None:
            self._out.close()
        self._out = None
