"""Real clients log in by themselves (issue 23, "Must show"): a real `dex-gateway serve` with
`auth.oauth` trusting a real OpenID provider on loopback (tests/support/idp.py: oidc-provider).

* The MCP Python SDK client with `mcp.client.auth.OAuthClientProvider`: its first request gets the
  gateway's 401, it reads the RFC 9728 metadata the challenge names, discovers the provider, registers
  itself (RFC 7591) or uses a pre-registered public client, completes authorization code + PKCE (the
  harness's `Browser` signs in on the provider's pages with httpx), then lists and calls tools. The
  token it sent is a JWT whose `aud` is the gateway's /mcp URL and whose `sub` is the person.
* The MCP TypeScript SDK client (tests/support/ts_client/login.mjs) does the same from node; the
  Python side plays the person at the browser (the URL comes on stdout, the code goes back on stdin).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
from pydantic import AnyUrl

from tests.gateway.helpers import all_tools, text_of
from tests.support.npm import npm_installed
from tests.support.gateway import RunningGateway, start_oauth_gateway, stdio_upstream
from tests.support.idp import DEFAULT_REDIRECT, PUBLIC, Idp, MemoryStorage
from tests.support.servers import count_executions

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

TS_CLIENT = Path(__file__).resolve().parents[1] / "support" / "ts_client"


@dataclass
class Setup:
    gateway: RunningGateway
    idp: Idp
    resource: str
    notes_state: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("oauth-clients")
    with Idp() as idp:
        config = {"upstreams": [stdio_upstream("notes", "plain_server", state_dir=root / "notes", keyless_writes="pass")]}
        with start_oauth_gateway(root, idp.issuer, config) as (gateway, resource):
            yield Setup(gateway, idp, resource, root / "notes")


def _preregistered() -> OAuthClientInformationFull:
    """The provider's configured public client (authorization code + PKCE, no secret)."""
    return OAuthClientInformationFull(client_id=PUBLIC, redirect_uris=[AnyUrl(DEFAULT_REDIRECT)],
                                      token_endpoint_auth_method="none", grant_types=["authorization_code", "refresh_token"],
                                      response_types=["code"], scope="mcp")


@pytest.mark.parametrize("registration", ["dynamic", "preregistered"])
async def test_the_python_sdk_client_logs_in_by_itself(setup: Setup, registration: str) -> None:
    storage = MemoryStorage(_preregistered() if registration == "preregistered" else None)
    browser = setup.idp.browser("bob")
    redirect_handler, callback_handler = browser.handlers()
    provider = OAuthClientProvider(
        server_url=setup.resource,
        client_metadata=OAuthClientMetadata(redirect_uris=[AnyUrl("http://127.0.0.1:53682/callback")],
                                            client_name="dex test client", scope="mcp"),
        storage=storage, redirect_handler=redirect_handler, callback_handler=callback_handler)
    registrations = setup.idp.grants("authorization_code")
    before = count_executions(setup.notes_state)
    sent: list[str | None] = []  # the Authorization of every request to /mcp

    async def record(request: httpx2.Request) -> None:
        if str(request.url) == setup.resource:
            sent.append(request.headers.get("authorization"))

    http = httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=120), event_hooks={"request": [record]})
    async with http, Client(streamable_http_client(setup.resource, http_client=http), cache=None,
                            read_timeout_seconds=60) as client:
        tools = {t.name for t in await all_tools(client)}
        assert "notes__put_note" in tools, sorted(tools)
        result = await client.call_tool("notes__put_note", {"name": registration, "text": "from the python client"})
        assert not result.is_error, text_of(result)
    assert count_executions(setup.notes_state) == before + 1, "the tool call did not run upstream"
    # The client went through the provider's pages (login, consent) and exchanged one code.
    assert any("/interaction/" in page for page in browser.pages), browser.pages
    assert setup.idp.grants("authorization_code") == registrations + 1
    assert storage.tokens is not None and storage.client_info is not None
    if registration == "dynamic":
        assert storage.client_info.client_id != PUBLIC  # registered by the client itself (RFC 7591)
    # The first request went without a token (the 401 that started discovery); every later one
    # carried the token the login got.
    assert sent[0] is None and len(sent) >= 3, sent
    assert set(sent[1:]) == {f"Bearer {storage.tokens.access_token}"}
    claims = setup.idp.verify(storage.tokens.access_token, audience=setup.resource)
    assert claims["aud"] == setup.resource and claims["sub"] == "bob"
    assert claims["client_id"] == storage.client_info.client_id and "mcp" in claims["scope"].split()


async def test_without_a_login_the_python_sdk_client_gets_nothing(setup: Setup) -> None:
    """A person who refuses consent: the client never gets a token and nothing runs."""
    browser = setup.idp.browser("bob", consent=False)
    redirect_handler, callback_handler = browser.handlers()
    provider = OAuthClientProvider(
        server_url=setup.resource,
        client_metadata=OAuthClientMetadata(redirect_uris=[AnyUrl(DEFAULT_REDIRECT)], scope="mcp"),
        storage=MemoryStorage(_preregistered()), redirect_handler=redirect_handler, callback_handler=callback_handler)
    before = count_executions(setup.notes_state)
    http = httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=60))
    with pytest.raises(BaseException):
        async with http, Client(streamable_http_client(setup.resource, http_client=http), cache=None,
                                read_timeout_seconds=30) as client:
            await client.call_tool("notes__put_note", {"name": "refused", "text": "must not run"})
    assert count_executions(setup.notes_state) == before


# -- the TypeScript SDK client ------------------------------------------------------------------


def _ts_client_node() -> str:
    return npm_installed(TS_CLIENT, "@modelcontextprotocol/sdk", "the TypeScript SDK client")


def test_the_typescript_sdk_client_logs_in_by_itself(setup: Setup) -> None:
    """login.mjs: StreamableHTTPClientTransport with an OAuthClientProvider. It prints the
    authorization URL (`AUTHORIZE <url>`); the person (the harness's Browser) signs in and the
    code goes back on its stdin; then it lists tools, calls one and prints the result as JSON."""
    node = _ts_client_node()
    before = count_executions(setup.notes_state)
    process = subprocess.Popen([node, str(TS_CLIENT / "login.mjs"), setup.resource, "notes__put_note"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None and process.stdin is not None
        line = process.stdout.readline()
        assert line.startswith("AUTHORIZE "), (line, process.stderr.read() if process.poll() is not None else "")
        answer = setup.idp.browser("alice").authorize(line.split(" ", 1)[1].strip())
        process.stdin.write(json.dumps({"code": answer.code, "state": answer.state}) + "\n")
        process.stdin.flush()
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert "notes__put_note" in report["tools"]
    assert report["isError"] is False, report
    assert count_executions(setup.notes_state) == before + 1
    claims = setup.idp.verify(report["access_token"], audience=setup.resource)
    assert claims["aud"] == setup.resource and claims["sub"] == "alice"
    assert claims["client_id"] == report["client_id"] != PUBLIC  # registered by the TS client itself
