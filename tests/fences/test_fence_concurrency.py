"""Many tasks, several Fences instances, one store: one execution per key."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

from gateway.conventions.keys import REPLAYED_KEY, Effect
from gateway.fences import FenceUnknown, Fences, Owner, Proceed, Replay, UnknownReason, open_fence_store

from fence_helpers import FakeClock, WatchedStore

pytestmark = pytest.mark.anyio


def answer_for(key: str, who: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"{key} executed by {who}"}], "isError": False}


async def test_50_concurrent_same_key_one_execution(durable_url: str) -> None:
    async with open_fence_store(durable_url) as inner:
        store = WatchedStore(inner)
        f = Fences(store, Owner.fresh("r1"), wait_seconds=10.0,  # type: ignore[arg-type]
                   poll_interval=0.01, max_poll_interval=0.1)
        executions = 0
        answers: list[dict[str, Any]] = []

        async def call(i: int) -> None:
            nonlocal executions
            r = await f.begin(principal="alice", key="same", tool="pay", arguments={"amount": 5}, effect=Effect.NON_IDEMPOTENT_WRITE)
            if isinstance(r, Proceed):
                async with f.holding(r.ticket):
                    executions += 1
                    # The upstream call lasts until every other call found this live claim.
                    await store.wait_calls("insert_if_absent", 50)
                    result = answer_for("same", f"call {i}")
                assert await f.complete(r.ticket, result)
                answers.append(result)
            else:
                assert isinstance(r, Replay), r
                assert r.answer["_meta"] == {REPLAYED_KEY: True}
                answers.append({k: v for k, v in r.answer.items() if k != "_meta"})

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(call, i)
        assert executions == 1
        assert len(answers) == 50 and all(a == answers[0] for a in answers)


async def test_1000_distinct_keys_1000_executions(durable_url: str) -> None:
    async with open_fence_store(durable_url) as store:
        f = Fences(store, Owner.fresh("r1"), wait_seconds=0.0)
        kinds: Counter[str] = Counter()

        async def call(i: int) -> None:
            r = await f.begin(principal="alice", key=f"k{i}", tool="pay", arguments={"i": i}, effect=Effect.NON_IDEMPOTENT_WRITE)
            kinds[type(r).__name__] += 1
            assert isinstance(r, Proceed)
            assert await f.complete(r.ticket, answer_for(f"k{i}", "r1"))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for i in range(1000):
                    tg.start_soon(call, i)
        assert kinds == Counter({"Proceed": 1000})
        assert (await store.stats()).done == 1000


@pytest.mark.parametrize("effect", [Effect.IDEMPOTENT_WRITE, Effect.NON_IDEMPOTENT_WRITE])
async def test_racing_takeovers_resend_at_most_once(durable_url: str, effect: Effect) -> None:
    clock = FakeClock()
    keys = [f"k{i}" for i in range(40)]
    async with open_fence_store(durable_url) as store:
        dead = Fences(store, Owner.fresh("r0"), clock=clock)
        for key in keys:
            assert isinstance(await dead.begin(principal="p", key=key, tool="t", arguments=None, effect=effect), Proceed)
        clock.advance(60)  # r0 is gone
        racers = [Fences(store, Owner.fresh(f"r{n}"), clock=clock, wait_seconds=5.0, poll_interval=0.01) for n in (1, 2)]
        results: dict[str, list[Any]] = {k: [] for k in keys}

        async def race(f: Fences, key: str) -> None:
            r = await f.begin(principal="p", key=key, tool="t", arguments=None, effect=effect)
            if isinstance(r, Proceed):
                await anyio.sleep(0.05)
                assert await f.complete(r.ticket, answer_for(key, f.owner.replica_id))
            results[key].append(r)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for key in keys:
                    for f in racers:
                        tg.start_soon(race, f, key)
        for key, outs in results.items():
            kinds = sorted(type(o).__name__ for o in outs)
            if effect.resendable:
                assert kinds == ["Proceed", "Replay"], key
                assert all(o.takeover for o in outs if isinstance(o, Proceed))
            else:
                assert kinds == ["FenceUnknown", "FenceUnknown"], key
                reasons = sorted(o.reason for o in outs if isinstance(o, FenceUnknown))
                # Exactly one CAS marked it unknown; the other read the stored state.
                assert reasons == sorted([UnknownReason.OWNER_DIED, UnknownReason.STORED]), key
