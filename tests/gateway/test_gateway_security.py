"""The front attacked from outside (issue 14), each case against a real `dex-gateway serve`:
per-principal scope over everything a principal can reach, malformed requests answered with a
clear JSON-RPC error (never a 500, never silence), the result size limit, readiness detail only
with a token, the admin API behind the Host/Origin guard, loopback origins only on the
gateway's own port, private database files, and client-facing texts without addresses."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.test_gateway_http import (
    LEGACY,
    MODERN,
    assert_clean,
    error_of,
    headers,
    jsonrpc_message,
    post,
    request,
    sha,
)
from mcp.shared.inbound import NAME_BEARING_METHODS, encode_header_value

from tests.support.gateway import RunningGateway, http_upstream, start_gateway, stdio_upstream, write_config
from tests.support.servers import spawn_http_server

pytestmark = [pytest.mark.timeout(120)]

TOKENS = {"alice": "alice-secret-token", "bob": "bob-secret-token", "carol": "carol-secret-token"}
ADMIN_TOKEN = "admin-secret-token"


@dataclass
class Setup:
    gateway: RunningGateway
    root: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("security")
    config = write_config(root, {
        "auth": {
            "tokens": [
                {"principal": "alice", "token_sha256": sha(TOKENS["alice"])},
                # bob: notes tools only -- deny by default for everything else.
                {"principal": "bob", "token_sha256": sha(TOKENS["bob"]), "tools": ["notes__*"]},
                # carol: the whole payments upstream.
                {"principal": "carol", "token_sha256": sha(TOKENS["carol"]), "upstreams": ["pay"]},
            ],
            "admin_token_sha256": sha(ADMIN_TOKEN),
        },
        "upstreams": [stdio_upstream("pay", "dex_server", state_dir=root / "pay"),
                      stdio_upstream("notes", "plain_server", state_dir=root / "notes")],
        # A directory that does not exist yet: the gateway creates it (0700) and the file (0600).
        "fences": {"store": f"sqlite:///{root / 'private' / 'fences.db'}"},
    })
    with start_gateway(config) as gateway:
        yield Setup(gateway, root)


def routing_headers(message: dict[str, Any], version: str) -> dict[str, str]:
    """The 2026-07-28 routing headers of a request (Mcp-Method, and Mcp-Name where the method names one)."""
    if version != MODERN:
        return {}
    hdrs = {"mcp-method": message["method"]}
    name_key = NAME_BEARING_METHODS.get(message["method"])
    name = (message.get("params") or {}).get(name_key) if name_key else None
    if isinstance(name, str):
        hdrs["mcp-name"] = encode_header_value(name)
    return hdrs


def rpc(setup: Setup, method: str, params: dict[str, Any] | None = None, *, who: str = "alice",
        version: str = LEGACY) -> dict[str, Any]:
    message = request(method, params, version)
    response = post(setup.gateway.url, message, headers(version, TOKENS[who], **routing_headers(message, version)))
    assert_clean(response)
    return jsonrpc_message(response)


# -- per-principal scope ------------------------------------------------------------------------


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_a_principal_limited_to_notes_tools_reaches_nothing_else(setup: Setup, version: str) -> None:
    tools = rpc(setup, "tools/list", who="bob", version=version)["result"]["tools"]
    assert tools and all(t["name"].startswith("notes__") for t in tools)
    assert rpc(setup, "resources/list", who="bob", version=version)["result"]["resources"] == []
    assert rpc(setup, "resources/templates/list", who="bob", version=version)["result"]["resourceTemplates"] == []
    assert rpc(setup, "prompts/list", who="bob", version=version)["result"]["prompts"] == []
    read = rpc(setup, "resources/read", {"uri": "payments://accounts/main"}, who="bob", version=version)
    assert read["error"]["code"] == -32602 and "no upstream serves" in read["error"]["message"]
    assert "EUR" not in json.dumps(read)
    prompt = rpc(setup, "prompts/get", {"name": "pay__dispute_letter", "arguments": {"payment_id": "p1"}},
                 who="bob", version=version)
    assert prompt["error"]["code"] == -32602 and "unknown prompt" in prompt["error"]["message"]
    completion = rpc(setup, "completion/complete", {
        "ref": {"type": "ref/prompt", "name": "pay__dispute_letter"},
        "argument": {"name": "payment_id", "value": "p"},
    }, who="bob", version=version)
    assert "error" in completion and "unknown prompt" in completion["error"]["message"]
    call = rpc(setup, "tools/call", {"name": "pay__get_balance", "arguments": {"account": "main"}},
               who="bob", version=version)
    assert call["error"]["code"] == -32602 and "unknown tool" in call["error"]["message"]


def test_a_scoped_principal_cannot_change_log_levels_it_was_not_granted(setup: Setup) -> None:
    refused = rpc(setup, "logging/setLevel", {"level": "debug"}, who="bob")
    assert refused["error"]["code"] == -32602 and "scope" in refused["error"]["message"]
    assert "result" in rpc(setup, "logging/setLevel", {"level": "debug"}, who="carol")


def test_an_upstream_grant_reaches_all_of_that_upstream_and_nothing_of_the_others(setup: Setup) -> None:
    tools = [t["name"] for t in rpc(setup, "tools/list", who="carol")["result"]["tools"]]
    assert tools and all(name.startswith("pay__") for name in tools)
    resources = rpc(setup, "resources/list", who="carol")["result"]["resources"]
    assert [r["uri"] for r in resources] == ["payments://policy"]
    read = rpc(setup, "resources/read", {"uri": "payments://accounts/main"}, who="carol")
    assert "result" in read, read
    prompts = rpc(setup, "prompts/list", who="carol")["result"]["prompts"]
    assert [p["name"] for p in prompts] == ["pay__dispute_letter"]
    notes = rpc(setup, "tools/call", {"name": "notes__list_notes", "arguments": {}}, who="carol")
    assert "unknown tool" in notes["error"]["message"]


def test_an_unscoped_principal_reaches_everything(setup: Setup) -> None:
    names = {t["name"].split("__")[0] for t in rpc(setup, "tools/list")["result"]["tools"]}
    assert names == {"pay", "notes"}
    assert rpc(setup, "resources/list")["result"]["resources"]


# -- malformed requests -------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["PUT", "PATCH", "OPTIONS"])
def test_other_http_methods_get_405_with_a_jsonrpc_body(setup: Setup, method: str) -> None:
    response = httpx.request(method, setup.gateway.url, headers=headers(), content=b"{}", timeout=10)
    assert response.status_code == 405
    assert "POST" in response.headers.get("allow", "")
    assert method in error_of(response)["message"]


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/jsonx", "application/json; charset=utf-16",
                                          "multipart/form-data"])
def test_wrong_content_types_get_415_with_a_jsonrpc_body(setup: Setup, content_type: str | None) -> None:
    hdrs = headers()
    del hdrs["content-type"]
    if content_type is not None:
        hdrs["content-type"] = content_type
    response = post(setup.gateway.url, request("tools/list"), hdrs)
    assert response.status_code == 415
    assert "application/json" in error_of(response)["message"]


def test_an_accept_without_sse_gets_406_with_a_jsonrpc_body(setup: Setup) -> None:
    response = post(setup.gateway.url, request("tools/list"), headers(accept="application/json"))
    assert response.status_code == 406
    assert "text/event-stream" in error_of(response)["message"]


@pytest.mark.parametrize("raw_id", ["null", '{"a": 1}', "1.5", "true", "[1]"])
@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_bad_ids_get_invalid_request_not_silence(setup: Setup, raw_id: str, version: str) -> None:
    body = ('{"jsonrpc": "2.0", "id": %s, "method": "tools/list"}' % raw_id).encode()
    response = post(setup.gateway.url, body, headers(version, mcp_method="tools/list"))
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == -32600 and '"id"' in error["message"]


@pytest.mark.parametrize("body, code, says", [
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]', -32600, "batches are not supported"),
    (b'{"jsonrpc": "2.0", "id": 1e400, "method": "tools/list"}', -32700, "too large"),
    (b'{"jsonrpc": "2.0", "id": "\\ud800", "method": "tools/list"}', -32700, "strict JSON"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "pay__get_balance", '
     b'"arguments": {"account": NaN}}}', -32700, "strict JSON"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "pay__get_balance", '
     b'"arguments": {"account": "\\udfff"}}}', -32700, "strict JSON"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": ' + b"[" * 1200 + b"]" * 1200 + b"}",
     -32700, "nested too deeply"),
    ('{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'.encode("utf-16"), -32700, "UTF-8"),
    (b'\xff\xfe{"jsonrpc": "2.0"}', -32700, "strict JSON"),
])
def test_malformed_bodies_get_a_clear_jsonrpc_error(setup: Setup, body: bytes, code: int, says: str) -> None:
    response = post(setup.gateway.url, body, headers())
    assert response.status_code == 400
    error = error_of(response)
    assert error["code"] == code and says in error["message"], error


def test_nothing_malformed_reaches_the_upstream(setup: Setup) -> None:
    before = (setup.root / "pay" / "executions.jsonl").read_text() if (setup.root / "pay" / "executions.jsonl").exists() else ""
    post(setup.gateway.url, b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
                            b'"pay__get_balance", "arguments": {"account": 1e999}}}', headers())
    after = (setup.root / "pay" / "executions.jsonl").read_text() if (setup.root / "pay" / "executions.jsonl").exists() else ""
    assert after == before


# -- result size limit --------------------------------------------------------------------------


@pytest.mark.parametrize("version", [LEGACY, MODERN])
def test_a_30_mb_result_is_refused_with_both_sizes(setup: Setup, version: str) -> None:
    answer = rpc(setup, "tools/call", {"name": "pay__statement", "arguments": {"size_bytes": 30_000_000}},
                 version=version)
    result = answer["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    size = int(re.search(r"is (\d+) bytes", text).group(1))  # type: ignore[union-attr]
    assert size > 30_000_000 and "over this gateway's limit of 8388608 bytes" in text, text
    assert len(json.dumps(answer)) < 10_000
    small = rpc(setup, "tools/call", {"name": "pay__statement", "arguments": {"size_bytes": 1000}}, version=version)
    assert small["result"]["isError"] is False and len(small["result"]["content"][0]["text"]) == 1000


# -- operations surfaces ------------------------------------------------------------------------


def test_readyz_names_upstreams_only_to_the_admin_token(setup: Setup) -> None:
    # An agent token is scoped to some upstreams: the whole list is not its to see.
    for headers in ({}, {"authorization": f"Bearer {TOKENS['carol']}"}, {"authorization": "Bearer wrong"}):
        plain = httpx.get(setup.gateway.base + "/readyz", headers=headers, timeout=10)
        assert plain.status_code == 200 and plain.json() == {"status": "ready"}
    detailed = httpx.get(setup.gateway.base + "/readyz", headers={"authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10)
    assert detailed.json()["upstreams"] == ["pay", "notes"]


@pytest.mark.parametrize("hdrs, status", [({"host": "evil.example"}, 421), ({"origin": "http://evil.example"}, 403)])
def test_the_admin_api_is_behind_the_host_origin_guard(setup: Setup, hdrs: dict[str, str], status: int) -> None:
    response = httpx.get(setup.gateway.base + "/admin/connectors",
                         headers={"authorization": f"Bearer {ADMIN_TOKEN}", **hdrs}, timeout=10)
    assert response.status_code == status
    assert error_of(response)["message"]
    fine = httpx.get(setup.gateway.base + "/admin/connectors", headers={"authorization": f"Bearer {ADMIN_TOKEN}"},
                     timeout=10)
    assert fine.status_code == 200


def test_a_loopback_origin_on_another_port_is_refused(setup: Setup) -> None:
    other = post(setup.gateway.url, request("tools/list"), headers(origin="http://localhost:3000"))
    assert other.status_code == 403
    own = post(setup.gateway.url, request("tools/list"), headers(origin=setup.gateway.base))
    assert own.status_code == 200


def test_the_fence_database_is_private(setup: Setup) -> None:
    rpc(setup, "tools/call", {"name": "pay__set_memo", "arguments": {"payment_id": "p1", "memo": "m"},
                              "_meta": {"io.superdurable.dex/idempotencyKey": "perm/1"}})
    directory = setup.root / "private"
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    for path in directory.iterdir():
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_client_texts_name_no_address_or_exception_class(tmp_path: Path) -> None:
    upstream = spawn_http_server("dex_server", state_dir=tmp_path / "pay")
    try:
        config = write_config(tmp_path, {"upstreams": [http_upstream("pay", upstream.url)]})
        with start_gateway(config) as gateway:
            first = post(gateway.url, request("tools/call", {"name": "pay__get_balance", "arguments": {"account": "a"}}),
                         headers(token=None))
            assert jsonrpc_message(first)["result"]["isError"] is False
            upstream.kill()
            answer = jsonrpc_message(post(gateway.url, request(
                "tools/call", {"name": "pay__get_balance", "arguments": {"account": "a"}}), headers(token=None)))
    finally:
        upstream.stop()
    text = answer["result"]["content"][0]["text"]
    assert answer["result"]["isError"] is True and "did not run" in text, text
    port = upstream.url.rsplit(":", 1)[1].split("/")[0]
    for leak in ("127.0.0.1", port, "Error:", "Errno", "aiohttp", "Connector"):
        assert leak not in text, (leak, text)
