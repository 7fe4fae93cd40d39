"""The session store's statements for what a session consumed and condensed: the usage of every
model call (tokens, and cost when prices are set) and the compactions of its history (the summary
and exactly what it replaced)."""

from __future__ import annotations

import json
import sqlite3
import time

from ..domain import session_events as events
from ..domain.records import CompactionRecord, UsageRecord
from .sqlite_base import SqliteBase


class SqliteLedger(SqliteBase):
    def _usage(
        self, db: sqlite3.Connection, session_id: str, turn_id: str, kind: str, model: str,
        input_tokens: int, output_tokens: int, cost: float | None,
    ) -> None:
        db.execute(
            "INSERT INTO usage (session_id, turn_id, kind, model, input_tokens, output_tokens, cost, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, turn_id, kind, model, input_tokens, output_tokens, cost, time.time()),
        )
        self._event(db, session_id, turn_id, events.USAGE, events.usage(turn_id, kind, model, input_tokens, output_tokens, cost))

    def usage_totals(self, session_id: str, turn_id: str | None = None) -> UsageRecord:
        query = (
            "SELECT COALESCE(SUM(input_tokens), 0) AS i, COALESCE(SUM(output_tokens), 0) AS o, SUM(cost) AS c,"
            " COUNT(*) AS n FROM usage WHERE session_id = ?"
        )
        params: tuple[str, ...] = (session_id,)
        if turn_id is not None:
            query += " AND turn_id = ?"
            params += (turn_id,)
        row = self._db.execute(query, params).fetchone()
        return UsageRecord(input_tokens=row["i"], output_tokens=row["o"], cost=row["c"], model_calls=row["n"])

    def record_compaction(
        self, session_id: str, turn_id: str, summary: str, replaced: list[int], tool_call_ids: list[str],
        usage: tuple[str, int, int, float | None] | None,
    ) -> None:
        """The summary, the message seqs it replaced and the calls whose results it refers to,
        with the summary call's usage, in one commit."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO compactions (session_id, turn_id, summary, first_seq, last_seq, replaced, tool_call_ids, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, turn_id, summary, min(replaced), max(replaced), json.dumps(replaced),
                 json.dumps(tool_call_ids), time.time()),
            )
            if usage is not None:
                self._usage(db, session_id, turn_id, "summary", *usage)
            data = events.compaction(turn_id, len(replaced), tool_call_ids, len(summary))
            self._event(db, session_id, turn_id, events.COMPACTION, data)
            self._retain(db, session_id)

    def compactions(self, session_id: str) -> list[CompactionRecord]:
        rows = self._db.execute("SELECT * FROM compactions WHERE session_id = ? ORDER BY id", (session_id,)).fetchall()
        return [
            CompactionRecord.model_validate(
                {**dict(r), "replaced": json.loads(r["replaced"]), "tool_call_ids": json.loads(r["tool_call_ids"])}
            )
            for r in rows
        ]

    def apply_retention(self, session_id: str, limit: int | None = None) -> int:
        """Retention now (`_retain`; it also runs on every append and compaction); how many went."""
        with self._tx() as db:
            return self._retain(db, session_id, limit)
