"""``specload tui --web``: the dashboard in a browser, served with textual-serve.

textual-serve runs a command per browser connection and relays its terminal over a websocket. The
command here is the same ``specload tui`` with the same options, so the page is the dashboard as it
is in a terminal, keys included.

One viewer at a time. Each connection runs its own dashboard process, and today the dashboard and
the load are one process: a second viewer would start a second load against the server. So a second
connection is turned away while one is open, and closing the page ends the run (in-flight requests
recorded as cancelled, the record closed, as 'q' does). Several viewers of one run need the engine
in a process of its own that dashboards attach to; until then this is the honest shape.

It listens on 127.0.0.1 unless told otherwise, and says so: whoever reaches the page can drive the
load. textual-serve's page asks Google's servers for a web font; a GPU box without a network would
log a failed request on every visit, so the page is served without that link (the font is bundled
with textual-serve and used from there).

textual-serve is an optional extra (``pip install "specload[web]"``).
"""

from __future__ import annotations

import re
import shlex
import sys
import tempfile
from pathlib import Path

EXTRA_HINT = 'pip install "specload[web]"'
WEB_OPTIONS = ("--web",)
WEB_VALUE_OPTIONS = ("--host", "--port")


class WebError(Exception):
    """The page cannot be served; one line for the user."""


def child_args(argv: list[str]) -> list[str]:
    """The ``specload tui`` options without the web ones: what each connection runs."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in WEB_OPTIONS:
            continue
        if a in WEB_VALUE_OPTIONS:
            skip = True
            continue
        if any(a.startswith(o + "=") for o in WEB_VALUE_OPTIONS):
            continue
        out.append(a)
    return out


def _template_without_remote_font(src_dir: Path) -> Path:
    """A copy of textual-serve's page template without the link to Google's font server."""
    html = (src_dir / "app_index.html").read_text(encoding="utf-8")
    cleaned = re.sub(r"<link\b[^>]*fonts\.googleapis\.com[^>]*>", "", html, flags=re.S)
    out = Path(tempfile.mkdtemp(prefix="specload-web-"))
    (out / "app_index.html").write_text(cleaned, encoding="utf-8")
    return out


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def serve(tui_argv: list[str], *, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve ``specload tui TUI_ARGV`` on http://HOST:PORT until interrupted."""
    try:
        import textual_serve
        from aiohttp import web
        from textual_serve.server import Server
    except ImportError:
        raise WebError(f"--web needs textual-serve, which is not installed: {EXTRA_HINT}") from None

    command = shlex.join([sys.executable, "-m", "specload.cli", "tui", *child_args(tui_argv)])
    base = Path(textual_serve.__file__).parent
    templates = _template_without_remote_font(base / "templates")

    class OneViewerServer(Server):
        """textual-serve's server, refusing a second live connection (it would start a second load)."""

        active = 0

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            # no icon to serve: say so without a 404 in every visitor's console
            app.router.add_get("/favicon.ico", lambda _: web.Response(status=204))
            return app

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            if OneViewerServer.active:
                ws = web.WebSocketResponse()
                await ws.prepare(request)
                # the page shows this text in its terminal before the socket closes
                note = ("\r\nThis specload dashboard is already open in another browser: each viewer would "
                        "run its own load, so one at a time.\r\n")
                await ws.send_bytes(note.encode())
                await ws.close()
                return ws
            OneViewerServer.active += 1
            try:
                return await super().handle_websocket(request)
            finally:
                OneViewerServer.active -= 1

    server = OneViewerServer(
        command,
        host=host,
        port=port,
        title="specload",
        statics_path=base / "static",
        templates_path=templates,
    )
    where = "this machine only (127.0.0.1)" if is_loopback(host) else f"every address that reaches {host}"
    print(f"specload: dashboard at http://{host}:{port}, open to {where}; one viewer at a time; "
          "closing the page ends the run", file=sys.stderr, flush=True)
    if not is_loopback(host):
        print("specload: WARNING anyone who can open the page can change the load (keys work there)",
              file=sys.stderr, flush=True)
    server.serve()
