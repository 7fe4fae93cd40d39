"""Real processes for the host's tests: the payments example server, the gateway in front of
it, and `dex-agent` itself."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.processes import LISTENING, sigkill, terminate
from tests.support.servers import RunningServer, start_http_server

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Proc:
    """A child process whose output is collected by a thread (so it never blocks on a pipe)."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match := regex.search(line):
                    return match
            if self.process.poll() is not None and not any(regex.search(l) for l in self.lines):
                time.sleep(0.1)  # let the reader thread catch up once more
                for line in list(self.lines):
                    if match := regex.search(line):
                        return match
                raise AssertionError(f"process exited ({self.process.returncode}) before {pattern!r}:\n{self.output}")
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {pattern!r}:\n{self.output}")

    def finish(self, timeout: float = 30.0) -> int:
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"process did not finish in {timeout} s:\n{self.output}")
        time.sleep(0.05)
        return self.process.returncode

    def sigkill(self) -> None:
        sigkill(self.process)

    def stop(self) -> None:
        terminate(self.process)


SECRET_ENVS = ("DEX_AGENT_TOKEN", "DEX_APPROVER_TOKEN", "DEX_AGENT_CLIENT_SECRET", "DEX_AGENT_CLIENT_ID",
               "DEX_AGENT_ISSUER", "DEX_AGENT_TOKEN_ENDPOINT")


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without the host's secrets (tests set them explicitly)."""
    base = {k: v for k, v in os.environ.items() if k not in SECRET_ENVS}
    return {**base, "PYTHONPATH": str(REPO_ROOT), **(env or {})}


def spawn(argv: list[str], env: dict[str, str] | None = None, stdin_text: str | None = None) -> Proc:
    process = subprocess.Popen(
        argv, cwd=REPO_ROOT, env=child_env(env),
        stdin=subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
    )
    proc = Proc(process)
    if stdin_text is not None:
        assert process.stdin is not None
        process.stdin.write(stdin_text)
        process.stdin.close()

    def drain() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            proc.lines.append(line.rstrip("\n"))

    threading.Thread(target=drain, daemon=True).start()
    return proc


@dataclass
class Stack:
    payments: RunningServer
    gateway_url: str
    state_dir: Path

    @property
    def gateway_port(self) -> int:
        return int(self.gateway_url.rsplit(":", 1)[1].split("/", 1)[0])


def start_stack(tmp_path_factory: pytest.TempPathFactory, agent_token: str | None = None) -> Iterator[Stack]:
    """The gateway (real process) fronting the payments example server (real process); with
    `agent_token`, the gateway accepts only that bearer token."""
    base = tmp_path_factory.mktemp("stack")
    state = base / "payments"
    with start_http_server("dex_server", state_dir=state, env={"DEX_EXAMPLE_PENDING_WAIT_S": "20"}) as payments:
        config = base / "gateway.yaml"
        auth = ""
        if agent_token is not None:
            digest = hashlib.sha256(agent_token.encode()).hexdigest()
            auth = f"auth: {{tokens: [{{principal: agent, token_sha256: \"{digest}\"}}]}}\n"
        config.write_text(
            "server: {host: 127.0.0.1, port: 0}\n"
            + auth
            + f"upstreams: [{{name: payments, transport: streamable_http, url: \"{payments.url}\"}}]\n"
            f"fences: {{store: \"sqlite:///{base / 'gw.db'}\"}}\n"
        )
        gateway = spawn([sys.executable, "-m", "gateway.cli.main", "serve", "--config", str(config), "--port", "0"])
        try:
            url = gateway.wait_for(LISTENING.pattern).group(1)
            gateway.wait_for(r"catalog ready|listening on")
            yield Stack(payments=payments, gateway_url=url, state_dir=state)
        finally:
            gateway.stop()


def dex_agent(*args: str, stdin_text: str | None = None, env: dict[str, str] | None = None) -> Proc:
    return spawn([sys.executable, "-m", "agent_host.cli", *args], env=env, stdin_text=stdin_text)


def run_agent(*args: str, env: dict[str, str] | None = None, stdin_text: str | None = None,
              timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """`dex-agent <args>` to completion, stdout and stderr apart (for one-line failure checks)."""
    return subprocess.run(
        [sys.executable, "-m", "agent_host.cli", *args], cwd=REPO_ROOT, env=child_env(env), input=stdin_text,
        stdin=None if stdin_text is not None else subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout,
    )
