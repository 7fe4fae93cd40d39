"""A lean tools/call load generator: stateless JSON-RPC POSTs, no MCP SDK client.

    .venv/bin/python bench/loadgen.py --url http://127.0.0.1:N/mcp --tool echo \
        --concurrency 16 --calls 5000 --max-seconds 60 [--fresh-keys]

Each of `concurrency` workers sends one `tools/call` at a time on its own keep-alive
connection. Two drivers: `raw` (default: hand-written HTTP/1.1 over asyncio streams,
~0.1-0.2 ms CPU per call) and `httpx` (httpx.AsyncClient, ~1-1.5 ms CPU per call, which on a
2-core box makes the generator the biggest CPU consumer of a direct run). Both send stateless requests (`accept: application/json, text/event-stream`, no `initialize`) in
one protocol era (`--era`): `mcp-protocol-version: 2025-11-25` by default, or 2026-07-28 with its
routing headers and per-request `_meta` envelope, and parses the answer whether it is
JSON or SSE. Prints one JSON object on stdout: latencies (ms), wall time, errors, and the
generator's own CPU seconds, so a run can show that the generator was not the bottleneck.
`--fresh-keys` puts a new `io.superdurable.dex/idempotencyKey` in every request's `_meta`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
import uuid
from urllib.parse import urlsplit

import httpx

IDEMPOTENCY_KEY = "io.superdurable.dex/idempotencyKey"
HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
}
MODERN = "2026-07-28"
# The 2026-07-28 per-request envelope (no handshake): protocol version, capabilities, client info.
MODERN_ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "dex-bench-loadgen", "version": "1"},
}


def era_headers(era: str, tool: str) -> dict[str, str]:
    """Request headers of one era: the handshake era's version header, or the 2026 routing headers."""
    if era == MODERN:
        return {**HEADERS, "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": tool}
    return dict(HEADERS)


def parse_answer(content_type: str, body: bytes, request_id: int) -> dict:
    """The JSON-RPC response for `request_id` from a JSON or SSE body."""
    if content_type.startswith("application/json"):
        return json.loads(body)
    data: list[str] = []
    for line in body.decode().splitlines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
        elif not line and data:
            message = json.loads("\n".join(data))
            data = []
            if isinstance(message, dict) and message.get("id") == request_id:
                return message
    if data:
        message = json.loads("\n".join(data))
        if isinstance(message, dict) and message.get("id") == request_id:
            return message
    raise ValueError("no response for the request in the SSE body")


class RawConnection:
    """One keep-alive HTTP/1.1 connection: POST, then read a content-length or chunked body."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path or "/"
        self.head = (
            f"POST {self.path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        ).encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes) -> tuple[int, str, bytes]:
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(self.head + b"content-length: %d\r\n\r\n" % len(body) + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
        if "content-length" in headers:
            data = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")
                    break
                chunks.append(await self.reader.readexactly(size))
                await self.reader.readexactly(2)
            data = b"".join(chunks)
        else:
            data = await self.reader.read()
        if headers.get("connection", "").lower() == "close":
            self.writer.close()
            self.writer = None
        return status, headers.get("content-type", ""), data


async def run(args: argparse.Namespace) -> dict:
    prefix = f"bench/{os.getpid()}/{uuid.uuid4().hex[:8]}/"
    limits = httpx.Limits(max_connections=args.concurrency, max_keepalive_connections=args.concurrency)
    latencies: list[float] = []
    errors: list[str] = []
    counter = 0
    budget = args.warmup + args.calls
    deadline = 0.0  # set after the warm-up

    headers = era_headers(args.era, args.tool)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(30.0), headers=headers) as client:
        raw_connections = [RawConnection(args.url, headers) for _ in range(args.concurrency)]

        async def one(i: int, record: bool, slot: int) -> None:
            meta: dict = {IDEMPOTENCY_KEY: f"{prefix}{i}"} if args.fresh_keys else {}
            if args.same_key:  # every call a retry of the first: answered from the gateway's fence
                meta = {IDEMPOTENCY_KEY: args.same_key}
            if args.era == MODERN:
                meta.update(MODERN_ENVELOPE)
            params: dict = {"name": args.tool, "arguments": {"text": "hello"}}
            if meta:
                params["_meta"] = meta
            body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": params}).encode()
            t0 = time.perf_counter()
            try:
                if args.driver == "raw":
                    status, content_type, data = await asyncio.wait_for(raw_connections[slot].post(body), 30.0)
                else:
                    response = await client.post(args.url, content=body)
                    status, content_type, data = response.status_code, response.headers.get("content-type", ""), response.content
                message = parse_answer(content_type, data, i)
                ok = status == 200 and "result" in message and not message["result"].get("isError")
                problem = None if ok else f"HTTP {status}: {json.dumps(message)[:300]}"
            except Exception as exc:  # noqa: BLE001 - counted and reported, the run goes on
                problem = f"{type(exc).__name__}: {exc}"
            elapsed = (time.perf_counter() - t0) * 1000.0
            if record:
                latencies.append(elapsed)
                if problem is not None:
                    errors.append(problem)

        async def worker(warm: bool, slot: int) -> None:
            nonlocal counter
            limit = args.warmup if warm else budget
            while counter < limit and (warm or time.perf_counter() < deadline):
                counter += 1
                await one(counter, not warm, slot)

        await asyncio.gather(*(worker(True, k) for k in range(args.concurrency)))
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        deadline = start + args.max_seconds
        await asyncio.gather(*(worker(False, k) for k in range(args.concurrency)))
        wall = time.perf_counter() - start
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)

    return {
        "latencies_ms": latencies,
        "wall_s": wall,
        "errors": len(errors),
        "first_errors": errors[:3],
        "capped": len(latencies) < args.calls,
        "client_cpu_s": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--tool", default="echo")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--max-seconds", type=float, default=60.0)
    parser.add_argument("--fresh-keys", action="store_true")
    parser.add_argument("--same-key", help="this idempotency key on every call (replays through a gateway)")
    parser.add_argument("--driver", choices=["raw", "httpx"], default="raw")
    parser.add_argument("--era", choices=["handshake", MODERN], default="handshake",
                        help="protocol era of the requests: stateless handshake era (2025-11-25) or 2026-07-28")
    args = parser.parse_args()
    json.dump(asyncio.run(run(args)), sys.stdout)


if __name__ == "__main__":
    main()
