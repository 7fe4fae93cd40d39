"""The MCP front: low-level SDK Server handlers that translate MCP requests to gateway calls."""

from __future__ import annotations

import fnmatch
import logging
import weakref
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp.shared.message import ServerMessageMetadata
from pydantic import BaseModel, ConfigDict, ValidationError

from .calls import CallPipeline, ToolCall, forwardable_meta, without_hop_keys
from .catalog import Catalog
from .errors import UnknownToolError, UpstreamError, UpstreamRpcError
from .principals import ANONYMOUS, PRINCIPAL_SCOPE_KEY
from .conventions.answers import Answer
from .upstreams.rpc import METHOD_NOT_FOUND, CallRelay, RelayRefused
from .upstreams.upstream import Upstream

logger = logging.getLogger(__name__)


# Resolves which tools a principal may see and call (None: all of them).
ToolFilter = Callable[[str], list[str] | None]


class GatewayServer(Server[Any]):
    """The SDK Server, advertising `tools.listChanged` (the catalog notifies live sessions)."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        if caps.tools is not None:
            caps = caps.model_copy(update={"tools": types.ToolsCapability(list_changed=True)})
        return caps


class Front:
    """Handlers of the gateway's MCP server; holds live sessions for list_changed."""

    def __init__(
        self,
        catalog: Catalog,
        pipeline: CallPipeline,
        upstreams: dict[str, Upstream],
        tool_globs: ToolFilter,
        *,
        version: str = "0.1.0",
    ) -> None:
        self._catalog = catalog
        self._pipeline = pipeline
        self._upstreams = upstreams
        self._tool_globs = tool_globs
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self.server = GatewayServer(
            "dex-mcp-gateway",
            version=version,
            instructions="Every tool behind this gateway declares its effect and approval in _meta "
            "(io.superdurable.dex/*); send io.superdurable.dex/idempotencyKey with every write.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_resource_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_completion=self._complete,
            on_set_logging_level=self._set_logging_level,
        )

    # -- tools ----------------------------------------------------------------------------

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        self._remember(ctx)
        principal = _principal(ctx)
        routes = await self._catalog.tools()
        tools = [types.Tool.model_validate(r.definition) for r in routes if self._may_use(principal, r.name)]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        self._remember(ctx)
        answer = await self.answer_tool_call(
            _principal(ctx), params.name, dict(params.arguments or {}), _raw_meta(ctx), ContextRelay(ctx)
        )
        return types.CallToolResult.model_validate(answer.to_wire())

    async def answer_tool_call(
        self, principal: str, name: str, arguments: dict[str, Any], meta: dict[str, Any], relay: CallRelay
    ) -> Answer:
        """One tools/call, whichever entry it came through; errors are MCPError (JSON-RPC errors)."""
        if not self._may_use(principal, name):
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {name!r}")
        call = ToolCall(principal=principal, name=name, arguments=arguments, meta=meta, relay=relay)
        try:
            return await self._pipeline.call(call)
        except UnknownToolError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        except MCPError:
            raise
        except Exception:
            logger.exception("tools/call %s failed inside the gateway", name)
            raise MCPError(types.INTERNAL_ERROR, "internal gateway error; see the gateway log") from None

    def _may_use(self, principal: str, tool: str) -> bool:
        globs = self._tool_globs(principal)
        return globs is None or any(fnmatch.fnmatchcase(tool, g) for g in globs)

    # -- resources and prompts (passthrough) ----------------------------------------------

    async def _list_resources(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        routes = await self._catalog.resources()
        return types.ListResourcesResult(resources=[types.Resource.model_validate(r.definition) for r in routes])

    async def _list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        routes = await self._catalog.resource_templates()
        return types.ListResourceTemplatesResult(
            resource_templates=[types.ResourceTemplate.model_validate(r.definition) for r in routes]
        )

    async def _read_resource(self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        upstream_name = await self._catalog.resource_upstream(uri)
        if upstream_name is None:
            raise MCPError(types.INVALID_PARAMS, f"no upstream serves resource {uri!r}")
        result = await self._forward(upstream_name, "resources/read", {"uri": uri}, ctx)
        return types.ReadResourceResult.model_validate(result)

    async def _list_prompts(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        routes = await self._catalog.prompts()
        return types.ListPromptsResult(prompts=[types.Prompt.model_validate(r.definition) for r in routes])

    async def _get_prompt(self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams) -> types.GetPromptResult:
        route = await self._catalog.prompt(params.name)
        if route is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown prompt {params.name!r}")
        args: dict[str, Any] = {"name": route.target}
        if params.arguments:
            args["arguments"] = params.arguments
        result = await self._forward(route.upstream, "prompts/get", args, ctx)
        return types.GetPromptResult.model_validate(result)

    async def _forward(self, upstream_name: str, method: str, params: dict[str, Any], ctx: ServerRequestContext[Any]) -> dict[str, Any]:
        upstream = self._upstreams[upstream_name]
        meta = forwardable_meta(_raw_meta(ctx))
        if meta:
            params["_meta"] = meta
        try:
            result = await upstream.request(method, params, relay=ContextRelay(ctx))
        except UpstreamRpcError as exc:
            raise MCPError(exc.code, exc.rpc_message, exc.data) from None
        except UpstreamError as exc:
            raise MCPError(types.INTERNAL_ERROR, f"{method} failed: {exc}") from None
        if "_meta" in result:
            result["_meta"] = without_hop_keys(result["_meta"]) or {}
        return result

    async def _subscribe(self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
        await self._forward_for_uri(str(params.uri), "resources/subscribe", ctx)
        return types.EmptyResult()

    async def _unsubscribe(self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        await self._forward_for_uri(str(params.uri), "resources/unsubscribe", ctx)
        return types.EmptyResult()

    async def _forward_for_uri(self, uri: str, method: str, ctx: ServerRequestContext[Any]) -> dict[str, Any]:
        upstream_name = await self._catalog.resource_upstream(uri)
        if upstream_name is None:
            raise MCPError(types.INVALID_PARAMS, f"no upstream serves resource {uri!r}")
        return await self._forward(upstream_name, method, {"uri": uri}, ctx)

    async def _complete(self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams) -> types.CompleteResult:
        ref = params.ref.model_dump(by_alias=True, mode="json", exclude_none=True)
        if ref.get("type") == "ref/prompt":
            route = await self._catalog.prompt(str(ref.get("name")))
            if route is None:
                raise MCPError(types.INVALID_PARAMS, f"unknown prompt {ref.get('name')!r}")
            upstream_name, ref = route.upstream, {**ref, "name": route.target}
        else:
            upstream_name = await self._catalog.resource_upstream(str(ref.get("uri")))
            if upstream_name is None:
                raise MCPError(types.INVALID_PARAMS, f"no upstream serves resource {ref.get('uri')!r}")
        request = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        request.pop("_meta", None)
        result = await self._forward(upstream_name, "completion/complete", {**request, "ref": ref}, ctx)
        return types.CompleteResult.model_validate(result)

    async def _set_logging_level(self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
        """Pass the level on to every upstream that logs; those that do not are skipped."""
        async def set_level(upstream: Upstream) -> None:
            try:
                await upstream.request("logging/setLevel", {"level": params.level})
            except UpstreamError as exc:
                logger.debug("upstream %s: logging/setLevel not applied: %s", upstream.name, exc)

        async with anyio.create_task_group() as tg:
            for upstream in self._upstreams.values():
                tg.start_soon(set_level, upstream)
        return types.EmptyResult()

    # -- notifications --------------------------------------------------------------------

    def _remember(self, ctx: ServerRequestContext[Any]) -> None:
        # ctx.session lives for one request; the connection under it lives as long as the
        # client's MCP session, and its standalone stream is where list_changed goes. The SDK
        # (2.3) exposes it only as ServerSession._connection.
        connection = getattr(ctx.session, "_connection", None)
        if connection is not None:
            self._connections.add(connection)

    async def notify_tools_changed(self) -> None:
        """Tell every live session that the aggregated tool list changed."""
        for connection in list(self._connections):
            try:
                await connection.send_tool_list_changed()
            except Exception:  # noqa: BLE001 - a closed session just misses the notice
                logger.debug("could not notify a session of a tool list change", exc_info=True)


def _principal(ctx: ServerRequestContext[Any]) -> str:
    request = ctx.request
    if request is None:
        return ANONYMOUS
    return str(request.scope.get(PRINCIPAL_SCOPE_KEY, ANONYMOUS))


def _raw_meta(ctx: ServerRequestContext[Any]) -> dict[str, Any]:
    params = ctx.params or {}
    meta = params.get("_meta") if isinstance(params, dict) else None
    return dict(meta) if isinstance(meta, dict) else {}


class _AnyResult(BaseModel):
    """A client's answer to a relayed request, kept as it came (the SDK validates it by method)."""

    model_config = ConfigDict(extra="allow")


class ContextRelay:
    """Sends what an upstream says during one request back to the client that made it."""

    def __init__(self, ctx: ServerRequestContext[Any]) -> None:
        self._ctx = ctx
        self._token = (ctx.meta or {}).get("progress_token")

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self._token is None:
            return
        try:
            await self._ctx.session.send_progress_notification(
                self._token, progress, total, message, related_request_id=self._ctx.request_id
            )
        except Exception:  # noqa: BLE001 - a lost progress notice must not fail the call
            logger.debug("progress notification dropped", exc_info=True)

    async def log(self, params: dict[str, Any]) -> None:
        level = params.get("level")
        try:
            await self._ctx.session.send_log_message(
                level, params.get("data"), params.get("logger"), related_request_id=self._ctx.request_id
            )
        except Exception:  # noqa: BLE001 - a lost log line must not fail the call
            logger.debug("log notification dropped", exc_info=True)

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        try:
            request = types.server_request_adapter.validate_python(
                {"method": method, **({"params": params} if params is not None else {})}
            )
        except ValidationError:
            raise RelayRefused(METHOD_NOT_FOUND, f"{method} cannot be relayed by the gateway") from None
        try:
            result = await self._ctx.session.send_request(
                request, _AnyResult, metadata=ServerMessageMetadata(related_request_id=self._ctx.request_id)
            )
        except NoBackChannelError:
            raise RelayRefused.no_session(method) from None
        except MCPError as exc:
            raise RelayRefused(exc.error.code, exc.error.message) from None
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
