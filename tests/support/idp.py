"""A real OpenID provider on loopback for the auth tests: panva's certified `oidc-provider` (npm,
pinned in tests/support/idp/package-lock.json), started by tests/support/idp/provider.mjs.

    with Idp() as idp:                                    # a free loopback port; idp.issuer
        token = idp.client_credentials_token("http://127.0.0.1:8080/mcp", "mcp")["access_token"]
        claims = idp.verify(token, audience="http://127.0.0.1:8080/mcp")
        tokens = idp.login_user_with_code("http://127.0.0.1:8080/mcp", "mcp", user="alice")
        up = idp.exchange_token(tokens["access_token"], "http://127.0.0.1:9000/mcp")
        idp.stats()                                       # {"grants": {grant_type: n}, "errors": {...}}
        idp.restart(rotate_keys="replace")                # same port, a new signing key set

Access tokens are JWTs (`typ: at+jwt`) whose `aud` is the RFC 8707 `resource` asked for (any
loopback URL is a resource; `resources=` overrides scopes, format, TTL or algorithm per URL), with
`sub`, `client_id`, `scope`, and `groups` from the user table. Token exchange (RFC 8693) is
registered on the provider as a grant type: only clients whose grant_types list it may use it; the
issued token keeps the subject's `sub` and names the exchanging client in `act`.

Logging a user in is plain HTTP against the provider's own pages (`Browser`): the same function is
the MCP SDK client's redirect/callback pair (`idp.browser(user).handlers()` for
`mcp.client.auth.OAuthClientProvider(redirect_handler=..., callback_handler=...)`).

Client secrets and user passwords are generated per run (never in the repo).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx
import jwt

from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken
from tests.support.npm import npm_installed
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT

__all__ = [
    "EXCHANGER",
    "IDP_DIR",
    "MACHINE",
    "PUBLIC",
    "TOKEN_EXCHANGE",
    "AuthorizationResponse",
    "Browser",
    "Idp",
    "MemoryStorage",
    "IdpClient",
    "IdpError",
    "IdpUser",
    "ensure_installed",
    "pkce_pair",
]

IDP_DIR = REPO_ROOT / "tests" / "support" / "idp"
PROVIDER = IDP_DIR / "provider.mjs"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
DEVICE_CODE = "urn:ietf:params:oauth:grant-type:device_code"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
# The names of the clients registered by default (their secrets are made per run).
MACHINE, PUBLIC, EXCHANGER = "machine", "public-app", "gateway"
DEFAULT_REDIRECT = "http://127.0.0.1/callback"
_FORM = re.compile(r'<form method="post" action="(/interaction/[\w-]+/(login|confirm))"')


class IdpError(AssertionError):
    """The provider refused, or a flow did not go as expected; carries the provider's answer."""


def ensure_installed() -> str:
    """The node binary, with oidc-provider installed from package-lock.json (tests/support/npm.py)."""
    return npm_installed(IDP_DIR, "oidc-provider", "the test identity provider (oidc-provider)")


@dataclass(frozen=True)
class IdpUser:
    password: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class IdpClient:
    """A client registered from the config: `metadata` is oidc-provider client metadata."""

    client_id: str
    client_secret: str | None
    metadata: Mapping[str, Any]

    @property
    def _method(self) -> str:
        return str(self.metadata.get("token_endpoint_auth_method") or "client_secret_basic")

    def auth(self) -> httpx.BasicAuth | None:
        """HTTP Basic for a `client_secret_basic` client."""
        if self.client_secret and self._method == "client_secret_basic":
            return httpx.BasicAuth(self.client_id, self.client_secret)
        return None

    def form(self) -> dict[str, str]:
        """What the client adds to a token request's form (its id; its secret for `client_secret_post`)."""
        if self.client_secret and self._method == "client_secret_basic":
            return {}
        if self.client_secret and self._method == "client_secret_post":
            return {"client_id": self.client_id, "client_secret": self.client_secret}
        return {"client_id": self.client_id}


def default_clients() -> dict[str, IdpClient]:
    """A confidential machine client (client credentials), a public client (authorization code
    with PKCE, refresh, device flow) and the gateway (token exchange and client credentials)."""
    machine = IdpClient(MACHINE, secrets.token_urlsafe(24), {
        "grant_types": ["client_credentials"], "response_types": [], "redirect_uris": [],
        "token_endpoint_auth_method": "client_secret_basic"})
    public = IdpClient(PUBLIC, None, {
        "grant_types": ["authorization_code", "refresh_token", DEVICE_CODE], "response_types": ["code"],
        "redirect_uris": [DEFAULT_REDIRECT], "application_type": "native", "token_endpoint_auth_method": "none"})
    gateway = IdpClient(EXCHANGER, secrets.token_urlsafe(24), {
        "grant_types": [TOKEN_EXCHANGE, "client_credentials"], "response_types": [], "redirect_uris": [],
        "token_endpoint_auth_method": "client_secret_basic"})
    return {c.client_id: c for c in (machine, public, gateway)}


def default_users() -> dict[str, IdpUser]:
    return {"alice": IdpUser(secrets.token_urlsafe(12), ("engineering", "admins")),
            "bob": IdpUser(secrets.token_urlsafe(12), ("support",))}


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


@dataclass(frozen=True)
class AuthorizationResponse:
    """The query of the redirect back to the client: `code`, `state`, `iss` (RFC 9207)."""

    code: str
    state: str | None
    iss: str | None

    def for_mcp(self) -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=self.code, state=self.state, iss=self.iss)


class Browser:
    """A person at a browser, in httpx: opens an authorization URL, signs in on the provider's login
    page, allows on its consent page, and stops at the redirect to the client (never fetched).

    `authorize(url)` (sync) and `await authorize_async(url)` return the `AuthorizationResponse`;
    `handlers()` is (redirect_handler, callback_handler) for the MCP SDK's OAuthClientProvider."""

    def __init__(self, issuer: str, user: str, password: str, *, consent: bool = True) -> None:
        self.issuer = issuer
        self.user = user
        self.password = password
        self.consent = consent
        self.pages: list[str] = []  # every URL visited, for a failing test's message
        self._last: AuthorizationResponse | None = None

    def authorize(self, authorization_url: str) -> AuthorizationResponse:
        with httpx.Client(timeout=10) as client:
            response = client.get(authorization_url)
            while True:
                step = self._step(response)
                if isinstance(step, AuthorizationResponse):
                    return step
                method, url, data = step
                response = client.request(method, url, data=data)

    async def authorize_async(self, authorization_url: str) -> AuthorizationResponse:
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.get(authorization_url)
            while True:
                step = self._step(response)
                if isinstance(step, AuthorizationResponse):
                    return step
                method, url, data = step
                response = await client.request(method, url, data=data)

    def handlers(self) -> tuple[Callable[[str], Awaitable[None]], Callable[[], Awaitable[AuthorizationCodeResult]]]:
        async def redirect_handler(url: str) -> None:
            self._last = await self.authorize_async(url)

        async def callback_handler() -> AuthorizationCodeResult:
            if self._last is None:
                raise IdpError("callback before any authorization redirect")
            result, self._last = self._last, None
            return result.for_mcp()

        return redirect_handler, callback_handler

    def _step(self, response: httpx.Response) -> AuthorizationResponse | tuple[str, str, dict[str, str] | None]:
        """The next request to make, or the client's redirect (the end)."""
        url = str(response.url)
        self.pages.append(f"{response.request.method} {url} -> {response.status_code}")
        if len(self.pages) > 20:
            raise IdpError("too many steps logging in:\n" + "\n".join(self.pages))
        if response.is_redirect:
            target = urljoin(url, response.headers["location"])
            if _origin(target) != _origin(self.issuer):
                return self._answer(target)
            return "GET", target, None
        if response.status_code != 200:
            raise IdpError(f"{url} answered {response.status_code}: {response.text[:500]}")
        form = _FORM.search(response.text)
        if form is None:
            raise IdpError(f"no login or consent form at {url}: {response.text[:500]}")
        action, kind = form.group(1), form.group(2)
        if kind == "login":
            return "POST", urljoin(url, action), {"login": self.user, "password": self.password}
        if not self.consent:
            return "POST", urljoin(url, action.rsplit("/", 1)[0] + "/abort"), {}
        return "POST", urljoin(url, action), {}

    def _answer(self, target: str) -> AuthorizationResponse:
        query = {k: v[0] for k, v in parse_qs(urlsplit(target).query).items()}
        if "code" not in query:
            raise IdpError(f"the provider redirected to the client without a code: {query}")
        return AuthorizationResponse(query["code"], query.get("state"), query.get("iss"))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass
class Idp:
    """oidc-provider as a subprocess on a loopback port. Start with `with Idp(...) as idp:` or
    `start()`/`stop()`; `restart()` keeps the port (and, unless rotated, the keys)."""

    users: dict[str, IdpUser] = field(default_factory=default_users, repr=False)
    clients: dict[str, IdpClient] = field(default_factory=default_clients, repr=False)
    access_token_ttl: int = 600
    client_credentials_ttl: int | None = None
    exchange_token_ttl: int = 120
    resource_scope: str = "mcp mcp:admin"  # what any loopback resource offers
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)  # url -> {scope, format, ttl, alg}
    signing_alg: Literal["RS256", "ES256"] = "RS256"
    exchange_subject_audiences: dict[str, list[str]] = field(default_factory=dict)
    ready_timeout: float = 60.0
    issuer: str = ""
    log: list[str] = field(default_factory=list, repr=False)  # the provider's stderr
    _registered: dict[str, IdpClient] = field(default_factory=dict, repr=False)  # by dynamic registration
    _process: subprocess.Popen[str] | None = field(default=None, repr=False)
    _workdir: Path | None = field(default=None, repr=False)
    _port: int = 0

    # -- the process -------------------------------------------------------------------------

    def __enter__(self) -> "Idp":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, *, rotate_keys: Literal["none", "replace", "prepend"] = "none") -> "Idp":
        """Start the provider (installing it first when missing); `issuer` is set when it listens."""
        if self.running:
            raise IdpError(f"the provider already runs at {self.issuer}: restart() it")
        node = ensure_installed()
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="dex-idp-"))
        config = self._workdir / "config.json"
        config.write_text(json.dumps(self._config(rotate_keys)), encoding="utf-8")
        config.chmod(0o600)
        process, url = spawn_listening([node, str(PROVIDER), str(config)], cwd=IDP_DIR, env=dict(os.environ),
                                       name="idp", lines=self.log, ready_timeout=self.ready_timeout)
        if url is None:
            terminate(process)
            raise IdpError("oidc-provider did not start:\n" + "\n".join(self.log[-30:]))
        self._process = process
        self.issuer = url
        self._port = int(urlsplit(url).port or 0)
        return self

    def stop(self) -> None:
        """Stop the provider (SIGTERM); its in-memory state (sessions, grants, registered clients) goes."""
        if self._process is not None:
            terminate(self._process)
            self._process = None
        self._registered.clear()

    def restart(self, *, rotate_keys: Literal["none", "replace", "prepend"] = "none") -> "Idp":
        """Stop and start again on the same port. `replace`: a brand-new key set (tokens signed
        before no longer verify: their kid is gone from the JWKS); `prepend`: new keys sign, the
        old ones stay published; `none`: the same keys."""
        self.stop()
        return self.start(rotate_keys=rotate_keys)

    def close(self) -> None:
        self.stop()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _config(self, rotate_keys: str) -> dict[str, Any]:
        assert self._workdir is not None
        return {
            "port": self._port,
            "jwks_path": str(self._workdir / "jwks.json"),
            "rotate_keys": rotate_keys,
            "signing_alg": self.signing_alg,
            "access_token_ttl": self.access_token_ttl,
            **({"client_credentials_ttl": self.client_credentials_ttl} if self.client_credentials_ttl else {}),
            "exchange_token_ttl": self.exchange_token_ttl,
            "resource_scope": self.resource_scope,
            "resources": self.resources,
            "users": {name: {"password": u.password, "groups": list(u.groups)} for name, u in self.users.items()},
            "clients": [{"client_id": c.client_id, **({"client_secret": c.client_secret} if c.client_secret else {}),
                         **c.metadata} for c in self.clients.values()],
            "exchange_subject_audiences": self.exchange_subject_audiences,
        }

    # -- discovery ---------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        """The provider's discovery document (/.well-known/openid-configuration)."""
        return self._get("/.well-known/openid-configuration")

    def jwks(self) -> dict[str, Any]:
        """The published (public) JWKS."""
        return self._get("/jwks")

    def endpoint(self, name: str) -> str:
        """An endpoint from discovery: "token", "authorization", "registration", "introspection"..."""
        return str(self.metadata()[f"{name}_endpoint"])

    def verify(self, token: str, *, audience: str, leeway: float = 0) -> dict[str, Any]:
        """The claims of an access token, after checking its signature against the provider's
        JWKS as published now, its issuer, audience, expiry and `typ: at+jwt` (PyJWT)."""
        header = jwt.get_unverified_header(token)
        if header.get("typ") != "at+jwt":
            raise IdpError(f"not a JWT access token: typ={header.get('typ')!r}")
        key = jwt.PyJWKSet.from_dict(self.jwks())[header["kid"]]
        claims: dict[str, Any] = jwt.decode(token, key, algorithms=["RS256", "ES256"], audience=audience,
                                            issuer=self.issuer, leeway=leeway)
        return claims

    # -- grants ------------------------------------------------------------------------------

    def client(self, client_id: str) -> IdpClient:
        """A configured or dynamically registered client."""
        found = self.clients.get(client_id) or self._registered.get(client_id)
        if found is None:
            raise IdpError(f"no client {client_id!r} (configured: {sorted(self.clients)})")
        return found

    def token_request(self, client: str, form: Mapping[str, str]) -> dict[str, Any]:
        """POST to the token endpoint as `client`; the JSON answer, or IdpError with the provider's error."""
        registered = self.client(client)
        response = httpx.post(f"{self.issuer}/token", data={**registered.form(), **form}, auth=registered.auth(),
                              timeout=10)
        body: dict[str, Any] = response.json()
        if response.status_code != 200:
            raise IdpError(f"token request ({form.get('grant_type')}) refused: {response.status_code} {body}")
        return body

    def client_credentials_token(self, resource: str | None, scope: str | None = None, *,
                                 client: str = MACHINE) -> dict[str, Any]:
        """A client credentials grant for `resource` (its `aud`): the token response
        (access_token, expires_in, scope, token_type)."""
        form = {"grant_type": "client_credentials"}
        if resource:
            form["resource"] = resource
        if scope:
            form["scope"] = scope
        return self.token_request(client, form)

    def browser(self, user: str = "alice", *, password: str | None = None, consent: bool = True) -> Browser:
        """A `Browser` that signs in as `user` (its configured password unless `password` is given)."""
        return Browser(self.issuer, user, password if password is not None else self.users[user].password,
                       consent=consent)

    def authorization_url(self, resource: str | None, scope: str, *, client: str = PUBLIC,
                          redirect_uri: str = DEFAULT_REDIRECT, state: str | None = None,
                          code_challenge: str | None = None) -> str:
        params = {"response_type": "code", "client_id": client, "redirect_uri": redirect_uri, "scope": scope,
                  "state": state or secrets.token_urlsafe(16)}
        if code_challenge:
            params |= {"code_challenge": code_challenge, "code_challenge_method": "S256"}
        if resource:
            params["resource"] = resource
        return f"{self.issuer}/auth?{urlencode(params)}"

    def login_user_with_code(self, resource: str | None, scope: str = "mcp", *, user: str = "alice",
                             password: str | None = None, client: str = PUBLIC,
                             redirect_uri: str = DEFAULT_REDIRECT) -> dict[str, Any]:
        """The authorization code flow with PKCE (S256) as `client`, signing in as `user` on the
        provider's pages: the token response (access_token for `resource`, refresh_token when the
        client may refresh, id_token when `openid` is in the scope)."""
        verifier, challenge = pkce_pair()
        state = secrets.token_urlsafe(16)
        answer = self.browser(user, password=password).authorize(
            self.authorization_url(resource, scope, client=client, redirect_uri=redirect_uri, state=state,
                                   code_challenge=challenge))
        if answer.state != state:
            raise IdpError(f"state mismatch: sent {state}, got {answer.state}")
        form = {"grant_type": "authorization_code", "code": answer.code, "redirect_uri": redirect_uri,
                "code_verifier": verifier}
        if resource:
            form["resource"] = resource
        return self.token_request(client, form)

    def refresh(self, refresh_token: str, resource: str | None = None, *, client: str = PUBLIC) -> dict[str, Any]:
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
        if resource:
            form["resource"] = resource
        return self.token_request(client, form)

    def device_login(self, resource: str | None, scope: str = "mcp", *, user: str = "alice",
                     client: str = PUBLIC) -> dict[str, Any]:
        """The device authorization grant: asks for a user code, has `user` enter and confirm it on
        the provider's /device pages and sign in, then polls: the token response."""
        registered = self.client(client)
        form = {**registered.form(), "scope": scope, **({"resource": resource} if resource else {})}
        started = httpx.post(f"{self.issuer}/device/auth", data=form, auth=registered.auth(), timeout=10)
        if started.status_code != 200:
            raise IdpError(f"device authorization refused: {started.status_code} {started.text}")
        device = started.json()
        self.approve_device(device["verification_uri"], device["user_code"], user=user)
        return self.token_request(client, {"grant_type": DEVICE_CODE, "device_code": device["device_code"]})

    def approve_device(self, verification_uri: str, user_code: str, *, user: str = "alice") -> None:
        """A person at a browser: opens `verification_uri`, enters and confirms `user_code`, signs
        in as `user` and allows (what a device client told the person to do)."""
        with httpx.Client(timeout=10) as browser:
            page = browser.get(verification_uri)
            xsrf = _hidden(page.text, "xsrf")
            confirm = browser.post(verification_uri, data={"xsrf": xsrf, "user_code": user_code})
            xsrf = _hidden(confirm.text, "xsrf")
            answer = browser.post(verification_uri, data={"xsrf": xsrf, "user_code": user_code, "confirm": "yes"})
            walker = self.browser(user)
            while not (answer.status_code == 200 and "Sign-in Success" in answer.text):
                step = walker._step(answer)
                if isinstance(step, AuthorizationResponse):
                    raise IdpError(f"the device flow redirected to a client: {step}")
                method, url, data = step
                answer = browser.request(method, url, data=data)

    def exchange_token(self, subject_token: str, resource: str, *, scope: str | None = None,
                       client: str = EXCHANGER, audience: str | None = None) -> dict[str, Any]:
        """RFC 8693: `subject_token` (an access token this provider issued) exchanged by `client`
        for one whose `aud` is `resource` (or `audience`): the token response (access_token,
        issued_token_type, expires_in, scope)."""
        form = {"grant_type": TOKEN_EXCHANGE, "subject_token": subject_token,
                "subject_token_type": ACCESS_TOKEN_TYPE}
        if resource:
            form["resource"] = resource
        if audience:
            form["audience"] = audience
        if scope:
            form["scope"] = scope
        return self.token_request(client, form)

    def introspect(self, token: str, *, client: str = EXCHANGER) -> dict[str, Any]:
        """RFC 7662 introspection as `client`: {"active": bool, ...claims}. Opaque tokens only (a
        resource with `"format": "opaque"` in `resources`); JWT access tokens are not stored by
        the provider, so they introspect as inactive."""
        registered = self.client(client)
        response = httpx.post(f"{self.issuer}/token/introspection", data={**registered.form(), "token": token},
                              auth=registered.auth(), timeout=10)
        body: dict[str, Any] = response.json()
        if response.status_code != 200:
            raise IdpError(f"introspection refused: {response.status_code} {body}")
        return body

    def revoke(self, token: str, *, client: str = MACHINE) -> None:
        """RFC 7009 revocation as `client` (the client the token was issued to)."""
        registered = self.client(client)
        response = httpx.post(f"{self.issuer}/token/revocation", data={**registered.form(), "token": token},
                              auth=registered.auth(), timeout=10)
        if response.status_code != 200:
            raise IdpError(f"revocation refused: {response.status_code} {response.text}")

    def register_client(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Dynamic client registration (RFC 7591), as an MCP SDK client does: the registered client
        (client_id, client_secret when confidential, ...). It joins `clients` (usable as `client=`
        by the helpers here) until the provider stops: registrations live in its memory."""
        response = httpx.post(f"{self.issuer}/reg", json=dict(metadata), timeout=10)
        if response.status_code != 201:
            raise IdpError(f"registration refused: {response.status_code} {response.text}")
        registered: dict[str, Any] = response.json()
        self._registered[registered["client_id"]] = IdpClient(registered["client_id"], registered.get("client_secret"),
                                                              registered)
        return registered

    # -- the test counters -------------------------------------------------------------------

    def stats(self) -> dict[str, dict[str, int]]:
        """Token endpoint outcomes since start (or reset): {"grants": {grant_type: successes},
        "errors": {grant_type: failures}}."""
        return self._get("/test/stats")

    def grants(self, grant_type: str) -> int:
        """Successful token requests of one grant type ("client_credentials", TOKEN_EXCHANGE, ...)."""
        return int(self.stats()["grants"].get(grant_type, 0))

    def reset_stats(self) -> None:
        httpx.post(f"{self.issuer}/test/stats/reset", timeout=10).raise_for_status()

    def _get(self, path: str) -> dict[str, Any]:
        response = httpx.get(f"{self.issuer}{path}", timeout=10)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body


def _hidden(page: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', page)
    if match is None:
        raise IdpError(f"no hidden {name} field in the device page: {page[:500]}")
    return match.group(1)


class MemoryStorage:
    """The SDK's TokenStorage, in memory: what the client registered and the tokens it holds."""

    def __init__(self, client_info: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info = client_info

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info
