"""`dex-agent chat` on a real terminal (tmux): no typed line is lost after an approval was decided
elsewhere (the HTTP API, the deadline) while the prompt was open, the card shows the time left,
and Ctrl-C at the idle prompt ends the host at once."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.agent_host.host_support import REPO_ROOT, Stack
from tests.support.servers import free_port

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

APPROVER = "approver-secret"
SCRIPT = "scripted:tests.agent_host.scripts:refund_then_echo"


class Pane:
    """One tmux session on a private server socket (never the user's own tmux server)."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.socket = f"dex-agent-test-{os.getpid()}-{time.monotonic_ns()}"
        self.name = "chat"
        shell = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        script = f"cd {shlex.quote(str(REPO_ROOT))} && env {shell} {shlex.join(command)}; echo EXIT=$?; sleep 120"
        self._tmux("new-session", "-d", "-s", self.name, "-x", "200", "-y", "60", script)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True).stdout

    def text(self) -> str:
        return self._tmux("capture-pane", "-p", "-J", "-t", self.name, "-S", "-500")

    def type(self, line: str) -> None:
        self._tmux("send-keys", "-t", self.name, "-l", line)
        self._tmux("send-keys", "-t", self.name, "Enter")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def wait_for(self, needle: str, count: int = 1, timeout: float = 30.0) -> float:
        deadline = time.monotonic() + timeout
        while self.text().count(needle) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} x{count} not on screen within {timeout} s:\n{self.text()}")
            time.sleep(0.05)
        return time.monotonic()

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


@pytest.fixture
def chat(stack: Stack, tmp_path: Path) -> Iterator[tuple[Pane, str]]:
    port = free_port()
    command = [sys.executable, "-m", "agent_host.cli", "--store", str(tmp_path / "chat.db"), "chat",
               "--gateway", stack.gateway_url, "--session", "s-tmux", "--model", SCRIPT,
               "--approvals-port", str(port), "--approval-timeout", "8"]
    pane = Pane(command, {"DEX_APPROVER_TOKEN": APPROVER, "PYTHONPATH": str(REPO_ROOT)})
    try:
        yield pane, f"http://127.0.0.1:{port}/approvals"
    finally:
        pane.close()


def _pending(api: str) -> list[dict[str, object]]:
    answer = httpx.get(api, headers={"Authorization": f"Bearer {APPROVER}"}, timeout=10)
    answer.raise_for_status()
    return answer.json()["approvals"]


def test_no_input_is_lost_after_an_api_or_deadline_decision(chat: tuple[Pane, str]) -> None:
    pane, api = chat
    pane.wait_for("you> ")

    # 1. Decided through the HTTP API while the Allow/Deny prompt is open.
    pane.type("refund please")
    pane.wait_for("Allow or Deny? [a/d]")
    assert "left to decide" in pane.text()
    [card] = _pending(api)
    decided = httpx.post(f"{api}/{card['id']}", json={"decision": "allow"},
                         headers={"Authorization": f"Bearer {APPROVER}"}, timeout=10)
    assert decided.status_code == 200 and decided.json()["replayed"] is False
    pane.wait_for("allowed by http")
    pane.wait_for("you> ", count=2)
    pane.type("after the api")
    pane.wait_for("assistant> ECHO: after the api")

    # 2. Decided by the deadline while the prompt is open. (A line typed while a turn runs
    # steers it, so wait for the prompt.)
    pane.wait_for("you> ", count=3)
    pane.type("refund again")
    pane.wait_for("Allow or Deny? [a/d]", count=2)
    pane.wait_for("expired by deadline", timeout=20)
    pane.wait_for("you> ", count=4)
    pane.type("after the deadline")
    pane.wait_for("assistant> ECHO: after the deadline")

    # 3. Ctrl-C at the idle prompt: the host ends at once, with 130.
    pane.wait_for("you> ", count=5)
    pressed = time.monotonic()
    pane.keys("C-c")
    ended = pane.wait_for("EXIT=130", timeout=10)
    assert ended - pressed < 3.0, ended - pressed
    assert "Traceback" not in pane.text()


def test_a_typed_line_steers_the_running_turn_and_ctrl_c_cancels_it(stack: Stack, tmp_path: Path) -> None:
    """While a turn runs, a line typed steers it (its wait is cancelled, the next model call sees
    the line); Ctrl-C cancels the running turn and the host stays; Ctrl-C at the prompt ends it."""
    command = [sys.executable, "-m", "agent_host.cli", "--store", str(tmp_path / "steer.db"), "chat",
               "--gateway", stack.gateway_url, "--session", "s-steer", "--model",
               "scripted:tests.agent_host.scripts:wait_then_follow_steering"]
    pane = Pane(command, {"PYTHONPATH": str(REPO_ROOT)})
    try:
        pane.wait_for("you> ")
        pane.type("deploy to production")
        pane.wait_for("durable_wait(duration_seconds: 600")
        pane.type("use staging instead")
        pane.wait_for(">> steering the turn: use staging instead")
        pane.wait_for("assistant> STEERED: use staging instead")
        pane.wait_for("durable_wait: rejected (steered)")
        pane.wait_for("you> ", count=2)

        pane.type("deploy again")
        pane.wait_for("durable_wait(duration_seconds: 600", count=2)
        pane.keys("C-c")
        pane.wait_for("turn turn-2 cancelled: cancelled by the user (terminal): Ctrl-C")
        pane.wait_for("you> ", count=3)
        assert "EXIT=" not in pane.text()  # the host is still there

        pane.keys("C-c")
        pane.wait_for("EXIT=130", timeout=10)
        assert "Traceback" not in pane.text()
    finally:
        pane.close()
