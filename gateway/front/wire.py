"""The wire form of what the front answers, per protocol era: one place for every entry.

Both entries (the fast path and the SDK handlers) hand their answers here, so a result, an
error and the bytes they become are the same whichever entry took the request:

* results of the 2026-07-28 era carry `resultType: "complete"` and the gateway's
  `serverInfo` stamp in `_meta` (handshake-era results carry neither);
* messages are encoded as the SDK's transports encode them, so an answer the SDK writes and
  one the fast path writes are byte for byte the same: pydantic's JSON on the handshake era
  (`model_dump_json`), compact `json.dumps` with ASCII escapes on 2026-07-28.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pydantic_core
from mcp_types import SERVER_INFO_META_KEY
from ..conventions.answers import Answer
from ..protocol import Era, Result

__all__ = ["RESULT_COMPLETE", "encode_message", "error_object", "list_result", "result_wire", "tool_result"]

RESULT_COMPLETE = "complete"


def result_wire(result: Result, *, era: Era, server_info: Mapping[str, Any]) -> Result:
    """A result dict as this era's wire wants it (adds the 2026 keys in place; returns it)."""
    if era is Era.MODERN:
        result.setdefault("resultType", RESULT_COMPLETE)  # an upstream's input_required stays as it is
        meta = result.get("_meta")
        if not isinstance(meta, dict):
            result["_meta"] = {SERVER_INFO_META_KEY: dict(server_info)}
        elif meta.get(SERVER_INFO_META_KEY) is None:
            result["_meta"] = {**meta, SERVER_INFO_META_KEY: dict(server_info)}
    return result


def list_result(key: str, items: list[Any], *, era: Era, server_info: Mapping[str, Any]) -> Result:
    """A complete (one page) list result; on 2026-07-28 with its freshness hints (SEP-2549):
    immediately stale and private, because what a principal may list is its own."""
    result: Result = {"ttlMs": 0, "cacheScope": "private", key: items} if era is Era.MODERN else {key: items}
    return result_wire(result, era=era, server_info=server_info)


def tool_result(answer: Answer, *, era: Era, server_info: Mapping[str, Any]) -> Result:
    """The `tools/call` result of an answer (fresh top-level dict; content shared, never mutated)."""
    return result_wire(answer.to_wire(), era=era, server_info=server_info)


def error_object(code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC `error` member, shaped as the SDK writes one (`data` only when present)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return error


# `json.dumps(message, separators=(",", ":"))` builds an encoder per call; this one is built once.
_MODERN_ENCODER = json.JSONEncoder(separators=(",", ":"))


def encode_message(message: Mapping[str, Any], *, era: Era) -> bytes:
    """One JSON-RPC message as bytes, exactly as the SDK transport of that era writes it."""
    if era is Era.MODERN:
        return _MODERN_ENCODER.encode(message).encode()
    return pydantic_core.to_json(message)
