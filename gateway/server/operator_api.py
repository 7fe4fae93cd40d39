"""The operator's admin JSON routes behind the console (`/console`), admin token only.

    GET  /admin/upstreams                       health, era, tool counts, last error of each upstream
    GET  /admin/tools                           every exposed tool: upstream, effect, approval
    GET  /admin/fences?state=unknown&resolved=false|true|all&limit=100
                                                fences (default: unknown ones nobody resolved yet)
    POST /admin/fences/{fence_id}/resolve       {"note": "..."}: mark an unknown fence as checked
    GET  /admin/tasks?status=&principal=&limit=50
    POST /admin/tasks/{task_id}/cancel          as `dex-gateway tasks cancel`

Errors are JSON `{"error": "..."}`: 401 without credentials, 403 with other ones, 400 for a bad
query or body (naming the parameter), 404 for what does not exist (or tasks not enabled), 409 for a
fence that is not `unknown` or already resolved (the body then carries the first resolution), 503
while the gateway starts.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..config.model import GatewayConfig
from ..fences import FenceRecord, FenceState, FenceStore
from ..fences.resolutions import MAX_NOTE_CHARS, Resolution, ResolutionStore
from ..admin_json import denied, json_error as _error, read_json_body
from ..pipeline.catalog import Catalog
from ..protocol import JsonObject
from ..tasks.admin import cancel_task
from ..tasks.records import TaskRecord, TaskStatus
from ..tasks.store import TaskStore
from ..upstreams.listing import ListingCache, ListKind

__all__ = ["OperatorView", "operator_routes"]

MAX_BODY_BYTES = 16 * 1024
MAX_LIMIT = 500
# Unknown fences are few; the list of those to check is read from this many most recent ones.
FENCE_WINDOW = 1000


@dataclass(frozen=True)
class OperatorView:
    """What these routes read from the running gateway."""

    config: GatewayConfig
    caches: list[ListingCache]
    catalog: Catalog
    fences: FenceStore
    resolutions: ResolutionStore
    tasks: TaskStore | None


class ResolveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = Field(min_length=1, max_length=MAX_NOTE_CHARS)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")


class _BadQuery(Exception):
    pass


def _limit(request: Request, default: int) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _BadQuery(f"limit: {raw!r} is not a whole number") from None
    if not 1 <= value <= MAX_LIMIT:
        raise _BadQuery(f"limit: must be between 1 and {MAX_LIMIT}")
    return value


def _choice(request: Request, name: str, choices: list[str], default: str | None) -> str | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    if raw not in choices:
        raise _BadQuery(f"{name}: {raw!r} is not one of {', '.join(choices)}")
    return raw


def _upstream(cache: ListingCache, tool_counts: dict[str, int]) -> JsonObject:
    upstream = cache.upstream
    up, age = cache.health()
    failure = cache.last_error()
    config = upstream.config
    return {
        "name": upstream.name,
        "transport": config.transport,
        "health": "up" if up else ("down" if age is not None or failure is not None else "not listed yet"),
        "era": upstream.last_known_era,
        "connected": upstream.protocol_version is not None,
        "listed_seconds_ago": None if age is None else round(age, 1),
        "tools": tool_counts.get(upstream.name, 0),
        "tools_listed": len(cache.peek(ListKind.TOOLS) or []),
        "pinning": getattr(config, "pinning", None),
        "last_error": None if failure is None else failure[0],
        "last_error_at": None if failure is None else _iso(failure[1]),
        "refused_listings": cache.refusals(),
    }


def _fence(record: FenceRecord, resolution: Resolution | None) -> JsonObject:
    return {
        "fence_id": record.fence_id,
        "principal": record.principal,
        "tool": record.tool,
        "effect": record.effect.value,
        "state": record.state.value,
        "attempts": record.attempts,
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at),
        "answer": record.answer,
        "resolution": None if resolution is None else {
            "note": resolution.note, "by": resolution.resolved_by, "at": _iso(resolution.resolved_at),
        },
    }


def _task(record: TaskRecord) -> JsonObject:
    return {
        "task_id": record.task_id,
        "principal": record.principal,
        "tool": record.tool,
        "effect": record.effect.value,
        "status": record.status.value,
        "status_message": record.status_message,
        "upstream": record.upstream,
        "upstream_task_id": record.upstream_task_id,
        "era": record.era.value,
        "created_at": _iso(record.created_at),
        "updated_at": _iso(record.updated_at),
        "expires_at": _iso(record.expires_at),
        "cancel_requested": record.cancel_requested,
    }


def operator_routes(
    view: Callable[[], OperatorView | None], authorize: Callable[[Request], Awaitable[bool]],
    *, clock: Callable[[], float] = time.time, admin_name: str = "admin",
) -> list[Route]:
    """The routes; `view`: the running gateway's parts (None while it starts); `admin_name`: who the
    admin token is in a fence note's `resolved_by` (`auth.admin_token_name`)."""

    def guarded(handler: Callable[[Request, OperatorView], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if not await authorize(request):
                return denied(request)
            current = view()
            if current is None:
                return _error(503, "the gateway is starting")
            try:
                return await handler(request, current)
            except _BadQuery as exc:
                return _error(400, f"invalid query: {exc}")

        return endpoint

    async def upstreams(request: Request, v: OperatorView) -> Response:
        counts: dict[str, int] = {}
        for route in await v.catalog.tools():
            if route.upstream is not None:
                counts[route.upstream] = counts.get(route.upstream, 0) + 1
        return JSONResponse({"upstreams": [_upstream(cache, counts) for cache in v.caches]})

    async def tools(request: Request, v: OperatorView) -> Response:
        return JSONResponse({"tools": [{
            "name": route.name,
            "upstream": route.upstream,
            "target": route.target or route.name,
            "source": "upstream" if route.upstream is not None else "connector",
            "effect": route.effect.value,
            "approval": "required" if route.classification.requires_approval else "none",
            "declared": route.classification.declared,
            "task_support": route.task_support,
            "description": str(route.definition.get("description") or ""),
        } for route in await v.catalog.tools()]})

    async def fences(request: Request, v: OperatorView) -> Response:
        state = _choice(request, "state", [s.value for s in FenceState], None) or FenceState.UNKNOWN.value
        resolved = _choice(request, "resolved", ["false", "true", "all"], "false" if state == "unknown" else "all")
        limit = _limit(request, 100)
        principal = request.query_params.get("principal") or None
        window = FENCE_WINDOW if resolved != "all" else limit
        records = await v.fences.list_records(state=FenceState(state), principal=principal, limit=window)
        notes = await v.resolutions.of([r.fence_id for r in records])
        keep = [r for r in records if resolved == "all" or (r.fence_id in notes) == (resolved == "true")]
        return JSONResponse({"fences": [_fence(r, notes.get(r.fence_id)) for r in keep[:limit]]})

    async def resolve(request: Request, v: OperatorView) -> Response:
        fence_id = request.path_params["fence_id"]
        ask = await read_json_body(request, ResolveRequest, max_bytes=MAX_BODY_BYTES, empty=b"{}")
        if isinstance(ask, JSONResponse):
            return ask
        record = await v.fences.get(fence_id)
        if record is None:
            return _error(404, f"no fence {fence_id!r} (it may have been swept after the retention period)")
        if record.state is not FenceState.UNKNOWN:
            return _error(409, f"fence {fence_id!r} is {record.state.value}, not unknown: nothing to resolve")
        made, resolution = await v.resolutions.resolve(
            Resolution(fence_id=fence_id, note=ask.note.strip() or ask.note, resolved_by=admin_name, resolved_at=clock()))
        body_out = _fence(record, resolution)
        if not made:
            return JSONResponse({"error": "this fence was already resolved; the first note stands", **body_out},
                                status_code=409)
        return JSONResponse(body_out)

    async def tasks(request: Request, v: OperatorView) -> Response:
        if v.tasks is None:
            return _error(404, "tasks are off on this gateway (tasks.enabled: false)")
        status = _choice(request, "status", [s.value for s in TaskStatus], None)
        records = await v.tasks.list(principal=request.query_params.get("principal") or None,
                                     status=TaskStatus(status) if status else None, limit=_limit(request, 50))
        return JSONResponse({"tasks": [_task(r) for r in records]})

    async def cancel(request: Request, v: OperatorView) -> Response:
        if v.tasks is None:
            return _error(404, "tasks are off on this gateway (tasks.enabled: false)")
        task_id = request.path_params["task_id"]
        before = await v.tasks.get(task_id)
        if before is None:
            return _error(404, f"no task {task_id!r}")
        after = await cancel_task(v.tasks, task_id)
        return JSONResponse(_task(after or before))

    return [
        Route("/admin/upstreams", guarded(upstreams), methods=["GET"]),
        Route("/admin/tools", guarded(tools), methods=["GET"]),
        Route("/admin/fences", guarded(fences), methods=["GET"]),
        Route("/admin/fences/{fence_id}/resolve", guarded(resolve), methods=["POST"]),
        Route("/admin/tasks", guarded(tasks), methods=["GET"]),
        Route("/admin/tasks/{task_id}/cancel", guarded(cancel), methods=["POST"]),
    ]
