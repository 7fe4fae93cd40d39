"""The live session stream (`GET /sessions/{id}/events`, Server-Sent Events) resumed with
`Last-Event-ID` after the host was killed and restarted: nothing is missed, nothing repeats.

Real processes: the gateway fronting the payments server, `dex-agent run` serving the host API,
SIGKILLed while its write waits upstream, then `dex-agent resume` on the same port, then
`dex-agent approvals serve` on the same store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx

from tests.agent_host.host_support import Stack, dex_agent
from tests.agent_host.sse_client import read_until
from tests.support.servers import free_port, release_gate, wait_for_executions

SCRIPT = "scripted:tests.agent_host.scripts:hold_for_stream"
ENV = {"DEX_APPROVER_TOKEN": "approver-secret", "DEX_AGENT_TOKEN": "agent-secret"}
TOKEN = "approver-secret"


def _stored_ids(store: Path, session: str) -> list[int]:
    db = sqlite3.connect(store)
    try:
        return [row[0] for row in db.execute("SELECT id FROM events WHERE session_id = ? ORDER BY id", (session,))]
    finally:
        db.close()


def _sent(event: dict) -> bool:
    return event["type"] == "tool_call" and event["data"]["status"] == "sent"


def _finished(event: dict) -> bool:
    return event["type"] == "turn_finished"


def test_stream_resumes_after_a_host_restart_missing_nothing(stack: Stack, tmp_path: Path) -> None:
    store, port, session = tmp_path / "sse.db", free_port(), "s-sse"
    url = f"http://127.0.0.1:{port}/sessions/{session}/events"
    common = ["--store", str(store), "--gateway", stack.gateway_url, "--session", session, "--model", SCRIPT,
              "--approvals-port", str(port)]
    first = dex_agent("run", *common, "hold the payment", env=ENV)
    try:
        before = read_until(url, TOKEN, None, _sent)
        assert _sent(before[-1]), before
        wait_for_executions(stack.state_dir, 1, tool="hold_payment", key=f"{session}/turn-1/call_1_0", timeout=20)
        # The agent's own token cannot watch, and a bad Last-Event-ID is refused.
        assert httpx.get(url, headers={"Authorization": "Bearer agent-secret"}).status_code == 403
        assert httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}", "Last-Event-ID": "x"}).status_code == 400
    finally:
        first.sigkill()

    second = dex_agent("resume", *common, env=ENV)
    try:
        second.wait_for(r"resuming turn-1")
        release_gate(stack.state_dir, "sse-gate")
        after = read_until(url, TOKEN, before[-1]["sse_id"], _finished)
        assert second.finish() == 0, second.output
    finally:
        second.stop()

    # One more restart, this time the API alone on the same store: the rest, if any, and then nothing new.
    serve_port = free_port()
    serve = dex_agent("approvals", "serve", "--store", str(store), "--port", str(serve_port), env=ENV)
    try:
        last = (after or before)[-1]["sse_id"]
        serve_url = f"http://127.0.0.1:{serve_port}/sessions/{session}/events"
        stored = _stored_ids(store, session)
        rest = read_until(serve_url, TOKEN, last, lambda e: e["sse_id"] >= stored[-1]) if last < stored[-1] else []
        replay = read_until(serve_url, TOKEN, stored[-3], lambda e: e["sse_id"] >= stored[-1])
    finally:
        serve.stop()

    received = [e["sse_id"] for e in before + after + rest]
    assert received == stored, (received, stored)  # every event, in order, once
    assert received == sorted(set(received))
    assert [e["sse_id"] for e in replay] == stored[-2:]  # Last-Event-ID: the events after it, exactly
    types = [e["type"] for e in before + after + rest]
    assert types[0] == "turn_started" and types[-1] == "turn_finished"
    assert any(e["type"] == "tool_call" and e["data"]["status"] in ("succeeded", "outcome_unknown") for e in after + rest)
    # What the events carry is display text: the call as the card shows it.
    [sent] = [e for e in before if _sent(e)]
    assert sent["data"]["call"] == 'hold_payment(gate: "sse-gate")' and sent["data"]["tool"] == "payments__hold_payment"
