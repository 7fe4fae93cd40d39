"""The approval store contract on all three backends (memory, SQLite, PostgreSQL), the service's
rules (binding, first decision wins, self-approval, expiry) and the card's escaping."""

from __future__ import annotations


import pytest

from gateway.approvals.open_store import open_approval_store
from gateway.approvals.records import ApprovalState, approval_id, build_card
from gateway.approvals.service import Approvals
from gateway.config.model import ApprovalsConfig
from gateway.errors import ApprovalNotFound, SelfApproval
from gateway.storage.database import Database, opened
from tests.support.postgres import store_url  # noqa: F401 (the fixture: memory, SQLite, PostgreSQL)

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_store_contract(store_url: str) -> None:
    clock = Clock()
    async with Database(store_url) as database, opened(open_approval_store(database)) as store:
        await store.open()  # idempotent
        approvals = Approvals(store, ApprovalsConfig(deadline_seconds=60), clock)
        args = {"order": "o-1", "amount": 40}
        first = await approvals.open_for(principal="alice", tool="pay__refund", upstream="pay", arguments=args,
                                         key="k1", why="the tool asks")
        assert first.state is ApprovalState.PENDING and first.expires_at == clock.now + 60
        # The same (principal, tool, key) finds the same approval, as it was first stored.
        clock.now += 1
        again = await approvals.open_for(principal="alice", tool="pay__refund", upstream="pay", arguments=args,
                                         key="k1", why="the tool asks")
        assert again == first
        other = await approvals.open_for(principal="bob", tool="pay__refund", upstream="pay", arguments=args,
                                         key="k1", why="x")
        assert other.id != first.id
        assert [a.id for a in await approvals.list("pending")] == [other.id, first.id]
        with pytest.raises(SelfApproval):
            await approvals.decide(first.id, True, by="alice", channel="admin_api", approver_principal="alice")
        decided, won = await approvals.decide(first.id, True, by="carol", channel="admin_api", reason="ok",
                                              approver_principal="carol")
        assert won and decided.state is ApprovalState.ALLOWED and decided.decided_by == "carol"
        assert decided.decided_at == clock.now and decided.reason == "ok"
        replayed, won = await approvals.decide(first.id, False, by="dana", channel="cli")
        assert not won and replayed == decided
        assert [a.id for a in await approvals.list("decided")] == [first.id]
        assert {a.id for a in await approvals.list("all")} == {first.id, other.id}
        # Past the deadline: expired, and no decision lands.
        clock.now += 120
        assert (await approvals.get(other.id)).state_at(clock.now) is ApprovalState.EXPIRED
        late, won = await approvals.decide(other.id, True, by="carol", channel="admin_api")
        assert not won and late.to_json(clock.now)["state"] == "expired"
        assert await approvals.list("pending") == []
        with pytest.raises(ApprovalNotFound):
            await approvals.decide("0" * 32, True, by="carol", channel="admin_api")
        shown = decided.to_json(clock.now)
        assert shown["created_at"] == "1970-01-12T13:46:40.000Z" and shown["arguments"] == args
        # Retention: only approvals whose deadline is before the cut are deleted.
        assert await store.purge(first.expires_at) == 0
        assert await store.purge(other.expires_at) == 1  # `first` (its deadline is a second earlier)
        assert await store.get(first.id) is None and await store.get(other.id) is not None


def test_ids_bind_principal_tool_and_key() -> None:
    assert approval_id("alice", "t", "k") == approval_id("alice", "t", "k")
    assert len({approval_id("alice", "t", "k"), approval_id("bob", "t", "k"), approval_id("alice", "u", "k"),
                approval_id("alice", "t", "l")}) == 4
    assert approval_id("alice", "t", None) != approval_id("alice", "t", None)  # keyless: a new one each time


def test_the_card_is_the_call_escaped() -> None:
    card = build_card(tool="pay__refund\x1b[2J", upstream="pay", principal="alice\u202e",
                      arguments={"order": "5521\nApproved: yes", "amount": 40}, why="policy rule 'x'")
    assert "\x1b" not in card and "\u202e" not in card
    assert "pay__refund\\u001b[2J" in card and "alice\\u202e" in card
    assert card.count("\n") == 2  # a newline in an argument cannot add a line to the card
    assert 'order: "5521\\nApproved: yes"' in card and "amount: 40" in card
