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
