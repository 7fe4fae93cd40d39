"""@modelcontextprotocol/server-everything (npm, installed in conformance/) for the tests: its stdio
upstream entry, and its Streamable HTTP server bound to loopback (a preload makes `listen()` use
127.0.0.1: the package listens on every interface)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.support.processes import sigkill, spawn_listening, terminate
from tests.support.servers import REPO_ROOT, free_port

__all__ = ["EVERYTHING", "LOOPBACK_PRELOAD", "everything_http", "everything_stdio", "require_everything"]

EVERYTHING = REPO_ROOT / "conformance" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
LOOPBACK_PRELOAD = REPO_ROOT / "tests" / "support" / "loopback_listen.mjs"


def require_everything() -> str:
    """The node binary, with server-everything installed as conformance/run.sh installs it (the
    versions pinned in conformance/package.json); skips, saying why, only when node or npm is missing."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed to run @modelcontextprotocol/server-everything")
    if not EVERYTHING.exists():
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=REPO_ROOT / "conformance",
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not EVERYTHING.exists():
            pytest.fail(f"npm install in conformance/ failed: {done.stderr[-2000:]}")
    return node


def everything_stdio(name: str = "everything", *, node: str | None = None, **options: Any) -> dict[str, Any]:
    """A gateway upstream entry: server-everything over stdio."""
    return {"name": name, "transport": "stdio", "command": node or shutil.which("node") or "node",
            "args": [str(EVERYTHING), "stdio"], "cwd": str(REPO_ROOT), **options}


@contextmanager
def everything_http(node: str = "node") -> Iterator[str]:
    """server-everything's Streamable HTTP transport on a loopback port; yields its /mcp URL."""
    port = free_port()
    lines: list[str] = []
    process, _ = spawn_listening([node, "--import", str(LOOPBACK_PRELOAD), str(EVERYTHING), "streamableHttp"],
                                 cwd=REPO_ROOT, env={**os.environ, "PORT": str(port)}, name="everything",
                                 lines=lines, ready_timeout=0.5)
    try:
        deadline = time.monotonic() + 20
        while not any(re.search(r"listening on port", line) for line in lines):
            if process.poll() is not None or time.monotonic() > deadline:
                sigkill(process)
                raise RuntimeError("server-everything did not start:\n" + "\n".join(lines))
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        terminate(process)
