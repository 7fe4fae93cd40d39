"""The sessions part of the host API: a session's snapshot and live event stream, steering,
cancelling, approving a draft plan, and answering `ask_user` questions.

    GET  /sessions/{id}               the session now: turns, plan, pending approvals and questions, usage
    GET  /sessions/{id}/events        Server-Sent Events; resumes after `Last-Event-ID` (or ?after=N)
    POST /sessions/{id}/steer         {"text": str}             -> 202 {"control"}; 409 when no turn runs
    POST /sessions/{id}/cancel        {"reason"?: str}          -> 202 {"control"}; 409 when no turn runs
    POST /sessions/{id}/plan/approve  {"revision": int}         -> 202 {"control"}; 409 unless that draft waits
    GET  /questions                   pending questions
    GET  /questions/{id}              one question with its status
    POST /questions/{id}              {"answer": str} | {"content": {field: value}} (a form) | {"decline": true}
                                      -> {"question", "replayed"}

Authenticated like the approvals API (`approvals_api.Auth`, checked before any body is read:
`guard`). Every event is read from the store,
where it was committed with the change it reports, with ids that only grow: a stream resumed
with `Last-Event-ID`, even after the host restarted, continues with the next event and misses
nothing. Every string that leaves is escaped for display (`session_events.inert`) and the JSON is
safe inside HTML (`SafeJSONResponse`).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from pydantic import BaseModel, Field
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..approvals.gate import card_for_approval
from ..domain import session_events, texts
from ..domain.forms import check_form
from ..domain.session_ids import session_id_problem
from ..domain.records import ControlKind, ControlRecord, QuestionRecord, QuestionStatus
from ..store.session_store import SessionStore
from .approvals_api import HTML_SAFE, SafeJSONResponse, read_body

POLL_SECONDS = 0.2
PING_SECONDS = 15
BATCH = 200
MAX_STEER_CHARS = 4000


class SteerRequest(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_STEER_CHARS)


class CancelRequest(BaseModel):
    reason: str | None = Field(default=None, max_length=500)


class PlanApproval(BaseModel):
    revision: int


class AnswerRequest(BaseModel):
    answer: str | None = Field(default=None, max_length=MAX_STEER_CHARS)
    content: dict[str, Any] | None = None  # a form question's fields (an upstream's elicitation)
    decline: bool = False


def _event_json(event: Any) -> str:
    body = {"id": event.id, "type": event.type, "turn_id": event.turn_id, "at": event.at, "data": session_events.inert(event.data)}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).translate(HTML_SAFE)


def _resume_after(request: Request) -> int | None:
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
    try:
        after = int(raw)
    except ValueError:
        return None
    return after if after >= 0 else None


class SessionApi:
    """The routes above, one method each, over the session store."""

    def __init__(self, store: SessionStore, shutdown: anyio.Event, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.shutdown = shutdown
        self.clock = clock

    def routes(self) -> list[Route]:
        return [
            Route("/sessions/{session_id}", self.snapshot, methods=["GET"]),
            Route("/sessions/{session_id}/events", self.events, methods=["GET"]),
            Route("/sessions/{session_id}/steer", self.steer, methods=["POST"]),
            Route("/sessions/{session_id}/cancel", self.cancel, methods=["POST"]),
            Route("/sessions/{session_id}/plan/approve", self.approve_plan, methods=["POST"]),
            Route("/questions", self.pending_questions, methods=["GET"]),
            Route("/questions/{question_id}", self.show_question, methods=["GET"]),
            Route("/questions/{question_id}", self.answer, methods=["POST"]),
        ]

    async def _session_or_404(self, request: Request) -> str | JSONResponse:
        session_id = request.path_params["session_id"]
        if (problem := session_id_problem(session_id)) is not None:
            return SafeJSONResponse({"error": problem}, status_code=400)
        if await self.store.get_session(session_id) is None:
            return SafeJSONResponse({"error": "no such session"}, status_code=404)
        return str(session_id)

    async def snapshot(self, request: Request) -> JSONResponse:
        found = await self._session_or_404(request)
        if isinstance(found, JSONResponse):
            return found
        session = await self.store.get_session(found)
        assert session is not None
        turns = await self.store.turns(found)
        approvals = [
            session_events.approval(await card_for_approval(a, self.store, self.clock()), a.decided_by, a.reason)
            for a in await self.store.pending_approvals(found)
        ]
        usage = await self.store.usage_totals(found)
        return SafeJSONResponse(session_events.inert({
            "session_id": found,
            "now": self.clock(),
            "turns": [session_events.turn_finished(t) for t in turns],
            "running_turn": next((t.id for t in turns if t.status.value == "running"), None),
            "plan": session_events.plan(session.plan_revision, session.plan_status.value if session.plan_status else None, session.plan),
            "approvals": approvals,
            "questions": [session_events.question(q) for q in await self.store.pending_questions(found)],
            "usage": usage.model_dump(mode="json"),
        }))

    async def events(self, request: Request) -> Response:
        found = await self._session_or_404(request)
        if isinstance(found, JSONResponse):
            return found
        after = _resume_after(request)
        if after is None:
            return SafeJSONResponse({"error": "Last-Event-ID must be an event id (a whole number)"}, status_code=400)

        async def stream() -> AsyncIterator[dict[str, str]]:
            last = after
            while True:
                stopping = self.shutdown.is_set()  # then one last read: what was committed is sent
                batch = await self.store.events_after(found, last, BATCH)
                for event in batch:
                    last = event.id
                    yield {"id": str(event.id), "event": event.type, "data": _event_json(event)}
                if len(batch) < BATCH:
                    if stopping:
                        return
                    with anyio.move_on_after(POLL_SECONDS):
                        await self.shutdown.wait()

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return EventSourceResponse(stream(), ping=PING_SECONDS, headers=headers)

    async def _control(self, request: Request, kind: ControlKind, text: str | None, revision: int | None, refusal: str) -> JSONResponse:
        found = await self._session_or_404(request)
        if isinstance(found, JSONResponse):
            return found
        recorded: ControlRecord | None = await self.store.request_control(found, kind, "web", text, revision)
        if recorded is None:
            return SafeJSONResponse({"error": refusal}, status_code=409)
        return SafeJSONResponse({"control": session_events.control(recorded, applied=False)}, status_code=202)

    async def steer(self, request: Request) -> JSONResponse:
        body = await read_body(request, SteerRequest, '{"text": str}')
        if isinstance(body, JSONResponse):
            return body
        return await self._control(request, ControlKind.STEER, body.text, None, "no turn is running: nothing to steer")

    async def cancel(self, request: Request) -> JSONResponse:
        body = await read_body(request, CancelRequest, '{"reason"?: str}')
        if isinstance(body, JSONResponse):
            return body
        return await self._control(request, ControlKind.CANCEL, body.reason, None, "no turn is running: nothing to cancel")

    async def approve_plan(self, request: Request) -> JSONResponse:
        body = await read_body(request, PlanApproval, '{"revision": int}')
        if isinstance(body, JSONResponse):
            return body
        refusal = "that revision is not a draft waiting for approval (or a turn is running)"
        return await self._control(request, ControlKind.EXECUTE_PLAN, None, body.revision, refusal)

    async def pending_questions(self, request: Request) -> JSONResponse:
        return SafeJSONResponse({"questions": [session_events.question(q) for q in await self.store.pending_questions()]})

    async def _question_or_404(self, request: Request) -> QuestionRecord | JSONResponse:
        question = await self.store.get_question(request.path_params["question_id"])
        return question if question is not None else SafeJSONResponse({"error": "no such question"}, status_code=404)

    async def show_question(self, request: Request) -> JSONResponse:
        found = await self._question_or_404(request)
        if isinstance(found, JSONResponse):
            return found
        return SafeJSONResponse({"question": session_events.question(found)})

    async def answer(self, request: Request) -> JSONResponse:
        found = await self._question_or_404(request)
        if isinstance(found, JSONResponse):
            return found
        body = await read_body(request, AnswerRequest, '{"answer": str}, {"content": {...}} or {"decline": true}')
        if isinstance(body, JSONResponse):
            return body
        if found.form is not None and not body.decline:
            return await self._answer_form(found, body)
        text = (body.answer or "").strip()
        if not body.decline and not text:
            return SafeJSONResponse({"error": 'give {"answer": str} (not blank) or {"decline": true}'}, status_code=400)
        if not body.decline and found.choices and not found.allows_free_text and text not in found.choices:
            return SafeJSONResponse({"error": "the answer must be one of the choices"}, status_code=400)
        status = QuestionStatus.DECLINED if body.decline else QuestionStatus.ANSWERED
        result = await self.store.answer_question(found.id, status, None if body.decline else text, "http", self.clock())
        assert result is not None
        question, replayed = result
        return SafeJSONResponse({"question": session_events.question(question), "replayed": replayed})


    async def _answer_form(self, found: QuestionRecord, body: AnswerRequest) -> JSONResponse:
        """A form question is answered with its fields, checked against the upstream's schema."""
        assert found.form is not None
        if body.content is None:
            return SafeJSONResponse({"error": 'this question is a form: give {"content": {field: value}} or {"decline": true}'},
                                    status_code=400)
        problem = check_form(found.form, body.content)
        if problem is not None:
            return SafeJSONResponse({"error": f"the answer does not fit the form: {problem}"}, status_code=400)
        result = await self.store.answer_question(found.id, QuestionStatus.ANSWERED, texts.as_json(body.content), "http", self.clock())
        assert result is not None
        question, replayed = result
        return SafeJSONResponse({"question": session_events.question(question), "replayed": replayed})


def session_routes(
    store: SessionStore, shutdown: anyio.Event, clock: Callable[[], float] = time.time
) -> list[Route]:
    return SessionApi(store, shutdown, clock).routes()
