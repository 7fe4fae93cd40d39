"""Group commit: concurrent writes share one commit; each caller gets its own result, after it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio
import pytest

from gateway.fences import FenceState, open_fence_store
from gateway.fences.stores.group_commit import GroupCommit
from gateway.fences.stores.postgres import PostgresFenceStore
from test_fence_stores import A, B, pending

pytestmark = pytest.mark.anyio


class Recorder:
    """A commit that takes a while and remembers each group it was given and how many commits
    were under way at once."""

    def __init__(self, fail_group: int | None = None) -> None:
        self.groups: list[list[str]] = []
        self.committed: list[list[str]] = []
        self.fail_group = fail_group
        self.running = 0
        self.most_running = 0

    async def __call__(self, items: Sequence[str]) -> list[str]:
        self.groups.append(list(items))
        fail = len(self.groups) - 1 == self.fail_group
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await anyio.sleep(0.02)
        finally:
            self.running -= 1
        if fail:
            raise OSError("connection lost")
        self.committed.append(list(items))
        return [f"{item}!" for item in items]


async def test_writes_ready_together_share_one_commit_each_gets_its_own_result() -> None:
    commit = Recorder()
    group: GroupCommit[str, str] = GroupCommit(commit, key=lambda s: s)
    assert await group.submit("solo") == "solo!"
    assert commit.groups == [["solo"]]
    results: dict[str, str] = {}

    async def one(item: str) -> None:
        results[item] = await group.submit(item)

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(one, f"w{n}")
    assert results == {f"w{n}": f"w{n}!" for n in range(20)}
    # w0 finds no commit under way and goes alone; the 19 that arrive meanwhile go together.
    assert commit.groups[1:] == [["w0"], [f"w{n}" for n in range(1, 20)]]


async def test_a_later_write_does_not_wait_for_the_commit_under_way() -> None:
    commit = Recorder()
    group: GroupCommit[str, str] = GroupCommit(commit, key=lambda s: s)
    async with anyio.create_task_group() as tg:
        tg.start_soon(group.submit, "first")
        await anyio.sleep(0.005)  # "first" is being committed
        with anyio.fail_after(0.015):  # sooner than the 20 ms "first" takes, plus its own 20 ms
            tg.start_soon(group.submit, "second")
            await anyio.sleep(0.001)
            assert commit.running == 2
    assert commit.groups == [["first"], ["second"]] and commit.most_running == 2


async def test_the_same_key_never_twice_in_one_commit_and_max_items() -> None:
    commit = Recorder()
    group: GroupCommit[str, str] = GroupCommit(commit, key=lambda s: s[0], max_items=3)
    async with anyio.create_task_group() as tg:
        for item in ["a1", "a2", "b1", "c1", "d1", "a3"]:
            tg.start_soon(group.submit, item)
    assert commit.groups == [["a1"], ["a2", "b1", "c1"], ["d1", "a3"]]


def submitter(group: GroupCommit[str, str], outcomes: dict[str, str]) -> Callable[[str], Awaitable[None]]:
    """Submit an item; its result, or the text of the error it got, lands in `outcomes`."""

    async def one(item: str) -> None:
        try:
            outcomes[item] = await group.submit(item)
        except (OSError, ValueError) as exc:
            outcomes[item] = str(exc)

    return one


async def test_a_transient_failure_fails_each_write_of_the_group_and_the_next_group_goes_on() -> None:
    commit = Recorder(fail_group=1)
    group: GroupCommit[str, str] = GroupCommit(commit, key=lambda s: s, transient=(OSError,))
    outcomes: dict[str, str] = {}
    one = submitter(group, outcomes)
    async with anyio.create_task_group() as tg:
        for item in ["w", "x", "y"]:
            tg.start_soon(one, item)
        await anyio.sleep(0.005)
        tg.start_soon(one, "z")
    # Maybe committed, maybe not: each caller gets the error to settle, nothing is tried again here.
    assert commit.groups == [["w"], ["x", "y"], ["z"]]
    assert outcomes == {"w": "w!", "x": "connection lost", "y": "connection lost", "z": "z!"}


async def test_a_refused_group_is_tried_again_one_write_at_a_time() -> None:
    groups: list[list[str]] = []

    async def commit(items: Sequence[str]) -> list[str]:
        groups.append(list(items))
        await anyio.sleep(0.01)
        if "bad" in items:
            raise ValueError("refused")
        return [f"{item}!" for item in items]

    group: GroupCommit[str, str] = GroupCommit(commit, key=lambda s: s, transient=(OSError,))
    outcomes: dict[str, str] = {}
    one = submitter(group, outcomes)
    async with anyio.create_task_group() as tg:
        for item in ["a", "b", "bad", "c"]:
            tg.start_soon(one, item)
    assert outcomes == {"a": "a!", "b": "b!", "bad": "refused", "c": "c!"}
    assert groups[:2] == [["a"], ["b", "bad", "c"]]
    assert sorted(map(tuple, groups[2:])) == [("b",), ("bad",), ("c",)]


async def test_a_cancelled_caller_still_gets_its_write_committed() -> None:
    commit = Recorder()
    group: GroupCommit[str, str] = GroupCommit(commit, key=lambda s: s)
    with anyio.move_on_after(0.001):
        await group.submit("cancelled")  # alone: nothing under way
    assert commit.committed == [["cancelled"]] and commit.running == 0

    async def queued() -> None:
        with anyio.move_on_after(0.001):
            await group.submit("queued")

    async with anyio.create_task_group() as tg:
        tg.start_soon(group.submit, "first")
        await anyio.sleep(0.005)  # "first" is being committed: "queued" joins the next group
        tg.start_soon(queued)
    assert commit.committed[1:] == [["first"], ["queued"]] and commit.running == 0


async def pending_fences_counting_commits(store: PostgresFenceStore, ids: list[str]) -> list[int]:
    """Pending fences `ids` held by A; the size of each finish commit the store sends from now on."""
    for fid in ids:
        await store.insert_if_absent(pending(fid))
    sizes: list[int] = []
    commit = store._finishes._commit

    async def counted(items: Sequence[object]) -> list[bool]:
        sizes.append(len(items))
        return list(await commit(items))  # type: ignore[arg-type]

    store._finishes._commit = counted  # type: ignore[method-assign,assignment]
    return sizes


async def test_postgres_finishes_sharing_a_commit_keep_each_compare_and_set(pg_url: str) -> None:
    async with open_fence_store(pg_url) as store:
        assert isinstance(store, PostgresFenceStore) and store.group_commit
        ids = [f"f{n}" for n in range(12)]
        statements = await pending_fences_counting_commits(store, ids)
        results: dict[str, bool] = {}

        async def finish(fid: str) -> None:
            # f3 is held by A, not B; f5 was claimed once, not twice: both compare-and-sets refuse.
            owner, attempts = (B, 1) if fid == "f3" else (A, 2) if fid == "f5" else (A, 1)
            results[fid] = await store.finish(
                fid, expected=owner, attempts=attempts, state=FenceState.DONE, answer={"content": [], "n": fid}, now=2000.0
            )

        async with anyio.create_task_group() as tg:
            for fid in ids:
                tg.start_soon(finish, fid)
        assert results == {fid: fid not in ("f3", "f5") for fid in ids}
        assert len(statements) < len(ids) and max(statements) > 1, statements
        for fid in ids:
            rec = await store.get(fid)
            assert rec is not None
            if fid in ("f3", "f5"):
                assert rec.state is FenceState.PENDING and rec.answer is None
            else:
                assert rec.state is FenceState.DONE and rec.answer == {"content": [], "n": fid}
                assert rec.lease_until is None and rec.updated_at == 2000.0


async def test_postgres_one_finish_the_database_refuses_fails_only_its_own_caller(pg_url: str) -> None:
    async with open_fence_store(pg_url) as store:
        assert isinstance(store, PostgresFenceStore)
        ids = [f"g{n}" for n in range(6)]
        sizes = await pending_fences_counting_commits(store, ids)
        outcomes: dict[str, object] = {}

        async def finish(fid: str) -> None:
            # A lone surrogate cannot be encoded as UTF-8: this answer is refused, the others not.
            text = "\ud800" if fid == "g2" else fid
            try:
                outcomes[fid] = await store.finish(
                    fid, expected=A, attempts=1, state=FenceState.DONE, answer={"t": text}, now=2000.0
                )
            except Exception as exc:  # noqa: BLE001 - the test looks at which caller got it
                outcomes[fid] = type(exc).__name__

        async with anyio.create_task_group() as tg:
            for fid in ids:
                tg.start_soon(finish, fid)
        assert outcomes["g2"] not in (True, False)
        assert {fid: v for fid, v in outcomes.items() if fid != "g2"} == {fid: True for fid in ids if fid != "g2"}
        # g0 alone (nothing under way), then the other five together: refused, then each alone.
        assert sizes == [1, 5, 1, 1, 1, 1, 1]
        rec = await store.get("g2")
        assert rec is not None and rec.state is FenceState.PENDING
