"""The front: what clients talk to at `/mcp`, one concept per module.

    HostOriginGuard   hosts.py       421 / 403 for a foreign Host or Origin (DNS rebinding)
    BearerAuth        auth.py        401 without a known token; the principal into the scope
    BodyLimit         body_limit.py  413 over server.max_request_bytes
    RequestGate       requests.py    one well-formed JSON-RPC message per POST, or a clear error
    FastPath          fastpath.py    stateless tools/call and tools/list, both eras
    SDK server        handlers.py    everything else (the official SDK's Streamable HTTP);
                      task_methods.py  tasks/* of both eras (the work: gateway/tasks/)

Both entries (the fast path and the SDK handlers) only parse requests and write responses:
`tools.py` answers tools/call and tools/list for both, the pipeline (`gateway/calls.py`)
does the work, and `wire.py` gives every answer its era's wire form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.types import ASGIApp

from ..calls import CallPipeline
from ..catalog import Catalog
from ..config import GatewayConfig
from ..media.serving import MediaReader
from ..passthrough import Passthrough
from ..scope import PrincipalScope
from ..tasks import Tasks
from ..telemetry import Telemetry
from ..telemetry.sdk import trace_sdk_server
from ..upstreams.upstream import Upstream
from .auth import Authenticator, BearerAuth
from .body_limit import BodyLimit
from .fastpath import FastPath
from .handlers import GatewayServer, build_server
from .hosts import HostOriginGuard, HostOriginPolicy
from .notifier import SessionNotifier
from .requests import RequestGate
from .tools import ToolCalls, ToolListing

__all__ = ["Authenticator", "Front", "HostOriginPolicy", "SessionNotifier", "build_front"]

VERSION = "0.1.0"
SERVER_INFO: Mapping[str, Any] = MappingProxyType({"name": "dex-mcp-gateway", "version": VERSION})


@dataclass
class Front:
    """The composed `/mcp` endpoint and the SDK session manager the lifespan must run."""

    app: ASGIApp
    server: GatewayServer
    manager: StreamableHTTPSessionManager


def build_front(
    config: GatewayConfig,
    authenticator: Authenticator,
    catalog: Catalog,
    pipeline: CallPipeline,
    upstreams: dict[str, Upstream],
    scope: PrincipalScope,
    notifier: SessionNotifier,
    media: MediaReader | None = None,
    tasks: Tasks | None = None,
    *,
    telemetry: Telemetry | None = None,
) -> Front:
    server_info = SERVER_INFO
    tool_calls = ToolCalls(pipeline, server_info, tasks)
    listing = ToolListing(catalog, scope, server_info)
    passthrough = Passthrough(catalog, upstreams, scope, media)
    server = build_server(catalog, passthrough, tool_calls, listing, notifier, version=VERSION, tasks=tasks)
    tracer = telemetry.tracer if telemetry is not None else None
    trace_sdk_server(server, tracer)  # one front span per request on the SDK path too (or none)
    server_cfg = config.server
    manager = StreamableHTTPSessionManager(
        app=server,
        stateless=not server_cfg.stateful,
        json_response=server_cfg.json_response,
        max_request_body_size=server_cfg.max_request_bytes,
    )
    endpoint: ASGIApp = StreamableHTTPASGIApp(manager)
    if server_cfg.fast_tool_calls and not server_cfg.json_response:
        endpoint = FastPath(
            endpoint, tool_calls, listing, catalog, server_cfg.max_request_bytes, handshake_era=not server_cfg.stateful,
            tracer=tracer,
        )
    app: ASGIApp = RequestGate(endpoint, max_body=server_cfg.max_request_bytes, json_only=server_cfg.json_response)
    app = BodyLimit(app, server_cfg.max_request_bytes)
    app = BearerAuth(app, authenticator)
    app = HostOriginGuard(app, HostOriginPolicy(server_cfg))
    return Front(app=app, server=server, manager=manager)
