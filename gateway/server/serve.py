"""`dex-gateway serve` in one process: uvicorn on uvloop, and what SIGTERM does.

SIGTERM (or SIGINT) starts a drain (gateway/server/drain.py): `/readyz` turns 503 and new requests are
refused at once; the requests in flight get `server.drain_seconds` to finish; then uvicorn
closes the connections, the lifespan closes the stores, and the process exits 0. A second signal,
or the deadline, ends the process at once, still with 0: whatever was cut is a claimed write
whose fence stays pending (its retry is answered by the fence rules) or a read the client
retries. uvicorn's own signal handling is not used: it re-raises the signal after a clean
shutdown, so the process would die by it (exit -15) instead of exiting 0.

Under `serve --workers N` each worker runs this on the socket its supervisor bound
(gateway/server/workers.py), ignores SIGINT (the supervisor forwards it as SIGTERM) and drains when
the supervisor goes away.
"""

from __future__ import annotations

import gc
import logging
import os
import resource
import signal
import socket
import sys

import anyio
import uvicorn
from anyio.abc import TaskGroup

from .app import create_app
from ..config.model import GatewayConfig
from .drain import Drain
from ..http.uvicorn_protocol import ConnectionLimits, connection_protocol

__all__ = ["default_max_connections", "serve", "uvicorn_config"]

logger = logging.getLogger("gateway")

_PARENT_POLL_SECONDS = 1.0
_SHUTDOWN_SECONDS = 15.0


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers (serve() below owns SIGTERM and SIGINT)."""

    def capture_signals(self):  # type: ignore[no-untyped-def]
        from contextlib import nullcontext

        return nullcontext()


def uvicorn_config(config: GatewayConfig) -> uvicorn.Config:
    server = config.server
    return uvicorn.Config(
        None,  # type: ignore[arg-type]  # the app is made once the port is known
        host=server.host,
        port=server.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        http=connection_protocol(ConnectionLimits(
            read_timeout=server.read_timeout_seconds,
            keepalive_seconds=server.tcp_keepalive_seconds,
            max_header_bytes=server.max_header_bytes,
            header_timeout=server.header_timeout_seconds,
            max_connections=server.max_connections or default_max_connections(),
        )),
        timeout_keep_alive=max(1, round(server.idle_timeout_seconds)),
        # The drain already waited for the requests; this only bounds closing the connections.
        timeout_graceful_shutdown=5,
    )


def default_max_connections() -> int:
    """Three quarters of the open-file limit: the rest is for upstreams, stores and logs."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 10_000
    return max(16, soft * 3 // 4)


async def serve(config: GatewayConfig, *, sock: socket.socket | None = None, worker: int | None = None) -> None:
    """Serve until a signal drains and stops the gateway. `sock`: a socket bound by the caller
    (a worker's, from its supervisor); else bind here first, so the replica id names the port
    actually bound (`--port 0`)."""
    uv_config = uvicorn_config(config)
    if sock is None:
        sock = uv_config.bind_socket()
    # uvicorn marks the socket inheritable (for its own workers): a stdio upstream started by
    # this process would then hold the port open after a crash, and a restart could not bind.
    sock.set_inheritable(False)
    bound_port = sock.getsockname()[1]
    if bound_port != config.server.port:
        config = config.model_copy(update={"server": config.server.model_copy(update={"port": bound_port})})
    drain = Drain()
    uv_config.app = create_app(config, drain=drain)
    server = _Server(uv_config)
    signals = (signal.SIGTERM,) if worker is not None else (signal.SIGTERM, signal.SIGINT)
    if worker is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(*signals) as received:
            tg.start_soon(_on_signals, received, tg, server, drain, config.server.drain_seconds)
            if worker is not None:
                tg.start_soon(_on_orphaned, server, drain, config.server.drain_seconds)
            serving = anyio.Event()
            tg.start_soon(_serve_then, server, sock, serving)
            while not server.started and not serving.is_set():
                await anyio.sleep(0.02)
            if server.started:
                # Objects made during start-up live for the whole run; keeping them out of the
                # collector's generations shortens GC pauses under load.
                gc.freeze()
                host = config.server.host
                shown = f"[{host}]" if ":" in host else host
                who = f" (worker {worker}, pid {os.getpid()})" if worker is not None else ""
                logger.info("listening on http://%s:%d%s%s", shown, bound_port, config.server.path, who)
            await serving.wait()
            tg.cancel_scope.cancel()


async def _serve_then(server: uvicorn.Server, sock: socket.socket, done: anyio.Event) -> None:
    try:
        await server.serve(sockets=[sock])
    finally:
        done.set()


async def _on_signals(received: object, tg: TaskGroup, server: uvicorn.Server, drain: Drain, seconds: float) -> None:
    async for signum in received:  # type: ignore[attr-defined]
        name = signal.Signals(signum).name
        if drain.draining:
            logger.warning("second %s: stopping at once", name)
            _exit_now(drain)
        logger.info("%s: draining (up to %g s)", name, seconds)
        tg.start_soon(_drain, server, drain, seconds)


async def _on_orphaned(server: uvicorn.Server, drain: Drain, seconds: float) -> None:
    parent = os.getppid()
    while os.getppid() == parent:
        await anyio.sleep(_PARENT_POLL_SECONDS)
    logger.warning("the supervisor is gone: draining")
    await _drain(server, drain, seconds)


async def _drain(server: uvicorn.Server, drain: Drain, seconds: float) -> None:
    if drain.draining:
        return
    drain.start()
    if not await drain.wait_idle(seconds):
        _exit_now(drain)
    logger.info("drained: closing connections and stores")
    server.should_exit = True
    # uvicorn bounds closing the connections; this bounds the rest (the lifespan closing stores).
    await anyio.sleep(_SHUTDOWN_SECONDS)
    logger.warning("shutdown did not finish within %g s", _SHUTDOWN_SECONDS)
    _exit_now(drain)


def _exit_now(drain: Drain) -> None:
    logger.warning(
        "exiting with %d request(s) in flight: claimed writes among them stay pending in the fence store "
        "and their retries are answered by the fence rules", drain.in_flight,
    )
    logging.shutdown()
    sys.stderr.flush()
    os._exit(0)
