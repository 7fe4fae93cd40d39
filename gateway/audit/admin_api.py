"""The audit log's admin API (the operator console reads it; this contract is fixed):

    GET /admin/audit?since=<ISO 8601>&principal=&tool=&outcome=&limit=100&before=<id>
    -> {"entries": [{"id", "time", "principal", "tool", "upstream", "arguments_digest", "arguments"?,
                     "idempotency_key", "approval": {"by", "how", "at"} | null, "fence_state", "outcome",
                     "latency_ms", "trace_id"}],
        "next_before": <id> | null}

Newest first; `next_before` is the `before` of the next (older) page, null on the last. Empty
parameters are absent. `arguments` is there only for rows written with `audit.arguments: true`.
Errors are JSON `{"error": "..."}`: 401 without credentials, 403 with others than the admin token,
400 naming the parameter that is wrong, 404 when the audit log is off, 503 while the gateway starts.
Reading the log is never itself audited.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..admin_json import denied, json_error as _error
from .log import AuditLog
from .records import OUTCOMES, micros_from_iso
from .store import AuditQuery

__all__ = ["MAX_LIMIT", "audit_routes", "parse_query"]

logger = logging.getLogger(__name__)

MAX_LIMIT = 1000
_PARAMETERS = ("since", "principal", "tool", "outcome", "limit", "before")


class BadParameter(ValueError):
    pass


def parse_query(params: dict[str, str]) -> tuple[AuditQuery, int | None, int]:
    """(query, before, limit) of the request's parameters; BadParameter names the wrong one."""
    unknown = sorted(set(params) - set(_PARAMETERS))
    if unknown:
        raise BadParameter(f"unknown parameter {unknown[0]!r} (known: {', '.join(_PARAMETERS)})")
    given = {k: v.strip() for k, v in params.items() if v.strip()}
    since = None
    if "since" in given:
        try:
            # A `+hh:mm` offset sent without URL-encoding arrives as a space.
            since = micros_from_iso(re.sub(r"(T[0-9:.]+) ([0-9]{2}:?[0-9]{2})$", r"\1+\2", given["since"]))
        except ValueError as exc:
            raise BadParameter(f"since: {exc}") from None
    outcome = given.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise BadParameter(f"outcome: {outcome!r} is not one of {', '.join(OUTCOMES)}")
    limit = _positive(given, "limit", 100)
    if limit > MAX_LIMIT:
        raise BadParameter(f"limit: at most {MAX_LIMIT}, not {limit}")
    before = _positive(given, "before", None)
    return AuditQuery(since=since, principal=given.get("principal"), tool=given.get("tool"), outcome=outcome), before, limit


def _positive(given: dict[str, str], name: str, default: int | None) -> int:
    text = given.get(name)
    if text is None:
        return default  # type: ignore[return-value]
    try:
        value = int(text)
    except ValueError:
        raise BadParameter(f"{name}: {text!r} is not a whole number") from None
    if value < 1:
        raise BadParameter(f"{name}: must be at least 1, not {value}")
    return value


def audit_routes(current: Callable[[], tuple[AuditLog | None, bool]],
                 authorize: Callable[[Request], Awaitable[bool]]) -> list[Route]:
    """`current()`: (the running gateway's audit log or None when it is off, whether it runs)."""

    async def entries(request: Request) -> Response:
        if not await authorize(request):
            return denied(request)
        log, running = current()
        if not running:
            return _error(503, "the gateway is starting")
        if log is None:
            return _error(404, "the audit log is off (audit.enabled: false)")
        try:
            query, before, limit = parse_query(dict(request.query_params))
        except BadParameter as exc:
            return _error(400, str(exc))
        try:
            await log.flush()  # rows of calls already answered are in the page
            found = await log.store.newest(query, before=before, limit=limit + 1)
        except Exception:  # noqa: BLE001 - any database failure is "not now", never a 500 with a trace
            logger.warning("GET /admin/audit: the database did not answer", exc_info=True)
            return _error(503, "the audit log's database did not answer; try again")
        page = found[:limit]
        next_before = page[-1].id if len(found) > limit else None
        return JSONResponse({"entries": [entry.to_api() for entry in page], "next_before": next_before})

    return [Route("/admin/audit", entries, methods=["GET"])]
