"""The operator console (`/console`) and the admin routes behind it, against a real gateway with
real upstreams, in real headless Chromium on a phone-sized screen (tests/support/browser.py).

The gateway: a scripted stdio upstream (a write whose call is cut off: its fence ends `unknown`),
the tasks example server over HTTP (a task in `working`), and an upstream that cannot start (down,
with its last error). The calling principal's name is hostile markup, shown by several views as
text only. Views whose routes live on other branches (approvals, pins, audit) are tested when the
route answers and otherwise must say "not available on this gateway".

Screenshots: tests/artifacts/browser/<test>.png.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.server.console import CONTENT_SECURITY_POLICY
from tests.gateway.helpers import KEY, OUTCOME, connect, meta_of, text_of
from tests.support.browser import launch, phone_page, require_browser, run_async
from tests.support.hostile import HOSTILE_NAME, HOSTILE_NAME_SHOWN
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config
from tests.support.scripted_server import SCRIPT_FILE, SCRIPT_PATH, STATE_ENV
from tests.support.servers import REPO_ROOT, start_http_server
from tests.tasks.tasks_support import HANDSHAKE, post, result_of, task_id_of

sync_api = require_browser()
expect = sync_api.expect

pytestmark = pytest.mark.timeout(120)

ADMIN, AGENT = "console-admin-token", "console-agent-token"
HOSTILE_PRINCIPAL, SHOWN_PRINCIPAL = HOSTILE_NAME, HOSTILE_NAME_SHOWN  # the calling principal's name
WAIT_MS = 15_000


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Setup:
    gateway: RunningGateway
    task_id: str
    fence_ids: list[str]

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, self.gateway.base + path, headers={"Authorization": f"Bearer {ADMIN}"},
                             timeout=30, **kwargs)


async def _cut_off_charges(url: str, count: int) -> None:
    """`count` charges cut off upstream after they were sent: each fence ends `unknown`."""
    async with connect(url, "legacy", token=AGENT) as client:
        for i in range(count):
            result = await client.call_tool("ledger__charge", {"run": f"cut-{i}"}, meta={KEY: f"console/cut-{i}"})
            assert result.is_error and meta_of(result)[OUTCOME] == "unknown", text_of(result)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("console")
    ledger = root / "ledger"
    ledger.mkdir()
    (ledger / SCRIPT_FILE).write_text(json.dumps({"tools": [
        {"name": "charge", "effect": "non_idempotent_write", "events": [{"kind": "interrupted"}] * 10},
        {"name": "balance", "effect": "read", "events": []},
    ]}))
    with start_http_server("tasks_server", state_dir=root / "tasks") as tasks_upstream:
        config = write_config(root, {
            "auth": {"tokens": [{"principal": HOSTILE_PRINCIPAL, "token_sha256": _sha(AGENT)}],
                     "admin_token_sha256": _sha(ADMIN), "admin_token_name": "night-desk"},
            "upstreams": [
                {"name": "ledger", "transport": "stdio", "command": sys.executable, "args": [str(SCRIPT_PATH)],
                 "env": {STATE_ENV: str(ledger)}, "cwd": str(REPO_ROOT)},
                http_upstream("t", tasks_upstream.url),
                {"name": "broken", "transport": "stdio", "command": sys.executable,
                 "args": ["-c", "import sys; sys.stderr.write('no such database\\n'); sys.exit(3)"],
                 "connect_timeout_seconds": 2},
            ],
        })
        with start_gateway(config) as gateway:
            run_async(_cut_off_charges, gateway.url, 2)
            params = {"name": "t__slow_compute", "arguments": {"seconds": 60}, "task": {"ttl": 120_000}}
            task_id = task_id_of(result_of(post(gateway.url, "tools/call", params, era=HANDSHAKE, token=AGENT)))
            setup = Setup(gateway, task_id, [])
            fences = setup.admin("GET", "/admin/fences").json()["fences"]
            setup.fence_ids = [f["fence_id"] for f in fences]
            yield setup


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch(sync_api)


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from phone_page(browser, request.node.name)


def open_console(tab: Any, setup: Setup, token: str = ADMIN, view: str | None = None) -> None:
    tab.goto("about:blank")
    fragment = f"#token={token}" + (f"&view={view}" if view else "")
    response = tab.goto(f"{setup.gateway.base}/console{fragment}")
    assert response is not None and response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "cookie" not in {k.lower() for k in response.headers}


def assert_inert(tab: Any) -> None:
    """No hostile markup ran or became an element."""
    assert tab.evaluate("window.__pwned") is None
    assert tab.locator("main img, main script").count() == 0
    shown = tab.evaluate("document.querySelector('main').textContent")
    assert "\u202e" not in shown and "\u200b" not in shown


def route_exists(setup: Setup, path: str) -> bool:
    return setup.admin("GET", path).status_code != 404


# The admin routes -------------------------------------------------------------------------------


def test_the_operator_routes_need_the_admin_token(setup: Setup) -> None:
    for path in ("/admin/upstreams", "/admin/tools", "/admin/fences", "/admin/tasks"):
        assert httpx.get(setup.gateway.base + path).status_code == 401
        refused = httpx.get(setup.gateway.base + path, headers={"Authorization": f"Bearer {AGENT}"})
        assert refused.status_code == 403 and "admin" in refused.json()["error"]
    bad = setup.admin("GET", "/admin/fences?state=maybe")
    assert bad.status_code == 400 and "state" in bad.json()["error"]
    assert setup.admin("GET", "/admin/tasks?limit=0").status_code == 400


def test_upstreams_report_health_era_tool_counts_and_the_last_error(setup: Setup) -> None:
    upstreams = {u["name"]: u for u in setup.admin("GET", "/admin/upstreams").json()["upstreams"]}
    assert upstreams["ledger"]["health"] == "up" and upstreams["ledger"]["tools"] == 2
    assert upstreams["ledger"]["era"] and upstreams["t"]["era"]
    assert upstreams["broken"]["health"] == "down" and upstreams["broken"]["tools"] == 0
    assert "handshake failed: the upstream process exited" in upstreams["broken"]["last_error"]


def test_resolving_an_unknown_fence_keeps_its_answer_for_retries(setup: Setup) -> None:
    fence_id = setup.fence_ids[-1]
    assert len(setup.fence_ids) == 2
    missing = setup.admin("POST", f"/admin/fences/{fence_id}/resolve", json={})
    assert missing.status_code == 400 and "note" in missing.json()["error"]
    made = setup.admin("POST", f"/admin/fences/{fence_id}/resolve", json={"note": "charged once, checked in the ledger"})
    assert made.status_code == 200, made.text
    assert made.json()["resolution"]["note"] == "charged once, checked in the ledger"
    assert made.json()["resolution"]["by"] == "night-desk"  # auth.admin_token_name: who resolved it
    again = setup.admin("POST", f"/admin/fences/{fence_id}/resolve", json={"note": "other"})
    assert again.status_code == 409 and again.json()["resolution"]["note"] == "charged once, checked in the ledger"
    assert fence_id not in [f["fence_id"] for f in setup.admin("GET", "/admin/fences").json()["fences"]]
    assert [f["fence_id"] for f in setup.admin("GET", "/admin/fences?resolved=true").json()["fences"]] == [fence_id]
    assert setup.admin("POST", "/admin/fences/nope/resolve", json={"note": "x"}).status_code == 404

    # A retry with the same key still gets the unknown answer: resolving is a note, not a result.
    async def retry() -> str:
        async with connect(setup.gateway.url, "legacy", token=AGENT) as client:
            result = await client.call_tool("ledger__charge", {"run": "cut-1"}, meta={KEY: "console/cut-1"})
        assert result.is_error, text_of(result)
        return str(meta_of(result)[OUTCOME])

    assert run_async(retry) == "unknown"


# The console in the browser --------------------------------------------------------------------


def test_upstreams_view(setup: Setup, page: Any) -> None:
    open_console(page, setup)
    view = page.locator("#view-upstreams")
    expect(view.locator("tbody tr")).to_have_count(3, timeout=WAIT_MS)
    broken = view.locator("tr", has_text="broken")
    expect(broken.locator("td[data-label=Health]")).to_have_text("down")
    expect(broken.locator("td[data-label='Last error']")).to_contain_text("handshake failed")
    expect(view.locator("tr", has_text="ledger").locator("td[data-label=Tools]")).to_have_text("2")
    # Phone-sized: the table's rows are stacked blocks, nothing runs off the screen.
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


def test_tools_view(setup: Setup, page: Any) -> None:
    open_console(page, setup, view="tools")
    view = page.locator("#view-tools")
    charge = view.locator("tr", has_text="ledger__charge")
    expect(charge.locator("td[data-label=Effect]")).to_have_text("non_idempotent_write", timeout=WAIT_MS)
    expect(view.locator("tr", has_text="ledger__balance").locator("td[data-label=Effect]")).to_have_text("read")
    if route_exists(setup, "/admin/pins?state=all"):
        expect(charge.locator("td[data-label=Pin]")).to_have_text("pinned")  # first seen: pinned (pinning: warn)
    else:
        expect(view.locator(".pins-note")).to_have_text("Pin state: not available on this gateway.")


def test_fences_view_resolves_with_a_note_from_the_keyboard(setup: Setup, page: Any) -> None:
    to_check = setup.admin("GET", "/admin/fences").json()["fences"]
    assert to_check, "no unknown fence left to resolve"
    open_console(page, setup, view="fences")
    cards = page.locator("#view-fences article.fence")
    expect(cards).to_have_count(len(to_check), timeout=WAIT_MS)
    card = cards.first
    expect(card.locator("h3")).to_have_text("ledger__charge")
    expect(card.locator(".meta").first).to_contain_text("caller " + SHOWN_PRINCIPAL)  # the hostile name, as text
    assert_inert(page)
    card.get_by_label("What you found (required)").focus()
    page.keyboard.type("not charged: the ledger has no entry <b>ok</b>")
    page.keyboard.press("Tab")
    expect(card.get_by_role("button", name="Mark as resolved")).to_be_focused()
    page.keyboard.press("Enter")
    expect(card.locator(".outcome")).to_have_text("Resolved by night-desk: not charged: the ledger has no entry <b>ok</b>")
    assert len(setup.admin("GET", "/admin/fences").json()["fences"]) == len(to_check) - 1
    page.select_option("#fences-resolved", "true")
    resolved = page.locator("#view-fences article.fence .outcome", has_text="not charged: the ledger has no entry <b>ok</b>")
    expect(resolved).to_have_count(1)
    assert_inert(page)


def test_tasks_view_lists_and_cancels_a_task(setup: Setup, page: Any) -> None:
    open_console(page, setup, view="tasks")
    row = page.locator("#view-tasks tr", has_text=setup.task_id)
    expect(row.locator("td[data-label=Status]")).to_have_text("working", timeout=WAIT_MS)
    expect(row.locator("td[data-label=Caller]")).to_have_text(SHOWN_PRINCIPAL)
    assert_inert(page)
    row.get_by_role("button", name="Cancel").click()
    expect(page.locator("#view-tasks tr", has_text=setup.task_id).locator("td[data-label=Status]")).to_have_text("cancelled")


def test_keyboard_alone_moves_between_views(setup: Setup, page: Any) -> None:
    open_console(page, setup)
    expect(page.locator("#view-upstreams tbody tr")).to_have_count(3, timeout=WAIT_MS)
    page.keyboard.press("Tab")  # the skip link first
    expect(page.locator("a.skip")).to_be_focused()
    page.keyboard.press("Enter")
    for name in ("Upstreams", "Tools"):
        page.keyboard.press("Tab")
        expect(page.get_by_role("button", name=name, exact=True)).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#title-tools")).to_be_focused()
    expect(page.locator("#view-tools")).to_be_visible()
    expect(page.get_by_role("button", name="Tools", exact=True)).to_have_attribute("aria-current", "page")


def test_views_of_routes_this_gateway_lacks_say_so(setup: Setup, page: Any, tmp_path: Path) -> None:
    """A 404 from a view's route (a gateway without that route, or with the feature off) is a
    message in the view, never a broken page."""
    lacking = [v for v, p in (("approvals", "/admin/approvals?state=pending"), ("pins", "/admin/pins?state=pending"),
                              ("audit", "/admin/audit")) if not route_exists(setup, p)]
    open_console(page, setup)
    for view in lacking:
        page.locator(f"nav [data-view={view}]").click()
        expect(page.locator(f"#view-{view} .unavailable")).to_have_text("Not available on this gateway.")
    # Tasks and the audit log turned off: their routes answer 404 with the reason.
    options: dict[str, Any] = {"tasks": {"enabled": False}}
    if "audit" not in lacking:
        options["audit"] = {"enabled": False}
    config = write_config(tmp_path, {"auth": {"admin_token_sha256": _sha(ADMIN)}, **options})
    with start_gateway(config) as bare:
        page.goto("about:blank")
        page.goto(f"{bare.base}/console#token={ADMIN}&view=tasks")
        expect(page.locator("#view-tasks .unavailable")).to_have_text(
            "Not available on this gateway: tasks are off on this gateway (tasks.enabled: false)", timeout=WAIT_MS)
        if "audit" not in lacking:
            page.locator("nav [data-view=audit]").click()
            expect(page.locator("#view-audit .unavailable")).to_have_text(
                "Not available on this gateway: the audit log is off (audit.enabled: false)")
        page.locator("nav [data-view=upstreams]").click()
        expect(page.locator("#view-upstreams .empty")).to_have_text("No upstreams are configured.")


def test_a_wrong_token_is_refused_and_the_login_comes_back(setup: Setup, page: Any) -> None:
    open_console(page, setup, token=AGENT)
    expect(page.locator("#login")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#status")).to_contain_text("Not connected")
    page.locator("#token").fill(ADMIN)
    page.keyboard.press("Enter")
    expect(page.locator("#view-upstreams tbody tr")).to_have_count(3, timeout=WAIT_MS)
    assert page.evaluate("document.cookie") == ""


def test_the_console_serves_only_its_own_files_with_the_policy(setup: Setup) -> None:
    base = setup.gateway.base
    script = httpx.get(f"{base}/console/console.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert script.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    code = "\n".join(line for line in script.text.splitlines() if not line.lstrip().startswith("//"))
    assert not [w for w in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(") if w in code]
    for path in ("/console/nope.js", "/console/..%2Fapp.py", "/console/console.html.bak", "/console/a/b"):
        assert httpx.get(base + path).status_code == 404, path
    # A page from another origin cannot use the admin routes through the visitor's browser.
    foreign = httpx.post(f"{base}/admin/fences/x/resolve", json={"note": "x"},
                         headers={"Authorization": f"Bearer {ADMIN}", "Origin": "http://evil.example"})
    assert foreign.status_code == 403
