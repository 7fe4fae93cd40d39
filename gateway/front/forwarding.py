"""Stateful sessions from any replica: a request for a session another live replica holds is
forwarded to it; one whose holder died is answered 404, so the client starts a new session.

A session id names the process that holds it: its boot id (32 hex digits), then 32 random hex
digits. A replica that does not hold the session looks the boot id up in the replica directory
(gateway/storage/replicas.py) and passes the request on, as it came (the client's own
credentials: the holder checks them as for any request), to that process's URL, with
`X-Dex-Forwarded`: an HMAC-SHA256 of the session id under the deployment's shared secret
(`DEX_REPLICA_SECRET`). The holder never forwards a request that carries it (one hop, never a
loop) and refuses one whose mark is wrong (403). The answer, a JSON body or an SSE stream, is
streamed back unchanged.

Without the secret (or without PostgreSQL) nothing is forwarded: a session held elsewhere is
unknown here (404), as before.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import uuid
from collections.abc import Awaitable, Callable

import httpx
from starlette.types import Message, Receive, Scope, Send

from ..http.asgi import refuse

__all__ = ["FORWARDED_HEADER", "SessionForwarding"]

logger = logging.getLogger(__name__)

FORWARDED_HEADER = "x-dex-forwarded"
_SESSION_ID = re.compile(r"^[0-9a-f]{64}$")
_HOP_BY_HOP = {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade",
               b"proxy-authorization", b"proxy-connection", b"content-length", FORWARDED_HEADER.encode()}
_UPSTREAM_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade"}

# boot id -> the live holder's URL, or None (unknown or dead).
Locate = Callable[[str], Awaitable[str | None]]


class SessionForwarding:
    def __init__(self, boot_id: str, secret: str, locate: Locate) -> None:
        if not re.fullmatch(r"[0-9a-f]{32}", boot_id):
            raise ValueError("a boot id is 32 hex digits")
        self.boot_id = boot_id
        self._key = secret.encode()
        self._locate = locate
        self._http: httpx.AsyncClient | None = None

    def new_session_id(self) -> str:
        return self.boot_id + uuid.uuid4().hex

    def mark(self, session_id: str) -> str:
        return hmac.new(self._key, session_id.encode(), hashlib.sha256).hexdigest()

    async def aclose(self) -> None:
        if self._http is not None:
            client, self._http = self._http, None
            await client.aclose()

    async def handle(self, session_id: str, scope: Scope, receive: Receive, send: Send) -> bool:
        """For a session this process does not hold: True when the request was answered here
        (forwarded, or refused); False: not this module's (the SDK answers 404 Session not found)."""
        given = _header(scope, FORWARDED_HEADER.encode())
        if given is not None:
            if not hmac.compare_digest(given, self.mark(session_id)):
                await refuse(send, 403, -32600, f"{FORWARDED_HEADER}: not a request forwarded by a replica of this deployment")
                return True
            return False  # forwarded to us and not here (any more): the client starts over
        if not _SESSION_ID.match(session_id) or session_id.startswith(self.boot_id):
            return False
        try:
            url = await self._locate(session_id[:32])
        except Exception:  # noqa: BLE001 - the directory is unreachable: the session cannot be reached either
            logger.warning("session %s…: looking up its replica failed", session_id[:8], exc_info=True)
            url = None
        if url is None:
            return False  # its holder died: 404, and the client initializes again
        await self._forward(url, session_id, scope, receive, send)
        return True

    async def _forward(self, url: str, session_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])
                   if k.lower() not in _HOP_BY_HOP]
        headers.append((FORWARDED_HEADER, self.mark(session_id)))
        query = scope.get("query_string", b"").decode("latin-1")
        target = url + (f"?{query}" if query else "")
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(10, read=None), follow_redirects=False)
        request = self._http.build_request(scope["method"], target, headers=headers, content=bytes(body))
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            logger.info("session %s…: its replica at %s did not answer (%s); the client starts over",
                        session_id[:8], url, type(exc).__name__)
            await refuse(send, 404, -32600, "Session not found: the replica that held it stopped; initialize again")
            return
        try:
            out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.multi_items()
                   if k.lower() not in _UPSTREAM_HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            try:
                async for chunk in response.aiter_raw():
                    await send(_body(chunk, more=True))
            except httpx.HTTPError:
                logger.info("session %s…: its replica's stream ended early", session_id[:8])
            await send(_body(b"", more=False))
        finally:
            await response.aclose()


def _body(chunk: bytes, *, more: bool) -> Message:
    return {"type": "http.response.body", "body": chunk, "more_body": more}


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None
