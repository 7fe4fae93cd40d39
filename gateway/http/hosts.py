"""Host and Origin checks (DNS-rebinding protection): a rule of `/mcp`'s edge (http/edge.py), and
ASGI middleware in front of the admin API, /media and /metrics.

A browser tricked into calling the gateway (DNS rebinding, a hostile page) cannot fake these
headers: a Host the gateway does not answer to gets 421, a foreign Origin gets 403, both with a
JSON-RPC error body. Loopback origins count as the gateway's own only on its own port; others
must be listed in `server.allowed_origins`.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from mcp_types import INVALID_REQUEST
from starlette.types import ASGIApp, Receive, Scope, Send

from ..config.model import ServerConfig, is_loopback_host
from .asgi import Refusal, header

__all__ = ["HostOriginGuard", "HostOriginPolicy"]

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")


class HostOriginPolicy:
    """Host and Origin headers a browser-borne (DNS-rebinding) request cannot fake."""

    def __init__(self, server: ServerConfig) -> None:
        self._hosts = {h.lower() for h in server.allowed_hosts}
        if not is_loopback_host(server.host) and server.host not in ("0.0.0.0", "::"):
            self._hosts.add(server.host.lower())
        self._origins = {o.lower().rstrip("/") for o in server.allowed_origins}
        self._port = server.port

    def host_ok(self, host: str | None) -> bool:
        if not host:
            return False
        host = host.lower()
        if host in self._hosts:
            return True
        name = _strip_port(host)
        return name in _LOOPBACK_NAMES or name in self._hosts

    def origin_ok(self, origin: str | None) -> bool:
        if origin is None:
            return True  # not a browser request
        origin = origin.lower().rstrip("/")
        if origin in self._origins:
            return True
        try:
            parts = urlsplit(origin)
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        except ValueError:
            return False
        # A page on this machine is the gateway's own only on the gateway's own port: any
        # other loopback origin (a dev server on :3000) is another program's page.
        return parts.hostname in ("127.0.0.1", "localhost", "::1") and port == self._port

    def refusal(self, scope: Scope) -> Refusal | None:
        """421 for a Host the gateway does not answer to, 403 for a foreign Origin, else None."""
        host = header(scope, b"host")
        if not self.host_ok(host.decode("latin-1") if host is not None else None):
            return _BAD_HOST
        origin = header(scope, b"origin")
        if not self.origin_ok(origin.decode("latin-1") if origin is not None else None):
            return _BAD_ORIGIN
        return None


_BAD_HOST = Refusal(421, INVALID_REQUEST, "Invalid Host header: this gateway only answers its configured host names")
_BAD_ORIGIN = Refusal(403, INVALID_REQUEST, "Invalid Origin header: cross-origin requests are not allowed")


def _strip_port(host: str) -> str:
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class HostOriginGuard:
    """421 for a Host the gateway does not answer to, 403 for a foreign Origin."""

    def __init__(self, app: ASGIApp, policy: HostOriginPolicy) -> None:
        self._app = app
        self._policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (refusal := self._policy.refusal(scope)) is not None:
            await refusal.send(send)
            return
        await self._app(scope, receive, send)
