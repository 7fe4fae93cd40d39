"""A 2026-07-28 round of questions is kept with its questions in the session store (SQLite and
PostgreSQL alike, `any_store`), so that a restarted host finds the round and its answers; an older
store (SQLite file or PostgreSQL schema) gains the columns when it is opened."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import asyncpg
import pytest

from agent_host.domain.call_keys import idempotency_key
from agent_host.domain.records import (
    CallStatus, InputRound, QuestionKind, QuestionRecord, QuestionStatus, ToolCallRecord,
)
from agent_host.models.base import Message, ToolCall
from agent_host.store.session_store import SessionStore
from agent_host.turn.question_ids import input_question_id, round_question_id
from tests.support.postgres import PG_URL, fresh_schema

pytestmark = pytest.mark.anyio

FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


async def _asking_call(store: SessionStore, session: str) -> ToolCallRecord:
    await store.create_session("scripted", "g", session)
    turn = await store.start_turn(session, "sign_up")
    record = ToolCallRecord(session_id=session, turn_id=turn.id, id="call_1", model_call=1, position=0,
                            name="ask__sign_up", arguments={"plan": "a"}, kind="gateway", effect="unclassified",
                            requires_approval=True, idempotency_key=idempotency_key(session, turn.id, "call_1"),
                            status=CallStatus.SENT, attempts=1, updated_at=time.time())
    await store.record_model_response(turn, Message(role="assistant", tool_calls=[ToolCall(id="call_1", name="ask__sign_up")]),
                                      [record])
    return record


def _round(record: ToolCallRecord, state: str, key: str) -> InputRound:
    requests = {k: {"method": "elicitation/create", "params": {"message": k, "requestedSchema": FORM}}
                for k in ("elicitation-1", "elicitation-2")}
    return InputRound(request_state=state, input_requests=requests, key=key, tool=record.name,
                      arguments=record.arguments, idempotency_key=record.idempotency_key)


def _question(record: ToolCallRecord, ident: str, kept: InputRound | None) -> QuestionRecord:
    return QuestionRecord(id=ident, session_id=record.session_id, turn_id=record.turn_id, tool_call_id=record.id,
                          question="Your name?", status=QuestionStatus.PENDING, created_at=time.time(),
                          kind=QuestionKind.ELICITATION, form=FORM, input_round=kept)


async def test_a_round_is_kept_with_its_questions_and_found_again(any_store: str) -> None:
    async with SessionStore(any_store) as store:
        record = await _asking_call(store, "s-rounds")
        first = _round(record, "state-1", "elicitation-1")
        ident = round_question_id(record, await store.call_questions(record.session_id, record.id), first)
        assert ident == input_question_id(record, 1)
        await store.create_question(_question(record, ident, first))
        # The round's other input request is the call's next question; asked again (a restarted
        # host), each input request of the round finds its own question.
        second = _round(record, "state-1", "elicitation-2")
        asked = await store.call_questions(record.session_id, record.id)
        other = round_question_id(record, asked, second)
        assert other == input_question_id(record, 2)
        # Asked together, before either is stored: the id given to the first is taken.
        assert round_question_id(record, [], second, {ident}) == other
        await store.create_question(_question(record, other, second))
        asked = await store.call_questions(record.session_id, record.id)
        assert [q.id for q in asked] == [ident, other]
        assert round_question_id(record, asked, first) == ident and round_question_id(record, asked, second) == other
        kept = asked[0].input_round
        assert kept == first and kept is not None and kept.input_requests["elicitation-2"]["params"]["message"] == "elicitation-2"
        # The same input request of a later round (a new requestState) is a new question.
        assert round_question_id(record, asked, _round(record, "state-2", "elicitation-1")) == input_question_id(record, 3)
        # The answer is found with the round (the API's write).
        await store.answer_question(ident, QuestionStatus.ANSWERED, '{"name": "Ada"}', "api", time.time())
        found = await store.get_question(ident)
        assert found is not None and found.answer == '{"name": "Ada"}' and found.input_round == first


async def test_an_older_sqlite_store_gains_the_round_column(tmp_path: Path) -> None:
    """A store file of a host that kept no rounds (nor kinds or forms): its questions read back,
    and a new question keeps its round."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE questions (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, "
                   "tool_call_id TEXT NOT NULL, question TEXT NOT NULL, choices TEXT, allows_free_text INTEGER NOT NULL, "
                   "status TEXT NOT NULL, answer TEXT, answered_by TEXT, created_at REAL NOT NULL, decided_at REAL, "
                   "deadline REAL)")
        db.execute("INSERT INTO questions (id, session_id, turn_id, tool_call_id, question, allows_free_text, status, "
                   "created_at) VALUES ('q-old', 's-old', 'turn-1', 'call_1', 'Which?', 1, 'pending', 1.0)")
    async with SessionStore(path) as store:
        old = await store.get_question("q-old")
        assert old is not None and old.input_round is None and old.kind is QuestionKind.ASK_USER
        record = await _asking_call(store, "s-new")
        kept = _round(record, "state-1", "elicitation-1")
        await store.create_question(_question(record, "q-new", kept))
        assert [q.input_round for q in await store.call_questions("s-new", "call_1")] == [kept]


async def test_an_older_postgresql_schema_gains_the_question_columns() -> None:
    """A schema made before questions had kinds, forms and rounds: opening the store adds them."""
    async with fresh_schema("dex_agent_old_questions") as schema:
        conn = await asyncpg.connect(PG_URL, timeout=5)
        try:
            await conn.execute(f'CREATE SCHEMA "{schema}"')
            await conn.execute(
                f'CREATE TABLE "{schema}".questions (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, '
                "tool_call_id TEXT NOT NULL, question TEXT NOT NULL, choices TEXT, allows_free_text INTEGER NOT NULL, "
                "status TEXT NOT NULL, answer TEXT, answered_by TEXT, created_at DOUBLE PRECISION NOT NULL, "
                "decided_at DOUBLE PRECISION, deadline DOUBLE PRECISION)")
        finally:
            await conn.close()
        sep = "&" if "?" in PG_URL else "?"
        async with SessionStore(f"{PG_URL}{sep}schema={schema}") as store:
            record = await _asking_call(store, "s-pg")
            kept = _round(record, "state-1", "elicitation-1")
            await store.create_question(_question(record, "q-pg", kept))
            [found] = await store.call_questions("s-pg", "call_1")
            assert found.kind is QuestionKind.ELICITATION and found.form == FORM and found.input_round == kept
