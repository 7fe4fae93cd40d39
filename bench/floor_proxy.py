"""The floor a gateway on this stack cannot go below: a zero-logic HTTP proxy for benchmarks.

    .venv/bin/python bench/floor_proxy.py --upstream http://127.0.0.1:N/mcp --port 0

uvicorn (uvloop, httptools) in front, one aiohttp session behind -- the gateway's own two HTTP
stacks -- forwarding each request's method, body and end-to-end headers to the upstream and
returning the upstream's status, headers and bytes as they arrive. Nothing is parsed, checked,
routed, fenced or logged: what the gateway does beyond this is its own work
(bench/gateway_overhead.py reports gateway ÷ floor). Prints `listening on http://127.0.0.1:N/mcp`
on stderr once it accepts connections. Loopback only.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

import aiohttp
import uvicorn

# Hop-by-hop and framing headers: each side sets its own.
_SKIP = frozenset({b"host", b"content-length", b"connection", b"keep-alive", b"transfer-encoding", b"te",
                   b"upgrade", b"proxy-connection"})
_SKIP_BACK = frozenset({"content-length", "connection", "keep-alive", "transfer-encoding", "date", "server"})


class FloorProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.session: aiohttp.ClientSession | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k not in _SKIP}
        assert self.session is not None
        async with self.session.request(scope["method"], self.upstream, data=body, headers=headers) as response:
            back = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()
                    if k.lower() not in _SKIP_BACK]
            await send({"type": "http.response.start", "status": response.status, "headers": back})
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                connector = aiohttp.TCPConnector(limit=100, limit_per_host=100, keepalive_timeout=60)
                self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                                     timeout=aiohttp.ClientTimeout(total=None))
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.session is not None:
                    await self.session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the upstream's MCP URL")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(2048)
    port = sock.getsockname()[1]
    config = uvicorn.Config(FloorProxy(args.upstream), loop="uvloop", http="httptools", log_level="warning",
                            access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    print(f"listening on http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
