"""Approval cards that cannot be forged: a corpus of hostile argument names and values, shown on
the CLI card and by the HTTP API exactly as a terminal would display them."""

from __future__ import annotations

import io
import json
import time
import unicodedata
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from agent_host.approvals.gate import ApprovalCard, ApprovalGate
from agent_host.api.approvals_api import approvals_app
from agent_host.terminal.console import Console
from agent_host.models.base import Message, ToolCall
from agent_host.store.session_store import CallStatus, SessionStore, ToolCallRecord

LONG = "A" * 10_000

# (what the model sent, what the card must show): keys are quoted unless plain identifiers.
HOSTILE_KEYS: list[tuple[str, str]] = [
    ("amount\x1b[2K\r", '"amount\\u001b[2K\\r"'),              # ANSI erase line + carriage return
    ("order\x1b]0;pwned\x07", '"order\\u001b]0;pwned\\u0007"'),  # OSC: set the window title
    ("x\x1b]8;;http://evil.example\x1b\\y", '"x\\u001b]8;;http://evil.example\\u001b\\\\y"'),  # OSC 8 link
    ("csi\x9b31m", '"csi\\u009b31m"'),                          # C1 CSI
    ("osc\x9d0;t\x9c", '"osc\\u009d0;t\\u009c"'),               # C1 OSC / ST
    ("\u202eevil", '"\\u202eevil"'),                            # right-to-left override
    ("\u2066iso\u2069", '"\\u2066iso\\u2069"'),                 # isolates
    ("ltr\u200e\u200f", '"ltr\\u200e\\u200f"'),                 # marks
    ("zero\u200bwidth\u200d", '"zero\\u200bwidth\\u200d"'),     # zero-width space / joiner
    ("\ufeffbom", '"\\ufeffbom"'),
    ("new\nline", '"new\\nline"'),
    ("tab\tkey", '"tab\\tkey"'),
    ("nul\x00del\x7f", '"nul\\u0000del\\u007f"'),
    ("sep\u2028para\u2029", '"sep\\u2028para\\u2029"'),
    ("tag\U000e0041", '"tag\\udb40\\udc41"'),                   # invisible tag characters
    ("nb\u00a0sp", '"nb\\u00a0sp"'),                            # a space that is not a space
    ("amount: 40, note", '"amount: 40, note"'),                 # forging the structure
    ('a": 1, "b', '"a\\": 1, \\"b"'),
]
HOSTILE_VALUES: list[tuple[Any, str]] = [
    ("40\x1b[1D\x1b[K", '"40\\u001b[1D\\u001b[K"'),
    ("\u202e004", '"\\u202e004"'),
    ("two\nlines\r\n", '"two\\nlines\\r\\n"'),
    ("\x9b2J", '"\\u009b2J"'),
    ({"in\x1bner": ["\u2067", "\u200b"]}, '{"in\\u001bner": ["\\u2067", "\\u200b"]}'),
    ("<script>alert(1)</script>", '"<script>alert(1)</script>"'),
]


def _unsafe(text: str) -> list[str]:
    """Characters a terminal would act on or not show: controls, format, separators, odd spaces."""
    return [c for c in text if c != " " and unicodedata.category(c) in {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs"}]


def _arguments() -> dict[str, Any]:
    arguments: dict[str, Any] = {"order": "5521", "amount": 400}
    arguments.update({key: index for index, (key, _) in enumerate(HOSTILE_KEYS)})
    arguments.update({f"v{index}": value for index, (value, _) in enumerate(HOSTILE_VALUES)})
    arguments["long"] = LONG
    return arguments


def _record(arguments: dict[str, Any], name: str = "payments__refund\x1b[2J") -> ToolCallRecord:
    return ToolCallRecord(session_id="s", turn_id="turn-1", id="c1\u202e", model_call=1, position=0, name=name,
                          arguments=arguments, kind="gateway", effect="non_idempotent_write", requires_approval=True,
                          idempotency_key="s/turn-1/c1\u202e", status=CallStatus.AWAITING_APPROVAL, updated_at=0)


def _assert_shows_everything_escaped(shown: str) -> None:
    for _, escaped in HOSTILE_KEYS:
        assert f"{escaped}: " in shown, escaped
    for index, (_, escaped) in enumerate(HOSTILE_VALUES):
        assert f"v{index}: {escaped}" in shown, escaped
    assert 'order: "5521", amount: 400' in shown
    assert '"AAAA' in shown and "…[+" in shown and LONG not in shown  # cut, with a marker


def test_the_cli_card_is_inert_and_complete() -> None:
    out = io.StringIO()
    console = Console(out=out, stdin=io.StringIO(""))
    record = _record(_arguments())
    card = ApprovalCard.for_call(record, deadline=time.time() + 600)

    async def show() -> None:
        await console.approval_card(card)
        await console.tool_started(record)

    anyio.run(show)
    printed = out.getvalue()
    for line in printed.splitlines():
        assert _unsafe(line) == [], (line, _unsafe(line))
    assert "refund\\u001b[2J wants to run" in printed
    _assert_shows_everything_escaped(printed)
    assert "left to decide" in printed  # the deadline: 9m 59s left, or so
    # The argument list is bounded: no line of the card runs away.
    assert max(len(line) for line in printed.splitlines()) < 8_000


@pytest.fixture
async def hostile_approval(tmp_path: Path) -> AsyncIterator[tuple[SessionStore, str]]:
    async with SessionStore(tmp_path / "a.db") as store:
        await store.create_session("m", "g", "s")
        turn = await store.start_turn("s", "refund")
        record = _record(_arguments()).model_copy(update={"turn_id": turn.id})
        message = Message(role="assistant", tool_calls=[ToolCall(id=record.id, name=record.name, arguments=record.arguments)])
        await store.record_model_response(turn, message, [record])
        approval = await ApprovalGate(store, "api", timeout_seconds=60).raise_approval(record)
        yield store, approval.id


@pytest.mark.anyio
async def test_the_http_api_card_is_inert_and_complete(hostile_approval: tuple[SessionStore, str]) -> None:
    store, approval_id = hostile_approval
    app = approvals_app(store, ["approver"], ["agent"])
    headers = {"Authorization": "Bearer approver"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://approvals") as client:  # type: ignore[arg-type]
        listed = await client.get("/approvals", headers=headers)
        one = await client.get(f"/approvals/{approval_id}", headers=headers)
    for response in (listed, one):
        body = response.text
        assert "<" not in body and ">" not in body and "&" not in body  # safe inside HTML too
        assert _unsafe(body) == []
    [card] = listed.json()["approvals"]
    assert card == one.json()["approval"]
    for field in ("title", "call", "tool", "tool_call_id", "idempotency_key"):
        assert _unsafe(card[field]) == [], field
    assert card["title"] == "refund\\u001b[2J wants to run"
    assert card["tool_call_id"] == "c1\\u202e"
    _assert_shows_everything_escaped(card["call"])
    assert 0 < card["seconds_left"] <= 60
    # What the person approves is what runs: the stored call keeps the raw arguments.
    stored = await store.get_tool_call("s", "c1\u202e")
    assert stored.arguments == _arguments()
    assert json.loads(json.dumps(stored.arguments)) == _arguments()


def test_a_call_through_call_tool_shows_its_target_escaped_and_a_malformed_one_as_itself() -> None:
    """call_tool's card is its target's (one card rule: domain/cards.py `target_call`), with the
    same escaping: the model chose the target's name and arguments too."""
    through = _record({"name": "payments__refund\x1b[2J", "arguments": _arguments()}, name="call_tool")
    card = ApprovalCard.for_call(through, target_effect="non_idempotent_write")
    assert card.title == "refund\\u001b[2J wants to run" and card.tool == "payments__refund\\u001b[2J"
    assert card.effect == "non_idempotent_write" and card.idempotency_key == "s/turn-1/c1\\u202e"
    _assert_shows_everything_escaped(card.call)
    assert not _unsafe(card.call + card.title + card.tool)
    for malformed in ({"name": 7, "arguments": {}}, {"name": "x", "arguments": [1]}, {"arguments": {}}):
        shown = ApprovalCard.for_call(_record(malformed, name="call_tool"), target_effect="read")
        assert shown.tool == "call_tool" and shown.effect == "non_idempotent_write", malformed
