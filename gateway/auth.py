"""Who is calling, and whether the request may reach the MCP endpoint at all.

Bearer tokens are stored as SHA-256 hex (a leaked config holds no usable token). Host and
Origin are checked by the gateway itself (DNS-rebinding protection), bodies are size-capped,
and every refusal is a JSON-RPC error body, never a stack trace.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi import read_body, replay_body
from .config import AuthConfig, ServerConfig, TokenConfig, is_loopback_host
from .principals import ANONYMOUS, PRINCIPAL_SCOPE_KEY

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Authenticator:
    config: AuthConfig

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def principal(self, authorization: str | None) -> str | None:
        """The principal a bearer token maps to; None when the token is missing or unknown."""
        if not self.config.tokens:
            return ANONYMOUS
        token = _bearer(authorization)
        if token is None:
            return None
        entry = self._match(token)
        return entry.principal if entry else None

    def tool_globs(self, principal: str) -> list[str] | None:
        for entry in self.config.tokens:
            if entry.principal == principal:
                return entry.tools
        return None

    def is_admin(self, authorization: str | None) -> bool:
        token = _bearer(authorization)
        expected = self.config.admin_token_sha256
        if token is None or expected is None:
            return False
        return hmac.compare_digest(sha256_hex(token), expected.lower())

    def _match(self, token: str) -> TokenConfig | None:
        digest = sha256_hex(token)
        found = None
        for entry in self.config.tokens:
            # Compare every entry in constant time so timing does not reveal which one matched.
            if hmac.compare_digest(digest, entry.token_sha256.lower()):
                found = entry
        return found


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


class HostOriginPolicy:
    """Host and Origin headers a browser-borne (DNS-rebinding) request cannot fake."""

    def __init__(self, server: ServerConfig) -> None:
        self._hosts = {h.lower() for h in server.allowed_hosts}
        if not is_loopback_host(server.host) and server.host not in ("0.0.0.0", "::"):
            self._hosts.add(server.host.lower())
        self._origins = {o.lower().rstrip("/") for o in server.allowed_origins}

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
            hostname = urlsplit(origin).hostname
        except ValueError:
            return False
        return hostname in ("127.0.0.1", "localhost", "::1")


def _strip_port(host: str) -> str:
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


class McpGuard:
    """ASGI middleware in front of the MCP endpoint: Host/Origin, bearer auth, body size."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator, policy: HostOriginPolicy, max_body: int) -> None:
        self._app = app
        self._auth = authenticator
        self._policy = policy
        self._max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if not self._policy.host_ok(headers.get("host")):
            await _reject(send, 421, -32600, "Invalid Host header: this gateway only answers its configured host names")
            return
        if not self._policy.origin_ok(headers.get("origin")):
            await _reject(send, 403, -32600, "Invalid Origin header: cross-origin requests are not allowed")
            return
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self._max_body):
            await _reject(send, 413, -32600, f"Request body too large: the limit is {self._max_body} bytes")
            return
        principal = self._auth.principal(headers.get("authorization"))
        if principal is None:
            await _reject(
                send,
                401,
                -32001,
                "Unauthorized: send 'Authorization: Bearer <token>' with a token configured in auth.tokens",
                extra_headers=[(b"www-authenticate", b'Bearer realm="dex-mcp-gateway"')],
            )
            return
        scope[PRINCIPAL_SCOPE_KEY] = principal
        if length is None and scope.get("method") == "POST":
            # A chunked body has no declared size: read it (up to the limit) before the SDK does.
            body = await read_body(receive, self._max_body)
            if body is None:
                await _reject(send, 413, -32600, f"Request body too large: the limit is {self._max_body} bytes")
                return
            receive = replay_body(body, receive)
        await self._app(scope, receive, send)


async def _reject(
    send: Send, status: int, code: int, message: str, extra_headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra_headers or [])})
    await send({"type": "http.response.body", "body": body})
