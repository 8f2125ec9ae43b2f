"""GpuWatch on what it runs: the nvidia-smi double first on PATH as a real child process (its modes:
[N/A] fields, dying, a GPU off the bus, no driver, no GPU), a missing nvidia-smi, ``cmd:`` with a header
and units, a DCGM exporter on 127.0.0.1 serving the fixtures (down and back, a GPU gone), and NVML
against the fake module (no GPU here)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
from aiohttp import web

from specload.datatypes import GpuFault, GpuSample
from specload.watch.gpu import GpuWatch
from tests import fake_nvidia_smi
from tests.fake_pynvml import NVML_ERROR_DRIVER_NOT_LOADED, FakeGpu, FakeNvml
from tests.waiting import pid_gone, until

DCGM = Path(__file__).parent.parent / "data" / "dcgm"


class Seen:
    def __init__(self) -> None:
        self.samples: list[GpuSample] = []
        self.faults: list[GpuFault] = []
        self.notices: list[str] = []

    def watch(self, kind: str, arg: str = "", interval_s: float = 0.05, **kw) -> GpuWatch:
        return GpuWatch(kind, arg, interval_s, on_sample=self.samples.append, on_fault=self.faults.append,
                        on_notice=self.notices.append, **kw)

    def kinds(self) -> list[tuple[str, int | None]]:
        return [(f.kind, f.gpu) for f in self.faults]


@pytest.fixture
def smi(tmp_path, monkeypatch):
    """The double first on PATH; returns a function setting its environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_nvidia_smi.install(bin_dir)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")

    def env(**values: str) -> None:
        for k, v in values.items():
            monkeypatch.setenv(f"FAKE_SMI_{k.upper()}", v)

    return env


@contextlib.asynccontextmanager
async def running(w: GpuWatch):
    task = asyncio.create_task(w.run())
    try:
        yield task
    finally:
        await w.stop()
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 10)


async def test_nvidia_smi_eight_gpus_in_the_order_asked(smi):
    smi(gpus="8")
    seen = Seen()
    w = seen.watch("nvidia-smi")
    async with running(w):
        await until(lambda: len(seen.samples) >= 16)
        pid = w.command.pid if w.command is not None else None
    assert pid is not None and pid_gone(pid)  # stopped with its process group
    first = {s.gpu: s for s in seen.samples[:8]}
    assert sorted(first) == list(range(8))
    s = first[3]  # loop 0 of the double: utilisation 30 %, memory 1300 MiB, 130 W
    assert (s.util_pct, s.mem_used_mib, s.mem_total_mib, s.power_w, s.sm_clock_mhz, s.temp_c, s.name, s.source) == (
        30, 1300, 81559, 130.0, 1980, 43, "NVIDIA H100 80GB HBM3", "nvidia-smi")
    assert seen.faults == [] and seen.notices == []
    # a later loop of GPU 0 (100 + k W at loop k): the watch keeps one sample per GPU per half interval
    # by the time it reads them, so a busy machine that reads loops 1 and 2 together keeps only one
    later = seen.samples[8]
    assert later.gpu == 0 and later.power_w is not None and later.power_w - 100 in range(1, 600)


async def test_nvidia_smi_unsupported_fields_said_once(smi):
    smi(mode="na")
    seen = Seen()
    async with running(seen.watch("nvidia-smi")):
        await until(lambda: len(seen.samples) >= 8)
    assert sorted(seen.kinds()) == [("unsupported", 0), ("unsupported", 1), ("unsupported", 1)]
    assert {s.power_w for s in seen.samples if s.gpu == 1} == {None}
    assert all(s.sm_clock_mhz is None and s.util_pct is not None for s in seen.samples)


async def test_nvidia_smi_dying_is_a_fault_and_restarted(smi):
    smi(mode="die", die_after="1")
    seen = Seen()
    w = seen.watch("nvidia-smi")
    async with running(w):
        await until(lambda: len(seen.samples) >= 4)  # a loop from each of two starts
        assert w.command is not None and w.command.starts >= 2
    assert seen.faults[0].kind == "exited"
    assert seen.faults[0].message.startswith("nvidia-smi exited with code 1, restarting in ")
    assert "Failed to query GPU: Unknown Error" in seen.notices[0]  # its last words, said once


async def test_a_gpu_off_the_bus_is_one_fault_and_the_others_go_on(smi):
    smi(mode="lost", gpus="3")
    seen = Seen()
    async with running(seen.watch("nvidia-smi")):
        await until(lambda: sum(s.gpu == 2 for s in seen.samples) >= 4)
    assert seen.kinds() == [("lost", None)]
    assert seen.faults[0].message == "Unable to determine the device handle for GPU 00000000:3B:00.0: Unknown Error"
    assert sum(s.gpu == 1 for s in seen.samples) == 1  # only its first loop


@pytest.mark.parametrize(("mode", "words"), [("nodriver", "NVIDIA-SMI has failed"), ("nogpu", "No devices were found")])
async def test_no_driver_or_no_gpu_ends_the_source_with_one_fault(smi, mode, words):
    smi(mode=mode)
    seen = Seen()
    w = seen.watch("nvidia-smi")
    await asyncio.wait_for(w.run(), 10)  # ends by itself: restarting cannot help
    assert seen.kinds() == [("missing", None)] and words in seen.faults[0].message
    assert w.command is not None and w.command.starts == 1


async def test_nvidia_smi_not_installed(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    seen = Seen()
    await asyncio.wait_for(seen.watch("nvidia-smi").run(), 5)
    assert [(f.kind, f.message) for f in seen.faults] == [("missing", "nvidia-smi not found on PATH")]


async def test_cmd_with_its_own_fields_header_and_units(smi):
    seen = Seen()
    cmd = "nvidia-smi --query-gpu=power.draw,index,memory.used --format=csv -lms 50"
    async with running(seen.watch("cmd", cmd)):
        await until(lambda: len(seen.samples) >= 4)
    assert [(s.gpu, s.power_w, s.mem_used_mib, s.source) for s in seen.samples[:2]] == [
        (0, 100.0, 1000, "cmd"), (1, 110.0, 1100, "cmd")]
    assert seen.faults == [] and seen.notices == []


async def test_cmd_not_found_is_missing_and_ends(smi):
    seen = Seen()
    await asyncio.wait_for(seen.watch("cmd", "no-such-gpu-tool --query-gpu=index -lms 50").run(), 10)
    assert seen.faults[-1].kind == "missing" and "code 127" in seen.faults[-1].message


async def test_dcgm_exporter_down_back_and_a_gpu_gone():
    text = {"body": (DCGM / "h100x8.txt").read_text(), "status": 200}

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=text["body"], status=text["status"])

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    seen = Seen()
    try:
        async with running(seen.watch("dcgm", f"http://127.0.0.1:{port}/metrics")):
            await until(lambda: len(seen.samples) >= 8)
            assert seen.samples[4].power_w == 441.5 and seen.samples[4].source == "dcgm"
            text["status"] = 503
            await until(lambda: seen.faults)
            assert seen.kinds() == [("unavailable", None)]
            assert seen.faults[0].message == "DCGM exporter unavailable (HTTP 503); still trying"
            text["status"] = 200
            text["body"] = "\n".join(ln for ln in text["body"].splitlines() if 'gpu="6"' not in ln)
            await until(lambda: len(seen.faults) >= 2)
    finally:
        await runner.cleanup()
    assert seen.notices == ["DCGM exporter answering again"]
    assert seen.kinds()[1] == ("lost", 6)


async def test_nvml_polls_at_the_interval_and_shuts_down():
    nvml = FakeNvml([FakeGpu(), FakeGpu(power_mw=300_000)])
    seen = Seen()
    async with running(seen.watch("nvml", nvml=nvml)):
        await until(lambda: len(seen.samples) >= 6)
        nvml.xids.append((1, 13))
        await until(lambda: seen.faults)
    assert [s.power_w for s in seen.samples[:2]] == [250.0, 300.0]
    assert seen.faults[0].kind == "xid" and seen.faults[0].gpu == 1
    assert nvml.shutdowns == 1


async def test_nvml_without_a_driver_is_missing_and_ends():
    seen = Seen()
    await asyncio.wait_for(seen.watch("nvml", nvml=FakeNvml([], init_error=NVML_ERROR_DRIVER_NOT_LOADED)).run(), 5)
    assert [(f.kind, f.message) for f in seen.faults] == [("missing", "NVML: Driver Not Loaded")]


async def test_real_pynvml_without_a_gpu_is_missing():
    """nvidia-ml-py installed on a machine without the NVIDIA library: a fault, not a traceback."""
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py (specload[gpu]) not installed")
    seen = Seen()
    await asyncio.wait_for(seen.watch("nvml", nvml=pynvml).run(), 10)
    if seen.samples:
        pytest.skip("this machine has an NVIDIA GPU: the fault path cannot be seen here")
    assert [f.kind for f in seen.faults] == ["missing"] and seen.faults[0].message.startswith("NVML: ")


async def test_a_command_printing_in_a_tight_loop_is_sampled_per_gpu(smi):
    seen = Seen()
    # the double at 1 ms per loop, read at a 0.2 s interval: at most one sample per GPU per 0.1 s
    w = seen.watch("cmd", "nvidia-smi --query-gpu=index,power.draw --format=csv,noheader,nounits -lms 1",
                   interval_s=0.2)
    async with running(w):
        await until(lambda: w.dropped >= 50 and len(seen.samples) >= 4)
    for gpu in (0, 1):
        t = [s.t_ns for s in seen.samples if s.gpu == gpu]
        assert all(b - a >= 100_000_000 for a, b in zip(t, t[1:], strict=False))
