"""`auth.oauth`: the gateway as an OAuth 2.1 resource server (docs/auth.md).

Tokens are accepted from the configured issuers only, for the configured resource only (RFC 8707
audience), signed with an asymmetric algorithm of the allow-list by a key of the issuer's JWKS;
opaque tokens through RFC 7662 introspection when an issuer has an endpoint for it. What a
principal may reach comes from its claims (`grants`), with the scope kinds of `auth.tokens[]`.
"""

from __future__ import annotations

from typing import Literal, Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from .grants import check_env_name

__all__ = [
    "ASYMMETRIC_ALGORITHMS", "ClaimGrantConfig", "ConsoleLoginConfig", "IssuerConfig", "OAuthConfig", "ScopeGrantConfig",
    "check_oauth_url", "is_loopback_url_host",
]

# Every algorithm the gateway verifies; all asymmetric (the issuer's public keys, from its JWKS).
# HS* would need a secret shared with the issuer and invite the HS/RS confusion; `none` is no
# signature at all. Neither is ever accepted.
ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
_DEFAULT_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def is_loopback_url_host(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def check_oauth_url(value: str, *, what: str = "URL") -> str:
    """An absolute https:// URL (http:// only on loopback), without a fragment."""
    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
        _ = parts.port  # a bad port raises here
    except ValueError:
        raise ValueError(f"{value!r} is not a valid {what}") from None
    if parts.scheme not in ("https", "http") or not host:
        raise ValueError(f"{value!r} is not an absolute https:// {what}")
    if parts.scheme == "http" and not is_loopback_url_host(host):
        raise ValueError(
            f"{value!r}: http:// is accepted only on loopback (127.0.0.1, ::1, localhost); use https://")
    if parts.fragment or value.endswith("#"):
        raise ValueError(f"{value!r}: a {what} has no fragment (#...)")
    return value


def _url(value: str) -> str:
    return check_oauth_url(value)


def _issuer_url(value: str) -> str:
    check_oauth_url(value, what="issuer URL")
    if urlsplit(value).query:
        raise ValueError(f"{value!r}: an issuer identifier has no query (RFC 8414)")
    return value  # compared with `iss` exactly, as written


Url = Annotated[str, AfterValidator(_url)]
IssuerUrl = Annotated[str, AfterValidator(_issuer_url)]


class IssuerConfig(_Strict):
    """One trusted authorization server."""

    issuer: IssuerUrl
    # Absent: from <issuer>/.well-known/openid-configuration, else .../oauth-authorization-server.
    jwks_uri: Url | None = None
    # RFC 7662 introspection of opaque (non-JWT) tokens: the endpoint, and the gateway's client
    # credentials there (the secret from an environment variable, never in the file).
    introspection_endpoint: Url | None = None
    introspection_client_id: str | None = Field(None, min_length=1)
    introspection_client_secret_env: Annotated[str, AfterValidator(check_env_name)] | None = None
    # Put before every principal of this issuer. Default: none with one issuer, "<issuer>#" with
    # more (an issuer URL has no '#', so two issuers' subjects never collide).
    principal_prefix: str | None = None

    @model_validator(mode="after")
    def _introspection_complete(self) -> "IssuerConfig":
        if self.introspection_endpoint is not None and (
                self.introspection_client_id is None or self.introspection_client_secret_env is None):
            raise ValueError("introspection_endpoint needs introspection_client_id and introspection_client_secret_env")
        return self


class ScopeGrantConfig(_Strict):
    """What a grant reaches: the scope kinds of `auth.tokens[]` (fnmatch globs; upstream names)."""

    tools: list[str] | None = None
    prompts: list[str] | None = None
    resources: list[str] | None = None
    upstreams: list[str] | None = None


class ClaimGrantConfig(ScopeGrantConfig):
    """A grant to every principal whose claims match `when`: each named claim (a dotted path
    reaches into objects, e.g. `realm_access.roles`) has at least one of the listed values. A
    claim that is a list matches on any element; the `scope` claim is split at spaces."""

    when: dict[str, list[str]] = Field(min_length=1)
    # `gateway`: the principals this grant matches have their calls that need approval held at the
    # gateway (docs/approvals.md), whatever `auth.oauth.approvals` says.
    approvals: Literal["gateway"] | None = None

    @field_validator("when")
    @classmethod
    def _values(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for claim, values in v.items():
            if not claim or not values:
                raise ValueError(f"claim {claim!r}: list at least one value")
        return v


# RFC 6749 §3.3: a scope token is printable ASCII without space, '"' and '\\'.
_SCOPE_TOKEN = r'^[\x21\x23-\x5b\x5d-\x7e]+$'


class ConsoleLoginConfig(_Strict):
    """`auth.oauth.console`: people sign in to the operator console at an issuer of `auth.oauth`
    with the authorization code flow and PKCE, as a public client (no secret: the page is public).
    The token the page gets is checked like any other (audience, issuer, signature); approvers are
    who `auth.oauth.approvers` names (docs/console.md)."""

    # The console's client id at the issuer (registered there as a public client whose redirect
    # URI is <gateway>/console/callback).
    client_id: str = Field(min_length=1, max_length=256, pattern=r"^[\x21-\x7e]+$")
    # Asked for at the issuer. Absent: `openid` and `auth.oauth.required_scopes`.
    scopes: list[Annotated[str, Field(pattern=_SCOPE_TOKEN)]] | None = Field(None, min_length=1)
    # One of `auth.oauth.issuers`; absent: the first.
    issuer: IssuerUrl | None = None


class OAuthConfig(_Strict):
    # The canonical URL of this gateway's MCP endpoint: the audience every token must carry.
    resource: Url
    issuers: list[IssuerConfig] = Field(min_length=1)
    # Every token must carry all of these (in `scope` or `scp`); else 403 insufficient_scope.
    required_scopes: list[str] = Field(default_factory=list)
    # The claim naming the principal (fences, tasks, images and scope follow it).
    principal_claim: str = Field("sub", min_length=1)
    algorithms: list[str] = Field(default_factory=lambda: list(_DEFAULT_ALGORITHMS), min_length=1)
    # Clock skew allowed on exp, nbf and iat.
    leeway_seconds: float = Field(30.0, ge=0, le=300)
    # A fetched JWKS is used this long before it is fetched again.
    jwks_cache_seconds: float = Field(300.0, gt=0)
    # An unknown `kid` refetches the issuer's JWKS at most once per this many seconds.
    jwks_min_refetch_seconds: float = Field(30.0, gt=0)
    # How long to wait for an issuer's metadata, JWKS or introspection endpoint.
    fetch_timeout_seconds: float = Field(5.0, gt=0)
    # An introspection answer (active or not) is reused this long for the same token.
    introspection_cache_seconds: float = Field(30.0, ge=0)
    # Scope from claims. Absent: every OAuth principal reaches everything (like a token without
    # scope keys). Present: the union of the matching grants; none matching: `default`, else nothing.
    grants: list[ClaimGrantConfig] | None = None
    default: ScopeGrantConfig | None = None
    # Who approves OAuth principals' calls that need approval (docs/approvals.md): `client` or
    # `gateway` for every OAuth principal; a grant may set `gateway` for the principals it matches.
    approvals: Literal["client", "gateway"] = "client"
    # OAuth identities that may decide held calls on /admin/approvals (docs/approvals.md): those whose
    # claims meet this (each named claim has one of the listed values, as a grant's `when`). None: none.
    approvers: dict[str, list[str]] | None = Field(None, min_length=1)
    # Sign-in on the operator console (docs/console.md): absent, the console takes pasted tokens only.
    console: ConsoleLoginConfig | None = None

    @field_validator("algorithms")
    @classmethod
    def _asymmetric(cls, v: list[str]) -> list[str]:
        for alg in v:
            if alg.lower() == "none":
                raise ValueError("'none' is never accepted: a token without a signature proves nothing")
            if alg.upper().startswith("HS"):
                raise ValueError(f"{alg!r}: symmetric algorithms are not accepted (the gateway verifies with the "
                                 "issuers' public keys; an HS key would be a shared secret)")
            if alg not in ASYMMETRIC_ALGORITHMS:
                raise ValueError(f"{alg!r} is not one of {', '.join(ASYMMETRIC_ALGORITHMS)}")
        return v

    @model_validator(mode="after")
    def _distinct_issuers(self) -> "OAuthConfig":
        seen: set[str] = set()
        for issuer in self.issuers:
            if issuer.issuer in seen:
                raise ValueError(f"issuer {issuer.issuer!r} is listed twice")
            seen.add(issuer.issuer)
        prefixes = [self.prefix_of(i) for i in self.issuers]
        if len(prefixes) > 1:
            for a in range(len(prefixes)):
                for b in range(len(prefixes)):
                    if a != b and prefixes[b].startswith(prefixes[a]):
                        raise ValueError(
                            f"principal_prefix {prefixes[a]!r} (issuer {self.issuers[a].issuer}) is a prefix of "
                            f"{prefixes[b]!r} (issuer {self.issuers[b].issuer}): two issuers' principals could collide")
        return self

    def console_issuer_untrusted(self) -> str | None:
        """Why `console.issuer` cannot be used (it is not one of `issuers`), else None."""
        console = self.console
        if console is None or console.issuer is None or console.issuer in {i.issuer for i in self.issuers}:
            return None
        return (f"{console.issuer!r} is not one of auth.oauth.issuers: the gateway would refuse the tokens "
                "the console gets there")

    def console_issuer(self) -> str | None:
        """The issuer the console signs people in at (None: no console sign-in)."""
        if self.console is None:
            return None
        return self.console.issuer or self.issuers[0].issuer

    def console_scope(self) -> str:
        """The `scope` the console asks for: its `scopes`, else openid and the required scopes."""
        assert self.console is not None
        scopes = self.console.scopes or ["openid", *self.required_scopes]
        return " ".join(dict.fromkeys(scopes))

    def prefix_of(self, issuer: IssuerConfig) -> str:
        if issuer.principal_prefix is not None:
            return issuer.principal_prefix
        return "" if len(self.issuers) == 1 else f"{issuer.issuer}#"
