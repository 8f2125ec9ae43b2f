"""The server's GPUs beside the load: one ``GpuSample`` per GPU per interval, and ``GpuFault``s.

``--gpu-metrics`` picks the source (``parse_gpu_metrics``):

- ``nvidia-smi``: ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits -lms N`` as a child
  process, one CSV line per GPU per loop (``SmiReader``);
- ``cmd:'COMMAND'``: the same CSV from a command of the user's (``ssh HOST nvidia-smi ...``), run and
  restarted like ``--server-log-cmd``; its fields are its own ``--query-gpu=`` list or CSV header;
- ``nvml``: NVML through ``nvidia-ml-py``, polled in a thread (``NvmlReader``), with XID events;
- ``dcgm:URL``: a DCGM exporter's Prometheus text, scraped by ``watch/metrics.py`` (``dcgm_read``);
- ``auto``: NVML, else nvidia-smi, when the server runs on this machine; else off, said once.

Every failure is data: a missing nvidia-smi or NVML, a reader that dies (restarted with a backoff),
a field the GPU does not report (once per GPU and field), an XID error, a GPU fallen off the bus
becomes a ``GpuFault`` and the run goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import math
import re
import shlex
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from specload.clock import SYSTEM_CLOCK, Clock
from specload.datatypes import GpuFault, GpuSample
from specload.watch.command import CommandSource, ProcessExit

SampleFn = Callable[[GpuSample], None]
FaultFn = Callable[[GpuFault], None]
Item = GpuSample | GpuFault | str  # what a reader makes of its input: a sample, a fault, a notice

# nvidia-smi --query-gpu fields (as `nvidia-smi --help-query-gpu` names them) -> GpuSample fields.
# power.draw is a one-second average on Ampere and newer, the instantaneous draw before.
SMI_FIELDS = {
    "index": "gpu", "name": "name", "gpu_name": "name", "utilization.gpu": "util_pct",
    "memory.used": "mem_used_mib", "memory.total": "mem_total_mib", "power.draw": "power_w",
    "power.draw.average": "power_w", "power.draw.instant": "power_w", "clocks.sm": "sm_clock_mhz",
    "clocks.current.sm": "sm_clock_mhz", "temperature.gpu": "temp_c",
}
# asked in this order; the name last, so that a name with a comma in it cannot shift the numbers
QUERY = ("index", "utilization.gpu", "memory.used", "memory.total", "power.draw", "clocks.sm", "temperature.gpu",
         "name")

# What some XIDs mean (NVIDIA's XID catalogue), for the fault's message; 79 is a GPU off the bus.
XID_MEANINGS = {
    13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
    45: "preemptive cleanup", 48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt", 63: "ECC page retirement or row remapping",
    64: "ECC page retirement or row remapping failure", 74: "NVLink error", 79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate", 94: "contained ECC error", 95: "uncontained ECC error",
    119: "GSP RPC timeout", 120: "GSP error",
}
XID_LOST = 79

# A line that is not CSV goes through the crash markers (watch/markers.py: an XID, a GPU off the bus);
# nvidia-smi's own words for no driver or no GPU are these.
_MISSING_RE = re.compile(r"NVIDIA-SMI has failed|No devices were found|couldn't communicate with the NVIDIA driver")
_QUERY_RE = re.compile(r"--query-gpu[= ]([\w.,]+)")
_DCGM_SERIES_RE = re.compile(r"^DCGM_FI_DEV_", re.MULTILINE)


def xid_fault(t_ns: int, xid: int, gpu: int | None, where: str) -> GpuFault:
    meaning = XID_MEANINGS.get(xid)
    return GpuFault(t_ns, "lost" if xid == XID_LOST else "xid",
                    f"XID {xid}{f' ({meaning})' if meaning else ''} {where}", gpu)


def smi_command(interval_s: float) -> str:
    return (f"nvidia-smi --query-gpu={','.join(QUERY)} --format=csv,noheader,nounits "
            f"-lms {max(1, round(interval_s * 1000))}")


def query_fields(cmd: str) -> tuple[str, ...] | None:
    """The fields a command asks nvidia-smi for, in order; None when it does not say."""
    m = _QUERY_RE.search(cmd)
    return tuple(f.strip() for f in m.group(1).split(",") if f.strip()) if m else None


def _number(cell: str) -> float | None:
    head = cell.split(" ", 1)[0]  # "45 %", "250.12 W" without nounits
    try:
        v = float(head)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


class _SaysOnce:
    """A reader that says each fault or notice once: ``_once`` passes an item the first time its key comes."""

    _said: set[tuple]

    def _once(self, key: tuple, item: Item) -> tuple[Item, ...]:
        if key in self._said:
            return ()
        self._said.add(key)
        return (item,)


class SmiReader(_SaysOnce):
    """nvidia-smi's CSV, a line at a time, into samples, faults and notices (pure: no I/O)."""

    def __init__(self, fields: Iterable[str] | None, source: str) -> None:
        self.fields: tuple[str, ...] | None = tuple(fields) if fields is not None else None
        self.source = source
        self.hopeless = False  # no driver or no GPU: restarting the command will not help
        self._said: set[tuple] = set()
        self._strange = 0

    def feed(self, line: str, t_ns: int) -> tuple[Item, ...]:
        line = line.strip()
        if not line:
            return ()
        cells = [c.strip() for c in line.split(",")]
        names = [c.split(" [", 1)[0] for c in cells]  # a header: "utilization.gpu [%]"
        if names[0] in SMI_FIELDS or names[0] in ("timestamp", "uuid", "pci.bus_id"):
            self.fields = tuple(names)
            return ()
        fields = self.fields
        if fields is not None and len(cells) >= len(fields) > 0:
            if len(cells) > len(fields) and fields[-1] in ("name", "gpu_name"):
                cells = cells[: len(fields) - 1] + [", ".join(cells[len(fields) - 1:])]
            if len(cells) == len(fields):
                sample = self._sample(fields, cells, t_ns)
                if sample is not None:
                    return sample
        return self._other(line, t_ns)

    def _sample(self, fields: tuple[str, ...], cells: list[str], t_ns: int) -> tuple[Item, ...] | None:
        values: dict[str, Any] = {}
        unread: list[tuple[str, str]] = []
        for name, cell in zip(fields, cells, strict=True):
            role = SMI_FIELDS.get(name)
            if role is None:
                continue
            if role == "name":
                values["name"] = cell
            elif cell.startswith("[") and cell.endswith("]"):
                unread.append((name, cell[1:-1]))
            else:
                v = _number(cell)
                if v is None:
                    return None  # not a CSV line of ours after all
                values[role] = v
        if "gpu" not in values:
            return None
        gpu = int(values.pop("gpu"))
        out: list[Item] = []
        for name, why in unread:
            if why == "GPU is lost":
                out += self._once(("lost", gpu), GpuFault(t_ns, "lost", f"GPU {gpu}: {name} [GPU is lost]", gpu))
            else:
                out += self._once(("unsupported", gpu, name),
                                  GpuFault(t_ns, "unsupported", f"GPU {gpu}: {name} is [{why}]", gpu))
        out.append(GpuSample(t_ns=t_ns, gpu=gpu, source=self.source, **values))
        return tuple(out)

    def _other(self, line: str, t_ns: int) -> tuple[Item, ...]:
        from specload.watch.detector import scan_text

        for e in scan_text(line):
            where = (e.process or "").removeprefix("GPU ")
            if e.exception_type.startswith("Xid "):
                xid = int(e.exception_type[4:])
                return (xid_fault(t_ns, xid, None, f"on {where}" + (f": {e.message}" if e.message else "")),)
            if e.exception_type == "GPU lost":
                return self._once(("lost", where), GpuFault(t_ns, "lost", line))
        if _MISSING_RE.search(line):
            self.hopeless = True
            return self._once(("missing", line), GpuFault(t_ns, "missing", line))
        self._strange += 1
        if self._strange == 1:
            return (f"GPU metrics: a line that is not nvidia-smi CSV of the fields asked: {line[:200]}",)
        return ()


# ----------------------------------------------------------------------------------------- DCGM exporter

# DCGM exporter names -> GpuSample fields (MiB, W, MHz, C, %: the exporter's units)
DCGM_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": "util_pct", "DCGM_FI_DEV_FB_USED": "mem_used_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w", "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
}
_DCGM_OTHER = ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_XID_ERRORS")
# DCGM reports a value it has not got as a "blank": int64 values from 0x7ffffffffffffff0, doubles from 2**47
_DCGM_BLANK = 2.0**47


@dataclass(frozen=True, slots=True)
class DcgmState:
    gpus: frozenset[int] = frozenset()
    xids: dict[int, int] = field(default_factory=dict)  # the last XID each GPU showed
    said: frozenset[tuple] = frozenset()  # (gpu, field) already said to be blank


def dcgm_read(text: str, state: DcgmState | None, t_ns: int) -> tuple[tuple[Item, ...], DcgmState]:
    """One scrape of a DCGM exporter -> (samples and faults, state for the next scrape). Raises ValueError
    when the text is not Prometheus text, as ``samples_from_metrics`` does."""
    from prometheus_client.parser import text_string_to_metric_families

    state = state or DcgmState()
    wanted = tuple(DCGM_FIELDS) + _DCGM_OTHER
    lines = [ln for ln in text.splitlines() if ln.startswith(wanted)]
    per_gpu: dict[int, dict[str, Any]] = {}
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for s in family.samples:
            try:
                gpu = int(s.labels.get("gpu", ""))
            except ValueError:
                continue
            g = per_gpu.setdefault(gpu, {})
            if "modelName" in s.labels:
                g["name"] = s.labels["modelName"]
            g[s.name] = float(s.value)
    if not lines:
        raise ValueError("no DCGM_FI_DEV series")
    out: list[Item] = []
    said = set(state.said)
    xids = dict(state.xids)
    for gpu in sorted(per_gpu):
        g = per_gpu[gpu]
        values: dict[str, Any] = {}
        for name, v in g.items():
            if name == "name":
                continue
            if math.isnan(v) or v >= _DCGM_BLANK:
                if (gpu, name) not in said:
                    said.add((gpu, name))
                    out.append(GpuFault(t_ns, "unsupported", f"GPU {gpu}: {name} is blank (not supported)", gpu))
                continue
            values[name] = v
        sample = {role: values[n] for n, role in DCGM_FIELDS.items() if n in values}
        if "DCGM_FI_DEV_FB_TOTAL" in values:
            sample["mem_total_mib"] = values["DCGM_FI_DEV_FB_TOTAL"]
        elif "DCGM_FI_DEV_FB_USED" in values and "DCGM_FI_DEV_FB_FREE" in values:
            sample["mem_total_mib"] = (values["DCGM_FI_DEV_FB_USED"] + values["DCGM_FI_DEV_FB_FREE"]
                                       + values.get("DCGM_FI_DEV_FB_RESERVED", 0.0))
        xid = int(values.get("DCGM_FI_DEV_XID_ERRORS", 0))
        if xid and xid != xids.get(gpu, 0):
            out.append(xid_fault(t_ns, xid, gpu, f"on GPU {gpu} (DCGM_FI_DEV_XID_ERRORS, the last XID)"))
        xids[gpu] = xid
        out.append(GpuSample(t_ns=t_ns, gpu=gpu, source="dcgm", name=g.get("name"), **sample))
    for gpu in sorted(state.gpus - per_gpu.keys()):
        out.append(GpuFault(t_ns, "lost", f"GPU {gpu} is gone from the DCGM exporter's metrics", gpu))
    return tuple(out), DcgmState(gpus=state.gpus | per_gpu.keys(), xids=xids, said=frozenset(said))


# ------------------------------------------------------------------------------------------------- NVML


class NvmlReader(_SaysOnce):
    """NVML through a module with pynvml's API (the real one, or a test's fake), called synchronously:
    ``GpuWatch`` runs ``open`` and ``poll`` in a thread."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.handles: list[Any] = []
        self._events: Any = None
        self._lost: set[int] = set()
        self._said: set[tuple] = set()
        self._names: dict[int, str | None] = {}

    def _error(self, e: Exception) -> int:
        return getattr(e, "value", -1)

    def open(self, t_ns: int) -> tuple[Item, ...]:
        """Initialise NVML; a fault of kind ``missing`` when it cannot read any GPU."""
        n = self.nvml
        try:
            n.nvmlInit()
            count = n.nvmlDeviceGetCount()
        except n.NVMLError as e:
            return (GpuFault(t_ns, "missing", f"NVML: {e}"),)
        if not count:
            return (GpuFault(t_ns, "missing", "NVML: no GPU"),)
        out: list[Item] = []
        with contextlib.suppress(n.NVMLError):
            self._events = n.nvmlEventSetCreate()
        for i in range(count):
            try:
                h = n.nvmlDeviceGetHandleByIndex(i)
            except n.NVMLError as e:
                self.handles.append(None)
                self._lost.add(i)
                out.append(GpuFault(t_ns, "lost", f"Unable to determine the device handle for GPU {i}: {e}", i))
                continue
            self.handles.append(h)
            try:
                name = n.nvmlDeviceGetName(h)
                self._names[i] = name.decode() if isinstance(name, bytes) else name
            except n.NVMLError:
                self._names[i] = None
            if self._events is not None:
                try:
                    n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, self._events)
                except n.NVMLError as e:
                    out += self._once(("xid-events", i), f"GPU {i}: XID errors not watched ({e})")
        return tuple(out)

    def poll(self, t_ns: int) -> tuple[Item, ...]:
        n = self.nvml
        out: list[Item] = list(self._xids(t_ns))
        for i, h in enumerate(self.handles):
            if i in self._lost:
                continue
            values: dict[str, float] = {}
            for role, read in (
                ("util_pct", lambda h: n.nvmlDeviceGetUtilizationRates(h).gpu),
                ("mem", lambda h: n.nvmlDeviceGetMemoryInfo(h)),  # bytes
                ("power_w", lambda h: n.nvmlDeviceGetPowerUsage(h) / 1000),  # mW
                ("sm_clock_mhz", lambda h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                ("temp_c", lambda h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
            ):
                try:
                    v = read(h)
                except n.NVMLError as e:
                    if self._error(e) in (n.NVML_ERROR_GPU_IS_LOST, n.NVML_ERROR_UNKNOWN):
                        self._lost.add(i)
                        out.append(GpuFault(t_ns, "lost", f"GPU {i}: {e}", i))
                        break
                    out += self._once(("unsupported", i, role),
                                      GpuFault(t_ns, "unsupported", f"GPU {i}: {role} {e}", i))
                    continue
                if role == "mem":
                    values["mem_used_mib"], values["mem_total_mib"] = v.used / 2**20, v.total / 2**20
                else:
                    values[role] = float(v)
            if i not in self._lost:
                out.append(GpuSample(t_ns=t_ns, gpu=i, source="nvml", name=self._names.get(i), **values))
        return tuple(out)

    def _xids(self, t_ns: int) -> Iterable[Item]:
        n = self.nvml
        for _ in range(64):  # what arrived since the last poll; bounded
            if self._events is None:
                return
            try:
                ev = n.nvmlEventSetWait(self._events, 0)
            except n.NVMLError:  # NVML_ERROR_TIMEOUT: nothing waiting (or the set broke: same answer)
                return
            try:
                gpu: int | None = n.nvmlDeviceGetIndex(ev.device)
            except n.NVMLError:
                gpu = None
            yield xid_fault(t_ns, int(ev.eventData), gpu, f"on GPU {gpu}" if gpu is not None else "")

    def close(self) -> None:
        n = self.nvml
        with contextlib.suppress(n.NVMLError):
            if self._events is not None:
                n.nvmlEventSetFree(self._events)
            n.nvmlShutdown()


def load_nvml() -> Any:
    """pynvml (``nvidia-ml-py``), or None when it is not installed."""
    try:
        return importlib.import_module("pynvml")
    except ImportError:
        return None


# ----------------------------------------------------------------------------------------- the option


def parse_gpu_metrics(value: str) -> tuple[str, str]:
    """``--gpu-metrics``'s value -> (kind, argument); ValueError with a one-line reason."""
    v = value.strip()
    if v in ("auto", "nvidia-smi", "nvml", "off"):
        return v, ""
    kind, sep, arg = v.partition(":")
    if sep and kind == "dcgm":
        if not arg.startswith(("http://", "https://")):
            raise ValueError(f"dcgm:URL needs an http(s) URL, got {arg!r}")
        return kind, arg
    if sep and kind == "cmd":
        if not arg.strip():
            raise ValueError("cmd:'COMMAND' needs a command")
        try:
            shlex.split(arg)
        except ValueError as e:
            raise ValueError(f"cmd: {e}") from None
        return kind, arg
    raise ValueError(f"{value!r}: expected auto, nvidia-smi, nvml, dcgm:URL, cmd:'COMMAND' or off")


def describe(kind: str, arg: str) -> str:
    """The source in a few words for a notice (a command's secrets masked by the notice's scrubber)."""
    return {"dcgm": f"the DCGM exporter at {arg}", "cmd": f"the command {arg!r}"}.get(kind, kind)


async def has_dcgm_series(url: str, timeout: float = 3.0) -> bool:
    """Whether ``url`` answers Prometheus text with a DCGM exporter's GPU series (the built-in
    simulator's ``--gpus``, or a server behind a proxy that merges the exporter in)."""
    from specload.watch.metrics import probe_metrics

    return await probe_metrics(url, timeout, lambda text: _DCGM_SERIES_RE.search(text) is not None)


def is_local(url: str) -> bool:
    """Whether the server at ``url`` runs on this machine (loopback, or this host's own name)."""
    import ipaddress
    import socket
    from urllib.parse import urlparse

    host = urlparse(url).hostname or ""
    if host in ("localhost", socket.gethostname()):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_auto(server_local: bool, nvml: Any = None, which: Callable[[str], str | None] = shutil.which
                 ) -> tuple[str, str]:
    """``auto`` -> (kind, why): NVML, else nvidia-smi, when the server is on this machine; else off, with
    the reason to say once."""
    if not server_local:
        return "off", ("GPU metrics off: the server is not on this machine (--gpu-metrics dcgm:URL or "
                       "cmd:'ssh HOST nvidia-smi ...' reads its GPUs)")
    if nvml is not None:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlInit()
            nvml.nvmlShutdown()
            return "nvml", ""
    if which("nvidia-smi"):
        return "nvidia-smi", ""
    return "off", "GPU metrics off: neither NVML (pip install specload[gpu]) nor nvidia-smi found"


# ---------------------------------------------------------------------------------------------- the watch


class GpuWatch:
    """Runs one source until stopped; what it reads leaves through ``on_sample``, ``on_fault`` and
    ``on_notice``. ``run()`` never raises for anything the GPUs, the driver or a command do.

    Samples are taken at most every half interval per GPU, as the server's stats lines are sampled at
    the scrape interval: a ``cmd:`` printing in a tight loop must not write a record line per line
    (half, not a whole interval: a reader's own loop at the interval jitters, and must lose nothing).
    """

    def __init__(self, kind: str, arg: str = "", interval_s: float = 1.0, *, clock: Clock = SYSTEM_CLOCK,
                 on_sample: SampleFn, on_fault: FaultFn, on_notice: Callable[[str], None],
                 nvml: Any = None, which: Callable[[str], str | None] = shutil.which) -> None:
        self.kind, self.arg, self.interval_s, self.clock = kind, arg, interval_s, clock
        self._on_sample, self._on_fault, self._on_notice = on_sample, on_fault, on_notice
        self._nvml, self._which = nvml, which
        self._stop = asyncio.Event()
        self.command: CommandSource | None = None  # the tool run as a process (its pid, its starts)
        self._scraper: Any = None
        self._min_gap_ns = int(interval_s * 1e9 / 2)
        self._next_ns: dict[int, int] = {}  # per GPU: the next sample taken
        self.samples = 0
        self.dropped = 0  # samples closer together than the half interval

    def emit(self, items: Iterable[Item]) -> None:
        for it in items:
            if isinstance(it, GpuSample):
                if it.t_ns < self._next_ns.get(it.gpu, it.t_ns):
                    self.dropped += 1
                    continue
                self._next_ns[it.gpu] = it.t_ns + self._min_gap_ns
                self.samples += 1
                self._on_sample(it)
            elif isinstance(it, GpuFault):
                self._on_fault(it)
            else:
                self._on_notice(it)

    def _fault(self, kind: str, message: str) -> None:
        self._on_fault(GpuFault(self.clock.now_ns(), kind, message))

    async def run(self) -> None:
        if self.kind in ("nvidia-smi", "cmd"):
            await self._run_command()
        elif self.kind == "nvml":
            await self._run_nvml()
        elif self.kind == "dcgm":
            await self._run_dcgm()

    async def stop(self) -> None:
        self._stop.set()
        if self.command is not None:
            await self.command.stop()
        if self._scraper is not None:
            await self._scraper.stop()

    async def _run_command(self) -> None:
        fields: tuple[str, ...] | None
        if self.kind == "nvidia-smi":
            if not self._which("nvidia-smi"):
                self._fault("missing", "nvidia-smi not found on PATH")
                return
            cmd, fields, what = smi_command(self.interval_s), QUERY, "nvidia-smi"
        else:
            cmd, fields, what = self.arg, query_fields(self.arg), "GPU command"
        reader = SmiReader(fields, self.kind)

        def exited(ex: ProcessExit) -> bool:
            if ex.returncode == 127:
                self._fault("missing", f"{what} {ex.description} (command not found)")
                return False
            return not reader.hopeless and not self._stop.is_set()

        self.command = CommandSource(cmd, what=what, on_exit=exited, on_notice=lambda t: self._fault("exited", t))
        async for line in self.command.lines():
            self.emit(reader.feed(line, self.clock.now_ns()))

    async def _run_nvml(self) -> None:
        nvml = self._nvml if self._nvml is not None else load_nvml()
        if nvml is None:
            self._fault("missing", "NVML: nvidia-ml-py is not installed (pip install specload[gpu])")
            return
        reader = NvmlReader(nvml)
        opened = await asyncio.to_thread(reader.open, self.clock.now_ns())
        self.emit(opened)
        if any(isinstance(i, GpuFault) and i.kind == "missing" for i in opened):
            return
        loop = asyncio.get_running_loop()
        try:
            while not self._stop.is_set():
                t0 = loop.time()
                self.emit(await asyncio.to_thread(reader.poll, self.clock.now_ns()))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), max(0.0, self.interval_s - (loop.time() - t0)))
        finally:
            await asyncio.to_thread(reader.close)

    async def _run_dcgm(self) -> None:
        from specload.watch.metrics import MetricsScraper

        self._scraper = MetricsScraper(
            self.arg, self.interval_s, clock=self.clock, read=dcgm_read, name="DCGM exporter",
            on_sample=self.emit, on_notice=self._on_notice, on_down=lambda t: self._fault("unavailable", t))
        await self._scraper.run()


# ------------------------------------------------------------------------------------- a one-off reading

MEMORY_QUERY = ("index", "memory.used", "memory.total")


async def memory_used(source: str = "auto", *, nvml: Any = None, which: Callable[[str], str | None] = shutil.which,
                      timeout_s: float = 10.0) -> dict[int, tuple[float, float | None]] | None:
    """Each GPU's memory in use now and its total (MiB), read once, for checks between runs (a sweep
    waits for a stopped server's memory to be given back before it starts the next). None where no GPU
    can be read here: no NVML or nvidia-smi, no GPU, a source of another machine (dcgm:, cmd:) or off."""
    kind, _ = parse_gpu_metrics(source)
    if kind == "auto":
        kind, _ = resolve_auto(True, nvml if nvml is not None else load_nvml(), which)
    items: tuple[Item, ...] = ()
    if kind == "nvml":
        module = nvml if nvml is not None else load_nvml()
        if module is None:
            return None
        reader = NvmlReader(module)

        def once() -> tuple[Item, ...]:
            try:
                return reader.open(0) + reader.poll(0)
            finally:
                reader.close()

        items = await asyncio.to_thread(once)
    elif kind == "nvidia-smi" and which("nvidia-smi"):
        cmd = f"nvidia-smi --query-gpu={','.join(MEMORY_QUERY)} --format=csv,noheader,nounits"
        try:
            proc = await asyncio.create_subprocess_exec(*shlex.split(cmd), stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.DEVNULL)
            out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except (OSError, TimeoutError):
            return None
        smi = SmiReader(MEMORY_QUERY, "nvidia-smi")
        items = tuple(it for line in out.decode(errors="replace").splitlines() for it in smi.feed(line, 0))
    found = {s.gpu: (s.mem_used_mib, s.mem_total_mib) for s in items
             if isinstance(s, GpuSample) and s.mem_used_mib is not None}
    return found or None
