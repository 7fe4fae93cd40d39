"""Scope from claims (`auth.oauth.grants`), the rules of docs/auth.md#scope-from-claims-grants:
every claim of `when` must have one of its values; lists match on any element, `scope` is split
at spaces, dotted names reach into objects; the union of matching grants; none: `default`, else
nothing; no `grants`: everything. A principal's scope follows its latest token."""

from __future__ import annotations

from typing import Any

from gateway.auth.principals import Identity
from gateway.auth.scope import PrincipalScope
from gateway.config.model import AuthConfig

OAUTH: dict[str, Any] = {"resource": "https://gw.example.com/mcp", "issuers": [{"issuer": "https://idp.example.com"}]}


def _scope(**oauth: Any) -> PrincipalScope:
    return PrincipalScope(AuthConfig.model_validate({
        "tokens": [{"principal": "ci", "token_sha256": "a" * 64, "tools": ["notes__*"]}],
        "oauth": {**OAUTH, **oauth}}))


GRANTS = [
    {"when": {"groups": ["finance"]}, "tools": ["billing__*"]},
    {"when": {"realm_access.roles": ["auditor"], "scope": ["audit"]}, "tools": ["ledger__read"], "upstreams": ["docs"]},
]


def test_a_list_claim_matches_on_any_element_and_grants_union() -> None:
    scope = _scope(grants=GRANTS)
    scope.bind(Identity("ann", {"groups": ["staff", "finance"], "realm_access": {"roles": ["auditor"]},
                                "scope": "openid audit"}))
    assert scope.may_use_tool("ann", "billing__refund", "billing")
    assert scope.may_use_tool("ann", "ledger__read", "ledger")
    assert scope.may_use_prompt("ann", "docs__guide", "docs")
    assert not scope.may_use_tool("ann", "ledger__write", "ledger")


def test_every_claim_of_when_must_match() -> None:
    scope = _scope(grants=GRANTS)
    scope.bind(Identity("bo", {"realm_access": {"roles": ["auditor"]}, "scope": "openid"}))
    assert not scope.may_use_tool("bo", "ledger__read", "ledger")


def test_no_match_is_the_default_or_nothing() -> None:
    bare = _scope(grants=GRANTS)
    bare.bind(Identity("cy", {"groups": ["guests"]}))
    assert not bare.may_use_tool("cy", "billing__refund", "billing")
    assert bare.upstreams_for("cy", ["billing", "docs"]) == []
    with_default = _scope(grants=GRANTS, default={"tools": ["docs__*"]})
    with_default.bind(Identity("cy", {"groups": ["guests"]}))
    assert with_default.may_use_tool("cy", "docs__search", "docs")
    assert not with_default.may_use_tool("cy", "billing__refund", "billing")


def test_without_grants_every_oauth_principal_reaches_everything() -> None:
    scope = _scope()
    scope.bind(Identity("dee", {"groups": []}))
    assert scope.may_use_tool("dee", "billing__refund", "billing")


def test_an_unbound_principal_reaches_nothing_and_static_principals_keep_their_scope() -> None:
    scope = _scope(grants=GRANTS)
    assert not scope.may_use_tool("never-seen", "billing__refund", "billing")
    scope.bind(Identity("ci", {"groups": ["finance"]}))  # a static principal's scope is not rebound
    assert scope.may_use_tool("ci", "notes__put", "notes") and not scope.may_use_tool("ci", "billing__x", "billing")


def test_the_scope_follows_the_latest_token_and_listings_are_keyed_by_it() -> None:
    scope = _scope(grants=GRANTS)
    scope.bind(Identity("eve", {"groups": ["finance"]}))
    finance_key = scope.key("eve")
    assert scope.may_use_tool("eve", "billing__refund", "billing")
    scope.bind(Identity("eve", {"groups": ["staff"]}))
    assert not scope.may_use_tool("eve", "billing__refund", "billing")
    assert scope.key("eve") != finance_key
    scope.bind(Identity("fay", {"groups": ["finance"]}))
    assert scope.key("fay") == finance_key  # same grants, one cached listing
