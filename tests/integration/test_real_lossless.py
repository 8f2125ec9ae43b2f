"""Is llama-server's speculation lossless? The real server with the tiny model, at temperature 0, with
and without ``--spec-type ngram-mod``, each run with ``--check-outputs``, compared as ``report A B``.

What it found (and asserts, so that a change of specload or of the server shows): the answers are the
same token for token at C=1 and C=4 (the model runs in f32 on the CPU: no batch-dependent numerics),
and with ngram-mod the server streams no logprobs for the draft tokens it accepted, so those answers
are compared by text. Each level began with the slots' prompt caches erased (llama-server's reset,
which needs ``--slot-save-path``). Skipped with a reason when shared/real-server is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specload.record.runs import load_run
from specload.report.lossless import compare_outputs
from tests.integration.real_server_util import OwnServer, require_real_server, run_specload

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(480)]

N = 8


def test_llama_server_ngram_speculation_gives_the_same_answers(tmp_path: Path) -> None:
    require_real_server()
    slots = tmp_path / "slots"
    slots.mkdir()
    records = {}
    for name, extra in (("plain", ()), ("ngram", ("--spec-type", "ngram-mod"))):
        with OwnServer(tmp_path / f"{name}.log", "--slot-save-path", str(slots), *extra) as server:
            run = run_specload(server.url, "-c", "1,4", "-n", str(N), "--max-tokens", "48", "--check-outputs",
                               "--label", name, workdir=tmp_path, name=name, timeout=200)
        assert run.returncode == 0, run.describe()
        assert run.record is not None and run.record_path is not None
        (check,) = [e["value"] for e in run.record.events if e["kind"] == "check_outputs"]
        assert check["logprobs"] is True and check["reset"] == "llamacpp", check
        resets = [e["value"] for e in run.record.events if e["kind"] == "cache_reset"]
        assert [r["level_index"] for r in resets] == [0, 1] and all(r["error"] is None for r in resets), resets
        records[name] = load_run(str(run.record_path))

    plain, ngram = records["plain"], records["ngram"]
    assert plain.answers is not None and ngram.answers is not None
    assert all(a.complete and a.tokens is not None and len(a.tokens) == 48 for a in plain.answers)
    assert all(m is not None and m > 1.0 for a in plain.answers for m in a.margins or ())  # no near-ties here
    # the finding: accepted draft tokens come without logprobs
    assert sum(not a.complete for a in ngram.answers) >= N
    oc = compare_outputs(plain, ngram)
    assert oc is not None and oc.by != "token" and any("without logprobs" in n for n in oc.notes)
    assert [(lv.concurrency, lv.compared, lv.verdict) for lv in oc.levels] == [(1, N, "lossless"), (4, N, "lossless")]
    (floor,) = oc.noise
    assert (floor.concurrency, floor.compared, floor.identical) == (4, N, N)
