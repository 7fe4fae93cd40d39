"""The MCP handlers the SDK serves: every request the fast path leaves to the SDK.

`tools/call` and `tools/list` go through a server middleware to the same `ToolCalls` and
`ToolListing` the fast path uses, and their wire dicts go out as they are (the middleware
owns the result, so the SDK neither re-validates nor re-shapes it). So do `prompts/get` and
`resources/read`, whose answer may be a 2026-07-28 round of questions (`input_required`).
Resources, prompts, completion and logging go to `gateway/pipeline/passthrough.py`; subscriptions
(`resources/subscribe`, `subscriptions/listen`) to the gateway's `ResourceWatch`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import INTERNAL_ERROR
from pydantic import BaseModel, ValidationError

from ..pipeline.catalog import Catalog
from ..errors import RequestError
from ..pipeline.passthrough import Passthrough
from ..auth.principals import ANONYMOUS, ANONYMOUS_IDENTITY, PRINCIPAL_SCOPE_KEY, Identity, identity_of
from ..protocol import GATEWAY_NAME, GATEWAY_VERSION, Era
from ..pipeline.subscriptions import ResourceWatch
from ..tasks import Tasks
from ..tasks.wire import TASKS_EXTENSION
from ..pipeline.rounds import Parking, is_input_required, round_params
from ..upstreams.relay import CallRelay
from .events import ListenStreams
from .relays import SessionRelay
from .sessions import Sessions
from .task_methods import TASK_METHODS, answer_task_method
from .tools import ToolCalls, ToolListing, parse_tool_call
from .wire import result_wire

__all__ = ["FrontParts", "GatewayServer", "build_server"]

INSTRUCTIONS = (
    "Every tool behind this gateway declares its effect and approval in _meta "
    "(io.superdurable.dex/*); send io.superdurable.dex/idempotencyKey with every write."
)
# What a principal may list is its own: 2026-07-28 list results are private and immediately stale.
_CACHED: tuple[CacheableMethod, ...] = ("prompts/list", "resources/list", "resources/templates/list")
_CACHE_HINTS: dict[CacheableMethod, CacheHint] = {m: CacheHint(ttl_ms=0, scope="private") for m in _CACHED}


class GatewayServer(Server[Any]):
    """The SDK Server, advertising list changes and resource subscriptions (the gateway tells live
    sessions, gateway/front/events.py) and, with tasks on, the 2025-11-25 `tasks` capability
    (handshake era) or the tasks extension (2026-07-28 `server/discover`)."""

    serves_tasks = False

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        update: dict[str, Any] = {}
        if caps.tools is not None:
            update["tools"] = types.ToolsCapability(list_changed=True)
        if caps.prompts is not None:
            update["prompts"] = types.PromptsCapability(list_changed=True)
        if caps.resources is not None:
            update["resources"] = types.ResourcesCapability(subscribe=True, list_changed=True)
        if self.serves_tasks and Era.of(kwargs.get("protocol_version")) is Era.HANDSHAKE:
            update["tasks"] = types.ServerTasksCapability(
                list=types.TasksListCapability(), cancel=types.TasksCancelCapability(),
                requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability())),
            )
        return caps.model_copy(update=update)


@dataclass(frozen=True)
class FrontParts:
    """What the SDK handlers work with."""

    catalog: Catalog
    passthrough: Passthrough
    tool_calls: ToolCalls
    listing: ToolListing
    sessions: Sessions
    watch: ResourceWatch
    listen: ListenStreams
    server_info: dict[str, Any]
    tasks: Tasks | None = None
    parking: Parking | None = None


def build_server(parts: FrontParts) -> GatewayServer:
    handlers = _Handlers(parts)
    with warnings.catch_warnings():
        # logging/setLevel is deprecated at 2026-07-28, and still what handshake-era clients use.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server = GatewayServer(
            GATEWAY_NAME,
            version=GATEWAY_VERSION,
            instructions=INSTRUCTIONS,
            # Registered so the capabilities say so; the middleware answers these four methods.
            on_list_tools=handlers.unreachable,
            on_call_tool=handlers.unreachable,
            on_read_resource=handlers.unreachable,
            on_get_prompt=handlers.unreachable,
            on_list_resources=handlers.list_resources,
            on_list_resource_templates=handlers.list_resource_templates,
            on_subscribe_resource=handlers.subscribe,
            on_unsubscribe_resource=handlers.unsubscribe,
            on_subscriptions_listen=parts.listen,
            on_list_prompts=handlers.list_prompts,
            on_completion=handlers.complete,
            on_set_logging_level=handlers.set_logging_level,
            # Mcp-Param-* headers are checked against the catalog, not by listing every tool per call.
            get_tool_input_schema=parts.catalog.input_schema,
            cache_hints=_CACHE_HINTS,
        )
    server.middleware.append(handlers.middleware)
    if parts.tasks is not None:
        server.serves_tasks = True
        server.extensions[TASKS_EXTENSION] = {}
    return server


class _Handlers:
    def __init__(self, parts: FrontParts) -> None:
        self._p = parts

    # -- the middleware: methods whose wire dict the gateway writes itself ------------------------

    async def middleware(self, ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        if ctx.request_id is None:
            # A notification: the SDK drops unknown ones; a tools/call without an id never runs.
            result = await call_next(ctx)
            if ctx.method == "notifications/initialized":
                await self._p.sessions.save(ctx)  # the handshake is done: another replica could adopt it
            return result
        self._p.sessions.remember(ctx)
        era = Era.of(ctx.protocol_version)
        if ctx.method == "tools/call":
            with _as_mcp_error():
                request = parse_tool_call(ctx.params)
                result = await self._p.tool_calls.result(_identity(ctx), request, self._relay(ctx), era=era)
            if era is Era.HANDSHAKE and isinstance(result.get("task"), dict):
                await self._watch_task(ctx, result["task"])  # a CreateTaskResult: tell of its changes
            return result
        if ctx.method == "tools/list":
            return await self._p.listing.result(_identity(ctx), era=era)
        if ctx.method in ("prompts/get", "resources/read"):
            return await self._interactive(ctx, call_next, era)
        if ctx.method in TASK_METHODS and self._p.tasks is not None:
            headers = ctx.request.headers if ctx.request is not None else None
            with _as_mcp_error():
                answer = await answer_task_method(
                    self._p.tasks, ctx.method, ctx.params, _principal(ctx), era=era, headers=headers,
                )
            if era is Era.HANDSHAKE and ctx.method == "tasks/get" and isinstance(answer, dict):
                await self._watch_task(ctx, answer)  # the principal's task (no other is answered): tell of its changes
            return answer
        return await call_next(ctx)

    async def _watch_task(self, ctx: ServerRequestContext[Any], task: dict[str, Any]) -> None:
        if self._p.sessions.watch_task(ctx, task):
            await self._p.sessions.save(ctx)  # watched: carried to a replica that adopts the session

    async def _interactive(self, ctx: ServerRequestContext[Any], call_next: Any, era: Era) -> Any:
        """`prompts/get` and `resources/read`: the upstream's answer, or (2026-07-28) its round of questions."""
        prompt = ctx.method == "prompts/get"
        model: type[BaseModel] = types.GetPromptRequestParams if prompt else types.ReadResourceRequestParams
        try:
            params: Any = model.model_validate(ctx.params or {}, by_name=False)
        except ValidationError:
            return await call_next(ctx)  # the SDK answers the invalid params
        with _as_mcp_error():
            rounds = round_params(ctx.params or {})
        principal, relay, caller = _principal(ctx), self._relay(ctx), _identity(ctx)

        async def work(asking: CallRelay) -> dict[str, Any]:
            if prompt:
                return await self._p.passthrough.get_prompt(principal, params.name, params.arguments, _raw_meta(ctx),
                                                            asking, rounds, caller=caller)
            return await self._p.passthrough.read_resource(principal, str(params.uri), _raw_meta(ctx), asking, rounds,
                                                           caller=caller)

        parking = self._p.parking
        with _as_mcp_error():
            if parking is not None and parking.takes(era, relay, rounds, upstream_may_ask=True):
                # An upstream that asks on the handshake era: its questions become input_required rounds.
                target = f"{ctx.method} {params.name if prompt else params.uri}"
                result = await parking.round(principal, target, relay, rounds, work)
            else:
                result = await work(relay)
            if not is_input_required(result):
                _check(types.GetPromptResult if prompt else types.ReadResourceResult, result, ctx.method)
                if era is Era.MODERN and not prompt:
                    result.setdefault("ttlMs", 0)
                    result["cacheScope"] = "private"  # what a principal may read is its own
        return result_wire(result, era=era, server_info=self._p.server_info)

    def _relay(self, ctx: ServerRequestContext[Any]) -> SessionRelay:
        return SessionRelay(ctx, self._p.sessions)

    async def unreachable(self, ctx: ServerRequestContext[Any], params: Any) -> Any:
        raise MCPError(INTERNAL_ERROR, f"{ctx.method} is answered by the gateway's middleware")

    # -- lists, subscriptions, completion, logging ----------------------------------------------

    async def list_resources(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        resources = await self._p.passthrough.resources(_principal(ctx))
        return types.ListResourcesResult(resources=[types.Resource.model_validate(r) for r in resources])

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        templates = await self._p.passthrough.resource_templates(_principal(ctx))
        return types.ListResourceTemplatesResult(
            resource_templates=[types.ResourceTemplate.model_validate(t) for t in templates]
        )

    async def list_prompts(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        prompts = await self._p.passthrough.prompts(_principal(ctx))
        return types.ListPromptsResult(prompts=[types.Prompt.model_validate(p) for p in prompts])

    async def subscribe(self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
        """The session holds the URI; its upstream reports updates while any client holds it. A client
        served without a session has no stream for updates: accepted, as a stateless server does."""
        uri = str(params.uri)
        with _as_mcp_error():
            await self._p.passthrough.check_resource(_principal(ctx), uri)
            if self._p.sessions.subscribe(ctx, uri):
                try:
                    await self._p.watch.hold(uri)
                except RequestError:
                    self._p.sessions.unsubscribe(ctx, uri)
                    raise
                await self._p.sessions.save(ctx)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        uri = str(params.uri)
        if self._p.sessions.unsubscribe(ctx, uri):
            await self._p.watch.release(uri)
            await self._p.sessions.save(ctx)
        return types.EmptyResult()

    async def complete(self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams) -> types.CompleteResult:
        request = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        request.pop("_meta", None)
        with _as_mcp_error():
            result = await self._p.passthrough.complete(_principal(ctx), request, _raw_meta(ctx), self._relay(ctx),
                                                        caller=_identity(ctx))
        return types.CompleteResult.model_validate(result)

    async def set_logging_level(self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
        """The session's threshold (what the gateway relays; what a 2026 upstream is asked for), and
        the level of the handshake-era upstreams in the principal's scope."""
        with _as_mcp_error():
            await self._p.passthrough.set_log_level(_principal(ctx), params.level)
        self._p.sessions.set_log_level(ctx, params.level)
        await self._p.sessions.save(ctx)
        return types.EmptyResult()


def _check(model: type[BaseModel], result: dict[str, Any], method: str) -> None:
    """An upstream answer that is not valid MCP is the upstream's fault, never sent on."""
    try:
        model.model_validate(result, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RequestError(INTERNAL_ERROR, f"{method}: the upstream answered with a result that is not valid MCP "
                           f"({where}: {first['msg']})") from None


@contextmanager
def _as_mcp_error() -> Iterator[None]:
    """A RequestError from the gateway, as the JSON-RPC error the SDK writes."""
    try:
        yield
    except RequestError as exc:
        raise MCPError(exc.code, exc.message, exc.data) from None


def _identity(ctx: ServerRequestContext[Any]) -> Identity:
    return identity_of(ctx.request.scope) if ctx.request is not None else ANONYMOUS_IDENTITY


def _principal(ctx: ServerRequestContext[Any]) -> str:
    request = ctx.request
    if request is None:
        return ANONYMOUS
    return str(request.scope.get(PRINCIPAL_SCOPE_KEY, ANONYMOUS))


def _raw_meta(ctx: ServerRequestContext[Any]) -> dict[str, Any]:
    params = ctx.params or {}
    meta = params.get("_meta") if isinstance(params, dict) else None
    return dict(meta) if isinstance(meta, dict) else {}
