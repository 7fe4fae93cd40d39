"""An upstream's form question answered on the web page (real headless Chromium): server-everything's
elicitation tool through a stateful gateway; the card shows one input per field, and the values
reach the upstream. Screenshot: tests/artifacts/browser/<test>.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agent_host.host_support import dex_agent
from tests.agent_host.test_browser import ENV, WAIT_MS, browser, expect, finish, open_page, page  # noqa: F401 (fixtures)
from tests.support.everything import everything_stdio, require_everything
from tests.support.gateway import start_gateway, write_config
from tests.support.servers import free_port

pytestmark = pytest.mark.timeout(120)

SCRIPT = "scripted:tests.agent_host.question_scripts:call_tool_named"


def test_an_upstream_form_answered_on_the_page(tmp_path: Path, page: Any) -> None:  # noqa: F811
    node = require_everything()
    config = write_config(tmp_path, {"server": {"stateful": True}, "upstreams": [everything_stdio(node=node)]})
    port = free_port()
    with start_gateway(config) as gateway:
        gateway.wait_for_log("catalog ready", timeout=30)
        proc = dex_agent("--store", str(tmp_path / "host.db"), "run", "--gateway", gateway.url, "--session", "s-form",
                         "--model", SCRIPT, "--approve", "api", "--approvals-port", str(port),
                         "trigger-elicitation-request", env=ENV)
        try:
            proc.wait_for(r"web page on http://")
            open_page(page, f"http://127.0.0.1:{port}/ui/sessions/s-form")
            approval = page.locator("article.approval")
            approval.get_by_role("button", name="Allow").click(timeout=WAIT_MS)
            card = page.locator("article.question")
            expect(card.locator("h3")).to_have_text("A tool asks", timeout=WAIT_MS)
            expect(card.locator(".question-text")).to_have_text("Please provide inputs for the following fields:")
            card.get_by_label("String *").fill("Ada")
            card.get_by_label("Boolean").check()
            card.get_by_label("Integer").fill("500")  # above its maximum (100): refused with the reason
            card.get_by_role("button", name="Send").click()
            expect(page.locator("#error")).to_contain_text("field 'integer': 500 is greater than the maximum of 100")
            card.get_by_label("Integer").fill("7")
            card.get_by_label("Untitled Single Select Enum").select_option("Rachel")
            card.get_by_role("button", name="Send").click()
            expect(card.locator(".outcome")).to_contain_text("Answered by http", timeout=WAIT_MS)
            expect(page.locator(".entry.turn-end")).to_have_text("turn-1 completed", timeout=WAIT_MS)
            expect(page.locator(".entry.assistant").last).to_contain_text("- Name: Ada")
            finish(proc)
        finally:
            proc.stop()
    assert "- Favorite Integer: 7" in proc.output and '"untitledSingleSelectEnum": "Rachel"' in proc.output
