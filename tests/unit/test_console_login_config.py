"""Console sign-in in gateway.yaml (`auth.oauth.console`, `auth.admin_token_name`): what loads, what
the page is told and allowed to reach, and each mistake refused with file and line."""

from __future__ import annotations

import hashlib

import pytest

from gateway.config.model import config_from_text
from gateway.server.console import CONTENT_SECURITY_POLICY, content_security_policy
from tests.support.config_errors import assert_refused


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


OAUTH = """auth:
  oauth:
    resource: http://127.0.0.1:8080/mcp
    required_scopes: [mcp]
    issuers:
      - issuer: http://127.0.0.1:9000
      - issuer: https://login.example.com/realms/ops
"""


def test_console_sign_in_loads_with_its_defaults() -> None:
    oauth = config_from_text(OAUTH + "    console:\n      client_id: dex-console\n").auth.oauth
    assert oauth is not None and oauth.console is not None
    assert oauth.console_issuer() == "http://127.0.0.1:9000"  # the first issuer
    assert oauth.console_scope() == "openid mcp"  # openid and the required scopes
    chosen = config_from_text(OAUTH + "    console:\n      client_id: c\n      issuer: https://login.example.com/realms/ops\n"
                              "      scopes: [openid, profile, mcp]\n").auth.oauth
    assert chosen is not None and chosen.console_issuer() == "https://login.example.com/realms/ops"
    assert chosen.console_scope() == "openid profile mcp"
    assert config_from_text(OAUTH).auth.oauth.console_issuer() is None  # type: ignore[union-attr]
    assert config_from_text("auth:\n  admin_token_sha256: " + sha("a") + "\n").auth.admin_token_name == "admin"


def test_the_policy_adds_only_the_issuers_origin() -> None:
    policy = content_security_policy("https://login.example.com/realms/ops")
    assert "connect-src 'self' https://login.example.com;" in policy
    assert "form-action 'none'" in policy and "script-src 'self';" in policy
    assert "connect-src 'self';" in CONTENT_SECURITY_POLICY


REFUSED = {
    "untrusted_issuer": (OAUTH + "    console:\n      client_id: c\n      issuer: http://127.0.0.1:9999\n", 10,
                         ["auth.oauth.console.issuer", "not one of auth.oauth.issuers"]),
    "no_client_id": (OAUTH + "    console:\n      scopes: [openid]\n", 8, ["auth.oauth.console.client_id", "required"]),
    "bad_scope": (OAUTH + "    console:\n      client_id: c\n      scopes: [\"open id\"]\n", 10,
                  ["auth.oauth.console.scopes.0", "pattern"]),
    "unknown_key": (OAUTH + "    console:\n      client_id: c\n      client_secret: x\n", 10,
                    ["auth.oauth.console.client_secret", "unknown key"]),
    "admin_name_is_an_approver": (f"""auth:
  admin_token_sha256: {sha("admin")}
  admin_token_name: carol
  approver_tokens:
    - name: carol
      token_sha256: {sha("approver")}
""", 5, ["auth.approver_tokens.0.name", "auth.admin_token_name"]),
    "admin_name_with_a_control": (f"auth:\n  admin_token_sha256: {sha('admin')}\n  admin_token_name: \"a\\u0007\"\n", 3,
                                  ["auth.admin_token_name"]),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_mistakes_are_refused_with_file_and_line(case: str) -> None:
    assert_refused(*REFUSED[case])
