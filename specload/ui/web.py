"""``specload tui --web``: the dashboard in a browser, served with textual-serve.

textual-serve runs a command per browser connection and relays its terminal over a websocket. The
command here is the same ``specload tui`` with the same options, so the page is the dashboard as it
is in a terminal, keys included.

One run per process: a second viewer would start a second load. So the first connection runs the
load; a second one while it is open is turned away, and once it has closed every later one is told
where the record is. The record is named before any viewer comes, and never an existing one.

The door: whoever reaches the page can drive the load, so every request must name this machine's
address in Host (against DNS rebinding), a websocket's Origin must be the page itself, and the page
and its websocket need the random token printed with the URL, as Jupyter does (kept in a cookie).
Anything else gets a 403. It listens on 127.0.0.1 unless told otherwise. The page is served without
textual-serve's link to Google's web font (bundled instead), for GPU boxes without a network.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import secrets
import shlex
import socket
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


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"", "0.0.0.0", "::"})


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_names(bind: str) -> frozenset[str]:
    """The names a browser may put in Host for a server bound to BIND (with a wildcard bind, any IP
    literal as well: it answers on every address of the machine). A DNS-rebinding page names its
    own domain, which is none of these."""
    if bind in WILDCARDS:
        return LOOPBACK_NAMES | {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset({bind.lower().strip("[]")}) | (LOOPBACK_NAMES if is_loopback(bind) else frozenset())


def host_allowed(header: str, names: frozenset[str], wildcard: bool, port: int) -> bool:
    """Is HEADER (``name[:port]``, IPv6 in brackets) one of this server's own addresses?"""
    name, sep, given = header.lower().rpartition(":")
    if not sep or name.endswith(":") or (header.startswith("[") and not name.endswith("]")):
        name, given = header.lower(), ""  # no port (or a bare IPv6 address)
    if given != str(port) and not (given == "" and port == 80):
        return False
    name = name.strip("[]")
    return name in names or (wildcard and _is_ip(name))


def serve(tui_argv: list[str], *, host: str = "127.0.0.1", port: int = 8765, record: str | None = None) -> None:
    """Serve ``specload tui TUI_ARGV`` on http://HOST:PORT until interrupted; the run writes RECORD
    (made and checked by the caller; None: no record)."""
    try:
        import aiohttp_jinja2
        import textual_serve
        from aiohttp import web
        from textual_serve.server import Server, to_int
    except ImportError:
        raise WebError(f"--web needs textual-serve, which is not installed: {EXTRA_HINT}") from None

    args = child_args(tui_argv)
    if record is not None and "--record" not in args and not any(a.startswith("--record=") for a in args):
        args += ["--record", record]
    command = shlex.join([sys.executable, "-m", "specload.cli", "tui", *args])
    base = Path(textual_serve.__file__).parent
    templates = _template_without_remote_font(base / "templates")
    token = secrets.token_urlsafe(24)
    cookie = f"specload-web-{port}"
    names, wildcard = host_names(host), host in WILDCARDS
    guarded = ("/", "/ws")  # the page and its websocket; /static holds textual-serve's own files

    def refuse(why: str) -> web.Response:
        return web.Response(status=403, text=f"specload: {why}\n")

    @web.middleware
    async def door(request: web.Request, handler):
        # Host and Origin first: a page of another site (or a rebound name) never reaches the token check
        if not host_allowed(request.headers.get("Host", ""), names, wildcard, port):
            return refuse("this dashboard answers only to its own address (Host)")
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() != f"http://{request.headers['Host'].lower()}":
            return refuse("this dashboard takes connections only from its own page (Origin)")
        if request.path in guarded or request.path.startswith("/download/"):
            given = request.query.get("token") or request.cookies.get(cookie) or ""
            if not secrets.compare_digest(given.encode(), token.encode()):
                return refuse("this dashboard needs the address printed by 'specload tui --web' "
                              "(with its ?token=...)")
        response = await handler(request)
        if request.query.get("token") == token and isinstance(response, web.Response):
            response.set_cookie(cookie, token, httponly=True, samesite="Strict", path="/")
        return response

    class OneRunServer(Server):
        """textual-serve's server behind the door, running one dashboard for its whole life."""

        state = "ready"  # ready -> running -> ended

        def initialize_logging(self) -> None:
            """textual-serve's logging, with the token masked: aiohttp's access log prints each
            request line, and the page's is ``GET /?token=...`` (the Referer of the next ones too)."""
            super().initialize_logging()
            for handler in logging.getLogger().handlers:
                handler.addFilter(mask_token)

        async def on_startup(self, app: web.Application) -> None:
            """Nothing: textual-serve prints its logo and the command, whose options may hold a
            secret (a --header with a key); the banner above says where the page is."""

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(door)
            # no icon to serve: say so without a 404 in every visitor's console
            app.router.add_get("/favicon.ico", lambda _: web.Response(status=204))
            return app

        async def handle_index(self, request: web.Request) -> web.Response:
            # the page's addresses from the Host it was asked by (textual-serve uses the bind address:
            # a page opened as localhost would open its websocket to 127.0.0.1, another origin)
            return aiohttp_jinja2.render_template("app_index.html", request, {
                "font_size": to_int(request.query.get("fontsize", "16"), 16),
                "app_websocket_url": f"ws://{request.host}/ws",
                "config": {"static": {"url": "/static/"}},
                "application": {"name": self.title},
            })

        async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
            if self.state != "ready":
                ws = web.WebSocketResponse()
                await ws.prepare(request)
                # the page shows this text in its terminal before the socket closes
                await ws.send_bytes(("\r\n" + NOTES[self.state].format(record=record or "none") + "\r\n").encode())
                await ws.close()
                return ws
            self.state = "running"
            try:
                return await super().handle_websocket(request)
            finally:
                self.state = "ended"
                print(f"specload: the run has ended (record: {record or 'none'}); the page now says so, "
                      "Ctrl+C stops serving it", file=sys.stderr, flush=True)

    server = OneRunServer(
        command,
        host=host,
        port=port,
        title="specload",
        statics_path=base / "static",
        templates_path=templates,
    )
    where = "this machine only (127.0.0.1)" if is_loopback(host) else f"every address that reaches {host}"
    shown = "127.0.0.1" if host in WILDCARDS else host
    print(f"specload: dashboard at http://{shown}:{port}/?token={token} , open to {where}; "
          f"one run, one viewer; closing the page ends the run; record: {record or 'none'}",
          file=sys.stderr, flush=True)
    if not is_loopback(host):
        print("specload: WARNING anyone who can open the page can change the load (keys work there)",
              file=sys.stderr, flush=True)
    server.serve()


_TOKEN = re.compile(r"(token=)[^&\s\"']+")


def mask_token(record: logging.LogRecord) -> bool:
    """A logging filter: the message with every ``token=VALUE`` as ``token=***`` (the dashboard's
    token is a secret: only the banner that hands it to the user shows it)."""
    text = record.getMessage()
    if "token=" in text:
        record.msg, record.args = _TOKEN.sub(r"\1***", text), ()
    return True


NOTES = {
    "running": "This specload dashboard is already open in another browser: each viewer would run its "
               "own load, so one at a time.",
    "ended": "This specload dashboard's run has ended (record: {record}). One run per 'specload tui --web': "
             "start it again for another.",
}
