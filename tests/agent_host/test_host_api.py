"""The host API beyond approvals, in-process: questions, steer, cancel, plan approval, the
session snapshot and the web page's headers; the agent's own token is refused everywhere."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agent_host.turn.builtins import question_id
from agent_host.api.host_api import host_app
from agent_host.models.base import Message, ToolCall
from agent_host.domain.records import ControlKind, QuestionRecord, QuestionStatus, TurnStatus
from agent_host.store.session_store import CallStatus, SessionStore, ToolCallRecord
from agent_host.api.web_page import CONTENT_SECURITY_POLICY

pytestmark = pytest.mark.anyio

APPROVER = {"Authorization": "Bearer approver"}
AGENT = {"Authorization": "Bearer agent"}


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, SessionStore]]:
    async with SessionStore(tmp_path / "api.db") as store:
        await store.create_session("scripted", "g", "s")
        turn = await store.start_turn("s", "pick")
        record = ToolCallRecord(session_id="s", turn_id=turn.id, id="q1", model_call=1, position=0, name="ask_user",
                                arguments={"question": "Which \u202ecolor?", "choices": ["red", "green"]}, kind="builtin",
                                effect="read", requires_approval=False, idempotency_key="s/turn-1/q1",
                                status=CallStatus.AWAITING_ANSWER, updated_at=0)
        await store.record_model_response(turn, Message(role="assistant", tool_calls=[ToolCall(id="q1", name="ask_user")]), [record])
        await store.create_question(QuestionRecord(
            id=question_id("s", "q1"), session_id="s", turn_id=turn.id, tool_call_id="q1", question="Which \u202ecolor?",
            choices=["red", "green"], allows_free_text=False, status=QuestionStatus.PENDING, created_at=0, deadline=None))
        app = host_app(store, ["approver"], ["agent"])
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host") as client:
            yield client, store


async def test_questions_are_answered_once_and_escaped(api: tuple[httpx.AsyncClient, SessionStore]) -> None:
    client, store = api
    qid = question_id("s", "q1")
    [listed] = (await client.get("/questions", headers=APPROVER)).json()["questions"]
    assert listed["question"] == "Which \\u202ecolor?" and listed["choices"] == ["red", "green"]
    assert (await client.post(f"/questions/{qid}", json={"answer": "blue"}, headers=APPROVER)).status_code == 400
    assert (await client.post(f"/questions/{qid}", json={"answer": "  "}, headers=APPROVER)).status_code == 400
    assert (await client.post(f"/questions/{qid}", json={"answer": "green"}, headers=AGENT)).status_code == 403
    first = (await client.post(f"/questions/{qid}", json={"answer": "green"}, headers=APPROVER)).json()
    assert first["replayed"] is False and first["question"]["status"] == "answered" and first["question"]["answer"] == "green"
    again = (await client.post(f"/questions/{qid}", json={"decline": True}, headers=APPROVER)).json()
    assert again["replayed"] is True and again["question"]["answer"] == "green"
    assert (await client.get("/questions/nope", headers=APPROVER)).status_code == 404


async def test_steer_cancel_and_plan_approval_need_the_right_state(api: tuple[httpx.AsyncClient, SessionStore]) -> None:
    client, store = api
    steer = await client.post("/sessions/s/steer", json={"text": "use staging"}, headers=APPROVER)
    assert steer.status_code == 202 and steer.json()["control"]["kind"] == "steer"
    assert (await client.post("/sessions/s/steer", json={"text": ""}, headers=APPROVER)).status_code == 400
    assert (await client.post("/sessions/s/cancel", json={}, headers=AGENT)).status_code == 403
    assert (await client.post("/sessions/s/cancel", json={"reason": "stop"}, headers=APPROVER)).status_code == 202
    [steered, cancelled] = await store.pending_controls("s", "turn-1")
    assert (steered.kind, steered.text, cancelled.kind, cancelled.text) == (ControlKind.STEER, "use staging", ControlKind.CANCEL, "stop")
    # No draft plan, and a turn runs: nothing to execute.
    assert (await client.post("/sessions/s/plan/approve", json={"revision": 1}, headers=APPROVER)).status_code == 409
    assert (await client.post("/sessions/nope/steer", json={"text": "x"}, headers=APPROVER)).status_code == 404
    await store.finish_turn("s", "turn-1", TurnStatus.COMPLETED, None, None)
    assert (await client.post("/sessions/s/steer", json={"text": "late"}, headers=APPROVER)).status_code == 409


async def test_the_snapshot_and_the_page(api: tuple[httpx.AsyncClient, SessionStore]) -> None:
    client, _ = api
    snapshot = (await client.get("/sessions/s", headers=APPROVER)).json()
    assert snapshot["running_turn"] == "turn-1" and snapshot["questions"][0]["question"] == "Which \\u202ecolor?"
    assert (await client.get("/sessions/s", headers=AGENT)).status_code == 403
    assert (await client.get("/sessions/s/events", headers=APPROVER, params={"after": "-1"})).status_code == 400
    page = await client.get("/ui/sessions/s")
    assert page.status_code == 200 and page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "<script src=\"/ui/app.js\" defer></script>" in page.text and "style=" not in page.text
    assert (await client.get("/ui/nope.js")).status_code == 404
    script = (await client.get("/ui/app.js")).text + (await client.get("/ui/stream.js")).text
    assert not [sink for sink in (".innerHTML", ".outerHTML", "insertAdjacentHTML", "document.write", "eval(") if sink in script]
