"""`dex-gateway serve --workers N`: N gateway processes on one listening socket (more cores).

The supervisor binds the socket once and starts N workers, each a whole gateway
(`dex-gateway serve` with the inherited socket: gateway/server/serve.py) that the kernel hands
connections to in turn. The gateway is stateless between requests, so any worker answers any
request; what they share lives in the store (`fences.store`: SQLite in WAL mode, or PostgreSQL).

* Replica ids: worker i is the fence replica `<replica id>/w<i>` (the replica id being
  `fences.replica_id`, else `<host>:<port>`): distinct among the workers, and the same after a
  restart, so a restarted worker takes over its own dead claims at once (docs/fences.md).
* Each worker keeps its own listing caches, connector watch and upstream connections; a stdio
  upstream is started once per worker (N child processes: a stdio server that keeps state in
  memory is not shared -- use a Streamable HTTP upstream for that).
* Metrics: the workers write to one prometheus-client multiprocess directory (a private temporary
  directory, removed at exit), so a scrape of any worker counts all of them.
* Signals: SIGTERM or SIGINT to the supervisor is sent to every worker as SIGTERM (each drains);
  a second one is passed on too (each stops at once). The supervisor exits 0 once every worker
  has exited 0. A worker that dies otherwise is started again (same index, same replica id).
  A worker whose supervisor is gone drains and exits.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..config.model import GatewayConfig
from ..errors import ConfigError
from ..telemetry.metrics import MULTIPROC_ENV

__all__ = ["run_workers", "worker_replica_id"]

logger = logging.getLogger("gateway")

_RESTART_PAUSE = 1.0
_POLL = 0.2


def worker_replica_id(config: GatewayConfig, port: int, index: int) -> str:
    base = config.fences.replica_id or f"{socket.gethostname()}:{port}"
    return f"{base}/w{index}"


@dataclass
class _Worker:
    index: int
    process: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)


def check_workers(config: GatewayConfig, workers: int) -> None:
    if workers > 1 and config.fences.store.startswith("memory://"):
        raise ConfigError(
            "--workers needs a shared fence store: memory:// lives in one process; use sqlite:/// or postgresql://"
        )
    if workers > 1 and config.server.stateful:
        logger.warning("--workers %d with server.stateful: a session lives in the worker that made it, and "
                       "its next request may reach another worker; use the stateless front with --workers", workers)


def run_workers(config: GatewayConfig, workers: int, argv: Sequence[str]) -> int:
    """Bind, start `workers` copies of `argv` (the worker command without its socket options)
    with the socket, supervise them until a signal stops them all. The exit code: 0 when every
    worker exited 0 after the stop."""
    check_workers(config, workers)
    from .serve import uvicorn_config

    sock = uvicorn_config(config).bind_socket()
    port = sock.getsockname()[1]
    metrics_dir = tempfile.mkdtemp(prefix="dex-gateway-metrics-")
    stdio = [u.name for u in config.upstreams if u.transport == "stdio"]
    if stdio:
        logger.warning("--workers %d: each worker starts its own copy of the stdio upstream(s) %s", workers, ", ".join(stdio))
    env = {**os.environ, MULTIPROC_ENV: metrics_dir}
    signals: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: signals.append(signum)) for s in (signal.SIGTERM, signal.SIGINT)}

    def start(index: int) -> _Worker:
        command = [*argv, "--worker-fd", str(sock.fileno()), "--worker-index", str(index),
                   "--port", str(port), "--replica-id", worker_replica_id(config, port, index)]
        return _Worker(index, subprocess.Popen(command, pass_fds=(sock.fileno(),), env=env))

    running = {i: start(i) for i in range(workers)}
    host = config.server.host
    logger.info("supervisor pid %d: %d workers on http://%s:%d%s", os.getpid(), workers,
                f"[{host}]" if ":" in host else host, port, config.server.path)
    stops = 0
    codes: dict[int, int] = {}
    try:
        while running:
            while signals:
                signals.pop(0)
                stops += 1
                for worker in running.values():
                    _signal(worker, signal.SIGTERM)
            for index, worker in list(running.items()):
                code = worker.process.poll()
                if code is None:
                    continue
                del running[index]
                _mark_dead(metrics_dir, worker.process.pid)
                if stops:
                    codes[index] = code
                    continue
                logger.error("worker %d (pid %d) exited with %s; starting it again", index, worker.process.pid, code)
                if time.monotonic() - worker.started < _RESTART_PAUSE:
                    time.sleep(_RESTART_PAUSE)
                running[index] = start(index)
            time.sleep(_POLL)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for worker in running.values():  # only after an unexpected error of our own
            worker.process.kill()
        sock.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)
    failed = {i: c for i, c in codes.items() if c != 0}
    if failed:
        logger.error("workers exited with %s", failed)
        return 1
    return 0


def _signal(worker: _Worker, signum: int) -> None:
    try:
        worker.process.send_signal(signum)
    except ProcessLookupError:
        pass


def _mark_dead(metrics_dir: str, pid: int) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, path=metrics_dir)


def worker_argv(args_config: str | None, host: str | None, verbose: bool) -> list[str]:
    """The command that starts one worker (gateway.cli.main's `serve`, this Python)."""
    command = [sys.executable, "-m", "gateway.cli.main", "serve"]
    if args_config:
        command += ["--config", args_config]
    if host:
        command += ["--host", host]
    if verbose:
        command.append("-v")
    return command
