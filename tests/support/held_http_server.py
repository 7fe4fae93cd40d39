"""A misbehaving Streamable-HTTP MCP upstream for the "what held" regression tests (aiohttp, run
as a script by path). The handshake era, session-less, JSON answers unless a tool streams.

    python tests/support/held_http_server.py [--port 0] [--listing normal|repeat|endless]

prints `listening on http://127.0.0.1:<port>/mcp` on stderr.

* every request's headers are recorded; GET /seen answers them (a list of {name: value} maps);
* `tools/list` pages: `normal` one page; `repeat` every page says `nextCursor: "again"`;
  `endless` every page carries a fresh cursor and one more tool (`page_<n>`);
* tool `echo`         answers "echo" at once;
* tool `pinging`      an SSE answer that sends a `: ping` comment every 20 ms and never answers;
* tool `progress`     an SSE answer with `arguments.count` progress notifications, then the result.

GET /stats answers {"pages": n, "pinging_open": n, "pings": n, "progress_sent": n}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from aiohttp import web
from aiohttp_serve import rpc_result, serve_forever


class Held:
    def __init__(self, listing: str) -> None:
        self.listing = listing
        self.seen: list[dict[str, str]] = []
        self.pages = 0
        self.pinging_open = 0
        self.pings = 0
        self.progress_sent = 0

    async def mcp(self, request: web.Request) -> web.StreamResponse:
        self.seen.append({name.lower(): value for name, value in request.headers.items()})
        message = await request.json()
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if request_id is None:
            return web.Response(status=202)
        if method == "initialize":
            return rpc_result(request_id, {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                        "serverInfo": {"name": "held", "version": "1"}})
        if method == "tools/list":
            return rpc_result(request_id, self.tools_page(params.get("cursor")))
        if method == "tools/call":
            return await self.call(request, request_id, str(params.get("name")), params)
        return web.json_response({"jsonrpc": "2.0", "id": request_id,
                                  "error": {"code": -32601, "message": f"{method} not found"}})

    def tools_page(self, cursor: Any) -> dict[str, Any]:
        self.pages += 1
        tools = [_tool(name) for name in ("echo", "pinging", "progress")] if cursor is None else []
        if self.listing == "repeat":
            return {"tools": tools, "nextCursor": "again"}
        if self.listing == "endless":
            return {"tools": tools + [_tool(f"page_{self.pages}")], "nextCursor": f"c{self.pages}"}
        return {"tools": tools}

    async def call(self, request: web.Request, request_id: Any, name: str, params: dict[str, Any]) -> web.StreamResponse:
        if name == "pinging":
            return await self.ping_forever(request)
        if name == "progress":
            token = (params.get("_meta") or {}).get("progressToken", "p")
            count = int((params.get("arguments") or {}).get("count", 10))
            return await self.progress(request, request_id, token, count)
        return rpc_result(request_id, {"content": [{"type": "text", "text": name}], "isError": False})

    async def ping_forever(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        self.pinging_open += 1
        try:
            while True:
                await response.write(b": ping\n\n")
                self.pings += 1
                await asyncio.sleep(0.02)
        except (ConnectionError, RuntimeError, asyncio.CancelledError):
            return response  # the gateway hung up
        finally:
            self.pinging_open -= 1

    async def progress(self, request: web.Request, request_id: Any, token: Any, count: int) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        try:
            batch: list[bytes] = []
            for step in range(1, count + 1):
                note = {"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": token, "progress": step, "total": count}}
                batch.append(b"data: " + json.dumps(note).encode() + b"\n\n")
                if len(batch) == 500:
                    await response.write(b"".join(batch))
                    self.progress_sent += len(batch)
                    batch = []
            await response.write(b"".join(batch))
            self.progress_sent += len(batch)
            done = {"jsonrpc": "2.0", "id": request_id,
                    "result": {"content": [{"type": "text", "text": f"progress: sent {count}"}], "isError": False}}
            await response.write(b"data: " + json.dumps(done).encode() + b"\n\n")
        except (ConnectionError, RuntimeError):
            return response
        await response.write_eof()
        return response

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"pages": self.pages, "pinging_open": self.pinging_open, "pings": self.pings,
                                  "progress_sent": self.progress_sent})

    async def seen_headers(self, request: web.Request) -> web.Response:
        return web.json_response(self.seen)


def _tool(name: str) -> dict[str, Any]:
    return {"name": name, "description": f"held: {name}",
            "inputSchema": {"type": "object", "properties": {"count": {"type": "integer"}}},
            "_meta": {"io.superdurable.dex/effect": "read"}}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--listing", choices=["normal", "repeat", "endless"], default="normal")
    args = parser.parse_args()
    held = Held(args.listing)
    app = web.Application()
    app.router.add_post("/mcp", held.mcp)
    app.router.add_get("/stats", held.stats)
    app.router.add_get("/seen", held.seen_headers)
    await serve_forever(app, args.port)


if __name__ == "__main__":
    asyncio.run(main())
