"""The console's human-oversight views against a real gateway in headless Chromium: pending
approvals, tool definitions awaiting review, the audit log (issue 25).

The must-show: a plain MCP client without elicitation calls a write under `approvals: gateway`; the
approver allows it on the console and the waiting call completes, the write running once.

Each view's test runs when this gateway has its route (and config keys) and is skipped, saying why,
otherwise. Screenshots: tests/artifacts/browser/<test>.png.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.config.model import AuthConfig, StdioUpstreamConfig, TokenConfig
from tests.gateway.helpers import KEY, connect, text_of
from tests.support.browser import launch, phone_page, require_browser, run_async
from tests.support.gateway import RunningGateway, start_gateway, write_config
from tests.support.hostile import HOSTILE_NAME
from tests.support.scripted_server import SCRIPT_FILE, SCRIPT_PATH, STATE_ENV, read_attempts
from tests.support.servers import REPO_ROOT

sync_api = require_browser()
expect = sync_api.expect

pytestmark = pytest.mark.timeout(120)

ADMIN, AGENT, APPROVER = "oversight-admin-token", "oversight-agent-token", "oversight-approver-token"
WAIT_MS = 15_000
HAS_APPROVALS = "approver_tokens" in AuthConfig.model_fields and "approvals" in TokenConfig.model_fields
HAS_PINNING = "pinning" in StdioUpstreamConfig.model_fields
TOOLS = [
    {"name": "refund", "effect": "non_idempotent_write", "events": []},
    {"name": "balance", "effect": "read", "events": []},
    {"name": "note", "effect": "idempotent_write", "events": []},  # a write that needs no approval
]


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Setup:
    gateway: RunningGateway
    ledger: Path
    calls: list[str] = field(default_factory=list)

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, self.gateway.base + path, headers={"Authorization": f"Bearer {ADMIN}"},
                             timeout=30, **kwargs)

    def route_exists(self, path: str) -> bool:
        return self.admin("GET", path).status_code != 404


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("oversight")
    ledger = root / "ledger"
    ledger.mkdir()
    (ledger / SCRIPT_FILE).write_text(json.dumps({"tools": TOOLS}))
    token: dict[str, Any] = {"principal": "agent", "token_sha256": _sha(AGENT)}
    auth: dict[str, Any] = {"tokens": [token], "admin_token_sha256": _sha(ADMIN)}
    if HAS_APPROVALS:
        token["approvals"] = "gateway"
        auth["approver_tokens"] = [{"name": "carol", "token_sha256": _sha(APPROVER)}]
    upstream: dict[str, Any] = {
        "name": "ledger", "transport": "stdio", "command": sys.executable, "args": [str(SCRIPT_PATH)],
        "env": {STATE_ENV: str(ledger)}, "cwd": str(REPO_ROOT), "list_ttl_seconds": 0.2,
        "tool_policies": {"ledger__refund": {"requires_approval": True}},
    }
    if HAS_PINNING:
        upstream["pinning"] = "hold"
    with start_gateway(write_config(root, {"auth": auth, "upstreams": [upstream]})) as gateway:
        yield Setup(gateway, ledger)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch(sync_api)


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from phone_page(browser, request.node.name)


def open_console(tab: Any, setup: Setup, token: str, view: str | None = None) -> None:
    tab.goto("about:blank")
    tab.goto(f"{setup.gateway.base}/console#token={token}" + (f"&view={view}" if view else ""))


def need(setup: Setup, path: str, feature: str, *, configured: bool = True) -> None:
    if not configured or not setup.route_exists(path):
        pytest.skip(f"this gateway has no {feature} ({path} is not there): the view says 'not available'")


class WaitingCall(threading.Thread):
    """A plain MCP SDK client (no elicitation callback: it cannot ask its user) calling a write that
    needs approval, in its own thread; `outcome` is its result text once the call returned."""

    def __init__(self, url: str, run: str) -> None:
        super().__init__(daemon=True)
        self.url, self.run_id = url, run
        self.outcome: str | None = None
        self.is_error: bool | None = None
        self.failure: BaseException | None = None

    def run(self) -> None:
        async def call() -> None:
            async with connect(self.url, "legacy", token=AGENT) as client:
                result = await client.call_tool("ledger__refund", {"run": self.run_id}, meta={KEY: f"console/{self.run_id}"})
            self.outcome, self.is_error = text_of(result), result.is_error

        try:
            run_async(call)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failure = exc


def _runs(setup: Setup, run: str) -> int:
    return sum(1 for a in read_attempts(setup.ledger) if a["tool"] == "refund" and a["run"] == run)


def test_a_client_without_elicitation_waits_and_the_approver_allows_it_on_the_console(setup: Setup, page: Any) -> None:
    need(setup, "/admin/approvals?state=pending", "approvals", configured=HAS_APPROVALS)
    call = WaitingCall(setup.gateway.url, "approve-1")
    call.start()
    open_console(page, setup, APPROVER)
    # An approver sees the approvals and nothing else.
    expect(page.locator("#view-approvals")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("nav [data-view=upstreams]")).to_be_hidden()
    card = page.locator("#view-approvals article.approval")
    expect(card).to_have_count(1, timeout=WAIT_MS)
    expect(card.locator("h3")).to_contain_text("refund")
    expect(card.locator(".card-text")).to_contain_text("approve-1")
    assert _runs(setup, "approve-1") == 0 and call.is_alive()  # held before anything was sent
    card.get_by_label("Reason (optional)").fill("checked with the customer")
    card.get_by_role("button", name="Allow").click()
    expect(card.locator(".outcome")).to_contain_text("allowed by carol", timeout=WAIT_MS)
    call.join(timeout=30)
    assert call.failure is None, call.failure
    assert call.is_error is False, call.outcome
    assert _runs(setup, "approve-1") == 1


def test_deny_from_the_keyboard_rejects_the_waiting_call(setup: Setup, page: Any) -> None:
    need(setup, "/admin/approvals?state=pending", "approvals", configured=HAS_APPROVALS)
    call = WaitingCall(setup.gateway.url, "deny-1")
    call.start()
    open_console(page, setup, ADMIN, view="approvals")
    card = page.locator("#view-approvals article.approval", has_text="deny-1")
    expect(card).to_have_count(1, timeout=WAIT_MS)
    card.get_by_label("Reason (optional)").focus()
    page.keyboard.type("not today")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")  # Allow, then Deny
    expect(card.get_by_role("button", name="Deny")).to_be_focused()
    page.keyboard.press("Enter")
    expect(card.locator(".outcome")).to_contain_text("denied", timeout=WAIT_MS)
    call.join(timeout=30)
    assert call.failure is None, call.failure
    assert call.is_error is True and "approval denied" in (call.outcome or "")
    assert _runs(setup, "deny-1") == 0


def test_the_calling_principal_cannot_decide_its_own_call(setup: Setup) -> None:
    need(setup, "/admin/approvals?state=pending", "approvals", configured=HAS_APPROVALS)
    refused = httpx.post(setup.gateway.base + "/admin/approvals/nope/decision", json={"decision": "allow"},
                         headers={"Authorization": f"Bearer {AGENT}"})
    assert refused.status_code in (401, 403)


def test_a_changed_definition_is_reviewed_with_a_diff_and_accepted(setup: Setup, page: Any) -> None:
    need(setup, "/admin/pins?state=pending", "pinning", configured=HAS_PINNING)
    changed = [dict(TOOLS[0], description="Refunds an order. " + HOSTILE_NAME), *TOOLS[1:]]
    (setup.ledger / SCRIPT_FILE).write_text(json.dumps({"tools": changed}))
    deadline = time.monotonic() + 15
    while not [p for p in setup.admin("GET", "/admin/pins?state=pending").json()["pins"] if p["tool"] == "refund"]:
        assert time.monotonic() < deadline, "the changed definition was never noticed"
        setup.admin("GET", "/admin/tools")  # a listing past its TTL lists the upstream again
        time.sleep(0.3)
    assert "ledger__refund" not in [t["name"] for t in setup.admin("GET", "/admin/tools").json()["tools"]]  # held
    open_console(page, setup, ADMIN, view="pins")
    card = page.locator("#view-pins article.pin", has_text="refund")
    expect(card).to_have_count(1, timeout=WAIT_MS)
    expect(card.locator(".diff .del")).to_contain_text(["scripted: refund"])
    # The definition's JSON, line by line: the hostile text as text, its invisible characters escaped.
    shown = json.dumps("Refunds an order. " + HOSTILE_NAME, ensure_ascii=False)
    shown = shown.replace("\u202e", "\\u202e").replace("\u200b", "\\u200b")
    expect(card.locator(".diff .add")).to_contain_text(['"description": ' + shown])
    assert page.evaluate("window.__pwned") is None and page.locator("main img, main script").count() == 0
    card.get_by_role("button", name="Accept").click()
    expect(card.locator(".outcome")).to_have_text("Accepted: the new definition is pinned.")
    deadline = time.monotonic() + 15
    while "ledger__refund" not in [t["name"] for t in setup.admin("GET", "/admin/tools").json()["tools"]]:
        assert time.monotonic() < deadline, "the accepted tool was not listed again"
        time.sleep(0.3)


def test_the_audit_log_with_filters(setup: Setup, page: Any) -> None:
    need(setup, "/admin/audit", "audit log")
    run_async(_write_a_note, setup.gateway.url)
    open_console(page, setup, ADMIN, view="audit")
    rows = page.locator("#view-audit tbody tr")
    expect(rows.first).to_be_visible(timeout=WAIT_MS)
    filters = page.locator("#audit-filters")
    filters.locator("select[name=outcome]").select_option("unknown")  # no call here ended unknown
    filters.locator("button[type=submit]").click()
    expect(page.locator("#view-audit .empty")).to_have_text("No entries match.")
    filters.locator("select[name=outcome]").select_option("")
    tool = filters.locator("input[name=tool]")
    tool.fill("ledger__note")
    tool.press("Enter")
    expect(rows.locator("td[data-label=Tool]").first).to_have_text("ledger__note", timeout=WAIT_MS)
    for cell in rows.locator("td[data-label=Tool]").all():
        expect(cell).to_have_text("ledger__note")
    expect(rows.first.locator("td[data-label=Outcome]")).to_have_text("ok")
    if HAS_APPROVALS and setup.route_exists("/admin/approvals?state=pending"):
        # The write the approver allowed on the console carries its approval: who, how, when.
        tool.fill("ledger__refund")
        filters.locator("select[name=outcome]").select_option("ok")
        tool.press("Enter")
        expect(rows).to_have_count(1, timeout=WAIT_MS)
        expect(rows.first.locator("td[data-label=Approval]")).to_contain_text(" by carol at ")


async def _write_a_note(url: str) -> None:
    """One write that needs no approval: a row of the audit log."""
    async with connect(url, "legacy", token=AGENT) as client:
        result = await client.call_tool("ledger__note", {"run": "audit-note"}, meta={KEY: "console/audit-note"})
    assert not result.is_error, text_of(result)
