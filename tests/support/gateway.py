"""Start `dex-gateway serve` as a real process, and build its config.

    cfg = write_config(tmp_path, {"upstreams": [stdio_upstream("pay", "dex_server", state_dir=s)]})
    with start_gateway(cfg) as gw:
        ... gw.url ...          # http://127.0.0.1:<port>/mcp
        gw.kill(); gw.restart()

`gw.base` is the URL without the path (for /healthz, /readyz).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.processes import spawn_listening
from tests.support.servers import REPO_ROOT, STATE_DIR_ENV, example_script, free_port

GATEWAY_BIN = Path(sys.executable).parent / "dex-gateway"


def gateway_argv(*args: str) -> list[str]:
    """argv of the `dex-gateway` console script of this venv (falls back to `-m gateway.cli.main`)."""
    if GATEWAY_BIN.exists():
        return [str(GATEWAY_BIN), *args]
    return [sys.executable, "-m", "gateway.cli.main", *args]


def stdio_upstream(name: str, server: str, *, state_dir: Path, args: Sequence[str] = (),
                   **options: Any) -> dict[str, Any]:
    """A `transport: stdio` upstream entry running an example server with this Python."""
    return {
        "name": name,
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(example_script(server)), "--transport", "stdio", *args],
        "env": {STATE_DIR_ENV: str(state_dir)},
        "cwd": str(REPO_ROOT),
        **options,
    }


def http_upstream(name: str, url: str, **options: Any) -> dict[str, Any]:
    return {"name": name, "transport": "streamable_http", "url": url, **options}


def write_config(directory: Path, config: Mapping[str, Any], *, name: str = "gateway.yaml") -> Path:
    """Write `config` as YAML; a SQLite fence store in `directory` unless the config names one."""
    directory.mkdir(parents=True, exist_ok=True)
    data = dict(config)
    data.setdefault("fences", {"store": f"sqlite:///{directory / 'fences.db'}"})
    path = directory / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass
class RunningGateway:
    config_path: Path
    port: int
    env: dict[str, str]
    process: subprocess.Popen[str] | None = None
    url: str = ""
    stderr_lines: list[str] = field(default_factory=list)
    # argv put before the gateway's own, e.g. ("prlimit", "--nofile=1024:1024") (it must exec it).
    prefix: tuple[str, ...] = ()

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]

    @property
    def log(self) -> str:
        return "\n".join(self.stderr_lines)

    def log_mark(self) -> int:
        """A position in the log: `wait_for_log(..., since=mark)` looks only at later lines."""
        return len(self.stderr_lines)

    def wait_for_log(self, pattern: str, *, since: int = 0, timeout: float = 10.0) -> re.Match[str]:
        """The first log line (from line `since` on) matching the regex `pattern`, waiting for it."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            for line in self.stderr_lines[since:]:
                if match := regex.search(line):
                    return match
            if time.monotonic() > deadline:
                raise AssertionError(f"no log line matching {pattern!r} within {timeout} s:\n" + self.log)
            time.sleep(0.02)

    def start(self, ready_timeout: float = 30.0) -> None:
        argv = [*self.prefix, *gateway_argv("serve", "--config", str(self.config_path), "--port", str(self.port))]
        process, url = spawn_listening(
            argv, cwd=REPO_ROOT, env=self.env, name="gateway", lines=self.stderr_lines,
            ready_timeout=ready_timeout, new_session=True,
        )
        self.process = process
        if url is None:
            self.kill()
            raise RuntimeError(f"dex-gateway did not start (exit {process.returncode}):\n" + self.log)
        self.url = url
        # Keep the same port across restarts (same replica id, clients keep their URL).
        self.port = int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    def kill(self) -> None:
        """SIGKILL the gateway and every child of its process group (stdio upstreams)."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL (the whole process group) if it lingers."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        # Stdio children left behind by a gateway that did not clean up.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if process.poll() is None:
            process.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()


@contextmanager
def start_gateway(config_path: Path, *, port: int = 0, env: Mapping[str, str] | None = None,
                  ready_timeout: float = 30.0, prefix: Sequence[str] = ()) -> Iterator[RunningGateway]:
    """Run `dex-gateway serve --config config_path --port port` until the block ends (`prefix`: argv
    that execs it, such as `prlimit --nofile=1024:1024`)."""
    gateway = RunningGateway(config_path=config_path, port=port, env={**os.environ, **(env or {})},
                             prefix=tuple(prefix))
    gateway.start(ready_timeout)
    try:
        yield gateway
    finally:
        gateway.stop()


@contextmanager
def start_oauth_gateway(root: Path, issuer: str, config: Mapping[str, Any], *, oauth: Mapping[str, Any] | None = None,
                        env: Mapping[str, str] | None = None) -> Iterator[tuple[RunningGateway, str]]:
    """A gateway on a free loopback port whose `auth.oauth` trusts `issuer`, with its own `/mcp` URL
    as the audience and scope `mcp` required (`oauth`: more or other keys); `config`: the rest,
    `auth.tokens` included. Yields the gateway and its resource URL."""
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    settings = {"resource": resource, "issuers": [{"issuer": issuer}], "required_scopes": ["mcp"], **(oauth or {})}
    data = {**config, "auth": {**config.get("auth", {}), "oauth": settings}}
    with start_gateway(write_config(root, data), port=port, env=env) as gateway:
        yield gateway, resource


def run_gateway_cli(*args: str, env: Mapping[str, str] | None = None,
                    timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run `dex-gateway <args>` to completion (config errors, `tools --json`)."""
    return subprocess.run(gateway_argv(*args), cwd=REPO_ROOT, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
