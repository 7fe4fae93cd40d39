"""The gateway's exception hierarchy: exceptions inside, values at the edges.

Code inside the gateway raises these; the front turns them into JSON-RPC errors or `isError`
results (never a stack trace), and the call pipeline turns upstream failures into Dex outcomes.

    GatewayError
    ├── ConfigError               the configuration is malformed (names file, line and key)
    ├── TokenRefused              a bearer token is refused (401 invalid_token, 403 insufficient_scope)
    ├── StoreError                a fence or registration store cannot be used
    ├── ApprovalError             a decision on a held call is refused (docs/approvals.md)
    │   ├── ApprovalNotFound      no approval has this id
    │   └── SelfApproval          the approver is the calling principal
    ├── RequestError              the client's request is wrong: a JSON-RPC error (code, message)
    │   ├── UnknownToolError      a tool name the principal cannot reach
    │   ├── ToolHeldForReview     its definition changed on a `pinning: hold` upstream (gateway/pins/)
    │   ├── UpstreamRefusedRequest  the upstream refused the request itself (passed on as it said)
    │   ├── RateLimited           a principal's or upstream's rate limit (-32029): nothing was sent
    │   ├── TaskBudgetExceeded    the principal's stored task results fill their budget (-32029)
    │   └── SessionLimitReached   no new stateful session: a session cap is reached (HTTP 429 / 503)
    ├── RelayRefused              the calling client cannot answer an upstream's question (sent upstream)
    ├── InputNotProvided          the upstream needs input the calling client cannot give
    ├── InvalidResult             an upstream result breaks the MCP schema (names where)
    ├── SessionLost               the upstream answered 404 for our session id: handshake again
    ├── UpstreamError             talking to an upstream MCP server failed
    │   ├── UpstreamNotSent       provably never sent: safe to send again
    │   ├── UpstreamInterrupted   may have been sent, no usable answer
    │   │   └── UpstreamAnswerTooLarge  its answer passed the size cap: reading stopped
    │   ├── UpstreamListingRefused  a listing has more items than max_listed_items
    │   └── UpstreamRpcError      the upstream answered with a JSON-RPC error
    ├── MediaError                an image cannot be taken, stored or served (gateway/media/)
    │   ├── InvalidImage          an image breaks a rule (type, size, base64, count); names the rule
    │   └── MediaStoreError       the media store or the grants table failed, or holds a bad object
    ├── TransportError            one HTTP exchange with an upstream failed (upstreams/transport.py)
    │   ├── RequestNotSent        provably no byte of the request left
    │   │   └── LocalLimitReached  the gateway's own limit (connection pool, open files) held it back
    │   └── RequestMaybeSent      the request may have reached the server
    │       └── ResponseTooLarge  the answer passed the size cap: reading stopped, connection closed
    └── ConnectorError            (gateway/connectors/errors.py) manifests, bindings, registrations

The HTTP channel (gateway/upstreams/channels/http.py) turns transport errors into `UpstreamNotSent` / `UpstreamInterrupted`, so the
rest of the gateway sees only the Upstream* errors.
"""

from __future__ import annotations

import math
from typing import Any

from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND

__all__ = [
    "UNAUTHORIZED", "UNAVAILABLE", "RATE_LIMITED", "DRAINING", "GatewayError", "ConfigError", "TokenRefused",
    "UpstreamError",
    "UpstreamNotSent", "UpstreamUnauthorized", "UpstreamInterrupted", "UpstreamAnswerTooLarge", "UpstreamListingRefused",
    "UpstreamRpcError", "StoreError", "ApprovalError", "ApprovalNotFound", "SelfApproval", "MediaError", "InvalidImage", "MediaStoreError", "RequestError",
    "UnknownToolError", "ToolHeldForReview", "UpstreamRefusedRequest", "RateLimited", "TaskBudgetExceeded", "RelayRefused",
    "InputNotProvided", "InvalidResult", "SessionLost", "TransportError", "RequestNotSent",
    "LocalLimitReached", "RequestMaybeSent", "ResponseTooLarge",
]

# The gateway's own JSON-RPC error codes (the spec's are in mcp_types).
UNAUTHORIZED = -32000  # no or an unknown credential (HTTP 401)
UNAVAILABLE = -32000  # the gateway is starting, or its runtime stopped (HTTP 503): nothing was done
RATE_LIMITED = -32029  # a rate limit or a budget: nothing was sent
DRAINING = -32030  # the process is draining: nothing was done, send it elsewhere


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""


class ConfigError(GatewayError):
    """The configuration is malformed; the message names the file, line and key."""


class TokenRefused(GatewayError):
    """A bearer token the gateway does not accept (gateway/auth/oauth/): answered 401 `invalid_token`
    with `reason` as the description, or 403 `insufficient_scope` naming the scope needed. The
    reason never holds the token."""

    def __init__(self, reason: str, *, insufficient_scope: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.insufficient_scope = insufficient_scope

    @property
    def status(self) -> int:
        return 403 if self.insufficient_scope is not None else 401


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


class UpstreamUnauthorized(UpstreamNotSent):
    """The upstream refused the request's credentials (HTTP 401, or 403 with a Bearer challenge): it
    did not run the request."""


class UpstreamInterrupted(UpstreamError):
    """The request may have reached the upstream, and no usable answer came back."""


class UpstreamAnswerTooLarge(UpstreamInterrupted):
    """The upstream's answer passed the gateway's size cap; reading stopped and the connection was
    closed. `read` bytes were read when it stopped, over `cap`."""

    def __init__(self, upstream: str, *, read: int, cap: int) -> None:
        super().__init__(upstream, f"the answer is over {cap} bytes, the gateway's cap for an upstream answer")
        self.read = read
        self.cap = cap


class UpstreamListingRefused(UpstreamError):
    """A listing of the upstream has more items than its `max_listed_items`: refused whole."""


class UpstreamRpcError(UpstreamError):
    """The upstream answered with a JSON-RPC error."""

    def __init__(self, upstream: str, code: int, message: str, data: object = None) -> None:
        super().__init__(upstream, f"MCP error {code}: {message}")
        self.code = code
        self.rpc_message = message
        self.data = data


class StoreError(GatewayError):
    """A fence or registration store cannot be used (not open, or its database failed)."""


class ApprovalError(GatewayError):
    """A decision on a held call is refused (docs/approvals.md)."""


class ApprovalNotFound(ApprovalError):
    """No approval has this id."""


class SelfApproval(ApprovalError):
    """The approver is the principal whose call is held: a caller never approves its own call."""


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


class ToolHeldForReview(RequestError):
    """The tool's definition changed (or is new) on an upstream with `pinning: hold`, and no operator
    has accepted it yet (gateway/pins/): the call is refused, nothing was sent."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__(INVALID_PARAMS, f"the tool {name!r} was not run: {text}")
        self.name = name


class UpstreamRefusedRequest(RequestError):
    """The upstream refused the client's request itself, before running anything: a capability the
    client did not declare (-32021), or a bad round of a multi-round-trip call (an answer or a
    `requestState` it rejects). The client gets that JSON-RPC error, as from the server directly."""


class RateLimited(RequestError):
    """A rate limit held the call back (`pipeline/ratelimits.py`): nothing was sent."""

    def __init__(self, kind: str, name: str, per_second: float, capacity: float, retry_after: float) -> None:
        wait = math.ceil(max(retry_after, 0.001) * 10) / 10  # up, to a tenth of a second
        who = f"the principal {name!r} may make" if kind == "principal" else f"the upstream {name!r} takes at most"
        message = (
            f"Rate limited: {who} {per_second:g} tools/call per second (bursts of "
            f"{capacity:g}). The call was not sent; retry after {wait:g} s."
        )
        super().__init__(RATE_LIMITED, message, {"retryAfterSeconds": wait, "limit": kind, "name": name, "sent": False})
        self.retry_after = wait


class TaskBudgetExceeded(RequestError):
    """The principal's stored task results fill `tasks.max_result_bytes_per_principal`: no new task."""

    def __init__(self, principal: str, held: int, limit: int) -> None:
        super().__init__(RATE_LIMITED, (
            f"Task refused: the principal {principal!r} holds {held} bytes of task results, and "
            f"tasks.max_result_bytes_per_principal allows {limit} bytes. The call was not sent; retry when older "
            "tasks have expired (at their ttl)."
        ), {"limit": "tasks.max_result_bytes_per_principal", "maxBytes": limit, "heldBytes": held, "sent": False})


class RelayRefused(GatewayError):
    """The calling client cannot answer a server-to-client request; sent upstream as an error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @classmethod
    def no_session(cls, method: str) -> "RelayRefused":
        """A client served statelessly has no channel for requests from the server."""
        return cls(
            METHOD_NOT_FOUND,
            f"{method} needs a live session with the client; the gateway serves this client statelessly",
        )


class InputNotProvided(GatewayError):
    """The upstream needs input that the calling client cannot give (the text says why)."""

    def __init__(self, methods: list[str], reason: str) -> None:
        self.methods = methods
        self.reason = reason
        super().__init__(f"the upstream asked for {', '.join(methods) or 'input'}: {reason}")


class InvalidResult(GatewayError, ValueError):
    """The result breaks the MCP schema; the message says where (e.g. `content[2].text`)."""


class SessionLost(GatewayError):
    """The upstream answered 404 for our session id: it restarted or expired the session."""


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


class LocalLimitReached(RequestNotSent):
    """The gateway's own limit held the request back (every pooled connection busy past the pool
    timeout, or the process near its open-file limit); the text is safe to show a client."""


class RequestMaybeSent(TransportError):
    """The request (or part of it) may have reached the server, and the exchange failed after
    that: reset or EOF after writing, read error, malformed response. Never re-sent by the transport."""


class ResponseTooLarge(RequestMaybeSent):
    """The response passed the transport's size cap (a body, or one SSE event); reading stopped there
    and the connection is closed, never reused. `read` bytes were read, over `cap`."""

    def __init__(self, message: str, *, read: int, cap: int) -> None:
        super().__init__(message)
        self.read = read
        self.cap = cap
