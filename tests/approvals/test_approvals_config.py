"""Approvals in gateway.yaml: the fixed names load, and each mistake is refused with file and line."""

from __future__ import annotations

import hashlib

import pytest

from gateway.config.model import config_from_text
from tests.support.config_errors import assert_refused


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


AGENT, APPROVER = sha("agent"), sha("approver")


def test_the_fixed_names_load() -> None:
    config = config_from_text(f"""
auth:
  tokens:
    - principal: alice
      token_sha256: {AGENT}
      approvals: gateway
  approver_tokens:
    - name: carol
      token_sha256: {APPROVER}
approvals:
  deadline_seconds: 60
policy:
  rules:
    - name: large-refunds
      tools: ["billing__refund"]
      when: "arguments.amount > 5000"
      effect: require_approval
""")
    assert config.auth.tokens[0].approvals == "gateway"
    assert config.auth.approver_tokens[0].name == "carol"
    assert config.policy.rules[0].effect == "require_approval"
    assert config_from_text(f"auth:\n  tokens:\n    - principal: a\n      token_sha256: {AGENT}\n").auth.tokens[0].approvals == "client"


REFUSED = {
    "approver_is_agent": (f"""auth:
  tokens:
    - principal: alice
      token_sha256: {AGENT}
  approver_tokens:
    - name: carol
      token_sha256: {AGENT}
""", 7, ["auth.approver_tokens.0.token_sha256", "never an agent token"]),
    "duplicate_approver": (f"""auth:
  approver_tokens:
    - name: carol
      token_sha256: {APPROVER}
    - name: carol
      token_sha256: {sha("other")}
""", 5, ["auth.approver_tokens.1.name", "duplicate approver name"]),
    "unknown_mode": (f"""auth:
  tokens:
    - principal: alice
      token_sha256: {AGENT}
      approvals: server
""", 5, ["auth.tokens.0.approvals", "client", "gateway"]),
    "deadline": ("approvals:\n  deadline_seconds: 0\n", 2, ["approvals.deadline_seconds", "greater than 0"]),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_mistakes_are_refused_with_file_and_line(case: str) -> None:
    assert_refused(*REFUSED[case])


def test_oauth_principals_get_their_mode_from_the_config_and_matching_grants() -> None:
    from gateway.auth.scope import oauth_approvals
    from gateway.config.oauth import OAuthConfig

    base = {"resource": "http://127.0.0.1:8080/mcp", "issuers": [{"issuer": "http://127.0.0.1:9000"}]}
    grants = [{"when": {"groups": ["contractors"]}, "tools": ["billing__*"], "approvals": "gateway"},
              {"when": {"groups": ["finance"]}, "tools": ["billing__*"]}]
    assert oauth_approvals(OAuthConfig.model_validate(base), {"groups": ["finance"]}) == "client"
    assert oauth_approvals(OAuthConfig.model_validate({**base, "approvals": "gateway"}), {}) == "gateway"
    with_grants = OAuthConfig.model_validate({**base, "grants": grants})
    assert oauth_approvals(with_grants, {"groups": ["contractors", "x"]}) == "gateway"
    assert oauth_approvals(with_grants, {"groups": ["finance"]}) == "client"
    assert oauth_approvals(with_grants, {}) == "client"
