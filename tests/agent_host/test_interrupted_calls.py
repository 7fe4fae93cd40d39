"""The re-issue rules against the real SDK client, a real gateway and real `dex-agent` processes.

A TCP proxy (`cutting_proxy`) sits between the host and the gateway: it lets each tools/call
reach the gateway, waits until the gateway's answer is complete (the call ran), and cuts the
connection before the host reads a byte of it. Executions are counted by the upstream
(`count_executions`), requests by the proxy, attempts by the host's store.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent_host.cutting_proxy import CuttingProxy, ThreadedCuttingProxy
from tests.agent_host.host_support import Proc, Stack, dex_agent, start_stack
from tests.support.servers import count_executions, read_executions, release_gate

SCRIPTS = "scripted:tests.agent_host.scripts:"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory)


@pytest.fixture
def cutting(stack: Stack) -> Iterator[CuttingProxy]:
    with ThreadedCuttingProxy("127.0.0.1", stack.gateway_port).running() as proxy:
        yield proxy


@pytest.fixture
def counting(stack: Stack) -> Iterator[CuttingProxy]:
    """The same proxy cutting nothing: it only counts the tools/call requests that went through."""
    with ThreadedCuttingProxy("127.0.0.1", stack.gateway_port, cut_limit=0).running() as proxy:
        yield proxy


def _show(store: Path, session: str) -> dict[str, Any]:
    proc = dex_agent("--store", str(store), "sessions", "show", session, "--json")
    assert proc.finish() == 0, proc.output
    return json.loads(proc.output)


def _executions(stack: Stack, tool: str, session: str) -> int:
    """Upstream executions of `tool` for this session's calls (reads carry the key too)."""
    return sum(1 for e in read_executions(stack.state_dir, tool=tool) if (e.get("idempotency_key") or "").startswith(f"{session}/"))


def test_cut_connections_follow_the_rules_by_effect(stack: Stack, cutting: CuttingProxy, tmp_path: Path) -> None:
    store = tmp_path / "cut.db"
    started = time.monotonic()
    proc = dex_agent("--store", str(store), "run", "--gateway", cutting.url(), "--session", "s-cut",
                     "--model", SCRIPTS + "cut_effects", "--call-timeout", "10", "go")
    assert proc.finish(timeout=60) == 0, proc.output
    elapsed = time.monotonic() - started

    shown = _show(store, "s-cut")
    calls = {c["name"].split("__")[1]: c for c in shown["tool_calls"]}
    figures = {tool: (calls[tool]["attempts"], _executions(stack, tool, "s-cut"), calls[tool]["status"])
               for tool in ("get_balance", "set_memo", "send_payment")}
    # (attempts by the host, executions upstream, recorded status)
    assert figures == {
        "get_balance": (3, 3, "failed"),            # a read: 3 attempts, each ran (reads are not fenced)
        "set_memo": (3, 1, "outcome_unknown"),      # idempotent: 3 attempts, the gateway's fence ran it once
        "send_payment": (1, 1, "outcome_unknown"),  # non-idempotent: exactly one attempt, interrupted
    }, proc.output
    assert cutting.calls_seen == cutting.cuts == 7
    assert all(c["idempotency_key"] == f"s-cut/turn-1/{c['id']}" for c in shown["tool_calls"])

    # The model's view of the interrupted write: outcome unknown, may have happened, do not repeat.
    answer = shown["turns"][0]["final_text"]
    seen_payment = answer.split("payments__send_payment=", 1)[1]
    assert seen_payment.startswith("The outcome of this call is unknown")
    assert "the write may have taken effect" in seen_payment
    assert "Do not repeat this call unless the user asks you to" in seen_payment
    assert "interrupted after it was sent" in seen_payment
    assert "outcome unknown" in proc.output  # and the terminal says so too
    assert elapsed < 30, elapsed  # no re-run loop: a handful of attempts, then the answer


def _wait_calls(proxy: CuttingProxy, count: int, proc: Proc, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while proxy.calls_seen < count:
        assert time.monotonic() < deadline, f"{proxy.calls_seen} of {count} calls:\n{proc.output}"
        time.sleep(0.02)
    time.sleep(0.2)  # the gateway has the request: the upstream call is held at its gate


def _kill_while_out(stack: Stack, proxy: CuttingProxy, store: Path, session: str, script: str, gate: str,
                    kills: int) -> dict[str, Any]:
    """Run the script's turn; SIGKILL the host `kills` times, each time once its latest request
    reached the gateway (held upstream at `gate`); let the last run finish. The call's record."""
    proc = dex_agent("--store", str(store), "run", "--gateway", proxy.url(), "--session", session,
                     "--model", SCRIPTS + script, "go")
    for sent in range(1, kills + 1):
        _wait_calls(proxy, sent, proc)
        proc.sigkill()
        proc = dex_agent("--store", str(store), "resume", "--gateway", proxy.url(), "--session", session,
                         "--model", SCRIPTS + script)
    try:
        assert proc.finish(timeout=30) == 0, proc.output
    finally:
        release_gate(stack.state_dir, gate)
    [record] = _show(store, session)["tool_calls"]
    return record


def test_a_killed_host_sends_a_single_attempt_write_at_most_once_more(
    stack: Stack, counting: CuttingProxy, tmp_path: Path
) -> None:
    """SIGKILL while the write is out, twice: the first restart sends one same-key recovery (the
    gateway's fence holds it: the first is still running), the second sends nothing."""
    key = "s-kill-twice/turn-1/call_1_0"
    record = _kill_while_out(stack, counting, tmp_path / "k.db", "s-kill-twice", "hold", "kill-gate", kills=2)
    assert (record["idempotency_key"], record["attempts"], record["status"]) == (key, 2, "outcome_unknown")
    assert counting.calls_seen == 2  # the third run sent nothing
    assert count_executions(stack.state_dir, tool="hold_payment", key=key) == 1
    assert "may have taken effect" in record["result_text"]


def test_attempts_of_an_idempotent_write_count_across_restarts(
    stack: Stack, counting: CuttingProxy, tmp_path: Path
) -> None:
    """Three runs each killed while the same idempotent write is out: the fourth sends nothing."""
    key = "s-memo-restarts/turn-1/call_1_0"
    record = _kill_while_out(stack, counting, tmp_path / "m.db", "s-memo-restarts", "hold_memo", "memo-gate", kills=3)
    assert (record["attempts"], record["status"]) == (3, "outcome_unknown")
    assert counting.calls_seen == 3
    assert count_executions(stack.state_dir, tool="hold_memo", key=key) == 1
