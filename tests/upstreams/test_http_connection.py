"""UpstreamSession against MockTransport: answers (JSON and SSE), what an upstream says during a
call, error statuses and bodies, and how transport failures map to the outcome errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import pytest
from mcp_types import INTERNAL_ERROR, METHOD_NOT_FOUND

from gateway.errors import UpstreamInterrupted, UpstreamNotSent, UpstreamRpcError
from gateway.errors import RelayRefused
from gateway.upstreams.session import UpstreamSession
from tests.upstreams.sessions import http_session
from gateway.upstreams.mock_transport import MockResponse, MockTransport, RequestMaybeSent, RequestNotSent, sse_event
from gateway.upstreams.transport import HttpRequest
from tests.support.relays import HandshakeClient
from tests.upstreams.fake_mcp import URL, FakeMcp, ToolCall, ToolError, text_result

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class RecordingRelay(HandshakeClient):
    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.progress_seen: list[tuple[float, float | None, str | None]] = []
        self.logs: list[dict[str, Any]] = []
        self.requests: list[tuple[str, dict[str, Any] | None]] = []
        self._answers = answers or {}

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress_seen.append((progress, total, message))

    async def log(self, params: dict[str, Any]) -> None:
        self.logs.append(params)

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        self.requests.append((method, params))
        if method not in self._answers:
            raise RelayRefused.no_session(method)
        return self._answers[method]


def connect(handler: Any, *, protocol: str = "handshake", headers: dict[str, str] | None = None) -> tuple[UpstreamSession, MockTransport]:
    transport = MockTransport(handler)
    conn = http_session("up", URL, headers=headers or {}, protocol=protocol, connect_timeout=5, transport=transport)
    return conn, transport


def call_args(name: str = "echo", **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


@pytest.mark.parametrize("era", ["handshake", "2026-07-28"])
@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
async def test_a_call_in_both_eras_and_both_answer_forms(tg: anyio.abc.TaskGroup, era: str, sse: bool) -> None:
    server = FakeMcp(sse=sse, task_group=tg, trailing_sse=b": trailing comment\n\n")
    conn, transport = connect(server, protocol=era, headers={"Authorization": "Bearer t"})
    assert await conn.request("tools/call", call_args(x=1), timeout=5) == text_result('{"x": 1}')
    assert await conn.request("tools/call", call_args(x=2), timeout=5) == text_result('{"x": 2}')
    assert conn.protocol_version == ("2025-11-25" if era == "handshake" else era)
    for request in transport.requests:
        assert request.headers["authorization"] == "Bearer t"
        assert request.headers["accept"] == "application/json, text/event-stream"
    assert transport.unfinished == 0  # every answer stream was read to its end: connections reusable


async def test_sse_notifications_reach_the_relay_with_the_callers_token(tg: anyio.abc.TaskGroup) -> None:
    server = FakeMcp(sse=True, task_group=tg)

    async def slow(args: dict[str, Any], call: ToolCall) -> dict[str, Any]:
        assert call.progress_token is not None
        await call.progress(1, 3, "one")
        await call.notify("notifications/message", {"level": "info", "data": "halfway"})
        await call.progress(2, None, None)
        await call.notify("notifications/resources/updated", {"uri": "x://y"})  # not relayed
        return text_result("done")

    server.tools["slow"] = slow
    relay = RecordingRelay()
    conn, transport = connect(server)
    assert await conn.request("tools/call", call_args("slow"), timeout=5, relay=relay) == text_result("done")
    assert relay.progress_seen == [(1.0, 3.0, "one"), (2.0, None, None)]
    assert relay.logs == [{"level": "info", "data": "halfway"}]
    sent = json.loads(transport.requests[-1].body)
    assert sent["params"]["_meta"]["progressToken"] == sent["id"]


async def test_server_to_client_requests_are_answered_during_the_call(tg: anyio.abc.TaskGroup) -> None:
    server = FakeMcp(sse=True, task_group=tg)

    async def asking(args: dict[str, Any], call: ToolCall) -> dict[str, Any]:
        pong = await server.ask(call, "r1", "ping")
        elicited = await server.ask(call, "r2", "elicitation/create", {"message": "sure?", "requestedSchema": {}})
        refused = await server.ask(call, "r3", "sampling/createMessage", {"messages": []})
        return text_result(json.dumps([pong, elicited, refused]))

    server.tools["asking"] = asking
    relay = RecordingRelay({"elicitation/create": {"action": "accept", "content": {"ok": True}}})
    conn, _ = connect(server)
    result = await conn.request("tools/call", call_args("asking"), timeout=5, relay=relay)
    pong, elicited, refused = json.loads(result["content"][0]["text"])
    assert pong == {"jsonrpc": "2.0", "id": "r1", "result": {}}
    assert elicited["result"] == {"action": "accept", "content": {"ok": True}}
    assert refused["error"]["code"] == METHOD_NOT_FOUND
    assert [m for m, _ in relay.requests] == ["elicitation/create", "sampling/createMessage"]


@pytest.mark.parametrize("configured", [None, [{"uri": "file:///srv/data", "name": "data"}]], ids=["unset", "configured"])
async def test_server_requests_without_a_relay_are_refused_except_ping_and_configured_roots(
    tg: anyio.abc.TaskGroup, configured: list[dict[str, Any]] | None
) -> None:
    """Nobody to ask: refused at once (never left unanswered); `roots/list` answers the
    upstream's configured roots when there are some."""
    server = FakeMcp(sse=True, task_group=tg)

    async def asking(args: dict[str, Any], call: ToolCall) -> dict[str, Any]:
        roots = await server.ask(call, 1, "roots/list")
        elicit = await server.ask(call, 2, "elicitation/create", {"message": "?"})
        return text_result(json.dumps([roots, elicit]))

    server.tools["asking"] = asking
    conn, _ = connect(server)
    conn.roots = configured
    roots, elicit = json.loads((await conn.request("tools/call", call_args("asking"), timeout=5))["content"][0]["text"])
    if configured is None:
        assert roots["error"]["code"] == METHOD_NOT_FOUND
    else:
        assert roots["result"] == {"roots": configured}
    assert elicit["error"]["code"] == METHOD_NOT_FOUND


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
async def test_json_rpc_errors_are_rpc_errors_with_their_data(tg: anyio.abc.TaskGroup, sse: bool) -> None:
    server = FakeMcp(sse=sse, task_group=tg)

    async def failing(args: dict[str, Any], call: ToolCall) -> dict[str, Any]:
        raise ToolError(-32050, "refused")

    server.tools["failing"] = failing
    conn, _ = connect(server)
    if sse:
        with pytest.raises(UpstreamRpcError) as info:
            await conn.request("tools/call", call_args("failing"), timeout=5)
        assert (info.value.code, info.value.rpc_message) == (-32050, "refused")
    with pytest.raises(UpstreamRpcError) as info:
        await conn.request("tools/call", call_args("missing"), timeout=5)
    assert info.value.code == -32602


def answering(response: MockResponse, *, on: bytes = b'"tools/call"') -> Any:
    """A handshake server that answers every `on` request with `response`."""
    server = FakeMcp(eras={"handshake"}, stateful=False)

    async def handler(request: HttpRequest) -> MockResponse:
        if on in request.body:
            return response
        return await server(request)

    return handler


ERROR_BODY = {"jsonrpc": "2.0", "id": 2, "error": {"code": INTERNAL_ERROR, "message": "boom", "data": {"_meta": {"k": 1}}}}


async def test_http_error_status_with_a_json_rpc_error_body_is_that_error() -> None:
    conn, _ = connect(answering(MockResponse.json(ERROR_BODY, status=500)))
    with pytest.raises(UpstreamRpcError) as info:
        await conn.request("tools/call", call_args(), timeout=5)
    assert (info.value.code, info.value.data) == (INTERNAL_ERROR, {"_meta": {"k": 1}})


@pytest.mark.parametrize(
    "response, reason",
    [
        (MockResponse(500, {"content-type": "text/plain"}, b"Internal Server Error"), "HTTP status 500"),
        (MockResponse(502), "HTTP status 502"),
        (MockResponse.json({"detail": "overloaded"}, status=503), "HTTP status 503"),
        (MockResponse(400, {"content-type": "application/json"}, b"<html>"), "HTTP status 400"),
        (MockResponse(202), "HTTP status 202"),
        (MockResponse(200, {"content-type": "application/json"}, b"not json"), "not JSON"),
        (MockResponse.json({"jsonrpc": "2.0", "id": 2}), "no result object"),
        (MockResponse.json({"jsonrpc": "2.0", "id": 2, "error": "bad"}), "malformed JSON-RPC error"),
        (MockResponse(200, {"content-type": "text/html"}, b"<html>"), "unexpected content type 'text/html'"),
        (MockResponse.sse([b"data: {not json\n\n"]), "unreadable SSE event"),
        (MockResponse.sse([b": keep-alive\n\n", sse_event({"jsonrpc": "2.0", "method": "x"})]), "ended without an answer"),
    ],
)
async def test_unusable_answers_are_interrupted(response: MockResponse, reason: str) -> None:
    conn, _ = connect(answering(response))
    with pytest.raises(UpstreamInterrupted, match=reason):
        await conn.request("tools/call", call_args(), timeout=5)


async def test_not_sent_and_maybe_sent_map_to_the_outcome_errors() -> None:
    failure: Exception = RequestNotSent("cannot connect to upstream.test:80: refused")
    server = FakeMcp(eras={"handshake"}, stateful=False)

    async def handler(request: HttpRequest) -> MockResponse:
        if b'"tools/call"' in request.body:
            raise failure
        return await server(request)

    conn, _ = connect(handler)
    with pytest.raises(UpstreamNotSent, match="refused"):
        await conn.request("tools/call", call_args(), timeout=5)
    failure = RequestMaybeSent("exchange with upstream.test:80 failed: ServerDisconnectedError")
    with pytest.raises(UpstreamInterrupted, match="ServerDisconnectedError"):
        await conn.request("tools/call", call_args(), timeout=5)
    assert conn.alive  # one bad exchange does not end the pooled connection


async def test_a_stream_that_breaks_after_progress_is_interrupted() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield sse_event({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 2, "progress": 1}})
        raise RequestMaybeSent("connection broke while reading the response: ClientPayloadError")

    relay = RecordingRelay()
    conn, _ = connect(answering(MockResponse.sse(body())))
    with pytest.raises(UpstreamInterrupted, match="ClientPayloadError"):
        await conn.request("tools/call", call_args(), timeout=5, relay=relay)
    assert relay.progress_seen == [(1.0, None, None)]


async def test_a_nested_not_sent_inside_an_answer_stream_is_never_reported_not_sent() -> None:
    """Only the request's own connect failure is "not sent"; one raised while its answer is read
    (by anything the transport does meanwhile) is not about that request."""

    async def body() -> AsyncIterator[bytes]:
        yield b"data: "
        raise RequestNotSent("misreported")

    conn, _ = connect(answering(MockResponse.sse(body())))
    with pytest.raises(UpstreamInterrupted):
        await conn.request("tools/call", call_args(), timeout=5)


async def test_timeout_is_interrupted_and_closes_the_stream(tg: anyio.abc.TaskGroup) -> None:
    server = FakeMcp(sse=True, task_group=tg)

    async def hang(args: dict[str, Any], call: ToolCall) -> dict[str, Any]:
        await call.progress(1)
        await anyio.sleep_forever()
        raise AssertionError

    server.tools["hang"] = hang
    conn, transport = connect(server)
    with pytest.raises(UpstreamInterrupted, match="no answer within 0.2 s"):
        await conn.request("tools/call", call_args("hang"), timeout=0.2)
    assert transport.open_streams == 0 and transport.unfinished == 1


async def test_stream_resumes_with_last_event_id() -> None:
    server = FakeMcp(eras={"handshake"}, stateful=False)
    resumed: list[HttpRequest] = []

    async def handler(request: HttpRequest) -> MockResponse:
        if request.method == "GET":
            resumed.append(request)
            return MockResponse.sse([sse_event({"jsonrpc": "2.0", "id": 2, "result": text_result("late")}, event_id="e2")])
        if b'"tools/call"' in request.body:
            return MockResponse.sse([b"id: e1\nretry: 10\ndata: \n\n"])  # priming event, then the server closes
        return await server(request)

    conn, _ = connect(handler)
    assert await conn.request("tools/call", call_args(), timeout=5) == text_result("late")
    assert [r.headers["last-event-id"] for r in resumed] == ["e1"]
    assert resumed[0].headers["accept"] == "text/event-stream"


async def test_resumption_refused_is_interrupted() -> None:
    def handler(request: HttpRequest) -> MockResponse:
        if request.method == "GET":
            return MockResponse(405)
        if b'"initialize"' in request.body:
            return MockResponse.json({"jsonrpc": "2.0", "id": 1, "result": {"protocolVersion": "2025-11-25"}})
        if b'"notifications/' in request.body:
            return MockResponse(202)
        return MockResponse.sse([b"id: e1\nretry: 1\ndata: \n\n"])

    conn, transport = connect(handler)
    with pytest.raises(UpstreamInterrupted, match="ended without an answer"):
        await conn.request("tools/call", call_args(), timeout=5)
    assert [r.method for r in transport.requests][-2:] == ["POST", "GET"]


async def test_aclose_ends_the_session_and_later_calls_are_not_sent() -> None:
    server = FakeMcp(eras={"handshake"})
    conn, transport = connect(server)
    await conn.request("tools/call", call_args(), timeout=5)
    assert server.sessions == {"s1"}
    await conn.aclose()
    assert server.sessions == set()
    assert transport.requests[-1].method == "DELETE" and transport.requests[-1].headers["mcp-session-id"] == "s1"
    assert transport.closed and not conn.alive
    with pytest.raises(UpstreamNotSent):
        await conn.request("tools/call", call_args(), timeout=5)
