"""The stdio channel: one child process, newline-delimited JSON-RPC, many exchanges at once.

`StdioChannel` speaks over a pair of byte streams (the child's stdin and stdout) and holds a
small `ProcessHandle` to reap or stop the child; `StdioChannel.start(...)` spawns the real
process (in its own process group, stopped as one: gateway/upstreams/processes.py). Tests hand
it in-memory streams and a fake handle instead.

One reader task reads stdout: answers are matched to their exchange by id; the upstream's
requests and notifications go to the listener of the exchange they name (a progress token), or
of the only exchange a client waits on, else to `outside`. Listeners never make the reader wait
for a client.

"Did any byte leave": a closed pipe (the process is gone) cannot have delivered a partial line:
`UpstreamNotSent`. Written, then the process exited (or its stdout ended, or sent a line over
the size limit) before answering: `UpstreamInterrupted`.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import ByteReceiveStream, ByteSendStream, TaskGroup
from mcp.client.stdio import get_default_environment

from ...errors import UpstreamInterrupted, UpstreamNotSent
from ..processes import start_process_group
from ..sse import StreamCursor
from .base import UNBOUND, Answer, Listener, Message, Negotiated

if TYPE_CHECKING:
    from ..credentials import Bearer

__all__ = ["MAX_LINE_BYTES", "ProcessHandle", "StdioChannel"]

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024 * 1024
_PIPE_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
_NOT_RUNNING = "the upstream process is not running"


class ProcessHandle(Protocol):
    """What the channel needs of its child process (anyio's `Process` is one)."""

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


@dataclass
class _Pending:
    listener: Listener | None
    done: anyio.Event = field(default_factory=anyio.Event)
    message: Message | None = None


class StdioChannel:
    """A running upstream process. Create with `await StdioChannel.start(...)`, or from streams and
    a handle."""

    shared = False  # the process is this gateway process's child

    def __init__(
        self,
        name: str,
        *,
        send_stream: ByteSendStream,
        receive_stream: ByteReceiveStream,
        process: ProcessHandle,
        task_group: TaskGroup,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.name = name
        self._send_stream = send_stream
        self._receive_stream = receive_stream
        self._process = process
        self._max_line = max_line_bytes
        self.outside = UNBOUND
        self._pending: dict[int, _Pending] = {}
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._alive = True
        self._cancel = anyio.CancelScope()
        self._exited = anyio.Event()
        task_group.start_soon(self._run)

    @classmethod
    async def start(cls, name: str, task_group: TaskGroup, *, command: str, args: list[str], env: dict[str, str],
                    cwd: str | None) -> "StdioChannel":
        # A safe default environment (PATH, HOME, ...) plus the configured variables: the
        # gateway's own secrets are not handed to every child process.
        child_env = {**get_default_environment(), **env}
        try:
            process = await start_process_group([command, *args], child_env, cwd or os.getcwd())
        except OSError as exc:
            raise UpstreamNotSent(name, "the upstream process cannot be started",
                                  detail=f"{command!r}: {exc.strerror or exc}") from None
        return cls(name, send_stream=process.stdin, receive_stream=process.stdout, process=process,
                   task_group=task_group)

    @property
    def alive(self) -> bool:
        return self._alive

    def cancels_by_closing(self, negotiated: Negotiated) -> bool:
        return False  # one shared stdout: a cancellation is a message

    async def events(self, negotiated: Negotiated, cursor: StreamCursor, opened: anyio.Event) -> bool | None:
        opened.set()
        return None  # everything outside an exchange already arrives on stdout

    async def exchange(self, message: Message, negotiated: Negotiated, listener: Listener | None,
                       bearer: Bearer | None = None) -> Answer | None:
        if not self._alive:
            raise UpstreamNotSent(self.name, _NOT_RUNNING)
        request_id = message.get("id")
        if "method" not in message or not isinstance(request_id, int):
            await self._write(message)  # a notification, or our reply to the upstream's request
            return None
        pending = _Pending(listener)
        self._pending[request_id] = pending
        try:
            await self._write(message)
            await pending.done.wait()
        finally:
            self._pending.pop(request_id, None)
        if pending.message is None:
            raise UpstreamInterrupted(self.name, "the upstream process exited before answering")
        return Answer(pending.message)

    async def _write(self, message: Message) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n"
        try:
            async with self._write_lock:
                await self._send_stream.send(line.encode())
        except _PIPE_ERRORS:
            # A closed pipe means the process is gone; it cannot have read a partial line.
            self._alive = False
            raise UpstreamNotSent(self.name, _NOT_RUNNING) from None

    # -- reading --------------------------------------------------------------------------

    async def _run(self) -> None:
        ended_by_upstream = False
        with self._cancel:
            try:
                ended_by_upstream = await self._read_loop()
            except Exception:  # noqa: BLE001 - whatever breaks the reader (a listener included) must
                # not crash the gateway: it is logged, and the waiting exchanges end interrupted below.
                logger.exception("upstream %s: stdio reader failed", self.name)
        self._alive = False
        for pending in list(self._pending.values()):
            pending.done.set()
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
                        logger.error("upstream %s: message over %d bytes; closing", self.name, self._max_line)
                        return False
                    if line.strip():
                        await self._dispatch(line)
            if len(buffer) > self._max_line:
                logger.error("upstream %s: message over %d bytes; closing", self.name, self._max_line)
                return False

    async def _dispatch(self, line: bytes | bytearray) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            logger.warning("upstream %s: ignoring a non-JSON line on stdout", self.name)
            return
        if not isinstance(message, dict):
            return
        if "method" in message:
            listener = self._listener_of(message)
            if "id" in message:
                await listener.on_request(message)
            else:
                listener.on_notification(message)
            return
        request_id = message.get("id")
        pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        if pending is not None:
            pending.message = message
            pending.done.set()

    def _listener_of(self, message: Message) -> Listener:
        """The exchange a message belongs to: by progress token, else the only one a client waits on."""
        params = message.get("params")
        token = params.get("progressToken") if isinstance(params, dict) else None
        if isinstance(token, int) and (pending := self._pending.get(token)) is not None and pending.listener:
            return pending.listener
        # A stdio message names no request; with one exchange in flight that a client waits on, it
        # can only be that one's (the session's own requests, e.g. a listen stream, have no client).
        waiting = [p.listener for p in self._pending.values() if p.listener is not None and p.listener.client]
        return waiting[0] if len(waiting) == 1 else self.outside

    # -- closing --------------------------------------------------------------------------

    async def _reap(self) -> None:
        with anyio.move_on_after(5):
            await self._process.wait()
            return
        self._process.kill()
        with anyio.move_on_after(2):
            await self._process.wait()  # released while the event loop still runs

    async def aclose(self, negotiated: Negotiated | None = None) -> None:
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
