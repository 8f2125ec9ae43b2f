"""Helpers for the tests and benchmark that drive specload against llama.cpp's real ``llama-server``.

They own everything a test needs around a real server, so the tests read as checks only:

- where the prebuilt server and tiny model are (``shared/real-server``, overridable with
  ``SPECLOAD_SHARED``) and a clear skip reason when they are missing;
- free loopback ports (bind 127.0.0.1:0, read the port, close);
- the llama-server command line from ``shared/real-server/REPORT.md``;
- ``OwnServer``: a llama-server started by the test itself (for the cases where the test must
  signal it, read its whole log or scrape ``/metrics`` before and after specload's run); it is
  always killed (SIGTERM, then SIGKILL) when the ``with`` block ends;
- ``run_specload`` / ``SpecloadProcess``: ``python -m specload.cli run ...`` as a subprocess with a
  timeout, killed with its process group, and any server it launched, in a ``finally``;
- ``wait_until``: poll a condition with a deadline (no sleep-and-hope).

Nothing here talks to any address other than 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specload.record.reader import RecordData, read_record
from tests import processes
from tests.integration.conftest import free_port
from tests.waiting import wait_until

SERVED_NAME = "tiny"
_STARTED_PID = re.compile(r"started server \(pid (\d+)\)")
_METRIC_LINE = re.compile(r"^(llamacpp:[A-Za-z_]+)(\{[^}]*\})?\s+(\S+)$")


def shared_dir() -> Path:
    """``$SPECLOAD_SHARED`` or the ``shared`` folder beside the repository's parent."""
    env = os.environ.get("SPECLOAD_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared"


def real_server_dir() -> Path:
    return shared_dir() / "real-server"


def server_binary() -> Path:
    return real_server_dir() / "llama-server"


def server_model() -> Path:
    return real_server_dir() / "tiny-llama-f32.gguf"


def missing_reason() -> str | None:
    """Why the real server cannot run here, or None when it can."""
    binary, model = server_binary(), server_model()
    if not binary.is_file():
        return f"llama-server not found at {binary} (set SPECLOAD_SHARED to the shared/ folder)"
    if not os.access(binary, os.X_OK):
        return f"{binary} is not executable"
    if not model.is_file():
        return f"tiny model not found at {model}"
    return None


def require_real_server() -> None:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)


def llama_args(port: int, *extra: str, ctx: int = 32768, slots: int = 8, threads: int = 1) -> list[str]:
    """The REPORT.md command line; ``extra`` e.g. ``("--spec-type", "ngram-mod")``."""
    return [
        str(server_binary()), "-m", str(server_model()), "-a", SERVED_NAME,
        "--host", "127.0.0.1", "--port", str(port), "-c", str(ctx), "-np", str(slots), "-t", str(threads),
        "--metrics", "--slots", "--log-timestamps", "--log-prefix", *extra,
    ]  # fmt: skip


def llama_cmd(port: int, *extra: str, ctx: int = 32768, slots: int = 8, threads: int = 1) -> str:
    """The same as one shell string, for specload's ``--launch``."""
    return shlex.join(llama_args(port, *extra, ctx=ctx, slots=slots, threads=threads))


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    """(status, body) of a GET; status 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


def parse_llamacpp_metrics(text: str) -> dict[str, float]:
    """``llamacpp:*`` samples summed over label sets: name -> value."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _METRIC_LINE.match(line.strip())
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


class OwnServer:
    """A llama-server the test starts itself, logging to ``log_path``; killed on exit."""

    def __init__(self, log_path: Path, *extra: str, ctx: int = 32768, ready_timeout: float = 30.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.args = llama_args(self.port, *extra, ctx=ctx)
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = None

    def __enter__(self) -> OwnServer:
        self._log = open(self.log_path, "wb")  # closed in __exit__
        self.proc = processes.popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(self._healthy, self.ready_timeout, f"llama-server /health on {self.url}")
        except BaseException:
            self.__exit__()
            raise
        return self

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail(f"llama-server exited with {self.proc.returncode}: {self.log_tail()}")
        return http_get(self.url + "/health", timeout=1.0)[0] == 200

    def __exit__(self, *exc: object) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            # SIGTERM can hang with streams open (REPORT.md), so SIGKILL follows quickly.
            proc.terminate()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def metrics(self) -> dict[str, float]:
        status, text = http_get(self.url + "/metrics")
        assert status == 200, f"/metrics answered {status}"
        return parse_llamacpp_metrics(text)

    def log_text(self) -> str:
        return self.log_path.read_text("utf-8", "replace")

    def log_tail(self, n: int = 8) -> str:
        try:
            return " | ".join(self.log_text().splitlines()[-n:])
        except OSError:
            return "(no log)"


def specload_argv(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "specload.cli", "run", url, *args]


@dataclass
class SpecloadRun:
    returncode: int
    stdout: str
    stderr: str
    record_path: Path | None
    elapsed_s: float
    summary: dict | None = None
    record: RecordData | None = None
    launched_pids: list[int] = field(default_factory=list)

    def describe(self) -> str:
        return f"exit {self.returncode} after {self.elapsed_s:.1f} s; stderr:\n{self.stderr[-3000:]}"


class SpecloadProcess:
    """``specload run`` as a running subprocess; ``finish()`` waits for it, ``kill()`` ends it all.

    Its stdout/stderr go to files beside the record (a pipe nobody reads could block it). Any
    server it launched (its stderr says ``started server (pid N)``) is killed with its process
    group by ``kill()``, in case specload itself could not stop it.
    """

    def __init__(
        self, url: str, args: list[str], workdir: Path, record: Path | None, name: str = "specload"
    ) -> None:
        self.argv = specload_argv(url, *args)
        self.record_path = record
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        self._out = open(self.out_path, "wb")  # noqa: SIM115 - closed in kill()/finish()
        self._err = open(self.err_path, "wb")  # noqa: SIM115
        self.t0 = time.monotonic()
        self.proc = processes.popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=self._err,
            cwd=str(workdir),
        )

    def stderr(self) -> str:
        try:
            return self.err_path.read_text("utf-8", "replace")
        except OSError:
            return ""

    def launched_pids(self) -> list[int]:
        return [int(p) for p in _STARTED_PID.findall(self.stderr())]

    def kill(self) -> None:
        if self.proc.poll() is None:
            processes.kill_group(self.proc.pid)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for pid in self.launched_pids():
            processes.kill_group(pid)
        for f in (self._out, self._err):
            if not f.closed:
                f.close()

    def finish(self, timeout: float) -> SpecloadRun:
        try:
            try:
                rc = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                pytest.fail(
                    f"specload did not finish within {timeout:g} s: {self.argv}\n{self.stderr()[-3000:]}"
                )
        finally:
            self.kill()  # idempotent: also reaps a launched server specload failed to stop
        run = SpecloadRun(
            returncode=rc,
            stdout=self.out_path.read_text("utf-8", "replace"),
            stderr=self.err_path.read_text("utf-8", "replace"),
            record_path=self.record_path,
            elapsed_s=time.monotonic() - self.t0,
            launched_pids=self.launched_pids(),
        )
        if "--json" in self.argv and run.stdout.strip():
            try:
                run.summary = json.loads(run.stdout)
            except json.JSONDecodeError:
                run.summary = None
        if self.record_path is not None and self.record_path.exists():
            run.record = read_record(str(self.record_path))
        return run


def run_specload(
    url: str, *args: str, workdir: Path, timeout: float = 60.0, record: bool = True, name: str = "specload"
) -> SpecloadRun:
    """Run ``specload run URL ARGS --json [--record FILE]`` to its end (bounded by ``timeout``)."""
    rec = workdir / f"{name}.jsonl" if record else None
    argv = list(args) + ["--json"]
    if rec is not None:
        argv += ["--record", str(rec)]
    return SpecloadProcess(url, argv, workdir, rec, name=name).finish(timeout)


def record_requests(run: SpecloadRun) -> list[dict]:
    assert run.record is not None, f"no record was written; {run.describe()}"
    return [r for r in run.record.requests if not r["warmup"]]
