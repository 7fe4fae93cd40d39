"""A test upstream whose tools answer with images: good ones, the bad-image corpus, errors.

    python tests/support/image_server.py --transport stdio

    image(name)       read: "Here it is:", the image called `name`, "That was it."
                      png | png:<seed> | gif | webp | jpeg   one good image
                      many:<n>                              n different PNGs
                      <a BAD_IMAGES name>                   one bad image (tests/support/images.py)
                      error | unknown | rejected            a failed result holding a PNG
    snapshot(seed)    idempotent write: a PNG of colour `seed` (for fences, retries, crashes)

Every execution is appended to <state dir>/executions.jsonl (DEX_EXAMPLE_STATE_DIR).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(_ROOT), str(_ROOT / "examples" / "servers")]

import mcp_types as types  # noqa: E402
from example_runtime import EFFECT_KEY, EXECUTIONS_FILE, OUTCOME_KEY, ExecutionLog, ToolSpec, build_parser, serve, state_dir  # noqa: E402
from mcp.server import Server, ServerRequestContext  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from tests.support import images  # noqa: E402

_GOOD = {"gif": (images.gif, "image/gif"), "webp": (images.webp, "image/webp"), "jpeg": (images.jpeg, "image/jpeg")}
_FAILED = {"error": None, "unknown": "unknown", "rejected": "rejected"}

TOOLS = [
    ToolSpec("image", "An image by name (good, bad, or in a failed result).", {"name": {"type": "string"}}, ("name",),
             {EFFECT_KEY: "read"}),
    ToolSpec("snapshot", "Take a snapshot: an image of colour `seed`.", {"seed": {"type": "integer"}}, ("seed",),
             {EFFECT_KEY: "idempotent_write"}),
]


def image_blocks(name: str) -> list[dict[str, Any]]:
    if name in images.BAD_IMAGES:
        return [{"type": "image", "data": images.BAD_IMAGES[name][0], "mimeType": "image/png"}]
    if name.startswith("many:"):
        return [images.image_block(images.png(seed)) for seed in range(int(name.partition(":")[2]))]
    if name in _GOOD:
        make, mime = _GOOD[name]
        return [images.image_block(make(), mime)]
    seed = int(name.partition(":")[2] or 0) if name.startswith("png") else 0
    return [images.image_block(images.png(seed))]


def _result(content: list[dict[str, Any]], *, is_error: bool = False, meta: dict[str, Any] | None = None) -> types.CallToolResult:
    wire: dict[str, Any] = {"content": content, "isError": is_error}
    if meta:
        wire["_meta"] = meta
    return types.CallToolResult.model_validate(wire)


class ImageServer:
    def __init__(self, directory: Path) -> None:
        self.log = ExecutionLog(directory / EXECUTIONS_FILE, "images")

    async def list_tools(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[t.to_tool() for t in TOOLS])

    async def call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        key = (params.meta or {}).get("io.superdurable.dex/idempotencyKey")
        self.log.record(params.name, key if isinstance(key, str) else None, arguments)
        if params.name == "snapshot":
            return _result([{"type": "text", "text": "snapshot:"}, images.image_block(images.png(int(arguments["seed"])))])
        if params.name != "image":
            raise MCPError(types.INVALID_PARAMS, f"unknown tool: {params.name}")
        name = str(arguments.get("name", "png"))
        if name in _FAILED:
            outcome = _FAILED[name]
            return _result([{"type": "text", "text": f"failed ({name})"}, images.image_block(images.png())], is_error=True,
                           meta={OUTCOME_KEY: outcome} if outcome else None)
        text = [{"type": "text", "text": "Here it is:"}]
        return _result(text + image_blocks(name) + [{"type": "text", "text": "That was it."}])

    def server(self) -> Server[Any]:
        return Server("dex-test-images", version="0.1.0", on_list_tools=self.list_tools, on_call_tool=self.call_tool)


def main() -> None:
    args = build_parser("Test upstream: tools that answer with images.").parse_args()
    serve(ImageServer(state_dir()).server(), args)


if __name__ == "__main__":
    main()
