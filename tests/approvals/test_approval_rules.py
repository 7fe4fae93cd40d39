"""`require_approval` policy rules (docs/policy.md#require_approval): which calls they hold, and
that a rule which cannot be evaluated holds the call (fail closed) instead of letting it run."""

from __future__ import annotations

from gateway.auth.policy import Policy
from gateway.auth.principals import Identity
from gateway.config.policy import PolicyConfig

POLICY = Policy(PolicyConfig.model_validate({"rules": [
    {"name": "large-refunds", "tools": ["billing__refund"], "when": "arguments.amount > 5000",
     "effect": "require_approval", "message": "finance decides"},
    {"name": "no-close", "tools": ["billing__close"], "effect": "deny"},
]}))
ALICE = Identity("alice")


def test_a_rule_holds_what_it_matches_and_only_that() -> None:
    held = POLICY.approval(ALICE, "billing__refund", "billing", {"amount": 6000})
    assert held is not None and (held.rule, held.reason, held.message) == ("large-refunds", "matched", "finance decides")
    assert POLICY.approval(ALICE, "billing__refund", "billing", {"amount": 100}) is None
    assert POLICY.approval(ALICE, "billing__export", "billing", {"amount": 6000}) is None


def test_a_rule_that_cannot_be_evaluated_holds_the_call() -> None:
    for arguments in ({}, {"amount": "6000"}):
        held = POLICY.approval(ALICE, "billing__refund", "billing", arguments)
        assert held is not None and held.reason == "error", arguments


def test_approval_rules_neither_deny_nor_hide() -> None:
    assert POLICY.denial(ALICE, "billing__refund", "billing", {"amount": 6000}) is None
    assert not POLICY.hides(ALICE, "billing__refund", "billing")
    assert POLICY.denial(ALICE, "billing__close", "billing", {}) is not None  # deny rules unchanged
    assert POLICY.approval(ALICE, "billing__close", "billing", {}) is None
