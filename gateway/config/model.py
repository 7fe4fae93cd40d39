"""The gateway configuration (gateway.yaml): pydantic models, loading, and errors with file:line.

Every key is validated and unknown keys are refused, so a typo never silently falls back to a
default. See docs/configuration.md for the reference.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, ValidationInfo, field_validator, model_validator

from ..conventions.keys import Effect
from .policy import PolicyConfig
from .strict import Strict
from .ops import RateConfig, RateLimitsConfig, TelemetryConfig
from .env import apply_env_overrides
from ..errors import ConfigError
from .grants import check_env_name, check_module_prefix, parse_host_entry
from .oauth import OAuthConfig
from .upstream_auth import UpstreamAuthConfig
from ..storage.media_urls import parse_media_store_url
from .yaml_source import SourceError, SourcedDocument, dotted, expand_env, load_file, load_yaml

__all__ = [
    "CONFIG_ENV_VAR", "DEFAULT_CONFIG_PATH", "ApprovalsConfig", "ApproverTokenConfig", "AuditConfig", "AuthConfig",
    "PolicyConfig", "ConnectorsConfig", "FencesConfig",
    "GatewayConfig", "HttpUpstreamConfig", "MediaConfig", "OAuthConfig", "RateConfig", "RateLimitsConfig", "RootConfig",
    "DiscoveryConfig", "ServerConfig", "StdioUpstreamConfig", "TasksConfig", "TelemetryConfig", "TokenConfig",
    "TokenDiscoveryConfig",
    "ToolPolicyConfig", "UpstreamConfig",
    "config_from_text", "is_loopback_host", "load_config", "parse_config", "with_server_overrides",
]


DEFAULT_CONFIG_PATH = "config/gateway.yaml"
CONFIG_ENV_VAR = "DEX_GATEWAY_CONFIG"


_Strict = Strict


class ServerConfig(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    path: str = "/mcp"
    # Stateless: any replica answers any request. Stateful keeps MCP sessions (needed for
    # server-to-client requests and list_changed notifications on the handshake era).
    stateful: bool = False
    # SSE keeps progress notifications flowing; JSON mode drops them (SDK behaviour).
    json_response: bool = False
    # Stateless tools/call and tools/list requests of both eras are answered without the SDK
    # server's per-request machinery (gateway/front/fastpath.py); everything else goes through
    # the SDK. Both entries give byte-identical answers (tests/gateway/test_gateway_parity.py).
    fast_tool_calls: bool = True
    # Host/Origin values accepted besides loopback (DNS-rebinding protection).
    allowed_hosts: list[str] = Field(default_factory=list)
    allowed_origins: list[str] = Field(default_factory=list)
    max_request_bytes: int = Field(4 * 1024 * 1024, gt=0)
    max_result_bytes: int = Field(8 * 1024 * 1024, gt=0)
    # Stateful fronts: SSE events kept for resumption (Last-Event-ID; 0: none), and the `retry:`
    # (milliseconds) a client waits before it reconnects.
    sse_event_buffer: int = Field(10_000, ge=0)
    sse_retry_ms: int = Field(1000, ge=0)
    # Stateful fronts (gateway/front/session_manager.py): open sessions in the process and per
    # principal (past them a new session is answered 503 / 429), and how long a session lives
    # without a request in flight before it ends (its id then answers 404).
    max_sessions: int = Field(10_000, gt=0)
    max_sessions_per_principal: int = Field(100, gt=0)
    session_idle_timeout_seconds: float = Field(300.0, gt=0)
    # Bytes of buffered SSE events (their JSON) per session and over all sessions of the process;
    # past either, the oldest events go first (gateway/front/event_store.py).
    session_event_buffer_bytes: int = Field(4 * 1024 * 1024, gt=0)
    session_event_buffer_total_bytes: int = Field(256 * 1024 * 1024, gt=0)
    # Connections (gateway/http/uvicorn_protocol.py, gateway/http/streams.py): an idle keep-alive
    # connection is closed after idle_timeout_seconds; a connection that sends no byte of an
    # incomplete request (a new connection, headers or a body cut off) for read_timeout_seconds is
    # closed; TCP keepalive probes find a vanished peer (half-open) in about 2 x this many seconds
    # (0: off); a GET stream that has sent nothing for stream_idle_seconds is ended.
    idle_timeout_seconds: float = Field(5.0, gt=0)
    read_timeout_seconds: float = Field(10.0, gt=0)
    # The request head (request line and headers): at most this many bytes (431 past it), and
    # whole within header_timeout_seconds of its first byte (408 past it).
    max_header_bytes: int = Field(64 * 1024, ge=1024)
    header_timeout_seconds: float = Field(10.0, gt=0)
    # Open client connections per process; past it a new connection is answered 503 and closed.
    # None: three quarters of the process's open-file limit at start.
    max_connections: int | None = Field(None, gt=0)
    tcp_keepalive_seconds: int = Field(30, ge=0)
    stream_idle_seconds: float = Field(300.0, gt=0)
    # SIGTERM: /readyz 503 and new requests refused at once; in-flight requests get this long to
    # finish (or stay fenced), then the process exits (gateway/server/drain.py).
    drain_seconds: float = Field(20.0, ge=0)

    @field_validator("path")
    @classmethod
    def _path_starts_with_slash(cls, v: str) -> str:
        if not v.startswith("/") or v == "/":
            raise ValueError("must start with '/' and name a path, e.g. /mcp")
        return v.rstrip("/")


class DiscoveryConfig(_Strict):
    """Search-based tool discovery (docs/discovery.md): `full` lists every tool; `search` lists
    the `always` tools (name globs) plus the gateway's `search_tools` and `call_tool`."""

    mode: Literal["full", "search"] = "full"
    always: list[str] = Field(default_factory=list)


class TokenDiscoveryConfig(_Strict):
    """A token's own discovery mode (overrides the top-level `discovery.mode`)."""

    mode: Literal["full", "search"]


class TokenConfig(_Strict):
    principal: str = Field(min_length=1)
    token_sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")
    # The principal's scope (docs/security.md). None of these set: everything. Any of them
    # set: only what they grant (deny by default), for every kind of request.
    # Exposed tool names (fnmatch globs).
    tools: list[str] | None = None
    # Exposed prompt names (globs).
    prompts: list[str] | None = None
    # Resource URIs (globs; a glob that matches a template's uriTemplate text lists the template).
    resources: list[str] | None = None
    # Upstream names: all of each one's tools, prompts, resources, templates, completion and log level.
    upstreams: list[str] | None = None
    # This principal's tools/call rate (instead of rate_limits.per_principal).
    rate_limit: RateConfig | None = None
    # This principal's discovery mode (docs/discovery.md); None: the top-level `discovery.mode`.
    discovery: TokenDiscoveryConfig | None = None
    # Who approves this principal's calls that need approval (docs/approvals.md): `client` trusts
    # the client's own approval channel; `gateway` holds each such call for a person's decision.
    approvals: Literal["client", "gateway"] = "client"


class ApproverTokenConfig(_Strict):
    """A person (or the console they use) who decides held calls on /admin/approvals."""

    name: str = Field(min_length=1, max_length=100)
    token_sha256: str = Field(pattern=r"^[0-9a-fA-F]{64}$")


class ApprovalsConfig(_Strict):
    """Held calls (docs/approvals.md): stored in the fences' database."""

    # A held call not decided within this long is rejected ("approval deadline passed").
    deadline_seconds: float = Field(600.0, gt=0)
    # A client that cannot be asked waits this long for an approver's decision, then is answered
    # (nothing ran) and sends the call again with the same key; a task waits until the deadline.
    wait_seconds: float = Field(30.0, ge=0)
    # How often a waiting call looks for a decision in the database (any replica may record it).
    poll_seconds: float = Field(0.2, gt=0, le=10)
    # Approvals are deleted this long after their deadline (decided or not); a retry with the same
    # key after that is a new call that asks again. Swept every fences.sweep_interval_seconds.
    retention_hours: float = Field(168.0, gt=0)


class AuthConfig(_Strict):
    tokens: list[TokenConfig] = Field(default_factory=list)
    admin_token_sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    # Who the admin token is in the records it leaves: an approval's decided_by, a fence note's
    # resolved_by, a pin's reviewed_by (docs/console.md).
    admin_token_name: str = Field("admin", min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")
    # The gateway as an OAuth 2.1 resource server (gateway/config/oauth.py, docs/auth.md).
    oauth: OAuthConfig | None = None
    # Who may decide held calls (never an agent token): docs/approvals.md.
    approver_tokens: list[ApproverTokenConfig] = Field(default_factory=list)

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
        """Whether `/mcp` callers must authenticate: agent tokens or `oauth` are configured. The
        admin token guards only the admin routes, so on its own it leaves `/mcp` open (and the
        gateway then binds to loopback only)."""
        return bool(self.tokens) or self.oauth is not None

    @property
    def any_credential(self) -> bool:
        return self.enabled or self.admin_token_sha256 is not None


class ToolPolicyConfig(_Strict):
    effect: Effect | None = None
    requires_approval: bool | None = None


class RootConfig(_Strict):
    """A root the gateway gives an upstream that asks `roots/list` (its client's workspace)."""

    uri: str = Field(pattern=r"^file://")
    name: str | None = None


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
    # Items one listing (tools, resources, templates, prompts; all its pages) may hold; a longer
    # listing is refused whole and the previous one (or none) is kept.
    max_listed_items: int = Field(10_000, gt=0)
    # Before an interrupted call is sent again: a random wait up to this x 2^(attempt-1).
    resend_backoff_seconds: float = Field(0.1, ge=0)
    # tools/call rate towards this upstream, over all principals (and replicas, with Redis).
    rate_limit: RateConfig | None = None
    # "reject": a write without an idempotency key is refused (the Dex rule); "pass": plain
    # MCP clients may call writes without a key, unfenced.
    keyless_writes: Literal["reject", "pass"] = "reject"
    # Forward an authenticated principal's idempotency key as "<principal hash>/<key>", so a
    # Dex-aware upstream (which fences by key alone) keeps principals apart too. The
    # anonymous principal's key is always forwarded unchanged.
    scope_forwarded_keys: bool = True
    # The answer to the upstream's `roots/list`. Unset: asked of the client of the call in flight
    # (a session with the roots capability), else refused; set (even to []): always these.
    roots: list[RootConfig] | None = None
    # Requests from the upstream (ping, elicitation, sampling, roots) answered at the same time;
    # past this, each is answered at once with a JSON-RPC error.
    max_inbound_requests: int = Field(64, ge=1)
    # Log messages of one call waiting for a slow client; past this the oldest is dropped
    # (progress is coalesced to the latest). Counted in dex_gateway_upstream_notifications_dropped.
    max_queued_notifications: int = Field(256, ge=1)
    # How the gateway authenticates to the upstream (gateway/config/upstream_auth.py).
    auth: UpstreamAuthConfig = Field(default_factory=UpstreamAuthConfig)
    # A tool whose definition changes after it was pinned (gateway/pins/, docs/pinning.md): "warn"
    # lists it, logs and counts it; "hold" withholds it (and new tools) until an operator accepts it.
    pinning: Literal["off", "warn", "hold"] = "warn"

    @field_validator("name")
    @classmethod
    def _no_separator_in_name(cls, v: str) -> str:
        # Exposed names are `<name>__<tool>`: with `__` inside names, upstream `a`'s tool `b__c`
        # and upstream `a__b`'s tool `c` would both be `a__b__c`, one shadowing the other.
        if "__" in v:
            raise ValueError(f"upstream name {v!r} must not contain '__' (the separator of exposed names "
                             "'<upstream>__<tool>'); use a single '_' or '-'")
        return v


class StdioUpstreamConfig(_UpstreamBase):
    transport: Literal["stdio"]
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    protocol: Literal["handshake", "2026-07-28"] = "handshake"

    @model_validator(mode="after")
    def _auth_needs_http(self) -> "StdioUpstreamConfig":
        if self.auth.mode != "static":
            raise ValueError(f"auth.mode {self.auth.mode} needs an HTTP upstream (transport: streamable_http): a "
                             "stdio process has no Authorization header to carry a token; give it credentials "
                             "in its env instead")
        return self


class HttpUpstreamConfig(_UpstreamBase):
    transport: Literal["streamable_http"]
    url: str = Field(pattern=r"^https?://")
    headers: dict[str, str] = Field(default_factory=dict)
    # auto: ask `server/discover` (2026-07-28) and fall back to the `initialize` handshake.
    protocol: Literal["auto", "handshake", "2026-07-28"] = "auto"
    # https:// only: a PEM bundle of the CA(s) that sign this upstream's certificate (a private
    # CA); used instead of the system store. Unset: the system store (SSL_CERT_FILE honoured).
    tls_ca_file: str | None = None
    # Connections (= exchanges in flight) to this upstream at once; a call past them waits up to
    # pool_timeout_seconds for one, then fails as not sent.
    max_connections: int = Field(100, gt=0)
    pool_timeout_seconds: float = Field(30.0, gt=0)

    @model_validator(mode="after")
    def _ca_file_needs_https(self) -> "HttpUpstreamConfig":
        if self.tls_ca_file is not None and not self.url.startswith("https://"):
            raise ValueError("tls_ca_file is only used with an https:// url")
        return self

    @model_validator(mode="after")
    def _auth_fits(self) -> "HttpUpstreamConfig":
        mode = self.auth.mode
        if mode == "static":
            return self
        if any(key.lower() == "authorization" for key in self.headers):
            raise ValueError(f"headers.Authorization cannot be used with auth.mode {mode}: the gateway sets "
                             "Authorization itself (remove the header, or use mode static)")
        return self

    @property
    def token_resource(self) -> str:
        """The audience a token for this upstream is asked for: `auth.resource`, else the url."""
        return self.auth.resource or self.url


UpstreamConfig = Annotated[StdioUpstreamConfig | HttpUpstreamConfig, Field(discriminator="transport")]


def _host_entry(value: str) -> str:
    parse_host_entry(value)
    return value.strip()


class ConnectorsConfig(_Strict):
    """Connectors (docs/connectors.md). The three lists are the operator's grants to bindings
    registered through the admin API (docs/security.md, "Admin API and connectors"); empty,
    they grant nothing. The connectors directory (`dir`, the operator's own files) is held only
    to the link-local and metadata rule, which `allowed_hosts` entries also lift."""

    dir: str | None = None
    # Module prefixes whose callables admin-API Python bindings may name (`a.b`: `a.b`, `a.b.c`).
    python_modules: list[Annotated[str, AfterValidator(check_module_prefix)]] = Field(default_factory=list)
    # Environment variables admin-API HTTP bindings may send as their credential.
    credential_env: list[Annotated[str, AfterValidator(check_env_name)]] = Field(default_factory=list)
    # Hosts (`name`, `name:port`), addresses (`10.0.0.5`, `[::1]:9100`) and networks (`10.0.0.0/8`)
    # admin-API HTTP bindings may reach.
    allowed_hosts: list[Annotated[str, AfterValidator(_host_entry)]] = Field(default_factory=list)


class FencesConfig(_Strict):
    store: str = "sqlite:///./var/gateway.db"
    retention_hours: float = Field(24.0, gt=0)
    # How often fences past retention are deleted (in short batches: docs/fences.md).
    sweep_interval_seconds: float = Field(300.0, gt=0)
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
    """Images in tool results (docs/media.md). Without a store, valid images pass inline."""

    # file:///ABS/DIR | file:REL/DIR | s3://BUCKET/PREFIX?endpoint_url=…&region=…&head_first=true | memory://
    # (S3 credentials: the standard AWS environment and config, never the URL).
    store: str | None = None
    # The SPEC's limits are the defaults and the maximum; a deployment may only lower them.
    max_image_bytes: int = Field(3_750_000, gt=0, le=3_750_000)
    max_images_per_result: int = Field(20, gt=0, le=20)
    max_uri_bytes: int = Field(1024, ge=128, le=1024)

    @field_validator("store")
    @classmethod
    def _store_url(cls, v: str | None) -> str | None:
        if v is not None:
            parse_media_store_url(v)  # parsing only; no store is touched
        return v


class TasksConfig(_Strict):
    """Long-running tools as MCP tasks (docs/tasks.md); tasks live in the fences' database."""

    enabled: bool = True
    # Any tool runs as a task for a 2025-11-25 client that sends `task` (every tool then lists
    # execution.taskSupport "optional", or the upstream's "required").
    augment: bool = True
    # A taskSupport=required tool called without a task: "wait" (the gateway runs the task upstream
    # and answers the final result, progress relayed) or "refuse" (-32021 on 2026-07-28, -32601 before).
    plain_required: Literal["wait", "refuse"] = "wait"
    default_ttl_seconds: float = Field(86400.0, gt=0)
    # The longest TTL a client may ask for (the upstream may grant less).
    max_ttl_seconds: float = Field(86400.0, gt=0)
    # The pollInterval the gateway tells its clients (an upstream task's own interval wins).
    poll_interval_ms: int = Field(500, ge=10)
    # How often TTLs and tasks of stopped processes are checked; how long an expired task's row stays
    # in the database for operators (clients never see a task past its advertised ttl).
    sweep_interval_seconds: float = Field(30.0, gt=0)
    keep_expired_seconds: float = Field(0.0, ge=0)
    # The bytes of stored task results (and errors) one principal may hold; at it, new tasks are refused.
    max_result_bytes_per_principal: int = Field(256 * 1024 * 1024, gt=0)


class AuditConfig(_Strict):
    """The audit log (docs/audit.md): a row for every write call and every refused one, in the
    fences' database."""

    enabled: bool = True
    # Keep the call's arguments themselves (their canonical JSON) beside their SHA-256 digest.
    # Off by default: arguments may hold personal data or secrets.
    arguments: bool = False
    # Rows older than this are deleted by the sweep (in short batches).
    retention_days: float = Field(90.0, gt=0)
    sweep_interval_seconds: float = Field(3600.0, gt=0)
    # Rows waiting for the background writer; past this a call waits (up to 5 s) for room.
    max_queued_rows: int = Field(10_000, gt=0)
    # How long the writer gathers rows before it writes them in one transaction (0: at once). A
    # SIGKILL can lose the rows of about this long (docs/audit.md).
    flush_interval_ms: float = Field(50.0, ge=0, le=1000)


class GatewayConfig(_Strict):
    server: ServerConfig = Field(default_factory=ServerConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    upstreams: list[UpstreamConfig] = Field(default_factory=list)
    connectors: ConnectorsConfig = Field(default_factory=ConnectorsConfig)
    fences: FencesConfig = Field(default_factory=FencesConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    rate_limits: RateLimitsConfig = Field(default_factory=RateLimitsConfig)
    # Rules over the call: tool, arguments, principal, claims (gateway/config/policy.py, docs/policy.md).
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    # Search-based tool discovery (docs/discovery.md).
    discovery: DiscoveryConfig = Field(default_factory=DiscoveryConfig)
    # Calls held for a person's decision (docs/approvals.md).
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)

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
    def _unique_principal_names(self) -> "GatewayConfig":
        # A principal's scope, fences and images follow its name: two tokens of one name would
        # share one scope (the last entry's), so each token needs a principal of its own.
        first: dict[str, int] = {}
        for i, token in enumerate(self.auth.tokens):
            if token.principal in first:
                raise _PathedError(
                    ("auth", "tokens", i, "principal"),
                    f"duplicate principal {token.principal!r} (also auth.tokens.{first[token.principal]}): "
                    "each token needs a principal name of its own, since scope, fences and images follow the name",
                )
            first[token.principal] = i
        return self

    @model_validator(mode="after")
    def _upstream_secrets_are_set(self, info: ValidationInfo) -> "GatewayConfig":
        # Checked at load (the environment the file is read with), so a missing secret stops the
        # start with its file and line instead of failing every call.
        environ = info.context.get("environ") if isinstance(info.context, dict) else None
        if environ is None:
            return self
        for i, upstream in enumerate(self.upstreams):
            name = upstream.auth.client_secret_env
            if name is not None and not environ.get(name):
                raise _PathedError(("upstreams", i, "auth", "client_secret_env"),
                                   f"the environment variable {name} (the client secret for auth.mode "
                                   f"{upstream.auth.mode}) is not set")
        return self

    @model_validator(mode="after")
    def _scopes_name_known_upstreams(self) -> "GatewayConfig":
        names = {u.name for u in self.upstreams}
        for i, token in enumerate(self.auth.tokens):
            for j, name in enumerate(token.upstreams or ()):
                if name not in names:
                    raise _PathedError(("auth", "tokens", i, "upstreams", j), f"no upstream is named {name!r}")
        oauth = self.auth.oauth
        if oauth is not None:
            for i, grant in enumerate(oauth.grants or ()):
                for j, name in enumerate(grant.upstreams or ()):
                    if name not in names:
                        raise _PathedError(("auth", "oauth", "grants", i, "upstreams", j), f"no upstream is named {name!r}")
            for j, name in enumerate(oauth.default.upstreams or () if oauth.default else ()):
                if name not in names:
                    raise _PathedError(("auth", "oauth", "default", "upstreams", j), f"no upstream is named {name!r}")
        return self

    @model_validator(mode="after")
    def _unique_rule_names(self) -> "GatewayConfig":
        # Logs and metrics name the rule that denied a call: one name, one rule.
        first: dict[str, int] = {}
        for i, rule in enumerate(self.policy.rules):
            if rule.name in first:
                raise _PathedError(("policy", "rules", i, "name"),
                                   f"duplicate rule name {rule.name!r} (also policy.rules.{first[rule.name]})")
            first[rule.name] = i
        return self

    @model_validator(mode="after")
    def _approvers_are_not_agents(self) -> "GatewayConfig":
        # An approver token is never an agent token: a calling principal could approve its own calls.
        agents = {t.token_sha256.lower() for t in self.auth.tokens}
        names: set[str] = set()
        for i, a in enumerate(self.auth.approver_tokens):
            if a.token_sha256.lower() in agents:
                raise _PathedError(("auth", "approver_tokens", i, "token_sha256"),
                                   "an approver token is never an agent token: this token_sha256 is also in "
                                   "auth.tokens (a calling principal could approve its own calls)")
            admin = self.auth.admin_token_sha256
            if admin is not None and a.token_sha256.lower() == admin.lower():
                raise _PathedError(("auth", "approver_tokens", i, "token_sha256"),
                                   "this is the admin token, which may decide approvals already; give each "
                                   "approver a token of its own")
            if a.name in names:
                raise _PathedError(("auth", "approver_tokens", i, "name"), f"duplicate approver name {a.name!r}")
            if a.name == self.auth.admin_token_name:
                raise _PathedError(("auth", "approver_tokens", i, "name"),
                                   f"{a.name!r} is the admin token's name (auth.admin_token_name): the records "
                                   "could not tell who decided")
            names.add(a.name)
        return self

    @model_validator(mode="after")
    def _console_issuer_is_trusted(self) -> "GatewayConfig":
        oauth = self.auth.oauth
        if oauth is not None and (why := oauth.console_issuer_untrusted()) is not None:
            raise _PathedError(("auth", "oauth", "console", "issuer"), why)
        return self

    @model_validator(mode="after")
    def _idle_timeout_outlasts_sse_retry(self) -> "GatewayConfig":
        # A client that reconnects after `retry:` must find its session still there.
        server = self.server
        if server.stateful and server.session_idle_timeout_seconds * 1000 <= server.sse_retry_ms:
            raise _PathedError(("server", "session_idle_timeout_seconds"),
                               f"must be longer than server.sse_retry_ms ({server.sse_retry_ms} ms), or sessions "
                               "end while their clients wait to reconnect")
        return self

    @model_validator(mode="after")
    def _no_open_bind_without_auth(self) -> "GatewayConfig":
        if not self.auth.enabled and not is_loopback_host(self.server.host):
            raise _PathedError(
                ("server", "host"),
                f"binding to {self.server.host!r} without agent tokens would expose every tool to anyone "
                "(auth.admin_token_sha256 guards only the admin routes); configure auth.tokens or auth.oauth, "
                "or bind to 127.0.0.1",
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
    # DEX_GATEWAY__SECTION__KEY variables override the file (gateway/config/env.py).
    data, doc = apply_env_overrides(data, doc, os.environ if environ is None else environ)
    if not isinstance(data, dict):
        raise ConfigError(f"{doc.source}:1: the configuration must be a mapping of keys")
    try:
        # The environment, for checks of variables named by the file (gateway/config/upstream_auth.py).
        return GatewayConfig.model_validate(data, context={"environ": os.environ if environ is None else environ})
    except ValidationError as exc:
        raise ConfigError(_describe(exc, doc)) from None


def load_config(path: str | Path | None = None, environ: dict[str, str] | None = None) -> GatewayConfig:
    """Load from `path`, else $DEX_GATEWAY_CONFIG, else config/gateway.yaml."""
    chosen = path or os.environ.get(CONFIG_ENV_VAR) or DEFAULT_CONFIG_PATH
    try:
        doc = load_file(chosen)
    except SourceError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config(doc, environ)


def config_from_text(text: str, source: str = "<config>", environ: dict[str, str] | None = None) -> GatewayConfig:
    try:
        doc = load_yaml(text, source)
    except SourceError as exc:
        raise ConfigError(str(exc)) from None
    return parse_config(doc, environ)


def with_server_overrides(config: GatewayConfig, source: str, **values: Any) -> GatewayConfig:
    """`config` with `server` keys replaced (`serve --host/--port`), validated like the file."""
    try:
        return GatewayConfig.model_validate(
            {**config.model_dump(mode="python"), "server": {**config.server.model_dump(), **values}})
    except ValidationError as exc:
        lines = [f"{source}: {dotted(loc)}: {message}" for loc, message in _errors(exc)]
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(dict.fromkeys(lines))) from None


def _describe(exc: ValidationError, doc: SourcedDocument) -> str:
    lines = [f"{doc.where(loc)}: {dotted(loc)}: {message}" for loc, message in _errors(exc)]
    return "invalid configuration:\n  " + "\n  ".join(dict.fromkeys(lines))


def _errors(exc: ValidationError) -> list[tuple[tuple[str | int, ...], str]]:
    """Each error of a validation as (the key's path, what is wrong)."""
    found: list[tuple[tuple[str | int, ...], str]] = []
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
        found.append((loc, message))
    return found


def _clean_loc(loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    # Discriminated unions add the tag ("stdio") to the path; people never wrote it.
    return tuple(p for p in loc if p not in ("stdio", "streamable_http", "function-after[_path_starts_with_slash(), str]"))
