"""The session store's statements for what a user sends a session while it runs: controls (steer,
cancel, execute a plan) and the answers to `ask_user` questions.

A control is recorded only when it can apply (a steer or a cancel needs a running turn; a plan
execution needs that draft revision and no running turn), in one transaction, so it can never
land on a turn that already ended: the loop ends a turn only in a transaction that finds no
steer waiting (`finish_turn(unless_steered=True)`).
"""

from __future__ import annotations

import json
import sqlite3
import time

from ..domain import session_events as events
from ..domain.records import (
    ApprovalStatus,
    CancelReason,
    ControlKind,
    ControlRecord,
    PlanStatus,
    QuestionKind,
    QuestionRecord,
    QuestionStatus,
    TurnStatus,
)
from ..models.base import Message
from .sqlite_base import SqliteBase


class SqliteControls(SqliteBase):
    # Controls -----------------------------------------------------------------------------------

    def request_control(
        self, session_id: str, kind: ControlKind, source: str, text: str | None = None, revision: int | None = None
    ) -> ControlRecord | None:
        """Record a control; None when it cannot apply now (see the module's docstring)."""
        with self._tx() as db:
            running = db.execute(
                "SELECT id FROM turns WHERE session_id = ? AND status = ? ORDER BY seq DESC LIMIT 1",
                (session_id, TurnStatus.RUNNING.value),
            ).fetchone()
            turn_id = running["id"] if running else None
            if kind is ControlKind.EXECUTE_PLAN:
                plan = db.execute("SELECT plan_revision, plan_status FROM sessions WHERE id = ?", (session_id,)).fetchone()
                if (
                    turn_id is not None or plan is None or plan["plan_status"] != PlanStatus.DRAFT.value
                    or plan["plan_revision"] != revision
                ):
                    return None
            elif turn_id is None:
                return None
            cursor = db.execute(
                "INSERT INTO controls (session_id, turn_id, kind, text, revision, source, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (session_id, turn_id, kind.value, text, revision, source, time.time()),
            )
            record = self._control(db.execute("SELECT * FROM controls WHERE id = ?", (cursor.lastrowid,)).fetchone())
            self._event(db, session_id, turn_id, events.CONTROL, events.control(record, applied=False))
        return record

    @staticmethod
    def _control(row: sqlite3.Row) -> ControlRecord:
        return ControlRecord.model_validate(dict(row))

    def pending_controls(self, session_id: str, turn_id: str | None) -> list[ControlRecord]:
        """Controls not yet applied, of this turn (None: those for no turn, plan executions)."""
        query = "SELECT * FROM controls WHERE session_id = ? AND applied_at IS NULL AND turn_id IS ? ORDER BY id"
        return [self._control(r) for r in self._db.execute(query, (session_id, turn_id)).fetchall()]

    def mark_applied(self, controls: list[ControlRecord]) -> None:
        with self._tx() as db:
            for control in controls:
                db.execute("UPDATE controls SET applied_at = ? WHERE id = ? AND applied_at IS NULL", (time.time(), control.id))
                self._event(db, control.session_id, control.turn_id, events.CONTROL, events.control(control, applied=True))

    def apply_steers(self, session_id: str, turn_id: str) -> list[str]:
        """Every steer message waiting for this turn, appended to it as user messages, in order,
        in one commit; their texts."""
        with self._tx() as db:
            rows = db.execute(
                "SELECT * FROM controls WHERE session_id = ? AND turn_id = ? AND kind = ? AND applied_at IS NULL ORDER BY id",
                (session_id, turn_id, ControlKind.STEER.value),
            ).fetchall()
            texts = []
            for row in rows:
                control = self._control(row)
                db.execute("UPDATE controls SET applied_at = ? WHERE id = ?", (time.time(), control.id))
                self._event(db, session_id, turn_id, events.CONTROL, events.control(control, applied=True))
                self._append(db, session_id, turn_id, Message(role="user", text=control.text or ""))
                texts.append(control.text or "")
        return texts

    def has_pending_steer(self, session_id: str, turn_id: str) -> bool:
        return self._steer_waiting(self._db, session_id, turn_id)

    @staticmethod
    def _steer_waiting(db: sqlite3.Connection, session_id: str, turn_id: str) -> bool:
        row = db.execute(
            "SELECT 1 FROM controls WHERE session_id = ? AND turn_id = ? AND kind = ? AND applied_at IS NULL LIMIT 1",
            (session_id, turn_id, ControlKind.STEER.value),
        ).fetchone()
        return row is not None

    def cancel_waits(self, session_id: str, turn_id: str, by: str) -> None:
        """Close the turn's pending approvals and questions: a later decision gets this one back.
        A steer leaves an upstream's question alone (its call has started and runs to its end);
        a cancelled turn closes it too."""
        now = time.time()
        with self._tx() as db:
            for approval_id in self._pending_ids(db, "approvals", session_id, turn_id):
                self._decide_first(db, "approvals", approval_id, ApprovalStatus.CANCELLED.value, by, None, now)
                approval = self.get_approval(approval_id)
                assert approval is not None
                self._approval_event(db, approval)
            for question_id in self._pending_ids(db, "questions", session_id, turn_id):
                if by == CancelReason.STEERED.value and self._question_kind(db, question_id) is not QuestionKind.ASK_USER:
                    continue
                self._decide_first(db, "questions", question_id, QuestionStatus.CANCELLED.value, by, None, now)
                self._question_event(db, question_id)

    # Questions ----------------------------------------------------------------------------------

    def _question_kind(self, db: sqlite3.Connection, question_id: str) -> QuestionKind:
        row = db.execute("SELECT kind FROM questions WHERE id = ?", (question_id,)).fetchone()
        return QuestionKind(row["kind"]) if row is not None and row["kind"] else QuestionKind.ASK_USER

    def create_question(self, record: QuestionRecord) -> QuestionRecord:
        """Idempotent, like approvals: the same call asked again after a restart keeps its row."""
        with self._tx() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO questions (id, session_id, turn_id, tool_call_id, question, choices, allows_free_text,"
                " status, created_at, deadline, kind, form, input_round) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.id, record.session_id, record.turn_id, record.tool_call_id, record.question,
                    json.dumps(record.choices) if record.choices is not None else None, int(record.allows_free_text),
                    record.status.value, record.created_at, record.deadline, record.kind.value,
                    json.dumps(record.form) if record.form is not None else None,
                    record.input_round.model_dump_json() if record.input_round is not None else None,
                ),
            )
            if cursor.rowcount:
                self._question_event(db, record.id)
        stored = self.get_question(record.id)
        assert stored is not None
        return stored

    def _question_event(self, db: sqlite3.Connection, question_id: str) -> None:
        question = self.get_question(question_id)
        assert question is not None
        self._event(db, question.session_id, question.turn_id, events.QUESTION, events.question(question))

    def get_question(self, question_id: str) -> QuestionRecord | None:
        row = self._db.execute("SELECT * FROM questions WHERE id = ?", (question_id,)).fetchone()
        if row is None:
            return None
        data = dict(row)
        data["choices"] = json.loads(data["choices"]) if data["choices"] else None
        data["allows_free_text"] = bool(data["allows_free_text"])
        data["form"] = json.loads(data["form"]) if data.get("form") else None
        data["input_round"] = json.loads(data["input_round"]) if data.get("input_round") else None
        return QuestionRecord.model_validate(data)

    def call_questions(self, session_id: str, tool_call_id: str) -> list[QuestionRecord]:
        """The questions asked during one tool call, oldest first."""
        rows = self._db.execute(
            "SELECT id FROM questions WHERE session_id = ? AND tool_call_id = ? ORDER BY created_at, id",
            (session_id, tool_call_id),
        ).fetchall()
        return [q for q in (self.get_question(r["id"]) for r in rows) if q is not None]

    def pending_questions(self, session_id: str | None = None) -> list[QuestionRecord]:
        query, params = "SELECT id FROM questions WHERE status = ?", [QuestionStatus.PENDING.value]
        if session_id is not None:
            query += " AND session_id = ?"
            params.append(session_id)
        rows = self._db.execute(query + " ORDER BY created_at", params).fetchall()
        return [q for q in (self.get_question(r["id"]) for r in rows) if q is not None]

    def answer_question(
        self, question_id: str, status: QuestionStatus, answer: str | None, by: str, now: float
    ) -> tuple[QuestionRecord, bool] | None:
        """Record the first answer; (record, replayed). After the deadline the deadline answered."""
        with self._tx() as db:
            replayed = self._decide_first(db, "questions", question_id, status.value, by, answer, now)
            if replayed is None:
                return None
            if not replayed:
                self._question_event(db, question_id)
        record = self.get_question(question_id)
        assert record is not None
        return record, replayed
