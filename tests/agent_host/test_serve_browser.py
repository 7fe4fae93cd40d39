"""`dex-agent serve`'s page in real headless Chromium (the fixtures of `test_browser`): the session
list starts a session, a typed message runs a turn, a write is approved on the page, a message sent
during the turn waits in the queue and runs next. Screenshots: tests/artifacts/browser/<test>.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.agent_host.host_support import Stack
from tests.agent_host.serve_support import TOKEN, start_serve
from tests.agent_host.test_browser import WAIT_MS, browser, expect, open_page, page  # noqa: F401  (fixtures)
from tests.support.browser import ARTIFACTS
from tests.support.servers import read_executions


def test_chat_from_the_page_with_an_approval_and_a_queued_message(stack: Stack, tmp_path: Path, page: Any) -> None:  # noqa: F811
    proc, url = start_serve(stack, tmp_path / "b.db", tmp_path / "calls.jsonl")
    try:
        open_page(page, f"{url}/ui/", TOKEN)
        page.get_by_role("button", name="New session").click()
        expect(page.locator("#chat-panel")).to_be_visible(timeout=WAIT_MS)
        page.locator("#message-text").fill("refund 9301 from the page")
        page.get_by_role("button", name="Send").click()
        card = page.locator("article.approval")
        expect(card.locator(".call")).to_have_text('refund(order: "9301", amount: 5)', timeout=WAIT_MS)
        page.locator("#message-text").fill("second <b>message</b>")
        page.get_by_role("button", name="Send").click()
        expect(page.locator("#queue li")).to_have_count(1)
        expect(page.locator("#queue li span")).to_have_text("second <b>message</b>")  # as text, never markup
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "serve_approval_and_queue.png"), full_page=True)
        card.get_by_role("button", name="Allow").click()
        expect(page.locator(".entry.assistant").filter(has_text="done: refund 9301")).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator(".entry.assistant").filter(has_text="done: second <b>message</b>")).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator("#queue li")).to_have_count(0)
        page.screenshot(path=str(ARTIFACTS / "serve_second_turn_done.png"), full_page=True)
        assert len([e for e in read_executions(stack.state_dir, tool="refund") if e["arguments"]["order"] == "9301"]) == 1
        open_page(page, f"{url}/ui/", TOKEN)
        expect(page.locator("#sessions li")).to_have_count(1, timeout=WAIT_MS)
        expect(page.locator("#sessions li .meta")).to_contain_text("2 turns, last completed")
    finally:
        proc.stop()
