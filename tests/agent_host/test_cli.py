"""`dex-agent` in-process against the real gateway: exit codes, sessions, the session's model,
calls refused before running and upstream progress on screen."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_host.cli.main import main
from tests.agent_host.host_support import Stack

SCRIPTS = "scripted:tests.agent_host.scripts:"


def test_run_exits_non_zero_when_the_turn_failed(stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s.db")
    code = main(["--store", store, "run", "--gateway", stack.gateway_url, "--session", "s-fail", "--max-model-calls", "2",
                 "--model", SCRIPTS + "always_tools", "plan forever"])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.err.strip().splitlines()[-1] == (
        "dex-agent: turn turn-1 failed: The tool call was not run: this turn reached its limit of 2 model calls.")
    # The refused call of the last model call is on screen too.
    assert "x  write_todos(todos: []): not run: The tool call was not run: this turn reached its limit" in captured.out


def test_run_answers_and_sessions_show_it(stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s.db")
    assert main(["--store", store, "run", "--gateway", stack.gateway_url, "--session", "s-ok", "hello there"]) == 0
    assert "assistant> Demo reply: hello there" in capsys.readouterr().out
    assert main(["--store", store, "sessions", "list"]) == 0
    assert "s-ok" in capsys.readouterr().out
    assert main(["--store", store, "sessions", "show", "s-ok"]) == 0
    shown = capsys.readouterr().out
    assert "turn-1 [completed]" in shown and "answer: Demo reply: hello there" in shown


def test_continuing_a_session_without_model_uses_the_sessions_model(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s.db")
    echo = SCRIPTS + "refund_then_echo"
    assert main(["--store", store, "run", "--gateway", stack.gateway_url, "--session", "s-model", "--model", echo, "one"]) == 0
    assert "assistant> ECHO: one" in capsys.readouterr().out
    assert main(["--store", store, "run", "--gateway", stack.gateway_url, "--session", "s-model", "two"]) == 0
    out = capsys.readouterr().out
    assert f"session s-model · model {echo}" in out
    assert "assistant> ECHO: two" in out and "Demo reply" not in out


def test_refused_calls_and_upstream_progress_are_shown(stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s.db")
    assert main(["--store", store, "run", "--gateway", stack.gateway_url, "--session", "s-screen",
                 "--model", SCRIPTS + "refused_and_progress", "show me"]) == 0
    out = capsys.readouterr().out
    assert "x  no_such_tool(x: 1): failed: The tool call failed: unknown tool no_such_tool" in out
    assert "x  payments__get_balance(account: 5): failed: The tool call was not run: invalid payments__get_balance arguments" in out
    for step in (1, 2, 3):
        assert f".. payments__long_report {step}/3: section {step} of 3" in out
    assert "<- payments__long_report: ok: report with 3 sections" in out


def test_unknown_model_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--store", str(tmp_path / "s.db"), "run", "--model", "gpt", "x"]) == 2
    assert capsys.readouterr().err == "dex-agent: unknown model 'gpt': use scripted, scripted:module:function or openai:<model>\n"
