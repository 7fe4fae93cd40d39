"""An MCP server that breaks the Dex conventions on purpose, one rule per tool, for
`dex-gateway check` tests. Everything else about each tool is correct, so exactly one
rule fails per tool:

| tool              | declares                  | breaks                                              |
| ----------------- | ------------------------- | --------------------------------------------------- |
| ok_read           | read                      | nothing (control)                                   |
| bad_effect        | effect "maybe"            | effect value                                        |
| bad_approval      | read, approval "always"   | approval value                                      |
| keyless_write     | idempotent_write          | runs without an idempotency key                     |
| double_write      | non_idempotent_write      | a retry with the same key runs again, new answer    |
| key_reuse_write   | non_idempotent_write      | the same key with other arguments is accepted       |
| unknown_not_error | non_idempotent_write      | outcome unknown with isError false                  |
| bad_outcome       | idempotent_write          | outcome value "maybe_later"                         |

    python examples/servers/broken_server.py --transport stdio | --transport http --port 0
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from example_runtime import (
    APPROVAL_KEY,
    EFFECT_KEY,
    EXECUTIONS_FILE,
    IDEMPOTENCY_KEY,
    OUTCOME_KEY,
    ExecutionLog,
    ToolSpec,
    build_parser,
    fingerprint,
    request_key,
    serve,
    state_dir,
    text_result,
)

READ, IDEMPOTENT, NON_IDEMPOTENT = "read", "idempotent_write", "non_idempotent_write"
ITEM = {"item": {"type": "string"}, "count": {"type": "integer"}}


@dataclass(frozen=True)
class Behaviour:
    """How a tool treats keys; each flag switched off breaks one rule."""

    requires_key: bool = True
    replays: bool = True
    binds_arguments: bool = True
    answer_meta: dict[str, Any] | None = None
    answer_is_error: bool = False


class BrokenServer:
    def __init__(self, directory: Path) -> None:
        self.log = ExecutionLog(directory / EXECUTIONS_FILE, "broken")
        # Per-process fence (key -> fingerprint, answer): durability is not what is tested here.
        self.fence: dict[str, tuple[str, types.CallToolResult | None]] = {}
        def spec(name: str, meta: dict[str, Any], description: str) -> ToolSpec:
            return ToolSpec(name, description, ITEM, ("item",), meta)

        self.tools: dict[str, tuple[ToolSpec, Behaviour | None]] = {
            s.name: (s, b)
            for s, b in (
                (spec("ok_read", {EFFECT_KEY: READ}, "A correct read."), None),
                (spec("bad_effect", {EFFECT_KEY: "maybe"}, "Declares an effect value outside the three."), None),
                (spec("bad_approval", {EFFECT_KEY: READ, APPROVAL_KEY: "always"},
                      "Declares an approval value other than recommended."), None),
                (spec("keyless_write", {EFFECT_KEY: IDEMPOTENT}, "Runs without an idempotency key."),
                 Behaviour(requires_key=False)),
                (spec("double_write", {EFFECT_KEY: NON_IDEMPOTENT}, "Runs again on a retry with the same key."),
                 Behaviour(replays=False)),
                (spec("key_reuse_write", {EFFECT_KEY: NON_IDEMPOTENT}, "Accepts a key with other arguments."),
                 Behaviour(binds_arguments=False)),
                (spec("unknown_not_error", {EFFECT_KEY: NON_IDEMPOTENT}, "Says outcome unknown with isError false."),
                 Behaviour(answer_meta={OUTCOME_KEY: "unknown"})),
                (spec("bad_outcome", {EFFECT_KEY: IDEMPOTENT}, "Says an outcome value outside the two."),
                 Behaviour(answer_meta={OUTCOME_KEY: "maybe_later"}, answer_is_error=True)),
            )
        }

    def _execute(self, name: str, key: str | None, args: dict[str, Any], behaviour: Behaviour | None
                 ) -> types.CallToolResult:
        n = self.log.record(name, key, args)
        is_error = behaviour.answer_is_error if behaviour else False
        meta = behaviour.answer_meta if behaviour else None
        return text_result(f"{name} run #{n} on {args.get('item')}", is_error=is_error, meta=meta)

    async def list_tools(self, ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[s.to_tool() for s, _ in self.tools.values()])

    async def call_tool(self, ctx: ServerRequestContext[Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        entry = self.tools.get(params.name)
        if entry is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool: {params.name}")
        spec, behaviour = entry
        args = dict(params.arguments or {})
        key = request_key(params)
        if behaviour is None or key is None:
            if behaviour is not None and behaviour.requires_key:
                return text_result(f'{spec.name} needs "{IDEMPOTENCY_KEY}" in the request _meta', is_error=True,
                                   meta={OUTCOME_KEY: "rejected"})
            return self._execute(spec.name, key, args, behaviour)
        print_ = fingerprint(spec.name, args)
        if key in self.fence:
            first_print, answer = self.fence[key]
            if first_print != print_ and behaviour.binds_arguments:
                return text_result(f"{spec.name}: key {key!r} was used with other arguments", is_error=True,
                                   meta={OUTCOME_KEY: "rejected"})
            if answer is not None:
                return answer
        answer = self._execute(spec.name, key, args, behaviour)
        self.fence[key] = (print_, answer if behaviour.replays else None)
        return answer

    def server(self) -> Server[Any]:
        return Server("dex-example-broken", version="0.1.0", on_list_tools=self.list_tools,
                      on_call_tool=self.call_tool)


def main() -> None:
    args = build_parser("Dex example upstream that breaks one convention per tool.").parse_args()
    serve(BrokenServer(state_dir()).server(), args)


if __name__ == "__main__":
    main()
