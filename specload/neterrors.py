"""What a failed connection means, in one line: whose fault it is and what to do (no I/O but a TLS
handshake on request; shared by engine/ and watch/, so it lives beside them).

Shared by the API probe, the streaming client and the health monitor, so the same failure reads the
same everywhere. The distinctions matter for the diagnosis: a refused connection means nothing
listens (the server is down); a TLS certificate failure means the server is up but not trusted; and
running out of file descriptors is specload's own limit, not the server's (no "server down", no
pause of the load).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ssl

import aiohttp

# errors of this process, not of the network or the server
CLIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def os_error_of(e: BaseException) -> OSError | None:
    if isinstance(e, aiohttp.ClientConnectorError):
        return e.os_error
    if isinstance(e, OSError):
        return e
    return None


def is_client_side(e: BaseException) -> bool:
    """The failure is specload's own (out of file descriptors or memory), not the server's."""
    err = os_error_of(e)
    return err is not None and err.errno in CLIENT_ERRNOS


def fd_limit() -> int | None:
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return None


def raise_fd_limit(needed: int) -> int | None:
    """Raise this process's soft limit on open files toward its hard limit (a load of C streams needs
    about C descriptors, and a default soft limit of 1024 is below what C=2000 needs). Returns the
    soft limit now in force (None where there are no limits to read)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        return soft
    except (ImportError, OSError, ValueError):
        return fd_limit()


REFUSED = "connection refused (nothing listens on that port)"


def connect_reason(e: BaseException) -> str:
    """One line on why a connection could not be made (or was refused at once)."""
    if isinstance(e, aiohttp.ClientConnectorCertificateError | ssl.SSLCertVerificationError):
        cert = e.certificate_error if isinstance(e, aiohttp.ClientConnectorCertificateError) else e
        why = getattr(cert, "verify_message", None) or getattr(cert, "reason", None) or str(cert)
        return f"TLS certificate verification failed ({why}): the server is up but its certificate is not trusted here"
    if isinstance(e, aiohttp.ClientSSLError | ssl.SSLError):
        return f"TLS handshake failed ({_short(e)})"
    err = os_error_of(e)
    if err is not None and err.errno in CLIENT_ERRNOS:
        limit = fd_limit()
        where = f" (ulimit -n {limit})" if limit is not None and err.errno == errno.EMFILE else ""
        return f"specload is out of file descriptors{where}: not a server failure ({err.strerror})"
    if err is not None and err.errno == errno.ECONNREFUSED:
        return REFUSED
    if isinstance(e, TimeoutError | asyncio.TimeoutError):
        return "no answer (timeout)"
    if err is not None:
        return f"unreachable ({err.strerror or _short(err)})"
    return _short(e)


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".replace("\n", " ")[:200]


async def speaks_tls(host: str, port: int, timeout_s: float = 3.0) -> bool:
    """Does the server on host:port complete a TLS handshake? Asked when a plain-HTTP request was
    answered with something that is not HTTP: ``http://`` given for an ``https://`` server."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port, ssl=ctx), timeout_s)
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    writer.close()
    with contextlib.suppress(OSError, TimeoutError, ssl.SSLError):
        await asyncio.wait_for(writer.wait_closed(), 1.0)
    return True
