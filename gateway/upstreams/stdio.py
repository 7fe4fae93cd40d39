"""A stdio upstream: one child process, newline-delimited JSON-RPC, many concurrent calls.

`StdioConnection` speaks over a pair of byte streams (the child's stdin and stdout) and holds
a small `ProcessHandle` to reap or stop the child; `StdioConnection.start(...)` spawns the
real process and handshakes. Tests hand it in-memory streams and a fake handle instead.

Responses are matched to callers by id; progress notifications are routed by token (or to the
only call in flight) into that call's bounded queue (gateway/upstreams/notices.py), which the
call's own task hands to its client: the reader never waits for a client. Requests from the
upstream (ping, elicitation, sampling, roots) are answered in the background, at most
`max_inbound_requests` at a time; past that, at once with a JSON-RPC error. List changes and
resource updates go to `events` (the Upstream).

The `protocol` setting: `handshake` sends `initialize` (2025-11-25); `2026-07-28` asks
`server/discover` instead and sends every request with the per-request `_meta` envelope, and
listens for list changes and resource updates with `subscriptions/listen`. The process starts
in its own process group and is stopped as one (gateway/upstreams/processes.py).

Errors raised by `request` (gateway/errors.py):

* `UpstreamNotSent` -- the process is not running, or its stdin is closed (a closed pipe cannot
  have delivered a partial line); `start`/`initialize` raise it when the handshake fails.
* `UpstreamInterrupted` -- the request was written and the process exited (or its stdout
  ended, or sent a line over the size limit) before answering, or the call timed out.
* `UpstreamRpcError` -- the upstream answered with a JSON-RPC error.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup
from mcp.client.stdio import get_default_environment

from ..errors import UpstreamError, UpstreamInterrupted, UpstreamNotSent, UpstreamRpcError
from .relay import CallRelay
from .events import NO_EVENTS, ResourceSubscriptions, UpstreamEvents, listen_filter, route_event
from .notices import DEFAULT_MAX_QUEUED, CallNotices, OnDrop, ignore_drops
from .processes import start_process_group
from .rpc import (
    CLIENT_CAPABILITIES,
    CLIENT_INFO,
    DEFAULT_MAX_INBOUND,
    HANDSHAKE_VERSION,
    MODERN_VERSION,
    InboundRequests,
    answer_server_request,
    request_meta,
    result_or_raise,
)

__all__ = ["MAX_LINE_BYTES", "ProcessHandle", "StdioConnection"]

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024 * 1024
_PIPE_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
_CANCEL_SECONDS = 2.0


class ProcessHandle(Protocol):
    """What the connection needs of its child process (anyio's `Process` is one)."""

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


@dataclass
class _Pending:
    done: anyio.Event = field(default_factory=anyio.Event)
    message: dict[str, Any] | None = None
    relay: CallRelay | None = None
    notices: CallNotices | None = None  # with a relay: what the upstream says during the call

    def finish(self) -> None:
        self.done.set()
        if self.notices is not None:
            self.notices.wake()


class StdioConnection:
    """A running upstream over stdio. Create with `await StdioConnection.start(...)`, or from
    streams and a handle (then call `initialize`)."""

    def __init__(
        self,
        name: str,
        *,
        send_stream: ByteSendStream,
        receive_stream: ByteReceiveStream,
        process: ProcessHandle,
        task_group: TaskGroup,
        events: UpstreamEvents = NO_EVENTS,
        max_line_bytes: int = MAX_LINE_BYTES,
        protocol: str = "handshake",
        roots: list[dict[str, Any]] | None = None,
        max_inbound_requests: int = DEFAULT_MAX_INBOUND,
        max_queued_notifications: int = DEFAULT_MAX_QUEUED,
        on_drop: OnDrop = ignore_drops,
    ) -> None:
        self._name = name
        self._send_stream = send_stream
        self._receive_stream = receive_stream
        self._process = process
        self._task_group = task_group
        self._events = events
        self._max_line = max_line_bytes
        self._modern = protocol == MODERN_VERSION
        self._roots = roots  # the configured answer to roots/list (None: ask the client)
        self._inbound = InboundRequests(name, max_inbound_requests)
        self._max_queued = max_queued_notifications
        self._on_drop = on_drop
        self.server_capabilities: dict[str, Any] = {}
        self._watched: frozenset[str] = frozenset()
        self._subscriptions = ResourceSubscriptions()
        self._listen_scope: anyio.CancelScope | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._alive = True
        self._cancel = anyio.CancelScope()
        self._exited = anyio.Event()
        self.protocol_version: str | None = None
        task_group.start_soon(self._run)

    @classmethod
    async def start(
        cls,
        name: str,
        task_group: TaskGroup,
        *,
        command: str,
        args: list[str],
        env: dict[str, str],
        cwd: str | None,
        connect_timeout: float,
        events: UpstreamEvents = NO_EVENTS,
        protocol: str = "handshake",
        roots: list[dict[str, Any]] | None = None,
        max_inbound_requests: int = DEFAULT_MAX_INBOUND,
        max_queued_notifications: int = DEFAULT_MAX_QUEUED,
        on_drop: OnDrop = ignore_drops,
    ) -> "StdioConnection":
        # A safe default environment (PATH, HOME, ...) plus the configured variables: the
        # gateway's own secrets are not handed to every child process.
        child_env = {**get_default_environment(), **env}
        try:
            process = await start_process_group([command, *args], child_env, cwd or os.getcwd())
        except OSError as exc:
            raise UpstreamNotSent(name, "the upstream process cannot be started",
                                  detail=f"{command!r}: {exc.strerror or exc}") from None
        conn = cls(
            name,
            send_stream=process.stdin,
            receive_stream=process.stdout,
            process=process,
            task_group=task_group,
            events=events,
            protocol=protocol,
            roots=roots,
            max_inbound_requests=max_inbound_requests,
            max_queued_notifications=max_queued_notifications,
            on_drop=on_drop,
        )
        await conn.initialize(connect_timeout)
        return conn

    async def initialize(self, timeout: float) -> None:
        """The `initialize` handshake (2026-07-28: `server/discover`); on failure the connection is
        closed and UpstreamNotSent raised."""
        first = "server/discover" if self._modern else "initialize"
        try:
            with anyio.fail_after(timeout):
                if self._modern:
                    result = await self._call("server/discover", {}, None)
                    if MODERN_VERSION not in (result.get("supportedVersions") or ()):
                        raise UpstreamNotSent(self._name, "the server does not speak protocol 2026-07-28")
                    self.protocol_version = MODERN_VERSION
                else:
                    params = {"protocolVersion": HANDSHAKE_VERSION, "capabilities": CLIENT_CAPABILITIES,
                              "clientInfo": CLIENT_INFO}
                    result = await self._call("initialize", params, None)
                    self.protocol_version = str(result.get("protocolVersion") or HANDSHAKE_VERSION)
                    await self._write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        except (TimeoutError, UpstreamInterrupted, UpstreamRpcError, UpstreamNotSent) as exc:
            await self.aclose()
            reason = f"no answer to {first}" if isinstance(exc, TimeoutError) else exc.reason
            raise UpstreamNotSent(self._name, f"handshake failed: {reason}") from None
        capabilities = result.get("capabilities")
        self.server_capabilities = dict(capabilities) if isinstance(capabilities, dict) else {}
        if self._modern:
            self._listen()

    @property
    def alive(self) -> bool:
        return self._alive

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float,
        relay: CallRelay | None = None,
    ) -> dict[str, Any]:
        notices = CallNotices(self._max_queued, self._on_drop) if relay is not None else None
        answer: dict[str, Any] = {}
        failure: UpstreamError | None = None
        try:
            with anyio.fail_after(timeout):
                answer = await self._exchange(method, params, relay, anyio.current_time() + timeout, notices)
        except TimeoutError:
            failure = UpstreamInterrupted(self._name, f"no answer within {timeout:g} s")
        except UpstreamError as exc:
            failure = exc
        if notices is not None and relay is not None:
            # What the upstream said before answering reaches the client ahead of the answer (outside
            # the call timeout: a slow client must not turn a received answer into an interruption).
            await notices.flush(relay)
        if failure is not None:
            raise failure
        return result_or_raise(self._name, answer)

    async def _call(self, method: str, params: dict[str, Any] | None, relay: CallRelay | None) -> dict[str, Any]:
        return result_or_raise(self._name, await self._exchange(method, params, relay))

    async def _exchange(
        self,
        method: str,
        params: dict[str, Any] | None,
        relay: CallRelay | None,
        deadline: float = float("inf"),
        notices: CallNotices | None = None,
    ) -> dict[str, Any]:
        """Send one request and wait for its answer (the raw JSON-RPC message), handing what the
        upstream says meanwhile to the relay from this task."""
        if not self._alive:
            raise UpstreamNotSent(self._name, "the upstream process is not running")
        request_id = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        if relay is not None or self._modern:
            params_out = message.setdefault("params", {})
            params_out["_meta"] = request_meta(params_out.get("_meta") or {}, relay, modern=self._modern, token=request_id)
        pending = _Pending(relay=relay, notices=notices)
        self._pending[request_id] = pending
        try:
            await self._write(message)
            if notices is not None and relay is not None:
                await notices.deliver_until(relay, pending.done)
            else:
                await pending.done.wait()
        except anyio.get_cancelled_exc_class():
            # The caller went away (its client disconnected): tell the upstream. Not when our own
            # call timeout ran out: a write is then sent again with the same key, and the upstream
            # should finish the first one (its own fence answers the resend) rather than drop it.
            if method != "initialize" and self._alive and pending.message is None and anyio.current_time() < deadline:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_SECONDS):
                    await self._cancelled(request_id)
            raise
        finally:
            self._pending.pop(request_id, None)
        if pending.message is None:
            raise UpstreamInterrupted(self._name, "the upstream process exited before answering")
        return pending.message

    async def _cancelled(self, request_id: int) -> None:
        notice = {"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": request_id, "reason": "the caller went away"}}
        try:
            await self._write(notice)
        except UpstreamNotSent:
            pass  # the process is gone: nothing left to cancel

    async def _write(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n"
        try:
            async with self._write_lock:
                await self._send_stream.send(line.encode())
        except _PIPE_ERRORS:
            # A closed pipe means the process is gone; it cannot have read a partial line.
            self._alive = False
            raise UpstreamNotSent(self._name, "the upstream process is not running") from None

    # -- reading --------------------------------------------------------------------------

    async def _run(self) -> None:
        ended_by_upstream = False
        with self._cancel:
            try:
                ended_by_upstream = await self._read_loop()
            except Exception:  # noqa: BLE001 - whatever breaks the reader (a relay included) must
                # not crash the gateway: it is logged, and the waiting calls end interrupted below.
                logger.exception("upstream %s: stdio reader failed", self._name)
        self._alive = False
        for pending in list(self._pending.values()):
            pending.finish()
        self._exited.set()
        with anyio.CancelScope(shield=True):
            if not ended_by_upstream and self._process.returncode is None:
                # We stopped reading a live process (oversized message, reader failure): nobody
                # would drain its stdout again, so stop it instead of waiting for it to exit.
                self._process.terminate()
            await self._reap()

    async def _read_loop(self) -> bool:
        """Read and dispatch lines; True when the upstream ended its stdout, False when we gave up."""
        buffer = bytearray()
        while True:
            try:
                chunk = await self._receive_stream.receive()
            except (anyio.EndOfStream, *_PIPE_ERRORS):
                return True
            buffer += chunk
            if b"\n" in chunk:  # earlier bytes of the buffer hold no newline
                *lines, rest = buffer.split(b"\n")
                buffer = bytearray(rest)
                for line in lines:
                    if len(line) > self._max_line:
                        logger.error("upstream %s: message over %d bytes; closing", self._name, self._max_line)
                        return False
                    if line.strip():
                        await self._dispatch(line)
            if len(buffer) > self._max_line:
                logger.error("upstream %s: message over %d bytes; closing", self._name, self._max_line)
                return False

    async def _dispatch(self, line: bytes | bytearray) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            logger.warning("upstream %s: ignoring a non-JSON line on stdout", self._name)
            return
        if not isinstance(message, dict):
            return
        if "method" in message:
            if "id" in message:
                # Answered in the background: the reader must keep reading while a person answers.
                # Past the cap, refused at once (no task): an upstream cannot grow our memory.
                refusal = self._inbound.refusal(message)
                if refusal is None:
                    self._task_group.start_soon(self._answer_server_request, message)
                else:
                    await self._reply(refusal)
            elif not route_event(message, self._events):
                pending = self._call_of(message)
                if pending is not None and pending.notices is not None:
                    pending.notices.put(message)  # never waits: the call's own task delivers it
            return
        request_id = message.get("id")
        pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        if pending is not None:
            pending.message = message
            pending.finish()

    def _call_of(self, message: dict[str, Any]) -> _Pending | None:
        """The call a message belongs to: by progress token, else the only call a client waits on."""
        params = message.get("params")
        token = params.get("progressToken") if isinstance(params, dict) else None
        if isinstance(token, int) and token in self._pending:
            return self._pending[token]
        # A stdio message names no request; with one call in flight that a client waits on, it can
        # only be that one's (the gateway's own requests, e.g. a listen stream, have no relay).
        waiting = [p for p in self._pending.values() if p.relay is not None]
        return waiting[0] if len(waiting) == 1 else None

    async def _answer_server_request(self, message: dict[str, Any]) -> None:
        try:
            pending = self._call_of(message)
            reply = await answer_server_request(message, pending.relay if pending else None, self._roots)
            await self._reply(reply)
        finally:
            self._inbound.release()

    async def _reply(self, reply: dict[str, Any]) -> None:
        try:
            await self._write(reply)
        except UpstreamNotSent:
            pass  # the process is gone; nobody is left to read the answer

    # -- resource subscriptions and (2026-07-28) the listen stream -----------------------------

    async def watch(self, uris: Iterable[str], new: str | None = None) -> None:
        """Have the upstream report updates of exactly these resources."""
        self._watched = frozenset(uris)
        if self._modern:
            self._listen()
            return

        async def send(method: str, params: dict[str, Any]) -> dict[str, Any]:
            return await self._call(method, params, None)

        await self._subscriptions.sync(self, self._watched, send, new=new)

    def _listen(self) -> None:
        """(Re)open the `subscriptions/listen` request with the current filter, in the background."""
        if self._listen_scope is not None:
            self._listen_scope.cancel()
        notifications = listen_filter(self.server_capabilities, self._watched)
        if not notifications or not self._alive:
            self._listen_scope = None
            return
        self._listen_scope = scope = anyio.CancelScope()

        async def listen() -> None:
            with scope:
                try:
                    await self._call("subscriptions/listen", {"notifications": notifications}, None)
                except UpstreamError as exc:
                    logger.info("upstream %s: subscriptions/listen ended: %s", self._name, exc.reason)

        self._task_group.start_soon(listen)

    # -- closing --------------------------------------------------------------------------

    async def _reap(self) -> None:
        with anyio.move_on_after(5):
            await self._process.wait()
            return
        self._process.kill()
        with anyio.move_on_after(2):
            await self._process.wait()  # released while the event loop still runs

    async def aclose(self) -> None:
        if self._listen_scope is not None:
            self._listen_scope.cancel()
        if self._exited.is_set():
            return
        self._alive = False
        with anyio.move_on_after(1):
            try:
                await self._send_stream.aclose()
            except _PIPE_ERRORS:
                pass
        with anyio.move_on_after(2):
            await self._exited.wait()
            return
        # The whole process group, even when its leader already exited: a child it started may hold
        # the pipe (a launcher's server, a helper).
        self._process.terminate()
        with anyio.move_on_after(2):
            await self._exited.wait()
            return
        self._process.kill()
        self._cancel.cancel()
