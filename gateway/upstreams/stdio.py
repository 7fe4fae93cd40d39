"""A stdio upstream: one child process, newline-delimited JSON-RPC, many concurrent calls.

Responses are matched to callers by id; progress notifications are routed by token. When the
process exits every waiting call is *interrupted* (it was sent) and the next call starts a new
process and handshakes again.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import Process, TaskGroup
from anyio.streams.text import TextReceiveStream
from mcp.client.stdio import get_default_environment

from ..errors import UpstreamInterrupted, UpstreamNotSent, UpstreamRpcError
from .rpc import (
    CLIENT_CAPABILITIES,
    CLIENT_INFO,
    HANDSHAKE_VERSION,
    CallRelay,
    answer_server_request,
    deliver_notification,
    result_or_raise,
)

logger = logging.getLogger(__name__)

_MAX_LINE = 64 * 1024 * 1024
_LIST_CHANGED = frozenset(
    {"notifications/tools/list_changed", "notifications/prompts/list_changed", "notifications/resources/list_changed"}
)


@dataclass
class _Pending:
    done: anyio.Event = field(default_factory=anyio.Event)
    message: dict[str, Any] | None = None
    relay: CallRelay | None = None


class StdioConnection:
    """A started, initialized child process. Create with `await StdioConnection.start(...)`."""

    def __init__(
        self, name: str, process: Process, task_group: TaskGroup, on_list_changed: Callable[[], None] | None = None
    ) -> None:
        self._name = name
        self._on_list_changed = on_list_changed
        self._process = process
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._write_lock = anyio.Lock()
        self._alive = True
        self._cancel = anyio.CancelScope()
        self._task_group = task_group
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
        on_list_changed: Callable[[], None] | None = None,
    ) -> "StdioConnection":
        # A safe default environment (PATH, HOME, ...) plus the configured variables: the
        # gateway's own secrets are not handed to every child process.
        child_env = {**get_default_environment(), **env}
        try:
            process = await anyio.open_process(
                [command, *args], env=child_env, cwd=cwd or os.getcwd(), stderr=None
            )
        except OSError as exc:
            raise UpstreamNotSent(name, f"cannot start {command!r}: {exc.strerror or exc}") from None
        conn = cls(name, process, task_group, on_list_changed)
        try:
            with anyio.fail_after(connect_timeout):
                result = await conn._call(
                    "initialize",
                    {"protocolVersion": HANDSHAKE_VERSION, "capabilities": CLIENT_CAPABILITIES, "clientInfo": CLIENT_INFO},
                    None,
                )
            conn.protocol_version = str(result.get("protocolVersion") or HANDSHAKE_VERSION)
            await conn._write({"jsonrpc": "2.0", "method": "notifications/initialized"})
        except (TimeoutError, UpstreamInterrupted, UpstreamRpcError) as exc:
            await conn.aclose()
            reason = "no answer to initialize" if isinstance(exc, TimeoutError) else exc.reason
            raise UpstreamNotSent(name, f"handshake failed: {reason}") from None
        return conn

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
        try:
            with anyio.fail_after(timeout):
                return await self._call(method, params, relay)
        except TimeoutError:
            raise UpstreamInterrupted(self._name, f"no answer within {timeout:g} s") from None

    async def _call(
        self, method: str, params: dict[str, Any] | None, relay: CallRelay | None
    ) -> dict[str, Any]:
        if not self._alive:
            raise UpstreamNotSent(self._name, "the upstream process is not running")
        request_id = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        if relay is not None:
            params_out = message.setdefault("params", {})
            params_out["_meta"] = {**(params_out.get("_meta") or {}), "progressToken": request_id}
        pending = _Pending(relay=relay)
        self._pending[request_id] = pending
        try:
            await self._write(message)
            await pending.done.wait()
        finally:
            self._pending.pop(request_id, None)
        if pending.message is None:
            raise UpstreamInterrupted(self._name, "the upstream process exited before answering")
        return result_or_raise(self._name, pending.message)

    async def _write(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n"
        assert self._process.stdin is not None
        try:
            async with self._write_lock:
                await self._process.stdin.send(line.encode())
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            # A closed pipe means the process is gone; it cannot have read a partial line.
            self._alive = False
            raise UpstreamNotSent(self._name, "the upstream process is not running") from None

    async def _run(self) -> None:
        with self._cancel:
            try:
                await self._read_loop()
            except Exception:  # noqa: BLE001 - a broken pipe must not crash the gateway
                logger.exception("upstream %s: stdio reader failed", self._name)
        self._alive = False
        for pending in list(self._pending.values()):
            pending.done.set()
        self._exited.set()
        with anyio.CancelScope(shield=True):
            await self._reap()

    async def _read_loop(self) -> None:
        assert self._process.stdout is not None
        buffer = ""
        async for chunk in TextReceiveStream(self._process.stdout):
            buffer += chunk
            while "\n" in buffer:
                line, buffer = buffer.split("\n", 1)
                if line.strip():
                    await self._dispatch(line)
            if len(buffer) > _MAX_LINE:
                logger.error("upstream %s: message over %d bytes; closing", self._name, _MAX_LINE)
                return

    async def _dispatch(self, line: str) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            logger.warning("upstream %s: ignoring a non-JSON line on stdout", self._name)
            return
        if not isinstance(message, dict):
            return
        if "method" in message:
            if "id" in message:
                await self._answer_server_request(message)
            elif message["method"] in _LIST_CHANGED and self._on_list_changed is not None:
                self._on_list_changed()
            else:
                await deliver_notification(message, self._relay_for(message))
            return
        request_id = message.get("id")
        pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        if pending is not None:
            pending.message = message
            pending.done.set()

    def _relay_for(self, message: dict[str, Any]) -> CallRelay | None:
        """The relay of the call a message belongs to: by progress token, else the only call."""
        token = (message.get("params") or {}).get("progressToken")
        if isinstance(token, int) and token in self._pending:
            return self._pending[token].relay
        # A stdio message names no request; with one call in flight it can only be that one's.
        if len(self._pending) == 1:
            return next(iter(self._pending.values())).relay
        return None

    async def _answer_server_request(self, message: dict[str, Any]) -> None:
        # Answered in the background: the reader must keep reading while a person answers.
        self._task_group.start_soon(self._answer_in_background, message)

    async def _answer_in_background(self, message: dict[str, Any]) -> None:
        reply = await answer_server_request(message, self._relay_for(message))
        try:
            await self._write(reply)
        except UpstreamNotSent:
            pass

    async def _reap(self) -> None:
        with anyio.move_on_after(5):
            await self._process.wait()
            return
        self._process.kill()

    async def aclose(self) -> None:
        if not self._exited.is_set():
            self._alive = False
            if self._process.stdin is not None:
                with anyio.move_on_after(1):
                    await self._process.stdin.aclose()
            with anyio.move_on_after(2):
                await self._exited.wait()
                return
            if self._process.returncode is None:
                self._process.terminate()
            with anyio.move_on_after(2):
                await self._exited.wait()
                return
            if self._process.returncode is None:
                self._process.kill()
            self._cancel.cancel()
