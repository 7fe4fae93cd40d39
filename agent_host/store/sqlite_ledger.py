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

    def compactions(self, session_id: str) -> list[CompactionRecord]:
        rows = self._db.execute("SELECT * FROM compactions WHERE session_id = ? ORDER BY id", (session_id,)).fetchall()
        return [
            CompactionRecord.model_validate(
                {**dict(r), "replaced": json.loads(r["replaced"]), "tool_call_ids": json.loads(r["tool_call_ids"])}
            )
            for r in rows
        ]

    def apply_retention(self, session_id: str, limit: int) -> int:
        """Delete the oldest stored messages that the latest compaction summarized while at least
        `limit` stored messages come after them (the seeds' retainedMessageLimit); how many went.
        The newest `limit` messages and every message after the summary always stay."""
        with self._tx() as db:
            latest = db.execute("SELECT MAX(last_seq) AS s FROM compactions WHERE session_id = ?", (session_id,)).fetchone()
            if latest is None or latest["s"] is None:
                return 0
            kept = db.execute(
                "SELECT seq FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?", (session_id, limit - 1)
            ).fetchone() if limit > 0 else None
            if limit > 0 and kept is None:
                return 0  # fewer than `limit` messages: nothing to delete
            below = min(int(latest["s"]) + 1, int(kept["seq"])) if kept is not None else int(latest["s"]) + 1
            return db.execute("DELETE FROM messages WHERE session_id = ? AND seq < ?", (session_id, below)).rowcount
