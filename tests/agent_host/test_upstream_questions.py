"""Questions from upstreams reach the user: server-everything's elicitation tool, through a stateful
gateway session, becomes a session question (a form) that the HTTP API answers; the answer is
checked against the requested schema, and the upstream gets it (real gateway, real server-everything,
`dex-agent run`)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.server import Server

from gateway.internals import FormOnlyElicitationClient

from tests.agent_host.host_support import Proc, dex_agent, run_agent
from tests.support.everything import everything_stdio, require_everything
from tests.support.gateway import http_upstream, start_gateway, write_config
from tests.support.servers import free_port, read_executions, start_http_server

pytestmark = pytest.mark.timeout(120)

SCRIPT = "scripted:tests.agent_host.question_scripts:call_tool_named"
APPROVER = {"Authorization": "Bearer approver-secret"}


def pending(port: int, proc: Proc, what: str) -> dict[str, Any]:
    """The first pending approval or question (`what`: approvals | questions) the host API lists."""
    deadline = time.monotonic() + 30
    while True:
        assert time.monotonic() < deadline, proc.output
        try:
            listed = httpx.get(f"http://127.0.0.1:{port}/{what}", headers=APPROVER).json()[what]
            if listed:
                return listed[0]  # type: ignore[no-any-return]
        except httpx.HTTPError:
            pass
        time.sleep(0.05)


def answered_run(store: Path, gateway_url: str, message: str, decide: dict[str, Any], *more: str,
                 check: Callable[[dict[str, Any]], None] = lambda question: None) -> Proc:
    """`dex-agent run MESSAGE` (auto-approved, the host API on a free port) whose first session
    question is `check`ed, then decided over the API with `decide`; the finished run."""
    port = free_port()
    proc = dex_agent("--store", str(store), "run", "--gateway", gateway_url, "--model", SCRIPT, "--yes",
                     "--approvals-port", str(port), *more, message, env={"DEX_APPROVER_TOKEN": "approver-secret"})
    try:
        question = pending(port, proc, "questions")
        check(question)
        decided = httpx.post(f"http://127.0.0.1:{port}/questions/{question['id']}", json=decide, headers=APPROVER)
        assert decided.status_code == 200, decided.text
        assert proc.finish() == 0, proc.output
    finally:
        proc.stop()
    return proc


def test_an_upstream_elicitation_is_a_session_question_answered_over_the_api(tmp_path: Path) -> None:
    node = require_everything()
    config = write_config(tmp_path, {"server": {"stateful": True}, "upstreams": [everything_stdio(node=node)]})
    port = free_port()
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready", timeout=30)
        proc = dex_agent("--store", str(tmp_path / "s.db"), "run", "--gateway", gateway.url, "--model", SCRIPT,
                         "--approve", "api", "--approvals-port", str(port), "trigger-elicitation-request",
                         env={"DEX_APPROVER_TOKEN": "approver-secret"})
        try:
            approval = pending(port, proc, "approvals")  # the tool is unclassified: it asks first
            allowed = httpx.post(f"http://127.0.0.1:{port}/approvals/{approval['id']}", json={"decision": "allow"}, headers=APPROVER)
            assert allowed.status_code == 200, allowed.text
            question = pending(port, proc, "questions")
            assert question["kind"] == "elicitation" and question["status"] == "pending"
            fields = {f["name"]: f for f in question["fields"]}
            assert fields, question
            url = f"http://127.0.0.1:{port}/questions/{question['id']}"
            # Free text is not an answer to a form; a field the form lacks, or a wrong type, is refused.
            refused = httpx.post(url, json={"answer": "Ada"}, headers=APPROVER)
            assert refused.status_code == 400 and "this question is a form" in refused.json()["error"]
            refused = httpx.post(url, json={"content": {"no_such_field": 1}}, headers=APPROVER)
            assert refused.status_code == 400 and "the form has no field 'no_such_field'" in refused.json()["error"]
            refused = httpx.post(url, json={"content": {"name": 5}}, headers=APPROVER)
            assert refused.status_code == 400 and "field 'name': 5 is not of type 'string'" in refused.json()["error"]
            content = {name: _value(field) for name, field in fields.items() if field["required"]}
            if "name" in fields:
                content["name"] = "Ada"
            answered = httpx.post(url, json={"content": content}, headers=APPROVER).json()
            assert answered["replayed"] is False and answered["question"]["status"] == "answered"
            assert proc.finish() == 0, proc.output
        finally:
            proc.stop()
    out = proc.output
    assert "RESULTS" in out, out
    assert "accept" in out.split("RESULTS", 1)[1].lower(), out
    assert "Ada" in out.split("RESULTS", 1)[1], out


def _value(field: dict[str, Any]) -> Any:
    if field["enum"]:
        return [field["enum"][0]] if field["type"] == "array" else field["enum"][0]
    return {"boolean": True, "integer": 1, "number": 1.5}.get(field["type"], "x")


def test_the_terminal_answers_an_upstream_form_field_by_field(tmp_path: Path) -> None:
    node = require_everything()
    config = write_config(tmp_path, {"server": {"stateful": True}, "upstreams": [everything_stdio(node=node)]})
    # name (required), check yes, four strings skipped, an integer refused twice (not a number,
    # above its maximum of 100) then 7, a number skipped, a single-select enum picked by its number,
    # the rest skipped.
    lines = ["Ada", "yes", "", "", "", "", "not a number", "500", "7", "", "2", "", "", "", ""]
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready", timeout=30)
        proc = dex_agent("--store", str(tmp_path / "s.db"), "run", "--gateway", gateway.url, "--model", SCRIPT, "--yes",
                         "trigger-elicitation-request", stdin_text="\n".join(lines) + "\n")
        try:
            assert proc.finish() == 0, proc.output
        finally:
            proc.stop()
    out = proc.output
    assert "(a form: an empty line skips an optional field, and declines on a required one)" in out, out
    assert "integer: expected an integer" in out and "field 'integer': 500 is greater than the maximum of 100" in out, out
    results = out.split("RESULTS", 1)[1]
    assert "- Name: Ada" in results and "- Agreed to terms: true" in results and "- Favorite Integer: 7" in results, out
    assert '"untitledSingleSelectEnum": "Rachel"' in results, out


def test_a_task_in_input_required_is_a_session_question_answered_from_the_cli(tmp_path: Path) -> None:
    """examples/servers/tasks_server.py on 2026-07-28: confirm_delete runs as an upstream task that
    goes input_required; the stateful gateway carries its question to the host's own request, and
    the answer given with `dex-agent questions answer` (the host API) reaches the task, which then
    deletes, once."""
    port = free_port()
    with start_http_server("tasks_server", state_dir=tmp_path / "t") as upstream:
        # The upstream pinned to 2026-07-28 (with `auto`, a caller that can be asked reaches this
        # both-eras server over the handshake, where its plain call never asks).
        upstreams = [http_upstream("t", upstream.url, protocol="2026-07-28")]
        config = write_config(tmp_path, {"server": {"stateful": True}, "upstreams": upstreams})
        with start_gateway(config) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            proc = dex_agent("--store", str(tmp_path / "s.db"), "run", "--gateway", gateway.url, "--model", SCRIPT,
                             "--approve", "api", "--approvals-port", str(port), 'confirm_delete {"filename": "a.txt"}',
                             env={"DEX_APPROVER_TOKEN": "approver-secret"})
            try:
                question = pending(port, proc, "questions")
                assert question["kind"] == "elicitation" and question["question"] == "Delete a.txt?", question
                assert {f["name"]: f["type"] for f in question["fields"]} == {"confirm": "boolean", "name": "string"}
                # Answered from another terminal: `dex-agent questions list|answer`.
                api = f"http://127.0.0.1:{port}"
                env = {"DEX_APPROVER_TOKEN": "approver-secret"}
                listed = run_agent("questions", "list", "--url", api, env=env)
                assert listed.returncode == 0 and json.loads(listed.stdout)["questions"][0]["id"] == question["id"]
                wrong = run_agent("questions", "answer", question["id"], "--field", "confirm=maybe", "--url", api, env=env)
                assert wrong.returncode == 1
                assert "the answer does not fit the form: field 'confirm': 'maybe' is not of type 'boolean'" in wrong.stderr
                answered = run_agent("questions", "answer", question["id"], "--field", "confirm=true", "--url", api, env=env)
                assert answered.returncode == 0, answered.stderr
                assert json.loads(answered.stdout)["question"]["status"] == "answered"
                assert proc.finish() == 0, proc.output
            finally:
                proc.stop()
    assert "RESULTS t__confirm_delete=deleted a.txt" in proc.output, proc.output
    assert len(read_executions(tmp_path / "t", tool="confirm_delete")) == 1


def test_tool_progress_reaches_the_session_event_stream(tmp_path: Path) -> None:
    """server-everything's trigger-long-running-operation sends notifications/progress: each becomes
    a `tool_progress` event of the session (the live stream and the page read those)."""
    node = require_everything()
    config = write_config(tmp_path, {"upstreams": [everything_stdio(node=node)]})
    store = tmp_path / "s.db"
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready", timeout=30)
        proc = dex_agent("--store", str(store), "run", "--gateway", gateway.url, "--model", SCRIPT, "--yes",
                         'trigger-long-running-operation {"duration": 1, "steps": 3}')
        try:
            assert proc.finish() == 0, proc.output
        finally:
            proc.stop()
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT data FROM events WHERE type = 'tool_progress' ORDER BY id").fetchall()
    progress = [json.loads(data) for (data,) in rows]
    assert [(p["progress"], p["total"]) for p in progress] == [(1, 3), (2, 3), (3, 3)], progress
    assert progress[0]["tool_call_id"] == "call_1_0"


@pytest.mark.anyio
async def test_the_host_declares_elicitation_in_form_mode_only() -> None:
    """What a server sees in `initialize`: elicitation with form, without URL mode (the SDK alone
    declares both); a session without a form asker declares none."""
    seen: list[types.ClientCapabilities | None] = []

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        seen.append(ctx.session.client_params.capabilities if ctx.session.client_params else None)
        return types.ListToolsResult(tools=[])

    async def decline(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    server = Server("caps", on_list_tools=list_tools)
    async with FormOnlyElicitationClient(server, mode="legacy", elicitation_callback=decline) as client:
        await client.list_tools()
    async with FormOnlyElicitationClient(server, mode="legacy") as client:
        await client.list_tools()
    asked, plain = seen
    assert asked is not None and asked.elicitation == types.ElicitationCapability(form=types.FormElicitationCapability())
    assert plain is not None and plain.elicitation is None


def test_a_question_outlasts_the_call_timeout(tmp_path: Path) -> None:
    """The call's timeout measures the gateway, not the person: its clock stops while the question
    waits (answered here after 2.5 s with --call-timeout 1)."""
    node = require_everything()
    config = write_config(tmp_path, {"server": {"stateful": True}, "upstreams": [everything_stdio(node=node)]})
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready", timeout=30)
        proc = answered_run(tmp_path / "s.db", gateway.url, "trigger-elicitation-request", {"content": {"name": "Ada"}},
                            "--call-timeout", "1", check=lambda question: time.sleep(2.5))
    assert "- Name: Ada" in proc.output.split("RESULTS", 1)[1], proc.output


def test_the_gateways_approval_question_reaches_the_host_user(tmp_path: Path) -> None:
    """A gateway `require_approval` policy rule holds the call and asks the caller's user through
    elicitation (stateful gateway): the host shows it as a session question, and the user's yes
    over the API lets the call run."""
    node = require_everything()
    rule = {"name": "echo-needs-a-yes", "tools": ["everything__echo"], "effect": "require_approval",
            "message": "echo needs a yes"}
    config = write_config(tmp_path, {"server": {"stateful": True}, "upstreams": [everything_stdio(node=node)],
                                     "policy": {"rules": [rule]}})
    port = free_port()
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready", timeout=30)
        proc = dex_agent("--store", str(tmp_path / "s.db"), "run", "--gateway", gateway.url, "--model", SCRIPT, "--yes",
                         "--approvals-port", str(port), 'echo {"message": "hi"}', env={"DEX_APPROVER_TOKEN": "approver-secret"})
        try:
            question = pending(port, proc, "questions")
            assert question["kind"] == "elicitation" and question["fields"] == []
            assert "everything__echo" in question["question"] and "echo needs a yes" in question["question"]
            answered = httpx.post(f"http://127.0.0.1:{port}/questions/{question['id']}", json={"content": {}}, headers=APPROVER)
            assert answered.status_code == 200, answered.text
            assert proc.finish() == 0, proc.output
        finally:
            proc.stop()
    assert "RESULTS everything__echo=Echo: hi" in proc.output, proc.output
