"""Shared fixtures. ``sim``: start simulated LLM servers on 127.0.0.1 port 0, stopped at teardown.

    async def test_x(sim):
        server = await sim(ttft_ms=50, itl_ms=10, spec_tokens=0)
        url = server.url  # http://127.0.0.1:PORT

Keyword arguments are ``SimConfig`` fields. Unless the test passes ``log_file`` or ``quiet``, the
server is quiet (no log lines in the captured output) and seeded (``seed=0``) for reproducibility.

``make_config`` and ``make_client`` (import them from ``tests.conftest``) are the one way tests build
a run's configuration and a streaming client. Every test runs without ``OPENAI_API_KEY`` and with an
empty config directory, so a developer's own key or theme files never reach a session or a snapshot.
Every process a test starts through ``tests.processes`` is killed with its process group when the
test ends; bounded waits are in ``tests.waiting``; what integration tests share is in
``tests/integration/conftest.py``.
Every test runs in a directory of its own (the repository on ``PYTHONPATH`` for the subprocesses that
import ``tests``): a run records to ``specload-DATE-TIME.jsonl`` in the current directory by default,
and that must never be the repository.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from specload.config import RequestConfig, RunConfig, TargetConfig
from specload.engine.api import CHAT
from specload.engine.client import StreamingClient
from specload.session.listener import SessionListener, forwarding_listener
from specload.sim.config import SimConfig
from specload.sim.server import SimServer
from tests import processes
from tests.hostile import HostileServer

# Property tests draw the same examples on every run (derandomized): a run must not pass or fail by
# the luck of the draw. Profiles, chosen with SPECLOAD_HYPOTHESIS=NAME or --hypothesis-profile NAME:
# "unit" (the default) draws 10 examples a test, so the unit tier, where they all are, stays at a
# few seconds; "ci" draws 100 (CI sets it: more cases on every landing, at a few seconds of the
# suite's minutes); "explore" draws 1000 new ones each run (and keeps what fails in .hypothesis/),
# which is how new cases are found; each found case becomes a test of its own. No per-example
# deadline in any: on a busy machine an example's time says nothing (a hang still ends at the
# suite's per-test timeout). Tests set no example counts of their own, so the profile decides.
hypothesis_settings.register_profile("unit", derandomize=True, database=None, max_examples=10, deadline=None)
hypothesis_settings.register_profile("ci", hypothesis_settings.get_profile("unit"), max_examples=100)
hypothesis_settings.register_profile("explore", max_examples=1000, deadline=None)
hypothesis_settings.load_profile(os.environ.get("SPECLOAD_HYPOTHESIS") or "unit")

SimFactory = Callable[..., Awaitable[SimServer]]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def _empty_config_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # one per pytest process (each xdist worker has its own), read-only: specload only reads its config
    # directory (themes), and a test that writes one sets XDG_CONFIG_HOME to its own tmp_path. (A
    # directory per test cost the unit tier seconds: each mktemp lists every directory made before it.)
    d = tmp_path_factory.mktemp("xdg")
    d.chmod(0o555)
    yield d
    d.chmod(0o755)


@pytest.fixture(scope="session")
def _working_dirs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cwd")


@pytest.fixture(autouse=True)
def _isolated_environment(_empty_config_dir: Path, _working_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a developer's key would be sent (and must be masked) in every session test; theme files in
    # ~/.config/specload/themes would change snapshots and notices
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(_empty_config_dir))
    # pytest-xdist's workers have COLUMNS=80, which tables now honour: a test that wants a width sets it
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    # a working directory of its own (a headless run records there by default); made with mkdtemp, as
    # mktemp's numbering reads every directory made before
    monkeypatch.chdir(tempfile.mkdtemp(dir=_working_dirs))


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    # first set up, so last torn down: the test's fixtures stop their processes gently, then every
    # group the test started (through tests.processes) is killed, after a failure or a timeout too
    started = processes.mark()
    yield
    processes.kill_since(started)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # the tests that run the real llama-server share one worker: two such servers at once on a
    # 2-core machine starve each other (and every other test) past their timeouts
    for item in items:
        if item.get_closest_marker("real_server") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("real_server"))


def pytest_sessionfinish() -> None:
    processes.kill_since(0)  # what a module- or session-scoped fixture left


@pytest.hookimpl(trylast=True)
def pytest_unconfigure() -> None:
    # pytest's last step collects garbage five times over the whole heap, so that an exception raised
    # in a finalizer is still reported; one collection here finds that garbage, and what survives it
    # is frozen, so the five walk only what came after (they took half a second of the unit tier)
    gc.collect()
    gc.freeze()


@pytest.fixture
async def sim() -> AsyncIterator[SimFactory]:
    servers: list[SimServer] = []

    async def start(**options: object) -> SimServer:
        if "log_file" not in options:
            options.setdefault("quiet", True)
        options.setdefault("seed", 0)
        options.setdefault("host", "127.0.0.1")
        options.setdefault("port", 0)
        server = SimServer(SimConfig(**options))  # type: ignore[arg-type]
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()


@pytest.fixture
async def hostile() -> AsyncIterator[Callable[[], Awaitable[HostileServer]]]:
    """Start hostile servers (``tests/hostile.py``) on 127.0.0.1 port 0, stopped at teardown."""
    servers: list[HostileServer] = []

    async def start() -> HostileServer:
        server = await HostileServer().start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()


# ------------------------------------------------------------------ configs and clients


# What a test run wants unless it says otherwise (each is the CLI's default otherwise): no API
# discovery (its probe requests would count on the server and cost a round trip), exact output
# lengths, short answers, and a bound on the whole run so a test that goes wrong ends.
TEST_DEFAULTS: dict[str, object] = {"api": "chat", "ignore_eos": True, "max_tokens": 16, "max_duration_s": 60}


def make_config(url: str | None = None, **fields: object) -> RunConfig:
    """The one way tests build a ``RunConfig``: field values by name, whatever section they are in
    (``make_config(url, concurrency=(2,), requests_per_level=4, path=rec)``), checked by the
    dataclasses as any config is. ``TEST_DEFAULTS`` first (``api="auto"`` to probe, ``max_duration_s=None``
    to lift the bound, as a virtual-time run may), then the defaults ``specload run`` has."""
    return RunConfig.of(url, **{**TEST_DEFAULTS, **fields})


def make_client(url: str, flavour: str = CHAT, *, model: str | None = None, **kw: object) -> StreamingClient:
    """A ``StreamingClient`` with target and request fields by name (``stall_timeout_s=5``,
    ``max_tokens=20``); the client's own arguments (``headers``, ``clock``, ``on_tokens``,
    ``scrubber``) pass through."""
    target = kw.pop("target", None) or TargetConfig(**{k: kw.pop(k) for k in list(kw) if k in _TARGET_FIELDS})
    request = kw.pop("request", None) or RequestConfig(**{k: kw.pop(k) for k in list(kw) if k in _REQUEST_FIELDS})
    return StreamingClient(url, flavour, model=model, target=target, request=request, **kw)  # type: ignore[arg-type]


def unchecked(cls: type, **fields: object) -> object:
    """A config dataclass with values its checks would refuse, to test what the engine does with
    input that got past them (a request body that cannot be written as JSON)."""
    obj = object.__new__(cls)
    for f in dataclasses.fields(cls):
        object.__setattr__(obj, f.name, fields.get(f.name, f.default))
    return obj


_TARGET_FIELDS = {f.name for f in dataclasses.fields(TargetConfig)} - {"headers"}  # the client's own argument
_REQUEST_FIELDS = {f.name for f in dataclasses.fields(RequestConfig)}


class Heard:
    """Every call a session makes to its listener (``Session(cfg, listener=heard.listener)``), kept as
    ``(method name, argument)`` (several arguments as a tuple) for tests to look through:
    ``heard.of("notice")``. The listener is ``forwarding_listener``'s: the methods are the
    ``SessionListener`` protocol's, so a call the protocol lacks is an AttributeError, not a record."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.listener: SessionListener = forwarding_listener(
            lambda name, args: self.calls.append((name, args[0] if len(args) == 1 else args)))

    def of(self, kind: str) -> list[object]:
        return [p for k, p in self.calls if k == kind]
