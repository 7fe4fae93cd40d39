"""`dex-gateway check`: connect to an MCP server (URL or stdio command) and run the
conventions checks of `check.py`; a table for people or `--json` for machines, a final
`N passed, M failed` line, exit code 1 on any failure, a progress line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, TextIO, cast

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ..protocol import Arguments
from .check import CallAnswer, CheckReport, ListedTool, Status, run_checks
from .keys import IDEMPOTENCY_KEY
from .outcomes import rpc_error_text

if TYPE_CHECKING:
    from mcp_types import RequestParamsMeta

DEFAULT_TIMEOUT_S = 30.0
# Codes after which the connection is gone: the next call reconnects.
_CONNECTION_LOST = (types.CONNECTION_CLOSED,)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("url", nargs="?", help="Streamable HTTP endpoint, e.g. http://127.0.0.1:8080/mcp")
    target.add_argument("--stdio", metavar="COMMAND", help='a stdio server command line, e.g. "python server.py"')
    parser.add_argument("--allow-writes", action="store_true",
                        help="call each declared write (without a key, twice with a key, with other arguments): "
                             "this may execute writes on the server")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--header", action="append", default=[], metavar="'Name: value'",
                        help="an HTTP header to send (repeatable)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"seconds for connecting and for each call (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--tool", action="append", default=[], metavar="GLOB",
                        help="check only tools matching this pattern (repeatable)")
    parser.add_argument("--skip", action="append", default=[], metavar="GLOB",
                        help="leave out tools matching this pattern (repeatable)")
    parser.add_argument("--protocol", choices=("auto", "legacy"), default="auto",
                        help="auto: 2026-07-28 when the server speaks it, else initialize; legacy: initialize only")


def parse_headers(values: list[str]) -> dict[str, str]:
    headers = {}
    for value in values:
        name, sep, content = value.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header {value!r}: expected 'Name: value'")
        headers[name.strip()] = content.strip()
    return headers


def describe_error(error: BaseException) -> str:
    """The innermost causes of an (often grouped) transport error, without tracebacks."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe_error(e) for e in error.exceptions)
    if isinstance(error, MCPError):
        return rpc_error_text(error.code, error.message)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


ClientOpener = Callable[[AsyncExitStack], Awaitable[Client]]


def client_opener(args: argparse.Namespace) -> ClientOpener:
    mode = args.protocol
    if args.stdio:
        argv = shlex.split(args.stdio)
        # The command runs as the user who typed it, so it gets the user's environment.
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ), cwd=os.getcwd())

        async def open_stdio(stack: AsyncExitStack) -> Client:
            return await stack.enter_async_context(
                Client(params, mode=mode, cache=None, read_timeout_seconds=args.timeout))

        return open_stdio

    headers = parse_headers(args.header)

    async def open_http(stack: AsyncExitStack) -> Client:
        http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=args.timeout))
        transport = streamable_http_client(args.url, http_client=http)
        return await stack.enter_async_context(
            Client(transport, mode=mode, cache=None, read_timeout_seconds=args.timeout))

    return open_http


class McpToolServer:
    """`ToolServer` over the SDK client; reconnects after a call that lost the connection."""

    def __init__(self, opener: ClientOpener, timeout: float) -> None:
        self._opener = opener
        self._timeout = timeout
        self._stack: AsyncExitStack | None = None
        self._client: Client | None = None

    async def _connected(self) -> Client:
        if self._client is None:
            stack = AsyncExitStack()
            # No anyio.fail_after here: the client's task groups must not live inside a scope
            # that ends before them; the transport and read timeouts bound the connect instead.
            try:
                self._client = await self._opener(stack)
            except BaseException:
                await self._close(stack)
                raise
            self._stack = stack
        return self._client

    @staticmethod
    async def _close(stack: AsyncExitStack) -> None:
        try:
            await stack.aclose()
        except Exception:  # a dead transport fails on close too; there is nothing left to release
            pass

    async def aclose(self) -> None:
        if self._stack is not None:
            await self._close(self._stack)
        self._stack, self._client = None, None

    async def list_tools(self) -> list[ListedTool]:
        client = await self._connected()
        tools: list[ListedTool] = []
        cursor: str | None = None
        while True:  # every page: a server may page its tools
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
                tools.append(ListedTool(tool.name, dict(tool.input_schema or {}), tool.meta, annotations))
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def call_tool(self, name: str, arguments: Arguments, key: str | None) -> CallAnswer:
        try:
            client = await self._connected()
            result = await client.call_tool(name, arguments, read_timeout_seconds=self._timeout,
                                            meta=cast("RequestParamsMeta", {IDEMPOTENCY_KEY: key}) if key is not None else None)
        except MCPError as error:
            if error.code in _CONNECTION_LOST:
                await self.aclose()
                return CallAnswer(failure=describe_error(error))
            if error.code == types.REQUEST_TIMEOUT:
                return CallAnswer(failure=describe_error(error))
            return CallAnswer(error=error.error.model_dump(by_alias=True, mode="json", exclude_none=True))
        except Exception as error:  # transport failures of any kind are this call's answer
            await self.aclose()
            return CallAnswer(failure=describe_error(error))
        return CallAnswer(result=result.model_dump(by_alias=True, mode="json", exclude_none=True))


class ProgressLine:
    """One status line on stderr, rewritten in place on a terminal, plain lines otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()

    def __call__(self, text: str) -> None:
        if self._tty:
            self._stream.write("\r\x1b[K" + text[:200])
        else:
            self._stream.write(f"check: {text}\n")
        self._stream.flush()

    def clear(self) -> None:
        if self._tty:
            self._stream.write("\r\x1b[K")
            self._stream.flush()


def render_table(report: CheckReport) -> str:
    rows: list[tuple[str, str, str]] = [("TOOL / RULE", "RESULT", "DETAIL")]
    for rule in report.server_rules:
        rows.append((f"(server) {rule.rule.value}", rule.status.value, rule.detail))
    for tool in report.tools:
        rows.append((tool.tool.name, "", f"Dex client: {tool.client_view()}"))
        for warning in tool.classification.warnings:
            rows.append(("", "", f"warning: {warning}"))
        for rule in tool.rules:
            rows.append((f"  {rule.rule.value}", rule.status.value.upper() if rule.status is Status.FAIL
                         else rule.status.value, rule.detail))
    width = max(len(r[0]) for r in rows) + 2
    lines = [f"{first.ljust(width)}{status.ljust(8)}{detail}".rstrip() for first, status, detail in rows]
    if report.failures:
        lines += ["", "Failures:"] + [f"  {r.message}" for r in report.failures]
    return "\n".join(lines)


async def check_target(args: argparse.Namespace, progress: Callable[[str], None]) -> CheckReport:
    target = args.url or f"stdio: {args.stdio}"
    server = McpToolServer(client_opener(args), args.timeout)
    try:
        return await run_checks(server, target, allow_writes=args.allow_writes, only=args.tool, skip=args.skip,
                                progress=progress)
    finally:
        await server.aclose()


def run(args: argparse.Namespace) -> int:
    try:
        parse_headers(args.header)
    except ValueError as error:
        print(f"dex-gateway check: {error}", file=sys.stderr)
        return 2
    progress = ProgressLine(sys.stderr)
    try:
        report = anyio.run(check_target, args, progress)
    finally:
        progress.clear()
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_table(report))
    # The last line stays human-readable in both formats (stderr under --json keeps stdout valid JSON).
    summary = f"{report.passed} passed, {report.failed} failed"
    print(summary, file=sys.stderr if args.json else sys.stdout)
    return 1 if report.failed else 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point (`python -m gateway.conventions.check_cli`) until the CLI wires it."""
    parser = argparse.ArgumentParser(prog="dex-gateway check", description=__doc__)
    configure_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
