"""`dex-agent run` with the features of issue 15, as a real process against the real gateway:
plan mode approved on the terminal, a spend limit, the continuation hook, usage at the end of a
turn, and per-session settings kept for the next run."""

from __future__ import annotations

import json
from pathlib import Path

from tests.agent_host.host_support import Stack, run_agent

SCRIPTS = "scripted:tests.agent_host.scripts:"


def _show(store: Path, session: str) -> dict:
    shown = run_agent("--store", str(store), "sessions", "show", session, "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)


def test_run_plan_shows_the_draft_and_executes_it_once_approved(stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "plan.db"
    done = run_agent("--store", str(store), "run", "--gateway", stack.gateway_url, "--session", "s-plan",
                     "--model", SCRIPTS + "plan_then_execute", "--plan", "report the balance of acme", stdin_text="y\n")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "plan revision 1 (draft):" in out and "1. [pending] read the balance of acme" in out
    assert "Execute plan revision 1? [y/n]" in out
    assert "executing plan revision 1 (approved by terminal)" in out
    assert "EXECUTED: " in out and "plan revision 2" in out and "[completed] report it" in out
    shown = _show(store, "s-plan")
    assert [t["mode"] for t in shown["turns"]] == ["planning", "executing"]
    assert shown["session"]["plan_status"] == "completed"


def test_run_plan_declined_keeps_the_draft(stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "plan.db"
    done = run_agent("--store", str(store), "run", "--gateway", stack.gateway_url, "--session", "s-plan-no",
                     "--model", SCRIPTS + "plan_then_execute", "--plan", "report it", stdin_text="n\n")
    assert done.returncode == 0, done.stderr
    assert "plan revision 1 stays a draft" in done.stdout
    assert _show(store, "s-plan-no")["session"]["plan_status"] == "draft"


def test_a_spend_limit_stops_the_turn_and_settings_stay_with_the_session(stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "spend.db"
    args = ["--store", str(store), "run", "--gateway", stack.gateway_url, "--session", "s-spend"]
    first = run_agent(*args, "--model", SCRIPTS + "always_tools", "--max-turn-tokens", "40", "--temperature", "0.5",
                      "loop until stopped")
    assert first.returncode == 1
    assert first.stderr.strip().splitlines()[-1].startswith(
        "dex-agent: turn turn-1 stopped: spend limit reached: this turn used ")
    assert "usage: this turn " in first.stdout
    # The next run needs no flags: the session keeps its model and settings.
    second = run_agent(*args, "again")
    assert second.returncode == 1 and "spend limit reached" in second.stderr
    assert f"model {SCRIPTS}always_tools" in second.stdout
    settings = _show(store, "s-spend")["session"]["settings"]
    assert settings == {"model": SCRIPTS + "always_tools", "max_turn_tokens": 40, "temperature": 0.5}


def test_the_continuation_hook_flag(stack: Stack, tmp_path: Path) -> None:
    done = run_agent("--store", str(tmp_path / "hook.db"), "run", "--gateway", stack.gateway_url, "--yes",
                     "--model", SCRIPTS + "one_refund", "--continuation-hook", "tests.agent_host.scripts:end_turn_hook", "refund")
    assert done.returncode == 0, done.stderr
    assert "refund: ok" in done.stdout and "RESULTS" not in done.stdout  # ended after the tools, no model call
    bad = run_agent("--store", str(tmp_path / "hook.db"), "run", "--continuation-hook", "nope", "x")
    assert bad.returncode == 2 and bad.stderr == "dex-agent: continuation hook 'nope': expected module:function\n"
