#!/usr/bin/env python3
"""The project's reference MCP server for the conformance suites, on the official Python SDK 2.x
(low-level `Server`): everything `@modelcontextprotocol/conformance` 0.1.16 (`--suite all`) and
0.2.0-alpha.12 (`--requirements 2025-11-25` and `--requirements 2026-07-28`, tasks extension
included) call on a server, in both protocol eras.

* Handshake era (2024-11-05 ... 2025-11-25): stateful Streamable HTTP sessions, server-to-client
  requests (sampling, elicitation, roots) on the session, `logging/setLevel` per session,
  `resources/subscribe`, list changes and resource updates on the standalone GET stream, an
  in-memory event store (SSE priming events, `retry:`, resumption with Last-Event-ID).
* 2026-07-28: `server/discover`, per-request `_meta` envelope, multi-round-trip
  `input_required` results (requestState sealed by the SDK's `RequestStateBoundary`), caching
  hints, `subscriptions/listen`, `Mcp-Param-*` headers, the tasks extension (the tools of
  examples/servers/tasks_server.py).
* `--handshake-only`: 2026-07-28 requests are refused as a handshake-era server refuses an
  unknown protocol version (HTTP 400), so clients (and the gateway's `protocol: auto`) fall back
  to `initialize`.
* `--asks-on-session`: the asking tools ask through the session in both eras, the way a tool
  written with the SDK's `ctx.elicit(...)` / `ctx.session.create_message(...)` does: they work on
  the handshake era and fail on 2026-07-28 ("no back-channel"), while the server serves both eras.

    python conformance/reference_server.py [--port 0] [--handshake-only | --asks-on-session] [--transport stdio]
        -> "listening on http://127.0.0.1:N/mcp" on stderr (loopback only)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, PromptsListChanged, ResourceUpdated, ToolsListChanged
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ConfigDict

import reference_fixtures as fx
from reference_transports import serve_http, serve_stdio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "servers"))
from example_runtime import ExecutionLog, state_dir  # noqa: E402
from tasks_server import EXT as TASKS_EXT, SUPPORT as TASK_TOOLS, TOOLS as TASK_TOOL_DEFS, TasksServer  # noqa: E402

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
# The capability each kind of question needs from the client.
NEEDS = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}


class _Any(BaseModel):
    model_config = ConfigDict(extra="allow")


@dataclass
class _Session:
    """What a handshake-era session set: its log level and its resource subscriptions."""

    level: str = "debug"
    subscriptions: set[str] = field(default_factory=set)


class Reference:
    def __init__(self, log: ExecutionLog, *, asks_on_session: bool = False) -> None:
        self.asks_on_session = asks_on_session  # ask through the session in both eras (ctx.elicit style)
        self.bus = InMemorySubscriptionBus()
        self.tasks = TasksServer(log)
        self.dynamic_tool = False
        self.dynamic_prompt = False
        self.sessions: weakref.WeakKeyDictionary[Any, _Session] = weakref.WeakKeyDictionary()

    # -- sessions (handshake era) ------------------------------------------------------------

    def session(self, ctx: ServerRequestContext[Any]) -> _Session | None:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return None
        connection = ctx.session._connection  # noqa: SLF001 - the SDK keeps the connection there
        return self.sessions.setdefault(connection, _Session())

    async def remember(self, ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        self.session(ctx)
        return await call_next(ctx)

    async def tell_sessions(self, method: str, params: dict[str, Any] | None = None, uri: str | None = None) -> None:
        for connection, state in list(self.sessions.items()):
            if uri is not None and uri not in state.subscriptions:
                continue
            with contextlib.suppress(Exception):  # a closed session just misses the notice
                await connection.notify(method, params)

    # -- tools -------------------------------------------------------------------------------

    async def list_tools(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        tools = [*fx.TOOLS, *([fx.DYNAMIC_TOOL] if self.dynamic_tool else [])]
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        tasks = [{k: v for k, v in t.items() if k != "execution"} if modern else t for t in TASK_TOOL_DEFS]
        return types.ListToolsResult.model_validate({"tools": [*tools, *tasks]})

    async def call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        result = await self.run_tool(ctx, params)
        return types.CallToolResult.model_validate(result) if isinstance(result, dict) else result

    async def run_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        name, args = params.name, dict(params.arguments or {})
        if name == "test_simple_text":
            return fx.text("This is a simple text response for testing.")
        if name == "test_image_content":
            return {"content": [{"type": "image", "data": fx.PNG, "mimeType": "image/png"}]}
        if name == "test_audio_content":
            return {"content": [{"type": "audio", "data": fx.WAV, "mimeType": "audio/wav"}]}
        if name == "test_embedded_resource":
            return {"content": [{"type": "resource", "resource": {
                "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content."}}]}
        if name == "test_multiple_content_types":
            return {"content": [
                {"type": "text", "text": "Multiple content types test:"},
                {"type": "image", "data": fx.PNG, "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "test://mixed-content-resource", "mimeType": "application/json",
                                                  "text": '{"test":"data","value":123}'}}]}
        if name in ("test_tool_with_logging", "test_logging_tool"):
            return await self.logging_tool(ctx, name)
        if name == "test_tool_with_progress":
            token = (ctx.meta or {}).get("progress_token")
            for step, value in enumerate((0, 50, 100)):
                if step:
                    await anyio.sleep(0.05)
                if token is not None:
                    await ctx.session.send_progress_notification(
                        token, value, 100, f"Completed step {value} of 100", related_request_id=ctx.request_id)
            return fx.text(str(token if token is not None else 0))
        if name == "test_error_handling":
            return fx.text("This tool intentionally returns an error for testing", error=True)
        if name == "test_reconnection":
            if ctx.close_sse_stream is not None:
                await ctx.close_sse_stream()
            await anyio.sleep(0.1)
            return fx.text("Reconnection test completed successfully.")
        if name == "json_schema_2020_12_tool":
            return fx.text(f"JSON Schema 2020-12 tool called with: {json.dumps(args)}")
        if name == "test_protocol":
            return fx.text(ctx.protocol_version)
        if name == "test_custom_header_tool":
            return fx.text(f"region: {args.get('region')}")
        if name == "test_missing_capability":
            self.require(ctx, "sampling")
            return fx.text("the client declared sampling")
        if name in ("test_trigger_tool_change", "test_trigger_prompt_change"):
            return await self.trigger_change(name)
        if name == "test_trigger_resource_update":
            uri = str(args.get("uri") or "test://watched-resource")
            await self.bus.publish(ResourceUpdated(uri=uri))
            await self.tell_sessions("notifications/resources/updated", {"uri": uri}, uri=uri)
            return fx.text(f"updated {uri}")
        if name == "test_dynamic_tool" and self.dynamic_tool:
            return fx.text("the dynamic tool ran")
        if fx.questions(name, args, 0) is not None or name == "test_input_required_result_capabilities":
            return await self.asking_tool(ctx, params)
        raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {name}")

    async def logging_tool(self, ctx: ServerRequestContext[Any], name: str) -> dict[str, Any]:
        if name == "test_tool_with_logging":
            lines = [("info", "Tool execution started"), ("info", "Tool processing data"), ("info", "Tool execution completed")]
        else:
            lines = [(level, f"a {level} message") for level in LEVELS[:5]]
        session = self.session(ctx)
        for step, (level, data) in enumerate(lines):
            if step:
                await anyio.sleep(0.05)
            if session is None or LEVELS.index(level) >= LEVELS.index(session.level):
                await ctx.session.send_log_message(level, data, "conformance", related_request_id=ctx.request_id)
        return fx.text("Tool with logging executed successfully")

    async def trigger_change(self, name: str) -> dict[str, Any]:
        if name == "test_trigger_tool_change":
            self.dynamic_tool = not self.dynamic_tool
            await self.bus.publish(ToolsListChanged())
            await self.tell_sessions("notifications/tools/list_changed")
            return fx.text(f"test_dynamic_tool {'added' if self.dynamic_tool else 'removed'}")
        self.dynamic_prompt = not self.dynamic_prompt
        await self.bus.publish(PromptsListChanged())
        await self.tell_sessions("notifications/prompts/list_changed")
        return fx.text(f"test_dynamic_prompt {'added' if self.dynamic_prompt else 'removed'}")

    def require(self, ctx: ServerRequestContext[Any], capability: str) -> None:
        caps = ctx.session.client_capabilities
        if caps is None or getattr(caps, capability, None) is None:
            raise MCPError(types.MISSING_REQUIRED_CLIENT_CAPABILITY, "Missing required client capability",
                           {"requiredCapabilities": {capability: {}}})

    # -- asking the client: input_required (2026-07-28) or requests on the session -----------

    def questions(self, ctx: ServerRequestContext[Any], name: str, args: dict[str, Any], round_: int) -> dict[str, Any] | None:
        if name == "test_input_required_result_capabilities":
            if round_:
                return None
            caps = ctx.session.client_capabilities
            asked = {"a_question": fx.NAME, "a_sample": fx.sample("Say hello"), "the_roots": fx.ROOTS}
            return {k: q for k, q in asked.items() if caps is not None and getattr(caps, NEEDS[q["method"]], None) is not None}
        asked = fx.questions(name, args, round_)
        if asked is not None and name != "test_input_required_result_multiple_inputs":
            for question in asked.values():
                self.require(ctx, NEEDS[question["method"]])
        return asked

    async def asking_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        name, args = params.name, dict(params.arguments or {})
        answers = await self.answers(ctx, name, args, params)
        if isinstance(answers, types.InputRequiredResult):
            return answers
        return fx.text(_summary(name, answers))

    async def answers(self, ctx: ServerRequestContext[Any], name: str, args: dict[str, Any], params: Any) -> Any:
        """Every round's answers; on 2026-07-28 an InputRequiredResult while some are missing."""
        if self.asks_on_session or ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            collected: dict[str, Any] = {}
            round_ = 0
            while (asked := self.questions(ctx, name, args, round_)) is not None:
                for key, question in asked.items():
                    collected[key] = await self.ask(ctx, question)
                round_ += 1
            return collected
        state = json.loads(params.request_state) if params.request_state else {"round": 0, "answers": {}}
        given = {k: _wire(v) for k, v in (params.input_responses or {}).items()}
        round_, collected = int(state["round"]), dict(state["answers"])
        while (asked := self.questions(ctx, name, args, round_)) is not None:
            if asked and not all(key in given for key in asked):
                seal = json.dumps({"round": round_, "answers": collected, "ok": "state-ok"})
                return types.InputRequiredResult.model_validate({"inputRequests": asked, "requestState": seal})
            collected.update({key: given[key] for key in asked})
            round_ += 1
            given = {}
        if params.request_state:
            collected["state"] = state.get("ok")
        return collected

    async def ask(self, ctx: ServerRequestContext[Any], question: dict[str, Any]) -> Any:
        request = types.server_request_adapter.validate_python(question)
        answer = await ctx.session.send_request(request, _Any, metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
        return answer.model_dump(by_alias=True, mode="json", exclude_none=True)

    # -- resources, prompts, completion, logging ----------------------------------------------

    async def list_resources(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult.model_validate({"resources": fx.RESOURCES})

    async def list_templates(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult.model_validate({"resourceTemplates": fx.TEMPLATES})

    async def read_resource(self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        contents = fx.read_resource(str(params.uri))
        if contents is None:
            raise MCPError(types.INVALID_PARAMS, "Resource not found", {"uri": str(params.uri)})
        return types.ReadResourceResult.model_validate({"contents": [contents]})

    async def subscribe(self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams) -> types.EmptyResult:
        if (session := self.session(ctx)) is not None:
            session.subscriptions.add(str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        if (session := self.session(ctx)) is not None:
            session.subscriptions.discard(str(params.uri))
        return types.EmptyResult()

    async def list_prompts(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListPromptsResult:
        prompts = [*fx.PROMPTS, *([fx.DYNAMIC_PROMPT] if self.dynamic_prompt else [])]
        return types.ListPromptsResult.model_validate({"prompts": prompts})

    async def get_prompt(self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams) -> Any:
        if params.name == "test_input_required_result_prompt":
            question = {"user_context": fx.elicit("What context should the prompt use?",
                                                  {"context": {"type": "string"}}, ["context"])}
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                answer = (params.input_responses or {}).get("user_context")
                if answer is None:
                    return types.InputRequiredResult.model_validate({"inputRequests": question})
                answer = _wire(answer)
            else:
                answer = await self.ask(ctx, question["user_context"])
            context = (answer.get("content") or {}).get("context", "")
            return types.GetPromptResult.model_validate(
                {"messages": [{"role": "user", "content": {"type": "text", "text": f"Use this context: {context}"}}]})
        messages = fx.prompt_messages(params.name, dict(params.arguments or {}))
        if messages is None or (params.name == "test_dynamic_prompt" and not self.dynamic_prompt):
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {params.name}")
        return types.GetPromptResult.model_validate({"messages": messages})

    async def complete(self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams) -> types.CompleteResult:
        return types.CompleteResult.model_validate({"completion": {"values": [], "total": 0, "hasMore": False}})

    async def set_level(self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams) -> types.EmptyResult:
        if (session := self.session(ctx)) is not None:
            session.level = params.level
        return types.EmptyResult()

    # -- tasks (the tasks extension and 2025-11-25 core tasks) ---------------------------------

    async def tasks_middleware(self, ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        params = ctx.params if isinstance(ctx.params, dict) else {}
        is_task_call = ctx.method == "tools/call" and params.get("name") in TASK_TOOLS
        if not is_task_call and not ctx.method.startswith("tasks/"):
            return await call_next(ctx)
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        takes = modern and TASKS_EXT in ((meta.get(CAPS_KEY) or {}).get("extensions") or {})
        if is_task_call:
            return await self.tasks.call(params, meta, modern, takes)
        return await self.tasks.task_method(ctx, params, modern, takes)

    def server(self) -> Server[Any]:
        warnings.simplefilter("ignore", MCPDeprecationWarning)  # logging/setLevel: still the handshake era's
        server = _ReferenceServer(
            "dex-conformance-reference", version="1.0.0",
            on_list_tools=self.list_tools, on_call_tool=self.call_tool,
            on_list_resources=self.list_resources, on_list_resource_templates=self.list_templates,
            on_read_resource=self.read_resource, on_subscribe_resource=self.subscribe,
            on_unsubscribe_resource=self.unsubscribe, on_subscriptions_listen=ListenHandler(self.bus),
            on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt, on_completion=self.complete,
            on_set_logging_level=self.set_level,
            cache_hints={method: CacheHint(ttl_ms=0, scope="public") for method in CACHEABLE_METHODS},
        )
        boundary = RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience="dex-conformance-reference")
        server.middleware.extend([self.remember, boundary, self.tasks_middleware])
        server.extensions[TASKS_EXT] = {}
        return server


class _ReferenceServer(Server[Any]):
    """Advertises list changes on the handshake era too (the SDK derives them from handlers at 2026)."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        if kwargs.get("protocol_version") in MODERN_PROTOCOL_VERSIONS:
            return caps
        return caps.model_copy(update={
            "tools": types.ToolsCapability(list_changed=True),
            "prompts": types.PromptsCapability(list_changed=True),
            "resources": types.ResourcesCapability(subscribe=True, list_changed=True),
        })


def _wire(answer: Any) -> dict[str, Any]:
    return answer.model_dump(by_alias=True, mode="json", exclude_none=True) if isinstance(answer, BaseModel) else dict(answer)


def _summary(name: str, answers: dict[str, Any]) -> str:
    if name == "test_sampling":
        content = (answers.get("sampling") or {}).get("content") or {}
        return f"LLM response: {content.get('text', 'No response') if isinstance(content, dict) else content}"
    if name == "test_elicitation":
        answer = answers.get("response") or {}
        return f"User response: action={answer.get('action')}, content={json.dumps(answer.get('content') or {})}"
    if name.startswith("test_elicitation_sep"):
        answer = answers.get("form") or {}
        return f"Elicitation completed: action={answer.get('action')}, content={json.dumps(answer.get('content') or {})}"
    if name == "test_input_required_result_elicitation":
        return f"Hello, {((answers.get('user_name') or {}).get('content') or {}).get('name', '?')}!"
    state = " (state-ok)" if answers.get("state") == "state-ok" else ""
    return f"{name} completed with {len([k for k in answers if k != 'state'])} answer(s){state}: {json.dumps(answers)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=("http", "stdio"), default="http")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (127.0.0.1 only)")
    parser.add_argument("--handshake-only", action="store_true", help="refuse 2026-07-28 requests")
    parser.add_argument("--asks-on-session", action="store_true",
                        help="ask through the session in both eras (as ctx.elicit does)")
    args = parser.parse_args()
    server = Reference(ExecutionLog(state_dir() / "executions.jsonl", "reference"),
                       asks_on_session=args.asks_on_session).server()
    if args.transport == "stdio":
        anyio.run(serve_stdio, server)
    else:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve_http(server, args.port, args.handshake_only))


if __name__ == "__main__":
    main()
