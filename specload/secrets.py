"""Secrets: which values must never reach a record, a log line on screen, a notice or a request error.

One rule decides what is secret, and every writer uses it (the session for log lines and notices,
the client for request errors, the recorder for every line, the record's config header):

* **By name** (``is_secret_name``): a header, config key, flag or environment variable whose words
  hold a credential word (``key``, ``token``, ``secret``, ``auth``, ``password``, ``cookie``, ...),
  unless its last word says where a secret lives (``--api-key-env OPENAI_API_KEY`` names a
  variable). So ``X-Api-Secret`` and ``--hf-token`` are secret, ``--max-tokens`` is not.
* **In URLs**: the password of ``scheme://user:pw@host`` is masked wherever it appears, known or not.
* **By value**: the values the rule finds in a run's options (``secret_values``) are collected once
  into a ``Scrubber``, which masks them in any text, so a server that logs its own arguments (vLLM
  does), or an error body that echoes a header, cannot leak them.

Masked values become ``***``. Every text from the server passes the ``Scrubber`` where it enters,
and so does everything written. Nothing here does I/O; it imports only the standard library, so
every layer can use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, urlparse

MASK = "***"
MIN_SECRET_LEN = 4  # shorter values would mask ordinary words and numbers everywhere

SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "auth", "authorization", "password", "passwd", "pwd", "cookie",
     "credential", "credentials"}
)
# compounds written as one word: xapikey, accesstoken, clientsecret, dbpassword, setcookie
_SECRET_SUFFIXES = ("apikey", "token", "secret", "authorization", "password", "passwd", "cookie")
# a last word saying where the secret is, not what it is
LOCATION_WORDS = frozenset({"env", "file", "path", "dir", "var"})

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SPLIT = re.compile(r"[^a-z0-9]+")


def name_words(name: str) -> list[str]:
    return [w for w in _SPLIT.split(_CAMEL.sub(r"\1 \2", name).lower()) if w]


def is_secret_name(name: str) -> bool:
    """The one rule: does this header, key, flag or variable name suggest a credential? Words are
    split on ``-``, ``_``, ``.``, spaces and camelCase (``accessToken``, ``HF_TOKEN``); a compound
    ending in a credential word (``apikey``) counts; ``TOKENIZERS_PARALLELISM`` does not."""
    words = name_words(name)
    if not words or words[-1] in LOCATION_WORDS:
        return False
    return any(w in SECRET_WORDS or w.endswith(_SECRET_SUFFIXES) for w in words)


# ---------------------------------------------------------------------------- masking by shape

# the password of a URL anywhere in a string: http://user:pw@host -> http://user:***@host. Neither part
# crosses a quote: in a JSON or Python text 'http://host:8000","x":"a@b' is no URL with a password.
_URL_PASSWORD = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@\"']*:)[^/\s@\"']+@")
_URL_PASSWORD_BYTES = re.compile(_URL_PASSWORD.pattern.encode())
# a flag: --name or -name at the start of a word, then "=value" or whitespace and the next word
_FLAG = re.compile(r"(?<!\S)(--?[A-Za-z][\w.-]*)(=|\s+)(\S+)")
# an assignment inside a command: NAME=value (HF_TOKEN=x, api_key=x)
_ASSIGN = re.compile(r"(?<![\w.-])([A-Za-z_][A-Za-z0-9_]*)=([^\s'\"]+)")


def redact_url_passwords(text: str) -> str:
    return _URL_PASSWORD.sub(rf"\1{MASK}@", text) if "@" in text else text


def _flag_values(cmd: str) -> Iterable[re.Match[str]]:
    """Matches of secret flags with their values. A flag followed by another flag has no value."""
    pos = 0
    while True:
        m = _FLAG.search(cmd, pos)
        if m is None:
            return
        if m.group(2) != "=" and m.group(3).startswith("-"):
            pos = m.start(3)  # "--ignore-eos --api-key x": the next flag is looked at on its own
            continue
        if is_secret_name(m.group(1)):
            yield m
        pos = m.end()


def redact_command(cmd: str | None) -> str | None:
    """A shell command with URL passwords and the values of secret flags and variables masked:
    ``vllm serve M --api-key sk-1`` -> ``vllm serve M --api-key ***``; ``HF_TOKEN=x cmd`` -> ``HF_TOKEN=*** cmd``."""
    if not cmd:
        return cmd
    cmd = redact_url_passwords(cmd)
    out, last = [], 0
    for m in _flag_values(cmd):
        out.append(cmd[last : m.start(3)] + MASK)
        last = m.end(3)
    cmd = "".join(out) + cmd[last:]
    return _ASSIGN.sub(lambda m: f"{m.group(1)}={MASK}" if is_secret_name(m.group(1)) else m.group(0), cmd)


def redact_header(header: str) -> str:
    """``"Authorization: Bearer x"`` -> ``"Authorization: ***"`` for headers whose name is secret."""
    name, sep, value = header.partition(":")
    if sep and is_secret_name(name) and value.strip():
        return f"{name}: {MASK}"
    return header


def redact_config(obj: object) -> object:
    """A copy of a configuration (dicts, lists, strings) for a record or a screen: values of secret
    keys replaced, ``headers`` entries masked by name, and every string treated as a command."""
    if isinstance(obj, str):
        return redact_command(obj)
    if isinstance(obj, dict):
        out: dict = {}
        for k, v in obj.items():
            if isinstance(k, str) and is_secret_name(k) and v not in (None, "", [], {}, ()):
                out[k] = MASK
            elif k == "headers" and isinstance(v, list | tuple):
                out[k] = [_redact_header_entry(h) for h in v]
            else:
                out[k] = redact_config(v)
        return out
    if isinstance(obj, list | tuple):
        return [redact_config(v) for v in obj]
    return obj


def _redact_header_entry(h: object) -> object:
    if isinstance(h, str):
        return redact_header(h)
    if isinstance(h, list | tuple) and len(h) == 2 and isinstance(h[0], str):
        return [h[0], MASK if is_secret_name(h[0]) else h[1]]
    return redact_config(h)


# ---------------------------------------------------------------------------- masking by value


def url_passwords(text: str | None) -> list[str]:
    """The passwords of the URLs in a string, as written and percent-decoded."""
    if not text or "@" not in text:
        return []
    found = []
    for word in text.split():
        if "://" not in word or "@" not in word:
            continue
        try:
            password = urlparse(word.strip("'\"")).password
        except ValueError:
            continue
        if password:
            found += [password, unquote(password)]
    return found


def command_secrets(cmd: str | None) -> list[str]:
    """The values of secret flags and variables in a command, and its URL passwords."""
    if not cmd:
        return []
    found = [m.group(3).strip("'\"") for m in _flag_values(cmd)]
    found += [m.group(2) for m in _ASSIGN.finditer(cmd) if is_secret_name(m.group(1))]
    return found + url_passwords(cmd)


def basic_credentials(value: str) -> list[str]:
    """``Basic base64(user:password)`` -> the password and ``user:password`` as sent. A URL's
    password travels this way (``http://user:pw@host`` becomes this header), and a server that
    echoes or logs a failed login writes it in plain text, not in base64."""
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "basic" or not token:
        return []
    import base64
    import binascii

    try:
        pair = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return []
    _, sep, password = pair.partition(":")
    return [pair, password] if sep and password else []


def secret_values(
    *,
    api_key: str | None = None,
    headers: Iterable[tuple[str, str]] = (),
    texts: Iterable[str | None] = (),
) -> tuple[str, ...]:
    """The secret values of a run: the API key, the values of credential headers (and their bare
    tokens: ``Bearer sk-...`` gives ``sk-...`` too), and what ``command_secrets`` finds in option
    texts (URLs, log commands, the launch command). Longest first, so a value containing another is
    masked whole."""
    values: list[str] = []
    if api_key:
        values.append(api_key)
    for name, value in headers:
        if is_secret_name(name):
            values.append(value)
            values.extend(part for part in value.split() if len(part) >= 8)
            values.extend(basic_credentials(value))
    for text in texts:
        values += command_secrets(text)
    return tuple(sorted({v for v in values if len(v) >= MIN_SECRET_LEN}, key=len, reverse=True))


class Scrubber:
    """Masks a run's known secret values and every URL's password in text (log lines, notices, error
    details) and bytes (the record's serialised lines). Cheap on text without them: a substring test
    per value and one for '@'."""

    __slots__ = ("values", "_bytes")

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values = tuple(sorted({v for v in values if v and len(v) >= MIN_SECRET_LEN}, key=len, reverse=True))
        self._bytes = tuple(v.encode() for v in self.values)

    def __call__(self, text: str) -> str:
        for v in self.values:
            if v in text:
                text = text.replace(v, MASK)
        return redact_url_passwords(text)

    def scrub_bytes(self, data: bytes) -> bytes:
        for v in self._bytes:
            if v in data:
                data = data.replace(v, MASK.encode())
        return _URL_PASSWORD_BYTES.sub(rb"\1" + MASK.encode() + b"@", data) if b"@" in data else data
