"""The audit stores on real SQLite and PostgreSQL: append-only rows, newest-first pages, filters,
export order, JSON round trip, the batched retention sweep; and the writer's queue."""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import replace
from datetime import timedelta

import asyncpg
import pytest

from gateway.audit import Approval, AuditEntry, AuditLog, AuditQuery, PendingEntry, arguments_digest, open_audit_store
from gateway.audit.records import iso_time, micros_from_iso
from gateway.storage.database import opened
from gateway.storage.urls import parse_postgres_url, parse_sqlite_url

pytestmark = pytest.mark.anyio

T0 = 1_780_000_000_000_000  # microseconds


def entry(i: int, *, principal: str = "alice", tool: str = "pay__send", outcome: str = "ok",
          approval: Approval | None = None) -> AuditEntry:
    return AuditEntry(
        time=T0 + i * 1_000_000, principal=principal, tool=tool, upstream="pay", effect="non_idempotent_write",
        arguments_digest=arguments_digest({"n": i}), arguments=None, idempotency_key=f"k/{i}", approval=approval,
        fence_state="claimed", outcome=outcome, reason=None, latency_ms=1.5, trace_id=None, span_id=None,
    )


async def test_rows_newest_first_pages_and_filters(audit_url: str) -> None:
    async with opened(open_audit_store(audit_url)) as store:
        await store.append([entry(i, principal="alice" if i % 2 else "bob", outcome="ok" if i % 3 else "rejected")
                            for i in range(10)])
        newest = await store.newest(AuditQuery(), limit=4)
        assert [e.arguments_digest for e in newest] == [arguments_digest({"n": i}) for i in (9, 8, 7, 6)]
        ids = [e.id for e in newest]
        assert ids == sorted(ids, reverse=True) and all(isinstance(i, int) for i in ids)
        older = await store.newest(AuditQuery(), before=newest[-1].id, limit=100)
        assert len(older) == 6 and all((e.id or 0) < (newest[-1].id or 0) for e in older)

        alice = await store.newest(AuditQuery(principal="alice"))
        assert {e.principal for e in alice} == {"alice"} and len(alice) == 5
        rejected = await store.newest(AuditQuery(outcome="rejected"))
        assert len(rejected) == 4  # 0, 3, 6, 9
        since = await store.newest(AuditQuery(since=T0 + 7 * 1_000_000))
        assert len(since) == 3
        assert await store.newest(AuditQuery(tool="other")) == []
        exported = [e async for e in store.oldest_first(AuditQuery(), page=3)]
        assert [e.time for e in exported] == [T0 + i * 1_000_000 for i in range(10)]


async def test_json_round_trip_is_the_same_row(audit_url: str) -> None:
    approval = Approval(by="carol", how="console", at=1_780_000_001.25)
    async with opened(open_audit_store(audit_url)) as store:
        stored = replace(entry(1, approval=approval), arguments='{"a":"é","n":1}', reason="x\ny",
                         trace_id="0" * 31 + "1", span_id="0" * 15 + "2")
        await store.append([stored, entry(2)])
        rows = [e async for e in store.oldest_first(AuditQuery())]
    lines = [json.dumps(e.to_json()) for e in rows]
    assert [AuditEntry.from_json(json.loads(line)) for line in lines] == rows
    first = json.loads(lines[0])
    assert first["approval"] == {"by": "carol", "how": "console", "at": "2026-05-28T20:26:41.250000Z"}
    assert first["arguments"] == {"a": "é", "n": 1}
    api = rows[0].to_api()
    assert list(api) == ["id", "time", "principal", "tool", "upstream", "arguments_digest", "arguments",
                         "idempotency_key", "approval", "fence_state", "outcome", "latency_ms", "trace_id"]
    assert "arguments" not in rows[1].to_api()


async def test_rows_cannot_be_changed(audit_url: str) -> None:
    async with opened(open_audit_store(audit_url)) as store:
        await store.append([entry(1)])
    if audit_url.startswith("sqlite"):
        conn = sqlite3.connect(parse_sqlite_url(audit_url).path)
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("UPDATE audit_log SET outcome = 'ok'")
        conn.close()
    else:
        pg = parse_postgres_url(audit_url)
        conn = await asyncpg.connect(pg.dsn)
        try:
            with pytest.raises(asyncpg.RaiseError, match="append-only"):
                await conn.execute(f'UPDATE "{pg.schema}".dex_audit_log SET outcome = $1', "ok")
        finally:
            await conn.close()


async def test_sweep_deletes_only_rows_past_retention_in_batches(audit_url: str) -> None:
    async with opened(open_audit_store(audit_url)) as store:
        await store.append([entry(i) for i in range(2600)])  # more than one batch of either backend
        assert await store.sweep(T0 + 2500 * 1_000_000) == 2500
        left = [e async for e in store.oldest_first(AuditQuery())]
        assert [e.time for e in left] == [T0 + i * 1_000_000 for i in range(2500, 2600)]


def pending(i: int) -> PendingEntry:
    return PendingEntry(1_780_000_000 + i, "alice", "pay__send", "pay", "unclassified", {"n": i, "secret": "s"},
                        None, None, "none", "rejected", "write without an idempotency key", None, None, None)


async def test_writer_keeps_order_and_close_writes_every_queued_row(audit_url: str) -> None:
    log = AuditLog(open_audit_store(audit_url), store_arguments=True, batch_rows=7)
    async with opened(log):
        for i in range(20):
            log.record(pending(i))
        await log.flush()
        for i in range(20, 30):
            log.record(pending(i))  # never flushed by hand: close writes them
    async with opened(open_audit_store(audit_url)) as store:
        rows = [e async for e in store.oldest_first(AuditQuery())]
    assert [json.loads(r.arguments or "")["n"] for r in rows] == list(range(30))
    assert rows[0].arguments_digest == arguments_digest({"n": 0, "secret": "s"})


async def test_arguments_are_not_kept_unless_configured(audit_url: str) -> None:
    log = AuditLog(open_audit_store(audit_url))
    async with opened(log):
        log.record(pending(1))
    async with opened(open_audit_store(audit_url)) as store:
        (row,) = await store.newest(AuditQuery())
    assert row.arguments is None and row.arguments_digest == arguments_digest({"secret": "s", "n": 1})


async def test_a_row_after_close_goes_to_the_log(caplog: pytest.LogCaptureFixture) -> None:
    log = AuditLog(open_audit_store("memory://"))
    async with opened(log):
        pass
    with caplog.at_level(logging.ERROR, logger="gateway.audit.log"):
        log.record(pending(3))
    assert "audit row not stored (the audit log was closed)" in caplog.text and '"outcome": "rejected"' in caplog.text


def test_times_read_back_exactly() -> None:
    for micros in (0, T0, T0 + 123_456, T0 + 999_999):
        assert micros_from_iso(iso_time(micros)) == micros
    assert micros_from_iso("2026-12-04") == micros_from_iso("2026-12-04T00:00:00Z")
    assert micros_from_iso("2026-12-04T01:00:00+01:00") == micros_from_iso("2026-12-04T00:00:00Z")
    with pytest.raises(ValueError, match="not an ISO 8601 time"):
        micros_from_iso("yesterday")


async def test_the_sweep_keeps_retention_days_of_rows(audit_url: str) -> None:
    now = 1_780_000_000.0
    log = AuditLog(open_audit_store(audit_url), clock=lambda: now)
    async with opened(log):
        for age_days in (100, 91, 89, 1):
            log.record(replace(pending(0), time=now - age_days * 86_400))
        await log.flush()
        assert await log.sweep_once(timedelta(days=90)) == 2
        left = await log.store.newest(AuditQuery())
    assert sorted(round((now * 1e6 - e.time) / 86_400e6) for e in left) == [1, 89]
