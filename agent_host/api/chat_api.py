"""The chat part of the host API, served by `dex-agent serve`: start a session, send it messages
(queued while a turn runs; a queued one can be withdrawn), page through its transcript, read and
change its settings.

    POST   /sessions                          {"model"?, "instructions"?, "settings"?} -> 201 {"session_id"}
    GET    /sessions                          {"sessions": [{"session_id", "model", "turns", "last_status", "queued"}]}
    POST   /sessions/{id}/messages            {"text", "plan"?}  -> 202 {"message_id", "queued": bool}
    DELETE /sessions/{id}/messages/{mid}      a queued message -> 204; 409 once its turn started
    GET    /sessions/{id}/messages?limit=50&before=<message id>
                                              -> {"messages": [{"id", "role", "text", "turn_id", ...}], oldest first,
                                                  "next_before": the id to page on (null: no older), "queued": [...]}
    GET    /sessions/{id}/settings            {"settings"}
    PATCH  /sessions/{id}/settings            {"temperature": 0.2, ...; null clears} -> {"settings"}

A message is only stored here; the service's driver (`service/driver.py`) starts its turn when no
other turn runs, so `queued` says whether it waits behind one. `queued: false` means it is next.
Authenticated, guarded and escaped like the rest of the API (`host_api`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..domain import session_events
from ..domain.settings import SessionSettings, resolve_settings
from ..models.base import Message
from ..store.session_store import SessionStore
from .approvals_api import SafeJSONResponse, read_body

MAX_MESSAGE_CHARS = 100_000
MAX_INSTRUCTIONS_CHARS = 8_000
DEFAULT_PAGE = 50
MAX_PAGE = 200


class NewSession(BaseModel):
    model: str | None = Field(default=None, min_length=1, max_length=200)
    instructions: str | None = Field(default=None, max_length=MAX_INSTRUCTIONS_CHARS)
    settings: dict[str, Any] = Field(default_factory=dict)


class NewMessage(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_MESSAGE_CHARS)
    plan: bool = False  # a planning turn: the model writes a draft plan, run once approved


@dataclass(frozen=True)
class ChatDefaults:
    """What a new session gets: the service's model and gateway; `check_model` raises ValueError
    (one line) for a model the service cannot run."""

    model: str
    gateway: str
    check_model: Callable[[str], None]


def _error(message: str, status: int) -> JSONResponse:
    return SafeJSONResponse({"error": message}, status_code=status)


def _message_json(message_id: str, turn_id: str, body: str) -> dict[str, Any]:
    entry = Message.model_validate_json(body)
    data = session_events.message(turn_id, entry)
    return {"id": message_id, **data, "role": entry.role, "text": session_events.text(entry.text) or ""}


class ChatApi:
    def __init__(self, store: SessionStore, defaults: ChatDefaults) -> None:
        self.store = store
        self.defaults = defaults

    def routes(self) -> list[Route]:
        return [
            Route("/sessions", self.create, methods=["POST"]),
            Route("/sessions", self.list, methods=["GET"]),
            Route("/sessions/{session_id}/messages", self.send, methods=["POST"]),
            Route("/sessions/{session_id}/messages", self.page, methods=["GET"]),
            Route("/sessions/{session_id}/messages/{message_id}", self.withdraw, methods=["DELETE"]),
            Route("/sessions/{session_id}/settings", self.get_settings, methods=["GET"]),
            Route("/sessions/{session_id}/settings", self.patch_settings, methods=["PATCH"]),
        ]

    async def _session(self, request: Request) -> str | JSONResponse:
        session_id = str(request.path_params["session_id"])
        if await self.store.get_session(session_id) is None:
            return _error("no such session", 404)
        return session_id

    async def create(self, request: Request) -> JSONResponse:
        body = await read_body(request, NewSession, '{"model"?: str, "instructions"?: str, "settings"?: {...}}')
        if isinstance(body, JSONResponse):
            return body
        changes = dict(body.settings)
        if body.model is not None:
            changes["model"] = body.model
        if body.instructions is not None:
            changes["instructions"] = body.instructions
        try:
            settings = resolve_settings({}, changes)
            model = settings.model or self.defaults.model
            self.defaults.check_model(model)
        except ValueError as exc:
            return _error(str(exc), 400)
        session = await self.store.create_session(model, self.defaults.gateway, None, settings.stored())
        return SafeJSONResponse({"session_id": session.id}, status_code=201)

    async def list(self, request: Request) -> JSONResponse:
        listed = []
        for session, turns, last in await self.store.list_sessions():
            queued = len(await self.store.queued_messages(session.id))
            listed.append({"session_id": session.id, "model": session.model, "created_at": session.created_at,
                           "turns": turns, "last_status": last, "queued": queued})
        return SafeJSONResponse(session_events.inert({"sessions": listed}))

    async def send(self, request: Request) -> JSONResponse:
        found = await self._session(request)
        if isinstance(found, JSONResponse):
            return found
        body = await read_body(request, NewMessage, '{"text": str, "plan"?: bool}')
        if isinstance(body, JSONResponse):
            return body
        if not body.text.strip():
            return _error("text must not be blank", 400)
        queued, busy = await self.store.queue_message(found, body.text, body.plan)
        return SafeJSONResponse({"message_id": queued.id, "queued": busy}, status_code=202)

    async def withdraw(self, request: Request) -> Response:
        found = await self._session(request)
        if isinstance(found, JSONResponse):
            return found
        refused = await self.store.withdraw_message(found, str(request.path_params["message_id"]))
        if refused == "not_found":
            return _error("no such queued message", 404)
        if refused is not None:
            return _error("that message already started a turn: it can no longer be withdrawn", 409)
        return Response(status_code=204)

    async def page(self, request: Request) -> JSONResponse:
        found = await self._session(request)
        if isinstance(found, JSONResponse):
            return found
        raw = request.query_params.get("limit", str(DEFAULT_PAGE))
        limit = int(raw) if raw.isdigit() else 0
        if not 1 <= limit <= MAX_PAGE:
            return _error(f"limit must be a whole number from 1 to {MAX_PAGE} (default {DEFAULT_PAGE})", 400)
        before = request.query_params.get("before")
        rows = await self.store.transcript(found, limit, before)
        if rows is None:
            return _error("before must be the id of a message of this session", 400)
        queued = [{"id": q.id, "role": "user", "text": q.text, "queued": True} for q in await self.store.queued_messages(found)]
        more = len(rows) > limit
        messages = [_message_json(*row) for row in rows[-limit:]]
        next_before = messages[0]["id"] if more and messages else None
        return SafeJSONResponse(session_events.inert({"messages": messages, "next_before": next_before, "queued": queued}))

    async def get_settings(self, request: Request) -> JSONResponse:
        found = await self._session(request)
        if isinstance(found, JSONResponse):
            return found
        session = await self.store.get_session(found)
        assert session is not None
        return SafeJSONResponse(session_events.inert({"settings": SessionSettings.of(session.settings).stored()}))

    async def patch_settings(self, request: Request) -> JSONResponse:
        found = await self._session(request)
        if isinstance(found, JSONResponse):
            return found
        try:
            changes = json.loads(await request.body())
        except ValueError:
            changes = None
        if not isinstance(changes, dict):
            return _error("body must be a JSON object of settings (null clears one)", 400)
        session = await self.store.get_session(found)
        assert session is not None
        unset = [k for k, v in changes.items() if v is None]
        try:
            settings = resolve_settings(session.settings, {k: v for k, v in changes.items() if v is not None}, unset)
            if settings.model:
                self.defaults.check_model(settings.model)
        except ValueError as exc:
            return _error(str(exc), 400)
        updated = await self.store.set_settings(found, settings.stored(), settings.model)
        return SafeJSONResponse(session_events.inert({"settings": SessionSettings.of(updated.settings).stored()}))


def chat_routes(store: SessionStore, defaults: ChatDefaults) -> list[Route]:
    return ChatApi(store, defaults).routes()
