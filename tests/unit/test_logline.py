"""Line cleaning and prefix splitting (specload.watch.logline)."""

from __future__ import annotations

import pytest

from specload.watch.logline import clean_line, line_time_ns, parse_line, parse_logfmt, split_line


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("\x1b[1;36mhello\x1b[0m world", "hello world"),
        # ESC of the opening code lost in a paste, the reset still has it (fixture 015)
        ("[1;36m(VllmWorker rank=3 pid=229)\x1b[0;0m ERROR x", "(VllmWorker rank=3 pid=229) ERROR x"),
        ("\x1b]0;title\x07text", "text"),
        ("\x1b(Btext", "text"),
        ("Traceback (most recent call last):\r\n", "Traceback (most recent call last):"),
        ("progress 10%\rprogress 100%", "progress 100%"),
        ("line with literal CR^M", "line with literal CR"),
        ("GPU \x01 has a total capacity", "GPU  has a total capacity"),
        ("tab\tkept", "tab\tkept"),
        ("trailing spaces   ", "trailing spaces"),
    ],
)
def test_clean_line(raw: str, clean: str) -> None:
    assert clean_line(raw) == clean


@pytest.mark.parametrize(
    ("raw", "tag", "body"),
    [
        # SGLang: every rank part kept
        ("[2025-01-01 12:00:00 DP0 TP0] Scheduler hit an exception:", "DP0 TP0", "Scheduler hit an exception:"),
        ("[2026-05-20 08:02:44 PP0 ATTN_CP7 TP7] Prefill batch", "PP0 ATTN_CP7 TP7", "Prefill batch"),
        ("[2025-01-20 19:10:07] Received sigquit", None, "Received sigquit"),
        # vLLM process prefixes
        ("(VllmWorker rank=3 pid=229) ERROR 06-12 01:21:13 [multiproc_executor.py:527] boom", "rank 3", "boom"),
        ("(Worker_TP3 pid=562) ERROR 09-15 13:50:35 [multiproc_executor.py:672] boom", "TP3", "boom"),
        ("(EngineCore_DP0 pid=1482) ERROR 09-15 13:50:35 [core.py:1] boom", "EngineCore_DP0", "boom"),
        ("(APIServer pid=1179246) INFO 09-15 13:50:35 [api_server.py:1] up", "APIServer", "up"),
        # Ray actors are kept as printed, without the parentheses
        ("(RayWorkerWrapper pid=690, ip=10.0.7.2) Fatal Python error: Aborted", "RayWorkerWrapper pid=690, ip=10.0.7.2", "Fatal Python error: Aborted"),
        ("(RayWorkerWrapper pid=1018) [rank0]:[E812 07:37:56.951960649 ProcessGroupNCCL.cpp:1899] x", "RayWorkerWrapper pid=1018", "x"),
        # torch rank prefix, glog inside
        ("[rank0]:[E611 01:51:09.940883637 ProcessGroupNCCL.cpp:1896] [PG ID 2] watchdog", "rank 0", "[PG ID 2] watchdog"),
        ("[rank1]:   File \"/a.py\", line 8, in <module>", "rank 1", "  File \"/a.py\", line 8, in <module>"),
        # TGI tracing: levels, nested targets and the rank=N span field at the end
        ("2024-06-17T13:18:29.406790Z ERROR text_generation_launcher: Shard 1 failed to start", None, "Shard 1 failed to start"),
        ("2024-06-17T13:18:24.066369Z  INFO shard-manager: text_generation_launcher: Waiting... rank=1", "rank 1", "Waiting..."),
        # journald around logfmt
        ("Sep 11 18:19:47 computer ollama[67030]: time=2024-09-11T18:19:47.855-06:00 level=ERROR source=sched.go:456 msg=\"x\"", None, "msg=\"x\""),
        ("pr 28 14:53:22 AI-DEV-VM ollama[2268027]: llm_load_print_meta: n_ctx = 4", None, "llm_load_print_meta: n_ctx = 4"),
        # aggregator export: indentation of the original line survives
        ("1779264164797\t2026-05-20T08:02:44.797Z\t  File \"/x.py\", line 3, in f", None, "  File \"/x.py\", line 3, in f"),
        # docker --timestamps in front of a raw line
        ("2024-06-17T13:18:14.058514Z Traceback (most recent call last):", None, "Traceback (most recent call last):"),
        # other record prefixes
        ("INFO 06-21 21:40:02 llm_engine.py:59] Initializing", None, "Initializing"),
        ("ERROR 07-30 17:42:47 [core.py:634]   File \"/x.py\", line 1, in f", None, "  File \"/x.py\", line 1, in f"),
        ("2025-08-12 07:36:07,572 INFO worker.py:1747 -- Connecting", None, "Connecting"),
        ("2023-11-01 10:20:21,882 <PID:111> INFO totally input 7 tokens", None, "totally input 7 tokens"),
        ("[svc][2026-03-10 14:48:25][requests.py:312][ERROR]: Task exception was never retrieved", None, "Task exception was never retrieved"),
        ("[2026-02-26 04:55:25] INFO core.py:501: import x", None, "import x"),
        ("INFO:     10.0.0.1:1 - \"GET / HTTP/1.1\" 200 OK", None, "10.0.0.1:1 - \"GET / HTTP/1.1\" 200 OK"),
        ("[TensorRT-LLM][ERROR] Encountered an error", None, "Encountered an error"),
        ("(RayWorkerWrapper pid=690, ip=10.0.7.2) For debugging [repeated 2x across cluster] (Ray dedup...)", "RayWorkerWrapper pid=690, ip=10.0.7.2", "For debugging"),
        # no prefix at all
        ("terminate called after throwing an instance of 'c10::Error'", None, "terminate called after throwing an instance of 'c10::Error'"),
    ],
)  # fmt: skip
def test_split_line(raw: str, tag: str | None, body: str) -> None:
    assert split_line(raw) == (tag, body)


def test_levels_are_normalised() -> None:
    assert parse_line("WARNING 03-18 09:00:11 [x.py:1] careful").level == "WARNING"
    assert parse_line("[rank0]:[W611 01:51:09.1 TCPStore.cpp:125] x").level == "WARNING"
    assert parse_line("time=2025 level=WARN source=a.go:1 msg=x").level == "WARNING"
    assert parse_line("2024-01-01T00:00:00Z ERROR launcher: x").level == "ERROR"
    assert parse_line("just text").level is None


def test_raw_lines_are_not_records_and_prefix_tags_are_inheritable() -> None:
    raw = parse_line('  File "/a.py", line 1, in f')
    assert not raw.record and raw.tag is None
    # a transport prefix does not make a line a record
    assert not parse_line("Sep 11 18:19:47 host proc[1]: what():  boom").record
    tagged = parse_line("[rank2]: Traceback (most recent call last):")
    assert tagged.record and tagged.tag_inherits and tagged.tag == "rank 2"
    # a TGI rank=N suffix names the process of that line only
    suffix = parse_line("2024-06-17T13:18:24Z INFO launcher: Waiting rank=1")
    assert suffix.tag == "rank 1" and not suffix.tag_inherits


def test_logfmt_fields() -> None:
    fields = parse_logfmt('time=t level=ERROR msg="error loading" error="runner: \\"x\\" died" code=2')
    assert fields == {
        "time": "t",
        "level": "ERROR",
        "msg": "error loading",
        "error": 'runner: "x" died',
        "code": "2",
    }
    line = parse_line('time=2025-04-28T09:12:21Z level=DEBUG source=a.go:1 msg="hi" id=2')
    assert line.fields is not None and line.fields["msg"] == "hi"
    assert line.body == 'msg="hi" id=2'


# ------------------------------------------------------------------------------------ prefixes from unseen logs


def test_cri_kubelet_prefix() -> None:
    p = parse_line(
        "2025-01-15T10:02:40.702113902Z stdout F ERROR 01-15 10:02:40 [core.py:387] EngineCore hit an exception:"
    )
    assert (p.body, p.level, p.record) == ("EngineCore hit an exception:", "ERROR", True)


def test_cloudwatch_tab_and_octal_escaped_colours() -> None:
    p = parse_line(
        "2024-04-18T18:51:13.144-04:00\t#033[2m2024-04-18T22:51:13.201214Z#033[0m #033[31mERROR#033[0m "
        "#033[2mtext_generation_launcher#033[0m#033[2m:#033[0m Webserver Crashed"
    )
    assert (p.body, p.level) == ("Webserver Crashed", "ERROR")


def test_mpirun_tag_output_and_trtllm_python_logger() -> None:
    assert split_line("[1,1]<stderr>:  what():  boom") == ("rank 1", " what():  boom")
    p = parse_line("[06/24/2025-08:12:13] [TRT-LLM] [RANK 0] [E] Encountered an error in forward function: x")
    assert (p.tag, p.level, p.body) == ("rank 0", "ERROR", "Encountered an error in forward function: x")


def test_sglang_timestamp_without_year_and_glog_with_path() -> None:
    assert split_line("[12-16 14:27:08 TP0] Rank 0 scheduler is dead.") == (
        "TP0",
        "Rank 0 scheduler is dead.",
    )
    p = parse_line(
        "E0429 08:12:49.202000 139770 torch/distributed/elastic/multiprocessing/api.py:869] failed"
    )
    assert (p.body, p.level) == ("failed", "ERROR")


def test_vllm_v0_worker_process_keeps_its_pid_and_raylet_does_not_carry_over() -> None:
    assert split_line("(VllmWorkerProcess pid=656) ERROR x")[0] == "VllmWorkerProcess pid=656"
    p = parse_line("(raylet) A worker died or was killed while executing a task.")
    assert (p.tag, p.tag_inherits) == ("raylet", False)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        # copied from less (no -R): ESC shown as the text 'ESC', CRLF endings as '^M'
        ("ESC[2m2024-06-17T13:18:26.673888ZESC[0m ESC[31mERRORESC[0m x: Webserver Crashed^M",
         "2024-06-17T13:18:26.673888Z ERROR x: Webserver Crashed"),
        # cat -v / vim: '^[' for ESC
        ("^[[31mRuntimeError: boom^[[0m^M^M", "RuntimeError: boom"),
        # a progress bar's redraws copied with their printed CRs: the last one is what a terminal showed
        ("Loading 10%^MLoading 55%^MLoading 100%", "Loading 100%"),
        ("RuntimeError: boom\u240d", "RuntimeError: boom"),
        # printed and real CRs at the end in any mix, blanks between: all of it is the line's ending
        ("RuntimeError: boom\r^M", "RuntimeError: boom"),
        ("RuntimeError: boom^M ^M", "RuntimeError: boom"),
        ("RuntimeError: boom^M \r", "RuntimeError: boom"),
        ("Loading 10%\rLoading 100% \r", "Loading 100%"),
        # a caret that is not a CR stays
        ("x ^ y", "x ^ y"),
    ],
)
def test_pager_printed_control_characters(raw: str, clean: str) -> None:
    assert clean_line(raw) == clean


def test_compose_prefix_without_replica_number() -> None:
    assert split_line("eap-llm-server  | (EngineCore_DP0 pid=313) ERROR 11-08 11:01:30 [core.py:710] x") == (
        "EngineCore_DP0", "x")
    # a single blank before the bar is not taken for a compose prefix
    assert split_line("a | b")[1] == "a | b"


@pytest.mark.parametrize(
    ("line", "seconds"),
    [
        ("(APIServer pid=1) INFO 05-12 14:03:07 [api_server.py:1] up", 0),
        ("[2025-05-12 14:03:09 TP0] Decode batch.", 2),
        ("2025-05-12T14:03:08.5Z ERROR text_generation_launcher: x", 1.5),
        ("[rank0]:[E512 14:13:07.614221507 ProcessGroupNCCL.cpp:632] watchdog", 600.614221507),
        ("May 12 14:03:10 host vllm[12]: x", 3),
        ("[05/12/2025-14:03:11] [TRT-LLM] [E] x", 4),
        ("RuntimeError: no prefix at 2025-05-12 15:00:00", None),
    ],
)
def test_the_time_a_line_prefix_gives(line: str, seconds: float | None) -> None:
    # one clock for every prefix format, to space the lines of one log (year and zone not read)
    base = line_time_ns("INFO 05-12 14:03:07 [x.py:1] ", 30)
    p = parse_line(line)
    t = line_time_ns(p.text, len(p.text) - len(p.body))
    assert (None if t is None or base is None else (t - base) / 1e9) == seconds
