"""Requests for what another replica holds, forwarded to it: stateful sessions, and the later rounds
of a parked `input_required` request.

Sessions: a request for a session another live replica holds is forwarded to it. When its holder
died (its lease ran out, or it refuses the connection), the replica the request reached adopts the
session (`Adoption`: its stored state, gateway/storage/front_sessions.py; exactly one replica wins,
the others forward to it) and serves it (session_manager.py). Without a session store, or for a
session it does not have, the answer is 404 and the client starts a new session.

A session id names the process that opened it: its boot id (32 hex digits), then 32 random hex
digits; once adopted, the store names its holder. A replica that does not hold the session looks
the holder's boot id up in the replica directory
(gateway/storage/replicas.py) and passes the request on, as it came (the client's own
credentials: the holder checks them as for any request), to that process's URL, with
`X-Dex-Forwarded`: an HMAC-SHA256 of the session id under the deployment's shared secret
(`DEX_REPLICA_SECRET`). The holder never forwards a request that carries it (one hop, never a
loop) and refuses one whose mark is wrong (403). The answer, a JSON body or an SSE stream, is
streamed back unchanged.

Rounds: a parked request's `requestState` names the process that parked it the same way
(gateway/pipeline/rounds.py); a 2026-07-28 round that lands elsewhere is forwarded to it, marked
with the HMAC of its `requestState` (`forward_round`). When that process died the round is served
here, where the state is unknown: -32602, and the client sends its request again without it.

Without the secret (or without PostgreSQL) nothing is forwarded: a session held elsewhere is
unknown here (404), a round parked elsewhere expired (-32602), as before.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import httpx
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..http.asgi import header, read_body, refuse, replay_body
from ..pipeline.rounds import PARKED_STATE_PREFIX, parked_owner

if TYPE_CHECKING:
    from ..storage.front_sessions import FrontSessionStore

__all__ = ["FORWARDED_HEADER", "Adoption", "RoundForwardingApp", "SessionForwarding"]

logger = logging.getLogger(__name__)

FORWARDED_HEADER = "x-dex-forwarded"
_SESSION_ID = re.compile(r"^[0-9a-f]{64}$")
_HOP_BY_HOP = {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade",
               b"proxy-authorization", b"proxy-connection", b"content-length", FORWARDED_HEADER.encode()}
_NO_LIMIT = 1 << 40
_UPSTREAM_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade"}

# boot id -> the live holder's URL, or None (unknown or dead).
Locate = Callable[[str], Awaitable[str | None]]


@dataclass(frozen=True)
class Adoption:
    """A session this process took over from its dead holder: its stored state, and the request's
    `receive` (its body already read, handed on again)."""

    state: dict[str, Any]
    receive: Receive


class SessionForwarding:
    def __init__(self, boot_id: str, secret: str, locate: Locate, sessions: FrontSessionStore | None = None) -> None:
        if not re.fullmatch(r"[0-9a-f]{32}", boot_id):
            raise ValueError("a boot id is 32 hex digits")
        self.boot_id = boot_id
        self._key = secret.encode()
        self._locate = locate
        self._sessions = sessions  # sessions' owners and state (None: no adoption, a dead holder's session is 404)
        self._http: httpx.AsyncClient | None = None

    def new_session_id(self) -> str:
        return self.boot_id + uuid.uuid4().hex

    def mark(self, key: str) -> str:
        """`X-Dex-Forwarded` of a request for `key` (a session id, or a parked requestState)."""
        return hmac.new(self._key, key.encode(), hashlib.sha256).hexdigest()

    async def aclose(self) -> None:
        if self._http is not None:
            client, self._http = self._http, None
            await client.aclose()

    async def handle(self, session_id: str, scope: Scope, receive: Receive, send: Send, principal: str, *,
                     adopting: anyio.Lock, held_here: Callable[[], bool]) -> bool | Adoption:
        """For a session this process does not hold: True when the request was answered here
        (forwarded, or refused); an `Adoption` when its holder died and this process took it over
        (`principal`: who asks, who must have opened it); False: not this module's (the SDK answers:
        404 Session not found, or the session is here now). `adopting`: held while this process
        adopts the session (one request of a client adopts it, the others find it `held_here`)."""
        if await self.refused_mark(session_id, scope, send):
            return True
        if header(scope, FORWARDED_HEADER.encode()) is not None:
            return False  # forwarded to us and not here (any more): the client starts over
        if not _SESSION_ID.match(session_id):
            return False
        owner = await self._owner(session_id)
        if owner is None or owner == self.boot_id:
            return False
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return True
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        for _ in range(2):  # the holder, or (lost a race to adopt it) the replica that adopted it
            url = await self._holder_url(owner)
            if url is not None and await self._forward(url, session_id, scope, bytes(body), send):
                return True
            if self._sessions is None:
                break
            async with adopting:  # no await between leaving it and the manager holding the session
                if held_here():
                    return False
                state = await self._adopt(session_id, owner, principal)
                if state is not None:
                    return Adoption(state, replay_body(bytes(body), receive))
            owner = await self._owner(session_id)
            if owner == self.boot_id:
                return False  # adopted here meanwhile
            if owner is None:
                break
        await refuse(send, 404, -32600, "Session not found: the replica that held it stopped; initialize again")
        return True

    async def _owner(self, session_id: str) -> str | None:
        """The boot id of the session's holder: the store's (adopted sessions), else the id's own."""
        if self._sessions is not None:
            try:
                stored = await self._sessions.owner(session_id)
            except Exception:  # noqa: BLE001 - the store is unreachable: the id still names its opener
                logger.warning("looking up session …%s failed", session_id[-12:], exc_info=True)
                stored = None
            if stored is not None:
                return stored
        return None if session_id.startswith(self.boot_id) else session_id[:32]

    async def _adopt(self, session_id: str, dead: str, principal: str) -> dict[str, Any] | None:
        assert self._sessions is not None
        try:
            return await self._sessions.adopt(session_id, dead_owner=dead, principal=principal)
        except Exception:  # noqa: BLE001 - not adopted: the client initializes again
            logger.warning("adopting session …%s failed", session_id[-12:], exc_info=True)
            return None

    async def refused_mark(self, key: str, scope: Scope, send: Send) -> bool:
        """A request marked as forwarded whose mark is not `key`'s: refused (403), True."""
        given = header(scope, FORWARDED_HEADER.encode())
        if given is None or hmac.compare_digest(given.decode("latin-1"), self.mark(key)):
            return False
        await refuse(send, 403, -32600, f"{FORWARDED_HEADER}: not a request forwarded by a replica of this deployment")
        return True

    async def forward_round(self, owner: str, state: str, scope: Scope, body: bytes, send: Send) -> bool:
        """A later round of a request `owner` parked: forwarded to it, True; False when it is this
        process, the request was forwarded already, or `owner` is dead (served here: expired)."""
        if owner == self.boot_id or header(scope, FORWARDED_HEADER.encode()) is not None:
            return False
        url = await self._holder_url(owner)
        return url is not None and await self._forward(url, state, scope, body, send)

    async def _holder_url(self, boot_id: str) -> str | None:
        try:
            return await self._locate(boot_id)
        except Exception:  # noqa: BLE001 - the directory is unreachable: the holder cannot be reached either
            logger.warning("looking up replica %s… failed", boot_id[:8], exc_info=True)
            return None

    async def _forward(self, url: str, key: str, scope: Scope, body: bytes, send: Send) -> bool:
        """The request, passed to `url` and its answer streamed back: True; False when `url` did
        not answer (nothing was sent). `key`: the session id or parked state the mark is of."""
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])
                   if k.lower() not in _HOP_BY_HOP]
        headers.append((FORWARDED_HEADER, self.mark(key)))
        query = scope.get("query_string", b"").decode("latin-1")
        target = url + (f"?{query}" if query else "")
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(10, read=None), follow_redirects=False)
        request = self._http.build_request(scope["method"], target, headers=headers, content=body)
        try:
            response = await self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            logger.info("%s…: its replica at %s did not answer (%s)", key[:12], url, type(exc).__name__)
            return False
        try:
            out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.multi_items()
                   if k.lower() not in _UPSTREAM_HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": out})
            try:
                async for chunk in response.aiter_raw():
                    await send(_body(chunk, more=True))
            except httpx.HTTPError:
                logger.info("%s…: its replica's stream ended early", key[:12])
            await send(_body(b"", more=False))
        finally:
            await response.aclose()
        return True


class RoundForwardingApp:
    """In front of the MCP endpoint (below authentication): a 2026-07-28 round whose `requestState`
    another live replica parked goes to that replica; everything else to `app`, untouched."""

    def __init__(self, app: ASGIApp, forwarding: SessionForwarding) -> None:
        self.app = app
        self._forwarding = forwarding

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = header(scope, b"mcp-protocol-version") if scope["type"] == "http" else None
        if scope.get("method") != "POST" or version is None or version < b"2026":
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, _NO_LIMIT)  # the edge has capped the body already
        if body is None:
            return
        state = _parked_state(body)
        if state is not None:
            if await self._forwarding.refused_mark(state, scope, send):
                return
            owner = parked_owner(state)
            if owner is not None and await self._forwarding.forward_round(owner, state, scope, body, send):
                return
        await self.app(scope, replay_body(body, receive), send)


def _parked_state(body: bytes) -> str | None:
    if PARKED_STATE_PREFIX.encode() not in body:
        return None
    try:
        message = json.loads(body)
    except ValueError:
        return None
    params = message.get("params") if isinstance(message, dict) else None
    state = params.get("requestState") if isinstance(params, dict) else None
    return state if isinstance(state, str) and state.startswith(PARKED_STATE_PREFIX) else None


def _body(chunk: bytes, *, more: bool) -> Message:
    return {"type": "http.response.body", "body": chunk, "more_body": more}
