"""Principals from OAuth tokens (docs/auth.md#principals), with the verifier against real loopback
issuers (tests/support/jwks_issuer.py): two issuers' equal subjects never name one principal; an
OAuth principal never takes a static token's; prefixes that could collide are refused at load."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from gateway.auth.oauth import OAuthVerifier
from gateway.config.oauth import OAuthConfig
from gateway.errors import TokenRefused
from tests.support.jwks_issuer import JwksIssuer

RESOURCE = "https://gw.example.com/mcp"


def _verifier(*issuers: dict[str, Any], static: frozenset[str] = frozenset()) -> OAuthVerifier:
    return OAuthVerifier(OAuthConfig.model_validate({"resource": RESOURCE, "issuers": list(issuers)}),
                         static_principals=static)


def test_two_issuers_subjects_never_collide() -> None:
    with JwksIssuer() as a, JwksIssuer() as b:
        key_a, key_b = a.add_key("k1"), b.add_key("k1")
        verifier = _verifier({"issuer": a.url}, {"issuer": b.url, "principal_prefix": "partner:"})

        async def both() -> tuple[str, str]:
            one = await verifier.identity(a.token(key_a, sub="alice", aud=RESOURCE))
            two = await verifier.identity(b.token(key_b, sub="alice", aud=RESOURCE))
            return one.principal, two.principal

        assert anyio.run(both) == (f"{a.url}#alice", "partner:alice")


def test_one_issuer_keeps_the_claim_as_is_and_never_takes_a_static_principal() -> None:
    with JwksIssuer() as idp:
        key = idp.add_key("k1")
        verifier = _verifier({"issuer": idp.url}, static=frozenset({"ci"}))

        async def check() -> str:
            with pytest.raises(TokenRefused, match="static token"):
                await verifier.identity(idp.token(key, sub="ci", aud=RESOURCE))
            return (await verifier.identity(idp.token(key, sub="alice", aud=RESOURCE))).principal

        assert anyio.run(check) == "alice"


def test_prefixes_that_could_collide_are_refused() -> None:
    with pytest.raises(ValidationError, match="could collide"):
        OAuthConfig.model_validate({"resource": RESOURCE, "issuers": [
            {"issuer": "https://a.example.com", "principal_prefix": "a"},
            {"issuer": "https://b.example.com", "principal_prefix": "ab"}]})
