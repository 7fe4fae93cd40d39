"""The HTTP front over raw HTTP: bad requests answered with clear JSON-RPC errors (never a 500 or
a traceback), body limit, Host/Origin checks, bearer auth, per-principal tool filtering, fences
per principal, and the health endpoints."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.gateway.helpers import KEY, OUTCOME, REPLAYED, all_tools, connect, mcp_errors, meta_of, new_key, text_of
from tests.support.gateway import RunningGateway, start_gateway, stdio_upstream, write_config
from tests.support.servers import read_executions

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TOKENS = {"alice": "alice-secret-token", "bob": "bob-secret-token", "carol": "carol-secret-token"}
CAROL_TOOLS = ["pay__get_*", "pay__list_payments"]
LIMIT = 4096
LEGACY = "2025-11-25"
MODERN = "2026-07-28"


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Setup:
    gateway: RunningGateway
    state: Path
    notes_state: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("front")
    state, notes_state = root / "pay", root / "notes"
    state.mkdir()
    notes_state.mkdir()
    config = write_config(root, {
        "server": {"max_request_bytes": LIMIT},
        "auth": {"tokens": [
            {"principal": "alice", "token_sha256": sha(TOKENS["alice"])},
            {"principal": "bob", "token_sha256": sha(TOKENS["bob"])},
            {"principal": "carol", "token_sha256": sha(TOKENS["carol"]), "tools": CAROL_TOOLS},
        ]},
        "upstreams": [stdio_upstream("pay", "dex_server", state_dir=state),
                      stdio_upstream("notes", "plain_server", state_dir=notes_state)],
    })
    with start_gateway(config) as gateway:
        yield Setup(gateway, state, notes_state)


def headers(version: str = LEGACY, token: str | None = TOKENS["alice"], **extra: str) -> dict[str, str]:
    h = {"accept": "application/json, text/event-stream", "content-type": "application/json",
         "mcp-protocol-version": version}
    if token is not None:
        h["authorization"] = f"Bearer {token}"
    h.update(extra)
    return h


def request(method: str, params: dict[str, Any] | None = None, version: str = LEGACY) -> dict[str, Any]:
    """A JSON-RPC request; on 2026-07-28 with the per-request `_meta` envelope."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
    params = dict(params or {})
    if version == MODERN:
        params["_meta"] = {"io.modelcontextprotocol/protocolVersion": MODERN,
                           "io.modelcontextprotocol/clientCapabilities": {},
                           "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}
    if params:
        message["params"] = params
    return message


def extra_headers(message: dict[str, Any], version: str) -> dict[str, str]:
    if version != MODERN:
        return {}
    h = {"mcp-method": message["method"]}
    name = (message.get("params") or {}).get("name")
    if isinstance(name, str):
        h["mcp-name"] = name
    return h


def post(url: str, body: bytes | dict[str, Any], hdrs: dict[str, str]) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(url, content=content, headers=hdrs, timeout=30)


def assert_clean(response: httpx.Response) -> None:
    """Never a 500, never a stack trace."""
    assert response.status_code < 500, (response.status_code, response.text)
    assert "Traceback" not in response.text
    assert 'File "' not in response.text


def jsonrpc_message(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a JSON or SSE response."""
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if "id" in message and ("result" in message or "error" in message):
                    return message
        raise AssertionError(f"no JSON-RPC answer in {response.text!r}")
    assert content_type.startswith("application/json"), (content_type, response.text)
    return response.json()


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert_clean(response)
    message = jsonrpc_message(response)
    assert message.get("jsonrpc") == "2.0"
    assert "error" in message, message
    error = message["error"]
    assert isinstance(error.get("code"), int) and isinstance(error.get("message"), str) and error["message"]
    return error


# -- bad requests -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_malformed_json(setup: Setup, version: str) -> None:
    response = post(setup.gateway.url, b'{"jsonrpc": "2.0", "id": 1, "method": ', headers(version))
    assert response.status_code == 400
    assert error_of(response)["code"] == -32700


# JSON-RPC 2.0: "The JSON sent is not a valid Request object" is -32600 Invalid Request, in both
# eras (the gateway's request gate answers it before the SDK's transport, which said -32602).
@pytest.mark.parametrize("version", [LEGACY, MODERN])
@pytest.mark.parametrize("body", [b'{"hello": "world"}', b"[1, 2, 3]", b'"tools/list"', b'{"jsonrpc": "2.0"}'])
def test_not_jsonrpc(setup: Setup, version: str, body: bytes) -> None:
    response = post(setup.gateway.url, body, headers(version))
    assert response.status_code == 400
    assert error_of(response)["code"] == -32600


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_unknown_method(setup: Setup, version: str) -> None:
    message = request("no/such/method", version=version)
    response = post(setup.gateway.url, message, headers(version, **extra_headers(message, version)))
    assert error_of(response)["code"] == -32601


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_unknown_tool_names_the_tool(setup: Setup, version: str) -> None:
    message = request("tools/call", {"name": "pay__no_such_tool", "arguments": {}}, version)
    response = post(setup.gateway.url, message, headers(version, **extra_headers(message, version)))
    error = error_of(response)
    assert error["code"] == -32602
    assert "pay__no_such_tool" in error["message"]


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_tool_call_without_a_name(setup: Setup, version: str) -> None:
    message = request("tools/call", {"arguments": {}}, version)
    response = post(setup.gateway.url, message, headers(version, **extra_headers(message, version)))
    assert error_of(response)["code"] == -32602  # Invalid params: the request itself is well formed
    assert jsonrpc_message(response)["id"] == message["id"]


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_raw_call_works(setup: Setup, version: str) -> None:
    """The control: the same raw requests, well formed, are answered."""
    message = request("tools/call", {"name": "pay__get_balance", "arguments": {"account": "raw"}}, version)
    response = post(setup.gateway.url, message, headers(version, **extra_headers(message, version)))
    assert response.status_code == 200, response.text
    result = jsonrpc_message(response)["result"]
    assert result["structuredContent"]["account"] == "raw"


def test_body_over_the_limit(setup: Setup) -> None:
    message = request("tools/call", {"name": "pay__get_balance", "arguments": {"account": "a" * (LIMIT + 10)}})
    response = post(setup.gateway.url, message, headers())
    assert response.status_code == 413
    error = error_of(response)
    assert str(LIMIT) in error["message"]


def test_chunked_body_over_the_limit_is_a_json_error(setup: Setup) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pay__get_balance",'
        yield b'"arguments":{"account":"' + b"a" * (LIMIT + 10) + b'"}}}'

    response = httpx.post(setup.gateway.url, content=chunks(), headers=headers(), timeout=30)
    assert response.status_code == 413
    error_of(response)


def test_foreign_host_is_421(setup: Setup) -> None:
    response = post(setup.gateway.url, request("tools/list"), headers(host="evil.example:80"))
    assert response.status_code == 421
    error_of(response)


def test_foreign_origin_is_403(setup: Setup) -> None:
    response = post(setup.gateway.url, request("tools/list"), headers(origin="http://evil.example"))
    assert response.status_code == 403
    error_of(response)


def test_loopback_origin_is_allowed(setup: Setup) -> None:
    response = post(setup.gateway.url, request("tools/list"), headers(origin=setup.gateway.base))
    assert response.status_code == 200, response.text
    assert "pay__get_balance" in response.text


# -- auth ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-configured-token", "Bearer",
                                           f"Basic {TOKENS['alice']}", f"Bearer {sha(TOKENS['alice'])}"])
def test_missing_or_wrong_token_is_401(setup: Setup, authorization: str | None) -> None:
    hdrs = headers(token=None)
    if authorization is not None:
        hdrs["authorization"] = authorization
    response = post(setup.gateway.url, request("tools/list"), hdrs)
    assert response.status_code == 401
    assert response.headers.get("www-authenticate", "").lower().startswith("bearer")
    error_of(response)
    assert "pay__" not in response.text


async def test_right_token_works_with_the_sdk_client(setup: Setup, era: str) -> None:
    async with connect(setup.gateway.url, era, token=TOKENS["bob"]) as client:
        tools = await all_tools(client)
        result = await client.call_tool("pay__get_balance", {"account": "bob"})
    assert len([t for t in tools if t.name.startswith("pay__")]) == 15
    assert result.is_error is False, text_of(result)


async def test_the_sdk_client_without_a_token_is_refused(setup: Setup, era: str) -> None:
    # The SDK client raises the 401 answer's JSON-RPC error, inside its task groups' exception groups.
    with pytest.raises(BaseException) as caught:  # noqa: PT011 - an MCPError, possibly inside groups
        async with connect(setup.gateway.url, era) as client:
            await client.list_tools()
    errors = mcp_errors(caught.value)
    assert len(errors) == 1, repr(caught.value)
    assert errors[0].error.code == -32000  # the gateway's "unauthorized" (http/auth.py)
    assert errors[0].error.message.startswith("Unauthorized: send 'Authorization: Bearer <token>'"), errors[0]


async def test_tool_allow_list_hides_and_denies(setup: Setup, era: str) -> None:
    async with connect(setup.gateway.url, era, token=TOKENS["carol"]) as client:
        names = sorted(t.name for t in await all_tools(client))
        allowed = await client.call_tool("pay__get_balance", {"account": "carol"})
        with pytest.raises(MCPError) as caught:
            await client.call_tool("pay__send_payment", {"to": "mallory", "amount": 1}, meta={KEY: new_key("carol")})
    assert names == ["pay__get_balance", "pay__list_payments"]
    assert allowed.is_error is False
    assert caught.value.error.code == -32602
    assert "pay__send_payment" in caught.value.error.message
    assert not [r for r in read_executions(setup.state, tool="send_payment") if r["arguments"].get("to") == "mallory"]


async def test_two_principals_with_the_same_key_are_two_fences(setup: Setup, era: str) -> None:
    """The gateway's fences: per principal. Behind a plain upstream (no fence of its own) both run."""
    key = new_key(f"shared-{era}")
    args = {"line": f"shared-{era}"}
    answers = {}
    for who in ("alice", "bob"):
        async with connect(setup.gateway.url, era, token=TOKENS[who]) as client:
            answers[who] = await client.call_tool("notes__append_log", args, meta={KEY: key})
    for who, result in answers.items():
        assert result.is_error is False, (who, text_of(result))
        assert REPLAYED not in meta_of(result), who
    # The upstream sees each principal's key scoped ("<principal hash>/<key>"): two keys, two runs.
    seen = [r["idempotency_key"] for r in read_executions(setup.notes_state, tool="append_log")
            if r["arguments"] == args]
    assert len(seen) == 2 and len(set(seen)) == 2 and all(k.endswith("/" + key) for k in seen), seen
    # Each principal's retry replays its own first answer.
    for who in ("alice", "bob"):
        async with connect(setup.gateway.url, era, token=TOKENS[who]) as client:
            again = await client.call_tool("notes__append_log", args, meta={KEY: key})
        assert meta_of(again)[REPLAYED] is True
        assert text_of(again) == text_of(answers[who])
    assert len([r for r in read_executions(setup.notes_state, tool="append_log") if r["arguments"] == args]) == 2


async def test_two_principals_with_the_same_key_both_execute_behind_a_dex_upstream(setup: Setup, era: str) -> None:
    key = new_key(f"shared-dex-{era}")
    args = {"to": "dave", "amount": 7}
    answers = {}
    for who in ("alice", "bob"):
        async with connect(setup.gateway.url, era, token=TOKENS[who]) as client:
            answers[who] = await client.call_tool("pay__send_payment", args, meta={KEY: key})
    for who, result in answers.items():
        assert result.is_error is False, (who, text_of(result))
        assert OUTCOME not in meta_of(result)
    # Two principals, two payments: bob must not be handed alice's payment id.
    assert answers["alice"].structured_content != answers["bob"].structured_content
    # Each principal's key reaches the upstream scoped, so its own fence keeps them apart too.
    seen = [r["idempotency_key"] for r in read_executions(setup.state, tool="send_payment")
            if (r["idempotency_key"] or "").endswith("/" + key)]
    assert len(seen) == 2 and len(set(seen)) == 2, seen


# -- health -------------------------------------------------------------------------------------


def test_healthz_and_readyz(setup: Setup) -> None:
    live = httpx.get(setup.gateway.base + "/healthz", timeout=10)
    ready = httpx.get(setup.gateway.base + "/readyz", timeout=10)
    assert live.status_code == 200 and live.json()["status"] == "ok"
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert "Traceback" not in live.text + ready.text
