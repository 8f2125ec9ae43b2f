"""A stand-in for the ``pynvml`` module (nvidia-ml-py), for the NVML source where no GPU can run.

Only the calls ``specload.watch.gpu.NvmlReader`` makes, with pynvml's names, units (mW, bytes) and
error codes (values copied from nvidia-ml-py's ``NVML_ERROR_*``), and its habit of raising
``NVMLError(code)`` for every failure, ``NVML_ERROR_TIMEOUT`` included. ``FakeNvml(...)`` is the module:
pass it where the source takes ``nvml=``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
_TEXT = {3: "Not Supported", 9: "Driver Not Loaded", 10: "Timeout", 12: "NVML Shared Library Not Found",
         15: "GPU is lost", 999: "Unknown Error"}


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _TEXT.get(self.value, f"NVML Error with code {self.value}")


@dataclass
class FakeGpu:
    power_mw: int = 250_000
    util: int = 50
    used_b: int = 40 * 2**30
    total_b: int = 80 * 2**30
    sm_mhz: int = 1980
    temp_c: int = 55
    name: bytes = b"NVIDIA H100 80GB HBM3"
    unsupported: set[str] = field(default_factory=set)  # getters raising NOT_SUPPORTED
    lost_after: int | None = None  # polls after which every getter raises GPU_IS_LOST
    no_handle: bool = False  # nvmlDeviceGetHandleByIndex fails with UNKNOWN (fell off the bus at start)
    reads: int = 0


class FakeNvml:
    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_UNKNOWN = NVML_ERROR_UNKNOWN
    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, gpus: list[FakeGpu], *, init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.xids: list[tuple[int, int]] = []  # (gpu index, xid) waiting in the event set
        self.initialised = 0
        self.shutdowns = 0
        self.registered: list[int] = []

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        if self.gpus[i].no_handle:
            raise NVMLError(NVML_ERROR_UNKNOWN)
        return i

    def nvmlDeviceGetIndex(self, h: int) -> int:
        return h

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.gpus[h].name

    def _read(self, h: int, what: str, value: object) -> object:
        g = self.gpus[h]
        if g.lost_after is not None and g.reads > g.lost_after:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if what in g.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        self.gpus[h].reads += 1  # the first getter of a poll counts the polls
        return self._read(h, "util", SimpleNamespace(gpu=self.gpus[h].util, memory=10))  # type: ignore[return-value]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        g = self.gpus[h]
        return self._read(h, "mem", SimpleNamespace(used=g.used_b, total=g.total_b,  # type: ignore[return-value]
                                                    free=g.total_b - g.used_b))

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._read(h, "power", self.gpus[h].power_mw)  # type: ignore[return-value]

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        assert clock == self.NVML_CLOCK_SM
        return self._read(h, "clock", self.gpus[h].sm_mhz)  # type: ignore[return-value]

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._read(h, "temp", self.gpus[h].temp_c)  # type: ignore[return-value]

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, types: int, event_set: str) -> None:
        assert types == self.nvmlEventTypeXidCriticalError and event_set == "event-set"
        self.registered.append(h)

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> SimpleNamespace:
        if not self.xids:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        gpu, xid = self.xids.pop(0)
        return SimpleNamespace(device=gpu, eventType=self.nvmlEventTypeXidCriticalError, eventData=xid)

    def nvmlEventSetFree(self, event_set: str) -> None:
        pass
