"""One digest of a call's arguments (`fences.ids.arguments_digest`): what an approval is bound to and
what an audit row names, with one rule for arguments that have no JSON form (NaN, infinities)."""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from gateway.approvals import records as approval_records
from gateway.approvals.open_store import open_approval_store
from gateway.approvals.service import Approvals
from gateway.audit import records as audit_records
from gateway.audit.log import PendingEntry
from gateway.config.model import ApprovalsConfig
from gateway.fences.ids import arguments_digest
from gateway.storage.database import opened


def test_the_documented_digest_key_order_free_missing_as_empty() -> None:
    args = {"to": "erin", "amount": 3, "note": "é"}
    documented = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert arguments_digest(args) == hashlib.sha256(documented).hexdigest()  # docs/audit.md
    assert arguments_digest({"amount": 3, "note": "é", "to": "erin"}) == arguments_digest(args)
    assert arguments_digest(None) == arguments_digest({}) == hashlib.sha256(b"{}").hexdigest()
    assert arguments_digest({"amount": 3}) != arguments_digest({"amount": 4})


def test_approvals_and_audit_use_the_one_digest() -> None:
    assert approval_records.arguments_digest is arguments_digest
    assert audit_records.arguments_digest is arguments_digest


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_arguments_without_json_form_have_no_digest(bad: float) -> None:
    with pytest.raises(ValueError):
        arguments_digest({"amount": bad})
    with pytest.raises(ValueError):
        arguments_digest({"nested": [1, {"x": bad}]})


@pytest.mark.anyio
async def test_an_approval_refuses_them() -> None:
    async with opened(open_approval_store("memory://")) as store:
        approvals = Approvals(store, ApprovalsConfig(deadline_seconds=60))
        with pytest.raises(ValueError):
            await approvals.open_for(principal="alice", tool="pay__refund", upstream="pay",
                                     arguments={"amount": math.nan}, key="k1", why="the tool asks")


@pytest.mark.parametrize("store_arguments", [True, False])
def test_an_audit_row_records_them_without_digest_or_arguments(store_arguments: bool) -> None:
    def pending(arguments: dict[str, object]) -> PendingEntry:
        return PendingEntry(1_780_000_000, "alice", "pay__send", "pay", "unclassified", arguments, None, None,
                            "none", "rejected", "arguments not valid JSON", None, None, None)

    row = pending({"amount": math.inf}).entry(store_arguments)
    assert row.arguments_digest == audit_records.NO_DIGEST == "" and row.arguments is None
    fine = pending({"amount": 3}).entry(store_arguments)
    assert fine.arguments_digest == arguments_digest({"amount": 3})
    assert fine.arguments == ('{"amount":3}' if store_arguments else None)
