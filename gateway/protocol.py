"""Who the gateway says it is on the wire: its name and version, once.

The version is the installed distribution's (`pyproject.toml`), read once at import; the server
info the front answers with and the client info the upstreams see both come from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata
from typing import Any

__all__ = ["CLIENT_INFO", "GATEWAY_NAME", "GATEWAY_VERSION", "SERVER_INFO"]

GATEWAY_NAME = "dex-mcp-gateway"


def _installed_version() -> str:
    try:
        return metadata.version(GATEWAY_NAME)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


GATEWAY_VERSION = _installed_version()
# Plain dicts (JSON encoders take them as they are), typed read-only.
SERVER_INFO: Mapping[str, Any] = {"name": GATEWAY_NAME, "version": GATEWAY_VERSION}
CLIENT_INFO: Mapping[str, Any] = {"name": GATEWAY_NAME, "version": GATEWAY_VERSION}


# -- The JSON shapes on the wire --------------------------------------------------------------
# Names for the JSON objects the gateway reads and writes, so that a signature says which one it
# means. Each is a plain alias of `dict[str, Any]` (a `Result` *is* a dict): nothing changes at
# run time and a value passes freely from one name to another; the name is the documentation.
# Read-only parameters keep `Mapping[str, Any]`, which accepts any of these.

JsonObject = dict[str, Any]
"""Any decoded JSON (or YAML) object whose values are not checked yet."""

WireMessage = JsonObject
"""One whole JSON-RPC message: a request, a notification, a response or an error response."""

Params = JsonObject
"""The `params` of a JSON-RPC request or notification."""

Result = JsonObject
"""The `result` of a JSON-RPC response (a wire CallToolResult, ReadResourceResult, ...)."""

Meta = JsonObject
"""The `_meta` object of params, a result or a tool definition."""

Arguments = JsonObject
"""The `arguments` of a tools/call."""

ContentBlock = JsonObject
"""One entry of a result's `content` (text, image, resource link, ...)."""

JsonSchema = JsonObject
"""A JSON Schema document (a tool's `inputSchema`, the connector manifest's schema)."""

__all__ += ["Arguments", "ContentBlock", "JsonObject", "JsonSchema", "Meta", "Params", "Result", "WireMessage"]
