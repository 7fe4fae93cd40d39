"""The policy engine's decisions on their own (gateway/auth/policy.py): what a listing depends on,
and the calls it must deny without crashing (fail closed). The gateway-level behaviour is in
tests/gateway/test_gateway_policy.py and test_gateway_policy_claims.py."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.auth.policy import MAX_ARGUMENT_DEPTH, Policy
from gateway.auth.principals import Identity
from gateway.config.policy import PolicyConfig
from gateway.config.expressions import ExpressionError, compile_condition


def _policy(*rules: dict[str, Any]) -> Policy:
    return Policy(PolicyConfig.model_validate({"rules": [{"effect": "deny", **r} for r in rules]}))


ALICE = Identity("alice", claims={"sub": "alice", "groups": ["finance"], "jti": "1", "exp": 10})


def test_the_listing_key_holds_only_what_static_rules_read() -> None:
    arguments_only = _policy({"name": "r", "tools": ["a"], "when": "arguments.amount > 5"})
    assert arguments_only.listing_key(ALICE) is None  # per call: listings never depend on it
    groups = _policy({"name": "g", "tools": ["a"], "when": '"finance" in claims.groups'})
    other_token = Identity("alice", claims={"sub": "alice", "groups": ["finance"], "jti": "2", "exp": 99})
    assert groups.listing_key(ALICE) == groups.listing_key(other_token)
    assert groups.listing_key(ALICE) != groups.listing_key(Identity("alice", claims={"groups": ["staff"]}))
    # A name the text check cannot follow: every claim counts.
    dynamic = _policy({"name": "d", "tools": ["a"], "when": 'claims[tool] == "x"'})
    assert dynamic.listing_key(ALICE) != dynamic.listing_key(other_token)
    by_principal = _policy({"name": "p", "tools": ["a"], "principals": ["bob"]})
    assert by_principal.listing_key(ALICE) != by_principal.listing_key(Identity("bob"))


def test_rules_without_a_condition_and_listings() -> None:
    policy = _policy({"name": "p", "tools": ["pay__*"], "principals": ["bob"]},
                     {"name": "r", "tools": ["pay__refund"], "when": "arguments.amount > 5000"})
    bob = Identity("bob")
    assert policy.hides(bob, "pay__close", "pay") and not policy.hides(ALICE, "pay__close", "pay")
    assert not policy.hides(ALICE, "pay__refund", "pay")  # an arguments rule keeps the tool listed
    denial = policy.denial(bob, "pay__close", "pay", {})
    assert denial is not None and (denial.rule, denial.reason) == ("p", "matched")
    assert policy.denial(ALICE, "pay__refund", "pay", {"amount": 100}) is None
    assert policy.denial(ALICE, "pay__refund", "pay", {"amount": 6000}) is not None


@pytest.mark.parametrize("arguments", [
    {},  # the key it reads is missing
    {"amount": "6000"},  # a string: no `>` with an int
    {"amount": None},
], ids=["missing", "string", "null"])
def test_a_rule_that_cannot_be_evaluated_denies(arguments: dict[str, Any]) -> None:
    policy = _policy({"name": "r", "tools": ["pay__refund"], "when": "arguments.amount > 5000"})
    denial = policy.denial(ALICE, "pay__refund", "pay", arguments)
    assert denial is not None and (denial.rule, denial.reason) == ("r", "error")
    assert "6000" not in denial.detail


def test_a_result_that_is_not_a_bool_denies() -> None:
    policy = _policy({"name": "r", "tools": ["t"], "when": "arguments.flag"})
    denial = policy.denial(ALICE, "t", None, {"flag": "yes"})
    assert denial is not None and denial.reason == "error" and "not true or false" in denial.detail
    assert policy.denial(ALICE, "t", None, {"flag": False}) is None


def test_arguments_nested_too_deep_are_denied_not_handed_to_the_library() -> None:
    nested: dict[str, Any] = {}
    inner = nested
    for _ in range(MAX_ARGUMENT_DEPTH + 5):
        inner["a"] = {}
        inner = inner["a"]
    policy = _policy({"name": "r", "tools": ["t"], "when": "has(arguments.deep) && arguments.amount > 1"})
    denial = policy.denial(ALICE, "t", None, {"amount": 5, "deep": nested})
    assert denial is not None and denial.reason == "error" and "deeper" in denial.detail


@pytest.mark.parametrize("source,words", [
    ("arguments.amount >", "column 19"),
    ("amount > 5", "unknown variable 'amount'"),
    ("principal == 1 || tool < 3", "type"),
    ("scopes", "not true or false"),
])
def test_conditions_refused_at_compile(source: str, words: str) -> None:
    with pytest.raises(ExpressionError, match=words):
        compile_condition(source)


def test_comprehension_variables_are_not_unknown_variables() -> None:
    condition = compile_condition('claims.groups.exists(g, g.startsWith("fin")) && arguments.items.all(i, i.qty < 10)')
    assert condition.variables == {"claims", "arguments"} and condition.claim_names == {"groups"}


def test_only_the_fields_read_are_converted_and_the_answers_are_the_same() -> None:
    whole = _policy({"name": "w", "tools": ["t"], "when": "size(arguments) > 3"})
    assert whole.denial(ALICE, "t", None, {"a": 1, "b": 2, "c": 3, "d": 4}) is not None  # the map as a whole
    assert whole.denial(ALICE, "t", None, {"a": 1}) is None
    optional = _policy({"name": "o", "tools": ["t"], "when": 'has(arguments.note) && arguments["note"] == "x"'})
    assert optional.denial(ALICE, "t", None, {"note": "x", "blob": "y" * 1_000_000}) is not None
    assert optional.denial(ALICE, "t", None, {"blob": "y"}) is None  # has() is false: not an error
    claims = _policy({"name": "c", "tools": ["t"], "when": 'claims.sub == "alice" && size(claims.groups) == 1'})
    assert claims.denial(ALICE, "t", None, {}) is not None
