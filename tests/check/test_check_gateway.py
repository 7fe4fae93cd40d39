"""`dex-gateway check` pointed at the gateway's own URL checks the gateway: it passes every rule,
including for tools whose upstream knows nothing of the conventions (the gateway fences them)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gateway.conventions.check_cli import configure_parser, run
from tests.support.gateway import start_gateway, stdio_upstream, write_config
from tests.support.servers import count_executions, release_gate


def check(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    code = run(parser.parse_args(list(argv)))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.timeout(120)
def test_the_gateway_passes_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    payments, notes = tmp_path / "payments", tmp_path / "notes"
    payments.mkdir()
    release_gate(payments, "dex-check")  # hold_* tools answer at once for the check's arguments
    config = write_config(
        tmp_path,
        {
            "upstreams": [
                stdio_upstream("payments", "dex_server", state_dir=payments),
                stdio_upstream(
                    "notes",
                    "plain_server",
                    state_dir=notes,
                    tool_policies={"notes__append_log": {"effect": "non_idempotent_write"}},
                ),
            ]
        },
    )
    with start_gateway(config) as gateway:
        code, out, err = check(gateway.url, "--allow-writes", "--skip", "*crash_*", "--json", capsys=capsys)
    report = json.loads(out)
    failed = [(t["name"], r["rule"], r.get("message")) for t in report["tools"] for r in t["rules"] if r["status"] == "fail"]
    assert code == 0 and failed == [], failed
    tools = {t["name"]: t for t in report["tools"]}
    # The plain server's tools are declared by the gateway and fenced by it.
    assert tools["notes__append_log"]["client"]["effect"] == "non_idempotent_write"
    assert tools["notes__put_note"]["client"]["effect"] == "idempotent_write"
    assert tools["notes__delete_note"]["client"]["requires_approval"] is True
    # Keyless refused, the retry replayed and the reused key refused by the gateway: one execution.
    assert count_executions(notes, tool="append_log") == 1
    assert count_executions(payments, tool="send_payment") == 1
    # Every tool was checked, and every one of its rules ran (none skipped): the write rules on
    # each declared write, whatever its upstream knows of the conventions (an unclassified tool,
    # like notes__delete_note, declares no effect: the check does not call it).
    assert sorted(tools) == sorted(
        [f"payments__{n}" for n in ("get_balance", "list_payments", "set_memo", "refund", "send_payment",
                                    "close_account", "settle_uncertain", "long_report", "sleep", "statement", "hold_payment",
                                    "hold_memo")]
        + [f"notes__{n}" for n in ("list_notes", "read_note", "put_note", "delete_note", "append_log")])
    for name, tool in tools.items():
        rules = [(r["rule"], r["status"]) for r in tool["rules"]]
        expected = ["effect value", "approval value"]
        if tool["client"]["effect"] in ("idempotent_write", "non_idempotent_write"):
            expected += ["refused without key", "same key, same answer", "key bound to arguments",
                         "outcome well-formed"]
        assert rules == [(rule, "pass") for rule in expected], (name, rules)
    assert report["passed"] == sum(len(t["rules"]) for t in report["tools"]) + len(report["server_rules"])
