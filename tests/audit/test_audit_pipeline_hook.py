"""The approval hook: a call's `ToolCall.approval` (set by the stage that held it for a person) is
the approval its audit row carries; a held call that stage refuses is written `rejected` with it."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

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
    approval = Approval(by="carol", how="console", at=1_780_000_000.5)
    call = ToolCall("alice", "pay__refund", {"amount": 5}, {IDEMPOTENCY_KEY: "k/1"}, approval=approval)
    async with opened(log):
        note = audit.begin()
        note.fence_state = "claimed"
        note.timed(0.0125)
        audit.finish(ROUTE, call, note, Answer(content=[{"type": "text", "text": "refunded"}]))
        audit.refused(ROUTE, replace(call, approval=None), "approval denied",
                      approval=Approval(by="dave", how="console", at=1_780_000_001.0))
        await log.flush()
        denied, ran = await log.store.newest(AuditQuery())
    assert ran.to_api()["approval"] == {"by": "carol", "how": "console", "at": "2026-05-28T20:26:40.500000Z"}
    assert (ran.outcome, ran.fence_state, ran.latency_ms, ran.idempotency_key) == ("ok", "claimed", 12.5, "k/1")
    assert json.loads(ran.arguments or "") == {"amount": 5}
    assert (denied.outcome, denied.reason, denied.approval and denied.approval.by) == ("rejected", "approval denied",
                                                                                      "dave")
