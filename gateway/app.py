"""The Starlette application: routes (/mcp, /healthz, /readyz, /admin) and the lifespan that
builds every resource from the config (stores, upstreams, caches) and closes it again."""

from __future__ import annotations

import contextlib
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta

import anyio
from anyio.abc import TaskGroup
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .auth import Authenticator, HostOriginPolicy, McpGuard
from .calls import CallPipeline
from .catalog import Catalog
from .config import GatewayConfig
from .connectors import ConnectorRegistry
from .connectors.admin_api import admin_routes
from .fastpath import ToolCallFastPath
from .fences import Fences, FenceStore, Owner, open_fence_store
from .server import Front
from .upstreams.listing import ListingCache, ListKind
from .upstreams.upstream import Upstream

logger = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Everything the running gateway owns; made in the lifespan, closed there."""

    config: GatewayConfig
    task_group: TaskGroup
    store: FenceStore
    fences: Fences
    upstreams: dict[str, Upstream]
    caches: list[ListingCache]
    catalog: Catalog
    front: Front
    mcp_app: ASGIApp
    connectors: ConnectorRegistry
    manager: StreamableHTTPSessionManager
    # Every upstream has been asked for its tools once (reported by /readyz, not gated on:
    # one hung upstream must not take a replica out of rotation).
    catalog_listed: bool = False


class _RuntimeHolder:
    runtime: Runtime | None = None


def replica_id_for(config: GatewayConfig) -> str:
    """Stable across restarts of one replica (same host and port), unique among replicas."""
    if config.fences.replica_id:
        return config.fences.replica_id
    if config.server.port == 0:
        # An unbound port 0 names no stable replica: never mistake a live peer for our past self.
        # (`dex-gateway serve` binds first and passes the real port.)
        return f"{socket.gethostname()}:ephemeral:{uuid.uuid4().hex}"
    return f"{socket.gethostname()}:{config.server.port}"


def create_app(config: GatewayConfig) -> Starlette:
    holder = _RuntimeHolder()
    authenticator = Authenticator(config.auth)
    # Registrations live in the fence store's database, so every replica sees the same set.
    connectors = ConnectorRegistry(config.fences.store)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg, _open_store(config) as store, connectors:
            if config.connectors.dir:
                await connectors.load_dir(config.connectors.dir)
            runtime = await _build_runtime(config, tg, store, authenticator, connectors)
            holder.runtime = runtime
            app.state.runtime = runtime
            try:
                async with runtime.manager.run():
                    tg.start_soon(runtime.fences.run_sweeper, timedelta(hours=config.fences.retention_hours))
                    tg.start_soon(runtime.fences.run_renewer)
                    tg.start_soon(_warm_up, runtime)
                    yield
            finally:
                holder.runtime = None
                with anyio.CancelScope(shield=True):
                    for upstream in runtime.upstreams.values():
                        await upstream.aclose()
                tg.cancel_scope.cancel()

    async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        runtime = holder.runtime
        if runtime is None:
            response = JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "gateway is starting"}}, status_code=503)
            await response(scope, receive, send)
            return
        await runtime.mcp_app(scope, receive, send)

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        runtime = holder.runtime
        if runtime is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        try:
            with anyio.fail_after(2):
                await runtime.store.stats()
        except Exception as exc:  # noqa: BLE001 - readiness reports, never raises
            return JSONResponse({"status": "store unavailable", "error": type(exc).__name__}, status_code=503)
        return JSONResponse(
            {"status": "ready", "upstreams": list(runtime.upstreams), "catalog_listed": runtime.catalog_listed}
        )

    routes: list[BaseRoute] = [
        Route(config.server.path, endpoint=_AsgiEndpoint(mcp_endpoint), methods=["GET", "POST", "DELETE"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
    routes.extend(admin_routes(connectors, _admin_check(authenticator)))
    return Starlette(routes=routes, lifespan=lifespan)


class _AsgiEndpoint:
    """Wraps a plain ASGI function so Starlette's Route treats it as an app, not a handler."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


@contextlib.asynccontextmanager
async def _open_store(config: GatewayConfig) -> AsyncIterator[FenceStore]:
    store = open_fence_store(config.fences.store)
    await store.open()
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()


async def _build_runtime(
    config: GatewayConfig, tg: TaskGroup, store: FenceStore, authenticator: Authenticator, connectors: ConnectorRegistry
) -> Runtime:
    fences = Fences(
        store,
        Owner.fresh(replica_id_for(config)),
        lease_seconds=config.fences.lease_seconds,
        wait_seconds=config.fences.wait_seconds,
    )
    upstreams = {u.name: Upstream(u, tg) for u in config.upstreams}
    caches = [ListingCache(upstream, tg) for upstream in upstreams.values()]
    front_ref: list[Front] = []

    def on_change() -> None:
        if front_ref:
            tg.start_soon(front_ref[0].notify_tools_changed)

    catalog = Catalog(caches, connectors, on_change=on_change)
    pipeline = CallPipeline(catalog, upstreams, fences)
    front = Front(catalog, pipeline, upstreams, authenticator.tool_globs)
    front_ref.append(front)
    manager = StreamableHTTPSessionManager(
        app=front.server,
        stateless=not config.server.stateful,
        json_response=config.server.json_response,
        max_request_body_size=config.server.max_request_bytes,
    )
    async def connectors_changed() -> None:
        catalog.refresh_routes()

    tg.start_soon(connectors.watch, connectors_changed)
    endpoint: ASGIApp = StreamableHTTPASGIApp(manager)
    if config.server.fast_tool_calls and not config.server.stateful and not config.server.json_response:
        endpoint = ToolCallFastPath(endpoint, front, config.server.max_request_bytes)
    mcp_app = McpGuard(
        endpoint,
        authenticator,
        HostOriginPolicy(config.server),
        config.server.max_request_bytes,
    )
    return Runtime(
        config=config,
        task_group=tg,
        store=store,
        fences=fences,
        upstreams=upstreams,
        caches=caches,
        catalog=catalog,
        front=front,
        mcp_app=mcp_app,
        connectors=connectors,
        manager=manager,
    )


async def _warm_up(runtime: Runtime) -> None:
    """List every upstream once at start so the first client does not wait for it."""
    await runtime.catalog.tools()
    runtime.catalog_listed = True
    logger.info("catalog ready: %d tools from %d upstreams", len(await runtime.catalog.tools()), len(runtime.upstreams))


def _admin_check(authenticator: Authenticator) -> Callable[[Request], Awaitable[bool]]:
    async def authorize(request: Request) -> bool:
        return authenticator.is_admin(request.headers.get("authorization"))

    return authorize


__all__ = ["Runtime", "create_app", "replica_id_for", "ListKind"]
