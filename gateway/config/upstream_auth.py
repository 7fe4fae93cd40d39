"""How the gateway authenticates to one upstream: an upstream's `auth:` key (docs/auth.md,
"Upstream credentials").

    auth:
      mode: token_exchange             # static (default) | client_credentials | token_exchange
      issuer: "https://idp.example.com"  # its metadata names the token endpoint; or token_endpoint:
      client_id: dex-gateway           # the gateway's own client at the identity provider
      client_secret_env: DEX_IDP_SECRET  # the NAME of the variable holding its secret
      resource: "https://crm.example.com/mcp"   # default: the upstream's url (RFC 8707)
      scope: "crm.read"                # optional

`static` is the configured `headers` (from the environment), as before. The secret itself is
never in the file: only the name of the environment variable that holds it.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from .grants import check_env_name
from .strict import Strict

__all__ = ["UpstreamAuthConfig", "check_loopback_http"]


def check_loopback_http(url: str, what: str) -> str:
    """An https:// URL, or http:// on loopback only (tests, local development)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "https" and host:
        return url
    if parts.scheme == "http" and (host in ("localhost", "::1") or host.startswith("127.")):
        return url
    raise ValueError(f"{what} must be an https:// URL (http:// only on loopback), not {url!r}")


class UpstreamAuthConfig(Strict):
    mode: Literal["static", "client_credentials", "token_exchange"] = "static"
    # Where tokens come from: the issuer's metadata (openid-configuration, else
    # oauth-authorization-server) names the token endpoint, or the endpoint is given.
    issuer: str | None = None
    token_endpoint: str | None = None
    client_id: str | None = Field(None, min_length=1)
    client_secret_env: str | None = None
    # The token's audience (RFC 8707 `resource`); None: the upstream's url.
    resource: str | None = None
    # RFC 8693 / RFC 8707 `audience` parameter, when the provider wants a logical name too.
    audience: str | None = Field(None, min_length=1)
    scope: str | None = Field(None, min_length=1)
    # A token is used until this long before it expires (at most half its lifetime), then renewed.
    refresh_before_seconds: float = Field(30.0, ge=0)
    # Tokens kept at once (one per principal and upstream); past it the least recently used goes.
    max_cached_tokens: int = Field(10_000, gt=0)
    # One token request (discovery included) at most this long.
    timeout_seconds: float = Field(10.0, gt=0)
    # token_exchange to an upstream that keeps MCP sessions: one session per caller
    # (gateway/upstreams/caller_sessions.py), at most this many at once, each closed when idle this long.
    max_caller_sessions: int = Field(100, gt=0)
    caller_session_idle_seconds: float = Field(300.0, gt=0)

    @field_validator("client_secret_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return None if value is None else check_env_name(value)

    @field_validator("issuer", "token_endpoint", "resource")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else check_loopback_http(value, "the URL")

    @model_validator(mode="after")
    def _complete(self) -> "UpstreamAuthConfig":
        given = [k for k in ("issuer", "token_endpoint", "client_id", "client_secret_env", "resource", "audience",
                             "scope") if getattr(self, k) is not None]
        if self.mode == "static":
            if given:
                raise ValueError(f"auth.mode static takes no {', '.join(given)} (they are for client_credentials "
                                 "or token_exchange); static sends the configured headers")
            return self
        missing = [k for k in ("client_id", "client_secret_env") if getattr(self, k) is None]
        if self.issuer is None and self.token_endpoint is None:
            missing.insert(0, "issuer (or token_endpoint)")
        if missing:
            raise ValueError(f"auth.mode {self.mode} needs {', '.join(missing)}")
        return self
