"""A parked `input_required` round continued on any replica (issue 26, item 1): three
`dex-gateway serve` sharing PostgreSQL and a `DEX_REPLICA_SECRET`, behind Debian's haproxy
(round-robin, no stickiness), each with its own server-everything child (handshake era: it asks
with server-to-client requests, so a 2026-07-28 client's call is parked where it was asked). The
client's next round lands on another replica and is forwarded to the one that parked it; when that
one was SIGKILLed the round is refused at once as expired (-32602: the client starts over).
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.interop.support import require_everything
from tests.support.everything import everything_stdio
from tests.support.gateway import RunningGateway, start_gateway, write_config
from tests.support.haproxy import start_haproxy
from tests.tasks.tasks_support import post, result_of

# Three gateways with a node child each, behind haproxy: about 10 s, so with the long tests (make test-all).
pytestmark = pytest.mark.slow

SECRET = {"DEX_REPLICA_SECRET": "replicas-test-secret"}
ASKS = {"elicitation": {}}
ANSWER = {"action": "accept", "content": {"name": "Ada", "response": "yes", "confirm": True}}


def _call(url: str, rounds: dict[str, Any] | None = None) -> dict[str, Any]:
    params = {"name": "trigger-elicitation-request", "arguments": {}, **(rounds or {})}
    return result_of(post(url, "tools/call", params, capabilities=ASKS, extension=False, timeout=20))


def _answered(asked: dict[str, Any]) -> dict[str, Any]:
    assert asked.get("resultType") == "input_required", asked
    return {"inputResponses": {key: ANSWER for key in asked["inputRequests"]}, "requestState": asked["requestState"]}


def _text(result: dict[str, Any]) -> str:
    return "\n".join(b.get("text", "") for b in result.get("content", []))


def test_a_round_continues_on_any_replica(tmp_path: Path, pg_url: str) -> None:
    node = require_everything()
    with ExitStack() as stack:
        replicas: list[RunningGateway] = []
        for name in ("r0", "r1", "r2"):
            config = write_config(tmp_path / name, {
                "upstreams": [everything_stdio("ev", node=node, prefix="", keyless_writes="pass")],
                "fences": {"store": pg_url, "replica_id": name},
            })
            gateway = stack.enter_context(start_gateway(config, env=SECRET))
            gateway.wait_for_log("catalog ready", timeout=30)
            replicas.append(gateway)
        balancer = stack.enter_context(start_haproxy(tmp_path / "haproxy", [g.port for g in replicas])) + "/mcp"

        # Asked on r0, answered on r1: forwarded to r0, where the call waits.
        done = _call(replicas[1].url, _answered(_call(replicas[0].url)))
        assert "Name: Ada" in _text(done), done
        # Through the balancer: round-robin sends the retry to another replica than the question.
        for _ in range(3):
            done = _call(balancer, _answered(_call(balancer)))
            assert "Name: Ada" in _text(done), done

        # r0 dies with a call parked: its round is refused as expired at once, wherever it lands.
        parked = _answered(_call(replicas[0].url))
        replicas[0].kill()
        for _ in range(3):
            status, message = post(balancer, "tools/call", {"name": "trigger-elicitation-request", "arguments": {},
                                                             **parked}, capabilities=ASKS, extension=False, timeout=20)
            assert message["error"]["code"] == -32602 and "expired requestState" in message["error"]["message"], message
        # Starting over works on the replicas left.
        assert "Name: Ada" in _text(_call(balancer, _answered(_call(balancer))))
