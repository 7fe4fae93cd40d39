"""A bearer token -> the caller's Identity, or TokenRefused with a reason fit for the client.

A JWT is verified here (PyJWT): its `alg` must be on the allow-list before anything else is
looked at, its `iss` one of the trusted issuers, its signature made by that issuer's key for that
algorithm (gateway/auth/oauth/keys.py), its `aud` this gateway's resource (RFC 8707), and `exp`,
`nbf` and `iat` within `leeway_seconds`. Any other token goes to RFC 7662 introspection when an
issuer offers it. Then the principal (`principal_claim`, prefixed per issuer) and the required
scopes; a token lacking a scope is refused 403 with the scope it needs.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from dataclasses import dataclass
from typing import Any

import jwt
from cachetools import TTLCache
from jwt.utils import base64url_decode

from ...config.oauth import IssuerConfig, OAuthConfig
from ...errors import TokenRefused
from ..principals import Identity
from .introspection import Introspection
from .keys import IssuerKeys

__all__ = ["OAuthVerifier", "claim_at"]

_REASONS: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
    (jwt.ExpiredSignatureError, "the token has expired"),
    (jwt.ImmatureSignatureError, "the token is not valid yet (nbf or iat in the future)"),
    (jwt.InvalidAudienceError, "the token is not for this resource (its aud must be {resource})"),
    (jwt.InvalidIssuerError, "the token's issuer does not match"),
    (jwt.InvalidSignatureError, "the token's signature does not verify"),
    (jwt.InvalidAlgorithmError, "the token's algorithm does not match its key"),
    (jwt.MissingRequiredClaimError, "the token lacks a required claim"),
)


# A verified JWT is remembered this long at most (and never past its exp, nor once its issuer's
# key set is fetched again): a repeated token costs a hash and a dict lookup, not a signature check.
_VERIFIED_SECONDS = 60.0
_VERIFIED_MAX = 10_000


@dataclass(frozen=True, slots=True)
class _Verified:
    identity: Identity
    keys: IssuerKeys
    key_set: object


class OAuthVerifier:
    def __init__(self, oauth: OAuthConfig, *, static_principals: frozenset[str] = frozenset(),
                 environ: Mapping[str, str] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = oauth
        self._issuers = {i.issuer: i for i in oauth.issuers}
        self.keys = {i.issuer: IssuerKeys(i, oauth, clock=clock) for i in oauth.issuers}
        self._prefixes = {i.issuer: oauth.prefix_of(i) for i in oauth.issuers}
        self._algorithms = frozenset(oauth.algorithms)
        resource = oauth.resource.rstrip("/")
        self._audience = [resource, f"{resource}/"]
        self._introspection = Introspection(oauth, environ, clock=clock)
        self._static = static_principals
        self._required = tuple(oauth.required_scopes)
        self._leeway = oauth.leeway_seconds
        self._decoder = jwt.PyJWT()
        self._verified: TTLCache[bytes, _Verified] = TTLCache(maxsize=_VERIFIED_MAX, ttl=_VERIFIED_SECONDS, timer=clock)

    @property
    def required_scope(self) -> str | None:
        """The scope every token needs (the `scope` of a 401's WWW-Authenticate), or None."""
        return " ".join(self._required) or None

    async def identity(self, token: str) -> Identity:
        if token.count(".") == 2:
            digest = hashlib.sha256(token.encode()).digest()
            seen = self._verified.get(digest)
            if seen is not None and seen.keys.current() is seen.key_set and (
                    seen.identity.expires_at is None or seen.identity.expires_at + self._leeway > time.time()):
                return seen.identity
            issuer, claims, keys, key_set = await self._verify(token)
            identity = self._identity(issuer, claims, token)
            self._verified[digest] = _Verified(identity, keys, key_set)
            return identity
        if self._introspection.enabled:
            issuer, claims = await self._introspection.claims(token)
            self._check_introspected(claims)
        else:
            raise TokenRefused("the token is neither a JWT nor a configured static token")
        return self._identity(issuer, claims, token)

    async def _verify(self, token: str) -> tuple[IssuerConfig, dict[str, Any], IssuerKeys, object]:
        header_segment, payload_segment, _ = token.split(".")
        try:
            header = json.loads(base64url_decode(header_segment))
            unverified = json.loads(base64url_decode(payload_segment))
        except (ValueError, TypeError):
            raise TokenRefused("the token is not a well-formed JWT") from None
        if not isinstance(header, dict) or not isinstance(unverified, dict):
            raise TokenRefused("the token is not a well-formed JWT")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms:
            raise TokenRefused(f"the algorithm {alg!r} is not accepted (accepted: {', '.join(sorted(self._algorithms))})")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenRefused("the token's kid is not a string")
        iss = unverified.get("iss")
        issuer = self._issuers.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            raise TokenRefused(f"the issuer {iss!r} is not trusted")
        keys = self.keys[issuer.issuer]
        key, key_set = await keys.key(kid, alg)
        try:
            claims: dict[str, Any] = self._decoder.decode(
                token, key, algorithms=[alg], audience=self._audience, issuer=issuer.issuer, leeway=self._leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise TokenRefused(_reason(exc, self._audience[0])) from None
        return issuer, claims, keys, key_set

    def _check_introspected(self, claims: Mapping[str, Any]) -> None:
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not any(a in self._audience for a in audiences):
            raise TokenRefused(f"the token is not for this resource (its aud must be {self._audience[0]})")
        now = time.time()
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if isinstance(exp, (int, float)) and exp + self._leeway < now:
            raise TokenRefused("the token has expired")
        if isinstance(nbf, (int, float)) and nbf - self._leeway > now:
            raise TokenRefused("the token is not valid yet (nbf or iat in the future)")

    def _identity(self, issuer: IssuerConfig, claims: dict[str, Any], token: str) -> Identity:
        claim = self.config.principal_claim
        value = claim_at(claims, claim)
        if not isinstance(value, str) or not value:
            raise TokenRefused(f"the token has no {claim!r} claim naming its principal")
        principal = self._prefixes[issuer.issuer] + value
        if principal in self._static:
            raise TokenRefused(f"the principal {principal!r} is a static token's (auth.tokens); an OAuth principal "
                               "never takes its fences and scope")
        scopes = _scopes(claims)
        missing = [s for s in self._required if s not in scopes]
        if missing:
            raise TokenRefused(f"the token lacks the scope {' '.join(missing)}", insufficient_scope=" ".join(self._required))
        exp = claims.get("exp")
        return Identity(principal, MappingProxyType(claims), scopes,
                        float(exp) if isinstance(exp, (int, float)) else None, token)


def claim_at(claims: Mapping[str, Any], path: str) -> Any:
    """A claim by name, or by a dotted path into objects (`realm_access.roles`)."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """`scope` (RFC 9068: space-separated) and `scp` (a list, or a string)."""
    found: set[str] = set()
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            found.update(value.split())
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
    return frozenset(found)


def _reason(exc: jwt.PyJWTError, resource: str) -> str:
    for kind, reason in _REASONS:
        if isinstance(exc, kind):
            if isinstance(exc, jwt.MissingRequiredClaimError):
                return f"the token lacks the {exc.claim!r} claim"
            return reason.format(resource=resource)
    return "the token is not a well-formed JWT"
