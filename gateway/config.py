"""The gateway configuration (gateway.yaml): pydantic models, loading, and errors with file:line.

Every key is validated and unknown keys are refused, so a typo never silently falls back to a
default. See docs/configuration.md for the reference.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .conventions.keys import Effect
from .errors import ConfigError
from .yamlsource import SourcedDocument, dotted, expand_env, load_yaml, load_yaml_file

DEFAULT_CONFIG_PATH = "config/gateway.yaml"
CONFIG_ENV_VAR = "DEX_GATEWAY_CONFIG"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    path: str = "/mcp"
    # Stateless: any replica answers any request. Stateful keeps MCP sessions (needed for
    # server-to-client requests and list_changed notifications on the handshake era).
    stateful: bool = False
    # SSE keeps progress notifications flowing; JSON mode drops them (SDK behaviour).
    json_response: bool = False
    # Stateless handshake-era tools/call requests are answered without the SDK server's
    # per-request machinery (gateway/fastpath.py); everything else goes through the SDK.
    fast_tool_calls: bool = True
    # Host/Origin values accepted besides loopback (DNS-rebinding protection).
    allowed_hosts: list[str] = Field(default_factory=list)
    allowed_origins: list[str] = Field(default_factory=list)
    max_request_bytes: int = Field(4 * 1024 * 1024, gt=0)
    max_result_bytes: int = Field(16 * 1024 * 1024, gt=0)

    @field_validator("path")
    @classmethod
    def _path_starts_with_slash(cls, v: str) -> str:
        if not v.startswith("/") or v == "/":
            raise ValueError("must start with '/' and name a path, e.g. /mcp")
        return v.rstrip("/")


class TokenConfig(_Strict):
    principal: str = Field(min_length=1)
    token_sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    # Optional allow-list of exposed tool names (fnmatch globs) for this principal.
    tools: list[str] | None = None


class AuthConfig(_Strict):
    tokens: list[TokenConfig] = Field(default_factory=list)
    admin_token_sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")

    @model_validator(mode="after")
    def _unique_principals(self) -> "AuthConfig":
        seen: set[str] = set()
        for t in self.tokens:
            if t.token_sha256.lower() in seen:
                raise ValueError("two tokens share the same token_sha256")
            seen.add(t.token_sha256.lower())
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.tokens) or self.admin_token_sha256 is not None


class ToolPolicyConfig(_Strict):
    effect: Effect | None = None
    requires_approval: bool | None = None


class _UpstreamBase(_Strict):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    trusts_tool_annotations: bool = True
    default_tool_effect: Effect = Effect.UNCLASSIFIED
    tool_policies: dict[str, ToolPolicyConfig] = Field(default_factory=dict)
    # None: "<name>__"; "" exposes the upstream's own names.
    prefix: str | None = None
    connect_timeout_seconds: float = Field(30.0, gt=0)
    call_timeout_seconds: float = Field(60.0, gt=0)
    max_attempts: int = Field(3, ge=1, le=3)
    list_ttl_seconds: float = Field(300.0, gt=0)
    # "reject": a write without an idempotency key is refused (the Dex rule); "pass": plain
    # MCP clients may call writes without a key, unfenced.
    keyless_writes: Literal["reject", "pass"] = "reject"
    # Forward an authenticated principal's idempotency key as "<principal hash>/<key>", so a
    # Dex-aware upstream (which fences by key alone) keeps principals apart too. The
    # anonymous principal's key is always forwarded unchanged.
    scope_forwarded_keys: bool = True


class StdioUpstreamConfig(_UpstreamBase):
    transport: Literal["stdio"]
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    protocol: Literal["handshake", "2026-07-28"] = "handshake"


class HttpUpstreamConfig(_UpstreamBase):
    transport: Literal["streamable_http"]
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    # auto: ask `server/discover` (2026-07-28) and fall back to the `initialize` handshake.
    protocol: Literal["auto", "handshake", "2026-07-28"] = "auto"


UpstreamConfig = Annotated[StdioUpstreamConfig | HttpUpstreamConfig, Field(discriminator="transport")]


class ConnectorsConfig(_Strict):
    dir: str | None = None


class FencesConfig(_Strict):
    store: str = "sqlite:///./var/gateway.db"
    retention_hours: float = Field(24.0, gt=0)
    # How long a pending fence's owner is trusted without renewal.
    lease_seconds: float = Field(15.0, gt=0)
    # How long a duplicate call waits for the first one before answering unknown.
    wait_seconds: float = Field(30.0, ge=0)
    # Stable name of this replica; a restart with the same id knows its old claims are dead.
    replica_id: str | None = None

    @field_validator("store")
    @classmethod
    def _known_scheme(cls, v: str) -> str:
        if not v.startswith(("sqlite:///", "postgresql://", "postgres://", "memory://")):
            raise ValueError("must start with sqlite:///, postgresql:// or memory://")
        return v


class MediaConfig(_Strict):
    store: str | None = None


class GatewayConfig(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    upstreams: list[UpstreamConfig] = Field(default_factory=list)
    connectors: ConnectorsConfig = Field(default_factory=ConnectorsConfig)
    fences: FencesConfig = Field(default_factory=FencesConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)

    @field_validator("auth", mode="before")
    @classmethod
    def _empty_auth(cls, v: Any) -> Any:
        return {} if v is None else v

    @model_validator(mode="after")
    def _unique_upstream_names(self) -> "GatewayConfig":
        seen: set[str] = set()
        for i, upstream in enumerate(self.upstreams):
            if upstream.name in seen:
                raise _PathedError(("upstreams", i, "name"), f"duplicate upstream name {upstream.name!r}")
            seen.add(upstream.name)
        return self

    @model_validator(mode="after")
    def _no_open_bind_without_auth(self) -> "GatewayConfig":
        if not self.auth.enabled and not is_loopback_host(self.server.host):
            raise _PathedError(
                ("server", "host"),
                f"binding to {self.server.host!r} without auth would expose every tool; "
                "configure auth.tokens or bind to 127.0.0.1",
            )
        return self


class _PathedError(ValueError):
    """A model-level error that knows which key it is about."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path = path


def is_loopback_host(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def parse_config(doc: SourcedDocument, environ: dict[str, str] | None = None) -> GatewayConfig:
    data = expand_env(doc, environ)
    if not isinstance(data, dict):
        raise ConfigError(f"{doc.source}:1: the configuration must be a mapping of keys")
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, doc)) from None


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> GatewayConfig:
    """Load from `path`, else $DEX_GATEWAY_CONFIG, else config/gateway.yaml."""
    chosen = path or os.environ.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_PATH
    return parse_config(load_yaml_file(chosen), environ)


def config_from_text(text: str, source: str = "<config>", environ: dict[str, str] | None = None) -> GatewayConfig:
    return parse_config(load_yaml(text, source), environ)


def _describe(exc: ValidationError, doc: SourcedDocument) -> str:
    lines = []
    for err in exc.errors():
        loc = _clean_loc(err["loc"])
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, _PathedError):
            loc, message = ctx_error.path, str(ctx_error)
        elif err["type"] == "extra_forbidden":
            message = f"unknown key {str(loc[-1])!r}"
        elif err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = (*loc, "transport")
            message = (
                "missing required key 'transport' (stdio or streamable_http)"
                if err["type"] == "union_tag_not_found"
                else f"must be 'stdio' or 'streamable_http', not {err['input'].get('transport')!r}"
            )
        elif err["type"] == "missing":
            message = f"missing required key {str(loc[-1])!r}"
        else:
            message = err["msg"].removeprefix("Value error, ")
        lines.append(f"{doc.where(loc)}: {dotted(loc)}: {message}")
    return "invalid configuration:\n  " + "\n  ".join(dict.fromkeys(lines))


def _clean_loc(loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    # Discriminated unions add the tag ("stdio") to the path; people never wrote it.
    return tuple(p for p in loc if p not in ("stdio", "streamable_http", "function-after[_path_starts_with_slash(), str]"))
