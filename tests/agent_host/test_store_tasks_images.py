"""The session store's contract for upstream tasks, the host's images and retention, run against
SQLite and PostgreSQL alike (`any_store`): a parked turn's task is polled by one process at a
time and makes its turn due when it ends; images are kept once and read back; retention runs on
every append, in the append's transaction, and stays cheap."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from agent_host.domain.call_keys import call_of_key, idempotency_key
from agent_host.domain.records import CallStatus, ControlKind, ToolCallRecord
from agent_host.models.base import Message, ToolCall
from agent_host.store.session_store import SessionStore
from agent_host.store.sqlite_service import LeaseHolder
from agent_host.store.sqlite_tasks import MAX_FAILED_POLL_SECONDS, MAX_POLL_SECONDS, next_poll_delay

pytestmark = pytest.mark.anyio

ME = LeaseHolder("elsewhere/1", "boot-a")
OTHER = LeaseHolder("elsewhere/2", "boot-b")


async def _parked_on_a_task(store: SessionStore, session: str, task_id: str, status: str = "working") -> str:
    """A session whose running turn has a `sent` call with an upstream task in `status`; its key."""
    await store.create_session("scripted", "g", session)
    turn = await store.start_turn(session, "research otters")
    key = idempotency_key(session, turn.id, "call_1")
    record = ToolCallRecord(session_id=session, turn_id=turn.id, id="call_1", model_call=1, position=0,
                            name="t__research", arguments={}, kind="gateway", effect="read", requires_approval=False,
                            idempotency_key=key, status=CallStatus.SENT, attempts=1, updated_at=time.time())
    message = Message(role="assistant", tool_calls=[ToolCall(id="call_1", name="t__research")])
    await store.record_model_response(turn, message, [record])
    await store.record_task(key, task_id, "t__research", status, 0.5)
    return key


def test_a_key_names_its_call() -> None:
    assert call_of_key(idempotency_key("s-1", "turn-2", "call/x")) == ("s-1", "turn-2", "call/x")
    assert call_of_key("not-a-host-key") is None


def test_polls_back_off_and_stay_bounded() -> None:
    assert next_poll_delay(0.5, 0, False) == 0.5
    assert next_poll_delay(0.5, 1, False) == 0.75
    assert next_poll_delay(None, 0, False) == 1.0 and next_poll_delay(0.001, 0, False) == 0.25
    assert next_poll_delay(5, 50, False) == MAX_POLL_SECONDS
    assert [next_poll_delay(1, n, True) for n in (1, 2, 3)] == [1, 2, 4]
    assert next_poll_delay(1, 40, True) == MAX_FAILED_POLL_SECONDS


async def test_a_turn_parked_on_a_task_is_due_when_the_task_ends(any_store: str) -> None:
    async with SessionStore(any_store) as store:
        key = await _parked_on_a_task(store, "s-task", "task-1")
        assert await store.task_of(key) == ("task-1", "working")
        assert await store.due_sessions(ME) == []  # waits for its task
        # Its poll is due after the task's pollInterval, claimed by one process for the round.
        assert await store.claim_task_polls(ME, 10, 30.0) == []
        later = time.time() + 1
        claimed = await store.claim_task_polls(ME, 10, 30.0, now=later)
        assert [(t.key, t.task_id, t.session_id) for t in claimed] == [(key, "task-1", "s-task")]
        assert await store.claim_task_polls(OTHER, 10, 30.0, now=later) == []
        # Nothing new: the next poll comes later than the first; a failed poll keeps the status.
        await store.record_task_poll(key, "working", 0.5, now=later)
        await store.record_task_poll(key, None, 0.5, now=later)
        assert await store.task_of(key) == ("task-1", "working")
        assert await store.due_sessions(ME) == []
        assert await store.claim_task_polls(ME, 10, 30.0, now=later + 1.0) == []  # backed off
        assert len(await store.claim_task_polls(ME, 10, 30.0, now=later + 3.0)) == 1
        await store.record_task_poll(key, "completed", None)
        assert await store.due_sessions(ME) == ["s-task"]
        assert await store.claim_task_polls(ME, 10, 30.0, now=later + 100) == []  # ended: no more polls


async def test_a_task_in_input_required_or_unknown_makes_its_turn_due(any_store: str) -> None:
    async with SessionStore(any_store) as store:
        await _parked_on_a_task(store, "s-ask", "task-a", "input_required")
        await _parked_on_a_task(store, "s-gone", "task-g", "unknown")
        assert sorted(await store.due_sessions(ME)) == ["s-ask", "s-gone"]


async def test_a_cancel_wakes_a_task_wait_and_a_steer_does_not(any_store: str) -> None:
    async with SessionStore(any_store) as store:
        await _parked_on_a_task(store, "s-steer", "task-s")
        await _parked_on_a_task(store, "s-cancel", "task-c")
        assert await store.request_control("s-steer", ControlKind.STEER, "api", "also seals") is not None
        assert await store.request_control("s-cancel", ControlKind.CANCEL, "api") is not None
        # A started call runs to its end on a steer: its turn still waits for the task.
        assert await store.due_sessions(ME) == ["s-cancel"]


async def test_a_session_held_by_a_live_process_is_not_polled_by_another(any_store: str) -> None:
    async with SessionStore(any_store) as store:
        await _parked_on_a_task(store, "s-held", "task-h")
        assert await store.take_lease("s-held", OTHER, 60) is not None
        assert await store.claim_task_polls(ME, 10, 30.0, now=time.time() + 5) == []
        await store.release_lease("s-held", OTHER)
        assert len(await store.claim_task_polls(ME, 10, 30.0, now=time.time() + 5)) == 1


async def test_images_are_kept_once_and_read_back(any_store: str) -> None:
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
    sha = hashlib.sha256(data).hexdigest()
    async with SessionStore(any_store) as store:
        assert await store.get_image(sha) is None
        assert await store.put_image(sha, "image/png", data) is True
        assert await store.put_image(sha, "image/png", data) is False
    async with SessionStore(any_store) as again:  # another opening (another process) reads it
        assert await again.get_image(sha) == data


async def test_retention_runs_on_every_append(any_store: str) -> None:
    async with SessionStore(any_store, retained_message_limit=5) as store:
        await store.create_session("scripted", "g", "s")
        turn = await store.start_turn("s", "m0")
        for n in range(1, 12):
            await store.append_message("s", turn.id, Message(role="user", text=f"m{n}"))
        seqs = [seq for seq, _, _ in await store.stored_messages("s")]
        assert len(seqs) == 12  # nothing summarized: everything stays
        await store.record_compaction("s", turn.id, "summary", seqs[:8], [], None)
        # At the compaction: the five newest stay; m0..m6 were summarized and are older: gone.
        assert [m.text for m in await store.messages("s")] == ["m7", "m8", "m9", "m10", "m11"]
        await store.append_message("s", turn.id, Message(role="user", text="m12"))
        # At the append: m7, the last summarized one, now has five newer messages.
        assert [m.text for m in await store.messages("s")] == ["m8", "m9", "m10", "m11", "m12"]
        await store.append_message("s", turn.id, Message(role="user", text="m13"))
        # Nothing summarized is left: every message after the summary stays, past the limit.
        assert [m.text for m in await store.messages("s")] == ["m8", "m9", "m10", "m11", "m12", "m13"]


def test_retention_reads_only_indexes_when_nothing_summarized_is_left(tmp_path: Path) -> None:
    """The statements each append runs for retention use the session's indexes: their cost does
    not grow with the session's (or the store's) number of messages."""
    from agent_host.store.sqlite_store import SqliteSessionStore

    store = SqliteSessionStore(tmp_path / "plan.db")
    store.close()
    with sqlite3.connect(tmp_path / "plan.db") as db:
        for statement in ("SELECT MAX(last_seq) AS s FROM compactions WHERE session_id = ?",
                          "SELECT MIN(seq) AS s FROM messages WHERE session_id = ?"):
            plan = " ".join(str(row[-1]) for row in db.execute("EXPLAIN QUERY PLAN " + statement, ("s",)))
            assert "USING COVERING INDEX" in plan and "SCAN" not in plan, (statement, plan)


@pytest.mark.slow
async def test_retention_on_every_append_stays_cheap(tmp_path: Path) -> None:
    """Appends to a long session cost about the same with retention as without (measured)."""

    async def per_append(limit: int | None) -> float:
        async with SessionStore(tmp_path / f"cost-{limit}.db", retained_message_limit=limit) as store:
            await store.create_session("scripted", "g", "s")
            turn = await store.start_turn("s", "x")
            for n in range(1500):
                await store.append_message("s", turn.id, Message(role="user", text=f"m{n}"))
            seqs = [seq for seq, _, _ in await store.stored_messages("s")]
            await store.record_compaction("s", turn.id, "summary", seqs[:200], [], None)
            start = time.perf_counter()
            for n in range(300):
                await store.append_message("s", turn.id, Message(role="user", text=f"n{n}"))
            return (time.perf_counter() - start) / 300

    without, with_retention = await per_append(None), await per_append(1000)
    print(f"per append: {without * 1000:.2f} ms without retention, {with_retention * 1000:.2f} ms with")
    assert with_retention < without * 2 + 0.002


async def test_an_older_sqlite_store_keeps_its_task_ids(tmp_path: Path) -> None:
    """A store file where an older host kept its task ids (five columns) gains the new ones."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE host_tasks (key TEXT PRIMARY KEY, task_id TEXT NOT NULL, tool TEXT NOT NULL, "
                   "status TEXT NOT NULL, updated_at REAL NOT NULL)")
        db.execute("INSERT INTO host_tasks VALUES ('s/turn-1/c', 'task-old', 't__research', 'working', 1.0)")
    async with SessionStore(path) as store:
        assert await store.task_of("s/turn-1/c") == ("task-old", "working")
        await store.record_task("s/turn-1/c", "task-old", "t__research", "completed")
        assert await store.task_of("s/turn-1/c") == ("task-old", "completed")
