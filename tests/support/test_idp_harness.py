"""The test identity provider (tests/support/idp.py: oidc-provider on loopback) does what the auth
tests will rely on: JWT access tokens for the RFC 8707 resource, verifiable against its JWKS; a user
logged in through its pages with authorization code + PKCE, or the device flow; RFC 8693 token
exchange for an upstream's audience; key rotation across a restart; counted grants."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import anyio
import httpx
import jwt
import pytest
from pydantic import AnyUrl

from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthMetadata
from tests.support.idp import EXCHANGER, MACHINE, PUBLIC, TOKEN_EXCHANGE, Idp, IdpError

GATEWAY = "http://127.0.0.1:8080/mcp"
UPSTREAM = "http://127.0.0.1:9100/mcp"
EC_RESOURCE = "http://127.0.0.1:9200/mcp"
SHORT = "http://127.0.0.1:9300/mcp"
OPAQUE = "http://127.0.0.1:9400/api"
EXCHANGE_TTL = 90


@pytest.fixture(scope="module")
def idp() -> Iterator[Idp]:
    with Idp(exchange_token_ttl=EXCHANGE_TTL, resources={EC_RESOURCE: {"alg": "ES256"}, SHORT: {"ttl": 1}, OPAQUE: {"format": "opaque"}},
             exchange_subject_audiences={EXCHANGER: [GATEWAY, SHORT]}) as started:
        yield started


def _header(token: str) -> dict[str, str]:
    return dict(json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "==")))


def test_the_provider_publishes_discovery_and_keys(idp: Idp) -> None:
    metadata = idp.metadata()
    assert metadata["issuer"] == idp.issuer and idp.issuer.startswith("http://127.0.0.1:")
    assert TOKEN_EXCHANGE in metadata["grant_types_supported"]
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["registration_endpoint"] == f"{idp.issuer}/reg"
    assert {"introspection_endpoint", "revocation_endpoint", "device_authorization_endpoint"} <= set(metadata)
    keys = idp.jwks()["keys"]
    assert {k["alg"] for k in keys} == {"RS256", "ES256"}
    assert not any("d" in k for k in keys), "private key material published"


def test_a_client_credentials_token_is_a_jwt_for_the_resource(idp: Idp) -> None:
    answer = idp.client_credentials_token(GATEWAY, "mcp")
    token = answer["access_token"]
    assert _header(token)["typ"] == "at+jwt" and _header(token)["alg"] == "RS256"
    claims = idp.verify(token, audience=GATEWAY)
    assert claims["aud"] == GATEWAY and claims["sub"] == MACHINE and claims["client_id"] == MACHINE
    assert claims["scope"] == "mcp" and answer["expires_in"] == 600
    with pytest.raises(jwt.InvalidAudienceError):
        idp.verify(token, audience=UPSTREAM)
    # A scope the resource does not offer is not granted; a resource that is not loopback is refused.
    assert "scope" not in idp.client_credentials_token(GATEWAY, "payroll")
    with pytest.raises(IdpError, match="invalid_target"):
        idp.client_credentials_token("https://example.com/mcp", "mcp")
    wrong = httpx.post(f"{idp.issuer}/token", data={"grant_type": "client_credentials", "resource": GATEWAY},
                       auth=(MACHINE, "wrong"))
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"


def test_a_resource_can_be_signed_with_es256(idp: Idp) -> None:
    token = idp.client_credentials_token(EC_RESOURCE, "mcp")["access_token"]
    assert _header(token)["alg"] == "ES256"
    assert idp.verify(token, audience=EC_RESOURCE)["aud"] == EC_RESOURCE


def test_an_opaque_token_is_introspected_and_revoked(idp: Idp) -> None:
    token = idp.client_credentials_token(OPAQUE, "mcp")["access_token"]
    assert token.count(".") == 0
    found = idp.introspect(token)
    assert found["active"] is True and found["aud"] == OPAQUE and found["client_id"] == MACHINE
    assert found["scope"] == "mcp" and found["token_type"] == "Bearer"
    idp.revoke(token)
    assert idp.introspect(token) == {"active": False}


def test_a_user_logs_in_with_code_and_pkce(idp: Idp) -> None:
    tokens = idp.login_user_with_code(GATEWAY, "openid mcp", user="alice")
    claims = idp.verify(tokens["access_token"], audience=GATEWAY)
    assert claims["sub"] == "alice" and claims["client_id"] == PUBLIC
    assert claims["groups"] == ["engineering", "admins"] and claims["scope"] == "mcp"
    assert tokens["refresh_token"] and tokens["id_token"]
    refreshed = idp.refresh(tokens["refresh_token"], GATEWAY)
    assert idp.verify(refreshed["access_token"], audience=GATEWAY)["groups"] == ["engineering", "admins"]
    bob = idp.verify(idp.login_user_with_code(GATEWAY, "mcp", user="bob")["access_token"], audience=GATEWAY)
    assert bob["sub"] == "bob" and bob["groups"] == ["support"]


def test_a_wrong_password_or_no_pkce_gets_no_code(idp: Idp) -> None:
    with pytest.raises(IdpError, match="401"):
        idp.login_user_with_code(GATEWAY, "mcp", user="alice", password="not-the-password")
    # PKCE is required: without a code challenge the provider answers the client with an error.
    with pytest.raises(IdpError, match="requires PKCE"):
        idp.browser("alice").authorize(idp.authorization_url(GATEWAY, "mcp"))


def test_the_mcp_sdk_handlers_return_code_state_and_issuer(idp: Idp) -> None:
    """The pair a test gives `mcp.client.auth.OAuthClientProvider`: the redirect handler logs in."""
    redirect_handler, callback_handler = idp.browser("alice").handlers()

    async def flow() -> tuple[str, str | None, str | None]:
        await redirect_handler(idp.authorization_url(GATEWAY, "mcp", state="s-1", code_challenge="x" * 43))
        result = await callback_handler()
        return result.code, result.state, result.iss

    code, state, iss = anyio.run(flow)
    assert code and state == "s-1" and iss == idp.issuer


def test_a_dynamically_registered_client_logs_in_for_the_resource(idp: Idp) -> None:
    """What an MCP SDK client does by itself: read the discovery document, register (RFC 7591) with
    the SDK's own client metadata, then code + PKCE with `resource`."""
    discovered = OAuthMetadata.model_validate(idp.metadata())
    assert str(discovered.issuer).rstrip("/") == idp.issuer and discovered.registration_endpoint is not None
    callback = "http://127.0.0.1:53682/callback"
    body = OAuthClientMetadata(redirect_uris=[AnyUrl(callback)], scope="mcp", client_name="an MCP client")
    registered = idp.register_client(body.model_dump(by_alias=True, mode="json", exclude_none=True))
    info = OAuthClientInformationFull.model_validate(registered)
    assert info.client_id and info.client_secret and info.scope == "mcp"
    tokens = idp.login_user_with_code(GATEWAY, "mcp", user="bob", client=info.client_id, redirect_uri=callback)
    claims = idp.verify(tokens["access_token"], audience=GATEWAY)
    assert claims["sub"] == "bob" and claims["client_id"] == info.client_id and claims["groups"] == ["support"]


def test_the_device_flow_logs_a_user_in(idp: Idp) -> None:
    tokens = idp.device_login(GATEWAY, "mcp", user="bob")
    claims = idp.verify(tokens["access_token"], audience=GATEWAY)
    assert claims["sub"] == "bob" and claims["groups"] == ["support"]


def test_token_exchange_issues_a_token_for_the_upstream(idp: Idp) -> None:
    user_token = idp.login_user_with_code(GATEWAY, "mcp mcp:admin", user="alice")["access_token"]
    answer = idp.exchange_token(user_token, UPSTREAM, scope="mcp")
    assert answer["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    assert answer["expires_in"] == EXCHANGE_TTL and answer["scope"] == "mcp"
    claims = idp.verify(answer["access_token"], audience=UPSTREAM)
    assert claims["sub"] == "alice" and claims["act"] == {"sub": EXCHANGER} and claims["client_id"] == EXCHANGER
    assert claims["groups"] == ["engineering", "admins"] and claims["exp"] - claims["iat"] == EXCHANGE_TTL
    # Without a scope asked for, the subject token's scopes (those the upstream offers) carry over.
    assert idp.verify(idp.exchange_token(user_token, UPSTREAM)["access_token"], audience=UPSTREAM)["scope"] == \
        "mcp mcp:admin"


def test_token_exchange_is_refused_to_others_and_for_bad_subject_tokens(idp: Idp) -> None:
    user_token = idp.login_user_with_code(GATEWAY, "mcp", user="alice")["access_token"]
    with pytest.raises(IdpError, match="grant type is not allowed for this client"):
        idp.exchange_token(user_token, UPSTREAM, client=MACHINE)
    head, body, signature = user_token.split(".")
    forged = json.loads(base64.urlsafe_b64decode(body + "=="))
    forged["sub"] = "mallory"
    forged_body = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    with pytest.raises(IdpError, match="invalid_grant.*ERR_JWS_SIGNATURE_VERIFICATION_FAILED"):
        idp.exchange_token(f"{head}.{forged_body}.{signature}", UPSTREAM)
    with pytest.raises(IdpError, match="invalid_target"):
        idp.exchange_token(user_token, "https://example.com/api")
    # The gateway may exchange only tokens issued to it (its resource), not another service's.
    someone_elses = idp.client_credentials_token(EC_RESOURCE, "mcp")["access_token"]
    with pytest.raises(IdpError, match="invalid_grant.*not issued to an audience this client may exchange"):
        idp.exchange_token(someone_elses, UPSTREAM)
    short = idp.client_credentials_token(SHORT, "mcp")["access_token"]
    time.sleep(2.05)
    with pytest.raises(IdpError, match="invalid_grant.*ERR_JWT_EXPIRED"):
        idp.exchange_token(short, UPSTREAM)


def test_stats_count_grants_by_type(idp: Idp) -> None:
    idp.reset_stats()
    user_token = idp.client_credentials_token(GATEWAY, "mcp")["access_token"]
    idp.client_credentials_token(GATEWAY, "mcp")
    idp.exchange_token(user_token, UPSTREAM)
    with pytest.raises(IdpError):
        idp.exchange_token("not-a-token", UPSTREAM)
    stats = idp.stats()
    assert stats["grants"] == {"client_credentials": 2, TOKEN_EXCHANGE: 1}
    assert stats["errors"] == {TOKEN_EXCHANGE: 1}
    assert idp.grants(TOKEN_EXCHANGE) == 1


def test_a_restart_with_rotated_keys_revokes_the_old_kid() -> None:
    with Idp() as idp:
        before = idp.client_credentials_token(GATEWAY, "mcp")["access_token"]
        old_kid = _header(before)["kid"]
        issuer = idp.issuer
        idp.restart()  # same keys: the token still verifies
        assert idp.issuer == issuer and idp.verify(before, audience=GATEWAY)["sub"] == MACHINE

        idp.restart(rotate_keys="prepend")  # new keys sign, the old ones stay published
        overlap = idp.client_credentials_token(GATEWAY, "mcp")["access_token"]
        assert _header(overlap)["kid"] != old_kid and idp.verify(before, audience=GATEWAY)

        idp.restart(rotate_keys="replace")
        assert idp.issuer == issuer
        after = idp.client_credentials_token(GATEWAY, "mcp")["access_token"]
        kids = {k["kid"] for k in idp.jwks()["keys"]}
        assert _header(after)["kid"] in kids and old_kid not in kids and _header(overlap)["kid"] not in kids
        with pytest.raises(KeyError):
            idp.verify(before, audience=GATEWAY)
        with pytest.raises(IdpError, match="invalid_grant.*ERR_JWKS_NO_MATCHING_KEY"):
            idp.exchange_token(before, UPSTREAM)
        # The stats start again with the process: this run's one grant and one refused exchange.
        assert idp.stats() == {"grants": {"client_credentials": 1}, "errors": {TOKEN_EXCHANGE: 1}}
