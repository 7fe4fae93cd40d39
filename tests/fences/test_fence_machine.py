"""Every transition of the fence state machine, on every store (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import pytest

from gateway.conventions.keys import REPLAYED_KEY, Effect
from gateway.fences import (
    FenceRejected,
    FenceState,
    FenceStore,
    FenceUnknown,
    Fences,
    Owner,
    Proceed,
    Replay,
    UnknownReason,
    fence_id,
    open_fence_store,
)
from gateway.fences import admin

from fence_helpers import FakeClock, WatchedStore

pytestmark = pytest.mark.anyio

ANSWER: dict[str, Any] = {
    "content": [{"type": "text", "text": "créé: order #42 ✓"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
    "isError": False,
    "structuredContent": {"z": 1, "a": [3, 2, 1], "id": "42"},
    "_meta": {"io.superdurable.dex/outcome": "done", "b": 2, "a": 1},
}
WRITE = Effect.NON_IDEMPOTENT_WRITE


@asynccontextmanager
async def opened(url: str) -> AsyncIterator[FenceStore]:
    async with open_fence_store(url) as store:
        yield store


def fences(store: FenceStore, clock: FakeClock, replica: str = "r1", **kw: Any) -> Fences:
    kw.setdefault("wait_seconds", 0.0)
    kw.setdefault("poll_interval", 0.01)
    return Fences(store, Owner.fresh(replica), lease_seconds=15.0, clock=clock, **kw)


async def begin(f: Fences, key: str = "k1", *, principal: str = "alice", tool: str = "create_order",
                arguments: dict[str, Any] | None = None, effect: Effect = WRITE) -> Any:
    return await f.begin(principal=principal, key=key, tool=tool,
                         arguments={"item": "x"} if arguments is None else arguments, effect=effect)


async def test_new_key_claims_pending(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        r = await begin(f)
        assert isinstance(r, Proceed) and not r.takeover and r.ticket.attempts == 1
        rec = await store.get(r.ticket.fence_id)
        assert rec is not None
        assert rec.state is FenceState.PENDING and rec.owner == f.owner and rec.attempts == 1
        assert rec.lease_until == clock.now + 15.0 and rec.effect is WRITE and rec.tool == "create_order"
        assert rec.fence_id == fence_id("alice", "k1")


async def test_done_is_replayed_byte_for_byte_with_marker(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        r = await begin(f)
        assert await f.complete(r.ticket, ANSWER)
        rec = await store.get(r.ticket.fence_id)
        assert rec is not None and rec.state is FenceState.DONE and rec.lease_until is None
        for _ in range(2):
            again = await begin(fences(store, clock, "r2"))
            assert isinstance(again, Replay)
            expected = {**ANSWER, "_meta": {**ANSWER["_meta"], REPLAYED_KEY: True}}
            assert json.dumps(again.answer, ensure_ascii=False) == json.dumps(expected, ensure_ascii=False)
            # The stored answer itself stays unmarked.
            stored = await store.get(r.ticket.fence_id)
            assert stored is not None and stored.answer is not None
            assert REPLAYED_KEY not in stored.answer["_meta"]


async def test_replay_of_answer_without_meta_gets_marker(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        r = await begin(f)
        await f.complete(r.ticket, {"content": [], "isError": True})
        again = await begin(f)
        assert isinstance(again, Replay)
        assert again.answer == {"content": [], "isError": True, "_meta": {REPLAYED_KEY: True}}


async def test_mark_unknown_is_terminal(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        r = await begin(f)
        partial = {"content": [{"type": "text", "text": "connection reset"}], "isError": True}
        assert await f.mark_unknown(r.ticket, partial)
        for _ in range(2):
            clock.advance(3600)
            again = await begin(f, effect=Effect.IDEMPOTENT_WRITE)
            assert isinstance(again, FenceUnknown) and again.reason is UnknownReason.STORED
            assert again.answer == partial and "unknown" in again.text


async def test_release_lets_the_key_be_retried_as_new(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        r = await begin(f)
        assert await f.release(r.ticket)
        assert await store.get(r.ticket.fence_id) is None
        again = await begin(f, arguments={"item": "y"})  # released: even new arguments are a new call
        assert isinstance(again, Proceed) and not again.takeover and again.ticket.attempts == 1


@pytest.mark.parametrize("state", ["pending", "done", "unknown"])
async def test_key_reused_with_other_arguments_is_refused(any_url: str, clock: FakeClock, state: str) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        r = await begin(f)
        if state == "done":
            await f.complete(r.ticket, ANSWER)
        elif state == "unknown":
            await f.mark_unknown(r.ticket)
        before = await store.get(r.ticket.fence_id)
        other = await begin(f, arguments={"item": "y"})
        assert isinstance(other, FenceRejected)
        assert "reused" in other.text and "other arguments" in other.text
        tool = await begin(f, tool="delete_order")
        assert isinstance(tool, FenceRejected) and "'create_order'" in tool.text and "'delete_order'" in tool.text
        assert await store.get(r.ticket.fence_id) == before


async def test_principals_are_isolated(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        a = await begin(f, principal="alice")
        await f.complete(a.ticket, ANSWER)
        # Same key, other principal: a fresh fence, whatever the arguments.
        b = await begin(f, principal="bob", arguments={"item": "other"})
        assert isinstance(b, Proceed) and b.ticket.fence_id != a.ticket.fence_id
        # Bob's pending fence does not block Alice's replay, nor the reverse.
        assert isinstance(await begin(f, principal="alice"), Replay)
        assert isinstance(await begin(f, principal="bob", arguments={"item": "other"}), FenceUnknown)  # waits 0 s
        # A principal whose name is a prefix/suffix mix of the key cannot collide either.
        assert fence_id("alice", "k1") != fence_id("alicek", "1")


async def test_duplicate_waits_for_the_first_answer(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        first = fences(store, clock)
        watched = WatchedStore(store)
        second = fences(watched, clock, "r2", wait_seconds=5.0)  # type: ignore[arg-type]
        r = await begin(first)
        results: list[Any] = []

        async def dup() -> None:
            results.append(await begin(second))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(dup)
                # Its claim found the live pending fence; it polls again: it is waiting.
                await watched.wait_calls("get", 2)
                assert results == []  # still waiting
                await first.complete(r.ticket, ANSWER)
        assert watched.calls["insert_if_absent"] == 1
        assert isinstance(results[0], Replay) and results[0].answer["content"] == ANSWER["content"]


async def test_duplicate_wait_times_out_as_unknown_without_changing_the_fence(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        first = fences(store, clock)
        r = await begin(first)
        before = await store.get(r.ticket.fence_id)
        with anyio.fail_after(3):
            t0 = anyio.current_time()
            out = await begin(fences(store, clock, "r2", wait_seconds=0.3))
            assert anyio.current_time() - t0 >= 0.3
        assert isinstance(out, FenceUnknown) and out.reason is UnknownReason.WAIT_TIMEOUT
        assert "still in progress" in out.text
        assert await store.get(r.ticket.fence_id) == before
        # The first holder still owns it and can finish normally.
        assert await first.complete(r.ticket, ANSWER)


@pytest.mark.parametrize("effect", list(Effect))
@pytest.mark.parametrize("death", ["lease_expired", "same_replica_new_boot"])
async def test_dead_owner_rule_per_effect(any_url: str, clock: FakeClock, effect: Effect, death: str) -> None:
    async with opened(any_url) as store:
        dead = fences(store, clock, "r1")
        r = await begin(dead, effect=effect)
        if death == "lease_expired":
            clock.advance(15.0)
            successor = fences(store, clock, "r2")
        else:
            # Restart: same replica id, new boot id; the lease is still running.
            successor = fences(store, clock, "r1")
        out = await begin(successor, effect=effect)
        rec = await store.get(r.ticket.fence_id)
        assert rec is not None
        if effect.resendable:
            assert isinstance(out, Proceed) and out.takeover and out.ticket.attempts == 2
            assert rec.state is FenceState.PENDING and rec.owner == successor.owner and rec.attempts == 2
            # The dead holder's late writes are refused: the CAS is on (owner, attempts).
            assert not await dead.complete(r.ticket, {"content": [], "isError": False})
            assert await successor.complete(out.ticket, ANSWER)
            assert isinstance(await begin(dead, effect=effect), Replay)
        else:
            assert isinstance(out, FenceUnknown) and out.reason is UnknownReason.OWNER_DIED
            assert effect.value in out.text
            assert rec.state is FenceState.UNKNOWN
            assert not await dead.complete(r.ticket, ANSWER)
            # Unknown forever: later retries, by anyone, never proceed.
            clock.advance(3600)
            later = await begin(fences(store, clock, "r3"), effect=effect)
            assert isinstance(later, FenceUnknown) and later.reason is UnknownReason.STORED


async def test_live_owner_of_another_replica_is_not_taken_over(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        r = await begin(fences(store, clock, "r1"), effect=Effect.IDEMPOTENT_WRITE)
        clock.advance(14.9)
        out = await begin(fences(store, clock, "r2"), effect=Effect.IDEMPOTENT_WRITE)
        assert isinstance(out, FenceUnknown) and out.reason is UnknownReason.WAIT_TIMEOUT
        assert (await store.get(r.ticket.fence_id)).state is FenceState.PENDING  # type: ignore[union-attr]


async def test_most_conservative_effect_decides_the_takeover(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        await begin(fences(store, clock, "r1"), effect=Effect.NON_IDEMPOTENT_WRITE)
        clock.advance(60)
        # The tool was reclassified as idempotent since: the first claim's effect still counts.
        out = await begin(fences(store, clock, "r2"), effect=Effect.IDEMPOTENT_WRITE)
        assert isinstance(out, FenceUnknown) and out.reason is UnknownReason.OWNER_DIED


async def test_owner_dying_during_the_wait_is_taken_over(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        await begin(fences(store, clock, "r1"), effect=Effect.IDEMPOTENT_WRITE)
        watched = WatchedStore(store)
        waiter = fences(watched, clock, "r2", wait_seconds=5.0)  # type: ignore[arg-type]
        results: list[Any] = []

        async def wait() -> None:
            results.append(await begin(waiter, effect=Effect.IDEMPOTENT_WRITE))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await watched.wait_calls("get", 1)  # r2 found r1's live claim and is waiting
                assert results == [] and watched.calls["take_over"] == 0
                clock.advance(20)  # r1's lease runs out while r2 waits
        assert isinstance(results[0], Proceed) and results[0].takeover


async def test_holding_renews_the_lease(any_url: str) -> None:
    async with opened(any_url) as store:
        holder = Fences(store, Owner.fresh("r1"), lease_seconds=0.3, wait_seconds=0.0)
        other = Fences(store, Owner.fresh("r2"), lease_seconds=0.3, wait_seconds=0.0)
        r = await begin(holder, effect=Effect.IDEMPOTENT_WRITE)
        first_lease = (await store.get(r.ticket.fence_id)).lease_until  # type: ignore[union-attr]
        async with holder.holding(r.ticket):
            with anyio.fail_after(5):
                while time.time() <= first_lease + 0.1:  # past the first lease, by the wall clock
                    await anyio.sleep(0.01)
            out = await begin(other, effect=Effect.IDEMPOTENT_WRITE)
            assert isinstance(out, FenceUnknown) and out.reason is UnknownReason.WAIT_TIMEOUT
        assert await holder.complete(r.ticket, ANSWER)


async def test_body_exception_passes_through_holding(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        r = await begin(f)
        with pytest.raises(KeyError):
            async with f.holding(r.ticket):
                raise KeyError("boom")
        assert await f.release(r.ticket)


async def test_complete_is_shielded_from_cancellation(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        r = await begin(f)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await f.complete(r.ticket, ANSWER)
        assert (await store.get(r.ticket.fence_id)).state is FenceState.DONE  # type: ignore[union-attr]


async def test_lost_ticket_writes_are_refused(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        r = await begin(f)
        await f.complete(r.ticket, ANSWER)
        assert not await f.complete(r.ticket, {"content": [], "isError": False})
        assert not await f.mark_unknown(r.ticket)
        assert not await f.release(r.ticket)
        assert (await store.get(r.ticket.fence_id)).answer == ANSWER  # type: ignore[union-attr]


async def test_sweep_and_retention(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        old_done = await begin(f, "old-done")
        await f.complete(old_done.ticket, ANSWER)
        old_unknown = await begin(f, "old-unknown")
        await f.mark_unknown(old_unknown.ticket)
        abandoned = await begin(f, "abandoned")  # its owner never comes back
        clock.advance(25 * 3600)
        fresh = await begin(f, "fresh")
        await f.complete(fresh.ticket, ANSWER)
        live = await begin(f, "live")
        swept = await f.sweep_once(timedelta(hours=24))
        assert swept == 3
        assert await store.get(old_done.ticket.fence_id) is None
        assert await store.get(old_unknown.ticket.fence_id) is None
        assert await store.get(abandoned.ticket.fence_id) is None
        assert await store.get(fresh.ticket.fence_id) is not None
        assert await store.get(live.ticket.fence_id) is not None
        # After retention a retry is a new call.
        assert isinstance(await begin(f, "old-done"), Proceed)


async def test_sweep_deletes_batch_after_batch_and_keeps_the_live(any_url: str, clock: FakeClock) -> None:
    """More old fences than several batches (500 on SQLite, 2,000 on PostgreSQL): all swept,
    the fresh and the live pending kept."""
    async with opened(any_url) as store:
        f = fences(store, clock)
        for n in range(4_500):
            await f.settle(principal="alice", key=f"old-{n}", tool="pay", arguments={"n": n}, effect=Effect.NON_IDEMPOTENT_WRITE,
                           answer=ANSWER)
        abandoned = [await begin(f, f"abandoned-{n}") for n in range(3)]
        clock.advance(25 * 3600)
        fresh = await begin(f, "fresh")
        await f.complete(fresh.ticket, ANSWER)
        live = await begin(f, "live")
        assert await f.sweep_once(timedelta(hours=24)) == 4_503
        assert all([await store.get(r.ticket.fence_id) is None for r in abandoned])
        assert (await store.stats()).total == 2
        assert await store.get(live.ticket.fence_id) is not None
    if any_url.startswith("sqlite:///"):  # the freed pages went back to the file system
        with contextlib.closing(sqlite3.connect(any_url.removeprefix("sqlite:///"))) as conn:
            assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0


async def test_run_sweeper_sweeps_in_the_background(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        r = await begin(f)
        await f.complete(r.ticket, ANSWER)
        clock.advance(2 * 3600)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                tg.start_soon(f.run_sweeper, timedelta(hours=1), 0.05)
                while await store.get(r.ticket.fence_id) is not None:
                    await anyio.sleep(0.02)
                tg.cancel_scope.cancel()


async def test_admin_stats_show_purge(any_url: str, clock: FakeClock) -> None:
    async with opened(any_url) as store:
        f = fences(store, clock)
        a = await begin(f, "a")
        await f.complete(a.ticket, ANSWER)
        b = await begin(f, "b")
        await f.mark_unknown(b.ticket)
        await begin(f, "c")
        s = await admin.stats(store)
        assert (s["total"], s["pending"], s["done"], s["unknown"]) == (3, 1, 1, 1)
        assert s["oldest_updated_at"].startswith("2027-")
        rec = await admin.show(store, "alice", "a")
        assert rec is not None and rec.state is FenceState.DONE and rec.answer == ANSWER
        assert rec.as_dict()["state"] == "done"
        json.dumps(rec.as_dict())
        assert await admin.show(store, "bob", "a") is None
        listed = await store.list_records(state=FenceState.PENDING)
        assert [r.fence_id for r in listed] == [fence_id("alice", "c")]
        assert len(await store.list_records(principal="alice")) == 3
        assert await store.list_records(principal="bob") == []
        # A live pending (lease running at the cutoff) is never purged.
        assert await admin.purge(store, timedelta(hours=1), now=clock.now + 3601) == 2
        assert (await admin.stats(store))["total"] == 1


class CommitThenFail:
    """A store whose first finish() commits and then raises, like a connection lost after COMMIT."""

    transient_errors = (ConnectionResetError,)  # what a networked store reports as "try again"

    def __init__(self, inner: FenceStore) -> None:
        self.inner = inner
        self.failures = 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def finish(self, *args: Any, **kwargs: Any) -> bool:
        result = await self.inner.finish(*args, **kwargs)
        if self.failures:
            self.failures -= 1
            raise ConnectionResetError("lost after commit")
        return result


async def test_complete_retries_and_confirms_a_write_that_committed(clock: FakeClock) -> None:
    async with opened("memory://") as inner:
        f = fences(CommitThenFail(inner), clock)  # type: ignore[arg-type]
        r = await begin(f)
        assert await f.complete(r.ticket, ANSWER)
        assert isinstance(await begin(f), Replay)
