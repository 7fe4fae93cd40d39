"""A test upstream that serves the resources and resource templates named on its command line.

    python tests/support/resource_server.py --transport stdio --label first \
        --resource notes://7 --template 'notes://{id}'

Reading any URI it serves (a listed one, or one a template of it matches) answers the text
`<label> served <uri>`, so a test sees which upstream a gateway routed the read to.

With `--updates` it also accepts `resources/subscribe` and serves two tools: `touch` (`uri`) sends
`notifications/resources/updated` for it on the caller's session; `chatter` sends one log message at
each of `info` and `error` during the call (what a session's `logging/setLevel` lets through).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(_ROOT), str(_ROOT / "examples" / "servers")]

import mcp_types as types  # noqa: E402
from example_runtime import build_parser, serve  # noqa: E402
from mcp.server import Server, ServerRequestContext  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

SCRIPT_PATH = Path(__file__).resolve()


def served_text(label: str, uri: str) -> str:
    return f"{label} served {uri}"


class ResourceServer:
    def __init__(self, label: str, resources: list[str], templates: list[str]) -> None:
        self.label, self.resources, self.templates = label, resources, templates
        self.patterns = [re.compile(".+?".join(re.escape(p) for p in re.split(r"\{[^}]*\}", t))) for t in templates]

    async def list_resources(self, ctx: ServerRequestContext[Any],
                             params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(name=f"r{i}", uri=uri, mime_type="text/plain") for i, uri in enumerate(self.resources)])

    async def list_resource_templates(self, ctx: ServerRequestContext[Any],
                                      params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(name=f"t{i}", uri_template=t, mime_type="text/plain")
            for i, t in enumerate(self.templates)])

    async def read_resource(self, ctx: ServerRequestContext[Any],
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri not in self.resources and not any(p.fullmatch(uri) for p in self.patterns):
            raise MCPError(types.INVALID_PARAMS, f"unknown resource: {uri}")
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, text=served_text(self.label, uri), mime_type="text/plain")])

    def server(self, updates: bool = False) -> Server[Any]:
        more: dict[str, Any] = {}
        if updates:
            more = {"on_subscribe_resource": self.subscribe, "on_unsubscribe_resource": self.subscribe,
                    "on_list_tools": self.list_tools, "on_call_tool": self.call_tool}
        return Server("dex-test-resources", version="0.1.0", on_list_resources=self.list_resources,
                      on_list_resource_templates=self.list_resource_templates, on_read_resource=self.read_resource,
                      **more)

    async def subscribe(self, ctx: ServerRequestContext[Any], params: Any) -> types.EmptyResult:
        return types.EmptyResult()

    async def list_tools(self, ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        touch = {"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]}
        return types.ListToolsResult(tools=[
            types.Tool(name="touch", description="Tell the session the resource changed", input_schema=touch,
                       annotations=types.ToolAnnotations(read_only_hint=True)),
            types.Tool(name="chatter", description="Log at info and error", input_schema={"type": "object"},
                       annotations=types.ToolAnnotations(read_only_hint=True))])

    async def call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "touch":
            uri = str((params.arguments or {}).get("uri"))
            await ctx.session.send_resource_updated(uri)
            return types.CallToolResult(content=[types.TextContent(text=f"touched {uri}")])
        for level in ("info", "error"):
            await ctx.session.send_log_message(level, f"chatter at {level}", related_request_id=ctx.request_id)
        return types.CallToolResult(content=[types.TextContent(text="chattered")])


def main() -> None:
    parser = build_parser("Test upstream: the resources and templates named on the command line.")
    parser.add_argument("--label", default="resources")
    parser.add_argument("--resource", action="append", default=[])
    parser.add_argument("--template", action="append", default=[])
    parser.add_argument("--updates", action="store_true", help="subscriptions, and the touch/chatter tools")
    args = parser.parse_args()
    serve(ResourceServer(args.label, args.resource, args.template).server(args.updates), args)


if __name__ == "__main__":
    main()
