"""The GPU sources' readers, without I/O: nvidia-smi CSV (the fields in the order asked, units, headers,
``[N/A]``), the DCGM exporter's text (fixtures in tests/data/dcgm), NVML against a fake module, and the
``--gpu-metrics`` values."""

from __future__ import annotations

from pathlib import Path

import pytest

from specload.datatypes import GpuFault, GpuSample
from specload.watch.gpu import (
    QUERY,
    NvmlReader,
    SmiReader,
    dcgm_read,
    parse_gpu_metrics,
    query_fields,
    resolve_auto,
    smi_command,
)
from tests.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeGpu, FakeNvml

DCGM = Path(__file__).parent.parent / "data" / "dcgm"


def samples(items) -> list[GpuSample]:
    return [i for i in items if isinstance(i, GpuSample)]


def faults(items) -> list[GpuFault]:
    return [i for i in items if isinstance(i, GpuFault)]


# ----------------------------------------------------------------------------------------- nvidia-smi


def test_smi_command_asks_the_fields_in_order_without_units_and_loops():
    cmd = smi_command(0.5)
    assert cmd == ("nvidia-smi --query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw,"
                   "clocks.sm,temperature.gpu,name --format=csv,noheader,nounits -lms 500")
    assert query_fields(cmd) == QUERY
    assert query_fields("ssh gpu1 nvidia-smi --query-gpu power.draw,index --format=csv -lms 500") == (
        "power.draw", "index")
    assert query_fields("ssh gpu1 my-script") is None


def test_smi_line_in_the_order_asked():
    r = SmiReader(QUERY, "nvidia-smi")
    (s,) = r.feed("3, 87, 70123, 81559, 612.45, 1980, 66, NVIDIA H100 80GB HBM3", 7)
    assert s == GpuSample(t_ns=7, gpu=3, source="nvidia-smi", util_pct=87, mem_used_mib=70123, mem_total_mib=81559,
                          power_w=612.45, sm_clock_mhz=1980, temp_c=66, name="NVIDIA H100 80GB HBM3")
    # another order, fields it does not use skipped, a name with a comma kept whole when it comes last
    r = SmiReader(("power.draw", "uuid", "index", "name"), "cmd")
    (s,) = r.feed("250.00, GPU-1234, 1, Tesla V100-SXM2, 16GB", 9)
    assert (s.gpu, s.power_w, s.name, s.util_pct) == (1, 250.0, "Tesla V100-SXM2, 16GB", None)


def test_smi_unsupported_fields_are_none_and_said_once_per_gpu_and_field():
    r = SmiReader(QUERY, "nvidia-smi")
    first = r.feed("0, 12, 100, 81559, [N/A], [Not Supported], 40, H100", 1)
    (s,) = samples(first)
    assert (s.power_w, s.sm_clock_mhz, s.util_pct) == (None, None, 12)
    assert [(f.kind, f.gpu, f.message) for f in faults(first)] == [
        ("unsupported", 0, "GPU 0: power.draw is [N/A]"), ("unsupported", 0, "GPU 0: clocks.sm is [Not Supported]")]
    again = r.feed("0, 13, 100, 81559, [N/A], [Not Supported], 40, H100", 2)
    assert faults(again) == [] and len(samples(again)) == 1
    other = r.feed("1, 13, 100, 81559, [N/A], 1980, 40, H100", 2)
    assert [f.message for f in faults(other)] == ["GPU 1: power.draw is [N/A]"]


def test_smi_header_and_units_give_the_fields():
    r = SmiReader(None, "cmd")
    assert r.feed("index, power.draw [W], memory.used [MiB], utilization.gpu [%], name", 1) == ()
    assert r.fields == ("index", "power.draw", "memory.used", "utilization.gpu", "name")
    (s,) = r.feed("0, 71.23 W, 1234 MiB, 45 %, NVIDIA A10G", 2)
    assert (s.gpu, s.power_w, s.mem_used_mib, s.util_pct, s.name) == (0, 71.23, 1234, 45, "NVIDIA A10G")


def test_smi_lost_gpu_xid_and_no_driver_lines():
    r = SmiReader(QUERY, "nvidia-smi")
    line = "Unable to determine the device handle for GPU 00000000:3B:00.0: Unknown Error"
    (f,) = r.feed(line, 5)
    assert (f.kind, f.message, f.gpu) == ("lost", line, None)
    assert r.feed(line, 6) == ()  # every loop prints it again: said once
    (f,) = r.feed("0, 1, 1, 1, [GPU is lost], 1, 1, H100", 6)[:1]
    assert (f.kind, f.gpu) == ("lost", 0)
    (x,) = r.feed("[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1873, name=python3, GPU has fallen off the bus.", 7)
    assert (x.kind, x.message) == ("lost", "XID 79 (GPU has fallen off the bus) on 0000:3b:00: pid=1873, "
                                           "name=python3, GPU has fallen off the bus.")
    (x,) = r.feed("NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, DBE (double bit error)", 8)
    assert (x.kind, x.message.split(" on ")[0]) == ("xid", "XID 48 (double-bit ECC error)")
    assert not r.hopeless
    (m,) = r.feed("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 9)
    assert m.kind == "missing" and r.hopeless


def test_smi_strange_lines_make_one_notice():
    r = SmiReader(QUERY, "cmd")
    (n,) = r.feed("Warning: Permanently added 'gpu1' (ED25519) to the list of known hosts.", 1)
    assert isinstance(n, str) and "not nvidia-smi CSV" in n
    assert r.feed("another odd line", 2) == ()
    assert r.feed("1, 2, 3", 3) == ()  # too few cells: not a sample, not said again


# --------------------------------------------------------------------------------------------- DCGM


def test_dcgm_fixture_eight_h100s():
    items, state = dcgm_read((DCGM / "h100x8.txt").read_text(), None, 11)
    ss = samples(items)
    assert [s.gpu for s in ss] == list(range(8)) and faults(items) == []
    s = ss[3]
    # total = used + free + reserved, as the exporter splits the framebuffer
    assert s == GpuSample(t_ns=11, gpu=3, source="dcgm", util_pct=93, mem_used_mib=73014,
                          mem_total_mib=73014 + 8015 + 530, power_w=434.25, sm_clock_mhz=1980, temp_c=44,
                          name="NVIDIA H100 80GB HBM3")
    assert state.gpus == frozenset(range(8))


def test_dcgm_blank_values_xid_and_gone_gpu():
    text = (DCGM / "a10g-k8s.txt").read_text()
    items, st = dcgm_read(text, None, 1)
    (s,) = samples(items)
    assert (s.temp_c, s.power_w, s.util_pct, s.name) == (None, 187.123, 97, "NVIDIA A10G")
    assert [f.message for f in faults(items)] == ["GPU 0: DCGM_FI_DEV_GPU_TEMP is blank (not supported)"]
    items, st = dcgm_read(text, st, 2)
    assert faults(items) == []  # said once
    xid = text.replace('pod="vllm-5d9f8c7b6-x2x4k"} 0', 'pod="vllm-5d9f8c7b6-x2x4k"} 43')
    assert xid != text
    items, st = dcgm_read(xid, st, 3)
    assert [(f.kind, f.gpu, f.message) for f in faults(items)] == [
        ("xid", 0, "XID 43 (GPU stopped processing) on GPU 0 (DCGM_FI_DEV_XID_ERRORS, the last XID)")]
    items, st = dcgm_read(xid, st, 4)
    assert faults(items) == []  # the same last XID is not a new one
    eight = (DCGM / "h100x8.txt").read_text()
    _, st8 = dcgm_read(eight, None, 1)
    without_5 = "\n".join(ln for ln in eight.splitlines() if 'gpu="5"' not in ln)
    items, _ = dcgm_read(without_5, st8, 2)
    assert [(f.kind, f.gpu) for f in faults(items)] == [("lost", 5)] and len(samples(items)) == 7
    with pytest.raises(ValueError):
        dcgm_read("<html>502 Bad Gateway</html>", None, 1)


# --------------------------------------------------------------------------------------------- NVML


def test_nvml_reads_units_and_names():
    nvml = FakeNvml([FakeGpu(), FakeGpu(power_mw=612_450, util=91, used_b=70 * 2**30)])
    r = NvmlReader(nvml)
    assert r.open(1) == () and nvml.registered == [0, 1]
    ss = r.poll(2)
    assert ss[1] == GpuSample(t_ns=2, gpu=1, source="nvml", util_pct=91, mem_used_mib=70 * 1024,
                              mem_total_mib=80 * 1024, power_w=612.45, sm_clock_mhz=1980, temp_c=55,
                              name="NVIDIA H100 80GB HBM3")
    r.close()
    assert nvml.shutdowns == 1


def test_nvml_faults_unsupported_lost_xid_and_no_library():
    nvml = FakeNvml([FakeGpu(unsupported={"power", "clock"}), FakeGpu(lost_after=1), FakeGpu(no_handle=True)])
    r = NvmlReader(nvml)
    (f,) = r.open(1)
    assert (f.kind, f.gpu, f.message) == ("lost", 2, "Unable to determine the device handle for GPU 2: Unknown Error")
    first = r.poll(2)
    assert [(f.kind, f.gpu) for f in faults(first)] == [("unsupported", 0), ("unsupported", 0)]
    assert [(s.gpu, s.power_w, s.sm_clock_mhz) for s in samples(first)] == [(0, None, None), (1, 250.0, 1980)]
    nvml.xids.append((0, 79))
    second = r.poll(3)
    assert [(f.kind, f.gpu, f.message) for f in faults(second)] == [
        ("lost", 0, "XID 79 (GPU has fallen off the bus) on GPU 0"), ("lost", 1, "GPU 1: GPU is lost")]
    assert [s.gpu for s in samples(second)] == [0]
    assert [s.gpu for s in samples(r.poll(4))] == [0] and faults(r.poll(5)) == []  # said once; GPU 1 not read
    (m,) = NvmlReader(FakeNvml([], init_error=NVML_ERROR_LIBRARY_NOT_FOUND)).open(1)
    assert (m.kind, m.message) == ("missing", "NVML: NVML Shared Library Not Found")
    (m,) = NvmlReader(FakeNvml([])).open(1)
    assert (m.kind, m.message) == ("missing", "NVML: no GPU")


# ------------------------------------------------------------------------------------------ the option


@pytest.mark.parametrize(("value", "parsed"), [
    ("auto", ("auto", "")), ("off", ("off", "")), ("nvml", ("nvml", "")), ("nvidia-smi", ("nvidia-smi", "")),
    ("dcgm:http://127.0.0.1:9400/metrics", ("dcgm", "http://127.0.0.1:9400/metrics")),
    ("cmd:ssh gpu1 nvidia-smi --query-gpu=index,power.draw --format=csv -lms 500",
     ("cmd", "ssh gpu1 nvidia-smi --query-gpu=index,power.draw --format=csv -lms 500")),
])
def test_gpu_metrics_values(value, parsed):
    assert parse_gpu_metrics(value) == parsed


@pytest.mark.parametrize(("value", "why"), [
    ("nvidia", "expected auto, nvidia-smi"), ("dcgm:127.0.0.1:9400", r"needs an http\(s\) URL"),
    ("cmd:", "needs a command"), ("cmd:ssh 'gpu1", "No closing quotation"),
])
def test_gpu_metrics_bad_values(value, why):
    with pytest.raises(ValueError, match=why):
        parse_gpu_metrics(value)


def test_auto_prefers_nvml_then_nvidia_smi_and_only_for_a_local_server():
    smi = {"nvidia-smi": "/usr/bin/nvidia-smi"}.get
    assert resolve_auto(True, FakeNvml([FakeGpu()]), smi) == ("nvml", "")
    assert resolve_auto(True, FakeNvml([], init_error=NVML_ERROR_LIBRARY_NOT_FOUND), smi) == ("nvidia-smi", "")
    assert resolve_auto(True, None, smi) == ("nvidia-smi", "")
    kind, why = resolve_auto(True, None, lambda _name: None)
    assert kind == "off" and "neither NVML" in why
    kind, why = resolve_auto(False, FakeNvml([FakeGpu()]), smi)
    assert kind == "off" and "not on this machine" in why


def test_which_servers_are_on_this_machine():
    from specload.watch.gpu import is_local

    assert all(is_local(u) for u in ("http://127.0.0.1:8000", "http://localhost:30000", "http://[::1]:8080"))
    assert not any(is_local(u) for u in ("http://gpu-node-7:8000", "https://api.example.com", "http://[2001:db8::1]"))
