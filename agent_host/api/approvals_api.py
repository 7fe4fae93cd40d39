"""The approvers' HTTP API on the session store: pending cards, one card, a decision.

    GET  /approvals        pending cards
    GET  /approvals/{id}   one card with its status
    POST /approvals/{id}   {"decision": "allow" | "deny", "reason"?: str} -> {"approval", "replayed"}

Only approver tokens decide; the agent's own gateway token is refused with 403, because an
agent must not approve itself. Cards are built from the stored call and escaped for display
(`safe_text`); the JSON is also safe inside HTML (`<`, `>`, `&`, U+2028, U+2029 escaped).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..approvals.gate import card_for_approval
from ..domain.credentials import APPROVER_TOKEN_ENV, APPROVER_TOKEN_FILE_FLAG
from ..domain.records import ApprovalRecord, ApprovalStatus
from ..domain.safe_text import terminal_text
from ..store.session_store import SessionStore
from .guard import ApiGuardSettings, guarded_app
from .safe_json import HTML_SAFE, SafeJSONResponse

MAX_REASON_CHARS = 500
BodyT = TypeVar("BodyT", bound=BaseModel)
__all__ = ["HTML_SAFE", "SafeJSONResponse", "Auth", "approval_routes", "approvals_app", "read_body"]


class DecisionRequest(BaseModel):
    decision: Literal["allow", "deny"]
    reason: str | None = None


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(token: str, candidates: Iterable[str]) -> bool:
    return any(hmac.compare_digest(token.encode(), c.encode()) for c in candidates)


def checked_tokens(approver_tokens: list[str], agent_tokens: list[str]) -> tuple[list[str], list[str]]:
    """The usable approver and agent tokens; ValueError (one line, says what to set) when the
    API could not be served safely."""
    approvers = [t for t in approver_tokens if t]
    agents = [t for t in agent_tokens if t]
    if not approvers:
        raise ValueError(
            f"the approvals API needs an approver token: set ${APPROVER_TOKEN_ENV} or {APPROVER_TOKEN_FILE_FLAG} PATH"
        )
    if any(_matches(t, agents) for t in approvers):
        raise ValueError("the approver token must differ from the agent's own gateway token")
    return approvers, agents


class Auth:
    """Bearer tokens of approvers; the agent's own token is refused with 403 everywhere, because
    an agent must not approve, answer, steer or watch for itself. Checked once for every data
    route, from the headers alone, by `guard.BearerGuard`."""

    def __init__(self, approver_tokens: list[str], agent_tokens: list[str]) -> None:
        self._approvers, self._agents = checked_tokens(approver_tokens, agent_tokens)

    def refuse(self, request: Request) -> JSONResponse | None:
        """None when the request carries an approver token, else the refusal to send."""
        token = _bearer(request)
        if token is None:
            return SafeJSONResponse({"error": "missing bearer token"}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        if _matches(token, self._agents):
            return SafeJSONResponse({"error": "the agent's own credentials cannot decide approvals"}, status_code=403)
        if not _matches(token, self._approvers):
            return SafeJSONResponse({"error": "unknown token"}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        return None


async def read_body(request: Request, model: type[BodyT], usage: str) -> BodyT | JSONResponse:
    """The request's JSON body as `model`, or a 400 that says what was expected (a body beyond the
    cap is refused with 413 while it arrives: `guard`)."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        detail = exc.errors(include_url=False, include_input=False)
        return SafeJSONResponse({"error": f"body must be {usage}", "detail": detail}, status_code=400)


def approval_routes(store: SessionStore, clock: Callable[[], float] = time.time) -> list[Route]:
    async def card_json(approval: ApprovalRecord) -> dict[str, Any]:
        card = (await card_for_approval(approval, store, clock())).model_dump(mode="json")
        reason = None if approval.reason is None else terminal_text(approval.reason, MAX_REASON_CHARS)
        card.update(decided_by=approval.decided_by, reason=reason)
        return card

    async def list_pending(request: Request) -> JSONResponse:
        return SafeJSONResponse({"approvals": [await card_json(a) for a in await store.pending_approvals()]})

    async def show(request: Request) -> JSONResponse:
        approval = await store.get_approval(request.path_params["approval_id"])
        if approval is None:
            return SafeJSONResponse({"error": "no such approval"}, status_code=404)
        return SafeJSONResponse({"approval": await card_json(approval)})

    async def decide(request: Request) -> JSONResponse:
        body = await read_body(request, DecisionRequest, '{"decision": "allow"|"deny", "reason"?: str}')
        if isinstance(body, JSONResponse):
            return body
        status = ApprovalStatus.ALLOWED if body.decision == "allow" else ApprovalStatus.DENIED
        result = await store.decide_approval(request.path_params["approval_id"], status, "http", body.reason, clock())
        if result is None:
            return SafeJSONResponse({"error": "no such approval"}, status_code=404)
        approval, replayed = result
        return SafeJSONResponse({"approval": await card_json(approval), "replayed": replayed})

    return [
        Route("/approvals", list_pending, methods=["GET"]),
        Route("/approvals/{approval_id}", show, methods=["GET"]),
        Route("/approvals/{approval_id}", decide, methods=["POST"]),
    ]


def approvals_app(
    store: SessionStore,
    approver_tokens: list[str],
    agent_tokens: list[str],
    clock: Callable[[], float] = time.time,
    guard: ApiGuardSettings = ApiGuardSettings(),
) -> Starlette:
    """The approvals API alone (the host serves it within `host_api.host_app`), guarded alike."""
    return guarded_app(approval_routes(store, clock), [], Auth(approver_tokens, agent_tokens).refuse, guard)
