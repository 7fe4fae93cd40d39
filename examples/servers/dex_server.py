"""A small "payments" MCP server that follows the Dex MCP conventions.

Tools declare `io.superdurable.dex/effect` (and `approval: recommended` on some); declared
writes require the client's `io.superdurable.dex/idempotencyKey` and are fenced on disk, so
a retried key returns the first answer even after this server restarts. Every real
execution is appended (fsynced) to `<state dir>/executions.jsonl` for tests to count.

    python examples/servers/dex_server.py --transport stdio
    python examples/servers/dex_server.py --transport http --port 0 [--json-response] [--stateful] [--page-size N]

State dir: $DEX_EXAMPLE_STATE_DIR (default: a new temp dir). `hold_*` tools block until
the file `<state dir>/release-<gate>` exists. A retry whose key is still running waits for
the first answer, at most $DEX_EXAMPLE_PENDING_WAIT_S seconds (30), then answers `unknown`.
Writes over a crash: a retry of an interrupted `idempotent_write` runs again; of an
interrupted `non_idempotent_write`, answers `outcome: unknown`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
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
    FileFence,
    ToolSpec,
    build_parser,
    fingerprint,
    paginate,
    request_key,
    result_from_wire,
    result_to_wire,
    serve,
    state_dir,
    text_result,
    wait_for_file,
)

READ, IDEMPOTENT, NON_IDEMPOTENT = "read", "idempotent_write", "non_idempotent_write"
REFUND_LIMIT = 500
REJECTED_ERROR_CODE = -32050  # an application error code, outside the JSON-RPC reserved range
PENDING_WAIT_ENV = "DEX_EXAMPLE_PENDING_WAIT_S"
POLICY_TEXT = (
    "Refunds up to 500 are granted on request; larger refunds need a person.\n"
    "Payments are final once sent; a payment whose outcome is unknown must be checked, not repeated.\n"
)

Handler = Callable[[dict[str, Any], str | None, ServerRequestContext[Any]], Awaitable[types.CallToolResult]]


def replay(answer: dict[str, Any]) -> types.CallToolResult:
    if "error" in answer:
        error = answer["error"]
        raise MCPError(error["code"], error["message"], error.get("data"))
    return result_from_wire(answer)


def _meta(effect: str, approval: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {EFFECT_KEY: effect}
    if approval:
        meta[APPROVAL_KEY] = "recommended"
    return meta


STRING = {"type": "string"}
NUMBER = {"type": "number"}
INTEGER = {"type": "integer"}
GATE = {"type": "string", "description": "blocks until <state dir>/release-<gate> exists"}
CRASH_PROPS = {
    "tag": {"type": "string", "description": "groups executions for crash_times"},
    "crash_times": {"type": "integer", "description": "crash only the first N executions with this tag (0: always)"},
}


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    effect: str
    handler: Handler


class PaymentsServer:
    """The tools and their state; one instance per process."""

    def __init__(self, directory: Path, page_size: int) -> None:
        self.dir = directory
        self.page_size = page_size
        self.log = ExecutionLog(directory / EXECUTIONS_FILE, "payments")
        self.fence = FileFence(directory)
        self.pending_wait_s = float(os.environ.get(PENDING_WAIT_ENV, "30"))
        self.tools = {tool.spec.name: tool for tool in self._tools()}

    def _tools(self) -> list[Tool]:
        def tool(name: str, effect: str, description: str, properties: dict[str, Any], required: tuple[str, ...],
                 handler: Handler, approval: bool = False) -> Tool:
            return Tool(ToolSpec(name, description, properties, required, _meta(effect, approval)), effect, handler)

        return [
            tool("get_balance", READ, "Balance of an account.", {"account": STRING}, ("account",), self.get_balance),
            tool("list_payments", READ, "Payments sent so far, optionally from one account.",
                 {"account": STRING}, (), self.list_payments),
            tool("set_memo", IDEMPOTENT, "Set the memo of a payment (setting it again changes nothing).",
                 {"payment_id": STRING, "memo": STRING}, ("payment_id", "memo"), self.set_memo),
            tool("refund", NON_IDEMPOTENT, f"Refund an order. Over {REFUND_LIMIT} is refused.",
                 {"order": STRING, "amount": NUMBER}, ("order", "amount"), self.refund, approval=True),
            tool("send_payment", NON_IDEMPOTENT, "Send money to someone.",
                 {"to": STRING, "amount": NUMBER, "account": STRING}, ("to", "amount"), self.send_payment),
            tool("close_account", NON_IDEMPOTENT, "Close an account (always refused: needs a person).",
                 {"account": STRING}, ("account",), self.close_account, approval=True),
            tool("settle_uncertain", NON_IDEMPOTENT, "Settle a payment with a bank that never confirms.",
                 {"payment_id": STRING}, ("payment_id",), self.settle_uncertain),
            tool("long_report", READ, "A report built in steps, with progress notifications.",
                 {"steps": INTEGER, "step_seconds": NUMBER}, ("steps",), self.long_report),
            tool("sleep", READ, "Sleep for some seconds, then answer.", {"seconds": NUMBER}, ("seconds",),
                 self.sleep),
            tool("statement", READ, "An account statement of about `size_bytes` bytes of text (a large result).",
                 {"size_bytes": INTEGER}, ("size_bytes",), self.statement),
            tool("hold_payment", NON_IDEMPOTENT, "Record a payment, then wait for its gate to open.",
                 {"gate": GATE}, ("gate",), self._hold("hold_payment")),
            tool("hold_memo", IDEMPOTENT, "Record a memo, then wait for its gate to open.",
                 {"gate": GATE}, ("gate",), self._hold("hold_memo")),
            tool("crash_read", READ, "Record an execution, then exit the server process.", CRASH_PROPS, (),
                 self._crash("crash_read")),
            tool("crash_memo", IDEMPOTENT, "Record an execution, then exit the server process.", CRASH_PROPS, (),
                 self._crash("crash_memo")),
            tool("crash_payment", NON_IDEMPOTENT, "Record an execution, then exit the server process.",
                 CRASH_PROPS, (), self._crash("crash_payment")),
        ]

    # -- MCP handlers ---------------------------------------------------------------------

    async def list_tools(self, ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return paginate([t.spec.to_tool() for t in self.tools.values()], params, self.page_size)

    async def call_tool(self, ctx: ServerRequestContext[Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = self.tools.get(params.name)
        if tool is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool: {params.name}")
        arguments = dict(params.arguments or {})
        missing = tool.spec.missing_arguments(arguments)
        if missing:
            return text_result(f"{tool.spec.name}: missing argument(s): {', '.join(missing)}", is_error=True)
        key = request_key(params)
        if tool.effect == READ:
            return await tool.handler(arguments, key, ctx)
        if key is None:
            return text_result(
                f"{tool.spec.name} was not run: its effect is {tool.effect}, so it needs an idempotency key. "
                f'Send a unique key in the request _meta as "{IDEMPOTENCY_KEY}", the same key on every retry '
                "of this call.",
                is_error=True, meta={OUTCOME_KEY: "rejected"})
        return await self._fenced(tool, arguments, key, ctx)

    async def _fenced(self, tool: Tool, arguments: dict[str, Any], key: str,
                      ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        print_ = fingerprint(tool.spec.name, arguments)
        # A manual deadline, not a cancel scope: it bounds only the waiting, never the execution.
        deadline = time.monotonic() + self.pending_wait_s
        while time.monotonic() < deadline:
            decision, entry = self.fence.begin(key, print_, may_rerun=tool.effect == IDEMPOTENT)
            if decision == "run":
                return await self._run_claimed(tool, arguments, key, print_, ctx)
            if decision == "replay" and entry is not None and entry.answer is not None:
                return replay(entry.answer)
            if decision == "reused":
                return text_result(
                    f"{tool.spec.name} was not run: idempotency key {key!r} was already used for a call with "
                    "other arguments. Use a new key for a new call.",
                    is_error=True, meta={OUTCOME_KEY: "rejected"})
            if decision == "unknown":
                return text_result(
                    f"{tool.spec.name} with key {key!r} was interrupted earlier and may have taken effect; "
                    "check before repeating it.",
                    is_error=True, meta={OUTCOME_KEY: "unknown"})
            await anyio.sleep(0.05)  # "wait": the first execution is still running
        return text_result(f"{tool.spec.name} with key {key!r} is still running; its outcome is not known yet.",
                           is_error=True, meta={OUTCOME_KEY: "unknown"})

    async def _run_claimed(self, tool: Tool, arguments: dict[str, Any], key: str, print_: str,
                           ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        stored: dict[str, Any] | None = None
        try:
            answer = await tool.handler(arguments, key, ctx)
            stored = result_to_wire(answer)
            return answer
        except MCPError as error:
            # A JSON-RPC error is this key's answer too: a retry gets the same error.
            stored = {"error": error.error.model_dump(by_alias=True, mode="json", exclude_none=True)}
            raise
        finally:
            # None marks the execution interrupted (cancelled, crashed): its effect is unknown.
            self.fence.finish(key, print_, stored)

    # -- tools ------------------------------------------------------------------------------

    def _payments(self) -> list[dict[str, Any]]:
        return [e for e in self.log.entries() if e.get("tool") == "send_payment"]

    async def get_balance(self, args: dict[str, Any], key: str | None,
                          ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        self.log.record("get_balance", key, args)
        account = str(args["account"])
        spent = sum(float(p["arguments"].get("amount", 0)) for p in self._payments()
                    if p["arguments"].get("account", "main") == account)
        balance = 1000.0 - spent
        return text_result(f"balance of {account}: {balance:.2f} EUR",
                           structured={"account": account, "balance": balance, "currency": "EUR"})

    async def list_payments(self, args: dict[str, Any], key: str | None,
                            ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        self.log.record("list_payments", key, args)
        account = args.get("account")
        rows = [p["arguments"] for p in self._payments()
                if account is None or p["arguments"].get("account", "main") == account]
        lines = [f"{r.get('amount')} EUR to {r.get('to')}" for r in rows]
        return text_result("\n".join(lines) if lines else "no payments", structured={"payments": rows})

    async def set_memo(self, args: dict[str, Any], key: str | None,
                       ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        self.log.record("set_memo", key, args)
        return text_result(f"memo of {args['payment_id']} set to {args['memo']!r}")

    async def refund(self, args: dict[str, Any], key: str | None,
                     ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        amount = float(args["amount"])
        if amount > REFUND_LIMIT:
            raise MCPError(REJECTED_ERROR_CODE, f"refund of {amount:g} is over the limit of {REFUND_LIMIT}",
                           data={"_meta": {OUTCOME_KEY: "rejected"}})
        n = self.log.record("refund", key, args)
        return text_result(f"refund rf-{n} of {amount:g} EUR for order {args['order']} granted",
                           structured={"refund_id": f"rf-{n}", "order": args["order"], "amount": amount})

    async def send_payment(self, args: dict[str, Any], key: str | None,
                           ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        n = self.log.record("send_payment", key, args)
        return text_result(f"payment pay-{n} sent: {float(args['amount']):g} EUR to {args['to']}",
                           structured={"payment_id": f"pay-{n}"})

    async def close_account(self, args: dict[str, Any], key: str | None,
                            ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        raise MCPError(REJECTED_ERROR_CODE, f"account {args['account']} cannot be closed by an agent",
                       data={"_meta": {OUTCOME_KEY: "rejected"}})

    async def settle_uncertain(self, args: dict[str, Any], key: str | None,
                               ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        self.log.record("settle_uncertain", key, args)
        return text_result(f"settlement of {args['payment_id']} was sent but the bank did not confirm it",
                           is_error=True, meta={OUTCOME_KEY: "unknown"})

    async def long_report(self, args: dict[str, Any], key: str | None,
                          ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        self.log.record("long_report", key, args)
        steps = max(1, int(args["steps"]))
        pause = float(args.get("step_seconds", 0.02))
        for step in range(1, steps + 1):
            await anyio.sleep(pause)
            await ctx.session.report_progress(step, steps, f"section {step} of {steps}")
        return text_result(f"report with {steps} sections")

    async def sleep(self, args: dict[str, Any], key: str | None,
                    ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        self.log.record("sleep", key, args)
        seconds = float(args["seconds"])
        await anyio.sleep(seconds)
        return text_result(f"slept {seconds:g} s")

    async def statement(self, args: dict[str, Any], key: str | None,
                        ctx: ServerRequestContext[Any]) -> types.CallToolResult:
        self.log.record("statement", key, args)
        size = max(0, min(int(args["size_bytes"]), 64 * 1024 * 1024))
        line = "2026-12-03  transfer  100.00 EUR\n"
        return text_result((line * (size // len(line) + 1))[:size])

    def _hold(self, tool: str) -> Handler:
        async def hold(args: dict[str, Any], key: str | None, ctx: ServerRequestContext[Any]) -> types.CallToolResult:
            # Record first: a crash test kills processes while the call waits at its gate.
            self.log.record(tool, key, args)
            gate = re.sub(r"[^A-Za-z0-9_-]", "_", str(args["gate"]))
            await wait_for_file(self.dir / f"release-{gate}")
            return text_result(f"{tool} released at gate {gate}")

        return hold

    def _crash(self, tool: str) -> Handler:
        async def crash(args: dict[str, Any], key: str | None, ctx: ServerRequestContext[Any]) -> types.CallToolResult:
            tag = str(args.get("tag", ""))
            limit = int(args.get("crash_times", 0))
            self.log.record(tool, key, args)
            runs = sum(1 for e in self.log.entries()
                       if e.get("tool") == tool and str(e["arguments"].get("tag", "")) == tag)
            if limit <= 0 or runs <= limit:
                os._exit(1)  # an upstream dying mid-call, after the effect
            return text_result(f"{tool} survived (execution {runs} of tag {tag!r})")

        return crash

    # -- resources and prompts -----------------------------------------------------------------

    async def list_resources(self, ctx: ServerRequestContext[Any],
                             params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(name="policy", uri="payments://policy", mime_type="text/plain",
                           description="The refund and payment policy."),
        ])

    async def list_resource_templates(self, ctx: ServerRequestContext[Any],
                                      params: types.PaginatedRequestParams | None
                                      ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(name="account", uri_template="payments://accounts/{account}",
                                   mime_type="text/plain", description="An account's balance."),
        ])

    async def read_resource(self, ctx: ServerRequestContext[Any],
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri == "payments://policy":
            text = POLICY_TEXT
        elif uri.startswith("payments://accounts/") and len(uri) > len("payments://accounts/"):
            account = uri.removeprefix("payments://accounts/")
            spent = sum(float(p["arguments"].get("amount", 0)) for p in self._payments()
                        if p["arguments"].get("account", "main") == account)
            text = f"account {account}: {1000.0 - spent:.2f} EUR"
        else:
            raise MCPError(types.INVALID_PARAMS, f"unknown resource: {uri}")
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=text,
                                                                             mime_type="text/plain")])

    async def list_prompts(self, ctx: ServerRequestContext[Any],
                           params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[
            types.Prompt(name="dispute_letter", description="A letter disputing a payment.",
                         arguments=[types.PromptArgument(name="payment_id", required=True,
                                                         description="the payment to dispute")]),
        ])

    async def get_prompt(self, ctx: ServerRequestContext[Any],
                         params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != "dispute_letter":
            raise MCPError(types.INVALID_PARAMS, f"unknown prompt: {params.name}")
        payment_id = (params.arguments or {}).get("payment_id")
        if not payment_id:
            raise MCPError(types.INVALID_PARAMS, "dispute_letter needs the argument payment_id")
        return types.GetPromptResult(description="dispute letter", messages=[
            types.PromptMessage(role="user", content=types.TextContent(
                text=f"Write a short, polite letter disputing payment {payment_id}.")),
        ])

    def server(self) -> Server[Any]:
        return Server(
            "dex-example-payments", version="0.1.0",
            on_list_tools=self.list_tools, on_call_tool=self.call_tool,
            on_list_resources=self.list_resources, on_list_resource_templates=self.list_resource_templates,
            on_read_resource=self.read_resource, on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt,
        )


def main() -> None:
    parser = build_parser("Dex example upstream: a payments server that follows the Dex conventions.")
    parser.add_argument("--page-size", type=int, default=0, help="tools/list page size (0: one page)")
    args = parser.parse_args()
    serve(PaymentsServer(state_dir(), args.page_size).server(), args)


if __name__ == "__main__":
    main()
