"""The built-in prompt set's text, written for specload: ``prompts.jsonl`` (category, user turns)
names the shared passages of ``passages.jsonl`` by ``{{id}}``. Read here, at the bottom of the layers,
because the load (engine/datasets.py) sends it and the simulator, standing in for a real model whose
draft acceptance follows the text, recognises it."""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

import orjson

DATA_DIR = Path(__file__).resolve().parent
_REF = re.compile(r"\{\{([a-z0-9-]+)\}\}")


@functools.cache
def builtin_rows() -> tuple[tuple[tuple[str, tuple[str, ...]], ...], str]:
    """The built-in set as (category, turns) in file order, passages in place; and its digest."""
    digest = hashlib.sha256()
    passages: dict[str, str] = {}
    rows: list[tuple[str, tuple[str, ...]]] = []
    for name in ("passages.jsonl", "prompts.jsonl"):
        data = (DATA_DIR / name).read_bytes()
        digest.update(data)
        for line in data.splitlines():
            obj = orjson.loads(line)
            if name == "passages.jsonl":
                passages[obj["id"]] = obj["text"].rstrip("\n")
            else:
                turns = tuple(_REF.sub(lambda m: passages[m.group(1)], t) for t in obj["turns"])
                rows.append((obj["category"], turns))
    return tuple(rows), digest.hexdigest()[:16]
