"""The gateway as an OAuth 2.1 resource server (issue 23; docs/auth.md), against a real
`dex-gateway serve` and a real authorization server's public side on loopback (discovery and JWKS
served over HTTP by tests/support/jwks_issuer.py, keys made in the test, tokens signed in the test):

* RFC 9728 metadata at both well-known forms; a 401 names it (`resource_metadata`) and the scope;
* a valid token works through the official SDK client, in both eras;
* each bad token is refused 401 `invalid_token` with its reason (403 `insufficient_scope` with the
  scope for a missing scope), the reason is logged without the token, and nothing runs upstream;
* unknown kids refetch the JWKS at a bounded rate, and a rotation at the issuer takes effect
  without a restart (a removed key's tokens refused, a new key's accepted);
* grants by group: a finance user sees and calls the billing tools, another does not;
* static tokens keep working beside `auth.oauth`; config errors name file and line.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.gateway.helpers import all_tools, connect, text_of
from tests.gateway.test_gateway_http import sha
from tests.support.gateway import RunningGateway, run_gateway_cli, start_gateway, stdio_upstream, write_config
from tests.support.jwks_issuer import JwksIssuer, SigningKey, make_key, unsigned_token
from tests.support.servers import count_executions, free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

STATIC = "static-ci-token-5e1f"
REFETCH_SECONDS = 2.0
SECRET_ENV = "DEX_TEST_INTROSPECTION_SECRET"


@dataclass
class Setup:
    gateway: RunningGateway
    idp: JwksIssuer
    key: SigningKey
    resource: str
    billing_state: Path

    def token(self, sub: str = "alice", *, groups: list[str] | None = None, key: SigningKey | None = None,
              **claims: Any) -> str:
        claims.setdefault("aud", self.resource)
        claims.setdefault("scope", "mcp openid")
        return self.idp.token(key or self.key, sub=sub, groups=groups if groups is not None else ["finance"], **claims)


def _config(root: Path, idp: JwksIssuer, port: int, **oauth: Any) -> Path:
    return write_config(root, {
        "auth": {
            "tokens": [{"principal": "ci", "token_sha256": sha(STATIC), "tools": ["notes__*"]}],
            "oauth": {
                "resource": f"http://127.0.0.1:{port}/mcp",
                # jwks_uri from its openid-configuration; opaque tokens introspected there.
                "issuers": [{"issuer": idp.url, "introspection_endpoint": f"{idp.url}/introspect",
                             "introspection_client_id": idp.client[0],
                             "introspection_client_secret_env": SECRET_ENV}],
                "required_scopes": ["mcp"],
                "jwks_min_refetch_seconds": REFETCH_SECONDS,
                "leeway_seconds": 5,
                "grants": [
                    {"when": {"groups": ["finance"]}, "tools": ["billing__*"], "upstreams": ["notes"]},
                    {"when": {"groups": ["staff"]}, "tools": ["notes__*"]},
                ],
                **oauth,
            },
        },
        "upstreams": [
            stdio_upstream("billing", "dex_server", state_dir=root / "billing"),
            stdio_upstream("notes", "plain_server", state_dir=root / "notes", keyless_writes="pass"),
        ],
    })


@contextmanager
def _running(root: Path, **oauth: Any) -> Iterator[Setup]:
    with JwksIssuer() as idp:
        key = idp.add_key("k1")
        port = free_port()
        with start_gateway(_config(root, idp, port, **oauth), port=port, env={SECRET_ENV: idp.client[1]}) as gateway:
            yield Setup(gateway, idp, key, f"http://127.0.0.1:{port}/mcp", root / "billing")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    with _running(tmp_path_factory.mktemp("oauth")) as running:
        yield running


def _post(setup: Setup, token: str | None, method: str = "tools/list", params: dict[str, Any] | None = None,
          ) -> httpx.Response:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
               "mcp-protocol-version": "2025-11-25"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    body = {"jsonrpc": "2.0", "id": 1, "method": method, **({"params": params} if params else {})}
    return httpx.post(setup.gateway.url, json=body, headers=headers, timeout=30)


def _challenge(response: httpx.Response) -> dict[str, str]:
    """The auth-params of a `WWW-Authenticate: Bearer ...` challenge."""
    value = response.headers.get("www-authenticate", "")
    assert value.startswith("Bearer "), value
    return dict(re.findall(r'(\w+)="([^"]*)"', value))


def _refused_call(setup: Setup, token: str) -> httpx.Response:
    """A tools/call of a billing read with `token`: it must be refused before anything runs."""
    before = count_executions(setup.billing_state)
    response = _post(setup, token, "tools/call", {"name": "billing__get_balance", "arguments": {"account": "a"}})
    assert response.status_code in (401, 403), (response.status_code, response.text)
    assert "Traceback" not in response.text
    assert count_executions(setup.billing_state) == before, "a refused call ran upstream"
    return response


# -- discovery -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"])
def test_protected_resource_metadata(setup: Setup, path: str) -> None:
    response = httpx.get(setup.gateway.base + path, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {
        "resource": setup.resource,
        "authorization_servers": [setup.idp.url],
        "scopes_supported": ["mcp"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Dex MCP Gateway",
    }


def test_a_request_without_a_token_is_told_where_to_get_one(setup: Setup) -> None:
    response = _post(setup, None)
    assert response.status_code == 401
    challenge = _challenge(response)
    assert challenge == {"resource_metadata": f"{setup.gateway.base}/.well-known/oauth-protected-resource/mcp",
                         "scope": "mcp"}, challenge  # no error code without a token (RFC 6750 3.1)
    assert response.json()["error"]["code"] == -32000


# -- accepted ------------------------------------------------------------------------------------


async def test_a_valid_token_works_through_the_sdk_client(setup: Setup, era: str) -> None:
    before = count_executions(setup.billing_state, tool="get_balance")
    async with connect(setup.gateway.url, era, token=setup.token("alice")) as client:
        names = {t.name for t in await all_tools(client)}
        result = await client.call_tool("billing__get_balance", {"account": "alice"})
    assert result.is_error is False, text_of(result)
    assert "billing__get_balance" in names and "notes__list_notes" in names
    assert count_executions(setup.billing_state, tool="get_balance") == before + 1


def test_an_opaque_token_is_introspected_and_the_answer_reused(setup: Setup) -> None:
    token = _opaque(setup.idp, setup.resource)
    before = setup.idp.introspections
    for _ in range(3):
        response = _post(setup, token)
        assert response.status_code == 200, response.text
    assert any(t["name"].startswith("billing__") for t in _result(response)["tools"])
    assert setup.idp.introspections == before + 1  # cached (introspection_cache_seconds)
    assert token not in setup.gateway.log


def test_static_tokens_keep_working_beside_oauth(setup: Setup) -> None:
    response = _post(setup, STATIC)
    assert response.status_code == 200, response.text
    names = {t["name"] for t in _result(response)["tools"]}
    assert names and all(n.startswith("notes__") for n in names), names


def _result(response: httpx.Response) -> dict[str, Any]:
    text = response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip())
    message = json.loads(text)
    assert "result" in message, message
    return dict(message["result"])


# -- refused -------------------------------------------------------------------------------------


def _bad_tokens(setup: Setup) -> dict[str, tuple[str, str]]:
    """case -> (token, a word of the reason)."""
    idp, key, now = setup.idp, setup.key, int(time.time())
    good = idp.claims(sub="mallory", aud=setup.resource, scope="mcp", groups=["finance"])
    stranger_key = make_key("k1")  # the issuer's kid, someone else's key
    return {
        "expired": (idp.token(key, **{**good, "iat": now - 600, "exp": now - 300}), "expired"),
        "not_yet_valid": (idp.token(key, **{**good, "nbf": now + 600}), "not valid yet"),
        "wrong_audience": (idp.token(key, **{**good, "aud": "some-client-id"}), "not for this resource"),
        "another_resource": (idp.token(key, **{**good, "aud": "http://127.0.0.1:1/mcp"}), "not for this resource"),
        "wrong_issuer": (idp.token(key, **{**good, "iss": "http://127.0.0.1:1"}), "not trusted"),
        "forged_signature": (idp.token(stranger_key, **good), "signature"),
        "unknown_kid": (idp.token(key, headers={"kid": "never-published"}, **good), "no key 'never-published'"),
        "alg_none": (unsigned_token({"alg": "none", "typ": "JWT", "kid": "k1"}, good), "'none' is not accepted"),
        "hs256_with_the_public_key": (
            unsigned_token({"alg": "HS256", "typ": "JWT", "kid": "k1"}, good, secret=key.public_pem()),
            "'HS256' is not accepted"),
        "opaque_unknown": ("opaque-token-nobody-issued", "not active"),
        "opaque_for_another_resource": (_opaque(idp, "http://127.0.0.1:1/mcp"), "not for this resource"),
        "key_of_another_type": (idp.token(make_key("k1", "ES256"), **good), "does not verify ES256"),
        "no_expiry": (idp.token(key, **{k: v for k, v in good.items() if k != "exp"}), "'exp'"),
    }


def _opaque(idp: JwksIssuer, aud: str, **claims: Any) -> str:
    """An opaque token the issuer introspects as active for `aud`."""
    token = f"opaque-{uuid.uuid4().hex}"
    idp.opaque[token] = {"iss": idp.url, "sub": "olga", "aud": aud, "scope": "mcp", "groups": ["finance"],
                         "exp": int(time.time()) + 300, **claims}
    return token


BAD = ["expired", "not_yet_valid", "wrong_audience", "another_resource", "wrong_issuer", "forged_signature",
       "unknown_kid", "alg_none", "hs256_with_the_public_key", "no_expiry", "key_of_another_type",
       "opaque_unknown", "opaque_for_another_resource"]


@pytest.mark.parametrize("case", BAD)
def test_a_bad_token_is_refused_with_its_reason_and_nothing_runs(setup: Setup, case: str) -> None:
    token, reason = _bad_tokens(setup)[case]
    mark = setup.gateway.log_mark()
    response = _refused_call(setup, token)
    assert response.status_code == 401
    challenge = _challenge(response)
    assert challenge["error"] == "invalid_token"
    assert reason.lower() in challenge["error_description"].lower(), challenge
    assert challenge["resource_metadata"].endswith("/.well-known/oauth-protected-resource/mcp")
    message = response.json()["error"]["message"]
    assert message.startswith("Unauthorized: ") and reason.lower() in message.lower(), message
    # The reason is logged; the token never is.
    setup.gateway.wait_for_log(r"auth: POST /mcp .* refused \(401 invalid_token\)", since=mark)
    assert token not in setup.gateway.log


def test_a_token_without_the_required_scope_is_403_with_the_scope(setup: Setup) -> None:
    response = _refused_call(setup, setup.token("alice", scope="openid profile"))
    assert response.status_code == 403
    challenge = _challenge(response)
    assert challenge["error"] == "insufficient_scope" and challenge["scope"] == "mcp", challenge
    assert "mcp" in response.json()["error"]["message"]


# -- scope from claims ---------------------------------------------------------------------------


async def test_grants_by_group(setup: Setup) -> None:
    async with connect(setup.gateway.url, "legacy", token=setup.token("fiona", groups=["finance"])) as finance:
        finance_tools = {t.name for t in await all_tools(finance)}
        paid = await finance.call_tool("billing__get_balance", {"account": "fiona"})
    async with connect(setup.gateway.url, "legacy", token=setup.token("sam", groups=["staff"])) as staff:
        staff_tools = {t.name for t in await all_tools(staff)}
        with pytest.raises(MCPError) as refused:
            await staff.call_tool("billing__get_balance", {"account": "fiona"})
    async with connect(setup.gateway.url, "legacy", token=setup.token("nobody", groups=["guests"])) as guest:
        guest_tools = {t.name for t in await all_tools(guest)}
    assert paid.is_error is False, text_of(paid)
    assert any(n.startswith("billing__") for n in finance_tools)
    assert staff_tools and not any(n.startswith("billing__") for n in staff_tools), staff_tools
    assert "unknown tool" in refused.value.error.message
    assert guest_tools == set()  # no grant matches and no default: nothing


async def test_a_principals_scope_follows_its_latest_token(setup: Setup) -> None:
    """Groups changed at the identity provider take effect with the principal's next token."""
    async with connect(setup.gateway.url, "legacy", token=setup.token("pat", groups=["staff"])) as before:
        assert not any(t.name.startswith("billing__") for t in await all_tools(before))
    async with connect(setup.gateway.url, "legacy", token=setup.token("pat", groups=["finance"])) as after:
        assert any(t.name.startswith("billing__") for t in await all_tools(after))


# -- keys: refetch bound and rotation ------------------------------------------------------------


def test_unknown_kids_refetch_the_jwks_at_a_bounded_rate_and_rotation_needs_no_restart(
        tmp_path: Path) -> None:
    with _running(tmp_path) as setup:
        idp = setup.idp
        old = setup.token("alice")
        assert _post(setup, old).status_code == 200
        fetched = idp.jwks_fetches
        assert fetched == 1
        # A spray of made-up kids within the refetch interval: at most one more fetch.
        started = time.monotonic()
        for i in range(40):
            sprayed = setup.token("alice", headers={"kid": f"spray-{uuid.uuid4().hex}-{i}"})
            response = _post(setup, sprayed)
            assert response.status_code == 401 and "no key" in _challenge(response)["error_description"]
        assert time.monotonic() - started < REFETCH_SECONDS * 4
        assert idp.jwks_fetches <= fetched + 1 + int((time.monotonic() - started) / REFETCH_SECONDS), idp.jwks_fetches
        # Past the interval, one unknown kid is refused only after the JWKS was fetched again.
        time.sleep(REFETCH_SECONDS + 0.2)
        fetched = idp.jwks_fetches
        response = _post(setup, setup.token("alice", headers={"kid": "published-nowhere"}))
        assert response.status_code == 401
        assert "its JWKS was checked" in _challenge(response)["error_description"]
        assert idp.jwks_fetches == fetched + 1
        # The issuer rotates: k1 is gone, k2 is new. Past the interval, k2's token makes the gateway
        # fetch again; from then on k1's tokens are refused.
        new_key = idp.add_key("k2", "ES256")
        idp.rotate(new_key)
        time.sleep(REFETCH_SECONDS + 0.2)
        assert _post(setup, setup.token("alice", key=new_key)).status_code == 200
        response = _post(setup, old)
        assert response.status_code == 401, response.text
        assert "no key 'k1'" in _challenge(response)["error_description"]
        assert setup.gateway.process is not None and setup.gateway.process.poll() is None  # never restarted


# -- config ----------------------------------------------------------------------------------------


BAD_CONFIGS = {
    "http_issuer_beyond_loopback": ("""auth:
  oauth:
    resource: "https://gateway.example.com/mcp"
    issuers:
      - issuer: "http://idp.example.com"
""", 5, ["auth.oauth.issuers.0.issuer", "http://", "loopback"]),
    "none_among_algorithms": ("""auth:
  oauth:
    resource: "https://gateway.example.com/mcp"
    issuers:
      - issuer: "https://idp.example.com"
    algorithms: [RS256, none]
""", 6, ["auth.oauth.algorithms", "'none'"]),
    "symmetric_algorithm": ("""auth:
  oauth:
    resource: "https://gateway.example.com/mcp"
    algorithms: [HS256]
    issuers:
      - issuer: "https://idp.example.com"
""", 4, ["auth.oauth.algorithms", "HS256", "symmetric"]),
    "bad_resource_url": ("""auth:
  oauth:
    issuers:
      - issuer: "https://idp.example.com"
    resource: "gateway.example.com/mcp"
""", 5, ["auth.oauth.resource", "absolute"]),
    "grant_names_unknown_upstream": ("""auth:
  oauth:
    resource: "https://gateway.example.com/mcp"
    issuers:
      - issuer: "https://idp.example.com"
    grants:
      - when: {groups: [finance]}
        upstreams: [nope]
""", 8, ["auth.oauth.grants.0.upstreams.0", "'nope'"]),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_oauth_config_errors_name_file_and_line(tmp_path: Path, case: str) -> None:
    text, line, words = BAD_CONFIGS[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    done = run_gateway_cli("serve", "--config", str(path), "--port", "0", timeout=30)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    assert line in [int(m) for m in re.findall(re.escape(str(path)) + r":(\d+)", done.stderr)], done.stderr
    for word in words:
        assert word.lower() in done.stderr.lower(), (word, done.stderr)


def test_a_missing_introspection_secret_is_named_at_start(tmp_path: Path) -> None:
    with JwksIssuer() as idp:
        path = _config(tmp_path, idp, free_port())
        done = run_gateway_cli("serve", "--config", str(path), "--port", "0", env={SECRET_ENV: ""}, timeout=30)
    assert done.returncode == 2, done.stderr
    assert SECRET_ENV in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_oauth_counts_as_auth_for_binding_beyond_loopback(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("""server:
  host: 0.0.0.0
auth:
  oauth:
    resource: "https://gateway.example.com/mcp"
    issuers:
      - issuer: "https://idp.example.com"
""")
    done = run_gateway_cli("tools", "--config", str(path), "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    path.write_text("server:\n  host: 0.0.0.0\n")
    refused = run_gateway_cli("tools", "--config", str(path), "--json", timeout=60)
    assert refused.returncode == 2 and "auth.oauth" in refused.stderr, refused.stderr
