"""The Streamable-HTTP channel: each exchange one POST over an `HttpTransport` (keep-alive pool;
gateway/upstreams/transport.py), its answer JSON or an SSE stream (resumed when the server ends
it early), and the session's standalone GET stream.

A request's answer stream is read to its end whatever its client does: a stateful upstream
session (the SDK's) routes every call's messages through one loop, so a stream left unread would
stall the other principals' calls on that session. What the upstream says during it goes to the
exchange's listener, which never makes the reader wait for a client.

The session header: every exchange of a handshake-era session carries its `Mcp-Session-Id`; the
`initialize` answer's header is returned with it (`Answer.session_id`); a 404 for a session
raises `SessionLost` (the upstream did not process the request). 2026-07-28 requests carry
`Mcp-Method` and `Mcp-Name`, and closing a request's stream cancels it.

"Did any byte leave", as the transport reports it: `RequestNotSent` -> `UpstreamNotSent`
(`LocalLimitReached` with its own text: the pool stayed busy, or the open-file limit is near);
`RequestMaybeSent` -> `UpstreamInterrupted`, and `ResponseTooLarge` -> `UpstreamAnswerTooLarge`
(an answer, or one SSE event, over the cap, read no further). An HTTP error status without a
JSON-RPC error body, a body that is not JSON, or a stream without an answer: `UpstreamInterrupted`.
A 401 (or a 403 with a Bearer challenge) is `UpstreamUnauthorized`, a kind of `UpstreamNotSent`:
the upstream refused the credentials before running anything; its text names the upstream's
challenge (error, scope, resource_metadata).

Authorization: a request's own token (`bearer`: a caller's exchanged token) if it has one, else the
channel's owner's: `caller`'s exchanged token for a channel that carries one caller's own session
(token_exchange to an upstream that keeps sessions; gateway/upstreams/caller_sessions.py), else the
gateway's own for this upstream (`credentials`, auth.mode client_credentials or token_exchange;
gateway/upstreams/credentials.py), else the configured headers (auth.mode static).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pydantic_core
from mcp.shared.inbound import encode_header_value

from ...auth.principals import Identity
from ...errors import (
    LocalLimitReached,
    RequestMaybeSent,
    RequestNotSent,
    ResponseTooLarge,
    SessionLost,
    TransportError,
    UpstreamAnswerTooLarge,
    UpstreamError,
    UpstreamInterrupted,
    UpstreamNotSent,
    UpstreamUnauthorized,
)
from ...name_header import name_key
from ..rpc import MODERN_VERSION
from ..credentials import Bearer, UpstreamCredentials
from ..sse import StreamCursor, read_answer, read_events
from ..http11 import Http11Transport
from ..transport import HttpRequest, HttpResponse, HttpTransport, ssl_context
from .base import UNBOUND, Answer, Listener, Message, Negotiated

__all__ = ["SESSION_HEADER", "HttpChannel", "unauthorized_text"]

logger = logging.getLogger(__name__)

_BROKE = "the connection to the upstream broke after the request was sent"
SESSION_HEADER = "mcp-session-id"
_ACCEPT = "application/json, text/event-stream"
_DRAIN_SECONDS = 0.25
_NO_ANSWER_ID = -1  # the standalone stream answers none of our requests


class HttpChannel:
    shared = True  # any gateway process reaches the same endpoint

    def __init__(
        self,
        name: str,
        url: str,
        *,
        headers: Mapping[str, str],
        connect_timeout: float,
        transport: HttpTransport | None = None,
        tls_ca_file: str | None = None,
        max_response_bytes: int | None = None,
        max_connections: int | None = None,
        pool_timeout: float = 30.0,
        credentials: UpstreamCredentials | None = None,
        caller: Identity | None = None,
        owns_transport: bool = True,
    ) -> None:
        self._owns_transport = owns_transport  # False: a borrowed pool, closed by its owner
        if transport is None:
            try:
                context = ssl_context(tls_ca_file) if tls_ca_file else None
            except OSError as exc:  # ssl.SSLError included: a missing or malformed PEM file
                raise UpstreamNotSent(name, "the upstream's TLS settings cannot be loaded",
                                      detail=f"tls_ca_file {tls_ca_file!r}: {exc}") from None
            transport = Http11Transport(connect_timeout=connect_timeout, ssl_context=context,
                                        max_response_bytes=max_response_bytes, max_connections=max_connections,
                                        pool_timeout=pool_timeout)
        self.name = name
        self.url = url
        self.transport = transport
        self.outside = UNBOUND
        self._headers = {key.lower(): value for key, value in headers.items()}
        # The gateway's own token for this upstream (client_credentials, token_exchange), on every
        # request that carries no caller's token; None or static: the configured headers only.
        self._credentials = credentials if credentials is not None and credentials.active else None
        # Whose session this channel carries (None: the gateway's own); the latest identity of that
        # principal, so a renewed access token is the one exchanged.
        self.caller = caller
        self._closed = False

    @property
    def alive(self) -> bool:
        return not self._closed  # one failed exchange does not end the pool

    def cancels_by_closing(self, negotiated: Negotiated) -> bool:
        return negotiated.version == MODERN_VERSION

    async def _authorized(self, headers: dict[str, str], bearer: Bearer | None) -> dict[str, str]:
        """`headers` with the request's Authorization: the caller's token, else the gateway's own."""
        if bearer is None and self._credentials is not None:
            bearer = await self._credentials.bearer(self.caller)
        if bearer is not None:
            headers["authorization"] = bearer.header
        return headers

    def _base_headers(self, negotiated: Negotiated) -> dict[str, str]:
        headers = {**self._headers, "accept": _ACCEPT}
        if negotiated.version is not None:
            headers["mcp-protocol-version"] = negotiated.version
        if negotiated.session_id is not None:
            headers[SESSION_HEADER] = negotiated.session_id
        return headers

    # -- one exchange ---------------------------------------------------------------------

    async def exchange(self, message: Message, negotiated: Negotiated, listener: Listener | None,
                       bearer: Bearer | None = None) -> Answer | None:
        headers = {**self._base_headers(negotiated), "content-type": "application/json"}
        if bearer is not None or self._credentials is not None:  # static: the headers as configured
            headers = await self._authorized(headers, bearer)
        body = pydantic_core.to_json(message)  # compact UTF-8 JSON, as json.dumps would, in one C call
        method = message.get("method")
        if negotiated.version == MODERN_VERSION and isinstance(method, str):  # requests and notifications
            headers["mcp-method"] = method
            key = name_key(method)  # the body parameter Mcp-Name mirrors (gateway/name_header.py)
            name = (message.get("params") or {}).get(key) if key else None
            if isinstance(name, str):
                headers["mcp-name"] = encode_header_value(name)
        if method is None or "id" not in message:
            await self._send_only(message, HttpRequest("POST", self.url, headers, body))
            return None
        entered = False
        try:
            async with self.transport.stream(HttpRequest("POST", self.url, headers, body)) as response:
                entered = True
                session_id = response.headers.get(SESSION_HEADER) or None
                answer = await self._read_response(negotiated, response, message["id"], listener or self.outside,
                                                   headers.get("authorization"))
                return Answer(answer, session_id)
        except RequestNotSent as exc:
            if entered:  # only a nested exchange can raise it here; ours was sent
                raise UpstreamInterrupted(self.name, _BROKE, detail=str(exc)) from None
            if isinstance(exc, LocalLimitReached):  # the gateway's own limit: its text says which
                raise UpstreamNotSent(self.name, str(exc)) from None
            raise UpstreamNotSent(self.name, "could not connect to the upstream", detail=str(exc)) from None
        except ResponseTooLarge as exc:
            logger.warning("upstream %s: %s: stopped reading at %d bytes and closed the connection", self.name,
                           exc, exc.read)
            raise UpstreamAnswerTooLarge(self.name, read=exc.read, cap=exc.cap) from None
        except RequestMaybeSent as exc:
            raise UpstreamInterrupted(self.name, _BROKE, detail=str(exc)) from None

    async def _send_only(self, message: Message, request: HttpRequest) -> None:
        """A notification, or a reply to the upstream's request: posted, its answer read and dropped."""
        try:
            async with self.transport.stream(request) as response:
                await response.aread()
        except TransportError as exc:
            what = message.get("method") or "the answer to its request"
            raise UpstreamNotSent(self.name, f"{what} failed", detail=str(exc)) from None

    async def _read_response(
        self, negotiated: Negotiated, response: HttpResponse, request_id: int, listener: Listener,
        authorization: str | None = None,
    ) -> Message:
        status = response.status
        content_type = (response.headers.get("content-type") or "").lower()
        if status == 404 and negotiated.session_id is not None:
            raise SessionLost()
        challenge = response.headers.get("www-authenticate") or ""
        if status == 401 or (status == 403 and challenge.lower().startswith("bearer")):
            await response.drain(_DRAIN_SECONDS)
            # The upstream refused the credentials before running anything: not sent.
            raise UpstreamUnauthorized(self.name, unauthorized_text(status, challenge, authorization is not None))
        if status >= 400 or status == 202:
            if content_type.startswith("application/json"):
                parsed = _loads(await response.aread())
                if isinstance(parsed, dict) and "error" in parsed:
                    return parsed
            else:
                await response.drain(_DRAIN_SECONDS)  # keep the connection when the body is short
            raise UpstreamInterrupted(self.name, f"HTTP status {status}")
        if content_type.startswith("application/json"):
            parsed = _loads(await response.aread())
            if parsed is None:
                raise UpstreamInterrupted(self.name, "unreadable response body (not JSON)")
            return parsed  # type: ignore[no-any-return]
        if content_type.startswith("text/event-stream"):
            answer = await self._read_event_stream(negotiated, response, request_id, listener, authorization)
            if answer is None:
                raise UpstreamInterrupted(self.name, "the response stream ended without an answer")
            return answer
        raise UpstreamInterrupted(self.name, f"unexpected content type {content_type or '(none)'!r} (HTTP {status})")

    async def _read_event_stream(
        self, negotiated: Negotiated, response: HttpResponse, request_id: int, listener: Listener,
        authorization: str | None = None,
    ) -> Message | None:
        """Read SSE events until our answer; resume with Last-Event-ID when the server closes early."""

        async def on_notification(message: Message) -> None:
            listener.on_notification(message)  # never waits for the client: the stream keeps being read

        @asynccontextmanager
        async def resume(last_event_id: str) -> AsyncIterator[HttpResponse | None]:
            headers = {**self._base_headers(negotiated), "accept": "text/event-stream", "last-event-id": last_event_id}
            if authorization is not None:
                headers["authorization"] = authorization  # the same credentials as the request it resumes
            try:
                async with self.transport.stream(HttpRequest("GET", self.url, headers)) as reopened:
                    content_type = (reopened.headers.get("content-type") or "").lower()
                    ok = reopened.status == 200 and content_type.startswith("text/event-stream")
                    yield reopened if ok else None
            except TransportError as exc:
                logger.info("upstream %s: resuming the event stream failed: %s", self.name, exc)
                yield None

        return await read_answer(
            self.name, response, request_id,
            on_request=listener.on_request, on_notification=on_notification, resume=resume,
            on_pause=listener.on_pause,
        )  # fmt: skip

    # -- the handshake era's standalone GET stream ---------------------------------------------

    async def events(self, negotiated: Negotiated, cursor: StreamCursor, opened: anyio.Event) -> bool | None:
        """One GET: True when it was open and ended, False when it failed, None when refused."""
        if negotiated.session_id is None:
            return None  # only a session has one
        try:
            headers = await self._authorized({**self._base_headers(negotiated), "accept": "text/event-stream"}, None)
        except UpstreamError as exc:
            logger.info("upstream %s: no token for the standalone stream: %s", self.name, exc.reason)
            return False
        if cursor.last_event_id is not None:
            headers["last-event-id"] = cursor.last_event_id
        outside = self.outside

        async def on_notification(message: Message) -> None:
            outside.on_notification(message)

        try:
            async with self.transport.stream(HttpRequest("GET", self.url, headers)) as response:
                content_type = (response.headers.get("content-type") or "").lower()
                if response.status >= 500:
                    return False  # try again later
                # 405: none offered; 404: the session is gone (a new session opens its own); 400/409:
                # refused, or another stream is already open; an answer that is not a stream.
                if response.status >= 400 or not content_type.startswith("text/event-stream"):
                    logger.debug("upstream %s: no standalone stream (HTTP %d)", self.name, response.status)
                    return None
                opened.set()
                await read_events(self.name, response, _NO_ANSWER_ID, cursor,
                                  on_request=outside.on_request, on_notification=on_notification)
                return True
        except (TransportError, UpstreamError) as exc:
            logger.info("upstream %s: standalone stream broke: %s", self.name, exc)
            return False

    async def aclose(self, negotiated: Negotiated | None = None) -> None:
        self._closed = True
        if negotiated is not None and negotiated.session_id is not None:
            # Courtesy DELETE so a stateful upstream can free the session; failures do not matter.
            with anyio.move_on_after(2):
                try:
                    headers = await self._authorized(self._base_headers(negotiated), None)
                    async with self.transport.stream(HttpRequest("DELETE", self.url, headers)):
                        pass
                except (TransportError, UpstreamError):
                    pass
        if self._owns_transport:
            await self.transport.aclose()


def unauthorized_text(status: int, challenge: str, sent_credentials: bool) -> str:
    """What a client is told when the upstream refuses the gateway's request (401, or 403 with a
    Bearer challenge): its own `error`, `error_description`, `scope` and `resource_metadata`."""
    params = dict(_CHALLENGE_PARAM.findall(challenge))
    what = "refused the credentials the gateway sent" if sent_credentials else "requires credentials the gateway did not send"
    parts = [f"the upstream {what} (HTTP {status}"]
    if params.get("error"):
        parts.append(f", {params['error']}")
    if params.get("error_description"):
        parts.append(f": {params['error_description']}")
    parts.append(")")
    if params.get("scope"):
        parts.append(f"; it requires scope {params['scope']!r}")
    if params.get("resource_metadata"):
        parts.append(f"; it describes the token it takes at {params['resource_metadata']}")
    parts.append("; configure this upstream's auth (docs/auth.md, \"Upstream credentials\")")
    return "".join(parts)


_CHALLENGE_PARAM = re.compile(r'([A-Za-z_]+)="([^"]*)"')


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None
