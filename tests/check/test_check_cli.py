"""`dex-gateway check` against real servers: the conventions-following example, the broken
example (one rule broken per tool), and a published server that knows no conventions."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from gateway.conventions.check import example_arguments, variant_arguments
from gateway.conventions.check_cli import configure_parser, run
from tests.support.servers import REPO_ROOT, count_executions, release_gate, server_command, start_http_server

TIME_SERVER = REPO_ROOT / ".venv-tools" / "bin" / "mcp-server-time"
# dex_server's tools, and which of them are writes (idempotent or not).
DEX_TOOLS = ["get_balance", "list_payments", "set_memo", "refund", "send_payment", "close_account",
             "settle_uncertain", "long_report", "sleep", "statement", "hold_payment", "hold_memo", "crash_read", "crash_memo",
             "crash_payment"]
DEX_WRITES = {"set_memo", "refund", "send_payment", "close_account", "settle_uncertain", "hold_payment", "hold_memo",
              "crash_memo", "crash_payment"}


def check(*argv: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    code = run(parser.parse_args(list(argv)))
    out, err = capsys.readouterr()
    return code, out, err


def stdio(name: str) -> str:
    return shlex.join(server_command(name))


def failures(report: dict[str, Any]) -> set[tuple[str, str]]:
    return {(t["name"], r["rule"]) for t in report["tools"] for r in t["rules"] if r["status"] == "fail"}


def test_dex_server_passes_every_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DEX_EXAMPLE_STATE_DIR", str(tmp_path))
    release_gate(tmp_path, "dex-check")  # hold_* tools answer at once for the check's arguments
    code, out, err = check("--stdio", stdio("dex_server"), "--allow-writes", "--skip", "crash_*", capsys=capsys)
    assert code == 0, out
    # Every rule of every tool ran and passed: the table's rows are all "pass", one per rule
    # (two for each tool, four more for each write), and the last line counts them.
    statuses = re.findall(r"^\s*\S.*?\s{2,}(pass|fail|skip)\b", out, re.MULTILINE)
    tools = [name for name in DEX_TOOLS if not name.startswith("crash_")]
    writes = [name for name in tools if name in DEX_WRITES]
    assert statuses == ["pass"] * (1 + 2 * len(tools) + 4 * len(writes)), out
    assert out.strip().splitlines()[-1] == f"{len(statuses)} passed, 0 failed"
    for name in tools:
        assert re.search(rf"^{name} +Dex client: ", out, re.MULTILINE), name
    assert "check: [1/" in err  # the progress line
    assert "refund" in out and "non_idempotent_write (declared), asks approval, single attempt" in out
    assert count_executions(tmp_path, tool="send_payment") == 1  # keyless refused, retry replayed, reuse refused


def test_without_allow_writes_nothing_is_called(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with start_http_server("dex_server", state_dir=tmp_path) as server:
        code, out, err = check(server.url, "--json", capsys=capsys)
    report = json.loads(out)
    assert code == 0 and report["failed"] == 0
    assert err.strip().splitlines()[-1] == f"{report['passed']} passed, 0 failed"
    tools = {t["name"]: t for t in report["tools"]}
    assert tools["set_memo"]["client"] == {
        "effect": "idempotent_write", "declared": True, "source": "declared", "requires_approval": False,
        "attempts": 3, "warnings": []}
    assert [r["status"] for r in tools["send_payment"]["rules"]] == ["pass", "pass", "skip"]
    assert count_executions(tmp_path) == 0


def test_broken_server_fails_each_broken_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DEX_EXAMPLE_STATE_DIR", str(tmp_path))
    code, out, _ = check("--stdio", stdio("broken_server"), "--allow-writes", "--json", capsys=capsys)
    report = json.loads(out)
    assert code == 1
    assert failures(report) == {
        ("bad_effect", "effect value"),
        ("bad_approval", "approval value"),
        ("keyless_write", "refused without key"),
        ("double_write", "same key, same answer"),
        ("key_reuse_write", "key bound to arguments"),
        ("unknown_not_error", "outcome well-formed"),
        ("bad_outcome", "outcome well-formed"),
    }
    details = {(t["name"], r["rule"]): r["detail"] for t in report["tools"] for r in t["rules"]}
    assert "'maybe'" in details["bad_effect", "effect value"]
    assert "isError false" in details["unknown_not_error", "outcome well-formed"]
    assert "'maybe_later'" in details["bad_outcome", "outcome well-formed"]
    bad_effect = next(t for t in report["tools"] if t["name"] == "bad_effect")
    assert bad_effect["client"]["effect"] == "unclassified" and bad_effect["client"]["requires_approval"]


def test_broken_server_table_names_tool_and_rule(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with start_http_server("broken_server", state_dir=tmp_path) as server:
        code, out, _ = check(server.url, "--allow-writes", "--tool", "double_write", capsys=capsys)
    assert code == 1
    assert "tool 'double_write': same key, same answer: a retry with the same key answered" in out
    assert out.strip().splitlines()[-1] == "6 passed, 1 failed"


def test_a_write_that_kills_the_server_fails_and_the_check_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DEX_EXAMPLE_STATE_DIR", str(tmp_path))
    code, out, _ = check("--stdio", stdio("dex_server"), "--allow-writes", "--tool", "crash_payment",
                         "--tool", "set_memo", "--json", capsys=capsys)
    report = json.loads(out)
    assert code == 1
    assert failures(report) == {("crash_payment", "same key, same answer")}
    assert all(r["status"] == "pass" for t in report["tools"] if t["name"] == "set_memo" for r in t["rules"])


@pytest.mark.skipif(not TIME_SERVER.exists(), reason="needs .venv-tools: python3 -m venv .venv-tools && "
                                                     ".venv-tools/bin/pip install mcp-server-time")
def test_published_server_without_conventions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = check("--stdio", str(TIME_SERVER), "--allow-writes", "--json", capsys=capsys)
    report = json.loads(out)
    assert code == 0 and report["failed"] == 0
    clients = {t["name"]: t["client"] for t in report["tools"]}
    assert set(clients) == {"get_current_time", "convert_time"}
    for client in clients.values():  # readOnlyHint: true, no Dex keys
        assert (client["effect"], client["source"], client["requires_approval"]) == ("read", "from annotations", False)


def test_unreachable_server_fails(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.servers import free_port

    code, out, _ = check(f"http://127.0.0.1:{free_port()}/mcp", "--timeout", "5", capsys=capsys)
    assert code == 1 and "server: tools listed: tools/list failed:" in out


def test_bad_header_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = check("http://127.0.0.1:1/mcp", "--header", "no-colon", capsys=capsys)
    assert code == 2 and "expected 'Name: value'" in err


def test_arguments_from_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "order": {"type": "string"}, "amount": {"type": "number", "minimum": 5}, "count": {"type": "integer"},
            "fast": {"type": "boolean"}, "currency": {"enum": ["EUR", "USD"]}, "tags": {"type": "array", "minItems": 1,
                                                                                  "items": {"type": "string"}},
            "note": {"type": ["null", "string"]}, "memo": {"type": "string"},
        },
        "required": ["order", "amount", "count", "fast", "currency", "tags", "note"],
    }
    args = example_arguments(schema)
    assert args == {"order": "dex-check", "amount": 5, "count": 1, "fast": False, "currency": "EUR",
                    "tags": ["dex-check"], "note": "dex-check"}
    assert variant_arguments(schema, args) == {**args, "order": "dex-check-2"}
    only_const = {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]}
    assert variant_arguments(only_const, example_arguments(only_const)) is None
    optional = {"type": "object", "properties": {"memo": {"type": "string"}}}
    assert variant_arguments(optional, example_arguments(optional)) == {"memo": "dex-check"}
