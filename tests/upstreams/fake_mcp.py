"""A scripted Streamable-HTTP MCP server behind a MockTransport, for UpstreamSession tests.

    server = FakeMcp(eras={"handshake"})
    conn = http_session("up", URL, headers={}, protocol="auto", connect_timeout=5,
                          transport=MockTransport(server))

It routes by the `MCP-Protocol-Version` header like the SDK: absent or a handshake version is
the handshake era (initialize, sessions when `stateful`), 2026-07-28 the modern era (each
request self-contained). Tools are Python functions `async (args, call) -> result dict`; a
tool may `await call.notify(...)` / `await call.ask(...)` to stream notifications or requests
on the answer's SSE stream (the answer is then SSE; else JSON unless `sse=True`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from gateway.upstreams.mock_transport import MockResponse, sse_event
from gateway.upstreams.transport import HttpRequest

URL = "http://upstream.test/mcp"
MODERN = "2026-07-28"
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

Tool = Callable[[dict[str, Any], "ToolCall"], Awaitable[dict[str, Any]]]


def rpc_error(request_id: Any, code: int, message: str, status: int = 200) -> MockResponse:
    return MockResponse.json({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}, status=status)


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


@dataclass
class ToolCall:
    """What a tool sees of its call; `notify`/`ask` turn the answer into an SSE stream."""

    message: dict[str, Any]
    era: str
    send: anyio.abc.ObjectSendStream[bytes] | None = None
    replies: dict[Any, anyio.Event] = field(default_factory=dict)

    @property
    def progress_token(self) -> Any:
        return ((self.message.get("params") or {}).get("_meta") or {}).get("progressToken")

    @property
    def meta(self) -> dict[str, Any]:
        return (self.message.get("params") or {}).get("_meta") or {}

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        assert self.send is not None, "an SSE tool (FakeMcp(sse=True) or stream_tools) may notify"
        await self.send.send(sse_event({"jsonrpc": "2.0", "method": method, "params": params}))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)


class FakeMcp:
    def __init__(
        self,
        *,
        eras: set[str] = frozenset({"handshake", "modern"}),  # type: ignore[assignment]
        stateful: bool = True,
        sse: bool = False,
        discover_delay: float = 0.0,
        wrong_era_answer: Callable[[Any], MockResponse] | None = None,
        trailing_sse: bytes = b"",
        task_group: anyio.abc.TaskGroup | None = None,
    ) -> None:
        self.task_group = task_group  # runs the tools of SSE answers (needed when sse=True)
        self.eras = eras
        self.stateful = stateful
        self.sse = sse
        self.discover_delay = discover_delay
        self.discover_seen = anyio.Event()  # set when a server/discover request arrives
        self.discover_gate: anyio.Event | None = None  # when set by a test: discover waits for it
        # How a handshake-only server answers a modern-era request (default: -32600 as JSON).
        self.wrong_era_answer = wrong_era_answer or (lambda rid: rpc_error(rid, -32600, "Unsupported protocol version", 400))
        self.trailing_sse = trailing_sse  # bytes after the answer (the stream is read to its end)
        self.tools: dict[str, Tool] = {"echo": _echo}
        self.sessions: set[str] = set()
        self.received: list[tuple[HttpRequest, dict[str, Any] | None]] = []
        self.replies: list[dict[str, Any]] = []  # answers the client POSTed to our requests
        self._session_ids = (f"s{n}" for n in itertools.count(1))
        self._reply_events: dict[Any, anyio.Event] = {}

    def methods(self) -> list[str]:
        return [m.get("method", "<reply>") for _, m in self.received if m is not None]

    def forget_sessions(self) -> None:
        """Like a restart: every session id becomes unknown (404)."""
        self.sessions.clear()

    async def __call__(self, request: HttpRequest) -> MockResponse:
        if request.method == "DELETE":
            self.received.append((request, None))
            self.sessions.discard(request.headers.get("mcp-session-id", ""))
            return MockResponse(200)
        message = json.loads(request.body)
        self.received.append((request, message))
        if message.get("method") == "server/discover":
            self.discover_seen.set()
            if self.discover_gate is not None:
                await self.discover_gate.wait()
            if self.discover_delay:
                await anyio.sleep(self.discover_delay)
        version = request.headers.get("mcp-protocol-version")
        era = "modern" if version == MODERN else "handshake"
        if version is not None and version != MODERN and version not in HANDSHAKE_VERSIONS:
            return rpc_error(message.get("id"), -32600, f"unknown protocol version {version}", 400)
        if era not in self.eras:
            return self.wrong_era_answer(message.get("id"))
        if "method" not in message:  # the client's answer to one of our requests
            self.replies.append(message)
            if (event := self._reply_events.get(message.get("id"))) is not None:
                event.set()
            return MockResponse(202)
        if "id" not in message:
            return MockResponse(202)
        method = message["method"]
        if era == "handshake" and method == "initialize":
            return self._initialize(message)
        if era == "handshake" and self.stateful:
            sid = request.headers.get("mcp-session-id")
            if sid is None:
                return MockResponse(400, {"content-type": "text/plain"}, b"Bad Request: missing session id")
            if sid not in self.sessions:
                return MockResponse(404, {"content-type": "text/plain"}, b"Not Found: unknown session")
        if method == "server/discover":
            if "modern" not in self.eras:
                return rpc_error(message["id"], -32601, "Method not found: server/discover")
            return self._result(message, {"supportedVersions": [MODERN], "capabilities": {"tools": {}},
                                          "serverInfo": {"name": "fake", "version": "1"}})
        if method == "tools/call":
            return await self._tools_call(message, era)
        if method == "tools/list":
            return self._result(message, {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in self.tools]})
        return rpc_error(message["id"], -32601, f"Method not found: {method}")

    def _initialize(self, message: dict[str, Any]) -> MockResponse:
        headers = {}
        if self.stateful:
            sid = next(self._session_ids)
            self.sessions.add(sid)
            headers["mcp-session-id"] = sid
        requested = (message.get("params") or {}).get("protocolVersion")
        result = {"protocolVersion": requested if requested in HANDSHAKE_VERSIONS else "2025-11-25",
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "1"}}
        response = self._result(message, result)
        response.headers = {**response.headers, **headers}
        return response

    def _result(self, message: dict[str, Any], result: dict[str, Any]) -> MockResponse:
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        if self.sse:
            return MockResponse.sse([sse_event(answer, event_id="e1"), self.trailing_sse])
        return MockResponse.json(answer)

    async def _tools_call(self, message: dict[str, Any], era: str) -> MockResponse:
        params = message.get("params") or {}
        tool = self.tools.get(params.get("name"))
        if tool is None:
            return rpc_error(message["id"], -32602, f"Unknown tool: {params.get('name')}")
        if not self.sse:
            return self._result(message, await tool(params.get("arguments") or {}, ToolCall(message, era)))
        send, receive = anyio.create_memory_object_stream[bytes](100)
        call = ToolCall(message, era, send, self._reply_events)

        async def run() -> None:
            async with send:
                try:
                    result = await tool(params.get("arguments") or {}, call)
                    answer: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"], "result": result}
                except ToolError as exc:
                    answer = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": exc.code, "message": str(exc)}}
                await send.send(sse_event(answer))
                if self.trailing_sse:
                    await send.send(self.trailing_sse)

        assert self.task_group is not None, "FakeMcp(sse=True) needs task_group="
        self.task_group.start_soon(run)
        return MockResponse.sse(_stream(receive))

    async def ask(self, call: ToolCall, request_id: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a server-to-client request on `call`'s stream and wait for the client's POSTed answer."""
        event = anyio.Event()
        self._reply_events[request_id] = event
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        assert call.send is not None
        await call.send.send(sse_event(message))
        await event.wait()
        return next(r for r in self.replies if r.get("id") == request_id)


class ToolError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def _stream(receive: anyio.abc.ObjectReceiveStream[bytes]) -> AsyncIterator[bytes]:
    """The SSE body: the tool runs (in the server's task group) while the client reads."""
    async with receive:
        async for chunk in receive:
            yield chunk


async def _echo(args: dict[str, Any], call: ToolCall) -> dict[str, Any]:
    return text_result(json.dumps(args, sort_keys=True))
