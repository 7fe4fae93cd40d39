"""An upstream's `tools/call` result, checked and read into an `Answer`.

The check runs before anything is recorded: a result that is not a valid MCP
`CallToolResult` (a content block of an unknown type or missing a required field, `content`
not a list, `structuredContent` not an object ...) is the upstream's fault, so the call fails
with a text that names the upstream and the defect, and the fence records that failure. The
client never gets a malformed result, and never an error that blames its own request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types
from pydantic import BaseModel, ValidationError

from ..conventions.answers import Answer
from ..conventions.keys import MCP_RESERVED_PREFIX
from ..errors import InvalidResult

__all__ = ["answer_from_result", "without_hop_keys"]

_BLOCK_MODELS: Mapping[str, type[BaseModel]] = {
    "text": types.TextContent,
    "image": types.ImageContent,
    "audio": types.AudioContent,
    "resource_link": types.ResourceLink,
    "resource": types.EmbeddedResource,
}


def answer_from_result(result: Mapping[str, Any]) -> Answer:
    """The Answer of a valid upstream result, minus keys of the upstream hop; InvalidResult otherwise."""
    if result.get("resultType") == "input_required":
        return Answer(input_required=_input_required(result))
    content = result.get("content")
    if not isinstance(content, list):
        raise InvalidResult("content: must be a list of content blocks" if "content" in result else "content: missing")
    for index, block in enumerate(content):
        _check_block(index, block)
    structured = result.get("structuredContent")
    if structured is not None and not isinstance(structured, dict):
        raise InvalidResult("structuredContent: must be an object")
    is_error = result.get("isError", False)
    if not isinstance(is_error, bool):
        raise InvalidResult("isError: must be true or false")
    meta = result.get("_meta")
    if meta is not None and not isinstance(meta, dict):
        raise InvalidResult("_meta: must be an object")
    return Answer(content=content, structured_content=structured, is_error=is_error, meta=without_hop_keys(meta))


def _input_required(result: Mapping[str, Any]) -> dict[str, Any]:
    """A multi-round-trip `input_required` result (2026-07-28), checked, as it goes to the client."""
    requests = result.get("inputRequests")
    state = result.get("requestState")
    if requests is not None and not isinstance(requests, dict):
        raise InvalidResult("inputRequests: must be an object")
    if state is not None and not isinstance(state, str):
        raise InvalidResult("requestState: must be a string")
    if not requests and state is None:
        raise InvalidResult("an input_required result needs inputRequests or requestState")
    wire: dict[str, Any] = {"resultType": "input_required"}
    if requests:
        wire["inputRequests"] = requests
    if state is not None:
        wire["requestState"] = state
    if (meta := without_hop_keys(result.get("_meta"))) is not None:
        wire["_meta"] = meta
    return wire


def without_hop_keys(meta: Any) -> dict[str, Any] | None:
    """An upstream answer's _meta minus the reserved keys of the upstream hop (serverInfo...)."""
    if not isinstance(meta, dict):
        return None
    return {k: v for k, v in meta.items() if not k.startswith(MCP_RESERVED_PREFIX)} or None


def _check_block(index: int, block: Any) -> None:
    where = f"content[{index}]"
    if not isinstance(block, dict):
        raise InvalidResult(f"{where}: must be an object")
    kind = block.get("type")
    if kind == "text" and len(block) == 2 and isinstance(block.get("text"), str):
        return  # the common plain text block: nothing else to check
    model = _BLOCK_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidResult(f"{where}.type: {kind!r} is not a content type (text, image, audio, resource_link, resource)")
    try:
        model.model_validate(block)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        raise InvalidResult(f"{where}{loc}: {first['msg'].lower()}") from None
