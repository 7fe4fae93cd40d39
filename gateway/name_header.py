"""The `Mcp-Name` header of a 2026-07-28 request (SEP-2243): which body parameter it mirrors, and
the check of a received header against the body. One rule for both directions: the gateway's
requests to its upstreams write the header from it (gateway/upstreams/channels/http.py), and the
front checks its clients' task methods with it (gateway/front/task_methods.py).

The SDK's own table (`NAME_BEARING_METHODS`: tools/call, prompts/get, resources/read), which the
SDK's ladder already checks on the way in, plus the task methods of the tasks extension
(SEP-2663), which name their task (`taskId`). A request whose body names something and whose
header is absent or differs is a header mismatch (-32020), as the SDK answers for tools/call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.shared.inbound import MCP_NAME_HEADER, NAME_BEARING_METHODS, decode_header_value
from mcp_types.jsonrpc import HEADER_MISMATCH

from .errors import RequestError

__all__ = ["HEADER_MISMATCH", "TASK_NAMED_METHODS", "name_key", "name_mismatch"]

# The task methods that name one task (2026-07-28 has no tasks/list or tasks/result).
TASK_NAMED_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


def name_key(method: str) -> str | None:
    """The body parameter a request of `method` mirrors in `Mcp-Name` (None: it carries none)."""
    return NAME_BEARING_METHODS.get(method) or ("taskId" if method in TASK_NAMED_METHODS else None)


def name_mismatch(method: str, params: Any, headers: Mapping[str, str]) -> RequestError | None:
    """The -32020 error when the request's `Mcp-Name` header is absent or disagrees with its body."""
    key = name_key(method)
    if key is None:
        return None
    value = params.get(key) if isinstance(params, Mapping) else None
    if value is None or decode_header_value(headers.get(MCP_NAME_HEADER)) == value:
        return None
    return RequestError(HEADER_MISMATCH, f"{MCP_NAME_HEADER} header does not match the request body's {key!r} parameter")
