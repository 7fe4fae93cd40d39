"""What the small aiohttp upstreams of the tests share: serving on loopback and announcing the URL.

Run as scripts (`python tests/support/<name>.py`), they import this module as a sibling.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from aiohttp import web


def rpc_result(request_id: Any, result: dict[str, Any]) -> web.Response:
    """A JSON-RPC result as a plain JSON answer."""
    return web.json_response({"jsonrpc": "2.0", "id": request_id, "result": result})


async def serve_forever(app: web.Application, port: int, *, backlog: int = 128) -> None:
    """Serve `app` on 127.0.0.1:`port` (0: any) and print `listening on <url>` on stderr once it accepts."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=backlog)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"listening on http://127.0.0.1:{bound}/mcp", file=sys.stderr, flush=True)
    await asyncio.Event().wait()
