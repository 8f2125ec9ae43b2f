"""What the simulator writes to its log, in the shapes real servers use: every line format lives here.

Lines go to stdout or ``--log-file`` (appended, flushed per line), so specload's log watcher tails the
simulator as it tails a real server: SGLang's ``Finish request`` and ``Decode batch`` lines and its
scheduler crash by default; with ``--flavor llamacpp`` llama-server's slot lines (``LlamaLog``), no
periodic line, and its sampler's assertion abort as the crash.
"""

from __future__ import annotations

import contextlib
import math
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


# --- start-up (--start-delay, --fail-start) ---------------------------------------------------------

READY_MESSAGE = "The server is fired up and ready to roll!"  # SGLang's, after its warm-up request


def loading_lines(config: object) -> list[str]:
    """SGLang's model load beginning, on TP0 (the options' values where it names them)."""
    spec = getattr(config, "spec_tokens", 0)
    algo = "EAGLE3" if spec else "None"
    return [
        f"{stamp()} server_args=ServerArgs(model_path='{getattr(config, 'model_name', 'sim-llm')}', "
        f"max_running_requests={getattr(config, 'max_batch', 32)}, speculative_algorithm={algo}, "
        f"speculative_num_draft_tokens={spec})",
        f"{stamp(tp=True)} Load weight begin. avail mem=78.52 GB",
    ]


def ready_line() -> str:
    return f"{stamp()} {READY_MESSAGE}"


_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {gpu} has a total capacity "
        "of 79.10 GiB of which 1.06 GiB is free. Process 4242 has 78.03 GiB memory in use.")


def start_failure_lines() -> list[str]:
    """The model load failing on two tensor-parallel ranks, as SGLang prints it, then the parent's line."""
    lines: list[str] = []
    for rank in (0, 1):
        t = stamp().replace("]", f" TP{rank}]")
        lines += [
            f"{t} Scheduler hit an exception: Traceback (most recent call last):",
            '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 733, in load_model',
            "    self.model = get_model(",
            '  File "/usr/local/lib/python3.12/dist-packages/torch/nn/modules/module.py", line 1355, in to',
            "    return self._apply(convert)",
            _OOM.format(gpu=rank),
            "",
        ]
    lines.append(f"{stamp()} {SIGQUIT_MESSAGE}")
    return lines


# --- llama.cpp (llama-server) ------------------------------------------------------------------------


class LlamaLog:
    """llama-server's line format; times count from the server's start, as its log does."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def stamp(self) -> str:
        us = max(0, int((time.perf_counter() - self.t0) * 1e6))
        return f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"

    def line(self, level: str, component: str, func: str, text: str) -> str:
        return f"{self.stamp()} {level} {component:<4} {func[:12]:>12}: {text}"

    def slot(self, slot: int, task: int, func: str, text: str, level: str = "I") -> str:
        return self.line(level, "slot", func, f"id {slot:2d} | task {task} | {text}")

    def launch(self, slot: int, task: int, t_last_us: int) -> list[str]:
        return [
            self.slot(slot, -1, "get_availabl", f"selected slot by LRU, t_last = {t_last_us}"),
            self.slot(slot, task, "launch_slot_", "processing task, is_child = 0"),
        ]

    def finished(
        self,
        slot: int,
        task: int,
        *,
        prompt_ms: float,
        prompt_n: int,
        predicted_ms: float,
        predicted_n: int,
        steps: int,
        drafted: int,
        accepted: int,
        drafts: int,
        n_tokens: int,
        truncated: bool,
    ) -> list[str]:
        """print_timing's lines and the release line of a request that ran to its end."""

        def per(a: float, b: float) -> float:
            # printf of a C double division: x/0 is inf, 0/0 is nan
            return a / b if b else (math.nan if a == 0 else math.inf)

        # the generation figures divide by n - 1: the first token came out of prompt processing
        gen = predicted_n - 1
        t = "print_timing"
        out = [
            self.slot(slot, task, t, f"prompt eval time = {prompt_ms:10.2f} ms / {prompt_n:5d} tokens "
                      f"({per(prompt_ms, prompt_n):8.2f} ms per token, "
                      f"{per(1e3 * prompt_n, prompt_ms):8.2f} tokens per second)"),
            self.slot(slot, task, t, f"       eval time = {predicted_ms:10.2f} ms / {predicted_n:5d} tokens "
                      f"({per(predicted_ms, gen):8.2f} ms per token, "
                      f"{per(1e3 * gen, predicted_ms):8.2f} tokens per second)"),
            self.slot(slot, task, t, f"      total time = {prompt_ms + predicted_ms:10.2f} ms / "
                      f"{prompt_n + predicted_n:5d} tokens"),
            self.slot(slot, task, t, f"   graphs reused = {max(0, steps - 1):10d}"),
        ]
        if drafted:
            # mean len: tokens per verify step including the bonus token (1 + accepted / drafts)
            out.append(self.slot(slot, task, t, f"draft acceptance = {accepted / drafted:.5f} "
                                 f"({accepted:5d} accepted / {drafted:5d} generated), "
                                 f"mean len = {1 + accepted / drafts if drafts else 0:.2f}"))
        out.append(self.release(slot, task, n_tokens, truncated))
        return out

    def release(self, slot: int, task: int, n_tokens: int, truncated: bool) -> str:
        return self.slot(slot, task, "     release",
                         f"stop processing: n_tokens = {n_tokens}, truncated = {int(truncated)}")

    def cancel(self, task: int) -> str:
        return self.line("W", "srv", "stop", f"cancel task, id_task = {task}")

    def send_error(self, task: int, message: str) -> str:
        return self.line("E", "srv", "send_error", f"task id = {task}, error: {message}")

    def got_exception(self, body: str) -> str:
        return self.line("W", "srv", "operator()", f"got exception: {body}")

    def exiting(self) -> str:
        return self.line("I", "srv", "operator()", "operator(): cleaning up before exit...")


# A sampler assertion aborting llama-server (see fixture 039): the line a C assert prints, then the
# shell's report of the abort, which is all a log shows before it stops.
LLAMA_CRASH_LINE = (
    "llama-server: /build/llama.cpp/src/llama-sampler.cpp:1094: void llama_sampler_dist_apply("
    "llama_sampler*, llama_token_data_array*): Assertion `found' failed."
)


def llama_crash_lines() -> list[str]:
    return [LLAMA_CRASH_LINE]


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
        # closed stdout / full disk must not take the server down
        with contextlib.suppress(ValueError, OSError):
            out.write(text + "\n")
            out.flush()

    def lines(self, texts: list[str]) -> None:
        for t in texts:
            self.line(t)

    def close(self) -> None:
        if self._own and self._out is not None:
            self._out.close()
        self._out = None
