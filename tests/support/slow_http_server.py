"""A Streamable-HTTP MCP upstream whose one tool sleeps (aiohttp, run as a script by path), for
load tests that keep thousands of calls running at once.

    python tests/support/slow_http_server.py [--port 0]

prints `listening on http://127.0.0.1:<port>/mcp` on stderr. The handshake era, session-less,
JSON answers, no task support (the gateway runs a task of it in its own background job, holding
the upstream exchange open for the whole sleep). Tools:

* `sleep`  {seconds}  read-only: answers "slept <seconds> s" after `seconds` (default 1)

GET /stats answers the most `sleep` calls running at once and the calls answered.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from aiohttp import web
from aiohttp_serve import rpc_result, serve_forever

TOOLS = [{"name": "sleep", "description": "Sleeps `seconds`, then answers",
          "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}},
          "annotations": {"readOnlyHint": True}}]


class Slow:
    def __init__(self) -> None:
        self.running = 0
        self.max_running = 0
        self.answered = 0

    async def mcp(self, request: web.Request) -> web.Response:
        message = await request.json()
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            return web.Response(status=202)
        if method == "initialize":
            return rpc_result(request_id, {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                                        "serverInfo": {"name": "slow", "version": "1"}})
        if method == "tools/list":
            return rpc_result(request_id, {"tools": TOOLS})
        if method == "ping":
            return rpc_result(request_id, {})
        if method == "tools/call":
            params = message.get("params") or {}
            seconds = float((params.get("arguments") or {}).get("seconds", 1))
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            try:
                await asyncio.sleep(seconds)
            finally:
                self.running -= 1
            self.answered += 1
            return rpc_result(request_id, {"content": [{"type": "text", "text": f"slept {seconds:g} s"}], "isError": False})
        return web.json_response({"jsonrpc": "2.0", "id": request_id,
                                  "error": {"code": -32601, "message": f"{method} not found"}})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"max_running": self.max_running, "running": self.running, "answered": self.answered})


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    slow = Slow()
    app = web.Application()
    app.router.add_post("/mcp", slow.mcp)
    app.router.add_get("/stats", slow.stats)
    await serve_forever(app, args.port, backlog=4096)


if __name__ == "__main__":
    asyncio.run(main())
