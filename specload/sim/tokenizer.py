"""The simulator's tokenizer: deterministic, cheap, and deliberately not the client's guess.

Real tokenizers make "128 tokens" of English anything from ~100 to ~300 tokens depending on the
vocabulary, so a load tester that sizes prompts by a guess measures different work on different
servers. The simulator counts like a real BPE tokenizer would in shape, not in numbers: the text is
split GPT-2 style into pieces (a word with its leading space, a run of digits, a run of punctuation,
whitespace), and each piece costs one token per started 4 characters. A word's count therefore does
not depend on its neighbours (as with real byte-level BPE), and ``" speculative"`` is 3 tokens while
the client's guess of 1.3 tokens a word says ~1.

Token ids are a hash of each 4-character piece, so equal texts give equal ids and the prefix cache
(``prefix_cache.py``) can key on them. A chat is counted as a ChatML template would: each message is
``<|im_start|>role\\n`` content ``<|im_end|>`` (4 tokens around the content) and the assistant header
adds 3: ``usage.prompt_tokens``, ``/tokenize`` and the prefix cache all use these functions.
"""

from __future__ import annotations

import re
import zlib

VOCAB_SIZE = 32_000
PIECE_CHARS = 4
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_ASSISTANT_HEADER = 3
# special ids of the template (below every hashed id)
IM_START, IM_END, NEWLINE = 1, 2, 3
_FIRST_ID = 16

_PIECE = re.compile(r" ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")


def pieces(text: str) -> list[str]:
    out: list[str] = []
    for m in _PIECE.finditer(text):
        s = m.group()
        out.extend(s[i : i + PIECE_CHARS] for i in range(0, len(s), PIECE_CHARS))
    return out


def count_text(text: str) -> int:
    return sum(-(-len(m.group()) // PIECE_CHARS) for m in _PIECE.finditer(text))


def _id(piece: str) -> int:
    return _FIRST_ID + zlib.crc32(piece.encode("utf-8", "surrogatepass")) % (VOCAB_SIZE - _FIRST_ID)


def text_ids(text: str) -> list[int]:
    return [_id(p) for p in pieces(text)]


def piece_list(text: str) -> list[tuple[int, str]]:
    """(id, piece) pairs: llama.cpp's ``/tokenize`` with ``with_pieces``."""
    return [(_id(p), p) for p in pieces(text)]


def _content(m: dict) -> str:
    content = m.get("content", "")
    if isinstance(content, list):  # multi-part content: the text parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if content is None:
        return ""
    if not isinstance(content, str):
        raise ValueError("message content must be a string or a list of parts")
    return content


def chat_ids(messages: list) -> list[int]:
    """The ids of a chat as the template lays it out, assistant header included."""
    ids: list[int] = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object with role and content")
        role = str(m.get("role", "user"))
        ids += [IM_START, _id(role), NEWLINE, *text_ids(_content(m)), IM_END]
    ids += [IM_START, _id("assistant"), NEWLINE]
    return ids


def count_chat(messages: list) -> int:
    total = CHAT_TOKENS_ASSISTANT_HEADER
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object with role and content")
        total += CHAT_TOKENS_PER_MESSAGE + count_text(_content(m))
    return total


def prompt_ids(prompt: object) -> list[int]:
    """Ids of an OpenAI completions ``prompt`` (str, list of str, list of token ids)."""
    if isinstance(prompt, str):
        return text_ids(prompt)
    if isinstance(prompt, list):
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return list(prompt)
        out: list[int] = []
        for p in prompt:
            out += prompt_ids(p)
        return out
    raise ValueError("prompt must be a string, a list of strings or a list of token ids")


_SPECIAL = re.compile(r"<\|im_start\|>[^\n<]*\n|<\|im_end\|>")


def apply_template(messages: list) -> str:
    """The chat as text (llama.cpp's ``/apply-template``): ChatML markers around each message."""
    out = []
    for m in messages:
        if not isinstance(m, dict):
            raise ValueError("each message must be an object with role and content")
        out.append(f"<|im_start|>{m.get('role', 'user')}\n{_content(m)}<|im_end|>")
    return "".join(out) + "<|im_start|>assistant\n"


def special_ids(text: str) -> list[int]:
    """Ids of a text whose template markers are read as special tokens (``parse_special``), so
    ``special_ids(apply_template(m)) == chat_ids(m)``."""
    ids: list[int] = []
    pos = 0
    for m in _SPECIAL.finditer(text):
        ids += text_ids(text[pos : m.start()])
        marker = m.group()
        if marker == "<|im_end|>":
            ids.append(IM_END)
        else:
            ids += [IM_START, _id(marker[len("<|im_start|>") : -1]), NEWLINE]
        pos = m.end()
    return ids + text_ids(text[pos:])
