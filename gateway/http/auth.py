"""Who is calling: bearer tokens mapped to principals, and the guard that requires one.

Tokens are stored as SHA-256 hex (a leaked config holds no usable token) and compared in
constant time. Without configured tokens every request is the anonymous principal.

The principal also goes into the scope as the SDK's `user`: the SDK's session manager binds a
stateful session to the user that opened it, so another principal's request for that session id
(a POST, a GET stream, a DELETE) is answered 404 as if the session did not exist.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.types import ASGIApp, Receive, Scope, Send

from ..config.model import AuthConfig, TokenConfig
from ..auth.principals import ANONYMOUS, IDENTITY_SCOPE_KEY, PRINCIPAL_SCOPE_KEY, Identity
from ..errors import UNAUTHORIZED
from .asgi import Refusal, header

__all__ = ["Authenticator", "BearerAuth", "sha256_hex"]

# JSON-RPC has no code for "unauthorized" and mcp_types names none: -32000 is the first of the
# implementation-defined server errors; the HTTP status (401) is what clients act on.


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Authenticator:
    config: AuthConfig
    _users: dict[str, AuthenticatedUser] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        users = {t.principal: _user(t.principal) for t in self.config.tokens}
        object.__setattr__(self, "_users", users)

    def user(self, principal: str) -> AuthenticatedUser:
        """The SDK's user for a principal (what a stateful session is bound to)."""
        return self._users.get(principal) or _user(principal)

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def principal(self, authorization: str | None) -> str | None:
        """The principal a bearer token maps to; None when the token is missing or unknown."""
        if not self.config.tokens:
            return ANONYMOUS
        token = _bearer(authorization)
        if token is None:
            return None
        entry = self._match(token)
        return entry.principal if entry else None

    def admit(self, scope: Scope) -> Refusal | None:
        """The request's principal and identity into `scope` (http), or the 401 to answer."""
        authorization = header(scope, b"authorization")
        principal = self.principal(authorization.decode("latin-1") if authorization is not None else None)
        if principal is None:
            return _UNAUTHORIZED
        scope[PRINCIPAL_SCOPE_KEY] = principal
        scope[IDENTITY_SCOPE_KEY] = Identity(principal)
        if self.config.tokens:
            scope["user"] = self.user(principal)
        return None

    def is_admin(self, authorization: str | None) -> bool:
        token = _bearer(authorization)
        expected = self.config.admin_token_sha256
        if token is None or expected is None:
            return False
        return hmac.compare_digest(sha256_hex(token), expected.lower())

    def _match(self, token: str) -> TokenConfig | None:
        digest = sha256_hex(token)
        found = None
        for entry in self.config.tokens:
            # Compare every entry in constant time so timing does not reveal which one matched.
            if hmac.compare_digest(digest, entry.token_sha256.lower()):
                found = entry
        return found


def _user(principal: str) -> AuthenticatedUser:
    # No token is kept: the SDK compares only (client_id, issuer, subject).
    return AuthenticatedUser(AccessToken(token="", client_id=principal, scopes=[], subject=principal))


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


class BearerAuth:
    """401 without a known bearer token; otherwise the principal goes into the ASGI scope."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self._app = app
        self._auth = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (refusal := self._auth.admit(scope)) is not None:
            await refusal.send(send)
            return
        await self._app(scope, receive, send)


_UNAUTHORIZED = Refusal(
    401, UNAUTHORIZED, "Unauthorized: send 'Authorization: Bearer <token>' with a token configured in auth.tokens",
    ((b"www-authenticate", b'Bearer realm="dex-mcp-gateway"'),),
)
