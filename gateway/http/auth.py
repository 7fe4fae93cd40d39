"""Who is calling: bearer tokens mapped to principals, and the guard that requires one.

Static tokens (`auth.tokens`) are stored as SHA-256 hex (a leaked config holds no usable token)
and compared in constant time, always first. With `auth.oauth` any other bearer token is checked
as an OAuth access token (gateway/auth/oauth/). Without either every request is the anonymous
principal.

Refusals follow RFC 6750 and the MCP authorization spec: 401 with `WWW-Authenticate: Bearer`
naming the protected resource metadata (`resource_metadata`) and the scope needed, plus
`error="invalid_token"` and a short description when a token was sent but refused; 403
`insufficient_scope` with the scope needed. The reason is logged, never the token.

The principal also goes into the scope as the SDK's `user`: the SDK's session manager binds a
stateful session to the user that opened it, so another principal's request for that session id
(a POST, a GET stream, a DELETE) is answered 404 as if the session did not exist.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url
from pydantic import AnyHttpUrl
from starlette.types import ASGIApp, Receive, Scope, Send

from ..auth.oauth import OAuthVerifier
from ..config.model import AuthConfig, TokenConfig
from ..auth.principals import ANONYMOUS_IDENTITY, IDENTITY_SCOPE_KEY, PRINCIPAL_SCOPE_KEY, Identity
from ..auth.scope import PrincipalScope, oauth_approvals, oauth_approver
from ..errors import UNAUTHORIZED, TokenRefused
from .asgi import Refusal, header

__all__ = ["Authenticator", "BearerAuth", "sha256_hex"]

logger = logging.getLogger(__name__)

# JSON-RPC has no code for "unauthorized" and mcp_types names none: -32000 is the first of the
# implementation-defined server errors; the HTTP status (401) is what clients act on.


def sha256_hex(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Authenticator:
    config: AuthConfig
    # The environment introspection secrets are read from (None: the process's).
    environ: Mapping[str, str] | None = field(default=None, repr=False)
    _users: dict[str, AuthenticatedUser] = field(init=False, repr=False, compare=False)
    verifier: OAuthVerifier | None = field(init=False, repr=False, compare=False)
    # What each principal may reach (the pipeline checks it; `admit` binds OAuth principals' claims).
    scope: PrincipalScope = field(init=False, repr=False, compare=False)
    resource_metadata_url: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        users = {t.principal: _user(t.principal) for t in self.config.tokens}
        object.__setattr__(self, "_users", users)
        oauth = self.config.oauth
        verifier = None if oauth is None else OAuthVerifier(
            oauth, static_principals=frozenset(users), environ=self.environ)
        object.__setattr__(self, "verifier", verifier)
        object.__setattr__(self, "scope", PrincipalScope(self.config))
        # Where clients find this resource's RFC 9728 metadata (with `auth.oauth`).
        object.__setattr__(self, "resource_metadata_url", None if oauth is None else
                           str(build_resource_metadata_url(AnyHttpUrl(oauth.resource))))

    def user(self, principal: str) -> AuthenticatedUser:
        """The SDK's user for a principal (what a stateful session is bound to)."""
        return self._users.get(principal) or _user(principal)

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    async def identity(self, authorization: str | None) -> Identity | None:
        """Who sends this Authorization header: None without a bearer token; TokenRefused for a
        token that is neither a static one nor an acceptable OAuth token."""
        if not self.config.enabled:
            return ANONYMOUS_IDENTITY
        token = _bearer(authorization)
        if token is None:
            return None
        entry = self._match(token)
        if entry is not None:
            return Identity(entry.principal, approvals=entry.approvals)
        if self.verifier is None or self.config.oauth is None:
            raise TokenRefused("the token is not one configured in auth.tokens")
        identity = await self.verifier.identity(token)
        approvals = oauth_approvals(self.config.oauth, identity.claims)
        return identity if approvals == identity.approvals else replace(identity, approvals=approvals)

    async def admit(self, scope: Scope) -> Refusal | None:
        """The request's principal and identity into `scope` (http), or the 401 / 403 to answer.
        An OAuth identity's claims bind its principal's scope (`PrincipalScope.bind`)."""
        authorization = header(scope, b"authorization")
        try:
            identity = await self.identity(authorization.decode("latin-1") if authorization is not None else None)
        except TokenRefused as refused:
            return self._refusal(scope, refused)
        except Exception:  # noqa: BLE001 - a check that broke refuses the token; never a 500
            logger.exception("auth: checking a bearer token failed")
            return self._refusal(scope, TokenRefused("the token could not be checked; try again"))
        if identity is None:
            return self._refusal(scope, None)
        scope[PRINCIPAL_SCOPE_KEY] = identity.principal
        scope[IDENTITY_SCOPE_KEY] = identity
        if self.config.enabled:
            scope["user"] = self.user(identity.principal)
            if identity.claims:
                self.scope.bind(identity)
        return None

    def _refusal(self, scope: Scope, refused: TokenRefused | None) -> Refusal:
        """RFC 6750's answer: 401 with the metadata URL and the scope needed, plus the error and its
        description for a refused token; 403 `insufficient_scope` (the reason is logged, never the token)."""
        metadata = self.resource_metadata_url
        params: list[str] = []
        if refused is not None:
            error = "insufficient_scope" if refused.insufficient_scope is not None else "invalid_token"
            params += [f"error={_quoted(error)}", f"error_description={_quoted(refused.reason)}"]
            client = scope.get("client")
            logger.info("auth: %s %s from %s refused (%d %s): %s", scope.get("method"), scope.get("path"),
                        client[0] if client else "?", refused.status, error, refused.reason)
        if metadata is not None:
            params.append(f"resource_metadata={_quoted(metadata)}")
        needed = refused.insufficient_scope if refused is not None and refused.insufficient_scope else (
            self.verifier.required_scope if self.verifier is not None else None)
        if needed:
            params.append(f"scope={_quoted(needed)}")
        if refused is None:
            if metadata is None:
                return _UNAUTHORIZED
            message = (f"Unauthorized: send 'Authorization: Bearer <token>' with an access token for this resource "
                       f"(how to get one: {metadata})")
        elif refused.insufficient_scope is not None:
            message = f"Forbidden: {refused.reason} (needed: {refused.insufficient_scope})"
        else:
            message = f"Unauthorized: {refused.reason}"
        return Refusal(refused.status if refused is not None else 401, UNAUTHORIZED, message,
                       ((b"www-authenticate", ("Bearer " + ", ".join(params)).encode("ascii")),))

    def is_admin(self, authorization: str | None) -> bool:
        token = _bearer(authorization)
        expected = self.config.admin_token_sha256
        if token is None or expected is None:
            return False
        return hmac.compare_digest(sha256_hex(token), expected.lower())

    async def approver(self, authorization: str | None) -> str | None:
        """Who may decide held calls with this Authorization header (docs/approvals.md): the name of
        an `auth.approver_tokens` entry, `auth.admin_token_name` for the admin token, the principal of an OAuth
        token whose claims meet `auth.oauth.approvers`; None for anyone else (a static agent token
        included: an approver token is never an agent token)."""
        token = _bearer(authorization)
        if token is None:
            return None
        if self.is_admin(authorization):
            return self.config.admin_token_name
        digest = sha256_hex(token)
        found = None
        for entry in self.config.approver_tokens:
            if hmac.compare_digest(digest, entry.token_sha256.lower()):
                found = entry.name
        oauth = self.config.oauth
        if found is not None or oauth is None or oauth.approvers is None or self.verifier is None:
            return found
        if self._match(token) is not None:
            return None
        try:
            identity = await self.verifier.identity(token)
        except TokenRefused:
            return None
        except Exception:  # noqa: BLE001 - a check that broke refuses the token; never a 500
            logger.exception("auth: checking an approver's bearer token failed")
            return None
        return identity.principal if oauth_approver(oauth, identity.claims) else None

    def _match(self, token: str) -> TokenConfig | None:
        if not self.config.tokens:
            return None
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


def _quoted(text: str) -> str:
    """A quoted-string of RFC 6750's auth-params (printable ASCII without `"` and `\\`)."""
    cleaned = "".join(c if " " <= c <= "~" and c not in '"\\' else "'" if c == '"' else " " for c in text)
    return f'"{cleaned}"'


class BearerAuth:
    """401 / 403 without an acceptable bearer token; otherwise the identity goes into the ASGI
    scope (`/media`; `/mcp` runs `Authenticator.admit` in its edge, gateway/http/edge.py)."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator) -> None:
        self._app = app
        self._auth = authenticator

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (refusal := await self._auth.admit(scope)) is not None:
            await refusal.send(send)
            return
        await self._app(scope, receive, send)


_UNAUTHORIZED = Refusal(
    401, UNAUTHORIZED, "Unauthorized: send 'Authorization: Bearer <token>' with a token configured in auth.tokens",
    ((b"www-authenticate", b'Bearer realm="dex-mcp-gateway"'),),
)
