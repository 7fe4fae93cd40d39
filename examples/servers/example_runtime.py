"""What the example upstream servers share: command line, transports, the durable
execution log and the server-side idempotency fence.

The example servers are run as scripts (`python examples/servers/<name>.py`), so this module
is imported as a sibling of the script, not as part of a package.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import ASGIApp

STATE_DIR_ENV = "DEX_EXAMPLE_STATE_DIR"
EXECUTIONS_FILE = "executions.jsonl"
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")

# The Dex keys, spelled here rather than imported from `gateway`: these servers stand for
# third-party upstreams and must run without the gateway package installed.
DEX = "io.superdurable.dex/"
EFFECT_KEY = DEX + "effect"
APPROVAL_KEY = DEX + "approval"
OUTCOME_KEY = DEX + "outcome"
IDEMPOTENCY_KEY = DEX + "idempotencyKey"


# ---------------------------------------------------------------------------------------------
# Command line and transports


def build_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="loopback only")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--json-response", action="store_true", help="answer POSTs as JSON, not SSE")
    parser.add_argument("--stateful", action="store_true", help="Mcp-Session-Id sessions")
    return parser


def serve(server: Server[Any], args: argparse.Namespace, wrap: Callable[[ASGIApp], ASGIApp] | None = None) -> None:
    """Serve over the transport `args` names; `wrap` puts middleware around the HTTP app."""
    if args.transport == "stdio":
        anyio.run(_serve_stdio, server)
    else:
        if args.host not in LOOPBACK_HOSTS:
            raise SystemExit(f"refusing to bind {args.host}: the example servers listen on loopback only")
        anyio.run(_serve_http, server, args.host, args.port, args.json_response, args.stateful, wrap)


async def _serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def _serve_http(server: Server[Any], host: str, port: int, json_response: bool, stateful: bool,
                      wrap: Callable[[ASGIApp], ASGIApp] | None = None) -> None:
    manager = StreamableHTTPSessionManager(app=server, stateless=not stateful, json_response=json_response)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(
        routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(manager), methods=["GET", "POST", "DELETE"])],
        lifespan=lifespan,
    )
    # Bind the socket ourselves so port 0 yields a known port before uvicorn starts.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted connections only then
    # (otherwise every keep-alive request stalls ~40 ms on Nagle + delayed ACK).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(wrap(app) if wrap is not None else app, log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=1)
    userver = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: userver.serve(sockets=[sock]))
        while not userver.started:
            if userver.should_exit:
                return
            await anyio.sleep(0.01)
        shown = f"[{host}]" if ":" in host else host
        print(f"listening on http://{shown}:{bound_port}/mcp", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# State directory and the execution log


def state_dir() -> Path:
    configured = os.environ.get(STATE_DIR_ENV)
    path = Path(configured) if configured else Path(tempfile.mkdtemp(prefix="dex-example-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def append_durably(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and fsync it: tests count these lines after SIGKILLs."""
    line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        # A torn last line (killed mid-write before fsync) is not a record.
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return records


@dataclass(frozen=True)
class ExecutionLog:
    """One fsynced line per real execution of a tool (not per call: replays are not here)."""

    path: Path
    server: str

    def record(self, tool: str, key: str | None, arguments: dict[str, Any]) -> int:
        """Record an execution and return how many executions of `tool` exist now."""
        append_durably(
            self.path,
            {"server": self.server, "tool": tool, "idempotency_key": key, "arguments": arguments,
             "pid": os.getpid(), "time": time.time()},
        )
        return sum(1 for r in read_jsonl(self.path) if r.get("tool") == tool)

    def entries(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path)


# ---------------------------------------------------------------------------------------------
# The server-side fence: a Dex-aware upstream remembers each key's first answer on disk.


def fingerprint(tool: str, arguments: dict[str, Any]) -> str:
    canonical = json.dumps([tool, arguments], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A killed child its parent has not reaped yet still answers kill(0): look at its state.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


@dataclass(frozen=True)
class FenceEntry:
    key: str
    fingerprint: str
    state: str  # "pending" | "done" | "interrupted"
    pid: int
    answer: dict[str, Any] | None


class FileFence:
    """Append-only fence file shared by every process of one state directory.

    Several processes may serve one state dir (a gateway starts a stdio server per
    session), so claims are made under an exclusive file lock and the file is re-read
    each time; the latest line for a key is its state.
    """

    def __init__(self, directory: Path, name: str = "fence.jsonl") -> None:
        self._path = directory / name
        self._lock_path = directory / (name + ".lock")
        self._in_flight: set[str] = set()

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _entry(self, key: str) -> FenceEntry | None:
        latest = None
        for record in read_jsonl(self._path):
            if record.get("key") == key:
                latest = record
        return None if latest is None else FenceEntry(**latest)

    def _write(self, entry: FenceEntry) -> None:
        append_durably(self._path, entry.__dict__)

    def _owner_running(self, entry: FenceEntry) -> bool:
        if entry.pid == os.getpid():
            return entry.key in self._in_flight
        return process_alive(entry.pid)

    def begin(self, key: str, print_: str, *, may_rerun: bool) -> tuple[str, FenceEntry | None]:
        """Decide what a call with `key` does, claiming the key when it is to run.

        Returns one of: ("run", None) claimed, execute now; ("replay", entry) the stored
        answer; ("reused", entry) the key belongs to other arguments; ("wait", entry) the
        first execution is still running; ("unknown", entry) an earlier execution was
        interrupted and may have taken effect (and `may_rerun` is false).
        """
        with self._locked():
            entry = self._entry(key)
            if entry is not None:
                if entry.fingerprint != print_:
                    return "reused", entry
                if entry.state == "done":
                    return "replay", entry
                if entry.state == "pending" and self._owner_running(entry):
                    return "wait", entry
                if not may_rerun:
                    return "unknown", entry
            self._in_flight.add(key)
            self._write(FenceEntry(key, print_, "pending", os.getpid(), None))
            return "run", None

    def finish(self, key: str, print_: str, answer: dict[str, Any] | None) -> None:
        """Store the answer (None: the execution was interrupted, its effect unknown)."""
        with self._locked():
            self._write(FenceEntry(key, print_, "done" if answer is not None else "interrupted", os.getpid(), answer))
            self._in_flight.discard(key)


# ---------------------------------------------------------------------------------------------
# Tool definitions and results


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...] = ()
    meta: dict[str, Any] | None = None
    annotations: types.ToolAnnotations | None = None

    def to_tool(self) -> types.Tool:
        schema: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            schema["required"] = list(self.required)
        return types.Tool(name=self.name, description=self.description, input_schema=schema,
                          annotations=self.annotations, _meta=self.meta)

    def missing_arguments(self, arguments: dict[str, Any]) -> list[str]:
        return [name for name in self.required if name not in arguments]


def text_result(text: str, *, is_error: bool = False, meta: dict[str, Any] | None = None,
                structured: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=is_error, _meta=meta,
                                structured_content=structured)


def result_to_wire(result: types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def result_from_wire(wire: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult.model_validate(wire)


def paginate(tools: list[types.Tool], params: types.PaginatedRequestParams | None,
             page_size: int) -> types.ListToolsResult:
    """Cursor = offset as text; page_size 0 lists everything at once."""
    if page_size <= 0:
        return types.ListToolsResult(tools=tools)
    start = int(params.cursor) if params is not None and params.cursor else 0
    end = start + page_size
    return types.ListToolsResult(tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None)


async def wait_for_file(path: Path, poll_seconds: float = 0.05) -> None:
    while not path.exists():
        await anyio.sleep(poll_seconds)


def request_key(params: types.CallToolRequestParams) -> str | None:
    value = (params.meta or {}).get(IDEMPOTENCY_KEY)
    return value if isinstance(value, str) and value else None


