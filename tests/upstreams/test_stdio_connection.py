"""An upstream session over a StdioChannel on in-memory byte streams and a fake process handle
(one real process at the end, for `StdioChannel.start`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from gateway.errors import UpstreamInterrupted, UpstreamNotSent, UpstreamRpcError
from gateway.errors import RelayRefused
from gateway.config.model import StdioUpstreamConfig
from gateway.upstreams.channels.stdio import StdioChannel
from gateway.upstreams.session import UpstreamSession
from gateway.upstreams.upstream import Upstream
from tests.support.relays import HandshakeClient

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class ByteSend(anyio.abc.ByteSendStream):
    def __init__(self, inner: MemoryObjectSendStream[bytes]) -> None:
        self._inner = inner

    async def send(self, item: bytes) -> None:
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def close(self) -> None:
        self._inner.close()


class ByteReceive(anyio.abc.ByteReceiveStream):
    def __init__(self, inner: MemoryObjectReceiveStream[bytes]) -> None:
        self._inner = inner

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._inner.receive()

    async def aclose(self) -> None:
        await self._inner.aclose()


def byte_pipe() -> tuple[ByteSend, ByteReceive]:
    send, receive = anyio.create_memory_object_stream[bytes](1000)
    return ByteSend(send), ByteReceive(receive)


class FakeProcess:
    """A child process handle; exiting closes the child's stdout, as a real exit does."""

    def __init__(self, stdout: ByteSend) -> None:
        self.stdout = stdout
        self.returncode: int | None = None
        self.exited = anyio.Event()
        self.signals: list[str] = []

    async def wait(self) -> int:
        await self.exited.wait()
        assert self.returncode is not None
        return self.returncode

    def exit(self, code: int = 0) -> None:
        self.returncode = code
        self.stdout.close()
        self.exited.set()

    def terminate(self) -> None:
        self.signals.append("terminate")
        self.exit(-15)

    def kill(self) -> None:
        self.signals.append("kill")
        self.exit(-9)


Script = Callable[[dict[str, Any], "FakeServer"], Awaitable[None]]


class FakeServer:
    """The child's side: reads the gateway's lines from `stdin`, answers on `stdout`."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.to_gateway, self.gateway_reads = byte_pipe()  # the child's stdout
        self.gateway_writes, self.from_gateway = byte_pipe()  # the child's stdin
        self.process = FakeProcess(self.to_gateway)
        self.received: list[dict[str, Any]] = []
        self.calls: dict[Any, dict[str, Any]] = {}  # tools/call requests by id
        self.call_arrived = anyio.Event()

    async def send(self, message: dict[str, Any] | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        try:
            await self.to_gateway.send(data)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the process was stopped (or nobody reads): a real child gets EPIPE

    async def answer(self, request_id: Any, result: dict[str, Any]) -> None:
        await self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def exit(self) -> None:
        """The process dies: its stdout ends."""
        self.process.exit(1)

    async def run(self) -> None:
        buffer = b""
        while True:
            try:
                buffer += await self.from_gateway.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError):
                if not self.process.exited.is_set():
                    await self.exit()  # stdin closed: a well-behaved server exits
                return
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                self.received.append(message)
                if message.get("method") == "initialize":
                    await self.answer(message["id"], {"protocolVersion": "2025-06-18", "capabilities": {}})
                    continue
                if message.get("method") == "tools/call":
                    self.calls[message["id"]] = message
                    self.call_arrived.set()
                await self.script(message, self)


async def no_script(message: dict[str, Any], server: FakeServer) -> None:
    return None


async def echo(message: dict[str, Any], server: FakeServer) -> None:
    if message.get("method") == "tools/call":
        await server.answer(message["id"], {"content": [{"type": "text", "text": json.dumps(message["params"]["arguments"])}]})


async def open_connection(
    tg: anyio.abc.TaskGroup, script: Script, *, handshake: bool = True, **kwargs: Any
) -> tuple[UpstreamSession, FakeServer]:
    server = FakeServer(script)
    tg.start_soon(server.run)
    conn = stdio_session(tg, server, **kwargs)
    if handshake:
        await conn.start()
    return conn, server


def stdio_session(tg: anyio.abc.TaskGroup, server: FakeServer, *, max_line_bytes: int | None = None,
                  connect_timeout: float = 5, protocol: str = "handshake", **kwargs: Any) -> UpstreamSession:
    channel = StdioChannel("up", send_stream=server.gateway_writes, receive_stream=server.gateway_reads,
                           process=server.process, task_group=tg,
                           **({"max_line_bytes": max_line_bytes} if max_line_bytes else {}))
    return UpstreamSession("up", channel, protocol=protocol, connect_timeout=connect_timeout, task_group=tg, **kwargs)


class Relay(HandshakeClient):
    def __init__(self) -> None:
        self.progress_seen: list[float] = []
        self.asked: list[str] = []

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress_seen.append(progress)

    async def log(self, params: dict[str, Any]) -> None: ...

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        self.asked.append(method)
        if method == "elicitation/create":
            return {"action": "decline"}
        raise RelayRefused.no_session(method)


async def wait_for(predicate: Callable[[], bool]) -> None:
    with anyio.fail_after(5):
        while not predicate():
            await anyio.wait_all_tasks_blocked()
            if not predicate():
                await anyio.sleep(0.001)


async def test_handshake_and_initialized_notification(tg: anyio.abc.TaskGroup) -> None:
    conn, server = await open_connection(tg, echo)
    assert conn.protocol_version == "2025-06-18" and conn.alive
    await wait_for(lambda: len(server.received) == 2)
    assert [m.get("method") for m in server.received] == ["initialize", "notifications/initialized"]
    assert await conn.request("tools/call", {"name": "e", "arguments": {"a": 1}}, timeout=5) == {
        "content": [{"type": "text", "text": '{"a": 1}'}]
    }


async def test_concurrent_calls_get_their_own_answers(tg: anyio.abc.TaskGroup) -> None:
    conn, server = await open_connection(tg, no_script)
    results: dict[int, dict[str, Any]] = {}

    async def call(i: int) -> None:
        results[i] = await conn.request("tools/call", {"name": "t", "arguments": {"i": i}}, timeout=5)

    async with anyio.create_task_group() as callers:
        for i in range(5):
            callers.start_soon(call, i)
        await wait_for(lambda: len(server.calls) == 5)
        for request_id, message in reversed(list(server.calls.items())):  # answered out of order
            await server.answer(request_id, {"i": message["params"]["arguments"]["i"]})
    assert results == {i: {"i": i} for i in range(5)}


async def test_progress_is_routed_by_token(tg: anyio.abc.TaskGroup) -> None:
    conn, server = await open_connection(tg, no_script)
    relays = {"a": Relay(), "b": Relay()}

    async def call(name: str) -> None:
        await conn.request("tools/call", {"name": name, "arguments": {}}, timeout=5, relay=relays[name])

    async with anyio.create_task_group() as callers:
        callers.start_soon(call, "a")
        callers.start_soon(call, "b")
        await wait_for(lambda: len(server.calls) == 2)
        by_name = {m["params"]["name"]: m for m in server.calls.values()}
        for name, progress in (("b", 1), ("a", 2), ("b", 3)):
            token = by_name[name]["params"]["_meta"]["progressToken"]
            await server.send({"jsonrpc": "2.0", "method": "notifications/progress",
                               "params": {"progressToken": token, "progress": progress}})
        await server.send({"jsonrpc": "2.0", "method": "notifications/progress",
                           "params": {"progressToken": 999, "progress": 9}})  # nobody's: dropped
        for message in by_name.values():
            await server.answer(message["id"], {})
    assert relays["a"].progress_seen == [2.0]
    assert relays["b"].progress_seen == [1.0, 3.0]


async def test_process_exit_interrupts_waiting_calls(tg: anyio.abc.TaskGroup) -> None:
    conn, server = await open_connection(tg, no_script)
    errors: list[BaseException] = []

    async def call() -> None:
        try:
            await conn.request("tools/call", {"name": "t", "arguments": {}}, timeout=5)
        except UpstreamInterrupted as exc:
            errors.append(exc)

    async with anyio.create_task_group() as callers:
        callers.start_soon(call)
        callers.start_soon(call)
        await wait_for(lambda: len(server.calls) == 2)
        await server.exit()
    assert len(errors) == 2 and all("exited before answering" in str(e) for e in errors)
    assert not conn.alive
    with pytest.raises(UpstreamNotSent, match="not running"):
        await conn.request("tools/call", {"name": "t", "arguments": {}}, timeout=5)


async def test_closed_pipe_is_not_sent(tg: anyio.abc.TaskGroup) -> None:
    conn, server = await open_connection(tg, echo)
    await server.from_gateway.aclose()  # the child closed its stdin
    with pytest.raises(UpstreamNotSent, match="not running"):
        await conn.request("tools/call", {"name": "t", "arguments": {}}, timeout=5)
    assert not conn.alive


@pytest.mark.parametrize("failure", ["error", "silence", "exit"])
async def test_handshake_failure_is_not_sent(tg: anyio.abc.TaskGroup, failure: str) -> None:
    server = FakeServer(no_script)

    async def child() -> None:
        message = json.loads((await server.from_gateway.receive()).split(b"\n")[0])
        if failure == "error":
            await server.send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": "bad version"}})
        elif failure == "exit":
            await server.exit()
        if failure != "silence":
            await server.run()  # reads on, and exits when its stdin closes
        await server.process.exited.wait()  # "silence": until the gateway stops us

    tg.start_soon(child)
    conn = stdio_session(tg, server, connect_timeout=0.3)
    reasons = {"error": "bad version", "silence": "no answer to initialize", "exit": "exited before answering"}
    with pytest.raises(UpstreamNotSent, match=f"handshake failed: .*{reasons[failure]}"):
        await conn.start()
    assert not conn.alive
    assert server.process.returncode is not None  # closed: stdin shut, then terminated if needed
    if failure == "silence":
        assert server.process.signals == ["terminate"]


async def test_server_requests_are_answered(tg: anyio.abc.TaskGroup) -> None:
    conn, server = await open_connection(tg, no_script)
    relay = Relay()
    async with anyio.create_task_group() as callers:
        callers.start_soon(lambda: conn.request("tools/call", {"name": "t", "arguments": {}}, timeout=5, relay=relay))
        await wait_for(lambda: len(server.calls) == 1)
        for request_id, method in (("p", "ping"), ("e", "elicitation/create"), ("s", "sampling/createMessage")):
            await server.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}})
        await wait_for(lambda: len([m for m in server.received if "method" not in m]) == 3)
        await server.answer(next(iter(server.calls)), {})
    replies = {m["id"]: m for m in server.received if "method" not in m}
    assert replies["p"]["result"] == {}
    assert replies["e"]["result"] == {"action": "decline"}
    assert replies["s"]["error"]["code"] == -32601
    assert relay.asked == ["elicitation/create", "sampling/createMessage"]


async def test_list_changed_calls_back(tg: anyio.abc.TaskGroup) -> None:
    changed: list[str] = []

    class Events:
        def list_changed(self, method: str) -> None:
            changed.append("x")

        def resource_updated(self, uri: str) -> None:
            changed.append(uri)

    conn, server = await open_connection(tg, echo, events=Events())
    for kind in ("tools", "prompts", "resources"):
        await server.send({"jsonrpc": "2.0", "method": f"notifications/{kind}/list_changed"})
    await server.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})  # not ours: ignored
    await conn.request("tools/call", {"name": "t", "arguments": {}}, timeout=5)  # lines are read in order
    assert changed == ["x", "x", "x"]


async def test_garbage_lines_are_skipped_and_rpc_errors_raised(tg: anyio.abc.TaskGroup) -> None:
    async def script(message: dict[str, Any], server: FakeServer) -> None:
        if message.get("method") == "tools/call":
            await server.send(b"not json\n[1,2]\n\n")
            await server.send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32050, "message": "no"}})

    conn, _ = await open_connection(tg, script)
    with pytest.raises(UpstreamRpcError, match="-32050"):
        await conn.request("tools/call", {"name": "t", "arguments": {}}, timeout=5)
    assert conn.alive


@pytest.mark.parametrize("split", [False, True], ids=["one-chunk", "many-chunks"])
async def test_oversized_line_ends_the_connection(tg: anyio.abc.TaskGroup, split: bool) -> None:
    async def script(message: dict[str, Any], server: FakeServer) -> None:
        if message.get("method") == "tools/call":
            line = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"x": "y" * 5000}}).encode() + b"\n"
            for i in range(0, len(line), 1000 if split else len(line)):
                await server.send(line[i:i + (1000 if split else len(line))])

    conn, server = await open_connection(tg, script, max_line_bytes=4096)
    with pytest.raises(UpstreamInterrupted, match="exited before answering"):
        await conn.request("tools/call", {"name": "t", "arguments": {}}, timeout=5)
    assert not conn.alive
    await server.process.exited.wait()
    assert server.process.signals == ["terminate"]  # no longer read, so stopped at once


async def test_timeout_is_interrupted(tg: anyio.abc.TaskGroup) -> None:
    conn, _ = await open_connection(tg, no_script)
    with pytest.raises(UpstreamInterrupted, match="no answer within 0.1 s"):
        await conn.request("tools/call", {"name": "t", "arguments": {}}, timeout=0.1)
    assert conn.alive


async def test_aclose_closes_stdin_and_waits_for_exit(tg: anyio.abc.TaskGroup) -> None:
    conn, server = await open_connection(tg, echo)
    await conn.aclose()
    assert server.process.returncode == 1 and server.process.signals == []  # exited on its own
    assert not conn.alive


CHILD = r"""
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "initialize":
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {"protocolVersion": "2025-11-25"}}), flush=True)
    elif m.get("method") == "tools/call":
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {"pid": "child"}}), flush=True)
"""


async def test_start_spawns_a_real_process(tg: anyio.abc.TaskGroup) -> None:
    channel = await StdioChannel.start("up", tg, command=sys.executable, args=["-c", CHILD], env={}, cwd=None)
    conn = UpstreamSession("up", channel, protocol="handshake", connect_timeout=10, task_group=tg)
    await conn.start()
    try:
        assert await conn.request("tools/call", {"name": "t", "arguments": {}}, timeout=10) == {"pid": "child"}
    finally:
        await conn.aclose()
    assert not conn.alive
    with pytest.raises(UpstreamNotSent, match="cannot be started"):
        await StdioChannel.start("up", tg, command="/nonexistent/dex-server", args=[], env={}, cwd=None)



async def test_a_process_is_never_stateless(tg: anyio.abc.TaskGroup) -> None:
    # A child process belongs to this gateway process: another replica cannot continue what it began
    # (an upstream task on it is polled here only), though it negotiated no session id.
    config = StdioUpstreamConfig(name="up", transport="stdio", command=sys.executable, args=["-c", CHILD])
    upstream = Upstream(config, tg)
    try:
        assert await upstream.connection_facts() == ("2025-11-25", False)
    finally:
        await upstream.aclose()
