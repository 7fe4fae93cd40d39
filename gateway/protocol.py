"""Who the gateway says it is on the wire and which era of the protocol it speaks, once.

* `Era`: the two eras of MCP the gateway serves (the handshake era, up to 2025-11-25, and the
  per-request 2026-07-28 era); `Era.of(version)` is the era of a protocol version.
* the named JSON shapes of the wire (`JsonObject`, `Params`, `Result`, `Meta`, ...: at the end).

The version is the installed distribution's (`pyproject.toml`), read once at import; the server
info the front answers with and the client info the upstreams see both come from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from importlib import metadata
from typing import Any

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

__all__ = [
    "CLIENT_CAPABILITIES_KEY", "CLIENT_INFO", "Era", "GATEWAY_NAME", "GATEWAY_VERSION", "HANDSHAKE_VERSION", "HANDSHAKE_VERSIONS",
    "MODERN_VERSION", "MODERN_VERSIONS", "SERVER_INFO", "TASKS_EXTENSION", "client_takes_tasks",
]  # fmt: skip


# The protocol versions of each era, as the SDK knows them (oldest first).
HANDSHAKE_VERSIONS: tuple[str, ...] = tuple(HANDSHAKE_PROTOCOL_VERSIONS)
MODERN_VERSIONS: tuple[str, ...] = tuple(MODERN_PROTOCOL_VERSIONS)
HANDSHAKE_VERSION = "2025-11-25"  # the newest handshake-era version: the era's name
MODERN_VERSION = "2026-07-28"


# The tasks extension of the 2026-07-28 era, and where a request declares what its client takes.
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"


def client_takes_tasks(meta: Mapping[str, Any] | None) -> bool:
    """Whether a 2026-07-28 request declares the tasks extension in its per-request capabilities."""
    caps = (meta or {}).get(CLIENT_CAPABILITIES_KEY)
    extensions = caps.get("extensions") if isinstance(caps, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


class Era(StrEnum):
    """An era of the protocol; its value is the era's newest version (stored with a task)."""

    HANDSHAKE = HANDSHAKE_VERSION  # initialize, sessions, server-to-client requests
    MODERN = MODERN_VERSION  # per-request: no handshake, input_required rounds, the tasks extension

    @classmethod
    def of(cls, version: str | bytes | None) -> "Era":
        """The era of a protocol version; an unknown or absent version is the handshake era."""
        if isinstance(version, bytes):
            version = version.decode("latin-1")
        return cls.MODERN if version in MODERN_VERSIONS else cls.HANDSHAKE

    @property
    def modern(self) -> bool:
        return self is Era.MODERN

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
