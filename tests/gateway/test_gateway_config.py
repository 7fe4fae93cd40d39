"""`dex-gateway serve --config` with a bad file: a non-zero exit, and stderr that names the file,
the line and the key (never a traceback)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.gateway import run_gateway_cli

pytestmark = pytest.mark.timeout(60)

PY = sys.executable

# name -> (YAML text, line the error must name, words stderr must contain)
BAD_CONFIGS = {
    "unknown_key": (
        f"""\
server:
  host: 127.0.0.1
upstreams:
  - name: pay
    transport: stdio
    command: {PY}
    comand_args: [x]
""",
        7, ["comand_args", "unknown key"],
    ),
    "unknown_top_level_key": (
        """\
server:
  port: 0
upstream: []
""",
        3, ["upstream", "unknown key"],
    ),
    "wrong_type": (
        """\
upstreams:
  - name: pay
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
    call_timeout_seconds: soon
""",
        5, ["call_timeout_seconds"],
    ),
    "wrong_type_bool": (
        """\
upstreams:
  - name: pay
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
    trusts_tool_annotations: [yes, no]
""",
        5, ["trusts_tool_annotations"],
    ),
    "duplicate_upstream_name": (
        f"""\
upstreams:
  - name: pay
    transport: stdio
    command: {PY}
  - name: pay
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
""",
        5, ["duplicate", "pay", "name"],
    ),
    "missing_command": (
        """\
upstreams:
  - name: pay
    transport: stdio
    args: [server.py]
""",
        2, ["command", "missing"],
    ),
    "missing_env_var": (
        """\
upstreams:
  - name: pay
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
    headers:
      Authorization: "Bearer ${DEX_TEST_SURELY_UNSET_TOKEN}"
""",
        6, ["DEX_TEST_SURELY_UNSET_TOKEN", "Authorization"],
    ),
    "unknown_transport": (
        """\
upstreams:
  - name: pay
    transport: carrier_pigeon
    url: http://127.0.0.1:9/mcp
""",
        3, ["transport"],
    ),
    "bad_effect_in_policy": (
        """\
upstreams:
  - name: pay
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
    tool_policies:
      pay__send_payment: {effect: maybe}
""",
        6, ["effect"],
    ),
    "duplicate_key": (
        """\
upstreams:
  - name: pay
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
    url: http://127.0.0.1:10/mcp
""",
        5, ["duplicate key", "upstreams.0.url"],
    ),
    "alias_bomb": (
        """\
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
""",
        5, ["more than 100000 values", "aliases expanded"],
    ),
    "too_deep": (
        "upstreams: " + "[" * 70 + "]" * 70 + "\n",
        1, ["nested deeper than 64 levels"],
    ),
    "invalid_yaml": (
        """\
upstreams:
  - name: pay
    transport: [stdio
""",
        4, ["YAML"],
    ),
}


# Refused at load since the attack round (issue 20): each case is its own test, so the table above
# (started side by side in one fixture) stays within its time limit on a busy machine.
REFUSED_AT_LOAD = {
    # Two tokens of one principal shared one scope: the narrower token got the other's grants.
    "duplicate_principal": (
        f"""\
auth:
  tokens:
    - principal: team
      token_sha256: {"a" * 64}
      tools: ["notes__list_notes"]
    - token_sha256: {"b" * 64}
      principal: team
upstreams:
  - name: notes
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
""",
        7, ["duplicate principal", "'team'", "auth.tokens.1.principal"],
    ),
    # `a`'s tool `b__c` and `a__b`'s tool `c` would both be exposed as `a__b__c`.
    "upstream_name_with_separator": (
        """\
upstreams:
  - name: a
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
  - transport: streamable_http
    url: http://127.0.0.1:10/mcp
    name: a__b
""",
        7, ["upstreams.1.name", "'a__b'", "'__'"],
    ),
    "upstream_token_exchange_on_stdio": (
        f"""\
upstreams:
  - name: pay
    transport: stdio
    command: {PY}
    auth:
      mode: token_exchange
      issuer: http://127.0.0.1:9
      client_id: dex
      client_secret_env: DEX_IDP_SECRET
""",
        2, ["upstreams.0", "token_exchange needs an HTTP upstream"],
    ),
    "upstream_auth_with_an_authorization_header": (
        """\
upstreams:
  - name: crm
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
    headers: {Authorization: "Bearer robot"}
    auth:
      mode: token_exchange
      issuer: http://127.0.0.1:9
      client_id: dex
      client_secret_env: HOME
""",
        2, ["upstreams.0", "headers.Authorization cannot be used with auth.mode token_exchange"],
    ),
    "upstream_auth_incomplete": (
        """\
upstreams:
  - name: crm
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
    auth:
      mode: client_credentials
      token_endpoint: http://127.0.0.1:9/token
""",
        5, ["upstreams.0.auth", "needs client_id, client_secret_env"],
    ),
    "upstream_auth_secret_unset": (
        """\
upstreams:
  - name: crm
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
    auth:
      mode: client_credentials
      issuer: https://idp.example.com
      client_id: dex
      client_secret_env: DEX_TEST_SURELY_UNSET_SECRET
""",
        9, ["upstreams.0.auth.client_secret_env", "DEX_TEST_SURELY_UNSET_SECRET", "is not set"],
    ),
    "upstream_auth_secret_in_yaml": (
        """\
upstreams:
  - name: crm
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
    auth:
      mode: client_credentials
      issuer: https://idp.example.com
      client_id: dex
      client_secret_env: "hunter2 is my secret"
""",
        9, ["upstreams.0.auth.client_secret_env", "not an environment variable name"],
    ),
    "upstream_auth_http_issuer_off_loopback": (
        """\
upstreams:
  - name: crm
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
    auth:
      mode: client_credentials
      issuer: http://idp.example.com
      client_id: dex
      client_secret_env: DEX_IDP_SECRET
""",
        7, ["upstreams.0.auth.issuer", "https://"],
    ),
    "session_idle_under_sse_retry": (
        """\
server:
  stateful: true
  sse_retry_ms: 5000
  session_idle_timeout_seconds: 2
""",
        4, ["server.session_idle_timeout_seconds", "server.sse_retry_ms"],
    ),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """Every bad config through `dex-gateway serve`, run side by side (each start costs ~1 s)."""
    root = tmp_path_factory.mktemp("bad-configs")
    paths: dict[str, Path] = {}
    for case, (text, _, _) in BAD_CONFIGS.items():
        paths[case] = root / f"{case}.yaml"
        paths[case].write_text(text)
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = {case: pool.submit(run_gateway_cli, "serve", "--config", str(path), "--port", "0", timeout=30)
                   for case, path in paths.items()}
        return {case: (paths[case], future.result()) for case, future in futures.items()}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_config_names_file_line_and_key(outcomes: dict, case: str) -> None:
    _, line, words = BAD_CONFIGS[case]
    path, done = outcomes[case]
    err = done.stderr
    assert done.returncode == 2, (done.returncode, err)  # a configuration error, not a crash
    assert "Traceback" not in err, err
    assert "listening on" not in err
    # file:line (for invalid YAML, the parser's mark: the unclosed `[` runs to the end, line 4)
    lines = [int(m) for m in re.findall(re.escape(str(path)) + r":(\d+)", err)]
    assert line in lines, err
    for word in words:
        assert word.lower() in err.lower(), (word, err)


def test_missing_env_var_is_not_reported_when_set(tmp_path: Path) -> None:
    """The same reference with the variable set loads (tools lists nothing, the URL is dead)."""
    text, _, _ = BAD_CONFIGS["missing_env_var"]
    path = tmp_path / "gateway.yaml"
    path.write_text(text.replace("pay\n", "pay\n    connect_timeout_seconds: 1\n", 1))
    done = run_gateway_cli("tools", "--config", str(path), "--json",
                           env={"DEX_TEST_SURELY_UNSET_TOKEN": "s3cr3t-value"}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    # Header values are never logged.
    assert "s3cr3t-value" not in done.stderr + done.stdout


def test_missing_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    done = run_gateway_cli("serve", "--config", str(path), "--port", "0", timeout=30)
    assert done.returncode == 2
    assert str(path) in done.stderr and "not found" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("case", list(REFUSED_AT_LOAD))
def test_refused_at_load_names_file_line_and_key(tmp_path: Path, case: str) -> None:
    text, line, words = REFUSED_AT_LOAD[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    done = run_gateway_cli("serve", "--config", str(path), "--port", "0", timeout=30)
    err = done.stderr
    assert done.returncode == 2, (done.returncode, err)
    assert "Traceback" not in err, err
    assert line in [int(m) for m in re.findall(re.escape(str(path)) + r":(\d+)", err)], err
    for word in words:
        assert word.lower() in err.lower(), (word, err)
