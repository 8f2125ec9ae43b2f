"""The one rule of ``specload.secrets``: which names are credentials, and how values are masked."""

from __future__ import annotations

import pytest

from specload.secrets import (
    Scrubber,
    is_secret_name,
    redact_command,
    redact_config,
    redact_header,
    secret_values,
)


@pytest.mark.parametrize(
    "name",
    ["Authorization", "Proxy-Authorization", "X-Api-Key", "api-key", "X-Api-Secret", "X-Password", "X-Auth",
     "X-Auth-Token", "Cookie", "Set-Cookie", "accessToken", "apiKey", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY",
     "--hf-token", "--api-key", "db_passwd", "xapikey", "client_secret", "credentials"],
)
def test_credential_names_are_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["--max-tokens", "max_tokens", "prompt_tokens", "--tokenizer", "TOKENIZERS_PARALLELISM", "Content-Type",
     "Keep-Alive", "Accept", "api_key_env", "--api-key-env", "--hf-token-file", "keepalive", "monkey", ""],
)
def test_other_names_are_not(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_command_masks_secret_flags_variables_and_url_passwords_only() -> None:
    cmd = ("HF_TOKEN=hf_x vllm serve m --ignore-eos --api-key sk-1 --max-tokens 9 --tokenizer t --hf-token=abc "
           "--api-key-env MY_KEY --metrics http://u:pw@h/x")
    assert redact_command(cmd) == (
        "HF_TOKEN=*** vllm serve m --ignore-eos --api-key *** --max-tokens 9 --tokenizer t --hf-token=*** "
        "--api-key-env MY_KEY --metrics http://u:***@h/x"
    )
    assert redact_command("echo 'args: api_key=sk-9'") == "echo 'args: api_key=***'"
    assert redact_command(None) is None


def test_headers_and_config_keys_follow_the_same_rule() -> None:
    assert redact_header("X-Auth-Token: abc") == "X-Auth-Token: ***"
    assert redact_header("Content-Type: application/json") == "Content-Type: application/json"
    cfg = {
        "headers": ["X-Api-Secret: s3cr3t", "Accept: */*", ["Cookie", "c=1"]],
        "api_key_env": "OPENAI_API_KEY",  # a variable's name, not the key
        "extra_body": {"max_tokens": 5, "access_token": "t0k3n"},
        "launch": "vllm serve --api-key sk-1",
    }
    assert redact_config(cfg) == {
        "headers": ["X-Api-Secret: ***", "Accept: */*", ["Cookie", "***"]],
        "api_key_env": "OPENAI_API_KEY",
        "extra_body": {"max_tokens": 5, "access_token": "***"},
        "launch": "vllm serve --api-key ***",
    }


def test_secret_values_collects_keys_headers_tokens_and_command_secrets() -> None:
    values = secret_values(
        api_key="sk-key-1234",
        headers=[("Authorization", "Bearer sk-bearer-99"), ("Accept", "application/json")],
        texts=["vllm serve --api-key sk-launch-5 --port 8000", "http://u:p%40ss@h/metrics", None],
    )
    assert set(values) == {"sk-key-1234", "Bearer sk-bearer-99", "sk-bearer-99", "sk-launch-5", "p%40ss", "p@ss"}
    assert values == tuple(sorted(values, key=len, reverse=True))  # a value holding another goes first


def test_scrubber_masks_known_values_in_text_and_bytes() -> None:
    s = Scrubber(["Bearer sk-bearer-99", "sk-bearer-99", "abc"])  # too short values are ignored
    assert s("got Bearer sk-bearer-99 and sk-bearer-99, abc") == "got *** and ***, abc"
    assert s.scrub_bytes(b'{"detail":"sk-bearer-99"}') == b'{"detail":"***"}'
    assert Scrubber()("x") == "x"


def test_scrubber_masks_every_url_password_known_or_not() -> None:
    # a server logs a connection string specload was never given: the shape says it is a secret
    s = Scrubber()
    assert s("url=http://alice:PW-1@host:9000/kv") == "url=http://alice:***@host:9000/kv"
    assert s.scrub_bytes(b'{"m":"redis://:PW-2@cache"}') == b'{"m":"redis://:***@cache"}'
    # in JSON (a record line) or a Python repr, a URL's port and a later '@' are not a password
    line = b'{"url":"http://host:8000","mail":"a@b","u":"http://u:PW-3@h"}'
    assert s.scrub_bytes(line) == b'{"url":"http://host:8000","mail":"a@b","u":"http://u:***@h"}'
    assert s("('http://host:8000','a@b')") == "('http://host:8000','a@b')"


def test_the_password_inside_a_basic_token_is_a_secret_value() -> None:
    # http://admin:pw@host becomes "Authorization: Basic base64(admin:pw)"; a server that echoes a
    # failed login writes the password in plain text
    import base64

    token = base64.b64encode(b"admin:s3cret-pass").decode()
    values = secret_values(headers=[("Authorization", f"Basic {token}")])
    assert {"s3cret-pass", "admin:s3cret-pass", token} <= set(values)
    assert set(secret_values(headers=[("Authorization", "Basic !!notbase64")])) == {"Basic !!notbase64", "!!notbase64"}
    assert secret_values(headers=[("X-Note", f"Basic {token}")]) == ()  # not a credential header
