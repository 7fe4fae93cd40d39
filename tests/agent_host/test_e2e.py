"""The host as a real process against the gateway (real process) fronting the payments server."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.servers import free_port, read_executions, release_gate, wait_for_executions

from tests.agent_host.host_support import Stack, dex_agent

SCRIPTS = "scripted:tests.agent_host.scripts:"


def _show(store: Path, session: str) -> dict[str, Any]:
    proc = dex_agent("--store", str(store), "sessions", "show", session, "--json")
    assert proc.finish() == 0, proc.output
    return json.loads(proc.output)


def _calls(store: Path, session: str) -> list[dict[str, Any]]:
    return _show(store, session)["tool_calls"]


def _call_status(store: Path, session: str) -> str | None:
    """Read the store directly, as a second process would (WAL allows it)."""
    if not store.exists():
        return None
    db = sqlite3.connect(store)
    try:
        row = db.execute("SELECT status FROM tool_calls WHERE session_id = ?", (session,)).fetchone()
    except sqlite3.OperationalError:
        return None
    finally:
        db.close()
    return row[0] if row else None


def _wait_status(store: Path, session: str, status: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while _call_status(store, session) != status:
        assert time.monotonic() < deadline, f"call never reached {status}"
        time.sleep(0.02)


def test_demo_turn_through_the_gateway(stack: Stack, tmp_path: Path) -> None:
    proc = dex_agent("--store", str(tmp_path / "a.db"), "demo", "--gateway", stack.gateway_url)
    assert proc.finish() == 0, proc.output
    out = proc.output
    assert 'payments__get_balance(account: "acme")' in out
    assert "refund wants to run" in out and 'refund(order: "5521", amount: 40)' in out
    assert "allowed by auto" in out
    assert "refund rf-" in out and "for order 5521 granted" in out
    assert "Here is what I found and did" in out


def test_parallel_reads_and_ordered_writes(stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "b.db"
    started = time.monotonic()
    proc = dex_agent("--store", str(store), "run", "--gateway", stack.gateway_url, "--session", "s-order",
                     "--model", SCRIPTS + "parallel_and_ordered", "--yes", "go")
    assert proc.finish() == 0, proc.output
    elapsed = time.monotonic() - started

    calls = {c["id"]: c for c in _calls(store, "s-order")}
    assert [calls[f"call_1_{i}"]["status"] for i in range(6)] == [
        "succeeded", "succeeded", "succeeded", "succeeded", "rejected", "skipped"]
    assert "was skipped because an earlier write" in calls["call_1_5"]["result_text"]
    assert calls["call_1_3"]["idempotency_key"] == "s-order/turn-1/call_1_3"

    sleeps = [s for s in read_executions(stack.state_dir, tool="sleep") if s["idempotency_key"].startswith("s-order/")]
    assert len(sleeps) == 2
    # The two 1-second reads overlapped: they started together, and the turn took < 2 s of sleeping.
    assert abs(sleeps[-1]["time"] - sleeps[-2]["time"]) < 0.5
    writes = [e for e in read_executions(stack.state_dir) if (e["idempotency_key"] or "").startswith("s-order/")]
    assert [e["tool"] for e in writes if e["tool"] != "sleep"] == ["set_memo", "send_payment"]
    assert not any(e["arguments"].get("to") == "carol" for e in writes)
    assert elapsed < 15


def test_one_approval_allowed_one_denied_on_the_prompt(stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "c.db"
    proc = dex_agent("--store", str(store), "run", "--gateway", stack.gateway_url, "--session", "s-appr",
                     "--model", SCRIPTS + "two_refunds", "refunds please", stdin_text="a\nd not this one\n")
    assert proc.finish() == 0, proc.output
    assert proc.output.count("refund wants to run") == 2
    assert 'refund(order: "7001", amount: 11)' in proc.output
    calls = {c["id"]: c for c in _calls(store, "s-appr")}
    assert calls["call_1_0"]["status"] == "succeeded"
    assert calls["call_1_1"]["status"] == "rejected"
    assert calls["call_1_1"]["result_text"] == "The tool call was not run: the user denied approval. Reason: not this one"
    refunds = [e["arguments"]["order"] for e in read_executions(stack.state_dir, tool="refund")]
    assert "7001" in refunds and "7002" not in refunds


def test_approval_over_the_http_api(stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "d.db"
    port = free_port()
    proc = dex_agent("--store", str(store), "run", "--gateway", stack.gateway_url, "--session", "s-api",
                     "--model", SCRIPTS + "one_refund", "--approve", "api", "--approvals-port", str(port), "refund",
                     env={"DEX_APPROVER_TOKEN": "approver-secret", "DEX_AGENT_TOKEN": "agent-secret"})
    try:
        base = f"http://127.0.0.1:{port}/approvals"
        pending: list[dict[str, Any]] = []
        deadline = time.monotonic() + 15
        while not pending:
            assert time.monotonic() < deadline, proc.output
            try:
                pending = httpx.get(base, headers={"Authorization": "Bearer approver-secret"}).json()["approvals"]
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        card = pending[0]
        assert card["title"] == "refund wants to run" and card["call"] == 'refund(order: "8001", amount: 21)'
        url = f"{base}/{card['id']}"
        assert httpx.post(url, json={"decision": "allow"}, headers={"Authorization": "Bearer agent-secret"}).status_code == 403
        first = httpx.post(url, json={"decision": "allow"}, headers={"Authorization": "Bearer approver-secret"}).json()
        second = httpx.post(url, json={"decision": "deny"}, headers={"Authorization": "Bearer approver-secret"}).json()
        assert first["replayed"] is False and second["replayed"] is True
        assert second["approval"]["status"] == "allowed"
        assert proc.finish() == 0, proc.output
    finally:
        proc.stop()
    assert [e["arguments"]["order"] for e in read_executions(stack.state_dir, tool="refund")].count("8001") == 1


def test_ask_user_answered(stack: Stack, tmp_path: Path) -> None:
    proc = dex_agent("--store", str(tmp_path / "e.db"), "run", "--gateway", stack.gateway_url,
                     "--model", SCRIPTS + "ask_color", "pick", stdin_text="2\n")
    assert proc.finish() == 0, proc.output
    assert "? Which color?" in proc.output
    assert 'ask_user={"status": "answered", "answer": "green"}' in proc.output


def test_sigkill_after_sending_a_write_resumes_with_the_same_key(stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "f.db"
    first = dex_agent("--store", str(store), "run", "--gateway", stack.gateway_url, "--session", "s-kill",
                      "--model", SCRIPTS + "hold", "hold it")
    key = "s-kill/turn-1/call_1_0"
    wait_for_executions(stack.state_dir, 1, tool="hold_payment", key=key, timeout=20)
    first.sigkill()

    second = dex_agent("--store", str(store), "resume", "--gateway", stack.gateway_url, "--session", "s-kill",
                       "--model", SCRIPTS + "hold")
    try:
        second.wait_for(r"resuming turn-1")
        second.wait_for(r"payments__hold_payment.*resuming from sent")
        time.sleep(0.5)  # the re-sent call reaches the gateway's fence while the first still runs
        release_gate(stack.state_dir, "kill-gate")
        assert second.finish() == 0, second.output
    finally:
        second.stop()
    [record] = _calls(store, "s-kill")
    assert record["idempotency_key"] == key
    assert record["attempts"] == 2
    # The fence answered: the first answer replayed, or outcome unknown; never a second run.
    assert record["status"] in ("succeeded", "outcome_unknown"), record
    if record["status"] == "succeeded":
        assert "replayed by the gateway's fence" in second.output
    assert len(read_executions(stack.state_dir, tool="hold_payment", key=key)) == 1


def test_durable_wait_survives_a_restart(stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "g.db"
    first = dex_agent("--store", str(store), "run", "--gateway", stack.gateway_url, "--session", "s-wait",
                      "--model", SCRIPTS + "wait_three", "wait")
    _wait_status(store, "s-wait", "waiting")
    waiting_since = time.monotonic()
    first.sigkill()
    time.sleep(1.0)
    second = dex_agent("--store", str(store), "resume", "--gateway", stack.gateway_url, "--session", "s-wait",
                       "--model", SCRIPTS + "wait_three")
    second.wait_for(r"resuming turn-1")
    resumed_at = time.monotonic()
    assert second.finish() == 0, second.output
    finished_at = time.monotonic()
    # Only the remaining time was waited: the wait ends about 3 s after it began (never sooner),
    # and the resumed process waits well under the whole 3 s again (its own start-up, which a
    # loaded machine makes slow, is not counted: it is over once it says it is resuming).
    assert finished_at - waiting_since >= 2.8, finished_at - waiting_since
    assert finished_at - resumed_at < 3.0 - 0.5, finished_at - resumed_at
    [record] = _calls(store, "s-wait")
    assert record["status"] == "succeeded"
    assert json.loads(record["result_text"]) == {"status": "completed", "waited_seconds": 3, "reason": "cool down"}
