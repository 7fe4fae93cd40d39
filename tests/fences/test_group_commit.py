"""Group commit: concurrent writes share one commit; each caller gets its own result, after it."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from gateway.fences import FenceState, open_fence_store
from gateway.fences.stores.group_commit import GroupCommit
from gateway.fences.stores.postgres import PostgresFenceStore
from test_fence_stores import A, B, pending

pytestmark = pytest.mark.anyio


class Recorder:
    """A commit that takes a while and remembers each group it was given."""

    def __init__(self, fail_first: bool = False) -> None:
        self.groups: list[list[str]] = []
        self.fail_first = fail_first

    async def __call__(self, items: Sequence[str]) -> list[str]:
        self.groups.append(list(items))
        await anyio.sleep(0.01)
        if self.fail_first and len(self.groups) == 1:
            raise OSError("connection lost")
        return [f"{item}!" for item in items]


async def test_a_lone_write_commits_at_once_and_concurrent_ones_share_commits() -> None:
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
    # The first write commits alone; the 19 that arrived meanwhile share the next commit.
    assert commit.groups[1:] == [["w0"], [f"w{n}" for n in range(1, 20)]]


async def test_the_same_key_never_twice_in_one_commit_and_max_items() -> None:
    commit = Recorder()
    group: GroupCommit[str, str] = GroupCommit(commit, key=lambda s: s[0], max_items=3)
    async with anyio.create_task_group() as tg:
        for item in ["a1", "a2", "b1", "c1", "d1", "a3"]:
            tg.start_soon(group.submit, item)
    assert commit.groups == [["a1"], ["a2", "b1", "c1"], ["d1", "a3"]]


async def test_a_failed_commit_fails_each_of_its_writes_and_the_next_group_goes_on() -> None:
    commit = Recorder(fail_first=True)
    group: GroupCommit[str, str] = GroupCommit(commit, key=lambda s: s)
    outcomes: dict[str, str] = {}

    async def one(item: str) -> None:
        try:
            outcomes[item] = await group.submit(item)
        except OSError as exc:
            outcomes[item] = str(exc)

    async with anyio.create_task_group() as tg:
        for item in ["x", "y", "z"]:
            tg.start_soon(one, item)
    assert outcomes == {"x": "connection lost", "y": "y!", "z": "z!"}


async def test_a_cancelled_caller_still_gets_its_write_committed() -> None:
    commit = Recorder()
    group: GroupCommit[str, str] = GroupCommit(commit, key=lambda s: s)
    async with anyio.create_task_group() as tg:
        tg.start_soon(group.submit, "first")
        await anyio.sleep(0)
        with anyio.move_on_after(0.001):
            await group.submit("cancelled")
    assert commit.groups == [["first"], ["cancelled"]]


async def test_postgres_finishes_sharing_a_commit_keep_each_compare_and_set(pg_url: str) -> None:
    async with open_fence_store(pg_url) as store:
        assert isinstance(store, PostgresFenceStore) and store.group_commit
        ids = [f"f{n}" for n in range(12)]
        for fid in ids:
            await store.insert_if_absent(pending(fid))
        statements: list[int] = []
        commit = store._finishes._commit

        async def counted(items: Sequence[object]) -> list[bool]:
            statements.append(len(items))
            return await commit(items)  # type: ignore[arg-type]

        store._finishes._commit = counted  # type: ignore[method-assign]
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
