"""``tui --web``'s Host check: which names reach the dashboard (DNS rebinding names another)."""

from __future__ import annotations

import pytest

from specload.ui.web import host_allowed, host_names


@pytest.mark.parametrize(("bind", "header", "ok"), [
    ("127.0.0.1", "127.0.0.1:8765", True),
    ("127.0.0.1", "localhost:8765", True),
    ("127.0.0.1", "[::1]:8765", True),
    ("127.0.0.1", "LOCALHOST:8765", True),
    ("127.0.0.1", "evil.example:8765", False),  # a rebound name
    ("127.0.0.1", "127.0.0.1:8766", False),  # another port
    ("127.0.0.1", "127.0.0.1", False),
    ("127.0.0.1", "", False),
    ("127.0.0.1", "localhost.evil.example:8765", False),
    ("10.0.0.5", "10.0.0.5:8765", True),
    ("10.0.0.5", "10.0.0.6:8765", False),
    ("10.0.0.5", "localhost:8765", False),  # not bound there
    ("0.0.0.0", "10.1.2.3:8765", True),  # a wildcard answers on every address of the machine
    ("0.0.0.0", "[fe80::1]:8765", True),
    ("0.0.0.0", "evil.example:8765", False),
    ("::", "localhost:8765", True),
])
def test_host_allowed(bind: str, header: str, ok: bool) -> None:
    assert host_allowed(header, host_names(bind), bind in ("0.0.0.0", "::"), 8765) is ok


def test_default_port_may_be_left_out() -> None:
    assert host_allowed("127.0.0.1", host_names("127.0.0.1"), False, 80)
