"""`dex-agent` in-process: exit codes, sessions list/show, the scripted demo without a gateway."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_host.cli import main

DOWN = "http://127.0.0.1:9/mcp"  # nothing listens: the host offers no gateway tools


def test_run_exits_non_zero_when_the_turn_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s.db")
    code = main(["--store", store, "run", "--gateway", DOWN, "--session", "s-fail", "--max-model-calls", "2",
                 "--model", "scripted:tests.agent_host.scripts:always_tools", "plan forever"])
    out = capsys.readouterr().out
    assert code == 1
    assert "turn turn-1 failed: The tool call was not run: this turn reached its limit of 2 model calls." in out


def test_run_answers_and_sessions_show_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "s.db")
    assert main(["--store", store, "run", "--gateway", DOWN, "--session", "s-ok", "hello there"]) == 0
    assert "assistant> Demo reply: hello there" in capsys.readouterr().out
    assert main(["--store", store, "sessions", "list"]) == 0
    assert "s-ok" in capsys.readouterr().out
    assert main(["--store", store, "sessions", "show", "s-ok"]) == 0
    shown = capsys.readouterr().out
    assert "turn-1 [completed]" in shown and "answer: Demo reply: hello there" in shown


def test_unknown_model_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["--store", str(tmp_path / "s.db"), "run", "--model", "gpt", "x"]) == 2
