"""Prompt files from elsewhere and the built-in set, read into ``Conversation``s: user turns, an
optional category, and the first reply's reference length (``--output-len dataset``).

Rows are ``plain``, ``sharegpt`` or ``openai`` shaped (the README's "Workloads"), JSONL or one JSON
array. The files come from other tools and people, so the size, each line, binary content and every
field's type are checked: a bad file is a ``PromptError`` of one line, never a traceback. The built-in
set is original text in ``specload/data`` (prompts naming shared passages), its categories interleaved.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import orjson

from specload import lines
from specload.data import builtin_rows

TOKENS_PER_WORD = 1.3  # specload's estimate when no tokenizer is asked (engine/prompts.py uses it too)

# Bounds on what is read: a path may name /dev/zero, a FIFO or a file far larger than memory. No
# prompt is anywhere near 16 MiB (about 4 million tokens); a dataset is held in memory, so its size
# is capped too (ShareGPT_V3_unfiltered is 0.64 GiB).
MAX_PROMPT_BYTES = 16 << 20
MAX_DATASET_BYTES = 2 << 30

FORMATS = ("auto", "plain", "sharegpt", "openai")
PROMPT_KEYS = ("prompt", "text", "input", "question", "instruction")
OUTPUT_KEYS = ("output_tokens", "output_len", "output_length")
_EXPECTED = ("JSONL or a JSON array of prompts: strings or {\"prompt\": ...} (plain), "
             "{\"conversations\": [{\"from\", \"value\"}]} (sharegpt) or {\"messages\": [{\"role\", \"content\"}]} (openai)")

T = TypeVar("T")
BUILTIN = "builtin"


class PromptError(ValueError):
    """A prompt source that cannot be used (missing file, empty dataset, bad row): one line."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """One dataset row: its user turns in order (a single prompt is one turn)."""

    turns: tuple[str, ...]
    category: str | None = None
    # the reference length of the first reply: the row's own figure, or estimated from its text
    output_tokens: int | None = None
    output_estimated: bool = False
    system: str | None = None  # the row's system message, sent first (OpenAI "system", ShareGPT "system")


@dataclass(frozen=True, slots=True)
class Dataset:
    """What was read, and enough about it for the record to say which workload this was."""

    name: str  # the path as given, or "builtin" / "builtin:coding,math"
    format: str  # the row shape(s) found: plain, sharegpt, openai (joined by "+" when mixed)
    conversations: tuple[Conversation, ...]
    digest: str  # sha256 of the bytes read (the built-in set: of its data files), first 16 hex digits
    skipped: int = 0  # rows with no user turn (ShareGPT has empty conversations), left out

    def describe(self) -> dict:
        cats: dict[str, int] = {}
        for c in self.conversations:
            if c.category is not None:
                cats[c.category] = cats.get(c.category, 0) + 1
        d: dict = {"name": self.name, "format": self.format, "rows": len(self.conversations),
                   "multi_turn": sum(len(c.turns) > 1 for c in self.conversations), "sha256": self.digest}
        if cats:
            d["categories"] = cats
        if self.skipped:
            d["skipped_rows"] = self.skipped
        given = sum(c.output_tokens is not None and not c.output_estimated for c in self.conversations)
        estimated = sum(c.output_estimated for c in self.conversations)
        if given or estimated:
            d["reference_output"] = {"given": given, "estimated_from_reply": estimated}
        return d


# --------------------------------------------------------------------------- rows


def estimate_tokens(text: str) -> int:
    """specload's estimate of a text's tokens without a tokenizer: 1.3 a word."""
    return max(1, round(len(text.split()) * TOKENS_PER_WORD))


class _RowError(ValueError):
    """What is wrong with one row; the caller adds the file and row."""


def _text(v: object, where: str) -> str:
    """A message's content: a string, or OpenAI's list of parts (the text parts joined)."""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        parts = []
        for i, p in enumerate(v):
            if not isinstance(p, dict):
                raise _RowError(f"{where}[{i}] is not an object")
            t = p.get("text")
            if p.get("type", "text") == "text":
                if not isinstance(t, str):
                    raise _RowError(f"{where}[{i}].text is not a string")
                parts.append(t)
        return "\n".join(parts)
    raise _RowError(f"{where} is not a string")


# the shape of each message list: its key, the role key, the content key, the user and reply roles
_CHATS = {"sharegpt": ("conversations", "from", "value", ("human", "user"), ("gpt", "assistant", "chatgpt", "bard")),
          "openai": ("messages", "role", "content", ("user",), ("assistant",))}
_SYSTEM_ROLES = ("system", "developer")


def _chat(obj: dict, fmt: str) -> tuple[tuple[str, ...], str | None, str | None]:
    """(user turns, first reply, system message) of a ShareGPT or OpenAI row."""
    key, role_key, content_key, users, replies = _CHATS[fmt]
    msgs = obj[key]
    if not isinstance(msgs, list):
        raise _RowError(f"{key!r} is not a list")
    turns: list[str] = []
    reply: str | None = None
    system: str | None = None
    for i, m in enumerate(msgs):
        if not isinstance(m, dict):
            raise _RowError(f"{key}[{i}] is not an object")
        role = m.get(role_key)
        if not isinstance(role, str):
            raise _RowError(f"{key}[{i}].{role_key} is not a string")
        if role in users:
            turns.append(_text(m.get(content_key), f"{key}[{i}].{content_key}"))
        elif role in replies and turns and reply is None:
            reply = _text(m.get(content_key), f"{key}[{i}].{content_key}")
        elif role in _SYSTEM_ROLES and not turns and system is None:
            system = _text(m.get(content_key), f"{key}[{i}].{content_key}").strip() or None
    return tuple(t for t in turns if t.strip()), reply, system


def _shape(obj: object) -> str:
    """Which row shape this is (its keys decide), or ``trace``, or ``?``."""
    if isinstance(obj, str):
        return "plain"
    if not isinstance(obj, dict):
        return "?"
    if "conversations" in obj:
        return "sharegpt"
    if "messages" in obj:
        return "openai"
    if any(k in obj for k in PROMPT_KEYS):
        return "plain"
    if "hash_ids" in obj or ("timestamp" in obj and "input_length" in obj):
        return "trace"
    return "?"


def _row(obj: object, fmt: str) -> tuple[str, Conversation | None]:
    """(the row's shape, its conversation or None when it has no user turn)."""
    shape = _shape(obj)
    if shape == "trace":
        raise _RowError("is a trace row (timestamp, input_length, hash_ids): replay it with --trace FILE")
    if shape == "?" or (fmt != "auto" and shape != fmt):
        want = _EXPECTED if fmt == "auto" else {
            "plain": "a string or an object with one of " + ", ".join(PROMPT_KEYS),
            "sharegpt": 'an object with "conversations": [{"from", "value"}]',
            "openai": 'an object with "messages": [{"role", "content"}]'}[fmt]
        found = f"an object with keys {', '.join(list(obj)[:6])}" if isinstance(obj, dict) else type(obj).__name__
        raise _RowError(f"expected {want}; found {found}")
    if isinstance(obj, str):
        return shape, Conversation((obj,)) if obj.strip() else None
    assert isinstance(obj, dict)
    reply: str | None = None
    system: str | None = None
    if shape == "plain":
        text = next((obj[k] for k in PROMPT_KEYS if k in obj), None)
        if not isinstance(text, str):
            raise _RowError(f"{next(k for k in PROMPT_KEYS if k in obj)!r} is not a string")
        turns: tuple[str, ...] = (text,) if text.strip() else ()
    else:
        turns, reply, system = _chat(obj, shape)
    if not turns:
        return shape, None
    category = obj.get("category")
    if category is not None and not isinstance(category, str):
        raise _RowError("'category' is not a string")
    out, estimated = None, False
    for k in OUTPUT_KEYS:
        if k in obj:
            v = obj[k]
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10_000_000:
                raise _RowError(f"{k!r} is not a whole number of tokens (1 to 10,000,000)")
            out = v
            break
    if out is None and reply is not None and reply.strip():
        out, estimated = estimate_tokens(reply), True
    return shape, Conversation(turns, (category.strip() or None) if category else None, out, estimated, system)


# --------------------------------------------------------------------------- files


def read_text(path: str, limit: int = MAX_PROMPT_BYTES) -> str:
    """A whole text file, bounded."""
    return _read_bytes(path, limit).decode("utf-8", errors="replace")


def _read_bytes(path: str, limit: int) -> bytes:
    try:
        return lines.read_capped(path, limit)
    except lines.TooLong as e:
        raise PromptError(f"{e} (use a sample of it)" if limit > MAX_PROMPT_BYTES else str(e)) from None
    except OSError as e:
        raise PromptError(f"cannot read {path}: {e.strerror or e}") from None


def read_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a JSONL file, read a line at a time, each line and the whole bounded."""
    total = 0
    try:
        for n, line, _ in lines.iter_lines(path, MAX_PROMPT_BYTES):
            total += len(line) + 1
            if total > MAX_DATASET_BYTES:
                raise PromptError(f"{path}: larger than {MAX_DATASET_BYTES >> 30} GiB (use a sample of it)")
            yield n, line
    except lines.TooLong as e:
        raise PromptError(str(e)) from None
    except OSError as e:
        raise PromptError(f"cannot read {path}: {e.strerror or e}") from None


def first_byte(path: str, expected: str = _EXPECTED) -> bytes:
    """The first byte that is not white space (BOM skipped), or b"" for an empty file; binary refused."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise PromptError(f"cannot read {path}: {e.strerror or e}") from None
    if b"\0" in head:
        raise PromptError(f"{path}: not a text file (binary data); expected {expected}")
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    return head[:1]


def load_dataset(path: str, fmt: str = "auto") -> Dataset:
    """A dataset file (see the module docstring). PromptError with one line when it cannot be used."""
    if path == BUILTIN or path.startswith(BUILTIN + ":"):
        return load_builtin(path)
    if fmt not in FORMATS:
        raise PromptError(f"--dataset-format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return read_once(path, fmt, lambda: _load(path, fmt))


_cache: dict = {}


def read_once(path: str, how: object, load: Callable[[], T]) -> T:
    """``load()``, or what it gave last time for this path, read the same way (``how``), while the
    file is unchanged: the CLI's preflight reads a dataset or trace, and the session needs it again."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise PromptError(f"cannot read {path}: {e.strerror or e}") from None
    key = (path, how, st.st_size, st.st_mtime_ns, st.st_ino)
    if _cache.get("key") != key:
        _cache.update(key=key, value=load())
    return _cache["value"]


def _load(path: str, fmt: str) -> Dataset:
    digest = hashlib.sha256()
    shapes: dict[str, int] = {}
    convs: list[Conversation] = []
    skipped = 0

    def take(where: str, obj: object) -> None:
        nonlocal skipped
        try:
            shape, conv = _row(obj, fmt)
        except _RowError as e:
            raise PromptError(f"{where}: {e}") from None
        shapes[shape] = shapes.get(shape, 0) + 1
        if conv is None:
            skipped += 1
        else:
            convs.append(conv)

    if first_byte(path) == b"[":
        data = _read_bytes(path, MAX_DATASET_BYTES)
        digest.update(data)
        try:
            rows = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise PromptError(f"{path}: not valid JSON ({_json_why(e)}); expected {_EXPECTED}") from None
        del data
        if not isinstance(rows, list):
            raise PromptError(f"{path}: expected {_EXPECTED}")
        for i, obj in enumerate(rows):
            take(f"{path}: row {i + 1}", obj)
    else:
        for n, line in read_lines(path):
            digest.update(line)
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                hint = "" if convs or shapes else f"; expected {_EXPECTED}"
                raise PromptError(f"{path}:{n}: not valid JSON ({_json_why(e)}){hint}") from None
            take(f"{path}:{n}", obj)
    if not convs:
        raise PromptError(f"{path}: no prompts" + (f" ({skipped} rows without a user turn)" if skipped else ""))
    return Dataset(path, "+".join(sorted(shapes)), tuple(convs), digest.hexdigest()[:16], skipped)


def _json_why(e: orjson.JSONDecodeError) -> str:
    msg = str(e).split(":", 1)[0]
    return msg if len(msg) < 80 else msg[:77] + "..."


# --------------------------------------------------------------------------- the built-in set

def builtin_categories() -> tuple[str, ...]:
    """The built-in set's categories, in their order."""
    return tuple(dict.fromkeys(c for c, _ in builtin_rows()[0]))


def load_builtin(spec: str = BUILTIN) -> Dataset:
    """``builtin`` (every category) or ``builtin:coding,math``, interleaved: one prompt of each
    category in turn, in the set's order, so any stretch of requests covers all of them."""
    rows, digest = builtin_rows()
    valid = builtin_categories()
    _, colon, names = spec.partition(":")
    wanted = [c.strip() for c in names.split(",") if c.strip()] if colon else list(valid)
    bad = [c for c in wanted if c not in valid]
    if bad or not wanted:
        raise PromptError(f"--dataset {spec}: unknown category {bad[0] if bad else '(none)'!r}; "
                          f"the built-in categories are {', '.join(valid)}")
    wanted = list(dict.fromkeys(wanted))
    by_cat = {c: [Conversation(turns, c) for cat, turns in rows if cat == c] for c in wanted}
    interleaved = [conv for group in itertools.zip_longest(*by_cat.values()) for conv in group if conv is not None]
    name = BUILTIN if wanted == list(valid) else f"{BUILTIN}:{','.join(wanted)}"
    return Dataset(name, "builtin", tuple(interleaved), digest)
