"""RFC 7662 token introspection for opaque (non-JWT) tokens: the issuers that have an endpoint are
asked in turn; the first that says `active` and names this resource in `aud` decides. Answers are
reused for `introspection_cache_seconds` per token (kept by the token's SHA-256, never the token).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import TTLCache

from ...config.oauth import IssuerConfig, OAuthConfig
from ...errors import ConfigError, TokenRefused
from .fetch import FetchFailed, fetch_json

__all__ = ["Introspection"]

logger = logging.getLogger(__name__)


class _Unanswered(TokenRefused):
    """No issuer answered: not remembered, the next request asks again."""


@dataclass(frozen=True)
class _Endpoint:
    issuer: IssuerConfig
    url: str
    client_id: str
    secret: str


class Introspection:
    def __init__(self, oauth: OAuthConfig, environ: Mapping[str, str] | None = None,
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        env = os.environ if environ is None else environ
        self._endpoints: list[_Endpoint] = []
        for issuer in oauth.issuers:
            if issuer.introspection_endpoint is None:
                continue
            name = str(issuer.introspection_client_secret_env)
            secret = env.get(name)
            if not secret:
                raise ConfigError(f"auth.oauth: issuer {issuer.issuer}: the environment variable {name} "
                                  "(introspection_client_secret_env) is not set")
            self._endpoints.append(_Endpoint(issuer, issuer.introspection_endpoint, str(issuer.introspection_client_id),
                                             secret))
        self._timeout = oauth.fetch_timeout_seconds
        self._cache: TTLCache[str, tuple[IssuerConfig, dict[str, Any]] | str] | None = (
            TTLCache(maxsize=10_000, ttl=oauth.introspection_cache_seconds, timer=clock)
            if oauth.introspection_cache_seconds > 0 else None)

    @property
    def enabled(self) -> bool:
        return bool(self._endpoints)

    async def claims(self, token: str) -> tuple[IssuerConfig, dict[str, Any]]:
        """The active token's issuer and introspection answer; TokenRefused otherwise."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cache.get(digest) if self._cache is not None else None
        if isinstance(cached, str):
            raise TokenRefused(cached)
        if cached is not None:
            return cached
        try:
            found = await self._ask(token)
        except _Unanswered:
            raise
        except TokenRefused as refused:
            if self._cache is not None:
                self._cache[digest] = refused.reason
            raise
        if self._cache is not None:
            self._cache[digest] = found
        return found

    async def _ask(self, token: str) -> tuple[IssuerConfig, dict[str, Any]]:
        unreachable = 0
        for endpoint in self._endpoints:
            try:
                answer = await fetch_json(endpoint.url, timeout=self._timeout,
                                          form={"token": token, "token_type_hint": "access_token"},
                                          auth=(endpoint.client_id, endpoint.secret))
            except FetchFailed as exc:
                unreachable += 1
                logger.warning("oauth: introspection at %s failed: %s", endpoint.url, exc)
                continue
            if answer.get("active") is True:
                iss = answer.get("iss")
                if iss is not None and iss != endpoint.issuer.issuer:
                    raise TokenRefused(f"the introspected token's issuer {iss!r} is not {endpoint.issuer.issuer!r}")
                return endpoint.issuer, answer
        if unreachable == len(self._endpoints):
            raise _Unanswered("the token could not be introspected (no issuer answered); try again shortly")
        raise TokenRefused("the token is not active at any trusted issuer")
