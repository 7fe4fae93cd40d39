"""Every CLI failure as a user meets it: a real `dex-agent` process, one line on stderr
(`dex-agent: …`), no traceback, a non-zero exit; setup failures before any turn starts."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_host.host_support import Stack, run_agent, start_stack
from tests.support.servers import free_port

AGENT_TOKEN = "agent-secret"


@pytest.fixture(scope="module")
def auth_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The gateway accepting only AGENT_TOKEN."""
    yield from start_stack(tmp_path_factory, agent_token=AGENT_TOKEN)


def _one_line_failure(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _no_turn_started(store: Path) -> None:
    assert not store.exists() or b"turn-1" not in store.read_bytes()


def test_approvals_port_without_an_approver_token(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    result = run_agent("--store", str(store), "run", "--gateway", "http://127.0.0.1:9/mcp",
                       "--approvals-port", str(free_port()), "hello")
    assert _one_line_failure(result, 2) == (
        "dex-agent: the approvals API needs an approver token: set $DEX_APPROVER_TOKEN or --approver-token-file PATH")
    _no_turn_started(store)


def test_approvals_port_with_the_agents_own_token_as_approver(tmp_path: Path) -> None:
    token_file = tmp_path / "approver"
    token_file.write_text(AGENT_TOKEN + "\n")
    result = run_agent("--store", str(tmp_path / "s.db"), "run", "--approvals-port", str(free_port()),
                       "--approver-token-file", str(token_file), "hello", env={"DEX_AGENT_TOKEN": AGENT_TOKEN})
    assert _one_line_failure(result, 2) == "dex-agent: the approver token must differ from the agent's own gateway token"


def test_approvals_port_on_a_busy_port_fails_before_the_turn(auth_stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_agent("--store", str(store), "run", "--gateway", auth_stack.gateway_url, "--approvals-port", str(port),
                           "hello", env={"DEX_APPROVER_TOKEN": "approver-secret", "DEX_AGENT_TOKEN": AGENT_TOKEN})
    assert _one_line_failure(result, 2) == f"dex-agent: cannot serve the approvals API on 127.0.0.1:{port}: Address already in use"
    assert result.stdout == ""
    _no_turn_started(store)


def test_approvals_list_when_the_api_is_down() -> None:
    port = free_port()
    result = run_agent("approvals", "list", "--url", f"http://127.0.0.1:{port}", env={"DEX_APPROVER_TOKEN": "approver-secret"})
    line = _one_line_failure(result, 1)
    assert line.startswith(f"dex-agent: cannot reach the approvals API at http://127.0.0.1:{port}/approvals: ConnectError")


def test_approvals_serve_on_a_busy_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_agent("approvals", "serve", "--store", str(tmp_path / "s.db"), "--port", str(port),
                           env={"DEX_APPROVER_TOKEN": "approver-secret"})
    assert _one_line_failure(result, 2) == f"dex-agent: cannot serve the approvals API on 127.0.0.1:{port}: Address already in use"


@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_wrong_gateway_token_ends_the_turn(auth_stack: Stack, tmp_path: Path, command: str) -> None:
    args = ["--store", str(tmp_path / "s.db"), command, "--gateway", auth_stack.gateway_url]
    if command == "run":
        result = run_agent(*args, "hello", env={"DEX_AGENT_TOKEN": "wrong"})
    else:  # chat ends at once: no later turn could reach the gateway's tools either
        result = run_agent(*args, env={"DEX_AGENT_TOKEN": "wrong"}, stdin_text="hello\nnever read\n")
    line = _one_line_failure(result, 1)
    assert line.startswith(f"dex-agent: turn turn-1 failed: the gateway at {auth_stack.gateway_url} refused the connection"
                           " with the agent's token (HTTP 401: ")
    assert line.endswith("set $DEX_AGENT_TOKEN or --token-file to a token the gateway accepts")
    assert "MCPError" not in line.split("(HTTP 401: ", 1)[0]
    assert "Demo reply" not in result.stdout  # the turn did not carry on without tools


def test_a_missing_gateway_token_says_so(auth_stack: Stack, tmp_path: Path) -> None:
    result = run_agent("--store", str(tmp_path / "s.db"), "run", "--gateway", auth_stack.gateway_url, "hello")
    assert "refused the connection without a token (HTTP 401" in _one_line_failure(result, 1)


def test_the_right_token_from_a_file_works(auth_stack: Stack, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(AGENT_TOKEN)
    result = run_agent("--store", str(tmp_path / "s.db"), "run", "--gateway", auth_stack.gateway_url,
                       "--token-file", str(token_file), "What is the balance of account acme?")
    assert result.returncode == 0, result.stderr
    assert "balance of acme" in result.stdout


def test_an_unreachable_gateway_offers_no_tools_and_warns(tmp_path: Path) -> None:
    """A down gateway never fails a turn (the seeds' rule): the model call gets no gateway tools
    and the user a warning."""
    result = run_agent("--store", str(tmp_path / "s.db"), "run", "--gateway", "http://127.0.0.1:9/mcp", "hello")
    assert result.returncode == 0, result.stderr
    assert "Demo reply: hello" in result.stdout
    assert ("the gateway's tools are not offered in this model call: cannot reach the gateway at "
            "http://127.0.0.1:9/mcp: ConnectError") in result.stderr


@pytest.mark.parametrize(("flag", "replacement"), [
    ("--token", "set $DEX_AGENT_TOKEN or use --token-file PATH"),
    ("--approver-token", "set $DEX_APPROVER_TOKEN or use --approver-token-file PATH"),
])
def test_secret_flags_are_refused(tmp_path: Path, flag: str, replacement: str) -> None:
    result = run_agent("--store", str(tmp_path / "s.db"), "run", flag, "s3cret", "hello")
    assert _one_line_failure(result, 2) == (
        f"dex-agent: {flag} was removed: a secret on the command line is visible in ps; {replacement}")


def test_an_unreadable_token_file(tmp_path: Path) -> None:
    result = run_agent("--store", str(tmp_path / "s.db"), "run", "--token-file", str(tmp_path / "nope"), "hello")
    assert _one_line_failure(result, 2) == f"dex-agent: cannot read the token file {tmp_path / 'nope'}: FileNotFoundError"

