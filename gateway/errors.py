"""The gateway's exception hierarchy: exceptions inside, values at the edges.

Code inside the gateway raises these; the front turns them into JSON-RPC errors or `isError`
results (never a stack trace), and the call pipeline turns upstream failures into Dex outcomes.

    GatewayError
    ├── ConfigError               the configuration is malformed (names file, line and key)
    ├── StoreError                a fence or registration store cannot be used
    ├── RequestError              the client's request is wrong: a JSON-RPC error (code, message)
    │   ├── UnknownToolError      a tool name the principal cannot reach
    │   ├── UpstreamRefusedRequest  the upstream refused the request itself (passed on as it said)
    │   └── SessionLimitReached  no new stateful session: a session cap is reached (HTTP 429 / 503)
    ├── UpstreamError             talking to an upstream MCP server failed
    │   ├── UpstreamNotSent       provably never sent: safe to send again
    │   ├── UpstreamInterrupted   may have been sent, no usable answer
    │   └── UpstreamRpcError      the upstream answered with a JSON-RPC error
    ├── MediaError                an image cannot be taken, stored or served (gateway/media/)
    │   ├── InvalidImage          an image breaks a rule (type, size, base64, count); names the rule
    │   └── MediaStoreError       the media store or the grants table failed, or holds a bad object
    ├── TransportError            one HTTP exchange with an upstream failed (upstreams/transport.py)
    │   ├── RequestNotSent        provably no byte of the request left
    │   └── RequestMaybeSent      the request may have reached the server
    └── ConnectorError            (gateway/connectors/errors.py) manifests, bindings, registrations

`HttpConnection` turns transport errors into `UpstreamNotSent` / `UpstreamInterrupted`, so the
rest of the gateway sees only the Upstream* errors.
"""

from __future__ import annotations

from typing import Any

from mcp_types import INVALID_PARAMS


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""


class ConfigError(GatewayError):
    """The configuration is malformed; the message names the file, line and key."""


class UpstreamError(GatewayError):
    """Talking to an upstream MCP server failed.

    `reason` is safe to show a client (it names no address, path or exception class); `detail`,
    when given, is what the operator needs in the log (the address, the OS error)."""

    def __init__(self, upstream: str, message: str, *, detail: str | None = None) -> None:
        super().__init__(f"upstream {upstream!r}: {message}" + (f" ({detail})" if detail else ""))
        self.upstream = upstream
        self.reason = message
        self.detail = detail


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


class StoreError(GatewayError):
    """A fence or registration store cannot be used (not open, or its database failed)."""


class MediaError(GatewayError):
    """An image cannot be taken, stored or served (gateway/media/)."""


class InvalidImage(MediaError):
    """An image of a result breaks a rule; the message names the rule (the image is named by the caller)."""


class MediaStoreError(MediaError):
    """The media store or the grants table failed, or an object in the store is not what it should be."""


class RequestError(GatewayError):
    """The client's request is wrong; answered as a JSON-RPC error with this code and message."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class UnknownToolError(RequestError):
    """The client named a tool the gateway does not expose (to this principal)."""

    def __init__(self, name: str) -> None:
        super().__init__(INVALID_PARAMS, f"unknown tool {name!r}")
        self.name = name


class UpstreamRefusedRequest(RequestError):
    """The upstream refused the client's request itself, before running anything: a capability the
    client did not declare (-32021), or a bad round of a multi-round-trip call (an answer or a
    `requestState` it rejects). The client gets that JSON-RPC error, as from the server directly."""


class SessionLimitReached(RequestError):
    """A new stateful session is refused: its principal holds `server.max_sessions_per_principal`
    sessions (HTTP 429), or the process holds `server.max_sessions` (HTTP 503)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(-32000, message)  # the first implementation-defined server error
        self.status = status


class TransportError(GatewayError):
    """One HTTP exchange with an upstream failed (gateway/upstreams/transport.py).

    Never raised as-is: the subclass says whether any byte of the request left the gateway.
    """


class RequestNotSent(TransportError):
    """Provably no byte of the request left: connection refused, DNS failure, connect or TLS
    handshake failure, connect timeout, invalid URL, closed transport. Safe to treat as never sent."""


class RequestMaybeSent(TransportError):
    """The request (or part of it) may have reached the server, and the exchange failed after
    that: reset or EOF after writing, read error, malformed response. Never re-sent by the transport."""
