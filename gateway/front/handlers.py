"""The MCP handlers the SDK serves: every request the fast path leaves to the SDK.

`tools/call` and `tools/list` go through a server middleware to the same `ToolCalls` and
`ToolListing` the fast path uses, and their wire dicts go out as they are (the middleware
owns the result, so the SDK neither re-validates nor re-shapes it). Resources, prompts,
completion and logging go to `gateway/passthrough.py`.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import INTERNAL_ERROR

from ..catalog import Catalog
from ..errors import RequestError
from ..passthrough import Passthrough
from ..principals import ANONYMOUS, PRINCIPAL_SCOPE_KEY
from ..tasks import Tasks
from ..tasks.wire import TASKS_EXTENSION
from .notifier import SessionNotifier
from .relays import SessionRelay
from .task_methods import TASK_METHODS, answer_task_method
from .tools import ToolCalls, ToolListing, parse_tool_call
from .wire import is_modern

__all__ = ["GatewayServer", "build_server"]

INSTRUCTIONS = (
    "Every tool behind this gateway declares its effect and approval in _meta "
    "(io.superdurable.dex/*); send io.superdurable.dex/idempotencyKey with every write."
)


class GatewayServer(Server[Any]):
    """The SDK Server, advertising `tools.listChanged` (the catalog notifies live sessions) and,
    with tasks on, the 2025-11-25 `tasks` capability (handshake era) or the tasks extension
    (2026-07-28 `server/discover`)."""

    serves_tasks = False

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        if caps.tools is not None:
            caps = caps.model_copy(update={"tools": types.ToolsCapability(list_changed=True)})
        if self.serves_tasks and not is_modern(kwargs.get("protocol_version")):
            caps = caps.model_copy(update={"tasks": types.ServerTasksCapability(
                list=types.TasksListCapability(), cancel=types.TasksCancelCapability(),
                requests=types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability())),
            )})
        return caps


def build_server(
    catalog: Catalog,
    passthrough: Passthrough,
    tool_calls: ToolCalls,
    listing: ToolListing,
    notifier: SessionNotifier,
    *,
    version: str,
    tasks: Tasks | None = None,
) -> GatewayServer:
    handlers = _Handlers(catalog, passthrough, tool_calls, listing, notifier, tasks)
    with warnings.catch_warnings():
        # logging/setLevel is deprecated at 2026-07-28, and still what handshake-era clients use.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server = _server(handlers, catalog, version)
    server.middleware.append(handlers.tools_middleware)
    if tasks is not None:
        server.serves_tasks = True
        server.extensions[TASKS_EXTENSION] = {}
    return server


def _server(handlers: "_Handlers", catalog: Catalog, version: str) -> GatewayServer:
    return GatewayServer(
        "dex-mcp-gateway",
        version=version,
        instructions=INSTRUCTIONS,
        # Registered so the capabilities say "tools"; the middleware answers both methods.
        on_list_tools=handlers.unreachable,
        on_call_tool=handlers.unreachable,
        on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_resource_templates,
        on_read_resource=handlers.read_resource,
        on_subscribe_resource=handlers.subscribe,
        on_unsubscribe_resource=handlers.unsubscribe,
        on_list_prompts=handlers.list_prompts,
        on_get_prompt=handlers.get_prompt,
        on_completion=handlers.complete,
        on_set_logging_level=handlers.set_logging_level,
        # Mcp-Param-* headers are checked against the catalog, not by listing every tool per call.
        get_tool_input_schema=catalog.input_schema,
    )


class _Handlers:
    def __init__(
        self,
        catalog: Catalog,
        passthrough: Passthrough,
        tool_calls: ToolCalls,
        listing: ToolListing,
        notifier: SessionNotifier,
        tasks: Tasks | None = None,
    ) -> None:
        self._tasks = tasks
        self._catalog = catalog
        self._passthrough = passthrough
        self._tool_calls = tool_calls
        self._listing = listing
        self._notifier = notifier

    # -- tools ----------------------------------------------------------------------------

    async def tools_middleware(self, ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        if ctx.request_id is None:
            # A notification: the SDK drops unknown ones; a tools/call without an id never runs.
            return await call_next(ctx)
        if ctx.method == "tools/call":
            self._notifier.remember(ctx)
            with _as_mcp_error():
                request = parse_tool_call(ctx.params)
                return await self._tool_calls.result(
                    _principal(ctx), request, SessionRelay(ctx), modern=is_modern(ctx.protocol_version)
                )
        if ctx.method == "tools/list":
            self._notifier.remember(ctx)
            return await self._listing.result(_principal(ctx), modern=is_modern(ctx.protocol_version))
        if ctx.method in TASK_METHODS and self._tasks is not None:
            headers = ctx.request.headers if ctx.request is not None else None
            with _as_mcp_error():
                return await answer_task_method(
                    self._tasks, ctx.method, ctx.params, _principal(ctx), modern=is_modern(ctx.protocol_version),
                    headers=headers,
                )
        return await call_next(ctx)

    async def unreachable(self, ctx: ServerRequestContext[Any], params: Any) -> Any:
        raise MCPError(INTERNAL_ERROR, f"{ctx.method} is answered by the gateway's middleware")

    # -- resources, prompts, completion, logging (passthrough) ----------------------------

    async def list_resources(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        resources = await self._passthrough.resources(_principal(ctx))
        return types.ListResourcesResult(resources=[types.Resource.model_validate(r) for r in resources])

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        templates = await self._passthrough.resource_templates(_principal(ctx))
        return types.ListResourceTemplatesResult(
            resource_templates=[types.ResourceTemplate.model_validate(t) for t in templates]
        )

    async def list_prompts(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        prompts = await self._passthrough.prompts(_principal(ctx))
        return types.ListPromptsResult(prompts=[types.Prompt.model_validate(p) for p in prompts])

    async def read_resource(self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        with _as_mcp_error():
            result = await self._passthrough.read_resource(
                _principal(ctx), str(params.uri), _raw_meta(ctx), SessionRelay(ctx)
            )
        return types.ReadResourceResult.model_validate(result)

    async def get_prompt(self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams) -> types.GetPromptResult:
        with _as_mcp_error():
            result = await self._passthrough.get_prompt(
                _principal(ctx), params.name, params.arguments, _raw_meta(ctx), SessionRelay(ctx)
            )
        return types.GetPromptResult.model_validate(result)

    async def subscribe(self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
        with _as_mcp_error():
            await self._passthrough.subscribe(_principal(ctx), str(params.uri), _raw_meta(ctx), SessionRelay(ctx), on=True)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        with _as_mcp_error():
            await self._passthrough.subscribe(_principal(ctx), str(params.uri), _raw_meta(ctx), SessionRelay(ctx), on=False)
        return types.EmptyResult()

    async def complete(self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams) -> types.CompleteResult:
        request = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        request.pop("_meta", None)
        with _as_mcp_error():
            result = await self._passthrough.complete(_principal(ctx), request, _raw_meta(ctx), SessionRelay(ctx))
        return types.CompleteResult.model_validate(result)

    async def set_logging_level(self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
        with _as_mcp_error():
            await self._passthrough.set_log_level(_principal(ctx), params.level)
        return types.EmptyResult()


@contextmanager
def _as_mcp_error() -> Iterator[None]:
    """A RequestError from the gateway, as the JSON-RPC error the SDK writes."""
    try:
        yield
    except RequestError as exc:
        raise MCPError(exc.code, exc.message, exc.data) from None


def _principal(ctx: ServerRequestContext[Any]) -> str:
    request = ctx.request
    if request is None:
        return ANONYMOUS
    return str(request.scope.get(PRINCIPAL_SCOPE_KEY, ANONYMOUS))


def _raw_meta(ctx: ServerRequestContext[Any]) -> dict[str, Any]:
    params = ctx.params or {}
    meta = params.get("_meta") if isinstance(params, dict) else None
    return dict(meta) if isinstance(meta, dict) else {}
