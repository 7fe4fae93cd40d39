"""Who a request comes from, as the rest of the gateway sees it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["ANONYMOUS", "ANONYMOUS_IDENTITY", "IDENTITY_SCOPE_KEY", "PRINCIPAL_SCOPE_KEY", "Identity", "identity_of"]

# The principal of every request when no auth is configured.
ANONYMOUS = "anonymous"
# Where the auth middleware leaves the principal in the ASGI scope for the MCP handlers.
PRINCIPAL_SCOPE_KEY = "dex.principal"
# Where it leaves the whole identity (claims, the caller's token) beside the principal.
IDENTITY_SCOPE_KEY = "dex.identity"

_NO_CLAIMS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Identity:
    """A caller as authentication established it.

    `principal` is what fences, tasks, media grants, scope and rate limits key on. `claims` are the
    verified token's claims (empty for a static token). `token` is the caller's own bearer token,
    kept only in memory for an RFC 8693 exchange: it is never forwarded to an upstream, never
    logged, and left out of `repr`.
    """

    principal: str
    claims: Mapping[str, Any] = field(default_factory=lambda: _NO_CLAIMS)
    scopes: frozenset[str] = frozenset()
    expires_at: float | None = None
    token: str | None = field(default=None, repr=False, compare=False)
    # Who approves this caller's calls that need approval (docs/approvals.md): "client" trusts the
    # client's own approval channel, "gateway" holds them for a person's decision.
    approvals: str = "client"


ANONYMOUS_IDENTITY = Identity(ANONYMOUS)


def identity_of(scope: Mapping[str, Any]) -> Identity:
    """The identity the auth middleware left in an ASGI scope (anonymous when none)."""
    identity = scope.get(IDENTITY_SCOPE_KEY)
    if isinstance(identity, Identity):
        return identity
    principal = scope.get(PRINCIPAL_SCOPE_KEY)
    return Identity(str(principal)) if principal is not None else ANONYMOUS_IDENTITY
