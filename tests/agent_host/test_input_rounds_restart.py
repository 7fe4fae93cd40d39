"""A 2026-07-28 round of questions survives a SIGKILL of the host (issue 24, host side).

Real processes: the asking server (tests/support/asking_server.py: `sign_up` asks with `ctx.elicit`,
then writes; each start of the call is counted as `sign_up:asked`, each write as `sign_up`) behind a
real `dex-gateway serve` (it parks the handshake-era upstream's call and answers the host's
2026-07-28 call with `input_required`), and a real `dex-agent serve` with the scripted model.

The host is killed while the question waits; a new `serve` on the same store picks the turn up,
shows the same question (one question, not two), and the answer goes out as the next round with the
OLD requestState: the gateway's parked call continues, so the upstream started the call once and
wrote once. When the gateway no longer knows the state (it was restarted), the host sends the call
again under its key and says so in the transcript.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from agent_host.domain import texts
from agent_host.domain.records import QuestionStatus
from agent_host.store.sqlite_store import SqliteSessionStore
from tests.agent_host.host_support import Proc, dex_agent
from tests.agent_host.test_upstream_questions import SCRIPT
from tests.agent_host.test_upstream_questions_2026 import asking_server
from tests.support.postgres import fresh_schema_url
from tests.support.gateway import http_upstream, start_gateway, write_config
from tests.support.servers import free_port, read_executions

pytestmark = pytest.mark.timeout(120)

TOKEN = "approver-token-rounds"


@contextmanager
def serving(tmp_path: Path, store: Path | str, gateway_url: str, protocol: str) -> Iterator[tuple[Proc, httpx.Client]]:
    proc = dex_agent("serve", "--store", str(store), "--gateway", gateway_url, "--port", "0", "--model", SCRIPT,
                     "--protocol", protocol,
                     env={"DEX_APPROVER_TOKEN": TOKEN, "DEX_AGENT_LOCAL_STORE": str(tmp_path / "local.db")})
    try:
        url = proc.wait_for(r"API on (http://127\.0\.0\.1:\d+)").group(1)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as api:
            yield proc, api
    finally:
        proc.stop()


def _pending(api: httpx.Client, proc: Proc, what: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        listed: list[dict[str, Any]] = api.get(f"/{what}").json()[what]
        if listed:
            return listed
        assert time.monotonic() < deadline, f"no {what}:\n{proc.output}"
        time.sleep(0.1)


def _asked(state: Path, count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while len(read_executions(state, tool="sign_up:asked")) < count:
        assert time.monotonic() < deadline, read_executions(state)
        time.sleep(0.05)


def _turn(api: httpx.Client, session: str, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        turns = api.get(f"/sessions/{session}").json()["turns"]
        if turns and turns[0]["status"] != "running":
            return dict(turns[0])
        assert time.monotonic() < deadline, turns
        time.sleep(0.1)


def _stored(store: Path | str, query: str) -> list[tuple[Any, ...]]:
    """Rows of the host's store (a SQLite file, or a PostgreSQL URL with `?schema=`)."""
    if isinstance(store, Path):
        with sqlite3.connect(store) as db:
            return [tuple(row) for row in db.execute(query)]
    dsn, _, schema = store.rpartition("schema=")

    async def rows() -> list[tuple[Any, ...]]:
        conn = await asyncpg.connect(dsn.rstrip("?&"), timeout=5)
        try:
            await conn.execute(f'SET search_path TO "{schema}"')
            return [tuple(r) for r in await conn.fetch(query)]
        finally:
            await conn.close()

    return asyncio.run(rows())


@pytest.fixture(params=["sqlite", "postgresql"])
def host_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path | str]:
    if request.param == "sqlite":
        yield tmp_path / "s.db"
    else:
        with fresh_schema_url("dex_agent_rounds") as url:
            yield url


def _killed_while_asking(tmp_path: Path, store: Path | str, gateway_url: str, protocol: str, state: Path) -> tuple[str, dict[str, Any]]:
    """A session whose sign_up waits for its question; the host SIGKILLed then: (session, question)."""
    with serving(tmp_path, store, gateway_url, protocol) as (proc, api):
        session = api.post("/sessions", json={}).json()["session_id"]
        assert api.post(f"/sessions/{session}/messages", json={"text": "sign_up"}).status_code == 202
        [approval] = _pending(api, proc, "approvals")  # sign_up declares no effect: it asks first
        assert api.post(f"/approvals/{approval['id']}", json={"decision": "allow"}).status_code == 200
        [question] = _pending(api, proc, "questions")
        assert question["kind"] == "elicitation" and question["question"] == "Your name, to sign you up?", question
        _asked(state, 1)
        proc.sigkill()
    return session, question


@pytest.mark.parametrize(("stateful", "protocol"), [(False, "auto"), (True, "2026-07-28")], ids=["stateless-auto", "stateful-2026"])
def test_a_question_of_a_killed_host_is_answered_with_the_old_request_state(tmp_path: Path, stateful: bool,
                                                                            protocol: str, host_store: Path | str) -> None:
    state, store = tmp_path / "upstream", host_store
    with asking_server(state) as url:
        config = write_config(tmp_path, {"server": {"stateful": stateful},
                                         "upstreams": [http_upstream("ask", url, protocol="handshake")]})
        with start_gateway(config) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            session, question = _killed_while_asking(tmp_path, store, gateway.url, protocol, state)
            with serving(tmp_path, store, gateway.url, protocol) as (proc, api):
                [again] = _pending(api, proc, "questions")
                assert again["id"] == question["id"] and again["status"] == "pending", again
                answered = api.post(f"/questions/{again['id']}", json={"content": {"name": "Ada"}})
                assert answered.status_code == 200, answered.text
                turn = _turn(api, session)
                assert turn["status"] == "completed", (turn, proc.output)
                assert "ask__sign_up=signed up Ada" in turn["final_text"], turn
                assert api.get("/questions").json()["questions"] == []
    # The gateway's parked call went on with the round: the upstream started sign_up once (no
    # second ctx.elicit) and wrote once, under the call's key.
    asked, writes = read_executions(state, tool="sign_up:asked"), read_executions(state, tool="sign_up")
    assert len(asked) == 1 and len(writes) == 1, (asked, writes)
    assert writes[0]["idempotency_key"] == asked[0]["idempotency_key"]
    assert _stored(store, "SELECT id FROM questions") == [(question["id"],)]


def test_an_answer_given_before_the_kill_is_sent_once_after_the_restart(tmp_path: Path) -> None:
    """The question is answered, then the host is killed before its round left (the answer is in
    the store, written by the API; the host is frozen with SIGSTOP so it cannot send it): the
    restarted host sends the round with that answer and asks nothing again."""
    state, store = tmp_path / "upstream", tmp_path / "s.db"
    with asking_server(state) as url:
        config = write_config(tmp_path, {"upstreams": [http_upstream("ask", url, protocol="handshake")]})
        with start_gateway(config) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            with serving(tmp_path, store, gateway.url, "auto") as (proc, api):
                session = api.post("/sessions", json={}).json()["session_id"]
                api.post(f"/sessions/{session}/messages", json={"text": "sign_up"})
                [approval] = _pending(api, proc, "approvals")
                api.post(f"/approvals/{approval['id']}", json={"decision": "allow"})
                [question] = _pending(api, proc, "questions")
                _asked(state, 1)
                # The host that waits for the answer is frozen, then the answer is stored the way
                # the API stores it (the store's first-answer-wins write): the host never sees it.
                proc.process.send_signal(signal.SIGSTOP)
                answers = SqliteSessionStore(store)
                try:
                    decided = answers.answer_question(question["id"], QuestionStatus.ANSWERED, '{"name": "Bo"}', "api",
                                                      time.time())
                    assert decided is not None and not decided[1]
                finally:
                    answers.close()
                proc.sigkill()
            with serving(tmp_path, store, gateway.url, "auto") as (proc, api):
                turn = _turn(api, session)
                assert turn["status"] == "completed" and "ask__sign_up=signed up Bo" in turn["final_text"], (turn, proc.output)
                assert api.get("/questions").json()["questions"] == []
    asked, writes = read_executions(state, tool="sign_up:asked"), read_executions(state, tool="sign_up")
    assert len(asked) == 1 and len(writes) == 1, (asked, writes)
    assert _stored(store, "SELECT id FROM questions") == [(question["id"],)]


def test_a_request_state_the_gateway_forgot_falls_back_to_sending_the_call_again(tmp_path: Path) -> None:
    """The gateway is restarted while the host is dead: its parked call (and the requestState) are
    gone. The restarted host's round is refused as expired; it sends the call again under its key,
    and the gateway's fence decides: the key's first attempt ended with the old gateway process, so
    the fence answers outcome unknown (nothing runs upstream). The transcript says so."""
    state, store = tmp_path / "upstream", tmp_path / "s.db"
    with asking_server(state) as url:
        config = write_config(tmp_path, {"upstreams": [http_upstream("ask", url, protocol="handshake")]})
        with start_gateway(config) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            session, question = _killed_while_asking(tmp_path, store, gateway.url, "auto", state)
            port = int(gateway.url.rsplit(":", 1)[1].split("/", 1)[0])
        with start_gateway(config, port=port) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            with serving(tmp_path, store, gateway.url, "auto") as (proc, api):
                [again] = _pending(api, proc, "questions")
                assert again["id"] == question["id"], again
                assert api.post(f"/questions/{again['id']}", json={"content": {"name": "Cy"}}).status_code == 200
                turn = _turn(api, session)
                assert turn["status"] == "completed", (turn, proc.output)
    [(status, text)] = _stored(store, "SELECT status, result_text FROM tool_calls WHERE name = 'ask__sign_up'")
    assert status == "outcome_unknown" and text.startswith(texts.ROUND_STATE_UNKNOWN), (status, text)
    # The fence's answer to the key sent again: its first attempt ended with the old gateway (as
    # unknown, or never finished), so the call is outcome unknown, whichever the gateway recorded.
    assert texts.OUTCOME_UNKNOWN in text, text
    assert len(read_executions(state, tool="sign_up:asked")) == 1 and read_executions(state, tool="sign_up") == []


def test_dex_agent_resume_sends_the_kept_round(tmp_path: Path) -> None:
    """The same across `dex-agent run` (killed while the question waits) and `dex-agent resume`:
    the question is answered over the resumed host's API, the round goes with the old state."""
    state, store = tmp_path / "upstream", tmp_path / "s.db"
    env = {"DEX_APPROVER_TOKEN": TOKEN}
    with asking_server(state) as url:
        config = write_config(tmp_path, {"upstreams": [http_upstream("ask", url, protocol="handshake")]})
        with start_gateway(config) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            common = ("--store", str(store))
            agent = ("--gateway", gateway.url, "--session", "s-rounds", "--model", SCRIPT, "--yes")
            first = dex_agent(*common, "run", *agent, "--approvals-port", str(free_port()), "sign_up", env=env)
            try:
                _asked(state, 1)
                deadline = time.monotonic() + 20
                while not _stored(store, "SELECT id FROM questions WHERE input_round IS NOT NULL"):
                    assert time.monotonic() < deadline, first.output
                    time.sleep(0.05)
                first.sigkill()
            finally:
                first.stop()
            port = free_port()
            second = dex_agent(*common, "resume", *agent, "--approvals-port", str(port), env=env)
            try:
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"},
                                  timeout=10) as api:
                    [question] = _pending_when_up(api, second)
                    assert api.post(f"/questions/{question['id']}", json={"content": {"name": "Di"}}).status_code == 200
                assert second.finish() == 0, second.output
            finally:
                second.stop()
    assert "RESULTS ask__sign_up=signed up Di" in second.output, second.output
    asked, writes = read_executions(state, tool="sign_up:asked"), read_executions(state, tool="sign_up")
    assert len(asked) == 1 and len(writes) == 1, (asked, writes)
    assert len(_stored(store, "SELECT id FROM questions")) == 1


def _pending_when_up(api: httpx.Client, proc: Proc) -> list[dict[str, Any]]:
    """The pending questions once the resumed host's API answers (it starts with the resume)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return _pending(api, proc, "questions")
        except httpx.HTTPError:
            assert time.monotonic() < deadline, proc.output
            time.sleep(0.1)
