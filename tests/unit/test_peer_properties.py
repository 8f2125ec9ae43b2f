"""Other tools' result files with any field of any type: ``specload report`` reads them or refuses them
in one line that names the file and the field (exit 2), never a traceback, in the plain table,
``--json`` and ``--html`` alike.

The files are the real ones in ../shared/fixtures/peer-results (vLLM 0.32's, both sets) and SGLang
lines built from its documented fields (``test_peers.sglang_line``), cut to a few requests so each
example is quick; hypothesis then puts hostile values in their fields and in their arrays' elements
(the cases once reported: a flat ``itls``, ``output_lens`` with nulls, ``ttfts`` as strings, integers
of 2**64).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specload.report import peers
from specload.report.report import report_command
from tests.unit.test_peers import PEERS, needs_fixtures, sglang_line

pytestmark = needs_fixtures

ARRAYS = ("ttfts", "itls", "latencies", "output_lens", "input_lens", "start_times", "errors", "generated_texts",
          "queue_times")


def _cut(d: dict, k: int) -> dict:
    return {key: v[:k] if key in ARRAYS and isinstance(v, list) else v for key, v in d.items()}


def _sources() -> list[tuple[str, dict]]:
    if PEERS is None:
        return []
    files = sorted(PEERS.parent.glob("*/vllm*.json"))
    out = [("vllm", json.loads(f.read_text())) for f in files if "metrics" not in f.name]
    sg = sglang_line(PEERS / "specload-spec-ngram-c4.jsonl", 4, fail=True)
    # the failed request last: keep it among the first few
    out.append(("sglang", {k: (v[-3:] if k in ARRAYS and isinstance(v, list) else v) for k, v in sg.items()}))
    return out


SOURCES = _sources()
HOSTILE = st.sampled_from([
    None, True, "12", "inf", "", 2**64, -(2**64), 10**12, -1, -0.5, 0, 1.5, 1e5, 1e12, 1e300, math.nan, math.inf, -math.inf,
    [], [None], [1.5], [[1.5]], ["x"], {"a": 1},
])


@st.composite
def hostile_file(draw: st.DrawFn) -> tuple[str, dict, list[str]]:
    kind, d = draw(st.sampled_from(SOURCES))
    d = _cut(d, draw(st.integers(0, 4)))
    if draw(st.integers(0, 5)) == 0:  # a file saved without its per-request arrays: the summary only
        d = {k: v for k, v in d.items() if k not in ARRAYS}
    keys = sorted(d)
    changed = []
    for _ in range(draw(st.integers(1, 3))):
        if not keys:
            break
        arrays = [k for k in keys if k in ARRAYS]
        key = draw(st.sampled_from(arrays if arrays and draw(st.booleans()) else keys))
        v = d[key]
        if isinstance(v, list) and v and draw(st.booleans()):
            # one element of an array, or one gap of a request's chunk gaps
            i = draw(st.integers(0, len(v) - 1))
            v = list(v)
            if isinstance(v[i], list) and v[i] and draw(st.booleans()):
                v[i] = list(v[i])
                v[i][draw(st.integers(0, len(v[i]) - 1))] = draw(HOSTILE)
            else:
                v[i] = draw(HOSTILE)
            d[key] = v
        elif key == "itls" and isinstance(v, list) and draw(st.booleans()):
            d[key] = [g for gaps in v for g in gaps][: len(v)]  # flat: one list of all the gaps
        elif draw(st.integers(0, 4)) == 0:
            del d[key]
            keys.remove(key)
        else:
            d[key] = draw(HOSTILE)
        changed.append(key)
    return kind, d, changed


def _report(args: list[str]) -> tuple[int, str]:
    r = CliRunner().invoke(report_command, args)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.output


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=hostile_file())
def test_any_field_of_any_type_is_read_or_refused_in_one_line(tmp_path: Path, case: tuple[str, dict, list[str]]
                                                               ) -> None:
    kind, d, changed = case
    path = tmp_path / ("peer.jsonl" if kind == "sglang" else "peer.json")
    path.write_text(json.dumps(d) + "\n")
    for extra in ([], ["--json"], ["--html", str(tmp_path / "p.html")]):
        code, out = _report([str(path), *extra])  # a traceback fails here
        if code == 2:
            (line,) = out.strip().splitlines()
            prefix = f"specload report: {path}"
            assert line.startswith(prefix)
            why = re.sub(r"^(:\d+)?:? ", "", line[len(prefix):])
            # it names a field that was changed, or says why the file as a whole is refused
            assert re.split(r"[ \[]", why, maxsplit=1)[0] in changed or why.startswith((
                "per-request arrays of different lengths", "is not a specload record")) or "requests counted" in why, line
            continue
        assert code == 0, out
        if extra == ["--json"]:
            for lv in json.loads(out)["levels"]:  # counts that add up, whatever the summary says
                errors = lv["errors"].values()
                assert 0 <= lv["ok"] <= lv["requests"] and sum(errors) == lv["requests"] - lv["ok"], lv
                assert all(n > 0 for n in errors), lv
        elif extra:
            assert (tmp_path / "p.html").stat().st_size > 0


@needs_fixtures
def test_each_real_file_is_read(tmp_path: Path) -> None:
    for kind, d in SOURCES:
        path = tmp_path / ("peer.jsonl" if kind == "sglang" else "peer.json")
        path.write_text(json.dumps(d) + "\n")
        assert peers.field_problem(json.loads(path.read_text()), peers._SGLANG_FIELDS if kind == "sglang"
                                   else peers._VLLM_FIELDS) is None
        path.write_text(json.dumps(_cut(d, 8)) + "\n")
        assert _report([str(path), "--json"])[0] == 0


def _flat(d: dict) -> dict:
    return {"itls": [g for gaps in d["itls"] for g in gaps][: len(d["itls"])]}


@pytest.mark.parametrize(("change", "message"), [
    (_flat, r"itls\[0\] = [0-9.e-]+ is not a list"),
    (lambda d: {"output_lens": [None] * 3}, r"output_lens\[0\] = None is not a token count"),
    (lambda d: {"ttfts": ["0.1", "0.2", "0.3"]}, r"ttfts\[0\] = '0.1' is not a number of seconds"),
    (lambda d: {"total_output_tokens": 2**64}, r"total_output_tokens = 18446744073709551616 is not a count"),
    # found by the property: a time of 1e12 s once asked for 687 GiB (the level's 100 ms buckets)
    (lambda d: {"ttfts": [1e12, *d["ttfts"][1:]]}, r"ttfts make its requests span 1e\+12 s, more than one .*"),
    (lambda d: {"start_times": [1e12, *d["start_times"][1:]]}, r"start_times make its requests span .*"),
])
def test_the_reported_cases(tmp_path: Path, change, message: str) -> None:
    d = _cut(json.loads((PEERS.parent / "vllm-0.32-cpu-2" / "vllm_r1_c4.json").read_text()), 3)
    d.update(change(d))
    path = tmp_path / "v.json"
    path.write_text(json.dumps(d))
    for extra in ([], ["--json"], ["--html", str(tmp_path / "v.html")]):
        code, out = _report([str(path), *extra])
        assert code == 2 and re.fullmatch(f"specload report: {re.escape(str(path))}: {message}\n", out), out
