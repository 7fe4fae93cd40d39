"""Signing in to the console at a real identity provider (issue 25: "OAuth login once identity
lands"), in headless Chromium: `oidc-provider` on loopback (tests/support/idp.py) with the console
registered as a public client, a real `dex-gateway serve` whose `auth.oauth.console` names it, and
the example payments server over stdio.

* an approver (alice, group `admins`, which `auth.oauth.approvers` names) signs in on the
  provider's own login and consent pages from the console, sees a held call, allows it, and the
  waiting call runs once; the token lives in session storage only, never local storage or a cookie;
* a user who is not an approver (bob) signs in and is refused in plain words, with no approval
  in sight;
* the provider's answer with a tampered state is refused and its code never exchanged; the same
  answer replayed after a sign-in is refused too; an error from the provider is shown as text;
* "Sign out" forgets the token: a reload stays signed out.

Screenshots: tests/artifacts/browser/<test>.png.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import mcp_types as types
import pytest

from gateway.server.console import content_security_policy
from tests.gateway.helpers import KEY, text_of
from tests.gateway.test_gateway_http import sha
from tests.support.approvals import connect, count_executions, refund
from tests.support.browser import ARTIFACTS, launch, phone_page, require_browser, run_async
from tests.support.gateway import RunningGateway, start_gateway, stdio_upstream, write_config
from tests.support.idp import Idp, IdpClient, default_clients
from tests.support.servers import free_port

sync_api = require_browser()
expect = sync_api.expect

pytestmark = pytest.mark.timeout(120)

AGENT, ADMIN = "console-login-agent-token", "console-login-admin-token"
CONSOLE_CLIENT = "dex-console"
WAIT_MS = 15_000
TOKEN_KEY = "dex-console-token"


@dataclass
class Setup:
    idp: Idp
    gateway: RunningGateway
    state: Path

    @property
    def callback(self) -> str:
        return f"{self.gateway.base}/console/callback"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("console-login")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # The console as the provider knows it: a public client (no secret), its redirect URI the
    # gateway's /console/callback (the provider then allows CORS from that origin, for the token request).
    console = IdpClient(CONSOLE_CLIENT, None, {
        "grant_types": ["authorization_code"], "response_types": ["code"],
        "redirect_uris": [f"{base}/console/callback"], "token_endpoint_auth_method": "none"})
    with Idp(clients={**default_clients(), CONSOLE_CLIENT: console}) as idp:
        oauth = {"resource": f"{base}/mcp", "issuers": [{"issuer": idp.issuer}], "required_scopes": ["mcp"],
                 "approvers": {"groups": ["admins"]}, "console": {"client_id": CONSOLE_CLIENT}}
        config = {
            "auth": {"tokens": [{"principal": "agent", "token_sha256": sha(AGENT), "approvals": "gateway"}],
                     "admin_token_sha256": sha(ADMIN), "oauth": oauth},
            "upstreams": [stdio_upstream("pay", "dex_server", state_dir=root / "pay")],
            "approvals": {"wait_seconds": 30, "poll_seconds": 0.05},
        }
        with start_gateway(write_config(root, config), port=port) as gateway:
            gateway.wait_for_log("catalog ready", timeout=30)
            yield Setup(idp, gateway, root / "pay")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch(sync_api)


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    yield from phone_page(browser, request.node.name)


def go_to_provider(tab: Any, setup: Setup) -> None:
    """Open the console and press "Sign in": the browser lands on the provider's login page."""
    response = tab.goto(f"{setup.gateway.base}/console")
    assert response is not None and response.headers["content-security-policy"] == content_security_policy(setup.idp.issuer)
    expect(tab.locator("#oauth-issuer")).to_have_text(setup.idp.issuer, timeout=WAIT_MS)
    tab.get_by_role("button", name="Sign in with your identity provider").click()
    expect(tab.locator("input[name=login]")).to_be_visible(timeout=WAIT_MS)
    assert tab.url.startswith(setup.idp.issuer + "/")


def sign_in_at_provider(tab: Any, setup: Setup, user: str, *, allow: bool = True) -> None:
    """Type the user's name and password on the provider's page, then Allow (or Deny) on its consent page."""
    tab.locator("input[name=login]").fill(user)
    tab.locator("input[name=password]").fill(setup.idp.users[user].password)
    tab.get_by_role("button", name="Sign in").click()
    tab.get_by_role("button", name="Allow" if allow else "Deny").click()


def sign_in(tab: Any, setup: Setup, user: str) -> None:
    go_to_provider(tab, setup)
    sign_in_at_provider(tab, setup, user)


class WaitingCall(threading.Thread):
    """A plain MCP SDK client without elicitation calling a refund held for approval, in its own thread."""

    def __init__(self, setup: Setup, key: str) -> None:
        super().__init__(daemon=True)
        self.setup, self.key = setup, key
        self.result: types.CallToolResult | None = None
        self.failure: BaseException | None = None

    def run(self) -> None:
        async def call() -> None:
            async with connect(self.setup.gateway.url, "legacy", AGENT) as client:
                self.result = await client.call_tool("pay__refund", refund(12), meta={KEY: self.key})

        try:
            run_async(call)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failure = exc


def stored(tab: Any) -> dict[str, Any]:
    return tab.evaluate("({session: sessionStorage.getItem('%s'), local: localStorage.length, cookie: document.cookie})"
                        % TOKEN_KEY)


def test_an_approver_signs_in_at_the_provider_and_allows_a_held_call(setup: Setup, page: Any) -> None:
    call = WaitingCall(setup, "console-login/allow-1")
    call.start()
    go_to_provider(page, setup)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "test_console_login_the_providers_login_page.png"), full_page=True)
    sign_in_at_provider(page, setup, "alice")
    expect(page.locator("#status")).to_have_text("Signed in as alice, an approver: approvals only.", timeout=WAIT_MS)
    assert urlsplit(page.url).path == "/console" and "code=" not in page.url  # the answer left the address bar
    kept = stored(page)
    assert kept["session"] and kept["local"] == 0 and kept["cookie"] == ""
    claims = setup.idp.verify(kept["session"], audience=f"{setup.gateway.base}/mcp")  # aud: the gateway's resource
    assert claims["sub"] == "alice"
    expect(page.locator("nav [data-view=upstreams]")).to_be_hidden()  # an approver: approvals only
    card = page.locator("#view-approvals article.approval", has_text="console-login/allow-1")
    expect(card).to_have_count(1, timeout=WAIT_MS)
    assert count_executions(setup.state, tool="refund", key="console-login/allow-1") == 0 and call.is_alive()
    card.get_by_role("button", name="Allow").click()
    expect(card.locator(".outcome")).to_have_text("allowed by alice", timeout=WAIT_MS)
    call.join(timeout=30)
    assert call.failure is None, call.failure
    assert call.result is not None and call.result.is_error is False, text_of(call.result) if call.result else None
    assert count_executions(setup.state, tool="refund", key="console-login/allow-1") == 1


def test_a_user_who_is_not_an_approver_is_refused_in_plain_words(setup: Setup, page: Any) -> None:
    call = WaitingCall(setup, "console-login/bob-1")
    call.start()
    try:
        sign_in(page, setup, "bob")
        expect(page.locator("#login-error")).to_contain_text(
            "You signed in at the identity provider, but the gateway does not accept you on the console: "
            "these credentials may not use the console", timeout=WAIT_MS)
        expect(page.locator("#app")).to_be_hidden()
        expect(page.locator("#oauth-login")).to_be_visible()
        assert page.locator("article.approval").count() == 0 and page.get_by_role("button", name="Allow").count() == 0
        assert stored(page)["session"] is None  # the refused token is not kept
    finally:
        # The held call is decided by the admin token so that the thread ends (and nothing ran for bob).
        held = _held(setup, "console-login/bob-1")
        httpx.post(f"{setup.gateway.base}/admin/approvals/{held}/decision", json={"decision": "deny"},
                   headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).raise_for_status()
        call.join(timeout=30)
    assert count_executions(setup.state, tool="refund", key="console-login/bob-1") == 0


def _held(setup: Setup, key: str) -> str:
    for _ in range(100):
        listed = httpx.get(f"{setup.gateway.base}/admin/approvals", headers={"Authorization": f"Bearer {ADMIN}"},
                           timeout=10).json()["approvals"]
        found = [a["id"] for a in listed if a["idempotency_key"] == key]
        if found:
            return str(found[0])
        threading.Event().wait(0.1)
    raise AssertionError(f"no approval held for {key}")


def test_a_tampered_state_is_refused_and_its_code_never_exchanged(setup: Setup, page: Any) -> None:
    """The provider's real answer with a code, but a state other than the one this tab sent (changed
    on its way to the provider, so the provider sends it back): refused, the code never exchanged."""
    def tamper(route: Any) -> None:
        parts = urlsplit(route.request.url)
        query = parse_qs(parts.query)
        query["state"] = ["forged-" + query["state"][0]]
        route.continue_(url=parts._replace(query=urlencode(query, doseq=True)).geturl())

    # The page's own navigation to the authorization endpoint (Playwright cannot step into redirects).
    page.route(lambda url: url.startswith(setup.idp.issuer + "/auth?"), tamper)
    before = setup.idp.grants("authorization_code")
    sign_in(page, setup, "alice")
    expect(page.locator("#login-error")).to_have_text(
        "This sign-in answer was refused: its state does not match the sign-in started in this tab.", timeout=WAIT_MS)
    expect(page.locator("#app")).to_be_hidden()
    assert stored(page)["session"] is None
    assert setup.idp.grants("authorization_code") == before  # the code was never sent to the token endpoint


def test_a_replayed_answer_is_refused_and_sign_out_forgets_the_token(setup: Setup, page: Any) -> None:
    answers: list[str] = []
    page.on("request", lambda request: answers.append(request.url) if request.url.startswith(setup.callback) else None)
    sign_in(page, setup, "alice")
    expect(page.locator("#status")).to_contain_text("Signed in as alice", timeout=WAIT_MS)
    assert len(answers) == 1 and "code=" in answers[0]

    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#status")).to_have_text("Not connected: signed out; the token is forgotten.")
    expect(page.locator("#oauth-login")).to_be_visible()
    assert stored(page)["session"] is None
    page.reload()
    expect(page.locator("#oauth-login")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#app")).to_be_hidden()
    expect(page.locator("#status")).to_have_text("Not connected.")

    # The same answer again (a replay, from the history or another's hands): this tab started no sign-in now.
    before = setup.idp.grants("authorization_code")
    page.goto(answers[0])
    expect(page.locator("#login-error")).to_have_text(
        "This sign-in answer was refused: no sign-in was started in this tab, or its answer was used already.",
        timeout=WAIT_MS)
    assert urlsplit(page.url).path == "/console" and stored(page)["session"] is None
    assert setup.idp.grants("authorization_code") == before


def test_an_error_from_the_provider_is_shown_as_text(setup: Setup, page: Any) -> None:
    go_to_provider(page, setup)
    sign_in_at_provider(page, setup, "bob", allow=False)  # Deny on the consent page
    expect(page.locator("#login-error")).to_have_text(
        "The identity provider did not sign you in: access_denied (the user denied the request)", timeout=WAIT_MS)
    expect(page.locator("#app")).to_be_hidden()
    assert page.locator("#login-error b, #login-error script").count() == 0


def test_a_token_the_gateway_stops_accepting_signs_the_page_out(setup: Setup, page: Any) -> None:
    """A signed-in token expires after a while (no refresh token is asked for): the first 401 while
    connected drops it and asks for a new sign-in (the gateway's 401 is simulated here)."""
    sign_in(page, setup, "alice")
    expect(page.locator("#status")).to_contain_text("Signed in as alice", timeout=WAIT_MS)
    page.route(lambda url: urlsplit(url).path == "/admin/approvals", lambda route: route.fulfill(
        status=401, content_type="application/json", body='{"error": "Unauthorized: the token expired"}'))
    expect(page.locator("#login-error")).to_have_text(
        "The gateway no longer accepts this token (it may have expired): sign in again. "
        "(Unauthorized: the token expired)", timeout=WAIT_MS)  # the approvals view checks every 2 s
    expect(page.locator("#app")).to_be_hidden()
    expect(page.locator("#oauth-login")).to_be_visible()
    assert stored(page)["session"] is None


def test_the_page_is_told_only_public_settings_and_who_holds_a_token(setup: Setup) -> None:
    base = setup.gateway.base
    settings = httpx.get(f"{base}/console/settings.json", timeout=10)
    assert settings.json() == {"oauth": {"issuer": setup.idp.issuer, "client_id": CONSOLE_CLIENT, "scope": "openid mcp",
                                         "resource": f"{base}/mcp", "callback_path": "/console/callback"}}
    script = httpx.get(f"{base}/console/console_login.js", timeout=10)
    assert script.status_code == 200 and script.headers["content-security-policy"] == content_security_policy(setup.idp.issuer)
    code = "\n".join(line for line in script.text.splitlines() if not line.lstrip().startswith("//"))
    assert not [w for w in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "localStorage")
                if w in code]
    assert httpx.get(f"{base}/admin/whoami", timeout=10).status_code == 401
    agent = httpx.get(f"{base}/admin/whoami", headers={"Authorization": f"Bearer {AGENT}"}, timeout=10)
    assert agent.status_code == 403 and "may not use the console" in agent.json()["error"]
    admin = httpx.get(f"{base}/admin/whoami", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert admin.json() == {"role": "admin", "name": "admin"}
    bob = setup.idp.login_user_with_code(f"{base}/mcp", "openid mcp", user="bob")["access_token"]
    assert httpx.get(f"{base}/admin/whoami", headers={"Authorization": f"Bearer {bob}"}, timeout=10).status_code == 403
