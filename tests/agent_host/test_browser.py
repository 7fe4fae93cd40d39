"""The host's web page in real headless Chromium (Debian's `chromium`, driven by Playwright), on a
phone-sized screen, against real processes: `dex-agent run` serving the host API and the page,
the gateway, the payments server.

A pending approval appears live, Allow lands and the turn continues; Deny (from the keyboard);
an `ask_user` question answered on the page; a steer message changing the turn; cancel; hostile
argument names rendered inert on the card; a draft plan shown and executed from the page.
Screenshots: tests/artifacts/browser/<test>.png.

`make test` installs chromium with apt-get when it is missing; without it (or without the
playwright package) these tests are skipped, saying why.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_host.approvals.gate import approval_id, call_summary
from agent_host.api.web_page import CONTENT_SECURITY_POLICY
from tests.agent_host.host_support import REPO_ROOT, Proc, Stack, dex_agent
from tests.agent_host.scripts import HOSTILE_ARGUMENTS
from tests.support.servers import free_port, read_executions

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(
        "the browser tests need Debian's chromium at /usr/bin/chromium; `make test` installs it "
        "(apt-get install -y chromium) when apt-get is there and it runs as root",
        allow_module_level=True,
    )
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the browser tests need the playwright package (pip install -e '.[test]')"
)
expect = sync_api.expect

FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]
ARTIFACTS = REPO_ROOT / "tests" / "artifacts" / "browser"
SCRIPTS = "scripted:tests.agent_host.scripts:"
APPROVER, AGENT = "approver-secret", "agent-secret"
ENV = {"DEX_APPROVER_TOKEN": APPROVER, "DEX_AGENT_TOKEN": AGENT}
WAIT_MS = 20_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    profile = tempfile.mkdtemp(prefix="dex-agent-chromium-")
    with sync_api.sync_playwright() as playwright:
        # Playwright gives every launch a fresh profile of its own; the XDG dirs keep chromium's
        # other files in this test's temporary directory too.
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS,
            env={"HOME": profile, "XDG_CONFIG_HOME": profile, "XDG_CACHE_HOME": profile},
        )
        yield chromium
        chromium.close()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A phone-sized page; a script error or a Content-Security-Policy violation fails the test (the
    host exits after its turn, so refused reconnections of the live stream are expected)."""
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True, has_touch=True)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("console", lambda message: errors.append(message.text) if "Refused to" in message.text or "Content Security Policy" in message.text else None)
    yield tab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{request.node.name}.png"
    tab.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    context.close()
    assert not errors, errors


def start(stack: Stack, tmp_path: Path, script: str, session: str, message: str = "go") -> tuple[Proc, str]:
    port = free_port()
    proc = dex_agent("--store", str(tmp_path / "host.db"), "run", "--gateway", stack.gateway_url, "--session", session,
                     "--model", SCRIPTS + script, "--approve", "api", "--approvals-port", str(port), message, env=ENV)
    proc.wait_for(r"web page on http://")
    return proc, f"http://127.0.0.1:{port}/ui/sessions/{session}"


def open_page(tab: Any, url: str, token: str = APPROVER) -> Any:
    tab.goto("about:blank")  # a new document each time, not a jump within the page
    response = tab.goto(f"{url}#token={token}")
    assert response is not None and response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    return response


def finish(proc: Proc, code: int = 0) -> None:
    try:
        assert proc.finish() == code, proc.output
    finally:
        proc.stop()


def test_a_pending_approval_appears_live_and_allow_lets_the_turn_continue(stack: Stack, tmp_path: Path, page: Any) -> None:
    proc, url = start(stack, tmp_path, "two_refunds", "s-allow", "two refunds")
    # The agent's own token cannot open the page's data.
    open_page(page, url, AGENT)
    expect(page.locator("#status")).to_contain_text("the agent's own credentials cannot decide", timeout=WAIT_MS)
    expect(page.locator("#login")).to_be_visible()
    open_page(page, url)
    card = page.locator("article.approval").first
    expect(card).to_be_visible(timeout=WAIT_MS)
    first_id = approval_id("s-allow", "call_1_0")
    assert card.get_attribute("id") == "approval-" + first_id  # deterministic
    expect(card.locator("h3")).to_have_text("refund wants to run")
    expect(card.locator(".call")).to_have_text('refund(order: "7001", amount: 11)')
    expect(card.locator(".meta")).to_contain_text("tool payments__refund · non_idempotent_write")
    expect(card.locator(".deadline")).to_have_text("No deadline.")  # approvals wait without one by default
    card.get_by_role("button", name="Allow").click()
    expect(card.locator(".outcome")).to_have_text("Allowed by http")
    expect(card.get_by_role("button", name="Allow")).to_be_hidden()  # decided: no buttons, no deadline
    expect(card.locator(".deadline")).to_have_text("")
    # The write ran and the turn went on to the next call: its card appears live.
    second = page.locator("article.approval").nth(1)
    expect(second.locator(".call")).to_have_text('refund(order: "7002", amount: 12)', timeout=WAIT_MS)
    # A second decision gets the first back.
    again = httpx.post(url.replace("/ui/sessions/s-allow", f"/approvals/{first_id}"),
                       json={"decision": "deny"}, headers={"Authorization": f"Bearer {APPROVER}"})
    assert again.json()["replayed"] is True and again.json()["approval"]["status"] == "allowed"
    second.get_by_role("button", name="Allow").click()
    expect(page.locator(".entry.turn-end")).to_have_text("turn-1 completed", timeout=WAIT_MS)
    expect(page.locator(".entry.assistant").last).to_contain_text("RESULTS payments__refund=refund rf-")
    expect(page.locator(".entry.tool .badge")).to_have_text(["succeeded", "succeeded"])
    finish(proc)
    orders = [e["arguments"]["order"] for e in read_executions(stack.state_dir, tool="refund")]
    assert orders.count("7001") == 1 and orders.count("7002") == 1


def test_deny_from_the_keyboard(stack: Stack, tmp_path: Path, page: Any) -> None:
    proc, url = start(stack, tmp_path, "one_refund", "s-deny", "refund order 8001")
    open_page(page, url)
    card = page.locator("article.approval")
    expect(card.locator(".call")).to_have_text('refund(order: "8001", amount: 21)', timeout=WAIT_MS)
    card.get_by_label("Reason (optional)").focus()
    page.keyboard.type("not today")
    page.keyboard.press("Tab")  # Allow
    page.keyboard.press("Tab")  # Deny
    page.keyboard.press("Enter")
    expect(card.locator(".outcome")).to_have_text("Denied by http: not today")
    expect(card.get_by_role("button", name="Deny")).to_be_hidden()
    expect(page.locator(".entry.turn-end")).to_have_text("turn-1 completed", timeout=WAIT_MS)
    expect(page.locator(".entry.assistant").last).to_contain_text("the user denied approval. Reason: not today")
    expect(page.locator("#nothing-waiting")).to_be_visible()
    finish(proc)
    assert "8001" not in [e["arguments"]["order"] for e in read_executions(stack.state_dir, tool="refund")]


def test_an_ask_user_question_answered_on_the_page(stack: Stack, tmp_path: Path, page: Any) -> None:
    proc, url = start(stack, tmp_path, "ask_free_text", "s-ask", "pick a color")
    open_page(page, url)
    card = page.locator("article.question")
    expect(card).to_be_visible(timeout=WAIT_MS)
    expect(card.locator(".question-text")).to_have_text("Which color should the <b>report</b> use?")
    assert card.locator("b").count() == 0  # the model's markup is text
    expect(card.get_by_role("button", name="red")).to_be_visible()
    expect(card.get_by_role("button", name="green")).to_be_visible()
    card.get_by_label("Your answer").fill("teal")
    page.keyboard.press("Enter")
    expect(card.locator(".outcome")).to_have_text("Answered by http: “teal”", timeout=WAIT_MS)
    expect(card.get_by_role("button", name="Decline")).to_be_hidden()
    expect(page.locator(".entry.turn-end")).to_have_text("turn-1 completed", timeout=WAIT_MS)
    expect(page.locator(".entry.assistant").last).to_contain_text('ask_user={"status": "answered", "answer": "teal"}')
    finish(proc)


def test_a_steer_message_changes_the_turn(stack: Stack, tmp_path: Path, page: Any) -> None:
    proc, url = start(stack, tmp_path, "wait_then_follow_steering", "s-steer", "deploy to production")
    open_page(page, url)
    wait = page.locator(".entry.tool").first
    expect(wait.locator(".badge")).to_have_text("waiting", timeout=WAIT_MS)
    expect(page.locator("#status")).to_have_text("Turn turn-1 is running.")
    page.get_by_label("Steer: a message for the agent's next step").fill("use staging instead")
    page.get_by_role("button", name="Steer").click()
    expect(page.locator(".entry.assistant").last).to_have_text("agentSTEERED: use staging instead", timeout=WAIT_MS)
    expect(wait.locator(".badge")).to_have_text("rejected (steered)")
    expect(page.locator(".entry.turn-end")).to_have_text("turn-1 completed")
    expect(page.get_by_role("button", name="Steer")).to_be_disabled()
    finish(proc)


def test_cancel_ends_the_turn(stack: Stack, tmp_path: Path, page: Any) -> None:
    proc, url = start(stack, tmp_path, "wait_then_follow_steering", "s-cancel", "deploy to production")
    open_page(page, url)
    expect(page.locator(".entry.tool .badge").first).to_have_text("waiting", timeout=WAIT_MS)
    page.get_by_role("button", name="Cancel turn").click()
    expect(page.locator(".entry.turn-end")).to_have_text(
        "turn-1 cancelled: cancelled by the user (web): cancelled on the web page", timeout=WAIT_MS)
    expect(page.locator(".entry.tool .badge").first).to_have_text("rejected (turn_cancelled)")
    finish(proc, 1)
    assert "dex-agent: turn turn-1 was cancelled: cancelled by the user (web)" in proc.output


def test_hostile_argument_names_are_inert_on_the_card(stack: Stack, tmp_path: Path, page: Any) -> None:
    proc, url = start(stack, tmp_path, "hostile_refund", "s-hostile", "refund")
    open_page(page, url)
    card = page.locator("article.approval")
    expect(card).to_be_visible(timeout=WAIT_MS)
    shown = card.locator(".call").text_content()
    assert shown == call_summary("payments__refund", HOSTILE_ARGUMENTS)
    assert '"<img src=x onerror=\\"window.__pwned=1\\">": "</script><script>window.__pwned=2</script>"' in shown
    assert '"\\u202eevil": "\\u202e004"' in shown and '"amount: 40, note": "zero\\u200bwidth"' in shown
    assert not any(ch in shown for ch in "\u202e\u200b\x07\x1b")  # escaped, never the characters themselves
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img").count() == 0 and page.locator("script").count() == 2  # stream.js and app.js
    card.get_by_role("button", name="Deny").focus()
    page.keyboard.press("Enter")
    expect(card.locator(".outcome")).to_have_text("Denied by http", timeout=WAIT_MS)
    finish(proc)
    assert not [e for e in read_executions(stack.state_dir, tool="refund") if e["arguments"].get("order") == "7777"]


def test_the_draft_plan_is_shown_and_executed_from_the_page(stack: Stack, tmp_path: Path, page: Any) -> None:
    port = free_port()
    proc = dex_agent("--store", str(tmp_path / "host.db"), "run", "--gateway", stack.gateway_url, "--session", "s-plan",
                     "--model", SCRIPTS + "plan_then_execute", "--approve", "api", "--approvals-port", str(port),
                     "--plan", "report the balance of acme", env=ENV)
    proc.wait_for(r"web page on http://")
    open_page(page, f"http://127.0.0.1:{port}/ui/sessions/s-plan")
    plan = page.locator("#plan-panel")
    expect(plan.locator("#plan-meta")).to_have_text("revision 1 · draft", timeout=WAIT_MS)
    expect(plan.locator("li")).to_have_text(["pending read the balance of acme", "pending report it"])
    plan.get_by_role("button", name="Execute this plan").click()
    expect(plan.locator("#plan-meta")).to_have_text("revision 2 · completed", timeout=WAIT_MS)
    expect(page.locator(".entry.turn-end").last).to_have_text("turn-2 completed", timeout=WAIT_MS)
    expect(page.locator(".entry.assistant").last).to_contain_text("EXECUTED: ")
    finish(proc)
    assert "executing plan revision 1 (approved by web)" in proc.output
