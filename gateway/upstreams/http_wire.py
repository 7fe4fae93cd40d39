"""One exchange with a Streamable-HTTP upstream: the request's headers and body, and reading its
answer (JSON, or an SSE stream resumed when the server ends it early), with the upstream's own
requests and notifications during it handed on. `HttpConnection` (http.py) adds the protocol
negotiation and the session on top.

A call's answer stream is read to its end whatever its client does: a stateful upstream session
(the SDK's) routes every call's messages through one loop, so a stream left unread would stall
the other principals' calls on that session. Progress and log notifications wait in the call's
bounded queue (gateway/upstreams/notices.py) for a task of the call that hands them to its
client; the upstream's requests are answered by tasks of the call (at most
`max_inbound_requests` at a time over the connection, past that refused at once).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup
from mcp.shared.inbound import encode_header_value

from ..errors import (
    LocalLimitReached,
    RequestMaybeSent,
    RequestNotSent,
    ResponseTooLarge,
    SessionLost,
    TransportError,
    UpstreamAnswerTooLarge,
    UpstreamInterrupted,
    UpstreamNotSent,
)
from ..name_header import name_key
from .relay import CallRelay
from .events import UpstreamEvents, route_event
from .notices import DEFAULT_MAX_QUEUED, CallNotices, OnDrop, ignore_drops
from .rpc import DEFAULT_MAX_INBOUND, MODERN_VERSION, InboundRequests, answer_server_request, result_or_raise
from .sse import read_answer
from .transport import HttpRequest, HttpResponse, HttpTransport

__all__ = ["SESSION_HEADER", "Era", "HttpWire"]

logger = logging.getLogger(__name__)

_BROKE = "the connection to the upstream broke after the request was sent"
SESSION_HEADER = "mcp-session-id"
_ACCEPT = "application/json, text/event-stream"
_DRAIN_SECONDS = 0.25


@dataclass(frozen=True, slots=True)
class Era:
    """What every request of one negotiated connection carries. Never mutated: a probe or a
    handshake uses its own `Era`, so concurrent calls cannot pick up a provisional one."""

    version: str | None  # None only for the `initialize` request itself
    session_id: str | None = None


class HttpWire:
    def __init__(self, name: str, url: str, headers: Mapping[str, str], transport: HttpTransport,
                 events: UpstreamEvents, roots: list[dict[str, Any]] | None = None, *,
                 max_inbound_requests: int = DEFAULT_MAX_INBOUND, max_queued_notifications: int = DEFAULT_MAX_QUEUED,
                 on_drop: OnDrop = ignore_drops) -> None:
        self.name = name
        self.inbound = InboundRequests(name, max_inbound_requests)  # the upstream's requests being answered
        self._max_queued = max_queued_notifications
        self._on_drop = on_drop
        self.roots = roots  # the configured answer to roots/list (None: ask the client)
        self.url = url
        self.events = events
        self.transport = transport
        self._headers = {key.lower(): value for key, value in headers.items()}
        self._ids = itertools.count(1)

    async def _notify(self, era: Era, method: str, params: dict[str, Any] | None = None) -> None:
        notification: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            notification["params"] = params
        body = json.dumps(notification).encode()
        try:
            async with self.transport.stream(HttpRequest("POST", self.url, self._json_headers(era), body)) as response:
                await response.aread()
        except TransportError as exc:
            raise UpstreamNotSent(self.name, f"{method} failed", detail=str(exc)) from None

    def _message(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            message["params"] = params
        return message

    def base_headers(self, era: Era) -> dict[str, str]:
        headers = {**self._headers, "accept": _ACCEPT}
        if era.version is not None:
            headers["mcp-protocol-version"] = era.version
        if era.session_id is not None:
            headers[SESSION_HEADER] = era.session_id
        return headers

    def _json_headers(self, era: Era) -> dict[str, str]:
        headers = self.base_headers(era)
        headers["content-type"] = "application/json"
        return headers

    async def _send_cancelled(self, era: Era, request_id: int) -> None:
        try:
            await self._notify(era, "notifications/cancelled", {"requestId": request_id, "reason": "the caller went away"})
        except UpstreamNotSent as exc:
            logger.debug("upstream %s: notifications/cancelled not sent: %s", self.name, exc.detail)

    async def _post(
        self,
        era: Era,
        message: dict[str, Any],
        relay: CallRelay | None,
        on_headers: Callable[[Mapping[str, str]], None] | None = None,
    ) -> dict[str, Any]:
        headers = self._json_headers(era)
        if era.version == MODERN_VERSION:
            method = message["method"]
            headers["mcp-method"] = method
            key = name_key(method)  # the body parameter Mcp-Name mirrors (gateway/name_header.py)
            name = (message.get("params") or {}).get(key) if key else None
            if isinstance(name, str):
                headers["mcp-name"] = encode_header_value(name)
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        entered = False
        try:
            async with self.transport.stream(HttpRequest("POST", self.url, headers, body)) as response:
                entered = True
                if on_headers is not None:
                    on_headers(response.headers)
                return await self._read_response(era, response, message["id"], relay)
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

    async def _read_response(
        self, era: Era, response: HttpResponse, request_id: int, relay: CallRelay | None
    ) -> dict[str, Any]:
        status = response.status
        content_type = (response.headers.get("content-type") or "").lower()
        if status == 404 and era.session_id is not None:
            raise SessionLost()
        if status >= 400 or status == 202:
            if content_type.startswith("application/json"):
                parsed = _loads(await response.aread())
                if isinstance(parsed, dict) and "error" in parsed:
                    return result_or_raise(self.name, parsed)
            else:
                await response.drain(_DRAIN_SECONDS)  # keep the connection when the body is short
            raise UpstreamInterrupted(self.name, f"HTTP status {status}")
        if content_type.startswith("application/json"):
            parsed = _loads(await response.aread())
            if parsed is None:
                raise UpstreamInterrupted(self.name, "unreadable response body (not JSON)")
            return result_or_raise(self.name, parsed)
        if content_type.startswith("text/event-stream"):
            return await self._read_event_stream(era, response, request_id, relay)
        raise UpstreamInterrupted(self.name, f"unexpected content type {content_type or '(none)'!r} (HTTP {status})")

    async def _read_event_stream(
        self, era: Era, response: HttpResponse, request_id: int, relay: CallRelay | None
    ) -> dict[str, Any]:
        """Read SSE events until our answer; resume with Last-Event-ID when the server closes early."""
        notices = CallNotices(self._max_queued, self._on_drop) if relay is not None else None

        async def on_notification(message: dict[str, Any]) -> None:
            if not route_event(message, self.events) and notices is not None:
                notices.put(message)  # never waits for the client: the stream keeps being read

        @asynccontextmanager
        async def resume(last_event_id: str) -> AsyncIterator[HttpResponse | None]:
            headers = {**self.base_headers(era), "accept": "text/event-stream", "last-event-id": last_event_id}
            try:
                async with self.transport.stream(HttpRequest("GET", self.url, headers)) as reopened:
                    content_type = (reopened.headers.get("content-type") or "").lower()
                    ok = reopened.status == 200 and content_type.startswith("text/event-stream")
                    yield reopened if ok else None
            except TransportError as exc:
                logger.info("upstream %s: resuming the event stream failed: %s", self.name, exc)
                yield None

        async def read(on_request: Callable[[dict[str, Any]], Awaitable[None]]) -> dict[str, Any] | None:
            return await read_answer(
                self.name, response, request_id,
                on_request=on_request, on_notification=on_notification, resume=resume,
                on_pause=relay.pause_stream if relay is not None else None,
            )  # fmt: skip

        if relay is None or notices is None:
            # The gateway's own request: the upstream's requests are answered at once, with no client.
            answer = await read(lambda message: self.answer_request(era, message, None))
        else:
            answer = await self._read_for_client(era, relay, notices, read)
        if answer is None:
            raise UpstreamInterrupted(self.name, "the response stream ended without an answer")
        return result_or_raise(self.name, answer)

    async def _read_for_client(
        self, era: Era, relay: CallRelay, notices: CallNotices,
        read: Callable[[Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[dict[str, Any] | None]],
    ) -> dict[str, Any] | None:
        """Read a call's stream while tasks of the call hand its notifications to the client and
        answer the upstream's requests; what is still queued at the answer goes out ahead of it."""
        answer: dict[str, Any] | None = None
        failure: Exception | None = None
        stop = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(notices.deliver_until, relay, stop)
            async with anyio.create_task_group() as asking:
                try:
                    answer = await read(lambda message: self.answer_later(era, message, relay, asking))
                except Exception as exc:  # noqa: BLE001 - raised below, outside the task groups (unwrapped)
                    failure = exc
                asking.cancel_scope.cancel()  # questions of a call that ended are moot
            stop.set()
            notices.wake()
        await notices.flush(relay)  # what came before the answer (or the break) goes out ahead of it
        if failure is not None:
            raise failure
        return answer

    async def answer_later(self, era: Era, message: dict[str, Any], relay: CallRelay | None, tasks: TaskGroup) -> None:
        """Answer a request of the upstream in a task of `tasks`, so its stream keeps being read while
        a person answers; past `max_inbound_requests` at once, with an error (no task)."""
        refusal = self.inbound.refusal(message)
        if refusal is not None:
            await self._reply(era, message, refusal)
            return

        async def ask() -> None:
            try:
                await self.answer_request(era, message, relay)
            finally:
                self.inbound.release()

        tasks.start_soon(ask)

    async def answer_request(self, era: Era, message: dict[str, Any], relay: CallRelay | None) -> None:
        """Answer a request the upstream made (elicitation, sampling, roots, ping...): relayed to the
        calling client, or answered by the gateway; never left without an answer."""
        await self._reply(era, message, await answer_server_request(message, relay, self.roots))

    async def _reply(self, era: Era, message: dict[str, Any], reply: dict[str, Any]) -> None:
        body = json.dumps(reply, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            async with self.transport.stream(HttpRequest("POST", self.url, self._json_headers(era), body)) as response:
                await response.aread()
        except TransportError as exc:
            logger.warning("upstream %s: could not answer its %s request: %s", self.name, message.get("method"), exc)


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None
