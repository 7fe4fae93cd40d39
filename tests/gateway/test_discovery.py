"""Search-based tool discovery (issue 28, docs/discovery.md) on a real `dex-gateway serve`.

* tools/list in search mode: the `always` tools plus `search_tools` and `call_tool`; a token in
  full mode still lists everything.
* search_tools answers full definitions within the caller's scope: a principal scoped to one
  upstream never gets another's tool, although both upstreams carry the same tool names and
  descriptions (two copies of the example notes server).
* call_tool runs the target through the one pipeline: parity with calling the target directly
  over the conventions fixtures (a non-idempotent write without a key is rejected, its retry
  with the same key replayed, an interrupted one unknown), byte for byte.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.test_gateway_http import sha
from tests.gateway.test_gateway_parity import (
    CRASH_TOOL, HANDSHAKE, KEY, MODERN, OUTCOME, PLAIN_WRITE, RUNNABLE, UPSTREAM, UPSTREAM_ONE, Case, Reply, _scripts, post,
)
from tests.support.gateway import RunningGateway, run_gateway_cli, start_gateway, stdio_upstream, write_config
from tests.support.scripted_server import SCRIPT_FILE, SCRIPT_PATH, STATE_ENV, read_attempts
from tests.support.servers import REPO_ROOT

TOKENS = {"ops": "ops-discovery-token", "alpha": "alpha-discovery-token", "full": "full-discovery-token",
          "keeper": "keeper-discovery-token"}
REPLAYED = "dex-gateway/replayed"


def _headers(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _call(http: httpx.Client, gw: RunningGateway, params: dict[str, Any], request_id: Any = 1,
          method: str = "tools/call") -> dict[str, Any]:
    reply = post(http, gw.url, HANDSHAKE, method, params, request_id)
    assert reply.status == 200, reply.message[:300]
    return reply.parsed


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    root = tmp_path_factory.mktemp("discovery-scope")
    config = write_config(root, {
        "discovery": {"mode": "search", "always": ["alpha__list_*"]},
        "auth": {"tokens": [
            {"principal": "ops", "token_sha256": sha(TOKENS["ops"])},
            {"principal": "alpha", "token_sha256": sha(TOKENS["alpha"]), "upstreams": ["alpha"]},
            {"principal": "full", "token_sha256": sha(TOKENS["full"]), "discovery": {"mode": "full"}},
            {"principal": "keeper", "token_sha256": sha(TOKENS["keeper"])},
        ]},
        # keeper may delete nothing: a rule that reads no arguments hides the tools from its listing and search.
        "policy": {"rules": [{"name": "keeper-deletes", "tools": ["*__delete_note"], "principals": ["keeper"], "effect": "deny"}]},
        # Two copies of one server: every tool name and description matches in both.
        "upstreams": [stdio_upstream("alpha", "plain_server", state_dir=root / "a", keyless_writes="pass"),
                      stdio_upstream("beta", "plain_server", state_dir=root / "b", keyless_writes="pass")],
    })
    with start_gateway(config) as gw:
        yield gw


def _client(token: str) -> httpx.Client:
    return httpx.Client(timeout=60, headers=_headers(token))


def test_search_mode_lists_the_always_tools_and_the_two_gateway_tools(notes: RunningGateway) -> None:
    with _client(TOKENS["ops"]) as http:
        tools = _call(http, notes, {}, method="tools/list")["result"]["tools"]
    assert [t["name"] for t in tools] == ["alpha__list_notes", "search_tools", "call_tool"]
    call_tool = tools[2]
    assert call_tool["_meta"] == {"io.superdurable.dex/approval": "recommended"}  # unclassified: no effect key
    assert call_tool["annotations"]["readOnlyHint"] is False
    with _client(TOKENS["full"]) as http:
        names = {t["name"] for t in _call(http, notes, {}, method="tools/list")["result"]["tools"]}
    assert "beta__delete_note" in names and "search_tools" not in names


def test_search_answers_full_definitions_and_never_another_upstreams_tool(notes: RunningGateway) -> None:
    with _client(TOKENS["ops"]) as http:
        result = _call(http, notes, {"name": "search_tools", "arguments": {"query": "delete a note", "limit": 4}})["result"]
    found = result["structuredContent"]["tools"]
    assert {t["name"] for t in found[:2]} == {"alpha__delete_note", "beta__delete_note"}
    assert found[0]["inputSchema"]["type"] == "object" and "annotations" in found[0]  # the published definition
    assert "alpha__delete_note" in result["content"][0]["text"]
    with _client(TOKENS["alpha"]) as http:
        for query in ("delete a note", "beta delete note", "beta__delete_note", "list notes on beta"):
            result = _call(http, notes, {"name": "search_tools", "arguments": {"query": query, "limit": 20}})["result"]
            names = [t["name"] for t in result["structuredContent"]["tools"]]
            assert names and all(n.startswith("alpha__") for n in names), (query, names)
        # Filtering by the other upstream finds nothing; calling its tool through call_tool is an unknown tool.
        result = _call(http, notes, {"name": "search_tools", "arguments": {"query": "note", "upstream": "beta"}})["result"]
        assert result["structuredContent"]["tools"] == []
        error = _call(http, notes, {"name": "call_tool", "arguments": {"name": "beta__list_notes"}})["error"]
        assert "beta__list_notes" in error["message"]


def test_search_never_answers_a_tool_the_policy_hides_from_the_caller(notes: RunningGateway) -> None:
    with _client(TOKENS["keeper"]) as http:
        result = _call(http, notes, {"name": "search_tools", "arguments": {"query": "delete a note", "limit": 20}})["result"]
        names = [t["name"] for t in result["structuredContent"]["tools"]]
        assert names and not any(n.endswith("__delete_note") for n in names), names
        error = _call(http, notes, {"name": "call_tool", "arguments": {"name": "alpha__delete_note", "arguments": {"name": "x"}}})
        assert "alpha__delete_note" in error["error"]["message"]


def test_search_filters_by_effect_and_names_bad_arguments(notes: RunningGateway) -> None:
    with _client(TOKENS["ops"]) as http:
        result = _call(http, notes, {"name": "search_tools", "arguments": {"query": "note", "effect": "read", "limit": 20}})
        names = [t["name"] for t in result["result"]["structuredContent"]["tools"]]
        assert names and all(n.split("__")[1] in ("list_notes", "read_note") for n in names), names
        for arguments, fragment in (({"query": "x", "limit": 21}, "limit"), ({}, "query"),
                                    ({"query": "x", "effect": "maybe"}, "effect"), ({"query": "x", "k": 1}, "'k'")):
            error = _call(http, notes, {"name": "search_tools", "arguments": arguments})["error"]
            assert error["code"] == -32602 and "search_tools" in error["message"] and fragment in error["message"], error
        error = _call(http, notes, {"name": "call_tool", "arguments": {"arguments": {}}})["error"]
        assert error["code"] == -32602 and "call_tool" in error["message"]


def test_call_tool_runs_the_target_and_a_listed_or_unlisted_tool_stays_callable_by_name(notes: RunningGateway) -> None:
    with _client(TOKENS["ops"]) as http:
        put = {"name": "beta__put_note", "arguments": {"name": "n1", "text": "hello"}}
        assert _call(http, notes, {"name": "call_tool", "arguments": put})["result"]["isError"] is False
        read = _call(http, notes, {"name": "beta__read_note", "arguments": {"name": "n1"}})["result"]
        assert read["content"][0]["text"] == "hello"


def test_both_eras_answer_search_tools_and_call_tool(notes: RunningGateway) -> None:
    with _client(TOKENS["ops"]) as http:
        for era in (HANDSHAKE, MODERN):
            reply = post(http, notes.url, era, "tools/call",
                         {"name": "search_tools", "arguments": {"query": "read a note", "limit": 1}}, 11)
            result = reply.parsed["result"]
            assert [t["name"] for t in result["structuredContent"]["tools"]][0].endswith("__read_note"), (era, result)
            reply = post(http, notes.url, era, "tools/call", {"name": "call_tool", "arguments": {"name": "alpha__list_notes"}}, 12)
            assert reply.parsed["result"]["isError"] is False, (era, reply.message[:300])


# -- parity: direct vs through call_tool, over the conventions fixtures ----------------------------


@dataclass
class Scripted:
    gateway: RunningGateway
    states: dict[str, Path]
    http: httpx.Client

    def attempts(self, case: Case, run: str) -> list[dict[str, Any]]:
        return [a for a in read_attempts(self.states[case.upstream]) if a["tool"] == case.tool and a["run"] == run]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scripted]:
    root = tmp_path_factory.mktemp("discovery-parity")
    scripts = _scripts(RUNNABLE)
    upstreams, states = [], {}
    for name, options in ((UPSTREAM, {}), (UPSTREAM_ONE, {"max_attempts": 1})):
        state = root / f"state-{name}"
        state.mkdir(parents=True)
        (state / SCRIPT_FILE).write_text(json.dumps(scripts[name]))
        states[name] = state
        upstreams.append({"name": name, "transport": "stdio", "command": sys.executable, "args": [str(SCRIPT_PATH)],
                          "env": {STATE_ENV: str(state)}, "cwd": str(REPO_ROOT), **options})
    config = write_config(root, {"discovery": {"mode": "search"}, "upstreams": upstreams})
    with ExitStack() as stack:
        gw = stack.enter_context(start_gateway(config))
        http = stack.enter_context(httpx.Client(timeout=60))
        post(http, gw.url, HANDSHAKE, "tools/list", {}, 0)
        yield Scripted(gw, states, http)


def _both_ways(s: Scripted, case: Case, request_id: int) -> dict[str, tuple[Reply, Reply, int]]:
    """The case called directly and through call_tool (each its own run and key): first answer,
    retry with the same key, and the upstream attempts."""
    out = {}
    for way in ("direct", "via"):
        run = f"{case.id}@{way}@{uuid.uuid4().hex[:6]}"
        key = f"discovery/{run}"
        target = {"name": case.exposed, "arguments": {"run": run}}
        params = target if way == "direct" else {"name": "call_tool", "arguments": target}
        params = {**params, "_meta": {KEY: key}}
        if case.not_sent_first:
            crash = {"name": f"{case.upstream}__{CRASH_TOOL}", "arguments": {"run": run}, "_meta": {KEY: f"crash/{key}"}}
            assert _call(s.http, s.gateway, crash)["result"]["_meta"][OUTCOME] == "unknown"
        first = post(s.http, s.gateway.url, HANDSHAKE, "tools/call", params, request_id)
        retry = post(s.http, s.gateway.url, HANDSHAKE, "tools/call", params, request_id)
        out[way] = (first, retry, len(s.attempts(case, run)))
    return out


def _assert_parity(s: Scripted, case: Case) -> dict[str, Any]:
    ways = _both_ways(s, case, 7)
    direct, via = ways["direct"], ways["via"]
    assert direct[0].message == via[0].message, f"{case.id}: first answers differ\n{direct[0].message!r}\n{via[0].message!r}"
    assert direct[1].message == via[1].message, f"{case.id}: retries differ\n{direct[1].message!r}\n{via[1].message!r}"
    assert direct[2] == via[2], f"{case.id}: the upstream saw {direct[2]} attempts directly, {via[2]} via call_tool"
    return via[1].parsed


def _case(case_id: str) -> Case:
    return next(c for c in RUNNABLE if c.id == case_id)


def test_call_tool_keyless_write_is_rejected_as_when_called_directly(scripted: Scripted) -> None:
    target = {"name": f"{UPSTREAM}__{PLAIN_WRITE}", "arguments": {"run": "keyless"}}
    direct = post(scripted.http, scripted.gateway.url, HANDSHAKE, "tools/call", target, 3)
    via = post(scripted.http, scripted.gateway.url, HANDSHAKE, "tools/call", {"name": "call_tool", "arguments": target}, 3)
    assert direct.message == via.message
    assert via.parsed["result"]["_meta"][OUTCOME] == "rejected"


def test_call_tool_retry_with_the_same_key_is_replayed(scripted: Scripted) -> None:
    retry = _assert_parity(scripted, _case("out.result.success"))  # a non-idempotent write that succeeds
    assert retry["result"]["_meta"][REPLAYED] is True, retry
    assert retry["result"]["structuredContent"] == {"rows": 2}


def test_call_tool_interrupted_write_is_unknown(scripted: Scripted) -> None:
    retry = _assert_parity(scripted, _case("out.interrupted.niw"))
    assert retry["result"]["_meta"][OUTCOME] == "unknown"


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in RUNNABLE if not c.id.startswith("mal.")], ids=lambda c: c.id)
def test_call_tool_parity_over_every_fixture(scripted: Scripted, case: Case) -> None:
    _assert_parity(scripted, case)


# -- the CLI --------------------------------------------------------------------------------------


def test_cli_tools_search_table_and_json(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"upstreams": [stdio_upstream("notes", "plain_server", state_dir=tmp_path / "n")]})
    table = run_gateway_cli("tools", "search", "remove a note", "--limit", "2", "--config", str(config), timeout=60)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["RANK", "NAME", "EFFECT"] and lines[1].split()[1] == "notes__delete_note", table.stdout
    assert len(lines) == 3
    as_json = run_gateway_cli("tools", "search", "remove a note", "--json", "--config", str(config), timeout=60)
    tools = json.loads(as_json.stdout)["tools"]
    assert tools[0]["name"] == "notes__delete_note" and "inputSchema" in tools[0]


def test_cli_tools_search_bad_limit_is_named_before_anything_starts(tmp_path: Path) -> None:
    bad = run_gateway_cli("tools", "search", "x", "--limit", "0", "--config", str(tmp_path / "absent.yaml"), timeout=30)
    assert bad.returncode == 2 and "limit must be an integer from 1 to 20, not 0" in bad.stderr and "Traceback" not in bad.stderr


def test_a_bad_discovery_mode_is_a_config_error_naming_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("discovery:\n  mode: lazy\nauth:\n  tokens:\n    - principal: a\n      token_sha256: " + "a" * 64
                    + "\n      discovery: {mode: sometimes}\n")
    done = run_gateway_cli("tools", "search", "x", "--config", str(path), timeout=30)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{path}:2: discovery.mode: Input should be 'full' or 'search'" in done.stderr, done.stderr
