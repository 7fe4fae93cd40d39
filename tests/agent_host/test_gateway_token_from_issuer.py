"""The agent host gets its gateway token from the issuer (issue 23, item 5): a real OpenID provider
(tests/support/idp.py: oidc-provider), a real `dex-gateway serve` with `auth.oauth` trusting it,
the payments example server behind it, and `dex-agent` as a real process.

* client credentials from the environment: the demo turn runs and its tool calls reach the gateway;
  the token it sent has the gateway as audience; a secret on the command line is refused;
* a token about to expire is renewed before it is sent (short TTLs on the provider);
* `dex-agent login` (device login): the person approves on the provider's pages; the tokens are
  kept with mode 0600 and later turns send them, renewed by the refresh token; `dex-agent logout`
  revokes the refresh token at the provider and deletes them.
"""

from __future__ import annotations

import json
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent_host.gateway_client.credential import CredentialError
from agent_host.gateway_client.issuer import IssuedToken, IssuerClient, load_login, login_path
from agent_host.gateway_client.tools import GatewayToolSource
from tests.agent_host.host_support import dex_agent, run_agent
from tests.support.gateway import RunningGateway, start_oauth_gateway
from tests.support.idp import MACHINE, PUBLIC, Idp, IdpError
from tests.support.servers import read_executions, start_http_server

pytestmark = pytest.mark.timeout(180)

CC_TTL = 4  # client credentials tokens
USER_TTL = 10  # device login tokens


@dataclass
class Stack:
    idp: Idp
    gateway: RunningGateway
    resource: str
    payments_state: Path

    def client_env(self, *, issuer: bool = True) -> dict[str, str]:
        machine = self.idp.client(MACHINE)
        assert machine.client_secret is not None
        return {**({"DEX_AGENT_ISSUER": self.idp.issuer} if issuer else {}), "DEX_AGENT_CLIENT_ID": MACHINE,
                "DEX_AGENT_CLIENT_SECRET": machine.client_secret}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("issuer-stack")
    with Idp(client_credentials_ttl=CC_TTL, access_token_ttl=USER_TTL) as idp, \
            start_http_server("dex_server", state_dir=root / "payments") as payments:
        config = {
            "upstreams": [{"name": "payments", "transport": "streamable_http", "url": payments.url}],
            "fences": {"store": f"sqlite:///{root / 'gw.db'}"},
        }
        with start_oauth_gateway(root, idp.issuer, config) as (gateway, resource):
            yield Stack(idp, gateway, resource, root / "payments")


def _balances(stack: Stack) -> int:
    return len(read_executions(stack.payments_state, tool="get_balance"))


def test_a_demo_turn_with_client_credentials(stack: Stack, tmp_path: Path) -> None:
    before, grants = _balances(stack), stack.idp.grants("client_credentials")
    proc = dex_agent("--store", str(tmp_path / "a.db"), "demo", "--gateway", stack.resource, env=stack.client_env())
    assert proc.finish(timeout=90) == 0, proc.output
    assert 'payments__get_balance(account: "acme")' in proc.output and "Here is what I found and did" in proc.output
    assert _balances(stack) == before + 1, "the tool call did not reach the gateway's upstream"
    assert stack.idp.grants("client_credentials") > grants
    assert stack.client_env()["DEX_AGENT_CLIENT_SECRET"] not in proc.output


def test_the_issuer_is_found_from_the_gateways_metadata(stack: Stack, tmp_path: Path) -> None:
    """Without $DEX_AGENT_ISSUER: the issuer the gateway's RFC 9728 metadata names."""
    before = _balances(stack)
    proc = dex_agent("--store", str(tmp_path / "a.db"), "demo", "--gateway", stack.resource,
                     env=stack.client_env(issuer=False))
    assert proc.finish(timeout=90) == 0, proc.output
    assert _balances(stack) == before + 1


def test_a_token_endpoint_instead_of_discovery(stack: Stack, tmp_path: Path) -> None:
    """With the token endpoint given, nothing is discovered (the issuer named here listens nowhere)."""
    before = _balances(stack)
    env = {**stack.client_env(issuer=False), "DEX_AGENT_ISSUER": "http://127.0.0.1:1",
           "DEX_AGENT_TOKEN_ENDPOINT": f"{stack.idp.issuer}/token"}
    proc = dex_agent("--store", str(tmp_path / "a.db"), "demo", "--gateway", stack.resource, env=env)
    assert proc.finish(timeout=90) == 0, proc.output
    assert _balances(stack) == before + 1


def test_a_secret_on_the_command_line_is_refused(stack: Stack, tmp_path: Path) -> None:
    done = run_agent("--store", str(tmp_path / "a.db"), "demo", "--gateway", stack.resource,
                     "--client-id", MACHINE, "--client-secret", "s3cret-on-argv")
    assert done.returncode == 2
    assert "--client-secret is refused" in done.stderr and "DEX_AGENT_CLIENT_SECRET" in done.stderr
    assert "--client-secret-file" in done.stderr and "s3cret-on-argv" not in done.stderr


def test_a_wrong_client_secret_is_one_clear_line(stack: Stack, tmp_path: Path) -> None:
    before = _balances(stack)
    done = run_agent("--store", str(tmp_path / "a.db"), "demo", "--gateway", stack.resource,
                     env={**stack.client_env(), "DEX_AGENT_CLIENT_SECRET": "not-the-secret"}, timeout=90)
    assert done.returncode != 0
    assert "the issuer refused the client credentials: invalid_client" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "not-the-secret" not in done.stderr + done.stdout
    assert _balances(stack) == before


@pytest.mark.anyio
async def test_a_token_about_to_expire_is_renewed_before_it_is_sent(stack: Stack) -> None:
    """A CC_TTL-second token is renewed once less than half of it is left; until then it is reused.
    Both tokens are accepted by the gateway and carry it as audience."""
    machine = stack.idp.client(MACHINE)
    credential = IssuedToken(IssuerClient(stack.idp.issuer, MACHINE, machine.client_secret), resource=stack.resource,
                             scope="mcp")
    tools = GatewayToolSource(stack.resource, token=credential)
    grants = stack.idp.grants("client_credentials")
    first = await credential.bearer()
    assert {t.name for t in await tools.list_tools()} >= {"payments__get_balance"}
    assert await credential.bearer() == first and stack.idp.grants("client_credentials") == grants + 1
    claims = stack.idp.verify(first or "", audience=stack.resource)
    assert claims["exp"] - claims["iat"] == CC_TTL
    time.sleep(CC_TTL / 2 + 0.3)
    assert {t.name for t in await tools.list_tools()} >= {"payments__get_balance"}
    second = await credential.bearer()
    assert second != first and stack.idp.grants("client_credentials") == grants + 2 and credential.renewals == 2
    assert stack.idp.verify(second or "", audience=stack.resource)["sub"] == MACHINE


@pytest.mark.anyio
async def test_a_refused_renewal_is_a_credential_error(stack: Stack) -> None:
    credential = IssuedToken(IssuerClient(stack.idp.issuer, MACHINE, "wrong"), resource=stack.resource)
    with pytest.raises(CredentialError, match="invalid_client"):
        await credential.bearer()


def test_device_login_then_turns_with_the_kept_token(stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "dev.db"
    # No issuer given: found from the gateway's metadata.
    proc = dex_agent("--store", str(store), "login", "--gateway", stack.resource, "--client-id", PUBLIC)
    shown = proc.wait_for(r"To sign in, open (\S+) and enter the code (\S+)")
    stack.idp.approve_device(shown.group(1), shown.group(2), user="bob")
    assert proc.finish(timeout=60) == 0, proc.output
    assert "Logged in to" in proc.output
    kept = login_path(store)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    record = load_login(kept)
    assert record is not None and record.client_id == PUBLIC and record.resource == stack.resource
    assert record.tokens.refresh_token
    assert stack.idp.verify(record.tokens.access_token, audience=stack.resource)["sub"] == "bob"
    assert record.tokens.access_token not in proc.output

    # A turn sends the kept token (no token, no client secret in the environment).
    before = _balances(stack)
    turn = dex_agent("--store", str(store), "demo", "--gateway", stack.resource)
    assert turn.finish(timeout=90) == 0, turn.output
    assert _balances(stack) == before + 1
    assert load_login(kept) == record  # still fresh: not renewed

    # Past half its lifetime the next turn renews it with the refresh token, and keeps the new one (0600).
    refreshes = stack.idp.grants("refresh_token")
    time.sleep(USER_TTL / 2 + 0.3)
    turn = dex_agent("--store", str(store), "demo", "--gateway", stack.resource)
    assert turn.finish(timeout=90) == 0, turn.output
    assert _balances(stack) == before + 2
    assert stack.idp.grants("refresh_token") >= refreshes + 1
    renewed = load_login(kept)
    assert renewed is not None and renewed.tokens.access_token != record.tokens.access_token
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stack.idp.verify(renewed.tokens.access_token, audience=stack.resource)["sub"] == "bob"


def test_a_login_for_another_gateway_is_refused_by_name_and_logout_revokes_it(stack: Stack, tmp_path: Path) -> None:
    store = tmp_path / "other.db"
    proc = dex_agent("--store", str(store), "login", "--gateway", stack.resource, "--client-id", PUBLIC,
                     "--issuer", stack.idp.issuer)
    shown = proc.wait_for(r"To sign in, open (\S+) and enter the code (\S+)")
    stack.idp.approve_device(shown.group(1), shown.group(2), user="alice")
    assert proc.finish(timeout=60) == 0, proc.output
    other = "http://127.0.0.1:1/mcp"
    done = run_agent("--store", str(store), "demo", "--gateway", other)
    assert done.returncode == 2
    assert re.search(rf"the login in \S+ is for {re.escape(stack.resource)}, not {re.escape(other)}", done.stderr)
    assert json.loads(login_path(store).read_text())["resource"] == stack.resource

    # `logout` revokes the refresh token at the issuer and deletes the kept login.
    record = load_login(login_path(store))
    assert record is not None and record.tokens.refresh_token
    done = run_agent("--store", str(store), "logout")
    assert done.returncode == 0, done.stderr
    assert "the refresh token was revoked at the issuer" in done.stdout and not login_path(store).exists()
    with pytest.raises(IdpError, match="invalid_grant"):
        stack.idp.refresh(record.tokens.refresh_token, stack.resource)
    assert "Not logged in" in run_agent("--store", str(store), "logout").stdout


@pytest.mark.anyio
async def test_an_issuer_over_plain_http_off_loopback_is_refused() -> None:
    """Nothing is asked of an issuer that is not https:// (http:// only on loopback)."""
    credential = IssuedToken(IssuerClient("http://idp.example.com", MACHINE, "secret"), resource="http://127.0.0.1:1/mcp")
    with pytest.raises(CredentialError, match="must be an https:// URL"):
        await credential.bearer()
