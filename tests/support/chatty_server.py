"""A test upstream written as an ordinary MCP SDK server would be: a tool that talks a lot while it
runs, and one that answers at once.

    python tests/support/chatty_server.py                                  (stdio)
    python tests/support/chatty_server.py --transport http --stateful      (Streamable HTTP, sessions)

    chatty(count, size)   reports progress `count` times and logs a line of about `size` characters
                          after each (`ctx.report_progress`, `ctx.info`), then answers "chatty: done"
    quick(text)           answers "quick: <text>" at once
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(_ROOT / "examples" / "servers")]

from example_runtime import build_parser, serve  # noqa: E402
from mcp.server import MCPServer  # noqa: E402
from mcp.server.mcpserver import Context  # noqa: E402

warnings.simplefilter("ignore")  # ctx.info is deprecated on 2026-07-28; this server speaks the handshake era

app = MCPServer("chatty")


@app.tool()
async def chatty(count: int, ctx: Context, size: int = 100) -> str:
    """Report progress and log a line (of about `size` characters) `count` times, then answer."""
    for step in range(count):
        await ctx.report_progress(step + 1, count, f"step {step + 1} of {count}")
        await ctx.info(f"chatty is at step {step + 1} of {count}; " + "x" * size)
    return "chatty: done"


@app.tool()
async def quick(text: str) -> str:
    """Answer at once."""
    return f"quick: {text}"


if __name__ == "__main__":
    serve(app._lowlevel_server, build_parser("A chatty test upstream.").parse_args())
