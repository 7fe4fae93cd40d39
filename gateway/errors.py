"""The gateway's exception hierarchy: exceptions inside, values (JSON-RPC errors, isError results) at the edges."""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""


class ConfigError(GatewayError):
    """The configuration is malformed; the message names the file, line and key."""


class UpstreamError(GatewayError):
    """Talking to an upstream MCP server failed."""

    def __init__(self, upstream: str, message: str) -> None:
        super().__init__(f"upstream {upstream!r}: {message}")
        self.upstream = upstream
        self.reason = message


class UpstreamNotSent(UpstreamError):
    """The request provably never reached the upstream (connect failed, process not started)."""


class UpstreamInterrupted(UpstreamError):
    """The request may have reached the upstream, and no usable answer came back."""


class UpstreamRpcError(UpstreamError):
    """The upstream answered with a JSON-RPC error."""

    def __init__(self, upstream: str, code: int, message: str, data: object = None) -> None:
        super().__init__(upstream, f"MCP error {code}: {message}")
        self.code = code
        self.rpc_message = message
        self.data = data


class UnknownToolError(GatewayError):
    """The client named a tool the gateway does not expose."""
