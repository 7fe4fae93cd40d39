"""The task store contract on all three backends (memory, SQLite, PostgreSQL), and the pure rules:
poll intervals, the wire forms of both eras, the lost-task rule."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gateway.conventions.answers import Answer
from gateway.conventions.keys import OUTCOME_KEY, Effect
from gateway.storage.database import Database
from gateway.fences.records import Owner
from gateway.fences.stores.sqlite import SqliteFenceStore
from gateway.tasks import TaskRecord, TaskStatus, open_task_store
from gateway.tasks.polling import next_interval
from gateway.tasks.transitions import finish, lose
from gateway.protocol import Era
from gateway.tasks.wire import created, detailed, related_result

pytestmark = pytest.mark.anyio
INFO = {"name": "dex-mcp-gateway", "version": "0"}


def _record(task_id: str = "t1", principal: str = "alice", **changes: object) -> TaskRecord:
    base = TaskRecord(task_id=task_id, principal=principal, tool="srv__job", effect=Effect.NON_IDEMPOTENT_WRITE,
                      era=Era.HANDSHAKE, status=TaskStatus.WORKING, created_at=1000.0, updated_at=1000.0,
                      poll_interval_ms=500, ttl_ms=60_000, owner=Owner("r1", "b1"), lease_until=1015.0)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


async def test_store_contract(store_url: str) -> None:
    database = Database(store_url)
    async with database:
        store = open_task_store(database)
        await store.open()
        await store.open()  # idempotent
        try:
            await store.insert(_record())
            await store.insert(_record("t2", "bob", created_at=1001.0, ttl_ms=None))
            with pytest.raises(Exception):
                await store.insert(_record())
            got = await store.get("t1")
            assert got == _record()
            # Scoped to the principal: another principal sees nothing.
            assert await store.get("t1", "alice") == got
            assert await store.get("t1", "bob") is None
            # Compare-and-set on the version.
            answer = {"content": [{"type": "text", "text": "Grüße ✓"}], "isError": False}
            done = dataclasses.replace(got, status=TaskStatus.COMPLETED, result=answer, owner=None, lease_until=None)
            assert await store.save(done, expected_version=1) is True
            assert await store.save(done, expected_version=1) is False
            again = await store.get("t1")
            assert again is not None and again.version == 2 and again.result == answer and again.owner is None
            assert [r.task_id for r in await store.list()] == ["t2", "t1"]
            assert [r.task_id for r in await store.list(principal="alice")] == ["t1"]
            assert [r.task_id for r in await store.list(before=1001.0)] == ["t1"]
            assert [r.task_id for r in await store.active()] == ["t2"]
            # The bytes a principal holds: its results' (and errors') JSON text in UTF-8, as stored.
            stored = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode()
            assert await store.held_bytes("alice") == len(stored) and len(stored) > len(stored.decode())
            assert await store.held_bytes("bob") == 0
            # t1 expires at 1060; t2 has no TTL and is never swept.
            assert await store.delete_expired(1059.0) == 0
            assert await store.delete_expired(1061.0) == 1
            assert await store.get("t1") is None and await store.get("t2") is not None
        finally:
            await store.close()


async def test_sqlite_tasks_live_beside_the_fences(tmp_path: object) -> None:
    """One file: the fence store's schema version (PRAGMA user_version) is left alone."""
    path = f"{tmp_path}/gateway.db"
    fences = SqliteFenceStore(path)
    await fences.open()
    store = open_task_store(Database(f"sqlite:///{path}"))
    await store.open()
    await store.insert(_record())
    await fences.close()
    reopened = SqliteFenceStore(path)
    await reopened.open()  # still schema version 1: not refused
    await reopened.close()
    assert (await store.get("t1")) is not None


def test_poll_interval_follows_the_server_then_doubles_up_to_a_minute() -> None:
    assert next_interval(None, 250) == 0.25
    assert next_interval(None, None) == 1.0
    assert next_interval(0.25, 250) == 0.5  # the server's is shorter: double the previous
    assert next_interval(0.5, 5000) == 5.0  # the server's is longer: the server's
    assert next_interval(40.0, 100) == 60.0  # never more than a minute by doubling
    assert next_interval(60.0, 120_000) == 120.0  # but the server may ask for more


def test_wire_forms_of_both_eras() -> None:
    record = _record(status_message="step 2/4")
    legacy = created(record, era=Era.HANDSHAKE, server_info=INFO)
    assert legacy == {"task": {"taskId": "t1", "status": "working", "statusMessage": "step 2/4",
                               "createdAt": "1970-01-01T00:16:40.000Z", "lastUpdatedAt": "1970-01-01T00:16:40.000Z",
                               "ttl": 60000, "pollInterval": 500}}
    modern = created(record, era=Era.MODERN, server_info=INFO)
    assert modern["resultType"] == "task" and modern["ttlMs"] == 60000 and modern["pollIntervalMs"] == 500
    assert "ttl" not in modern and "task" not in modern
    answer = {"content": [{"type": "text", "text": "ok"}], "isError": False}
    done = dataclasses.replace(record, status=TaskStatus.COMPLETED, result=answer)
    got = detailed(done, era=Era.MODERN, server_info=INFO)
    assert got["result"] == answer and got["resultType"] == "complete" and "requestState" not in got
    assert related_result(done)["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": "t1"}
    # A null TTL stays on the 2025 wire (required, nullable).
    assert created(dataclasses.replace(record, ttl_ms=None), era=Era.HANDSHAKE, server_info=INFO)["task"]["ttl"] is None


def test_lost_rule_read_failed_write_unknown() -> None:
    write = lose("the gateway process that ran it stopped")(_record())
    assert write is not None and write.status is TaskStatus.FAILED
    assert write.error is not None and write.error["data"]["_meta"][OUTCOME_KEY] == "unknown"
    read = lose("its time to live ran out")(_record(effect=Effect.READ))
    assert read is not None and read.status is TaskStatus.FAILED and "data" not in (read.error or {})
    # A terminal task never changes again.
    assert lose("x")(write) is None
    assert finish(Answer.error_text("late"), None)(write) is None
    # An upstream task that failed with a JSON-RPC error fails the gateway task with that error.
    failed = finish(Answer.error_text("MCP error -32603: boom"), {"code": -32603, "message": "boom"})(_record())
    assert failed is not None and failed.status is TaskStatus.FAILED and failed.error == {"code": -32603, "message": "boom"}
