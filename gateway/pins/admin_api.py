"""The pins admin API (the console builds its page on exactly this contract):

    GET  /admin/pins?state=pending|all      (default pending: changed or new, awaiting review)
         -> {"pins": [{upstream, tool, state, mode, pinned_digest, seen_digest, pinned_definition,
             seen_definition, first_seen_at, changed_at, reviewed_by, reviewed_at}]}
    POST /admin/pins/{upstream}/{tool}/accept   -> 200 the pin (the seen definition is pinned: the
                                                   tool is listed again, list_changed is sent)
    POST /admin/pins/{upstream}/{tool}/reject   -> 200 the pin (the pinned definition stays; a held
                                                   tool stays withheld)

Authorised by the admin token; anything else is 401 (no credentials) or 403. Errors are
`{"error": "..."}`; an unknown upstream or tool is 404. Times are ISO 8601 UTC.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..admin_json import denied, json_error as _error
from .records import Pin
from .service import ToolPins

__all__ = ["pin_json", "pin_routes"]

logger = logging.getLogger(__name__)


def _iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, timezone.utc).isoformat().replace("+00:00", "Z")


def pin_json(pin: Pin, mode: str) -> dict[str, Any]:
    return {"upstream": pin.upstream, "tool": pin.tool, "state": pin.state, "mode": mode,
            "pinned_digest": pin.pinned_digest, "seen_digest": pin.seen_digest,
            "pinned_definition": pin.pinned_definition, "seen_definition": pin.seen_definition,
            "first_seen_at": _iso(pin.first_seen_at), "changed_at": _iso(pin.changed_at),
            "reviewed_by": pin.reviewed_by, "reviewed_at": _iso(pin.reviewed_at)}


def pin_routes(pins: Callable[[], ToolPins | None], authorize: Callable[[Request], Awaitable[bool]],
               *, admin_name: str = "admin") -> list[Route]:
    """`pins`: the running service (None while the gateway starts: 503); `admin_name`: who the admin
    token is in a pin's `reviewed_by` (`auth.admin_token_name`)."""

    async def guarded(request: Request) -> ToolPins | JSONResponse:
        if not await authorize(request):
            return denied(request, "review tool definitions (the admin token)")
        service = pins()
        return service if service is not None else _error(503, "the gateway is starting")

    async def collection(request: Request) -> Response:
        service = await guarded(request)
        if isinstance(service, JSONResponse):
            return service
        view = request.query_params.get("state", "pending")
        if view not in ("pending", "all"):
            return _error(400, f"state={view!r}: use pending or all")
        try:
            await service.refresh()
        except Exception:  # noqa: BLE001 - answer from memory when the database is busy
            logger.warning("admin API: reading the pins failed; answering from memory", exc_info=True)
        listed = [p for p in service.pins() if view == "all" or p.pending]
        return JSONResponse({"pins": [pin_json(p, service.mode(p.upstream)) for p in listed]})

    async def review(request: Request) -> Response:
        service = await guarded(request)
        if isinstance(service, JSONResponse):
            return service
        upstream, tool, verdict = (request.path_params[k] for k in ("upstream", "tool", "verdict"))
        if verdict not in ("accept", "reject"):
            return _error(404, f"no such action {verdict!r}: use accept or reject")
        try:
            pin = await service.review(upstream, tool, verdict == "accept", by=admin_name)
        except Exception:  # noqa: BLE001 - a busy database: nothing changed
            logger.warning("admin API: a pin review failed", exc_info=True)
            return _error(503, "the gateway's database was busy; nothing was changed, try again")
        if pin is None:
            return _error(404, f"no pinned tool {tool!r} of upstream {upstream!r}")
        return JSONResponse(pin_json(pin, service.mode(pin.upstream)))

    return [
        Route("/admin/pins", collection, methods=["GET"]),
        Route("/admin/pins/{upstream}/{tool}/{verdict}", review, methods=["POST"]),
    ]
