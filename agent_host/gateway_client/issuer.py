"""The agent host's gateway token from an OAuth issuer (issue 23, item 5).

    credential = IssuedToken(IssuerClient(issuer, client_id, secret), resource=gateway_url, scope="mcp")
    await credential.bearer()         # a client-credentials token for the gateway, renewed before expiry

    endpoints = await discover(issuer)                 # RFC 8414 / OpenID discovery
    tokens = await device_login(client, resource, scope, announce=print)   # RFC 8628, a person at a terminal
    save_login(path, LoginRecord(...))                 # 0600, in the host's state directory

A token is renewed when less than `margin` seconds of it are left (at most half its lifetime), by
its refresh token when it has one, else by a new client-credentials grant. Every request names the
gateway as the RFC 8707 `resource`, so the token's audience is the gateway. Secrets (the client
secret, the tokens) are never logged and never put on a command line.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from .credential import CredentialError

__all__ = [
    "DEVICE_CODE_GRANT", "IssuedToken", "IssuerClient", "IssuerEndpoints", "LoginRecord", "TokenSet",
    "device_login", "discover", "revoke", "issuer_of_resource", "load_login", "login_path", "save_login",
]

DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEFAULT_MARGIN_SECONDS = 60.0
_TIMEOUT = 10.0


class IssuerEndpoints(BaseModel):
    """What the host needs from the issuer's discovery document."""

    model_config = ConfigDict(extra="ignore")

    issuer: str
    token_endpoint: str
    device_authorization_endpoint: str | None = None
    revocation_endpoint: str | None = None


class TokenSet(BaseModel):
    """A token response, with the time it expires (seconds since the epoch) and was obtained."""

    model_config = ConfigDict(extra="ignore")

    access_token: str
    refresh_token: str | None = None
    expires_at: float | None = None
    obtained_at: float
    scope: str | None = None

    @classmethod
    def from_response(cls, body: dict[str, Any], now: float) -> "TokenSet":
        expires_in = body.get("expires_in")
        return cls(access_token=str(body["access_token"]), refresh_token=body.get("refresh_token"),
                   expires_at=now + float(expires_in) if isinstance(expires_in, (int, float)) else None,
                   obtained_at=now, scope=body.get("scope"))

    def fresh(self, now: float, margin: float) -> bool:
        """Still good for more than `margin` seconds (at most half its lifetime)."""
        if self.expires_at is None:
            return True
        lifetime = max(self.expires_at - self.obtained_at, 0.0)
        return self.expires_at - now > min(margin, lifetime / 2)

    def __repr__(self) -> str:  # never the tokens
        return f"TokenSet(expires_at={self.expires_at}, refresh={'yes' if self.refresh_token else 'no'})"


class LoginRecord(BaseModel):
    """What `dex-agent login` keeps in the state directory (0600): enough to renew the token."""

    model_config = ConfigDict(extra="forbid")

    issuer: str
    token_endpoint: str
    client_id: str
    resource: str
    scope: str
    tokens: TokenSet


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _check_url(url: str, what: str) -> None:
    parts = urlsplit(url)
    loopback = parts.hostname in ("127.0.0.1", "localhost", "::1")
    if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
        raise ValueError(f"{what} {url!r}: must be an https:// URL (http:// only on loopback)")


async def _get_json(http: httpx.AsyncClient, url: str) -> dict[str, Any] | None:
    try:
        response = await http.get(url)
    except httpx.HTTPError as exc:
        raise CredentialError(f"cannot reach {url}: {type(exc).__name__}") from None
    if response.status_code != 200:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


async def discover(issuer: str, http: httpx.AsyncClient | None = None) -> IssuerEndpoints:
    """The issuer's endpoints from RFC 8414 metadata or OpenID discovery (its `issuer` must match)."""
    _check_url(issuer, "the issuer")
    base = issuer.rstrip("/")
    path = urlsplit(base).path
    candidates = [f"{_origin(base)}/.well-known/oauth-authorization-server{path}",
                  f"{base}/.well-known/openid-configuration"]
    async with _client(http) as client:
        for url in candidates:
            body = await _get_json(client, url)
            if body is None:
                continue
            try:
                endpoints = IssuerEndpoints.model_validate(body)
            except ValidationError:
                raise CredentialError(f"the issuer's metadata at {url} has no token_endpoint") from None
            if endpoints.issuer.rstrip("/") != base:
                raise CredentialError(f"the metadata at {url} names another issuer ({endpoints.issuer})")
            return endpoints
    raise CredentialError(f"no OAuth metadata for the issuer {issuer} (tried {', '.join(candidates)})")


async def issuer_of_resource(resource: str, http: httpx.AsyncClient | None = None) -> str:
    """The first authorization server the gateway's RFC 9728 metadata names."""
    path = urlsplit(resource).path.rstrip("/")
    url = f"{_origin(resource)}/.well-known/oauth-protected-resource{path}"
    async with _client(http) as client:
        body = await _get_json(client, url)
    servers = body.get("authorization_servers") if body else None
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
        raise CredentialError(f"the gateway publishes no authorization server at {url}: give the issuer "
                              "($DEX_AGENT_ISSUER or --issuer)")
    return servers[0]


class _client:
    """The given client, or a new one closed on exit."""

    def __init__(self, http: httpx.AsyncClient | None) -> None:
        self._given = http
        self._own: httpx.AsyncClient | None = None

    async def __aenter__(self) -> httpx.AsyncClient:
        if self._given is not None:
            return self._given
        self._own = httpx.AsyncClient(timeout=_TIMEOUT)
        return self._own

    async def __aexit__(self, *exc: object) -> None:
        if self._own is not None:
            await self._own.aclose()


@dataclass(frozen=True)
class IssuerClient:
    """An OAuth client of one issuer: a confidential one (client_secret_basic) or a public one."""

    issuer: str | None  # None: the one the gateway's metadata names
    client_id: str
    client_secret: str | None = field(default=None, repr=False)

    def auth(self) -> httpx.BasicAuth | None:
        return httpx.BasicAuth(self.client_id, self.client_secret) if self.client_secret else None

    def form(self) -> dict[str, str]:
        return {} if self.client_secret else {"client_id": self.client_id}


async def _token_request(http: httpx.AsyncClient, endpoint: str, client: IssuerClient,
                         form: dict[str, str]) -> tuple[int, dict[str, Any]]:
    try:
        response = await http.post(endpoint, data={**client.form(), **form}, auth=client.auth() or httpx.USE_CLIENT_DEFAULT)
    except httpx.HTTPError as exc:
        raise CredentialError(f"cannot reach the token endpoint {endpoint}: {type(exc).__name__}") from None
    try:
        body = response.json()
    except ValueError:
        body = {}
    return response.status_code, body if isinstance(body, dict) else {}


def _refusal(status: int, body: dict[str, Any], what: str) -> CredentialError:
    error = body.get("error", f"HTTP {status}")
    detail = body.get("error_description")
    return CredentialError(f"the issuer refused {what}: {error}{f' ({detail})' if detail else ''}")


class IssuedToken:
    """A Credential: the gateway token from the issuer, renewed before it expires. `record_path`:
    where a `dex-agent login` is kept (rewritten, 0600, when the tokens are renewed)."""

    def __init__(self, client: IssuerClient, *, resource: str, scope: str | None = None,
                 tokens: TokenSet | None = None, token_endpoint: str | None = None,
                 record_path: Path | None = None, margin_seconds: float = DEFAULT_MARGIN_SECONDS,
                 clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._resource = resource
        self._scope = scope
        self._tokens = tokens
        if token_endpoint is not None:
            _check_url(token_endpoint, "the token endpoint")
        self._token_endpoint = token_endpoint
        self._record_path = record_path
        self._margin = margin_seconds
        self._clock = clock
        self._lock = anyio.Lock()
        self.renewals = 0  # tokens obtained from the issuer by this process

    @property
    def described(self) -> str:
        how = "a refreshed login" if self._client.client_secret is None else "a client-credentials token"
        return f"{how} from {self._client.issuer or 'the issuer'} (client {self._client.client_id})"

    async def bearer(self) -> str | None:
        async with self._lock:  # parallel exchanges: one renewal, the others wait and reuse it
            tokens = self._tokens
            if tokens is None or not tokens.fresh(self._clock(), self._margin):
                try:
                    tokens = self._tokens = await self._renew(tokens)
                except ValueError as exc:  # an issuer URL that is not allowed
                    raise CredentialError(str(exc)) from None
                self.renewals += 1
                self._save()
            return tokens.access_token

    async def _renew(self, tokens: TokenSet | None) -> TokenSet:
        async with httpx.AsyncClient(timeout=_TIMEOUT) as http:
            endpoint = self._token_endpoint or await self._discover(http)
            if tokens is not None and tokens.refresh_token:
                form = {"grant_type": "refresh_token", "refresh_token": tokens.refresh_token, "resource": self._resource}
                status, body = await _token_request(http, endpoint, self._client, form)
                if status == 200 and "access_token" in body:
                    renewed = TokenSet.from_response(body, self._clock())
                    if renewed.refresh_token is None:  # not rotated: the old one stays good
                        renewed = renewed.model_copy(update={"refresh_token": tokens.refresh_token})
                    return renewed
                if self._client.client_secret is None:
                    raise CredentialError(f"{_refusal(status, body, 'the refresh token')}; run `dex-agent login` again")
            if self._client.client_secret is None:
                raise CredentialError("not logged in: run `dex-agent login` (or set client credentials)")
            form = {"grant_type": "client_credentials", "resource": self._resource}
            if self._scope:
                form["scope"] = self._scope
            status, body = await _token_request(http, endpoint, self._client, form)
            if status != 200 or "access_token" not in body:
                raise _refusal(status, body, "the client credentials")
            return TokenSet.from_response(body, self._clock())

    async def _discover(self, http: httpx.AsyncClient) -> str:
        issuer = self._client.issuer or await issuer_of_resource(self._resource, http)
        self._token_endpoint = (await discover(issuer, http)).token_endpoint
        return self._token_endpoint

    def _save(self) -> None:
        if self._record_path is None or self._tokens is None:
            return
        record = load_login(self._record_path)
        if record is not None:
            save_login(self._record_path, record.model_copy(update={"tokens": self._tokens}))


async def device_login(client: IssuerClient, endpoints: IssuerEndpoints, *, resource: str, scope: str,
                       announce: Callable[[str, str, str | None], None],
                       clock: Callable[[], float] = time.time) -> TokenSet:
    """RFC 8628: ask for a user code, `announce(verification_uri, user_code, verification_uri_complete)`,
    then poll until the person approved (or refused, or the code expired)."""
    if endpoints.device_authorization_endpoint is None:
        raise CredentialError(f"the issuer {endpoints.issuer} offers no device login (no device_authorization_endpoint)")
    async with httpx.AsyncClient(timeout=_TIMEOUT) as http:
        status, started = await _token_request(http, endpoints.device_authorization_endpoint, client,
                                               {"scope": scope, "resource": resource})
        if status != 200 or "device_code" not in started:
            raise _refusal(status, started, "the device login")
        announce(str(started["verification_uri"]), str(started["user_code"]),
                 started.get("verification_uri_complete"))
        interval = float(started.get("interval") or 5)
        deadline = clock() + float(started.get("expires_in") or 600)
        while clock() < deadline:
            await anyio.sleep(interval)
            status, body = await _token_request(http, endpoints.token_endpoint, client, {
                "grant_type": DEVICE_CODE_GRANT, "device_code": str(started["device_code"]), "resource": resource})
            if status == 200 and "access_token" in body:
                return TokenSet.from_response(body, clock())
            error = body.get("error")
            if error == "authorization_pending":
                continue
            if error == "slow_down":
                interval += 5
                continue
            raise _refusal(status, body, "the device login")
    raise CredentialError("the device login expired before it was approved; run `dex-agent login` again")


async def revoke(client: IssuerClient, endpoints: IssuerEndpoints, token: str) -> bool:
    """RFC 7009: the issuer forgets `token` (a refresh token); False when it offers no revocation."""
    if endpoints.revocation_endpoint is None:
        return False
    async with httpx.AsyncClient(timeout=_TIMEOUT) as http:
        status, body = await _token_request(http, endpoints.revocation_endpoint, client,
                                            {"token": token, "token_type_hint": "refresh_token"})
    if status != 200:
        raise _refusal(status, body, "the revocation")
    return True


def login_path(store: Path) -> Path:
    """Where `dex-agent login` keeps its tokens: beside the session store (`var/dex-agent-login.json`)."""
    return store.with_name(store.stem + "-login.json")


def load_login(path: Path) -> LoginRecord | None:
    """The kept login, or None when there is none; ValueError for one that cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"cannot read the login {path}: {exc.strerror or exc}") from None
    try:
        return LoginRecord.model_validate_json(text)
    except ValidationError:
        raise ValueError(f"the login {path} is not one `dex-agent login` wrote: run it again") from None


def save_login(path: Path, record: LoginRecord) -> None:
    """Written to a new file with mode 0600, then moved over the old one (never readable by others)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=".login-", dir=path.parent)  # mkstemp: 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(record.model_dump_json())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
