"""The host speaks 2026-07-28 to the gateway (issue 24, left item (2)): an upstream's question that
comes back as an `input_required` result becomes the same session question as a handshake-era
`elicitation/create`, and the user's answer, decline or deadline goes back as the next round of the
same request (the gateway's `requestState`, the same idempotency key). So a **stateless** gateway
carries questions to the host too (docs/agent-host.md "Protocol era").

Real processes: an ordinary SDK server whose tool asks with `ctx.elicit` (tests/support/asking_server.py,
its write counted in executions.jsonl) and server-everything's elicitation tool, behind a real
`dex-gateway serve`, and `dex-agent run` with the scripted model, answered over the host's API.
The asking server is set to `protocol: handshake` on the gateway: its tool asks on its session,
which a 2026-07-28 caller reaches only through the gateway's parking (docs/interop.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agent_host.gateway_client.connection import GatewayConnection, GatewayUnavailable
from tests.agent_host.host_support import Proc, dex_agent
from tests.agent_host.test_upstream_questions import SCRIPT, answered_run
from tests.support.everything import everything_http, everything_stdio, require_everything
from tests.support.gateway import http_upstream, start_gateway, write_config
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT, STATE_DIR_ENV, free_port, read_executions, start_http_server

pytestmark = pytest.mark.timeout(120)

ASKING = REPO_ROOT / "tests" / "support" / "asking_server.py"
ENV = {"DEX_APPROVER_TOKEN": "approver-secret"}


@contextmanager
def asking_server(state: Path) -> Iterator[str]:
    lines: list[str] = []
    argv = [sys.executable, str(ASKING), "--transport", "http", "--stateful", "--port", "0"]
    process, url = spawn_listening(argv, cwd=REPO_ROOT, env={**os.environ, STATE_DIR_ENV: str(state)}, name="asking",
                                   lines=lines, ready_timeout=30)
    assert url is not None, "the asking server did not start:\n" + "\n".join(lines)
    try:
        yield url
    finally:
        terminate(process)


def _sign_up(tmp_path: Path, *, stateful: bool, protocol: str, decide: dict[str, object]) -> tuple[Proc, list[dict[str, object]]]:
    """`dex-agent run` calls the asking server's sign_up through the gateway; its question is
    decided over the host API with `decide`; the run's output and the upstream's executions."""
    def check(question: dict[str, Any]) -> None:
        assert question["kind"] == "elicitation" and question["question"] == "Your name, to sign you up?", question
        assert [(f["name"], f["type"], f["required"]) for f in question["fields"]] == [("name", "string", True)]

    state = tmp_path / "upstream"
    with asking_server(state) as url:
        upstream = http_upstream("ask", url, protocol="handshake")
        config = write_config(tmp_path, {"server": {"stateful": stateful}, "upstreams": [upstream]})
        with start_gateway(config) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            proc = answered_run(tmp_path / "s.db", gateway.url, "sign_up", decide, "--protocol", protocol, check=check)
    return proc, read_executions(state, tool="sign_up")


@pytest.mark.parametrize(("stateful", "protocol"), [(False, "auto"), (True, "2026-07-28")], ids=["stateless-auto", "stateful-2026"])
def test_an_input_required_question_is_answered_as_the_next_round(tmp_path: Path, stateful: bool, protocol: str) -> None:
    proc, executions = _sign_up(tmp_path, stateful=stateful, protocol=protocol, decide={"content": {"name": "Ada"}})
    assert "RESULTS ask__sign_up=signed up Ada" in proc.output, proc.output
    # The write ran once, under the call's own idempotency key (kept across the rounds).
    assert len(executions) == 1, executions
    key = executions[0]["idempotency_key"]
    assert isinstance(key, str) and key, executions


def test_a_declined_input_required_question_is_sent_as_a_decline(tmp_path: Path) -> None:
    proc, executions = _sign_up(tmp_path, stateful=False, protocol="2026-07-28", decide={"decline": True})
    assert "RESULTS ask__sign_up=not signed up (decline)" in proc.output, proc.output
    assert executions == []


@pytest.mark.slow
def test_a_question_past_its_deadline_is_sent_as_a_cancel(tmp_path: Path) -> None:
    state = tmp_path / "upstream"
    with asking_server(state) as url:
        config = write_config(tmp_path, {"upstreams": [http_upstream("ask", url, protocol="handshake")]})
        with start_gateway(config) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            # Nobody answers: the terminal leaves the question to the API (--approvals-port), and the
            # API is not called before the deadline.
            proc = dex_agent("--store", str(tmp_path / "s.db"), "run", "--gateway", gateway.url, "--model", SCRIPT,
                             "--yes", "--approval-timeout", "1", "--approvals-port", str(free_port()), "sign_up", env=ENV)
            try:
                assert proc.finish() == 0, proc.output
            finally:
                proc.stop()
    assert "RESULTS ask__sign_up=not signed up (cancel)" in proc.output, proc.output
    assert read_executions(state, tool="sign_up") == []


def test_server_everything_asks_through_a_stateless_gateway(tmp_path: Path) -> None:
    """server-everything (handshake only) asks with `elicitation/create`; a stateless gateway parks
    the call and hands the host `input_required`; the answer over the API reaches the tool."""
    node = require_everything()
    config = write_config(tmp_path, {"upstreams": [everything_stdio(node=node)]})
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready", timeout=30)
        proc = answered_run(tmp_path / "s.db", gateway.url, "trigger-elicitation-request", {"content": {"name": "Ada"}})
    assert "- Name: Ada" in proc.output.split("RESULTS", 1)[1], proc.output


@pytest.mark.slow
def test_a_handshake_only_host_gets_no_question_through_a_stateless_gateway(tmp_path: Path) -> None:
    """The other side of the choice: `--protocol 2025-11-25` on a stateless gateway has no session
    to be asked on, so the tool is told the client can answer nothing, and the call fails at once
    (no question, no write)."""
    state = tmp_path / "upstream"
    with asking_server(state) as url:
        config = write_config(tmp_path, {"upstreams": [http_upstream("ask", url, protocol="handshake")]})
        with start_gateway(config) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            proc = dex_agent("--store", str(tmp_path / "s.db"), "run", "--gateway", gateway.url, "--protocol", "2025-11-25",
                             "--model", SCRIPT, "--yes", "sign_up", env=ENV)
            try:
                assert proc.finish() == 0, proc.output
            finally:
                proc.stop()
    results = proc.output.split("RESULTS", 1)[1]
    assert "signed up" not in results.replace("not signed up", ""), proc.output
    assert read_executions(state, tool="sign_up") == []


def test_tasks_on_2026_07_28_through_a_stateless_gateway(tmp_path: Path) -> None:
    """examples/servers/tasks_server.py (2026-07-28). `research` needs a task: the host declares the
    tasks extension on its call and polls the gateway's task to its report (modern_tasks.py).
    `confirm_delete` may be a task (`optional`) and its upstream task asks: the host calls it
    plainly, the gateway follows the upstream task and carries its question to the host as an
    `input_required` round of the plain call (docs/tasks.md "Input"); the answer, given over the
    host API, reaches the task, which deletes, once."""
    with start_http_server("tasks_server", state_dir=tmp_path / "t") as upstream:
        config = write_config(tmp_path, {"upstreams": [http_upstream("t", upstream.url, protocol="2026-07-28")]})
        with start_gateway(config) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            proc = dex_agent("--store", str(tmp_path / "s0.db"), "run", "--gateway", gateway.url, "--model", SCRIPT,
                             "--yes", 'research {"topic": "owls", "seconds": 1}', env=ENV)
            try:
                assert proc.finish() == 0, proc.output
            finally:
                proc.stop()
            research = proc.output

            def check(question: dict[str, Any]) -> None:
                assert question["kind"] == "elicitation" and question["question"] == "Delete a.txt?", question

            confirm = answered_run(tmp_path / "s1.db", gateway.url, 'confirm_delete {"filename": "a.txt"}',
                                   {"content": {"confirm": True}}, check=check).output
    assert "RESULTS t__research=Research report on owls: done in 4 stages." in research, research
    assert ".. t__research 1: research on owls: " in research, research  # a status message of the polled task
    assert "RESULTS t__confirm_delete=deleted a.txt" in confirm, confirm
    assert len(read_executions(tmp_path / "t", tool="confirm_delete")) == 1


@pytest.mark.anyio
async def test_a_server_without_2026_07_28_is_refused_clearly_and_auto_falls_back() -> None:
    """server-everything over HTTP speaks only the handshake era (and opens sessions): pinned to
    2026-07-28 the host refuses it in one line naming the choices; `auto` lists its tools on the
    handshake era."""
    node = require_everything()
    with everything_http(node) as url:
        with pytest.raises(GatewayUnavailable) as refused:
            async with GatewayConnection(url, None, protocol="2026-07-28", connect_attempts=1).session():
                pass
        assert "does not offer protocol 2026-07-28 (it answered 2025-11-25); use --protocol auto or 2025-11-25" in str(refused.value)
        connection = GatewayConnection(url, None)
        async with connection.session() as client:
            assert any(tool.name == "echo" for tool in (await client.list_tools()).tools)
        assert connection.era == "2025-11-25"
