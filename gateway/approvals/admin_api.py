"""The approvals admin API (the console builds its page on exactly this contract):

    GET  /admin/approvals?state=pending|decided|all      (default pending)
         -> {"approvals": [{id, principal, tool, upstream, arguments_digest, arguments, card,
             idempotency_key, created_at, expires_at, state, decided_by, decided_at, reason, channel}]}
    POST /admin/approvals/{id}/decision   {"decision": "allow"|"deny", "reason"?: str}
         -> 200 the approval; 409 the approval with its first decision (and "error") when it was
            already decided or expired; 403 when the approver is the calling principal

Authorised by an approver token (`auth.approver_tokens`, decided_by: its name) or the admin token
(decided_by: `auth.admin_token_name`, "admin" unless set); anything else is 401 (no credentials) or 403. Errors are `{"error": "..."}`.
Times are ISO 8601 UTC.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import ApprovalNotFound, SelfApproval
from ..admin_json import json_error as _error, read_json_body
from .records import Channel
from .service import Approvals

__all__ = ["DecisionRequest", "approval_routes"]

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
Approver = Callable[[Request], Awaitable[str | None]]


class DecisionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["allow", "deny"]
    reason: str | None = Field(None, max_length=2000)


def _busy() -> JSONResponse:
    logger.warning("admin API: the approvals store was busy or failing", exc_info=True)
    return _error(503, "the gateway's database was busy; nothing was changed, try again")


def approval_routes(approvals: Callable[[], Approvals | None], approver: Approver) -> list[Route]:
    """`approvals`: the running service (None while the gateway starts: 503); `approver`: the name of
    who may decide with the request's credentials, None for anyone else."""

    async def guarded(request: Request) -> tuple[Approvals, str] | JSONResponse:
        name = await approver(request)
        if name is None:
            if "authorization" not in request.headers:
                return _error(401, "approver credentials required (Authorization: Bearer <approver or admin token>)")
            return _error(403, "these credentials may not decide approvals (an approver token from "
                               "auth.approver_tokens, or the admin token)")
        service = approvals()
        if service is None:
            return _error(503, "the gateway is starting")
        return service, name

    async def collection(request: Request) -> Response:
        allowed = await guarded(request)
        if isinstance(allowed, JSONResponse):
            return allowed
        service, _ = allowed
        view = request.query_params.get("state", "pending")
        if view not in ("pending", "decided", "all"):
            return _error(400, f"state={view!r}: use pending, decided or all")
        try:
            listed = await service.list(view)  # type: ignore[arg-type]
        except service.store.transient_errors:
            return _busy()
        now = service.clock()
        return JSONResponse({"approvals": [a.to_json(now) for a in listed]})

    async def decision(request: Request) -> Response:
        allowed = await guarded(request)
        if isinstance(allowed, JSONResponse):
            return allowed
        service, name = allowed
        asked = await read_json_body(request, DecisionRequest, max_bytes=MAX_BODY_BYTES)
        if isinstance(asked, JSONResponse):
            return asked
        try:
            approval, first = await service.decide(
                request.path_params["approval_id"], asked.decision == "allow", by=name, reason=asked.reason,
                channel=Channel.ADMIN_API.value, approver_principal=name)
        except ApprovalNotFound as exc:
            return _error(404, str(exc))
        except SelfApproval as exc:
            return _error(403, str(exc))
        except service.store.transient_errors:
            return _busy()
        shown = approval.to_json(service.clock())
        if first:
            return JSONResponse(shown)
        return JSONResponse({**shown, "error": f"approval {approval.id} is already {shown['state']}"}, status_code=409)

    return [
        Route("/admin/approvals", collection, methods=["GET"]),
        Route("/admin/approvals/{approval_id}/decision", decision, methods=["POST"]),
    ]
