"""Each trusted issuer's signing keys (its JWKS): discovered from its metadata when no `jwks_uri`
is configured, cached for `jwks_cache_seconds` (cachetools), and fetched again when a token names
a `kid` the cache does not hold, so a key the issuer adds is used and a key it removes stops being
accepted without a restart. Fetches per issuer are at most one per `jwks_min_refetch_seconds`:
tokens with made-up kids cost the issuer nothing past that. When a fetch fails the last good
keys stay in use (an issuer's hiccup does not refuse every caller), and the failure is logged.

A key verifies only the algorithm its type is made for (RSA: RS*/PS*, EC P-256: ES256, ...,
OKP Ed25519: EdDSA), never an `oct` (shared secret) key, and only when its `alg` and `use`,
if stated, agree: a token cannot pick an algorithm that turns a public key into an HMAC secret.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import jwt
from cachetools import TTLCache

from ...config.oauth import IssuerConfig, OAuthConfig, check_oauth_url
from ...errors import TokenRefused
from .fetch import FetchFailed, fetch_json

__all__ = ["IssuerKeys", "metadata_urls"]

logger = logging.getLogger(__name__)

# What each algorithm needs of a key: its type, and its curve (None: any).
_KEY_FOR: dict[str, tuple[str, tuple[str, ...] | None]] = {
    **{f"{p}{n}": ("RSA", None) for p in ("RS", "PS") for n in ("256", "384", "512")},
    "ES256": ("EC", ("P-256",)), "ES384": ("EC", ("P-384",)), "ES512": ("EC", ("P-521",)),
    "EdDSA": ("OKP", ("Ed25519", "Ed448")),
}


@dataclass
class _KeySet:
    """One fetched JWKS: its keys by kid, and the keys made ready for verifying, per (kid, alg)."""

    by_kid: dict[str, list[dict[str, Any]]]
    without_kid: list[dict[str, Any]]
    ready: dict[tuple[str, str], jwt.PyJWK] = field(default_factory=dict)

    @classmethod
    def of(cls, document: dict[str, Any]) -> "_KeySet":
        keys = document.get("keys")
        if not isinstance(keys, list):
            raise FetchFailed("the JWKS has no 'keys' list")
        by_kid: dict[str, list[dict[str, Any]]] = {}
        without_kid: list[dict[str, Any]] = []
        for key in keys:
            if not isinstance(key, dict):
                continue
            kid = key.get("kid")
            if isinstance(kid, str):
                by_kid.setdefault(kid, []).append(key)
            else:
                without_kid.append(key)
        return cls(by_kid, without_kid)

    def holds(self, kid: str) -> bool:
        return kid in self.by_kid

    def key(self, kid: str | None, alg: str) -> jwt.PyJWK:
        """The key that verifies `alg` under `kid`; TokenRefused when the set has one of that kid
        but of another type; KeyError when it has none (the caller may fetch again)."""
        ready = self.ready.get((kid or "", alg))
        if ready is not None:
            return ready
        if kid is not None:
            named = self.by_kid[kid]  # KeyError: unknown kid
            usable = [k for k in named if _fits(k, alg)]
            if not usable:
                kinds = ", ".join(sorted({str(k.get("kty")) for k in named}))
                raise TokenRefused(f"key {kid!r} is of type {kinds} and does not verify {alg}")
        else:
            usable = [k for keys in (self.without_kid, *self.by_kid.values()) for k in keys if _fits(k, alg)]
            if len(usable) != 1:
                raise TokenRefused(f"the token names no key (kid) and the issuer has {len(usable)} {alg} keys")
        try:
            ready = jwt.PyJWK(usable[0], algorithm=alg)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError) as exc:
            logger.warning("oauth: a key of the issuer cannot be used (kid %r): %s", kid, exc)
            raise TokenRefused(f"the issuer's key {kid!r} cannot be used") from None
        self.ready[(kid or "", alg)] = ready
        return ready


def _fits(key: dict[str, Any], alg: str) -> bool:
    kty, curves = _KEY_FOR[alg]
    if key.get("kty") != kty or (curves is not None and key.get("crv") not in curves):
        return False
    if key.get("use") not in (None, "sig") or key.get("alg") not in (None, alg):
        return False
    ops = key.get("key_ops")
    return ops is None or (isinstance(ops, list) and "verify" in ops)


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata is: OpenID Connect discovery, then RFC 8414."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    return [
        f"{issuer.rstrip('/')}/.well-known/openid-configuration",
        urlunsplit((parts.scheme, parts.netloc, f"/.well-known/oauth-authorization-server{path}", "", "")),
    ]


class IssuerKeys:
    """One issuer's keys, as described in the module docstring."""

    def __init__(self, issuer: IssuerConfig, oauth: OAuthConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.issuer = issuer.issuer
        self._jwks_uri = issuer.jwks_uri
        self._timeout = oauth.fetch_timeout_seconds
        self._min_interval = oauth.jwks_min_refetch_seconds
        self._clock = clock
        self._cache: TTLCache[str, _KeySet] = TTLCache(maxsize=1, ttl=oauth.jwks_cache_seconds, timer=clock)
        self._last_good: _KeySet | None = None
        self._last_attempt = -math.inf
        self._lock = anyio.Lock()
        # Fetches of the JWKS itself (tests and /metrics-style reporting).
        self.fetches = 0

    def current(self) -> object | None:
        """The key set in use now (None once it is due for a fetch): a token verified with it
        stays verified while this is the same object."""
        return self._cache.get("jwks")

    async def key(self, kid: str | None, alg: str) -> tuple[jwt.PyJWK, object]:
        """The key for (kid, alg), and the key set it came from (see `current`)."""
        keys = self._cache.get("jwks") or await self._refresh(None)
        try:
            return keys.key(kid, alg), keys
        except KeyError:
            pass
        keys = await self._refresh(kid)
        try:
            return keys.key(kid, alg), keys
        except KeyError:
            raise TokenRefused(f"the issuer has no key {kid!r} (its JWKS was checked)") from None

    async def _refresh(self, kid: str | None) -> _KeySet:
        """The keys after fetching them again, unless another request just did (the cache then
        holds them: with the kid sought) or the last attempt is too recent."""
        async with self._lock:
            cached = self._cache.get("jwks")
            if cached is not None and (kid is None or cached.holds(kid)):
                return cached
            now = self._clock()
            if now - self._last_attempt < self._min_interval:
                keys = cached or self._last_good
                if keys is None:
                    raise TokenRefused("the issuer's keys are not available yet; try again shortly")
                return keys
            self._last_attempt = now
            try:
                keys = _KeySet.of(await fetch_json(await self._jwks_url(), timeout=self._timeout))
            except FetchFailed as exc:
                logger.warning("oauth: the keys of %s could not be fetched: %s", self.issuer, exc)
                keys = cached or self._last_good
                if keys is None:
                    raise TokenRefused("the issuer's keys could not be fetched") from None
                return keys
            self.fetches += 1
            self._cache["jwks"] = self._last_good = keys
            logger.info("oauth: fetched %d keys of %s", sum(map(len, keys.by_kid.values())) + len(keys.without_kid),
                        self.issuer)
            return keys

    async def _jwks_url(self) -> str:
        if self._jwks_uri is not None:
            return self._jwks_uri
        problems: list[str] = []
        for url in metadata_urls(self.issuer):
            try:
                metadata = await fetch_json(url, timeout=self._timeout)
            except FetchFailed as exc:
                problems.append(str(exc))
                continue
            if metadata.get("issuer") != self.issuer:
                problems.append(f"{url} names issuer {metadata.get('issuer')!r}, not {self.issuer!r}")
                continue
            jwks_uri = metadata.get("jwks_uri")
            try:
                self._jwks_uri = check_oauth_url(str(jwks_uri), what="jwks_uri")
            except ValueError as exc:
                problems.append(f"{url}: {exc}")
                continue
            return self._jwks_uri
        raise FetchFailed("no usable metadata: " + "; ".join(problems))
