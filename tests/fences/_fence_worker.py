"""A separate OS process using a fence store, driven by the multi-process and SIGKILL tests.

usage: _fence_worker.py hammer URL REPLICA NKEYS      (prints "ready", starts on a "go" line on stdin)
       _fence_worker.py claim-and-hang URL REPLICA
       _fence_worker.py loop URL REPLICA
       _fence_worker.py group-loop URL REPLICA   (PostgreSQL: 16 callers whose finishes share commits;
                                                  the first shared commit of 2+ finishes hangs)
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import anyio

from gateway.conventions.keys import Effect
from gateway.fences import Fences, Owner, Proceed, Replay, open_fence_store


def answer_for(key: str, who: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": f"{key} executed by {who}"}], "isError": False}


def say(*parts: str) -> None:
    print(*parts, flush=True)


async def hammer(url: str, replica: str, nkeys: int) -> None:
    keys = [f"k{i}" for i in range(nkeys)]
    random.shuffle(keys)
    results: list[dict[str, Any]] = []
    limit = anyio.Semaphore(32)
    async with open_fence_store(url) as store:
        f = Fences(store, Owner.fresh(replica), wait_seconds=20.0, poll_interval=0.005, max_poll_interval=0.05)
        say("ready")
        # Both processes start together: when the test, which waited for both to be ready, says go.
        go = await anyio.to_thread.run_sync(sys.stdin.readline)
        assert go.strip() == "go", go

        async def one(key: str) -> None:
            async with limit:
                r = await f.begin(principal="p", key=key, tool="pay", arguments={"key": key}, effect=Effect.NON_IDEMPOTENT_WRITE)
                if isinstance(r, Proceed):
                    await anyio.sleep(random.random() * 0.01)
                    answer = answer_for(key, replica)
                    assert await f.complete(r.ticket, answer)
                    results.append({"key": key, "kind": "proceed", "text": answer["content"][0]["text"]})
                elif isinstance(r, Replay):
                    results.append({"key": key, "kind": "replay", "text": r.answer["content"][0]["text"]})
                else:
                    results.append({"key": key, "kind": type(r).__name__, "text": getattr(r, "text", "")})

        async with anyio.create_task_group() as tg:
            for key in keys:
                tg.start_soon(one, key)
    say(json.dumps(results))


async def claim_and_hang(url: str, replica: str) -> None:
    async with open_fence_store(url) as store:
        f = Fences(store, Owner.fresh(replica), lease_seconds=60.0)
        done = await f.begin(principal="p", key="done", tool="t", arguments=None, effect=Effect.NON_IDEMPOTENT_WRITE)
        assert isinstance(done, Proceed)
        assert await f.complete(done.ticket, answer_for("done", replica))
        for key, effect in [("pend-idem", Effect.IDEMPOTENT_WRITE), ("pend-non", Effect.NON_IDEMPOTENT_WRITE),
                            ("pend-unclassified", Effect.UNCLASSIFIED), ("pend-other", Effect.NON_IDEMPOTENT_WRITE)]:
            assert isinstance(await f.begin(principal="p", key=key, tool="t", arguments=None, effect=effect), Proceed)
        say("ready")
        await anyio.sleep(3600)  # "calling upstream" until SIGKILL


async def loop(url: str, replica: str) -> None:
    async with open_fence_store(url) as store:
        f = Fences(store, Owner.fresh(replica), lease_seconds=60.0)
        say("ready")
        i = 0
        while True:
            key = f"k{i}"
            r = await f.begin(principal="p", key=key, tool="t", arguments=None, effect=Effect.NON_IDEMPOTENT_WRITE)
            assert isinstance(r, Proceed), r
            say("sending", key)
            assert await f.complete(r.ticket, answer_for(key, replica))
            say("done", key)
            i += 1


async def group_loop(url: str, replica: str) -> None:
    """16 callers claiming k<caller>-<n> in turn. Prints "sending <key>" once a key is claimed,
    "done <key>" once its answer is stored, and "group <key> <key> ..." when a shared commit of
    two or more finishes is about to be sent: that first one then waits (the test SIGKILLs the
    process there, between the claims and their shared commit)."""
    from gateway.fences.stores.postgres import PostgresFenceStore

    async with open_fence_store(url) as store:
        assert isinstance(store, PostgresFenceStore) and store.group_commit
        commit = store._finishes._commit
        hung = False

        async def announced(items: Any) -> Any:
            nonlocal hung
            if len(items) > 1 and not hung:
                hung = True
                say("group", *(item.fence_id for item in items))
                await anyio.sleep(3600)
            return await commit(items)

        store._finishes._commit = announced
        f = Fences(store, Owner.fresh(replica), lease_seconds=60.0)
        say("ready")

        async def caller(n: int) -> None:
            for i in range(10_000):
                key = f"k{n}-{i}"
                r = await f.begin(principal="p", key=key, tool="t", arguments=None, effect=Effect.NON_IDEMPOTENT_WRITE)
                assert isinstance(r, Proceed), r
                say("sending", key, r.ticket.fence_id)
                await anyio.sleep(random.random() * 0.002)
                assert await f.complete(r.ticket, answer_for(key, replica))
                say("done", key)

        async with anyio.create_task_group() as tg:
            for n in range(16):
                tg.start_soon(caller, n)


def main(argv: list[str]) -> None:
    mode, url, replica = argv[1], argv[2], argv[3]
    if mode == "hammer":
        anyio.run(hammer, url, replica, int(argv[4]))
    elif mode == "claim-and-hang":
        anyio.run(claim_and_hang, url, replica)
    elif mode == "loop":
        anyio.run(loop, url, replica)
    elif mode == "group-loop":
        anyio.run(group_loop, url, replica)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv)
