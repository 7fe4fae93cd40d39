"""The tokens the gateway sends to an HTTP upstream, by its `auth.mode` (gateway/config/upstream_auth.py).

    static              the configured headers, nothing here (`UpstreamCredentials.active` is False)
    client_credentials  the gateway's own token for the upstream (OAuth client credentials, RFC 6749
                        4.4, `resource` = the upstream: RFC 8707), on every request
    token_exchange      per call, the caller's token exchanged at the provider (RFC 8693) for one
                        whose audience is the upstream and whose subject is the caller; the
                        gateway's own requests (negotiation, listings) go with its own token

The caller's own token is never sent anywhere but to the provider's token endpoint, as the
`subject_token` of an exchange.

Tokens are cached per (principal, upstream) -- one `UpstreamCredentials` per upstream, keyed by
principal inside -- until shortly before they expire (`refresh_before_seconds`, at most half the
token's lifetime), and an exchanged token never past the `exp` of the caller's token it came from. The cache is a bounded LRU dict (`max_cached_tokens`, each entry with its own
expiry, so not a `cachetools.TTLCache` with one TTL for all). Concurrent requests for the same
key share one token request (single flight). A token is a `Bearer`, whose repr hides it; nothing
here logs a token.

Failures raise `UpstreamNotSent`: the call never left the gateway (no token, no request), so its
fence is released and the client told what is missing, never sent again by the gateway.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..auth.principals import Identity
from ..config.model import HttpUpstreamConfig
from ..errors import ConfigError, UpstreamNotSent

__all__ = ["Bearer", "UpstreamCredentials", "TOKEN_EXCHANGE_GRANT"]

logger = logging.getLogger(__name__)

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
_ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
_DEFAULT_LIFETIME = 60.0  # a token answer without expires_in: used this long
_OWN = "\x00gateway"  # the cache key of the gateway's own token (no principal can be it: principals are text)


@dataclass(frozen=True, slots=True)
class Bearer:
    """An access token for one upstream; its repr never shows it."""

    token: str = field(repr=False)

    @property
    def header(self) -> str:
        return f"Bearer {self.token}"


@dataclass(frozen=True, slots=True)
class _Cached:
    bearer: Bearer
    renew_at: float  # monotonic


class _Tokens:
    """A bounded LRU of tokens, each valid until its own `renew_at`."""

    def __init__(self, size: int, clock: Callable[[], float]) -> None:
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[str, _Cached] = OrderedDict()

    def get(self, key: str) -> Bearer | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.renew_at <= self._clock():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry.bearer

    def put(self, key: str, entry: _Cached) -> None:
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


class UpstreamCredentials:
    """The tokens of one upstream. `bearer(None)`: the gateway's own; `bearer(identity)`: for a
    call by that caller (token_exchange; the gateway's own otherwise)."""

    def __init__(
        self,
        config: HttpUpstreamConfig,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        auth = config.auth
        self.name = config.name
        self.mode = auth.mode
        self._auth = auth
        self._resource = config.token_resource
        self._secret = ""
        if self.active:
            env = os.environ if environ is None else environ
            secret = env.get(auth.client_secret_env or "")
            if not secret:
                raise ConfigError(f"upstream {config.name!r}: auth.client_secret_env names {auth.client_secret_env}, "
                                  "which is not set in the gateway's environment (the client secret for auth.mode "
                                  f"{auth.mode})")
            self._secret = secret
        self._clock = clock
        self._tokens = _Tokens(auth.max_cached_tokens, clock)
        self._inflight: dict[str, asyncio.Task[Bearer]] = {}
        self._endpoint: str | None = auth.token_endpoint
        self._endpoint_lock = asyncio.Lock()
        self._client: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return f"UpstreamCredentials({self.name!r}, mode={self.mode!r}, cached={len(self._tokens)})"

    @property
    def active(self) -> bool:
        """Whether the gateway sets Authorization itself (not the static headers)."""
        return self.mode != "static"

    @property
    def per_caller(self) -> bool:
        return self.mode == "token_exchange"

    async def bearer(self, caller: Identity | None = None) -> Bearer | None:
        """The token for a request: None in static mode. Raises UpstreamNotSent (nothing sent)."""
        if not self.active:
            return None
        if caller is None or not self.per_caller:
            return await self._get(_OWN, self._client_credentials)
        subject = caller.token
        if subject is None:
            raise UpstreamNotSent(
                self.name, f"this upstream takes each caller's own identity (auth.mode token_exchange), and "
                f"principal {caller.principal!r} has no OAuth access token to exchange (a static token or no "
                "authentication); call it with an access token from the identity provider")
        return await self._get(caller.principal, lambda: self._exchange(subject), not_after=caller.expires_at)

    def forget(self, caller: Identity | None) -> None:
        """Drop a cached token the upstream refused (HTTP 401): the next call asks for a new one."""
        self._tokens.forget(_OWN if caller is None or not self.per_caller else caller.principal)

    async def aclose(self) -> None:
        for task in list(self._inflight.values()):
            task.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- the cache and the single flight ---------------------------------------------------------

    async def _get(self, key: str, fetch: Callable[[], Any], not_after: float | None = None) -> Bearer:
        cached = self._tokens.get(key)
        if cached is not None:
            return cached
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._fetch_into(key, fetch, not_after))
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._landed(key, done))
        # Shielded: a caller that goes away does not cancel the request the others wait on.
        return await asyncio.shield(task)

    def _landed(self, key: str, task: asyncio.Task[Bearer]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved: a failure nobody waits for any more is not reported as unhandled

    async def _fetch_into(self, key: str, fetch: Callable[[], Any], not_after: float | None) -> Bearer:
        token, lifetime = await fetch()
        bearer = Bearer(token)
        renew_in = lifetime - min(self._auth.refresh_before_seconds, lifetime / 2)
        if not_after is not None:
            # Never reused past the caller's own token (its `exp`, wall clock): a later call brings a
            # newer one, exchanged again.
            renew_in = min(renew_in, not_after - time.time())
        self._tokens.put(key, _Cached(bearer, self._clock() + renew_in))
        return bearer

    # -- the provider ----------------------------------------------------------------------------

    async def _client_credentials(self) -> tuple[str, float]:
        return await self._token_request({"grant_type": "client_credentials"}, "client credentials")

    async def _exchange(self, subject_token: str) -> tuple[str, float]:
        form = {"grant_type": TOKEN_EXCHANGE_GRANT, "subject_token": subject_token,
                "subject_token_type": _ACCESS_TOKEN_TYPE, "requested_token_type": _ACCESS_TOKEN_TYPE}
        return await self._token_request(form, "token exchange")

    async def _token_request(self, form: dict[str, str], what: str) -> tuple[str, float]:
        form["resource"] = self._resource
        if self._auth.audience:
            form["audience"] = self._auth.audience
        if self._auth.scope:
            form["scope"] = self._auth.scope
        endpoint = await self._token_endpoint()
        try:
            response = await self._http().post(endpoint, data=form,
                                               auth=httpx.BasicAuth(self._auth.client_id or "", self._secret))
        except httpx.HTTPError as exc:
            raise UpstreamNotSent(self.name, f"the identity provider could not be reached for the {what} this "
                                  "upstream needs", detail=f"{endpoint}: {type(exc).__name__}: {exc}") from None
        body = _json(response)
        if response.status_code != 200:
            error = str(body.get("error") or f"HTTP {response.status_code}")
            description = body.get("error_description")
            logger.warning("upstream %s: the identity provider refused the %s (%s%s)", self.name, what, error,
                           f": {description}" if description else "")
            raise UpstreamNotSent(self.name, f"the identity provider refused the {what} for this upstream ({error}"
                                  + (f": {description}" if description else "") + ")")
        token = body.get("access_token")
        if not isinstance(token, str) or not token:
            raise UpstreamNotSent(self.name, f"the identity provider's {what} answer has no access_token")
        expires_in = body.get("expires_in")
        lifetime = float(expires_in) if isinstance(expires_in, (int, float)) and expires_in > 0 else _DEFAULT_LIFETIME
        return token, lifetime

    async def _token_endpoint(self) -> str:
        if self._endpoint is not None:
            return self._endpoint
        async with self._endpoint_lock:
            if self._endpoint is None:
                self._endpoint = await self._discover(self._auth.issuer or "")
        return self._endpoint

    async def _discover(self, issuer: str) -> str:
        base = issuer.rstrip("/")
        for well_known in ("openid-configuration", "oauth-authorization-server"):
            url = f"{base}/.well-known/{well_known}"
            try:
                response = await self._http().get(url)
            except httpx.HTTPError as exc:
                raise UpstreamNotSent(self.name, "the identity provider's metadata could not be fetched",
                                      detail=f"{url}: {type(exc).__name__}: {exc}") from None
            endpoint = _json(response).get("token_endpoint") if response.status_code == 200 else None
            if isinstance(endpoint, str) and endpoint:
                return endpoint
        raise UpstreamNotSent(self.name, f"the identity provider's metadata at {base} names no token_endpoint")

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:  # one pooled client per upstream, made on first use (inside the loop)
            # Like the upstreams' own transport: the system trust store (SSL_CERT_FILE honoured), no
            # proxy variables, no .netrc.
            self._client = httpx.AsyncClient(timeout=self._auth.timeout_seconds, follow_redirects=False,
                                             verify=ssl.create_default_context(), trust_env=False)
        return self._client


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
