"""End to end with a real OpenID provider (issue 23): `oidc-provider` on loopback
(tests/support/idp.py), configured with resource indicators and JWT access tokens, in front of a
real `dex-gateway serve` that knows only the provider's issuer URL (keys from its discovery).

* a client credentials token for the gateway's /mcp URL works through the official SDK client,
  with its scope granted by `client_id`;
* a user who logs in (authorization code + PKCE on the provider's pages) gets the tools of their
  groups; the official SDK client with its OAuth client provider (`mcp.client.auth`) does it all by
  itself: a 401 names the gateway's metadata, which names the provider; it registers, logs the
  user in and calls a tool;
* a token the same provider issued for another resource is refused 401, and nothing runs;
* the provider replaces its keys (restart with a new key set): tokens signed with the old key are
  refused, new ones accepted, without restarting the gateway.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl

from tests.gateway.helpers import all_tools, connect, text_of
from tests.support.gateway import RunningGateway, start_oauth_gateway, stdio_upstream
from tests.support.idp import MACHINE, Idp, MemoryStorage
from tests.support.servers import count_executions

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


@dataclass
class Setup:
    idp: Idp
    gateway: RunningGateway
    resource: str
    billing_state: Path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("oauth-idp")
    with Idp() as idp:
        # jwks_uri from the provider's openid-configuration
        oauth = {"jwks_min_refetch_seconds": 1, "grants": [
            {"when": {"client_id": [MACHINE]}, "tools": ["billing__*"]},
            {"when": {"groups": ["engineering"]}, "tools": ["notes__*"]},
        ]}
        config = {"upstreams": [
            stdio_upstream("billing", "dex_server", state_dir=root / "billing"),
            stdio_upstream("notes", "plain_server", state_dir=root / "notes", keyless_writes="pass"),
        ]}
        with start_oauth_gateway(root, idp.issuer, config, oauth=oauth) as (gateway, resource):
            yield Setup(idp, gateway, resource, root / "billing")


def _call(setup: Setup, token: str) -> httpx.Response:
    return httpx.post(setup.gateway.url, headers={
        "authorization": f"Bearer {token}", "accept": "application/json, text/event-stream",
        "content-type": "application/json", "mcp-protocol-version": "2025-11-25",
    }, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call",
             "params": {"name": "billing__get_balance", "arguments": {"account": "a"}}}, timeout=30)


def _challenge(response: httpx.Response) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', response.headers.get("www-authenticate", "")))


async def test_a_client_credentials_token_from_the_provider_is_accepted(setup: Setup, era: str) -> None:
    token = setup.idp.client_credentials_token(setup.resource, "mcp")["access_token"]
    async with connect(setup.gateway.url, era, token=token) as client:
        names = {t.name for t in await all_tools(client)}
        result = await client.call_tool("billing__get_balance", {"account": "machine"})
    assert result.is_error is False, text_of(result)
    assert names and all(n.startswith("billing__") for n in names), names  # granted by client_id


async def test_a_user_logged_in_at_the_provider_gets_the_tools_of_their_groups(setup: Setup) -> None:
    token = setup.idp.login_user_with_code(setup.resource, "openid mcp", user="alice")["access_token"]
    async with connect(setup.gateway.url, "legacy", token=token) as client:
        names = {t.name for t in await all_tools(client)}
    assert names and all(n.startswith("notes__") for n in names), names  # alice is in engineering


async def test_the_sdk_client_discovers_the_provider_logs_in_and_calls(setup: Setup, era: str) -> None:
    redirect_handler, callback_handler = setup.idp.browser("alice").handlers()
    storage = MemoryStorage()
    oauth = OAuthClientProvider(
        setup.resource,
        OAuthClientMetadata(redirect_uris=[AnyUrl("http://127.0.0.1:53682/callback")], scope="mcp",
                            client_name="dex gateway test client"),
        storage, redirect_handler=redirect_handler, callback_handler=callback_handler)
    async with httpx2.AsyncClient(auth=oauth, timeout=httpx2.Timeout(30, read=60)) as http, Client(
            streamable_http_client(setup.gateway.url, http_client=http), mode=era, cache=None) as client:
        names = {t.name for t in await all_tools(client)}
        result = await client.call_tool("notes__list_notes", {})
    assert result.is_error is False, text_of(result)
    assert names and all(n.startswith("notes__") for n in names), names  # alice: engineering
    assert storage.tokens is not None and storage.client_info is not None  # it registered and logged in


def test_a_token_of_the_provider_for_another_resource_is_refused(setup: Setup) -> None:
    other = setup.idp.client_credentials_token("http://127.0.0.1:1/mcp", "mcp")["access_token"]
    assert setup.idp.verify(other, audience="http://127.0.0.1:1/mcp")  # a good token, for someone else
    before = count_executions(setup.billing_state)
    response = _call(setup, other)
    assert response.status_code == 401, response.text
    challenge = _challenge(response)
    assert challenge["error"] == "invalid_token"
    assert "not for this resource" in challenge["error_description"]
    assert challenge["resource_metadata"] == f"{setup.gateway.base}/.well-known/oauth-protected-resource/mcp"
    assert count_executions(setup.billing_state) == before


def test_the_provider_replacing_its_keys_needs_no_gateway_restart(setup: Setup) -> None:
    old = setup.idp.client_credentials_token(setup.resource, "mcp")["access_token"]
    assert _call(setup, old).status_code == 200
    setup.idp.restart(rotate_keys="replace")
    time.sleep(1.2)  # past jwks_min_refetch_seconds
    new = setup.idp.client_credentials_token(setup.resource, "mcp")["access_token"]
    assert _call(setup, new).status_code == 200  # a new kid: the gateway fetched the keys again
    refused = _call(setup, old)
    assert refused.status_code == 401 and "no key" in _challenge(refused)["error_description"], refused.text
    assert setup.gateway.process is not None and setup.gateway.process.poll() is None
