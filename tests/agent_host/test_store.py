"""The session store runs its SQLite statements off the event loop, one at a time, in the order
they were asked for, and a cancelled caller still gets its commit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent_host.store.sqlite_store import SqliteSessionStore
from agent_host.store.session_store import SessionStore

pytestmark = pytest.mark.anyio


def slow_set_plan(monkeypatch: pytest.MonkeyPatch, seconds: float, seen: list[tuple[int, Any]]) -> None:
    """Every set_plan takes `seconds` (a slow fsync) and notes its thread and plan."""
    original: Callable[..., int] = SqliteSessionStore.set_plan

    def set_plan(self: SqliteSessionStore, session_id: str, plan: Any, *rest: Any) -> int:
        seen.append((threading.get_ident(), plan))
        time.sleep(seconds)
        return original(self, session_id, plan, *rest)

    monkeypatch.setattr(SqliteSessionStore, "set_plan", set_plan)


async def test_a_slow_commit_does_not_block_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, Any]] = []
    slow_set_plan(monkeypatch, 0.3, seen)
    ticks = 0
    async with SessionStore(tmp_path / "s.db") as store:
        await store.create_session("m", "g", "s")

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await anyio.sleep(0.01)
                ticks += 1

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            assert await store.set_plan("s", [{"content": "a"}]) == 1
            tg.cancel_scope.cancel()
    assert seen and seen[0][0] != threading.get_ident()  # ran in a worker thread
    assert ticks >= 10, f"the event loop ticked only {ticks} times during a 0.3 s commit"


async def test_commits_land_in_the_order_they_were_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, Any]] = []
    slow_set_plan(monkeypatch, 0.002, seen)
    async with SessionStore(tmp_path / "s.db") as store:
        await store.create_session("m", "g", "s")
        async with anyio.create_task_group() as tg:
            for n in range(30):
                tg.start_soon(store.set_plan, "s", [{"n": n}])
        session = await store.get_session("s")
    assert [plan[0]["n"] for _, plan in seen] == list(range(30))
    assert session is not None and session.plan == [{"n": 29}] and session.plan_revision == 30


async def test_a_cancelled_caller_still_gets_its_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, Any]] = []
    slow_set_plan(monkeypatch, 0.3, seen)
    async with SessionStore(tmp_path / "s.db") as store:
        await store.create_session("m", "g", "s")
        started = time.monotonic()
        with anyio.move_on_after(0.05):
            await store.set_plan("s", [{"content": "a"}])
        # The cancellation waited for the statement: the commit is there, whole.
        assert time.monotonic() - started >= 0.25
        session = await store.get_session("s")
    assert session is not None and session.plan_revision == 1


async def test_an_unopened_store_says_so(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="not open"):
        await SessionStore(tmp_path / "s.db").get_session("s")
