"""The approval hook: the decision the approval stage leaves on a held call (`ToolCall.approval`) is
the approval its audit row carries (who, how, when); a call no one decided carries none."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gateway.approvals.records import ApprovalState
from gateway.approvals.service import Decided
from gateway.audit import Approval, AuditLog, AuditQuery, open_audit_store
from gateway.conventions.answers import Answer
from gateway.conventions.effects import Classification
from gateway.conventions.keys import IDEMPOTENCY_KEY, Effect
from gateway.pipeline.audit import CallAudit
from gateway.pipeline.catalog import ToolRoute
from gateway.pipeline.stages import ToolCall
from gateway.storage.database import opened

pytestmark = pytest.mark.anyio

ROUTE = ToolRoute("pay__refund", {}, Classification(Effect.NON_IDEMPOTENT_WRITE, True, True), upstream="pay",
                  target="refund")


async def test_the_approval_of_a_call_is_in_its_row() -> None:
    log = AuditLog(open_audit_store("memory://"), store_arguments=True)
    audit = CallAudit(log)
    decided = Decided("a-1", ApprovalState.ALLOWED, decided_by="carol", channel="console", decided_at=1_780_000_000.5)
    call = ToolCall("alice", "pay__refund", {"amount": 5}, {IDEMPOTENCY_KEY: "k/1"}, approval=decided)
    async with opened(log):
        note = audit.begin()
        note.fence_state = "claimed"
        note.timed(0.0125)
        audit.finish(ROUTE, call, note, Answer(content=[{"type": "text", "text": "refunded"}]))
        audit.refused(ROUTE, replace(call, approval=Decided("a-2", ApprovalState.DENIED, "dave", "cli", 1_780_000_001.0)),
                      "approval denied")
        audit.refused(ROUTE, replace(call, approval=Decided("a-3", ApprovalState.EXPIRED)), "approval deadline passed")
        await log.flush()
        expired, denied, ran = await log.store.newest(AuditQuery())
    assert ran.to_api()["approval"] == {"by": "carol", "how": "console", "at": "2026-05-28T20:26:40.500000Z"}
    assert (ran.outcome, ran.fence_state, ran.latency_ms, ran.idempotency_key) == ("ok", "claimed", 12.5, "k/1")
    assert json.loads(ran.arguments or "") == {"amount": 5}
    assert (denied.outcome, denied.reason, denied.approval) == (
        "rejected", "approval denied", Approval("dave", "cli", 1_780_000_001.0))
    assert (expired.outcome, expired.approval) == ("rejected", None)
