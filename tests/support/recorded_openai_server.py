"""An OpenAI-compatible chat-completions endpoint that answers from a recorded response set
(aiohttp, run as a script by path): the model API is a third-party edge, so the agent host's real
`openai:` client talks to this instead of a provider.

    python tests/support/recorded_openai_server.py RESPONSES.json [--port 0]

RESPONSES.json is a list of whole `chat.completion` answers (ask with `--no-stream`); the n-th
POST /v1/chat/completions gets the n-th, and one past the end gets a 500 naming the count.
GET /seen answers the request bodies received so far (a list). Prints `listening on
http://127.0.0.1:<port>/mcp` on stderr (the shared helper's line; the API is under /v1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp_serve import serve_forever


class Recorded:
    def __init__(self, responses: list[dict[str, Any]]) -> None:
        self.responses = responses
        self.seen: list[Any] = []

    async def complete(self, request: web.Request) -> web.Response:
        self.seen.append(await request.json())
        n = len(self.seen)
        if n > len(self.responses):
            return web.json_response({"error": {"message": f"request {n}: the recording has {len(self.responses)}"}},
                                     status=500)
        return web.json_response(self.responses[n - 1])

    async def seen_bodies(self, request: web.Request) -> web.Response:
        return web.json_response(self.seen)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("responses", type=Path)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    recorded = Recorded(json.loads(args.responses.read_text()))
    app = web.Application()
    app.router.add_post("/v1/chat/completions", recorded.complete)
    app.router.add_get("/seen", recorded.seen_bodies)
    await serve_forever(app, args.port)


if __name__ == "__main__":
    asyncio.run(main())
