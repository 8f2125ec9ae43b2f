"""Crash markers, grouping and live behaviour of the crash detector (specload.watch), on logs written here."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest

from specload.watch.crashbook import CrashEntry, SignatureBook, mask_message
from specload.watch.detector import CrashDetector, LogScanner, scan_text
from specload.watch.markers import MARKERS, demangle

MS = 1_000_000


def scan(text: str) -> list[CrashEntry]:
    return scan_text(textwrap.dedent(text).lstrip("\n"))


def one(text: str) -> CrashEntry:
    entries = scan(text)
    assert len(entries) == 1, [(e.exception_type, e.message, e.process) for e in entries]
    return entries[0]


def kinds(entries: list[CrashEntry]) -> list[tuple[str, str, str | None]]:
    return [(e.exception_type, e.message, e.process) for e in entries]


# ------------------------------------------------------------------------------------ Python tracebacks


def test_plain_traceback() -> None:
    e = one(
        """
        INFO 01-01 00:00:00 [server.py:1] starting
        Traceback (most recent call last):
          File "/srv/app/server.py", line 10, in main
            run()
          File "/srv/app/model.py", line 42, in run
            raise ValueError("bad shape 3")
        ValueError: bad shape 3
        """
    )
    assert (e.exception_type, e.message, e.innermost_frame, e.process) == (
        "ValueError",
        "bad shape 3",
        "model.py:42 in run",
        None,
    )
    assert e.line_no == 2 and e.causes == ()
    assert e.excerpt.splitlines()[0] == "Traceback (most recent call last):"
    assert e.excerpt.splitlines()[-1] == "ValueError: bad shape 3"


def test_chained_during_handling_reports_last_exception_with_causes() -> None:
    e = one(
        """
        Traceback (most recent call last):
          File "/a/config.py", line 5, in load
            return MAPPING[key]
        KeyError: 'glm'

        During handling of the above exception, another exception occurred:

        Traceback (most recent call last):
          File "/a/launch.py", line 9, in main
            load("glm")
          File "/a/config.py", line 7, in load
            raise ValueError("unknown model type glm")
        ValueError: unknown model type glm
        """
    )
    assert e.exception_type == "ValueError"
    assert e.innermost_frame == "config.py:7 in load"
    assert e.causes == ("KeyError: 'glm'",)


def test_direct_cause_chain_with_bare_exception_lines() -> None:
    e = one(
        """
        Traceback (most recent call last):
          File "/usr/lib/python3.12/asyncio/tasks.py", line 520, in wait_for
            return await fut
        asyncio.exceptions.CancelledError

        The above exception was the direct cause of the following exception:

        Traceback (most recent call last):
          File "/usr/lib/python3.12/asyncio/timeouts.py", line 115, in __aexit__
            raise TimeoutError from exc_val
        TimeoutError
        """
    )
    assert (e.exception_type, e.message, e.innermost_frame) == (
        "TimeoutError",
        "",
        "timeouts.py:115 in __aexit__",
    )
    assert e.causes == ("asyncio.exceptions.CancelledError",)


def test_header_on_the_same_line_as_a_message() -> None:
    entries = scan(
        """
        [2025-01-01 00:00:00 DP1 TP3] Scheduler hit an exception: Traceback (most recent call last):
          File "/sgl/tp_worker.py", line 68, in forward
            out = self.model(x)
        torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 296.00 MiB.
        [2025-01-01 00:00:01] Received sigquit from a child process. It usually means the child failed.
        """
    )
    assert kinds(entries) == [
        ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 296.00 MiB.", "DP1 TP3"),
        ("server_fatal", "Received sigquit from a child process. It usually means the child failed.", None),
    ]
    assert entries[0].innermost_frame == "tp_worker.py:68 in forward"


def test_elided_frames_group_with_the_full_copy() -> None:
    entries = scan(
        """
        [2026-01-01 11:13:33 TP4] Scheduler hit an exception: Traceback (most recent call last):
          File "/sgl/scheduler.py", line xxx, in xxx
            ...
          File "/sgl/store.py", line 297, in register_buffer
            raise RuntimeError(
        RuntimeError: Failed to register buffer, error code: -1
        [2026-01-01 11:13:33 TP5] Scheduler hit an exception: Traceback (most recent call last):
            ...
        RuntimeError: Failed to register buffer, error code: -1
        """
    )
    assert [(e.process, e.innermost_frame) for e in entries] == [
        ("TP4", "store.py:297 in register_buffer"),
        ("TP5", None),
    ]
    assert entries[0].signature == entries[1].signature


def test_placeholder_last_frame_gives_no_innermost_frame() -> None:
    e = one(
        """
        Traceback (most recent call last):
          File "/a/real.py", line 3, in f
          File "/a/x.py", line xxx, in xxx
        RuntimeError: boom
        """
    )
    assert e.innermost_frame is None


def test_interleaved_ranks_are_told_apart_by_their_prefixes() -> None:
    w0 = "(VllmWorker rank=0 pid=100) ERROR 07-30 17:42:47 [multiproc_executor.py:546] "
    w1 = "(VllmWorker rank=1 pid=101) ERROR 07-30 17:42:47 [multiproc_executor.py:546] "
    lines = [
        w0 + "Traceback (most recent call last):",
        w1 + "Traceback (most recent call last):",
        w0 + '  File "/v/gpu_worker.py", line 337, in execute_model',
        w1 + '  File "/v/sampler.py", line 68, in forward',
        w0 + "    output = self.model_runner.execute_model(x)",
        w1 + "    sampled = self.sample(logits)",
        w1 + "IndexError: list index out of range",
        w0 + "RuntimeError: CUDA error: an illegal memory access was encountered",
        "INFO 07-30 17:42:48 [async_llm.py:1] next",
    ]
    entries = scan_text("\n".join(lines))
    got = {(e.process, e.exception_type, e.innermost_frame) for e in entries}
    assert got == {
        ("rank 0", "RuntimeError", "gpu_worker.py:337 in execute_model"),
        ("rank 1", "IndexError", "sampler.py:68 in forward"),
    }


def test_interleaved_ranks_with_different_prefix_styles() -> None:
    lines = [
        "[rank0]: Traceback (most recent call last):",
        "(Worker_TP1 pid=562) ERROR 09-15 13:50:35 [multiproc_executor.py:672] Traceback (most recent call last):",
        '[rank0]:   File "/t/weights.py", line 119, in get_partial_sharded',
        '(Worker_TP1 pid=562) ERROR 09-15 13:50:35 [multiproc_executor.py:672]   File "/v/input_batch.py", line 67, in get_token_id',
        "[rank0]: torch.cuda.OutOfMemoryError: CUDA out of memory.",
        "(Worker_TP1 pid=562) ERROR 09-15 13:50:35 [multiproc_executor.py:672] IndexError: list index out of range",
    ]
    entries = scan_text("\n".join(lines))
    assert {(e.process, e.exception_type, e.innermost_frame) for e in entries} == {
        ("rank 0", "torch.cuda.OutOfMemoryError", "weights.py:119 in get_partial_sharded"),
        ("TP1", "IndexError", "input_batch.py:67 in get_token_id"),
    }


def test_untagged_continuation_lines_follow_the_tagged_header() -> None:
    # aggregator export: only the header carries the rank; the frames are raw lines
    agg = "1779264164797\t2026-05-20T08:02:44.797Z\t"
    lines = [
        agg + "[2026-05-20 08:02:44 PP0 TP7] Scheduler hit an exception: Traceback (most recent call last):",
        "",
        agg + '  File "/sgl/cuda_graph_runner.py", line 104, in foreach_copy',
        "",
        agg + "    torch._foreach_copy_(dsts, srcs)",
        "",
        agg + "RuntimeError: The size of tensor a (4) must match the size of tensor b (8)",
    ]
    e = scan_text("\n".join(lines))[0]
    assert (e.process, e.innermost_frame) == ("PP0 TP7", "cuda_graph_runner.py:104 in foreach_copy")


def test_headerless_traceback_tail_and_bare_first_line() -> None:
    entries = scan(
        """
        KeyError: 'layers.0.weight'
        [2025-01-20 19:10:07 TP0] Loading
          File "/a/qwen2.py", line 353, in load_weights
            param = params_dict[name]
        KeyError: 'layers.0.weight'
        """
    )
    # the bare first line is the tail of a cut traceback; the frames without a header are another copy
    assert [(e.process, e.innermost_frame) for e in entries] == [
        (None, None),
        ("TP0", "qwen2.py:353 in load_weights"),
    ]
    assert entries[0].signature == entries[1].signature


def test_ray_remote_traceback_in_a_message_gives_two_entries() -> None:
    entries = scan(
        """
        Traceback (most recent call last):
          File "/r/compiled_dag_ref.py", line 27, in _process_return_vals
            raise val.as_instanceof_cause()
        ray.exceptions.RayTaskError(RuntimeError): ray::RayWorkerWrapper.__ray_call__() (pid=690, ip=10.0.7.2)
          File "/v/topk_topp_sampler.py", line 191, in apply_top_k_top_p
            probs_sum = probs_sort.cumsum(dim=-1)
        RuntimeError: CUDA error: an illegal memory access was encountered
        CUDA kernel errors might be asynchronously reported at some other API call.
        """
    )
    assert [(e.exception_type, e.innermost_frame) for e in entries] == [
        ("ray.exceptions.RayTaskError(RuntimeError)", "compiled_dag_ref.py:27 in _process_return_vals"),
        ("RuntimeError", "topk_topp_sampler.py:191 in apply_top_k_top_p"),
    ]


def test_same_traceback_twice_in_one_process_is_one_entry() -> None:
    block = [
        "(VllmWorker rank=2 pid=7) ERROR 01-01 00:00:00 [m.py:1] Traceback (most recent call last):",
        '(VllmWorker rank=2 pid=7) ERROR 01-01 00:00:00 [m.py:1]   File "/a/b.py", line 1, in f',
        "(VllmWorker rank=2 pid=7) ERROR 01-01 00:00:00 [m.py:1] RuntimeError: boom at 0x7f00aa",
    ]
    entries = scan_text("\n".join(block + block))
    assert len(entries) == 1 and entries[0].process == "rank 2"


# ------------------------------------------------------------------------------------ native markers


def test_cpp_terminate_with_what_on_a_later_line() -> None:
    e = one(
        """
        terminate called after throwing an instance of 'c10::DistBackendError'
        (VllmWorker rank=0 pid=1) INFO 01-01 00:00:00 [x.py:1] unrelated
          what():  [PG ID 2 Rank 0] Process group watchdog thread terminated with exception: CUDA error
        Exception raised from ncclCommWatchdog at /pytorch/ProcessGroupNCCL.cpp:1902 (most recent call first):
        """
    )
    assert e.exception_type == "c10::DistBackendError"
    assert e.message.startswith("[PG ID 2 Rank 0] Process group watchdog thread terminated")
    assert e.innermost_frame is None


def test_cpp_terminate_without_what_is_reported_at_end() -> None:
    e = one("terminate called after throwing an instance of 'std::bad_alloc'\n")
    assert (e.exception_type, e.message) == ("std::bad_alloc", "")


def test_unhandled_exception_with_mangled_type() -> None:
    e = one(
        "(RayWorkerWrapper pid=1018) [2025-08-12 07:37:56,997 E 1018 10264] logging.cc:117: "
        "Unhandled exception: N3c1016DistBackendErrorE. what(): [PG ID 2 Rank 0] watchdog died\n"
    )
    assert (e.exception_type, e.message, e.process) == (
        "c10::DistBackendError",
        "[PG ID 2 Rank 0] watchdog died",
        "RayWorkerWrapper pid=1018",
    )


@pytest.mark.parametrize(
    ("mangled", "plain"),
    [
        ("N3c1016DistBackendErrorE", "c10::DistBackendError"),
        ("St9bad_alloc", "std::bad_alloc"),
        ("N5boost6system12system_errorE", "boost::system::system_error"),
        ("c10::Error", "c10::Error"),  # already readable: unchanged
    ],
)
def test_demangle(mangled: str, plain: str) -> None:
    assert demangle(mangled) == plain


@pytest.mark.parametrize(
    ("line", "expr"),
    [
        ("llama-server: /src/llama-sampler.cpp:1094: void f(): Assertion `found' failed.", "found"),
        ("/usr/include/c++/14/random.tcc:2668: void g(): Assertion '__sum > 0' failed.", "__sum > 0"),
        ("Assertion failed: (n_tokens > 0), function decode, file llama.cpp, line 10.", "n_tokens > 0"),
    ],
)
def test_c_assert(line: str, expr: str) -> None:
    e = one(line)
    assert (e.exception_type, e.message, e.innermost_frame) == ("Assertion failed", expr, None)


@pytest.mark.parametrize(
    ("line", "expr"),
    [
        ('/src/ggml-cuda.cu:329: GGML_ASSERT(ggml_cuda_has_arch(cc) && "not compiled") failed', 'ggml_cuda_has_arch(cc) && "not compiled"'),
        ("GGML_ASSERT: /src/ggml.c:4785: view_src == NULL || data_size == 0", "view_src == NULL || data_size == 0"),
    ],
)  # fmt: skip
def test_ggml_assert_both_forms(line: str, expr: str) -> None:
    e = one(line)
    assert (e.exception_type, e.message) == ("GGML_ASSERT", expr)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # ggml: the error, then where, then the abort line (one entry)
        (
            "CUDA error: an illegal memory access was encountered\n"
            "  current device: 0, in function ggml_backend_cuda_synchronize at ggml-cuda.cu:2445\n"
            "/src/ggml-cuda.cu:75: CUDA error",
            "an illegal memory access was encountered",
        ),
        ("CUDA error 700 at /src/ggml-cuda.cu:1234: an illegal memory access was encountered", "an illegal memory access was encountered"),
        ("Failed: Cuda error /root/vllm/csrc/custom_all_reduce.cuh:594 'an illegal memory access was encountered'", "an illegal memory access was encountered"),
        ("[TensorRT-LLM][ERROR] Encountered an error in forward function: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaEventSynchronize(get()): an illegal memory access was encountered (/app/cudaEvent.h:66)", "an illegal memory access was encountered"),
        ("[TensorRT-LLM][ERROR] Assertion failed: Cuda Runtime (out of memory)", "out of memory"),
    ],
)  # fmt: skip
def test_cuda_errors_outside_tracebacks(text: str, message: str) -> None:
    e = one(text)
    assert (e.exception_type, e.message) == ("CUDA error", message)


def test_cuda_error_inside_a_traceback_is_the_python_exception_only() -> None:
    e = one(
        """
        Traceback (most recent call last):
          File "/v/runner.py", line 1374, in execute_model
            x = y.tolist()
        RuntimeError: CUDA error: an illegal memory access was encountered
        CUDA error: an illegal memory access was encountered
        """
    )
    assert e.exception_type == "RuntimeError"


def test_fatal_python_error_with_faulthandler_dump() -> None:
    e = one(
        """
        Fatal Python error: Segmentation fault

        Thread 0x00007f1e (most recent call first):
          File "/usr/lib/python3.12/threading.py", line 355 in wait
          File "/v/worker.py", line 12 in run

        Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)
        """
    )
    assert (e.exception_type, e.message, e.innermost_frame) == (
        "Fatal Python error",
        "Segmentation fault",
        None,
    )


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("Aborted (core dumped)", "SIGABRT"),
        ("Aborted", "SIGABRT"),
        ("Segmentation fault (core dumped)", "SIGSEGV"),
        ("zsh: abort      ./run-server", "SIGABRT"),
        ("zsh: segmentation fault  ./llama-server -m x.gguf", "SIGSEGV"),
        ("./serve.sh: line 3: 12345 Aborted                 (core dumped) python -m sglang", "SIGABRT"),
        ("*** SIGABRT received at time=1755009477 on cpu 73 ***", "SIGABRT"),
        ("*** SIGSEGV (@0x0) received by PID 1234 (TID 0x7f) from PID 0; stack trace: ***", "SIGSEGV"),
        ("SIGSEGV: segmentation violation", "SIGSEGV"),
        ("SIGABRT: abort", "SIGABRT"),
        ("Bus error (core dumped)", "SIGBUS"),
    ],
)
def test_signal_notices(line: str, kind: str) -> None:
    e = one(line)
    assert (e.exception_type, e.message) == (kind, "")


def test_go_sigabrt_with_goroutine_dump_is_one_entry() -> None:
    e = one(
        """
        SIGABRT: abort
        PC=0x7f71d5ad289c m=0 sigcode=18446744073709551610
        signal arrived during cgo execution

        goroutine 35 gp=0xc000588540 m=0 mp=0x21d9220 [syscall]:
        runtime.cgocall(0x11ad7b0, 0xc000058838)
                /usr/lib/go/src/runtime/cgocall.go:167 +0x4b fp=0xc000058810 sp=0xc0000587d8 pc=0x4a30eb
        rax    0x0
        """
    )
    assert e.exception_type == "SIGABRT"


def test_windows_exception_from_go_runtime() -> None:
    e = one(
        """
        Exception 0xc0000005 0x0 0x7ffb4a1b2c3d 0x7ffb4a1b2c3d
        PC=0x7ffb4a1b2c3d
        signal arrived during external code execution

        runtime.cgocall(0x7ff6, 0xc000)
        """
    )
    assert (e.exception_type, e.message) == (
        "Exception 0xc0000005",
        "signal arrived during external code execution",
    )


def test_rust_panic_old_format() -> None:
    e = one(
        """
        thread 'main' panicked at 'Unable to warmup model: Generation("out of memory\\nCurrently allocated: 16.08 GiB")', router/src/main.rs:216:18
        note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
        """
    )
    assert e.exception_type == "panic"
    assert e.message.startswith('Unable to warmup model: Generation("out of memory')
    assert e.innermost_frame is None


def test_rust_panic_new_format_message_on_next_line() -> None:
    e = one(
        """
        thread 'tokio-runtime-worker' panicked at router/src/infer.rs:120:9:
        called `Result::unwrap()` on an `Err` value: Disconnected
        note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace
        """
    )
    assert (e.exception_type, e.message) == (
        "panic",
        "called `Result::unwrap()` on an `Err` value: Disconnected",
    )


def test_go_panic_and_fatal_error() -> None:
    entries = scan(
        """
        panic: runtime error: invalid memory address or nil pointer dereference
        [signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x5f1c2a]

        goroutine 1 [running]:
        main.main()
        \t/app/main.go:5 +0x1d
        fatal error: concurrent map writes
        """
    )
    assert kinds(entries) == [
        ("panic", "runtime error: invalid memory address or nil pointer dereference", None),
        ("fatal error", "concurrent map writes", None),
    ]


def test_nccl_watchdog_timeout_on_two_ranks_is_one_signature() -> None:
    entries = scan(
        """
        [rank3]:[E1105 10:00:00.123456789 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
        [rank1]:[E1105 10:00:00.223456789 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600044 milliseconds before timing out.
        """
    )
    assert [e.process for e in entries] == ["rank 3", "rank 1"]
    assert {e.exception_type for e in entries} == {"NCCL watchdog timeout"}
    assert entries[0].message.startswith("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5")
    assert entries[0].signature == entries[1].signature


def test_sglang_watchdog_timeout() -> None:
    e = one("[2025-08-02 19:24:30 TP3] Watchdog timeout (self.watchdog_timeout=300)\n")
    assert (e.exception_type, e.message, e.process) == (
        "watchdog_timeout",
        "Watchdog timeout (self.watchdog_timeout=300)",
        "TP3",
    )


@pytest.mark.parametrize(
    ("line", "message", "process"),
    [
        ("[2025-01-20 19:10:07] Received sigquit from a child proces. It usually means the child failed.", "Received sigquit from a child proces. It usually means the child failed.", None),
        ("2024-06-17T13:18:29.406790Z ERROR text_generation_launcher: Shard 1 failed to start", "Shard 1 failed to start", None),
        ("2024-06-17T13:18:29.406790Z ERROR shard-manager: text_generation_launcher: Shard process was signaled to shutdown with signal 9 rank=0", "Shard process was signaled to shutdown with signal 9", "rank 0"),
        ("2023-07-07T17:55:43.805488Z ERROR text_generation_launcher: Webserver Crashed", "Webserver Crashed", None),
        ("Error: ShardCannotStart", "Error: ShardCannotStart", None),
        ("CRITICAL 01-23 10:00:00 launcher.py:99] MQLLMEngine is already dead, terminating server process", "MQLLMEngine is already dead, terminating server process", None),
        ("ERROR 01-23 10:00:00 client.py:300] RuntimeError('Engine process (pid 4242) died.')", "RuntimeError('Engine process (pid 4242) died.')", None),
        ("(APIServer pid=9) ERROR 09-01 10:00:00 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.", "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.", "APIServer"),
        ('Sep 11 18:19:47 host ollama[67030]: time=2024-09-11T18:19:47.855-06:00 level=ERROR source=sched.go:456 msg="error loading llama server" error="llama runner process has terminated: signal: segmentation fault (core dumped)"', "llama runner process has terminated: signal: segmentation fault (core dumped)", None),
        ("main: exiting due to model loading error", "main: exiting due to model loading error", None),
    ],
)  # fmt: skip
def test_lifecycle_deaths(line: str, message: str, process: str | None) -> None:
    e = one(line)
    assert (e.exception_type, e.message, e.process) == ("server_fatal", message, process)


# ------------------------------------------------------------------------------------ what is not a crash

NORMAL_LINES = [
    "ERROR 03-18 09:02:03 [serving_chat.py:133] Error with model object='error' message='The model `x` does not exist.' type='NotFoundError' param=None code=404",
    'INFO:     192.168.1.168:12475 - "POST /v1/chat/completions HTTP/1.1" 404 Not Found',
    'INFO:     10.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
    "WARNING 03-18 09:00:11 [config.py:1] `torch_dtype` is deprecated! Use `dtype` instead!",
    "/opt/conda/lib/python3.10/site-packages/hf/file_download.py:1132: FutureWarning: `resume_download` is deprecated.",
    'time=2025-04-28T14:53:22.652+02:00 level=DEBUG source=server.go:569 msg="server unhealthy" error="health resp: dial tcp 127.0.0.1:38573: connect: connection refused"',
    'time=2025-04-28T14:53:22.652+02:00 level=WARN source=amd.go:59 msg="driver missing" error="amdgpu version file missing"',
    "Sever-5090D-1T:1018:10307 [0] NCCL INFO Channel 00/02 : 0 1",
    "[svc][2026-03-10 14:48:26][http_server.py:566][ERROR]: Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
    "[svc][2026-03-10 14:48:28][conn.py:225][ERROR]: Error fetching prefill server info from bootstrap: HTTPConnectionPool(host='10.0.0.1', port=8998): Max retries exceeded",
    "Finish: obj=GenerateReqInput(rid='bf89'), out={'meta_info': {'finish_reason': {'type': 'abort', 'message': 'Request running timeout reached.'}}}",
    "[rank2]:[W611 01:51:09.369133081 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=86): failed to recv, got 0 bytes",
    "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:678 (most recent call first):",
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7f86bc1785e8 in /torch/lib/libc10.so)",
    "[rank0]:[E611 01:51:09.9 ProcessGroupNCCL.cpp:1896] [PG ID 2 PG GUID 3 Rank 0] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
    "future: <Task finished name='Task-6' coro=<gen() done> exception=ValueError(\"Request is disconnected\")>",
    "Pyspy failed to dump PID 171. Error: /bin/dash: 1: py-spy: not found",
    "nanobind: leaked 2 instances!",
    "Error: No such option: --foo",
    "INFO 01-01 00:00:00 [scheduler.py:1] Aborted request 12 (client disconnected)",
    "[GIN] 2024/09/11 - 18:19:47 | 500 | 16.529325999s |       127.0.0.1 | POST     \"/api/chat\"",
    "1       0x7f2d2e81e045 /opt/tritonserver/backends/libtriton_tensorrtllm.so(+0x36045) [0x7f2d2e81e045]",
    "INFO 01-01 00:00:00 [x.py:1] KeyError: this is only logged text, not a traceback",
]  # fmt: skip


def test_request_level_errors_warnings_and_context_lines_are_not_crashes() -> None:
    # the first line is a normal one so the "bare exception tail on line 1" rule does not apply
    assert scan_text("INFO 01-01 00:00:00 [x.py:1] up\n" + "\n".join(NORMAL_LINES)) == []


def test_incomplete_traceback_at_end_of_input_is_not_a_crash() -> None:
    assert (
        scan(
            """
            Traceback (most recent call last):
              File "/a/b.py", line 1, in f
                g()
            """
        )
        == []
    )


def test_traceback_abandoned_by_a_new_header_is_not_a_crash() -> None:
    e = one(
        """
        Traceback (most recent call last):
          File "/a/cut.py", line 1, in f
        Traceback (most recent call last):
          File "/a/full.py", line 2, in g
        OSError: disk full
        """
    )
    assert e.innermost_frame == "full.py:2 in g"


def test_bare_exception_line_after_the_start_is_not_a_crash() -> None:
    assert scan("INFO starting\nKeyError: 'x'\n") == []


# ------------------------------------------------------------------------------------ masking and grouping


def test_mask_message() -> None:
    assert mask_message("rank 3 pid=229 at 0x7fa5 in /usr/lib/libc.so.6 rid=bf890d9ca8ce4008") == (
        "rank <n> pid=<n> at <hex> in <path> rid=<id>"
    )
    assert mask_message("Tried to allocate 224.00 MiB") == "Tried to allocate <n> MiB"


def _tb(message: str, frame_file: str = "m.py", line: int = 1, prefix: str = "") -> str:
    return (
        f"{prefix}Traceback (most recent call last):\n"
        f'{prefix}  File "/x/{frame_file}", line {line}, in f\n'
        f"{prefix}RuntimeError: {message}\n"
    )


def test_numbers_pids_addresses_do_not_split_a_signature() -> None:
    entries = scan_text(
        "start\n"
        + _tb("Rank 0 failed at 0x7f00 after 600012 ms", prefix="[rank0]: ")
        + _tb("Rank 1 failed at 0x7e11 after 600044 ms", prefix="[rank1]: ")
    )
    assert len(entries) == 2 and entries[0].signature == entries[1].signature


def test_different_messages_or_frames_are_different_signatures() -> None:
    entries = scan_text(
        "start\n"
        + _tb("CUDA error: out of memory", prefix="[rank0]: ")
        + _tb("CUDA error: illegal address", prefix="[rank1]: ")
        + _tb("CUDA error: out of memory", frame_file="other.py", prefix="[rank2]: ")
    )
    assert len({e.signature for e in entries}) == 3


def test_cut_copy_of_a_message_groups_with_the_full_one() -> None:
    entries = scan_text(
        "start\n"
        + _tb("CUDA out of memory. Tried to allocate 224.00 MiB. GPU")
        + "INFO 01-01 00:00:00 [x.py:1] next\n"
        + _tb(
            "CUDA out of memory. Tried to allocate 224.00 MiB. GPU 0 has a total capacity", prefix="[rank1]: "
        )
    )
    assert len(entries) == 2 and entries[0].signature == entries[1].signature


def test_short_messages_need_to_be_equal_to_group() -> None:
    entries = scan_text("start\n" + _tb("bad") + "INFO x\n" + _tb("bad value", prefix="[rank1]: "))
    assert entries[0].signature != entries[1].signature


# ------------------------------------------------------------------------------------ live behaviour


def _traceback_lines() -> list[str]:
    return [
        "[2025-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/x.py", line 3, in f',
        "    raise KeyError(k)",
        "KeyError: 'k'",
    ]


def test_poll_releases_a_finished_traceback_after_settle() -> None:
    det = CrashDetector(settle_ns=300 * MS)
    for i, line in enumerate(_traceback_lines()):
        assert det.feed(line, t_ns=i * MS) == []
    last = 3 * MS
    assert det.poll(last + 299 * MS) == []  # "During handling ..." could still follow
    entries = det.poll(last + 300 * MS)
    assert [(e.exception_type, e.process) for e in entries] == [("KeyError", "TP0")]
    assert det.poll(last + 10_000 * MS) == [] and det.finish() == []


def test_chain_marker_within_settle_keeps_the_traceback_open() -> None:
    det = CrashDetector(settle_ns=300 * MS)
    for i, line in enumerate(_traceback_lines()):
        det.feed(line, t_ns=i * MS)
    assert det.feed("", t_ns=100 * MS) == []
    assert (
        det.feed("During handling of the above exception, another exception occurred:", t_ns=200 * MS) == []
    )
    assert det.poll(450 * MS) == []  # quiet for 250 ms only
    det.feed("Traceback (most recent call last):", t_ns=460 * MS)
    det.feed('  File "/sgl/y.py", line 9, in g', t_ns=461 * MS)
    det.feed("ValueError: unknown k", t_ns=462 * MS)
    entries = det.poll(462 * MS + 300 * MS)
    assert [(e.exception_type, e.causes) for e in entries] == [("ValueError", ("KeyError: 'k'",))]


def test_poll_does_not_release_a_traceback_still_in_its_frames() -> None:
    det = CrashDetector(settle_ns=300 * MS)
    for i, line in enumerate(_traceback_lines()[:3]):
        det.feed(line, t_ns=i * MS)
    assert det.poll(10_000 * MS) == []
    assert det.finish() == []


def test_next_record_releases_the_traceback_without_poll() -> None:
    det = CrashDetector()
    for line in _traceback_lines():
        det.feed(line)
    entries = det.feed("[2025-01-01 00:00:01 TP0] Prefill batch, #new-seq: 1")
    assert [e.exception_type for e in entries] == ["KeyError"]


def test_poll_releases_a_terminate_whose_what_never_came() -> None:
    det = CrashDetector(settle_ns=300 * MS)
    assert det.feed("terminate called after throwing an instance of 'std::runtime_error'", t_ns=0) == []
    assert det.poll(299 * MS) == []
    assert [(e.exception_type, e.message) for e in det.poll(300 * MS)] == [("std::runtime_error", "")]


def test_line_numbers_count_every_fed_line() -> None:
    det = CrashDetector()
    det.feed("INFO up")
    det.feed("")
    entries = det.feed("Segmentation fault (core dumped)")
    assert entries[0].line_no == 3


# ------------------------------------------------------------------------------------ SignatureBook


def _entry(line_no: int, exc_type: str = "RuntimeError", message: str = "boom", process: str | None = None,
           signature: str | None = None, consequence: bool = False, log_s: float | None = None,
           pid: str | None = None, reach_s: float = 0) -> CrashEntry:
    return CrashEntry(exc_type, message, None, process, signature or f"{exc_type}:{message}", (), "", line_no,
                      consequence, None if log_s is None else int(log_s * 1e9), pid, int(reach_s * 1e9))


def test_signature_book_reads_the_log_own_times_over_line_distances() -> None:
    book = SignatureBook()
    book.add(_entry(10, process="rank 0", log_s=100), 0)
    # 900 lines of eight ranks' tracebacks within the same second: one failure
    assert book.add(_entry(910, process="rank 7", log_s=100.5), 0).count == 1
    # a consequence 578 lines on but 91 s later (an appended log's next run): a new failure
    gone = _entry(1488, "server_fatal", "Engine core proc died unexpectedly", consequence=True, log_s=191.5)
    assert book.add(gone, 0).count == 1 and book.failures == 2
    # lines without a time of their own fall back to the line distance
    assert book.add(_entry(1500, "SIGSEGV", "", consequence=True), 0).signature == gone.signature
    assert book.failures == 2


def test_signature_book_a_process_named_again_with_a_new_pid_is_a_new_failure() -> None:
    # no timestamps: only the pid tells the restarted API server from the one that died
    book = SignatureBook()
    died = _entry(31, "server_fatal", "Engine core proc died unexpectedly", "APIServer", consequence=True,
                  pid="48211")
    book.add(died, 0)
    assert book.add(replace(died, line_no=40), 0) is None  # the same process again: the same failure
    again = book.add(replace(died, line_no=609, pid="49127"), 0)
    assert again.count == 2 and book.failures == 2


def test_signature_book_a_watchdog_reaches_back_as_far_as_it_waited() -> None:
    book = SignatureBook()
    book.add(_entry(8, "torch.OutOfMemoryError", "CUDA out of memory.", "rank 1", log_s=0), 0)
    # the other rank's NCCL watchdog, 600 s later, after waiting 600 s for it: a consequence
    ev = book.add(_entry(48, "NCCL watchdog timeout", "ran for 600036 milliseconds", "rank 0",
                         consequence=True, log_s=600, reach_s=600.036), 0)
    assert ev.exception_type == "torch.OutOfMemoryError" and book.failures == 1
    # a watchdog that waited 60 s, 600 s later: its own failure
    late = _entry(90, "NCCL watchdog timeout", "ran for 60000 milliseconds", "rank 0", consequence=True,
                  log_s=1300, reach_s=60)
    assert book.add(late, 0).exception_type == "NCCL watchdog timeout" and book.failures == 2


def test_the_first_failure_in_time_is_the_root_though_its_traceback_ends_last() -> None:
    # rank 1's traceback is open (nothing follows it on rank 1) when rank 0's crash lines complete
    rank1 = "(VllmWorker rank=1 pid=22) ERROR 05-12 14:03:07 [multiproc_executor.py:527] "
    lines = [rank1 + "Traceback (most recent call last):",
             rank1 + '  File "/v/gpu_model_runner.py", line 1268, in execute_model',
             rank1 + "torch.OutOfMemoryError: CUDA out of memory.",
             "(VllmWorker rank=0 pid=21) [rank0]:[E512 14:03:09.1 ProcessGroupNCCL.cpp:1] Process group watchdog"
             " thread terminated",
             "(VllmWorker rank=0 pid=21) terminate called after throwing an instance of 'c10::DistBackendError'",
             "(VllmWorker rank=0 pid=21)   what():  [PG ID 2 Rank 0] Process group watchdog thread terminated"]
    scanner = LogScanner()
    scanner.feed_lines(lines)
    scanner.finish()
    (ev,) = scanner.book.events()
    assert (ev.exception_type, ev.processes) == ("torch.OutOfMemoryError", ("rank 1",))
    assert [c.exception_type for c in ev.consequences] == ["c10::DistBackendError"]
    # live: released in the order they started, once rank 1's traceback is known complete
    det = CrashDetector(settle_ns=300 * MS)
    out = [e.exception_type for i, line in enumerate(lines) for e in det.feed(line, i * MS)]
    assert out == []
    assert [e.exception_type for e in det.poll(400 * MS)] == ["torch.OutOfMemoryError", "c10::DistBackendError"]


def test_signature_book_one_failure_on_several_ranks_counts_once() -> None:
    book = SignatureBook()
    first = book.add(_entry(10, process="rank 0"), 10)
    assert first.new and first.count == 1 and first.processes == ("rank 0",)
    again = book.add(_entry(30, process="rank 1"), 20)
    assert not again.new and again.count == 1 and again.processes == ("rank 0", "rank 1")
    assert (again.first_seen_ns, again.last_seen_ns) == (10, 20)
    assert book.add(_entry(60, process="rank 0"), 30) is None  # vLLM prints a traceback twice: no change
    (ev,) = book.events()
    assert ev.count == 1 and ev.processes == ("rank 0", "rank 1") and ev.last_seen_ns == 30
    assert book.failures == 1


def test_signature_book_a_crash_line_in_a_loop_is_one_event() -> None:
    book = SignatureBook()
    changed = [book.add(_entry(i, "SIGSEGV", "", consequence=True), i * MS) for i in range(1, 10_001)]
    assert changed[0] is not None and changed[1:] == [None] * 9_999
    assert book.failures == 1


def test_signature_book_groups_consequences_under_the_root_cause() -> None:
    book = SignatureBook()
    root = book.add(_entry(5, process="TP0"), 0)
    sigquit = _entry(9, "server_fatal", "Received sigquit from a child process.", consequence=True)
    ev = book.add(sigquit, 400 * MS)
    assert ev.signature == root.signature and not ev.new and ev.count == 1
    assert [(c.exception_type, c.count) for c in ev.consequences] == [("server_fatal", 1)]
    exit_ = book.add(_entry(12, "process_exit", "exited with code 1", "sglang-1", consequence=True), 900 * MS)
    assert [c.processes for c in exit_.consequences] == [(), ("sglang-1",)]
    # the same exit notice again: counted, but nothing a reader sees changed
    assert book.add(_entry(13, "process_exit", "exited with code 1", "sglang-1", consequence=True), 0) is None
    assert [c.count for c in book.events()[0].consequences] == [1, 2]
    assert [e.exception_type for e in book.events()] == ["RuntimeError"] and book.failures == 1


def test_signature_book_a_lone_consequence_is_a_root_cause() -> None:
    book = SignatureBook()
    ev = book.add(_entry(100, "server_fatal", "MPClient: engine core exited unexpectedly", consequence=True), 0)
    assert ev.new and ev.exception_type == "server_fatal" and book.failures == 1


def test_signature_book_windows_separate_failures() -> None:
    book = SignatureBook()
    book.add(_entry(10), 0)
    # the same crash 10 s later (live), or 500 lines later (offline): a second failure
    assert book.add(_entry(20), 10_000 * MS).count == 2
    assert book.add(_entry(520), 10_001 * MS).count == 3
    # a consequence joins from further away than another crash does
    joined = book.add(_entry(1500, "process_exit", "exited with code 1", "x", consequence=True), 40_000 * MS)
    assert joined.count == 3 and len(joined.consequences) == 1
    assert book.failures == 3


def test_signature_book_a_process_exit_ends_the_failure() -> None:
    book = SignatureBook()
    book.add(_entry(10, "GGML_ASSERT", "i01 >= 0"), 0)
    book.add(_entry(13, "process_exit", "exited with code 134 (SIGABRT)", "llama-1", consequence=True), 0)
    # the same exit seen by a second supervisor right after: still the same failure
    book.add(_entry(14, "process_exit", "killed by SIGABRT", "llama-1", consequence=True), 0)
    # the restarted server crashes the same way 30 lines later: a new failure, though within 400 lines
    again = book.add(_entry(44, "GGML_ASSERT", "i01 >= 0"), 0)
    assert again.count == 2 and book.failures == 2
    assert [c.count for c in again.consequences] == [1, 1]


def test_scan_log_and_live_count_a_multi_rank_crash_alike() -> None:
    text = (
        "start\n"
        + _tb("boom", prefix="[rank0]: ")
        + _tb("boom", prefix="[rank1]: ")
        + "[2025-01-01 00:00:00] Received sigquit from a child process. It usually means the child failed.\n"
    )
    scanner = LogScanner()
    scanner.feed_lines(text.split("\n"))
    scanner.finish()
    det, book = CrashDetector(), SignatureBook()
    for i, line in enumerate(text.split("\n")):
        for e in det.feed(line, i * MS):
            book.add(e, i * MS)
    for e in det.finish():
        book.add(e, 100 * MS)
    for b in (scanner.book, book):
        (ev,) = b.events()
        assert (ev.exception_type, ev.count, ev.processes) == ("RuntimeError", 1, ("rank 0", "rank 1"))
        assert [c.exception_type for c in ev.consequences] == ["server_fatal"]
    assert [scanner.root_of(e) for e in scanner.entries()] == [ev.signature] * 3


def test_signature_book_learns_the_frame_from_a_later_full_copy() -> None:
    entries = scan(
        """
        KeyError: 'w'
        [2025-01-20 19:10:07 TP0] Scheduler hit an exception: Traceback (most recent call last):
          File "/a/qwen2.py", line 353, in load_weights
        KeyError: 'w'
        """
    )
    book = SignatureBook()
    book.add(entries[0], 1)
    assert book.add(entries[1], 2).innermost_frame == "qwen2.py:353 in load_weights"


# ------------------------------------------------------------------------------------ other log shapes


def test_exception_group_traceback_reports_the_group_and_its_sub_exception() -> None:
    entries = scan(
        """
        INFO start
          + Exception Group Traceback (most recent call last):
          |   File "/v/api_server.py", line 10, in serve
          |     async with anyio.create_task_group() as tg:
          | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)
          +-+---------------- 1 ----------------
            | Traceback (most recent call last):
            |   File "/v/engine.py", line 3, in step
            |     raise RuntimeError("engine died")
            | RuntimeError: engine died
            +------------------------------------
        """
    )
    assert [(e.exception_type, e.innermost_frame) for e in entries] == [
        ("ExceptionGroup", "api_server.py:10 in serve"),
        ("RuntimeError", "engine.py:3 in step"),
    ]


def test_loguru_records_end_a_traceback() -> None:
    det = CrashDetector()
    for line in [
        "2024-06-17 13:18:26.673 | ERROR    | text_generation_server.server:serve_inner:225 - Error",
        "Traceback (most recent call last):",
        '> File "/opt/tgi/server.py", line 225, in serve_inner',
        "    model = get_model(",
        "RuntimeError: boom",
    ]:
        assert det.feed(line) == []
    entries = det.feed("2024-06-17 13:18:27.000 | INFO     | x:y:1 - next")
    assert [(e.exception_type, e.innermost_frame) for e in entries] == [
        ("RuntimeError", "server.py:225 in serve_inner")
    ]


def test_json_lines_records_with_embedded_traceback() -> None:
    lines = [
        '{"timestamp":"2024-06-17T13:18:29Z","level":"INFO","fields":{"message":"starting"},"target":"launcher"}',
        '{"timestamp":"2024-06-17T13:18:29Z","level":"ERROR","fields":{"message":"Shard 1 failed to start"}}',
        '{"time": "t", "level": "ERROR", "rank": 2, "msg": "Engine crashed", "exc_info": '
        '"Traceback (most recent call last):\\n  File \\"/v/x.py\\", line 3, in f\\n    g()\\nValueError: bad"}',
        '{"level": "INFO", "msg": "request failed", "error": "404 not found"}',
    ]
    entries = scan_text("\n".join(lines))
    assert [(e.exception_type, e.message, e.innermost_frame, e.process, e.line_no) for e in entries] == [
        ("server_fatal", "Shard 1 failed to start", None, None, 2),
        ("ValueError", "bad", "x.py:3 in f", "rank 2", 3),
    ]


# ------------------------------------------------------------------------------------ markers from unseen logs


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("[1]    7302 abort      RUST_BACKTRACE=full text-embeddings-router --port 8001", "SIGABRT"),
        ("[2]  - 991 segmentation fault (core dumped)  ./llama-server -m model.gguf", "SIGSEGV"),
        ("[gpu-node-2:01873] Signal: Aborted (6)", "SIGABRT"),
        ("[gpu-node-2:01873] Signal: Segmentation fault (11)", "SIGSEGV"),
        ("!!!!!!! Segfault encountered !!!!!!!", "SIGSEGV"),
    ],
)
def test_more_signal_notices(line: str, kind: str) -> None:
    e = one(line)
    assert (e.exception_type, e.message) == (kind, "")


def test_job_table_lines_that_are_not_signals() -> None:
    assert scan("[1]  + 7302 running    ./server\n[2]  Done  make\n") == []


def test_ollama_runner_terminated_takes_the_error_field() -> None:
    e = one(
        'time=2025-04-14T20:20:48.993+08:00 level=ERROR source=server.go:449 msg="llama runner terminated" error="exit status 0xc0000409"'
    )
    assert (e.exception_type, e.message) == ("server_fatal", "exit status 0xc0000409")


def test_vllm_v0_worker_death_and_fatal_signal_lines() -> None:
    entries = scan(
        """
        ERROR 07-16 09:31:47 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 658 died, exit code: -15
        CRITICAL 01-15 10:02:40 [core_client.py:359] Got fatal signal from worker processes, shutting down. See stack trace above for root cause issue.
        """
    )
    assert [e.message[:24] for e in entries] == ["Worker VllmWorkerProcess", "Got fatal signal from wo"]


def test_what_goes_to_the_terminate_of_its_own_rank() -> None:
    entries = scan(
        """
        [rank1]:terminate called after throwing an instance of 'c10::DistBackendError'
        [rank0]:terminate called after throwing an instance of 'c10::DistBackendError'
        [rank1]:  what():  [PG ID 2 PG GUID 3 Rank 1] watchdog thread terminated
        [rank0]:  what():  [PG ID 2 PG GUID 3 Rank 0] watchdog thread terminated
        """
    )
    assert sorted((e.process, e.message[:20]) for e in entries) == [
        ("rank 0", "[PG ID 2 PG GUID 3 R"),
        ("rank 1", "[PG ID 2 PG GUID 3 R"),
    ]
    assert {e.process: e.message.split("Rank ")[1][0] for e in entries} == {"rank 0": "0", "rank 1": "1"}


def test_shell_notice_is_not_the_exception_line_of_a_headerless_traceback() -> None:
    entries = scan(
        """
          File "<unknown>", line 0, in PyEval_EvalFrameDefault
          File "<unknown>", line 0, in _PyFunction_Vectorcall
        [2025-11-03 09:12:43] Received sigquit from a child process. It usually means the child failed.
        Killed
        """
    )
    assert [e.exception_type for e in entries] == ["server_fatal", "process_exit"]


# ------------------------------------------------------------------------------------ process exits (issue 16)


@pytest.mark.parametrize(
    ("line", "message", "process"),
    [
        ("llama-1 exited with code 134", "exited with code 134 (SIGABRT)", "llama-1"),
        ("vllm-server exited with code 1", "exited with code 1", "vllm-server"),
        ("mpirun noticed that process rank 3 with PID 0 on node n1 exited on signal 9 (Killed).",
         "killed by SIGKILL", "rank 3"),
        ("Nov 15 21:48:43 host systemd[1]: ollama.service: Main process exited, code=dumped, status=11/SEGV",
         "killed by SIGSEGV (core dumped)", "ollama.service"),
        ("Nov 15 21:48:43 host systemd[1]: vllm.service: Main process exited, code=exited, status=2/INVALIDARGUMENT",
         "exited with code 2", "vllm.service"),
        ("E1223 05:18:02.971000 3304089 torch/distributed/elastic/multiprocessing/api.py:882] failed (exitcode: -11)"
         " local_rank: 0 (pid: 3304209) of binary: /usr/bin/python3", "killed by SIGSEGV", "local_rank 0"),
        ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 2 (pid: 7) of binary:"
         " /usr/bin/python3", "exited with code 1", "local_rank 2"),
        ("(raylet) Raylet is terminated. Termination is unexpected. Possible reasons include: (1) SIGKILL",
         "Raylet is terminated. Termination is unexpected.", "raylet"),
        ("Killed", "killed by SIGKILL", None),
        ("./entrypoint.sh: line 28:     7 Killed                  LD_LIBRARY_PATH=/x /app/bin/scalellm $ARGS",
         "killed by SIGKILL", "scalellm"),
        ("[1]+  Killed                  python -m vllm.entrypoints.openai.api_server", "killed by SIGKILL", "python"),
    ],
)
def test_process_exit_lines(line: str, message: str, process: str | None) -> None:
    e = one(line)
    assert (e.exception_type, e.message, e.process, e.consequence) == ("process_exit", message, process, True)


@pytest.mark.parametrize(
    "line",
    [
        "init-1 exited with code 0",
        "vllm-1 exited with code 143",  # SIGTERM: a requested stop
        "Nov 16 09:00:04 gpu-7 systemd[1]: vllm.service: Main process exited, code=exited, status=0/SUCCESS",
        "Nov 16 09:01:10 gpu-7 systemd[1]: ollama.service: Main process exited, code=killed, status=15/TERM",
        "(raylet) Raylet is terminated. Termination is graceful.",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -15) local_rank: 0 (pid: 1) of binary: x",
        "INFO:     Child process [12] died",
    ],
)
def test_clean_exits_and_stops_are_not_crashes(line: str) -> None:
    assert scan(line) == []


def test_mpirun_nonzero_exit_takes_rank_and_code_from_the_lines_after() -> None:
    e = one(
        """
        mpirun detected that one or more processes exited with non-zero status, thus causing
        the job to be terminated. The first process to do so was:

          Process name: [[52473,1],2]
          Exit code:    3
        """
    )
    assert (e.exception_type, e.message, e.process) == ("process_exit", "exited with code 3", "rank 2")


def test_vllm_fatal_error_header_is_the_traceback_when_one_follows() -> None:
    p = "(EngineCore_DP0 pid=5) ERROR 11-08 11:01:30 [core.py:710] "
    with_tb = scan(
        f"{p}EngineCore encountered a fatal error.\n{p}Traceback (most recent call last):\n"
        f'{p}  File "/x/core.py", line 1, in run\n{p}RuntimeError: cancelled\n'
    )
    assert kinds(with_tb) == [("RuntimeError", "cancelled", "EngineCore_DP0")]
    alone = scan(f"{p}EngineCore encountered a fatal error.\n(APIServer pid=1) INFO:     Shutting down\n")
    assert kinds(alone) == [("server_fatal", "EngineCore encountered a fatal error.", "EngineCore_DP0")]


def test_vllm_mpclient_engine_core_exited_line() -> None:
    e = one(
        "(APIServer pid=1) WARNING 11-28 10:12:11 [core_client.py:905] "
        "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup"
    )
    assert (e.exception_type, e.process) == ("server_fatal", "APIServer")
    assert e.message.startswith("[shutdown] MPClient: engine core exited unexpectedly")


def test_markers_table_is_documented() -> None:
    names = [m.name for m in MARKERS]
    assert len(names) == len(set(names))
    assert all(m.doc.strip() and m.pattern.pattern for m in MARKERS)
    assert [m.name for m in MARKERS if not scan_text(m.example)] == []  # every row finds its own example


def test_gpu_xid_and_off_the_bus_lines() -> None:
    # the kernel's XID line (journald's prefix), nvidia-smi's line for a GPU it cannot reach
    e = one("Nov 15 21:48:40 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1873, name=python3, "
            "GPU has fallen off the bus.")
    assert (e.exception_type, e.process, e.message) == (
        "Xid 79", "GPU 0000:3b:00", "pid=1873, name=python3, GPU has fallen off the bus.")
    e = one("Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost. Reboot the system to "
            "recover this GPU")
    assert (e.exception_type, e.process, e.message) == (
        "GPU lost", "GPU 0000:3B:00.0", "GPU is lost. Reboot the system to recover this GPU")
    # two XIDs of different numbers are different crashes; the same one on two GPUs is one signature
    a, b, c = (one(f"NVRM: Xid (PCI:0000:{bus}:00): {x}, pid=1, name=python3, Ch 00000008")
               for bus, x in (("18", 13), ("2a", 13), ("18", 31)))
    assert a.signature == b.signature != c.signature and a.exception_type == "Xid 13"


# ------------------------------------------------------------------------------------ root cause first


def test_sigquit_printed_before_the_traceback_is_released_comes_after_it() -> None:
    from specload.sim.serverlog import crash_lines

    det = CrashDetector(settle_ns=300 * MS)
    out = []
    for i, line in enumerate(crash_lines()):  # the sigquit line is complete at once, but held back
        out += det.feed(line, i * MS)
    assert out == []
    out += det.poll(len(crash_lines()) * MS + 400 * MS)  # the traceback is quiet: both, cause first
    assert [e.exception_type for e in out] == ["AttributeError", "server_fatal"]
    book = SignatureBook()
    events = [book.add(e, 0) for e in out]
    assert events[0] is not None and events[1] is not None
    assert events[0].new and not events[1].new and events[1].signature == events[0].signature
    assert book.failures == 1 and len(book.events()) == 1


# ------------------------------------------------------------------------------------ shapes of issue 16


def test_prefix_learned_from_the_traceback_header() -> None:
    pre = "2025-02-11 14:03:22.417 | ERROR    | 4121 | server.py:212 | "
    e = one(
        f"{pre}Traceback (most recent call last):\n"
        f'{pre}  File "/srv/app.py", line 9, in generate\n'
        f"{pre}    self.eval(tokens)\n"
        f'{pre.replace("417", "418")}  File "/x/llama.py", line 668, in eval\n'
        f"{pre}RuntimeError: llama_decode returned -3\n"
        "2025-02-11 14:03:23.001 | INFO     | 4121 | server.py:188 | POST /v1/chat 500\n"
    )
    assert (e.exception_type, e.message, e.innermost_frame) == (
        "RuntimeError", "llama_decode returned -3", "llama.py:668 in eval")


def test_sglang_message_before_the_header_is_not_taken_for_a_prefix() -> None:
    e = one(
        """
        [2025-01-20 19:10:07 TP0] Scheduler hit an exception: Traceback (most recent call last):
          File "/a/scheduler.py", line 1, in run
            x()
        ValueError: bad
        [2025-01-20 19:10:08] Received sigquit from a child process. It usually means the child failed.
        """.replace("Received", "Shutting down; received")
    )
    assert (e.exception_type, e.process, e.innermost_frame) == ("ValueError", "TP0", "scheduler.py:1 in run")


@pytest.mark.parametrize(
    ("glued", "kind", "message", "process"),
    [
        ("[2025-11-28 10:12:42 TP0] Decode batch. #running-req: 32, gen thr"
         "[2025-11-28 10:12:42] Received sigquit from a child process. It usually means the child failed.",
         "server_fatal", "Received sigquit from a child process.", None),
        ("Processed prompts:  37%|###7      | 37/100 [00:04<00:07]Fatal Python error: Aborted",
         "Fatal Python error", "Aborted", None),
        ("llama_decode: n_tokens = 512, slot 3...Segmentation fault (core dumped)", "SIGSEGV", "", None),
    ],
)
def test_marker_glued_after_another_processes_partial_line(glued: str, kind: str, message: str,
                                                           process: str | None) -> None:
    e = one(glued)
    assert (e.exception_type, e.process) == (kind, process) and e.message.startswith(message)


def test_glued_terminate_goes_to_its_own_rank() -> None:
    e = one(
        "[rank0]:[W1128 10:12:41.118702 ProcessGroupNCCL.cpp:1476] Warning: WorkNCCL timed ou"
        "[rank1]:terminate called after throwing an instance of 'c10::Error'\n"
        "[rank1]:  what():  CUDA error: an illegal memory access was encountered\n"
    )
    assert (e.exception_type, e.process) == ("c10::Error", "rank 1")


def test_words_of_a_message_are_not_glue() -> None:
    # 'Aborted' after a blank is part of the message, not a shell notice glued to it
    assert scan("INFO 01-01 00:00:00 [x.py:1] Request 17 Aborted\n") == []


def test_very_long_lines_are_examined_cut() -> None:
    det = CrashDetector()
    assert det.feed("x" * 5_000_000) == [] and det.cut_lines == 1


def test_a_held_consequence_does_not_leave_before_its_quiet_root_between_polls() -> None:
    # the parent's sigquit waits for TP0's open traceback; a line read after settle_ns but before the
    # next poll used to release the sigquit alone (it timed out), the traceback at the poll after it
    det = CrashDetector(settle_ns=300 * MS)
    for line in ["[2025-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
                 '  File "/s/kv.py", line 8, in connect', "RuntimeError: cannot reach the store", "",
                 "[2025-01-01 00:00:00] Received sigquit from a child process. It usually means the child failed."]:
        assert det.feed(line, 0) == []
    out = det.feed("[2025-01-01 00:00:00] Finish request: id=1 status=200", 310 * MS)
    assert [e.exception_type for e in out] == ["RuntimeError", "server_fatal"]
