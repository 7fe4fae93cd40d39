"""Policy rules (docs/policy.md, issue 23 item 4) against a real `dex-gateway serve` and a real stdio
upstream that records every call it receives (tests/support/scripted_server.py), through the
official MCP SDK client in both eras and on both entries (the fast path and the SDK server):

* a rule that does not read the arguments hides the tool from that principal's listing and
  answers its call exactly as a tool that does not exist; another principal sees and calls it;
* a rule over the arguments (a refund over 5,000) refuses that call before the fence claims its
  key and before any byte reaches the upstream, and runs a refund of 100 (with the same key);
* a rule that cannot be evaluated for a call (the argument it reads is missing) denies it: fail
  closed, logged with the rule's name and never the arguments' values, counted in /metrics;
* a denied call cannot start a task;
* rule errors are refused at load with the file and line.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.gateway.helpers import ERAS, KEY, all_tools, connect, text_of
from tests.gateway.test_gateway_http import LEGACY, headers, jsonrpc_message, post, request
from tests.support.gateway import RunningGateway, run_gateway_cli, start_gateway, write_config
from tests.support.scripted_server import SCRIPT_FILE, SCRIPT_PATH, STATE_ENV, read_attempts
from tests.support.servers import REPO_ROOT

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

TOKENS = {"alice": "alice-policy-token", "bob": "bob-policy-token"}
SCRAPER = "policy-metrics-token"
ENTRIES = ("fast", "sdk")
SECRET_ORDER = "order-with-a-secret-7731"  # an argument value that must never reach the log

RULES = [
    # Static (no arguments): bob never sees close_account; alice does.
    {"name": "no-closing-for-bob", "tools": ["billing__close_account"], "principals": ["bob"], "effect": "deny",
     "message": "bob's agent may not close accounts"},
    # Per call: a refund over 5,000 is refused, any other runs.
    {"name": "large-refunds", "tools": ["billing__refund"], "when": "arguments.amount > 5000", "effect": "deny"},
]


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass
class Setup:
    gateway: RunningGateway
    state: Path
    entry: str


@pytest.fixture(scope="module", params=ENTRIES)
def setup(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    entry = request.param
    root = tmp_path_factory.mktemp(f"policy-{entry}")
    state = root / "billing"
    state.mkdir()
    # No scripted events: every call that reaches the upstream is recorded and answered a plain success.
    (state / SCRIPT_FILE).write_text(json.dumps({"tools": [
        {"name": "refund", "effect": "non_idempotent_write", "events": []},
        {"name": "close_account", "effect": "non_idempotent_write", "events": []},
        {"name": "get_balance", "effect": "read", "events": []},
    ]}))
    config = write_config(root, {
        "server": {"fast_tool_calls": entry == "fast"},
        "auth": {"tokens": [{"principal": name, "token_sha256": _sha(token)} for name, token in TOKENS.items()]},
        "upstreams": [{"name": "billing", "transport": "stdio", "command": sys.executable, "args": [str(SCRIPT_PATH)],
                       "env": {STATE_ENV: str(state)}, "cwd": str(REPO_ROOT)}],
        "telemetry": {"metrics_token_sha256": _sha(SCRAPER)},
        "policy": {"rules": RULES},
    })
    with start_gateway(config) as gateway:
        yield Setup(gateway, state, entry)


def _runs(setup: Setup, tool: str) -> list[str]:
    return [a["run"] for a in read_attempts(setup.state) if a["tool"] == tool]


async def _call_error(setup: Setup, era: str, who: str, name: str, arguments: dict[str, Any],
                      key: str | None = None) -> MCPError:
    async with connect(setup.gateway.url, era, token=TOKENS[who]) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool(name, arguments, meta={KEY: key} if key else None)
    return caught.value


@pytest.mark.parametrize("era", ERAS)
async def test_a_denied_tool_is_absent_from_that_principals_listing_and_present_for_another(setup: Setup, era: str) -> None:
    async with connect(setup.gateway.url, era, token=TOKENS["bob"]) as client:
        bobs = {t.name for t in await all_tools(client)}
    async with connect(setup.gateway.url, era, token=TOKENS["alice"]) as client:
        alices = {t.name for t in await all_tools(client)}
    assert "billing__close_account" in alices
    assert bobs == alices - {"billing__close_account"}
    # An arguments rule decides per call: the refund stays listed for everyone.
    assert "billing__refund" in bobs


@pytest.mark.parametrize("era", ERAS)
async def test_a_denied_call_is_answered_exactly_as_a_tool_that_does_not_exist(setup: Setup, era: str) -> None:
    run = f"bob-close-{era}-{uuid.uuid4().hex[:6]}"
    denied = await _call_error(setup, era, "bob", "billing__close_account", {"run": run}, key=f"k/{run}")
    missing = await _call_error(setup, era, "bob", "billing__close_acount", {"run": run}, key=f"k/{run}-x")
    assert denied.error.code == missing.error.code
    assert denied.error.message == missing.error.message.replace("billing__close_acount", "billing__close_account")
    assert denied.error.data == missing.error.data
    assert "polic" not in denied.error.message.lower() and "rule" not in denied.error.message.lower()
    assert run not in _runs(setup, "close_account")
    # The same call by alice runs.
    async with connect(setup.gateway.url, era, token=TOKENS["alice"]) as client:
        result = await client.call_tool("billing__close_account", {"run": run}, meta={KEY: f"k/{run}-alice"})
    assert not result.is_error, text_of(result)
    assert _runs(setup, "close_account").count(run) == 1


@pytest.mark.parametrize("era", ERAS)
async def test_an_arguments_rule_refuses_a_6000_refund_before_the_fence_and_runs_a_100_refund(setup: Setup, era: str) -> None:
    run = f"refund-{era}-{uuid.uuid4().hex[:6]}"
    key = f"session/turn/{run}"
    denied = await _call_error(setup, era, "alice", "billing__refund",
                               {"run": run, "amount": 6000, "order": SECRET_ORDER}, key=key)
    assert "unknown tool" in denied.error.message and "billing__refund" in denied.error.message
    assert _runs(setup, "refund").count(run) == 0  # nothing reached the upstream
    # The key was never claimed: the same key with other arguments runs (a claimed key would be
    # refused as reused for another call).
    async with connect(setup.gateway.url, era, token=TOKENS["alice"]) as client:
        result = await client.call_tool("billing__refund", {"run": run, "amount": 100, "order": "o-1"}, meta={KEY: key})
    assert not result.is_error, text_of(result)
    assert _runs(setup, "refund").count(run) == 1
    # 5,000 exactly is not over: it runs.
    async with connect(setup.gateway.url, era, token=TOKENS["bob"]) as client:
        result = await client.call_tool("billing__refund", {"run": run + "-5000", "amount": 5000.0},
                                        meta={KEY: key + "-5000"})
    assert not result.is_error, text_of(result)


async def test_a_rule_that_cannot_be_evaluated_denies_the_call_and_logs_only_the_rule(setup: Setup) -> None:
    run = f"no-amount-{uuid.uuid4().hex[:6]}"
    mark = setup.gateway.log_mark()
    denied = await _call_error(setup, ERAS[0], "alice", "billing__refund", {"run": run, "order": SECRET_ORDER},
                               key=f"k/{run}")
    assert "unknown tool" in denied.error.message
    assert _runs(setup, "refund").count(run) == 0
    line = setup.gateway.wait_for_log(r"policy rule 'large-refunds' could not be evaluated", since=mark)
    assert "a key it reads is missing" in line.string
    # A matched denial is logged at info with the rule's name; never an argument's value.
    mark = setup.gateway.log_mark()
    await _call_error(setup, ERAS[0], "alice", "billing__refund", {"run": run, "amount": 9999, "order": SECRET_ORDER},
                      key=f"k/{run}-2")
    setup.gateway.wait_for_log(r"INFO .*denied by policy rule 'large-refunds'", since=mark)
    assert SECRET_ORDER not in setup.gateway.log and "9999" not in setup.gateway.log
    metrics = httpx.get(setup.gateway.base + "/metrics", headers={"authorization": f"Bearer {SCRAPER}"}, timeout=10).text
    for reason in ("error", "matched"):
        assert [line for line in metrics.splitlines() if line.startswith("dex_gateway_policy_denials_total{")
                and 'rule="large-refunds"' in line and f'reason="{reason}"' in line
                and float(line.rsplit(" ", 1)[1]) >= 1], metrics


def test_a_denied_call_cannot_start_a_task(setup: Setup) -> None:
    """A 2025-11-25 client asks for a task (`params.task`): the gateway would run any tool as one."""
    run = f"task-{uuid.uuid4().hex[:6]}"

    def call(amount: int) -> dict[str, Any]:
        message = request("tools/call", {"name": "billing__refund", "arguments": {"run": run, "amount": amount},
                                         "task": {"ttl": 60000}, "_meta": {KEY: f"k/{run}/{amount}"}}, LEGACY)
        return jsonrpc_message(post(setup.gateway.url, message, headers(LEGACY, TOKENS["alice"])))

    denied = call(6000)
    assert "unknown tool" in denied["error"]["message"], denied
    listed = jsonrpc_message(post(setup.gateway.url, request("tasks/list", {}, LEGACY), headers(LEGACY, TOKENS["alice"])))
    assert listed["result"]["tasks"] == [], listed
    # The same call under the limit starts a task (so the check above could fail).
    started = call(100)
    assert started["result"]["task"]["taskId"], started
    assert _runs(setup, "refund").count(run) <= 1


# -- refused at load, naming the file and line ---------------------------------------------------

_BASE = """\
upstreams:
  - name: billing
    transport: streamable_http
    url: http://127.0.0.1:9/mcp
policy:
  rules:
    - name: large-refunds
      tools: ["billing__refund"]
"""

REFUSED_AT_LOAD = {
    "syntax": (_BASE + '      when: "arguments.amount >"\n      effect: deny\n', 9,
               ["policy.rules.0.when", "not a valid CEL expression", "column 19"]),
    "unknown_variable": (_BASE + '      when: "args.amount > 5000"\n      effect: deny\n', 9,
                         ["policy.rules.0.when", "unknown variable 'args'"]),
    "bad_type": (_BASE + "      when: 'tool > 5'\n      effect: deny\n", 9,
                 ["policy.rules.0.when", "type"]),
    "not_a_bool": (_BASE + "      when: 'tool + \"x\"'\n      effect: deny\n", 9,
                   ["policy.rules.0.when", "not true or false"]),
    "unknown_effect": (_BASE + "      effect: allow\n", 9, ["policy.rules.0.effect", "deny", "require_approval"]),
    "duplicate_name": (_BASE + "      effect: deny\n    - name: large-refunds\n      tools: [x]\n      effect: deny\n", 10,
                       ["policy.rules.1.name", "duplicate rule name"]),
    "unknown_key": (_BASE + "      effect: deny\n      wehn: 'true'\n", 10, ["unknown key 'wehn'"]),
}


@pytest.mark.parametrize("case", list(REFUSED_AT_LOAD))
def test_rule_errors_are_refused_at_load_with_file_and_line(tmp_path: Path, case: str) -> None:
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
