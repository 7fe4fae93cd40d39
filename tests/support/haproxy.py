"""Debian's haproxy in front of gateway replicas: round-robin, no stickiness, a health check on
`/healthz` so a killed replica leaves the rotation (installed by `make haproxy`; tests skip without it)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.processes import terminate
from tests.support.servers import free_port

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def haproxy_config(port: int, backends: Sequence[int]) -> str:
    servers = "\n".join(f"    server r{i} 127.0.0.1:{p} check" for i, p in enumerate(backends))
    return f"""global
    maxconn 512
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    option redispatch
    retries 2
frontend gateways
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /healthz
    default-server inter 300ms fall 1 rise 1
{servers}
"""


@contextmanager
def start_haproxy(directory: Path, backends: Sequence[int]) -> Iterator[str]:
    """haproxy on a free loopback port spreading requests over `backends`; yields its base URL."""
    if not Path(HAPROXY).exists():
        pytest.skip("haproxy is not installed (make haproxy; apt-get install haproxy)")
    port = free_port()
    config = directory / "haproxy.cfg"
    directory.mkdir(parents=True, exist_ok=True)
    config.write_text(haproxy_config(port, backends))
    process = subprocess.Popen([HAPROXY, "-db", "-f", str(config)], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"haproxy exited ({process.returncode}): {process.stdout.read() if process.stdout else ''}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("haproxy did not listen within 10 s") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        terminate(process)
