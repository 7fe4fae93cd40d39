"""Start the example upstream servers as real processes, and read what they executed.

Plain functions and context managers, shared by every test folder:

    with start_http_server("dex_server", state_dir=tmp_path) as srv:
        ... srv.url ...                      # http://127.0.0.1:<port>/mcp
    params = stdio_params("plain_server", state_dir=tmp_path)   # for mcp.Client / gateway config
    count_executions(tmp_path, tool="send_payment")
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

from tests.support.processes import sigkill, spawn_listening, terminate

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES_DIR = REPO_ROOT / "examples" / "servers"
STATE_DIR_ENV = "DEX_EXAMPLE_STATE_DIR"
EXECUTIONS_FILE = "executions.jsonl"


def example_script(name: str) -> Path:
    """Path of an example server by name: "dex_server", "plain_server", "broken_server"."""
    path = EXAMPLES_DIR / (name if name.endswith(".py") else name + ".py")
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


def server_command(name: str, *args: str, transport: str = "stdio") -> list[str]:
    """argv that starts an example server with this test run's Python."""
    return [sys.executable, str(example_script(name)), "--transport", transport, *args]


def server_env(state_dir: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {STATE_DIR_ENV: str(state_dir), **(extra or {})}


def stdio_params(name: str, *, state_dir: Path, args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> StdioServerParameters:
    """StdioServerParameters for `mcp.Client` (the SDK merges env over a safe default env)."""
    argv = server_command(name, *args)
    return StdioServerParameters(command=argv[0], args=argv[1:], env=server_env(state_dir, env), cwd=str(REPO_ROOT))


def free_port() -> int:
    """A loopback port free right now (prefer port 0 in `start_http_server`: no race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningServer:
    """An example server process listening on loopback HTTP."""

    process: subprocess.Popen[str]
    url: str
    state_dir: Path
    stderr_lines: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL and reap (a crash, not a shutdown)."""
        sigkill(self.process)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        terminate(self.process)


def spawn_http_server(name: str, *, state_dir: Path, args: Sequence[str] = (), port: int = 0,
                      json_response: bool = False, stateful: bool = False,
                      env: Mapping[str, str] | None = None, ready_timeout: float = 20.0) -> RunningServer:
    """Start an example server over HTTP and wait for its `listening on` line; caller stops it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    argv = server_command(name, "--host", "127.0.0.1", "--port", str(port), *args, transport="http")
    if json_response:
        argv.append("--json-response")
    if stateful:
        argv.append("--stateful")
    lines: list[str] = []
    process, url = spawn_listening(
        argv, cwd=REPO_ROOT, env={**os.environ, **server_env(state_dir, env)}, name=name, lines=lines,
        ready_timeout=ready_timeout,
    )
    if url is None:
        sigkill(process)
        raise RuntimeError(f"{name} did not start listening (exit {process.returncode}):\n" + "\n".join(lines))
    return RunningServer(process=process, url=url, state_dir=state_dir, stderr_lines=lines)


@contextmanager
def start_http_server(name: str, *, state_dir: Path, args: Sequence[str] = (), port: int = 0,
                      json_response: bool = False, stateful: bool = False,
                      env: Mapping[str, str] | None = None, ready_timeout: float = 20.0) -> Iterator[RunningServer]:
    """`spawn_http_server` that stops the process on exit."""
    server = spawn_http_server(name, state_dir=state_dir, args=args, port=port, json_response=json_response,
                               stateful=stateful, env=env, ready_timeout=ready_timeout)
    try:
        yield server
    finally:
        server.stop()


def read_executions(state_dir: Path, *, tool: str | None = None, key: str | None = None) -> list[dict[str, Any]]:
    """The servers' executions.jsonl records (tool, idempotency_key, arguments, pid, ...)."""
    path = state_dir / EXECUTIONS_FILE
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line of a killed writer
        if (tool is None or record.get("tool") == tool) and (key is None or record.get("idempotency_key") == key):
            records.append(record)
    return records


def count_executions(state_dir: Path, *, tool: str | None = None, key: str | None = None) -> int:
    return len(read_executions(state_dir, tool=tool, key=key))


def wait_for_executions(state_dir: Path, count: int, *, tool: str | None = None, key: str | None = None,
                        timeout: float = 10.0) -> list[dict[str, Any]]:
    """Wait until at least `count` matching executions are recorded (e.g. a hold_* call began)."""
    deadline = time.monotonic() + timeout
    while True:
        records = read_executions(state_dir, tool=tool, key=key)
        if len(records) >= count or time.monotonic() > deadline:
            if len(records) < count:
                raise TimeoutError(f"{len(records)} of {count} executions of {tool or 'any tool'} after {timeout} s")
            return records
        time.sleep(0.02)


def release_gate(state_dir: Path, gate: str) -> None:
    """Let dex_server's hold_payment / hold_memo calls waiting at `gate` answer."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", gate)  # as the server maps gate names to file names
    (state_dir / f"release-{safe}").touch()
