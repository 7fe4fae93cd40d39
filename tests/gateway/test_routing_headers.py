"""The 2026-07-28 routing headers (`Mcp-Method`, `Mcp-Name`; issue 26 item 3), against a real
`dex-gateway serve` and a real upstream that records every request it receives
(tests/support/token_server.py):

* a request whose headers disagree with its body, in every combination (method or name; absent,
  another value, another case, given twice), is refused with -32020 before any routing or scope
  decision, and nothing reaches the upstream;
* a principal scoped to one tool cannot reach another by putting one name in the header and
  another in the body;
* every request the gateway sends a 2026-07-28 upstream carries the headers its body implies.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.test_gateway_http import MODERN, assert_clean, headers, jsonrpc_message, request, sha
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT, STATE_DIR_ENV
from tests.support.token_server import ME, SCRIPT_PATH, read_records

pytestmark = [pytest.mark.timeout(120)]

ALICE, BOB = "alice-routing-token", "bob-routing-token"
HEADER_MISMATCH = -32020
WHOAMI, NOTE = "rec__whoami", "rec__note"


@dataclass
class Setup:
    gateway: RunningGateway
    state: Path

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.state)

    def reached(self) -> list[dict[str, Any]]:
        """What reached the upstream on a client's behalf (not the gateway's own listings)."""
        return [r for r in self.records() if r["method"] in ("tools/call", "resources/read", "prompts/get")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("routing")
    state = root / "rec"
    state.mkdir()
    process, url = spawn_listening([sys.executable, str(SCRIPT_PATH), "--port", "0"], cwd=REPO_ROOT,
                                   env={**os.environ, STATE_DIR_ENV: str(state)}, name="rec", lines=[],
                                   ready_timeout=20)
    assert url is not None
    try:
        config = write_config(root, {
            "auth": {"tokens": [
                {"principal": "alice", "token_sha256": sha(ALICE)},
                {"principal": "bob", "token_sha256": sha(BOB), "tools": [WHOAMI]},  # one tool only
            ]},
            # The upstream wants a bearer token; a static one (not a JWT: its `sub` is None).
            "upstreams": [http_upstream("rec", url, protocol=MODERN, headers={"Authorization": "Bearer static"})],
        })
        with start_gateway(config) as gateway:
            yield Setup(gateway, state)
    finally:
        terminate(process)


def send(setup: Setup, message: dict[str, Any], token: str, routing: list[tuple[str, str]]) -> dict[str, Any]:
    """POST `message` with exactly these routing headers (a list: a header may come twice)."""
    hdrs = [*headers(MODERN, token).items(), *routing]
    response = httpx.post(setup.gateway.url, json=message, headers=hdrs, timeout=30)
    assert_clean(response)
    return jsonrpc_message(response)


def call_message(name: str) -> dict[str, Any]:
    return request("tools/call", {"name": name, "arguments": {}}, MODERN)


# (label, routing headers) for a tools/call whose body names rec__whoami
MISMATCHES = [
    ("method absent", [("mcp-name", WHOAMI)]),
    ("method another", [("mcp-method", "tools/list"), ("mcp-name", WHOAMI)]),
    ("method case", [("mcp-method", "Tools/Call"), ("mcp-name", WHOAMI)]),
    ("method twice", [("mcp-method", "tools/call"), ("mcp-method", "tools/call"), ("mcp-name", WHOAMI)]),
    ("name absent", [("mcp-method", "tools/call")]),
    ("name another", [("mcp-method", "tools/call"), ("mcp-name", NOTE)]),
    ("name case", [("mcp-method", "tools/call"), ("mcp-name", WHOAMI.upper())]),
    ("name empty", [("mcp-method", "tools/call"), ("mcp-name", "")]),
    ("name twice", [("mcp-method", "tools/call"), ("mcp-name", WHOAMI), ("mcp-name", WHOAMI)]),
]


@pytest.mark.parametrize("label,routing", MISMATCHES, ids=[label for label, _ in MISMATCHES])
def test_a_tools_call_whose_headers_disagree_with_its_body_is_refused_and_sent_nowhere(
        setup: Setup, label: str, routing: list[tuple[str, str]]) -> None:
    before = len(setup.reached())
    answer = send(setup, call_message(WHOAMI), ALICE, routing)
    assert answer.get("error", {}).get("code") == HEADER_MISMATCH, (label, answer)
    assert len(setup.reached()) == before


def test_the_same_call_with_matching_headers_runs_and_header_names_are_case_insensitive(setup: Setup) -> None:
    before = len(setup.reached())
    answer = send(setup, call_message(WHOAMI), ALICE, [("Mcp-Method", "tools/call"), ("MCP-NAME", WHOAMI)])
    assert "result" in answer and not answer["result"].get("isError"), answer
    assert len(setup.reached()) == before + 1


@pytest.mark.parametrize("method,params,name", [
    ("resources/read", {"uri": ME}, "whoami://other"),
    ("prompts/get", {"name": "rec__absent"}, "rec__other"),
    ("tasks/get", {"taskId": "t-1"}, "t-2"),
])
def test_other_named_methods_are_held_to_their_headers_too(setup: Setup, method: str, params: dict[str, Any],
                                                           name: str) -> None:
    before = len(setup.reached())
    message = request(method, params, MODERN)
    for routing in ([("mcp-method", method)], [("mcp-method", method), ("mcp-name", name)],
                    [("mcp-method", method.upper()), ("mcp-name", next(iter(params.values())))]):
        answer = send(setup, message, ALICE, routing)
        assert answer.get("error", {}).get("code") == HEADER_MISMATCH, (method, routing, answer)
    assert len(setup.reached()) == before


def test_a_principal_scoped_to_one_tool_cannot_reach_another_by_headers(setup: Setup) -> None:
    before = len(setup.reached())
    for body, header in ((NOTE, WHOAMI), (WHOAMI, NOTE)):
        answer = send(setup, call_message(body), BOB, [("mcp-method", "tools/call"), ("mcp-name", header)])
        assert answer.get("error", {}).get("code") == HEADER_MISMATCH, answer
    refused = send(setup, call_message(NOTE), BOB, [("mcp-method", "tools/call"), ("mcp-name", NOTE)])
    assert "unknown tool" in refused["error"]["message"]  # matching headers: the scope decides
    assert len(setup.reached()) == before
    allowed = send(setup, call_message(WHOAMI), BOB, [("mcp-method", "tools/call"), ("mcp-name", WHOAMI)])
    assert "result" in allowed
    assert [r["name"] for r in setup.reached()[before:]] == ["whoami"]


def test_every_request_the_gateway_sends_upstream_carries_the_headers_its_body_implies(setup: Setup) -> None:
    send(setup, call_message(WHOAMI), ALICE, [("mcp-method", "tools/call"), ("mcp-name", WHOAMI)])
    send(setup, request("resources/read", {"uri": ME}, MODERN), ALICE,
         [("mcp-method", "resources/read"), ("mcp-name", ME)])
    records = setup.records()
    assert {r["method"] for r in records} >= {"server/discover", "tools/list", "tools/call", "resources/read"}
    for record in records:
        assert record["mcp-method"] == record["method"], record
        named = record["name"] if record["method"] in ("tools/call", "prompts/get") else \
            record["uri"] if record["method"] == "resources/read" else None
        assert record["mcp-name"] == named, record
