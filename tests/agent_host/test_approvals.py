"""Approval ids, cards built from the call, and the approvers' HTTP API."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agent_host.approvals.gate import ApprovalCard, ApprovalGate, approval_id, call_summary
from agent_host.api.approvals_api import approvals_app
from agent_host.models.base import Message, ToolCall
from agent_host.store.session_store import CallStatus, SessionStore, ToolCallRecord

APPROVER = {"Authorization": "Bearer approver"}
AGENT = {"Authorization": "Bearer agent"}


def test_approval_id_is_the_first_32_hex_of_sha256_over_session_and_call() -> None:
    expected = hashlib.sha256(b"s-1\0call_7").hexdigest()[:32]
    assert approval_id("s-1", "call_7") == expected and len(expected) == 32
    assert approval_id("s-1", "call_7") != approval_id("s-1", "call_8")


def test_card_is_built_from_the_call() -> None:
    assert call_summary("payments__refund", {"order": "5521", "amount": 40}) == 'refund(order: "5521", amount: 40)'
    record = ToolCallRecord(session_id="s", turn_id="turn-1", id="c", model_call=1, position=0, name="payments__refund",
                            arguments={"order": "5521", "amount": 40}, kind="gateway", effect="non_idempotent_write",
                            requires_approval=True, idempotency_key="s/turn-1/c", status=CallStatus.PENDING, updated_at=0)
    card = ApprovalCard.for_call(record)
    assert card.title == "refund wants to run"
    assert card.call == 'refund(order: "5521", amount: 40)'
    assert card.buttons == ("Allow", "Deny")


@pytest.fixture
async def pending(tmp_path: Path) -> AsyncIterator[tuple[SessionStore, str]]:
    async with SessionStore(tmp_path / "a.db") as store:
        await store.create_session("m", "g", "s")
        turn = await store.start_turn("s", "refund")
        record = ToolCallRecord(session_id="s", turn_id=turn.id, id="c1", model_call=1, position=0, name="payments__refund",
                                arguments={"order": "5521", "amount": 40}, kind="gateway", effect="non_idempotent_write",
                                requires_approval=True, idempotency_key="s/turn-1/c1", status=CallStatus.AWAITING_APPROVAL,
                                updated_at=0)
        await store.record_model_response(turn, Message(role="assistant", tool_calls=[ToolCall(id="c1", name="payments__refund")]), [record])
        approval = await ApprovalGate(store, "api", timeout_seconds=60).raise_approval(record)
        yield store, approval.id


def client_for(app: object) -> httpx.AsyncClient:
    """The approvals app in this event loop (the store runs its statements from it)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://approvals")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_api_lists_and_decides_and_replays_the_first_decision(pending: tuple[SessionStore, str]) -> None:
    store, aid = pending
    async with client_for(approvals_app(store, ["approver"], ["agent"])) as client:
        listed = (await client.get("/approvals", headers=APPROVER)).json()["approvals"]
        assert [(a["id"], a["title"], a["call"]) for a in listed] == [(aid, "refund wants to run", 'refund(order: "5521", amount: 40)')]
        first = await client.post(f"/approvals/{aid}", json={"decision": "deny", "reason": "too much"}, headers=APPROVER)
        assert first.status_code == 200 and first.json()["replayed"] is False
        again = (await client.post(f"/approvals/{aid}", json={"decision": "allow"}, headers=APPROVER)).json()
        assert again["replayed"] is True and again["approval"]["status"] == "denied" and again["approval"]["reason"] == "too much"
        assert (await client.get("/approvals", headers=APPROVER)).json()["approvals"] == []


@pytest.mark.anyio
async def test_api_refuses_the_agent_and_strangers(pending: tuple[SessionStore, str]) -> None:
    store, aid = pending
    async with client_for(approvals_app(store, ["approver"], ["agent"])) as client:
        assert (await client.post(f"/approvals/{aid}", json={"decision": "allow"}, headers=AGENT)).status_code == 403
        assert (await client.post(f"/approvals/{aid}", json={"decision": "allow"})).status_code == 401
        assert (await client.get("/approvals", headers={"Authorization": "Bearer guess"})).status_code == 401
        assert (await client.post(f"/approvals/{aid}", json={"decision": "maybe"}, headers=APPROVER)).status_code == 400
        assert (await client.post("/approvals/ffff", json={"decision": "allow"}, headers=APPROVER)).status_code == 404
    with pytest.raises(ValueError):
        approvals_app(store, ["agent"], ["agent"])
    with pytest.raises(ValueError):
        approvals_app(store, [], ["agent"])


@pytest.mark.anyio
async def test_decision_after_the_deadline_is_the_deadline(pending: tuple[SessionStore, str]) -> None:
    store, aid = pending
    async with client_for(approvals_app(store, ["approver"], ["agent"], clock=lambda: 1e12)) as client:
        answer = (await client.post(f"/approvals/{aid}", json={"decision": "allow"}, headers=APPROVER)).json()
    assert answer["approval"]["status"] == "expired"
