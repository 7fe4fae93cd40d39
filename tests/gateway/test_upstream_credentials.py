"""Per-user upstream credentials (docs/auth.md, "Upstream credentials"), against real processes: the
test identity provider (oidc-provider, tests/support/idp.py), a real `dex-gateway serve` that
trusts it, and upstreams of our own (tests/support/token_server.py) that record the
`Authorization` of every request they receive.

    people      token_exchange      each caller's token exchanged for one whose aud is the upstream
    brief       token_exchange      the same, its tokens living 4 s (renewed 1 s before they expire)
    denied      token_exchange      the gateway's client there may not exchange: the provider refuses
    robot       client_credentials  the gateway's own token
    elsewhere   client_credentials  a token for another resource: the upstream answers 401
    legacy      token_exchange      spoken to on the handshake era, without sessions: works per caller
    sessions    token_exchange      the handshake era with Mcp-Session-Id sessions bound to their user:
                                    one session per caller, opened with that caller's token
    crowded     token_exchange      the same upstream, at most one caller session at a time
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.auth.principals import Identity
from gateway.config.model import HttpUpstreamConfig
from gateway.errors import UpstreamNotSent
from gateway.upstreams.credentials import UpstreamCredentials
from tests.gateway.helpers import KEY, OUTCOME, connect, mcp_errors, meta_of, new_key, text_of
from tests.support.gateway import RunningGateway, http_upstream, start_oauth_gateway
from tests.support.idp import EXCHANGER, TOKEN_EXCHANGE, Idp, IdpClient, default_clients
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT, STATE_DIR_ENV
from tests.support.token_server import ME, SCRIPT_PATH, claims_of, read_records

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

MODERN = "2026-07-28"
LIMITED = "limited-gateway"  # a client of the provider that has client credentials but no token exchange
STATIC_TOKEN = "ci-robot-static-token"
SECRET_ENV, LIMITED_SECRET_ENV = "DEX_TEST_IDP_SECRET", "DEX_TEST_IDP_LIMITED_SECRET"


@dataclass
class Upstream:
    url: str
    state: Path

    def calls(self) -> list[dict[str, Any]]:
        return [r for r in read_records(self.state) if r["method"] == "tools/call"]


@dataclass
class Setup:
    idp: Idp
    gateway: RunningGateway
    upstreams: dict[str, Upstream]

    def login(self, user: str) -> str:
        return str(self.idp.login_user_with_code(self.gateway.url, "mcp", user=user)["access_token"])


def _start_upstream(state: Path, *, stateful: bool = False) -> tuple[Any, Upstream]:
    state.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(SCRIPT_PATH), "--port", "0", "--check-audience", *(["--stateful"] if stateful else [])]
    process, url = spawn_listening(argv, cwd=REPO_ROOT, env={**os.environ, STATE_DIR_ENV: str(state)},
                                   name=state.name, lines=[], ready_timeout=20)
    assert url is not None, f"{state.name} did not start"
    return process, Upstream(url, state)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("creds")
    processes = []
    upstreams: dict[str, Upstream] = {}
    try:
        for name in ("people", "brief", "denied", "robot", "legacy", "sessions"):
            process, upstreams[name] = _start_upstream(root / name, stateful=name == "sessions")
            processes.append(process)
        limited = IdpClient(LIMITED, secrets.token_urlsafe(24), {
            "grant_types": ["client_credentials"], "response_types": [], "redirect_uris": [],
            "token_endpoint_auth_method": "client_secret_basic"})
        with Idp(clients={**default_clients(), LIMITED: limited},
                 resources={upstreams["brief"].url: {"ttl": 4}}) as idp:

            def auth(mode: str, **more: Any) -> dict[str, Any]:
                return {"mode": mode, "issuer": idp.issuer, "client_id": EXCHANGER, "client_secret_env": SECRET_ENV,
                        **more}

            config = {
                "auth": {
                    "tokens": [{"principal": "ci", "token_sha256": hashlib.sha256(STATIC_TOKEN.encode()).hexdigest()}],
                },
                "upstreams": [
                    http_upstream("people", upstreams["people"].url, protocol=MODERN, auth=auth("token_exchange")),
                    http_upstream("brief", upstreams["brief"].url, protocol=MODERN,
                                  auth=auth("token_exchange", refresh_before_seconds=1)),
                    http_upstream("denied", upstreams["denied"].url, protocol=MODERN,
                                  auth=auth("token_exchange", client_id=LIMITED, client_secret_env=LIMITED_SECRET_ENV)),
                    http_upstream("robot", upstreams["robot"].url, auth=auth("client_credentials")),
                    http_upstream("elsewhere", upstreams["robot"].url,
                                  auth=auth("client_credentials", resource="http://127.0.0.1:9/not-this-one")),
                    http_upstream("legacy", upstreams["legacy"].url, protocol="handshake",
                                  auth=auth("token_exchange")),
                    http_upstream("sessions", upstreams["sessions"].url, protocol="handshake",
                                  auth=auth("token_exchange")),
                    http_upstream("crowded", upstreams["sessions"].url, protocol="handshake",
                                  auth=auth("token_exchange", max_caller_sessions=1)),
                ],
            }
            env = {SECRET_ENV: idp.client(EXCHANGER).client_secret or "",
                   LIMITED_SECRET_ENV: limited.client_secret or ""}
            with start_oauth_gateway(root, idp.issuer, config, oauth={"required_scopes": []}, env=env) as (gateway, _):
                yield Setup(idp, gateway, upstreams)
    finally:
        for process in processes:
            terminate(process)


async def call(setup: Setup, token: str, tool: str, *, key: str | None = None) -> tuple[bool, str, dict[str, Any]]:
    async with connect(setup.gateway.url, MODERN, token=token) as client:
        result = await client.call_tool(tool, {}, meta={KEY: key} if key else None)
    return bool(result.is_error), text_of(result), meta_of(result)


def bearer_of(record: dict[str, Any]) -> str:
    authorization = record["authorization"]
    assert authorization is not None and authorization.startswith("Bearer ")
    return str(authorization[len("Bearer "):])


async def test_each_user_reaches_the_upstream_with_their_own_exchanged_token(setup: Setup) -> None:
    people = setup.upstreams["people"]
    seen = len(people.calls())
    alice, bob = setup.login("alice"), setup.login("bob")
    for token, user in ((alice, "alice"), (bob, "bob")):
        failed, text, _ = await call(setup, token, "people__whoami")
        assert not failed and text == f"called by {user}"
    received = people.calls()[seen:]
    assert len(received) == 2
    tokens = [bearer_of(r) for r in received]
    assert tokens[0] != tokens[1]
    assert alice not in tokens and bob not in tokens  # never the caller's own token
    for token, user in zip(tokens, ("alice", "bob")):
        claims = setup.idp.verify(token, audience=people.url)  # signed by the provider, for this upstream
        assert claims["sub"] == user and claims["act"] == {"sub": EXCHANGER}
    assert alice not in setup.gateway.log and tokens[0] not in setup.gateway.log  # never logged


async def test_a_session_less_handshake_era_upstream_gets_each_caller_s_token(setup: Setup) -> None:
    legacy = setup.upstreams["legacy"]
    seen = len(legacy.calls())
    for user in ("alice", "bob"):
        failed, text, _ = await call(setup, setup.login(user), "legacy__whoami")
        assert not failed and text == f"called by {user}", text
    subjects = [setup.idp.verify(bearer_of(r), audience=legacy.url)["sub"] for r in legacy.calls()[seen:]]
    assert subjects == ["alice", "bob"]


def _sessions_of(records: list[dict[str, Any]], idp: Idp, audience: str) -> dict[str, set[str]]:
    """Per subject of the exchanged token: the upstream sessions its calls came on."""
    out: dict[str, set[str]] = {}
    for record in records:
        out.setdefault(idp.verify(bearer_of(record), audience=audience)["sub"], set()).add(record["session"])
    return out


async def test_an_upstream_that_keeps_sessions_gets_one_session_per_caller(setup: Setup) -> None:
    # The upstream binds each session to the user whose token opened it (403 for anyone else): the
    # gateway's own session (its listings) cannot carry a caller's call, so each caller gets one.
    sessions = setup.upstreams["sessions"]
    seen = len(sessions.calls())
    alice, bob = setup.login("alice"), setup.login("bob")
    for token, user in ((alice, "alice"), (bob, "bob"), (alice, "alice"), (bob, "bob")):
        failed, text, _ = await call(setup, token, "sessions__whoami")
        assert not failed and text == f"called by {user}", text
    calls = [r for r in sessions.calls()[seen:] if r["name"] == "whoami"]
    by_user = _sessions_of(calls, setup.idp, sessions.url)
    assert set(by_user) == {"alice", "bob"}
    assert all(len(ids) == 1 and None not in ids for ids in by_user.values()), by_user  # one each, reused
    assert by_user["alice"] != by_user["bob"]
    opened = [r for r in read_records(sessions.state) if r["method"] == "initialize"]
    openers = {claims_of(bearer_of(r)).get("sub") for r in opened}
    assert {"alice", "bob"} <= openers  # each caller's session opened with that caller's exchanged token
    assert alice not in setup.gateway.log and bob not in setup.gateway.log


async def test_caller_sessions_past_their_bound_are_closed_and_reopened(setup: Setup) -> None:
    sessions = setup.upstreams["sessions"]
    seen = len(sessions.calls())
    alice, bob = setup.login("alice"), setup.login("bob")
    for token, user in ((alice, "alice"), (bob, "bob"), (alice, "alice")):
        failed, text, _ = await call(setup, token, "crowded__whoami")
        assert not failed and text == f"called by {user}", text
    first, second, third = (r["session"] for r in sessions.calls()[seen:] if r["name"] == "whoami")
    assert len({first, second, third}) == 3  # alice's first session was closed to make room for bob's


async def test_a_second_call_reuses_the_cached_exchange(setup: Setup) -> None:
    people = setup.upstreams["people"]
    token = setup.login("alice")
    await call(setup, token, "people__whoami")  # cached now (if an earlier test did not already)
    before = setup.idp.grants(TOKEN_EXCHANGE)
    seen = len(people.calls())
    for _ in range(3):
        failed, text, _ = await call(setup, token, "people__whoami")
        assert not failed, text
    assert setup.idp.grants(TOKEN_EXCHANGE) == before
    assert len({bearer_of(r) for r in people.calls()[seen:]}) == 1


async def test_a_token_near_its_expiry_is_exchanged_again(setup: Setup) -> None:
    brief = setup.upstreams["brief"]
    token = setup.login("bob")
    before = setup.idp.grants(TOKEN_EXCHANGE)
    await call(setup, token, "brief__whoami")
    await call(setup, token, "brief__whoami")
    assert setup.idp.grants(TOKEN_EXCHANGE) == before + 1  # lives 4 s, used for 3 s
    time.sleep(3.2)
    failed, text, _ = await call(setup, token, "brief__whoami")
    assert not failed and text == "called by bob"
    assert setup.idp.grants(TOKEN_EXCHANGE) == before + 2
    first, second, renewed = (bearer_of(r) for r in brief.calls()[-3:])
    assert first == second != renewed
    assert setup.idp.verify(renewed, audience=brief.url)["sub"] == "bob"


async def test_an_exchange_the_provider_refuses_is_a_clear_failure_and_nothing_is_sent(setup: Setup) -> None:
    denied = setup.upstreams["denied"]
    errors_before = setup.idp.stats()["errors"].get(TOKEN_EXCHANGE, 0)
    failed, text, meta = await call(setup, setup.login("alice"), "denied__whoami")
    assert failed
    assert "did not run" in text and "refused the token exchange" in text, text
    assert "grant type is not allowed for this client" in text, text  # the provider's own words
    assert meta.get(OUTCOME) != "unknown"
    assert denied.calls() == []  # the upstream saw no call
    assert setup.idp.stats()["errors"].get(TOKEN_EXCHANGE, 0) == errors_before + 1  # asked once, never again


async def test_a_refused_exchange_leaves_the_write_s_key_free(setup: Setup) -> None:
    """Not sent, so the fence releases the key: the same key sent again is tried again (the provider
    is asked again), never answered from the fence as unknown or in progress."""
    denied = setup.upstreams["denied"]
    alice, key = setup.login("alice"), new_key("refused")
    errors_before = setup.idp.stats()["errors"].get(TOKEN_EXCHANGE, 0)
    for _ in range(2):
        failed, text, meta = await call(setup, alice, "denied__note", key=key)
        assert failed and "did not run" in text and "Nothing was sent" in text, text
        assert meta.get(OUTCOME) != "unknown"
    assert setup.idp.stats()["errors"].get(TOKEN_EXCHANGE, 0) == errors_before + 2
    assert denied.calls() == []
    failed, text, _ = await call(setup, alice, "people__note", key=key)  # the key works where the exchange does
    assert not failed and text == "called by alice"


async def test_a_static_token_principal_cannot_call_a_token_exchange_upstream(setup: Setup) -> None:
    people = setup.upstreams["people"]
    seen = len(people.calls())
    failed, text, meta = await call(setup, STATIC_TOKEN, "people__whoami")
    assert failed
    assert "did not run" in text and "'ci' has no OAuth access token to exchange" in text, text
    assert meta.get(OUTCOME) != "unknown"
    assert people.calls()[seen:] == []


async def test_client_credentials_sends_the_gateway_own_token(setup: Setup) -> None:
    robot = setup.upstreams["robot"]
    alice = setup.login("alice")
    seen = len(robot.calls())
    failed, text, _ = await call(setup, alice, "robot__whoami")
    assert not failed and text == f"called by {EXCHANGER}"
    (record,) = robot.calls()[seen:]
    claims = setup.idp.verify(bearer_of(record), audience=robot.url)
    assert claims["client_id"] == EXCHANGER and claims["sub"] == EXCHANGER
    assert bearer_of(record) != alice


async def test_an_upstream_401_is_a_clear_failure_naming_its_requirement_never_unknown(setup: Setup) -> None:
    robot = setup.upstreams["robot"]
    seen = len(robot.calls())
    failed, text, meta = await call(setup, setup.login("alice"), "elsewhere__whoami")
    assert failed
    assert "did not run" in text and "HTTP 401" in text and "invalid_token" in text, text
    assert "/.well-known/oauth-protected-resource/mcp" in text  # the upstream's resource metadata
    assert meta.get(OUTCOME) != "unknown"
    assert len(robot.calls()[seen:]) == 1  # refused once, never sent again


async def test_a_resource_is_read_with_the_caller_s_exchanged_token(setup: Setup) -> None:
    """`resources/read` goes like a call: alice's exchanged token; a static principal gets a clear
    error and nothing reaches the upstream. (Every upstream here serves whoami://me; the first in
    config order, `people`, serves it.)"""
    people = setup.upstreams["people"]
    seen = len(read_records(people.state))
    async with connect(setup.gateway.url, MODERN, token=setup.login("alice")) as client:
        result = await client.read_resource(ME)
    assert [getattr(c, "text", None) for c in result.contents] == ["read by alice"]
    (record,) = [r for r in read_records(people.state)[seen:] if r["method"] == "resources/read"]
    assert setup.idp.verify(bearer_of(record), audience=people.url)["sub"] == "alice"
    seen = len(read_records(people.state))
    with pytest.raises(BaseException) as refused:
        async with connect(setup.gateway.url, MODERN, token=STATIC_TOKEN) as client:
            await client.read_resource(ME)
    (error,) = mcp_errors(refused.value)
    assert "nothing was sent to the upstream 'people'" in str(error) and "has no OAuth access token" in str(error)
    assert [r for r in read_records(people.state)[seen:] if r["method"] == "resources/read"] == []


def test_a_static_principal_token_is_never_forwarded(setup: Setup) -> None:
    for upstream in setup.upstreams.values():
        for record in read_records(upstream.state):
            assert record["authorization"] != f"Bearer {STATIC_TOKEN}"
            if record["authorization"]:
                assert claims_of(bearer_of(record)).get("aud") != setup.gateway.url  # never a token for the gateway


# -- the token source itself (gateway/upstreams/credentials.py), against the same provider ----------


def _credentials(setup: Setup, upstream: str, **auth: Any) -> UpstreamCredentials:
    config = HttpUpstreamConfig.model_validate({
        "name": upstream, "transport": "streamable_http", "url": setup.upstreams[upstream].url, "protocol": MODERN,
        "auth": {"mode": "token_exchange", "issuer": setup.idp.issuer, "client_id": EXCHANGER,
                 "client_secret_env": SECRET_ENV, **auth}})
    return UpstreamCredentials(config, environ={SECRET_ENV: setup.idp.client(EXCHANGER).client_secret or ""})


async def test_concurrent_calls_of_one_user_share_one_exchange(setup: Setup) -> None:
    credentials = _credentials(setup, "people")
    alice = Identity("alice", token=setup.login("alice"))
    before = setup.idp.grants(TOKEN_EXCHANGE)
    try:
        bearers = await asyncio.gather(*(credentials.bearer(alice) for _ in range(20)))
    finally:
        await credentials.aclose()
    assert setup.idp.grants(TOKEN_EXCHANGE) == before + 1
    assert len({b.token for b in bearers}) == 1
    assert bearers[0].token not in repr(bearers[0]) and bearers[0].token not in repr(credentials)


async def test_the_cache_is_bounded_least_recently_used_first(setup: Setup) -> None:
    credentials = _credentials(setup, "people", max_cached_tokens=1)
    alice = Identity("alice", token=setup.login("alice"))
    bob = Identity("bob", token=setup.login("bob"))
    before = setup.idp.grants(TOKEN_EXCHANGE)
    try:
        for caller in (alice, alice, bob, alice):  # bob's token pushes alice's out
            await credentials.bearer(caller)
    finally:
        await credentials.aclose()
    assert setup.idp.grants(TOKEN_EXCHANGE) == before + 3


async def test_an_exchanged_token_is_not_reused_past_the_caller_s_own_token(setup: Setup) -> None:
    credentials = _credentials(setup, "people")  # its tokens live 120 s, reused for 90 s
    alice = Identity("alice", token=setup.login("alice"), expires_at=time.time() + 1.0)
    before = setup.idp.grants(TOKEN_EXCHANGE)
    try:
        first = await credentials.bearer(alice)
        assert await credentials.bearer(alice) == first
        await asyncio.sleep(1.2)
        assert await credentials.bearer(alice) != first
    finally:
        await credentials.aclose()
    assert setup.idp.grants(TOKEN_EXCHANGE) == before + 2


async def test_a_caller_without_a_token_gets_no_exchange_and_a_clear_error(setup: Setup) -> None:
    credentials = _credentials(setup, "people")
    before = setup.idp.stats()
    try:
        with pytest.raises(UpstreamNotSent, match="principal 'ci' has no OAuth access token to exchange"):
            await credentials.bearer(Identity("ci"))
    finally:
        await credentials.aclose()
    assert setup.idp.stats() == before  # nothing asked of the provider
