"""`dex-agent serve` as a real process against the gateway (real process) and the payments server:
the chat API, turns that resume by themselves after SIGKILL, one driver per session."""

from __future__ import annotations

import random
from collections import Counter
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_host.host_support import Stack, run_agent
from tests.agent_host.serve_support import MODEL, TOKEN, Api, calls_per_turn, model_calls, start_serve
from tests.support.postgres import fresh_schema_url
from tests.support.servers import read_executions, release_gate


@pytest.fixture(params=["sqlite", "postgresql"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """One store for several processes: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield str(tmp_path / "two.db")
    else:
        with fresh_schema_url("dex_agent_serve") as url:
            yield url


def test_chat_api_queue_paging_and_settings(stack: Stack, tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    proc, url = start_serve(stack, tmp_path / "s.db", log)
    try:
        api = Api(url)
        session = api.new_session(instructions="Be brief.", settings={"temperature": 0.5})
        first = api.send(session, "wait 2 first")
        assert first["queued"] is False
        time.sleep(0.5)  # the first turn runs (its durable wait is parked)
        second = api.send(session, "second")
        third = api.send(session, "third")
        assert second["queued"] is True and third["queued"] is True
        assert api.client.delete(f"/sessions/{session}/messages/{third['message_id']}").status_code == 204
        assert api.client.delete(f"/sessions/{session}/messages/{third['message_id']}").status_code == 404
        assert [q["text"] for q in api.messages(session)["queued"]] == ["second"]
        turns = api.wait_turns(session, 2)
        assert turns[0]["final_text"].startswith("done: wait 2 first (durable_wait=")
        assert turns[1]["final_text"] == "done: second"
        assert api.client.delete(f"/sessions/{session}/messages/{second['message_id']}").status_code == 409
        page = api.messages(session)
        users = [m for m in page["messages"] if m["role"] == "user"]
        assert [m["text"] for m in users] == ["wait 2 first", "second"]
        assert users[0]["id"] == first["message_id"] and users[1]["id"] == second["message_id"]
        older = api.messages(session, limit=1, before=second["message_id"])
        assert len(older["messages"]) == 1 and older["messages"][0]["role"] == "assistant"
        assert older["next_before"] == older["messages"][0]["id"]
        everything, before = [], None
        while True:  # paging back to the first message, two at a time
            page_ = api.messages(session, limit=2, **({"before": before} if before else {}))
            everything = page_["messages"] + everything
            before = page_["next_before"]
            if before is None:
                break
        assert everything == api.messages(session, limit=200)["messages"] and everything[0]["id"] == first["message_id"]
        assert api.client.get(f"/sessions/{session}/messages", params={"limit": 201}).status_code == 400
        assert api.client.get(f"/sessions/{session}/messages", params={"before": "nope"}).status_code == 400
        assert api.client.get("/sessions/nope/messages").status_code == 404
        assert api.client.post(f"/sessions/{session}/messages", json={"text": ""}).status_code == 400
        assert api.client.post("/sessions", json={"model": "nonsense"}).status_code == 400
        assert api.client.get(f"/sessions/{session}/settings").json()["settings"] == {"instructions": "Be brief.", "temperature": 0.5}
        patched = api.client.patch(f"/sessions/{session}/settings", json={"temperature": None, "max_tokens": 64})
        assert patched.json()["settings"] == {"instructions": "Be brief.", "max_tokens": 64}
        bad = api.client.patch(f"/sessions/{session}/settings", json={"temperature": 9})
        assert bad.status_code == 400 and "temperature" in bad.json()["error"]
        assert api.client.post("/sessions", headers={"Authorization": "Bearer wrong"}, json={}).status_code == 401
        listed = api.client.get("/sessions").json()["sessions"]
        assert [s["session_id"] for s in listed] == [session]
        assert calls_per_turn(log)[("second", 1)] == 1
    finally:
        proc.stop()


def test_killed_service_finishes_every_turn_by_itself(stack: Stack, tmp_path: Path, shared_store: str) -> None:
    """SIGKILL during a model call, a write, a durable wait and a pending approval; the next start
    finishes each turn with nothing else done: no write twice, each message once."""
    store, log = shared_store, tmp_path / "calls.jsonl"
    gate, order = f"kill-{uuid.uuid4().hex[:8]}", str(random.randint(10_000, 99_999))  # apart from other runs on the stack
    proc, url = start_serve(stack, store, log)
    api = Api(url)
    sessions = {name: api.new_session() for name in ("model", "write", "wait", "approval")}
    api.send(sessions["model"], "slow 30 model")
    api.send(sessions["write"], f"hold {gate} write")
    api.send(sessions["wait"], "wait 5 wait")
    api.send(sessions["approval"], f"refund {order} approval")
    deadline = time.monotonic() + 15
    while not [e for e in read_executions(stack.state_dir, tool="hold_payment") if e["arguments"].get("gate") == gate]:
        assert time.monotonic() < deadline, "the held write never started"
        time.sleep(0.05)
    api.pending_approval(sessions["approval"])
    deadline = time.monotonic() + 10
    while not any(c["text"] == "slow 30 model" for c in model_calls(log)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.sigkill()
    release_gate(stack.state_dir, gate)
    (tmp_path / "calls.jsonl.fast").touch()  # the model call made again answers at once
    proc, url = start_serve(stack, store, log)
    try:
        api = Api(url)
        api.approve(api.pending_approval(sessions["approval"]))
        for name, session in sessions.items():
            turns = api.wait_turns(session, 1, timeout=45)
            assert [t["status"] for t in turns] == ["completed"], (name, turns)
            messages = api.messages(session)["messages"]
            assert len([m for m in messages if m["role"] == "user"]) == 1, messages
            # One answer per model call the turn counts: no answer written twice.
            assert len([m for m in messages if m["role"] == "assistant"]) == turns[0]["model_calls"], messages
        holds = [e for e in read_executions(stack.state_dir, tool="hold_payment") if e["arguments"].get("gate") == gate]
        assert len({e["idempotency_key"] for e in holds}) == 1
        refunds = [e for e in read_executions(stack.state_dir, tool="refund") if e["arguments"].get("order") == order]
        assert len(refunds) == 1
    finally:
        proc.stop()


def _two_services(stack: Stack, tmp_path: Path, store: str, count: int) -> None:
    log = tmp_path / "calls.jsonl"
    first, url_a = start_serve(stack, store, log, "--lease-seconds", "3")
    second, url_b = start_serve(stack, store, log, "--lease-seconds", "3")
    try:
        a, b = Api(url_a), Api(url_b)
        sessions = [(a if i % 2 else b).new_session() for i in range(count)]
        for i, session in enumerate(sessions):
            (b if i % 2 else a).send(session, f"wait 4 s{i}")
        deadline = time.monotonic() + 20
        for session in sessions:  # every turn parked in its wait (its first answer committed)
            while not any(m["role"] == "assistant" for m in a.messages(session)["messages"]):
                assert time.monotonic() < deadline, session
                time.sleep(0.05)
        drivers = Counter(c["pid"] for c in model_calls(log))
        print(f"first model calls per process: {dict(drivers)}")
        first.sigkill()
        for session in sessions:
            assert [t["status"] for t in b.wait_turns(session, 1, timeout=30)] == ["completed"]
        per_turn = calls_per_turn(log)
        assert set(per_turn.values()) == {1}, per_turn  # each model call of each turn made once
        assert len(per_turn) == 2 * count
        if drivers[first.process.pid]:  # the killed process's turns were finished by the other one
            assert {c["pid"] for c in model_calls(log) if c["call"] == 2} == {second.process.pid}
    finally:
        first.stop()
        second.stop()


def test_two_services_share_sessions(stack: Stack, tmp_path: Path, shared_store: str) -> None:
    _two_services(stack, tmp_path, shared_store, 4)


@pytest.mark.slow
def test_two_services_share_twenty_sessions(stack: Stack, tmp_path: Path, shared_store: str) -> None:
    _two_services(stack, tmp_path, shared_store, 20)


def test_run_refuses_a_session_that_serve_drives(stack: Stack, tmp_path: Path) -> None:
    store, log = tmp_path / "l.db", tmp_path / "calls.jsonl"
    proc, url = start_serve(stack, store, log)
    try:
        api = Api(url)
        session = api.new_session()
        api.send(session, "slow 4 busy")
        deadline = time.monotonic() + 10
        while not model_calls(log):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        result = run_agent("run", "--store", str(store), "--gateway", stack.gateway_url, "--session", session,
                           "--model", MODEL, "-y", "hello")
        assert result.returncode == 2, result.stderr
        assert f"session {session} is driven by another process" in result.stderr
        assert TOKEN not in result.stderr
    finally:
        proc.stop()


def test_a_parked_turn_is_cancelled_or_steered_at_once(stack: Stack, tmp_path: Path) -> None:
    """A turn parked in a long durable wait or on a pending approval holds no process; a cancel or a
    steer makes it due, and the service applies it at once."""
    proc, url = start_serve(stack, tmp_path / "p.db", tmp_path / "calls.jsonl")
    try:
        api = Api(url)
        waiting, approving = api.new_session(), api.new_session()
        api.send(waiting, "wait 600 long")
        order = str(random.randint(10_000, 99_999))
        api.send(approving, f"refund {order} steered")
        api.pending_approval(approving)
        deadline = time.monotonic() + 10
        while not any(m["role"] == "assistant" for m in api.messages(waiting)["messages"]):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert api.client.post(f"/sessions/{waiting}/cancel", json={"reason": "enough"}).status_code == 202
        assert api.client.post(f"/sessions/{approving}/steer", json={"text": "never mind"}).status_code == 202
        assert [t["status"] for t in api.wait_turns(waiting, 1, timeout=10)] == ["cancelled"]
        turns = api.wait_turns(approving, 1, timeout=10)
        assert turns[0]["status"] == "completed" and turns[0]["final_text"].startswith("done: never mind")
        assert not [e for e in read_executions(stack.state_dir, tool="refund") if e["arguments"].get("order") == order]
    finally:
        proc.stop()


def test_a_planning_message_and_its_approval_run_by_themselves(stack: Stack, tmp_path: Path) -> None:
    proc, url = start_serve(stack, tmp_path / "plan.db", tmp_path / "calls.jsonl")
    try:
        api = Api(url)
        session = api.new_session(model="scripted:tests.agent_host.scripts:plan_then_execute")
        api.client.post(f"/sessions/{session}/messages", json={"text": "plan it", "plan": True}).raise_for_status()
        api.wait_turns(session, 1)
        plan = api.client.get(f"/sessions/{session}").json()["plan"]
        assert plan["status"] == "draft"
        approved = api.client.post(f"/sessions/{session}/plan/approve", json={"revision": plan["revision"]})
        assert approved.status_code == 202, approved.text
        turns = api.wait_turns(session, 2)
        assert turns[1]["status"] == "completed" and turns[1]["final_text"].startswith("EXECUTED: ")
        assert api.client.get(f"/sessions/{session}").json()["plan"]["status"] == "completed"
    finally:
        proc.stop()


def test_an_ask_user_question_answered_through_the_api(stack: Stack, tmp_path: Path) -> None:
    proc, url = start_serve(stack, tmp_path / "q.db", tmp_path / "calls.jsonl")
    try:
        api = Api(url)
        session = api.new_session(model="scripted:tests.agent_host.scripts:ask_color")
        api.send(session, "which color")
        deadline = time.monotonic() + 15
        while not (questions := api.client.get(f"/sessions/{session}").json()["questions"]):
            assert time.monotonic() < deadline, "no question came"
            time.sleep(0.1)
        answered = api.client.post(f"/questions/{questions[0]['id']}", json={"answer": "green"})
        assert answered.status_code == 200, answered.text
        turns = api.wait_turns(session, 1)
        assert turns[0]["status"] == "completed" and "green" in turns[0]["final_text"]
    finally:
        proc.stop()
