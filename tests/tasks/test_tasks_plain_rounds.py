"""A plain 2026-07-28 call of a tool its 2026-07-28 upstream runs as a task that asks for input
(issue 24, the gateway's side; docs/tasks.md "Input"): the gateway follows the upstream task, and
its `inputRequests` reach the caller as `input_required` rounds of the plain call (the call is
parked: gateway/pipeline/rounds.py); the answers go to the task with `tasks/update`, and the task's
result answers the call.

Real processes: examples/servers/tasks_server.py (both eras; `confirm_delete` and `multi_input`
may run as tasks and ask inside the task), a real `dex-gateway serve` (stateless and stateful), the
official MCP SDK client on 2026-07-28 with an elicitation callback, and raw JSON-RPC rounds.
"""

from __future__ import annotations

import hashlib
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from gateway.conventions.keys import REPLAYED_KEY
from tests.interop.support import Recorder, client, gateway_for, text_of
from tests.support.gateway import http_upstream, start_gateway, write_config
from tests.support.servers import read_executions, start_http_server
from tests.tasks.tasks_support import post, result_of

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

PARKED = "dex-gateway.parked."


class Decliner(Recorder):
    """A user who says no."""

    async def elicit(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append("elicitation/create")
        return types.ElicitResult(action="decline")


@pytest.mark.parametrize("stateful", [False, True], ids=["stateless", "stateful"])
async def test_a_plain_2026_call_answers_the_upstream_tasks_question_in_rounds(tmp_path: Path, stateful: bool) -> None:
    with start_http_server("tasks_server", state_dir=tmp_path / "up") as server, \
            gateway_for(tmp_path, http_upstream("t", server.url, prefix="", keyless_writes="pass"), stateful=stateful) as gateway:
        recorder = Recorder()
        async with client(gateway.url, mode="2026-07-28", recorder=recorder) as caller:
            with anyio.fail_after(30):
                result = await caller.call_tool("confirm_delete", {"filename": "a.txt"})
        assert not result.is_error and text_of(result) == "deleted a.txt", text_of(result)
        assert recorder.asked == ["elicitation/create"]
    assert len(read_executions(tmp_path / "up", tool="confirm_delete")) == 1  # the upstream task ran once


async def test_a_declined_question_is_the_tools_decline_outcome(tmp_path: Path) -> None:
    with start_http_server("tasks_server", state_dir=tmp_path / "up") as server, \
            gateway_for(tmp_path, http_upstream("t", server.url, prefix="", keyless_writes="pass"), stateful=False) as gateway:
        recorder = Decliner()
        async with client(gateway.url, mode="2026-07-28", recorder=recorder) as caller:
            with anyio.fail_after(30):
                result = await caller.call_tool("confirm_delete", {"filename": "a.txt"})
        assert text_of(result) == "kept the file", text_of(result)
        assert recorder.asked == ["elicitation/create"]
    assert len(read_executions(tmp_path / "up", tool="confirm_delete")) == 1


async def test_a_caller_that_cannot_answer_still_gets_the_clear_error(tmp_path: Path) -> None:
    # No elicitation callback: the SDK client declares nothing it could answer, so the call is not
    # parked; the upstream task is cancelled and the text says what the client lacks.
    with start_http_server("tasks_server", state_dir=tmp_path / "up") as server, \
            gateway_for(tmp_path, http_upstream("t", server.url, prefix="", keyless_writes="pass"), stateful=False) as gateway:
        async with client(gateway.url, mode="2026-07-28", answers=False) as caller:
            with anyio.fail_after(30):
                result = await caller.call_tool("confirm_delete", {"filename": "a.txt"})
    text = text_of(result)
    assert result.is_error and "the task was cancelled" in text, text
    assert "declares elicitation in its requests" in text and "io.modelcontextprotocol/tasks extension" in text, text


def test_questions_of_one_status_go_out_in_one_round_and_a_keyed_write_is_fenced_across_it(tmp_path: Path) -> None:
    # Raw rounds: multi_input's task asks two questions at once -> one input_required round with
    # both; confirm_delete with an idempotency key -> a round, answered, the result; the same key
    # again is the replayed result (the round did not finish the call's fence).
    with start_http_server("tasks_server", state_dir=tmp_path / "up") as server, \
            gateway_for(tmp_path, http_upstream("t", server.url, prefix=""), stateful=False) as gateway:
        asking = {"elicitation": {}}
        call = {"name": "multi_input", "arguments": {}}
        first = result_of(post(gateway.url, "tools/call", call, extension=False, capabilities=asking))
        assert first["resultType"] == "input_required", first
        assert first["requestState"].startswith(PARKED), first
        requests = first["inputRequests"]
        assert len(requests) == 2 and {r["method"] for r in requests.values()} == {"elicitation/create"}, first
        answers = {k: {"action": "accept", "content": {"name": f"N{n}"}} for n, k in enumerate(sorted(requests))}
        done = result_of(post(gateway.url, "tools/call", {**call, "inputResponses": answers,
                                                          "requestState": first["requestState"]},
                              extension=False, capabilities=asking))
        assert done.get("resultType") != "input_required" and "'name': 'N0'" in done["content"][0]["text"] \
            and "'name': 'N1'" in done["content"][0]["text"], done

        write = {"name": "confirm_delete", "arguments": {"filename": "b.txt"}}
        round_ = result_of(post(gateway.url, "tools/call", write, key="del-b", extension=False, capabilities=asking))
        assert round_["resultType"] == "input_required", round_
        (key, request), = round_["inputRequests"].items()
        assert request["params"]["message"] == "Delete b.txt?", request
        yes = {key: {"action": "accept", "content": {"confirm": True}}}
        answered = result_of(post(gateway.url, "tools/call", {**write, "inputResponses": yes,
                                                              "requestState": round_["requestState"]},
                                  key="del-b", extension=False, capabilities=asking))
        assert answered["content"][0]["text"] == "deleted b.txt", answered
        again = result_of(post(gateway.url, "tools/call", write, key="del-b", extension=False, capabilities=asking))
        assert again["content"][0]["text"] == "deleted b.txt" and again["_meta"].get(REPLAYED_KEY) is True, again
    assert len(read_executions(tmp_path / "up", tool="multi_input")) == 1
    assert len(read_executions(tmp_path / "up", tool="confirm_delete")) == 1



def test_a_round_on_another_replica_is_forwarded_and_bound_to_its_principal(tmp_path: Path, pg_url: str) -> None:
    # Two stateless gateways sharing PostgreSQL and a DEX_REPLICA_SECRET: asked on A for alice; bob's
    # round with alice's state (on B, forwarded to A) is refused and leaves it; alice's round on B
    # is forwarded to A, where the call follows the upstream task to its result.
    tokens = {"alice": "alice-rounds-token", "bob": "bob-rounds-token"}
    auth = {"tokens": [{"principal": p, "token_sha256": hashlib.sha256(t.encode()).hexdigest()} for p, t in tokens.items()]}
    asking = {"elicitation": {}}
    write = {"name": "confirm_delete", "arguments": {"filename": "c.txt"}}
    with start_http_server("tasks_server", state_dir=tmp_path / "up") as server, ExitStack() as stack:
        a, b = (stack.enter_context(start_gateway(write_config(tmp_path / name, {
            "server": {"stateful": False}, "auth": auth, "upstreams": [http_upstream("t", server.url, prefix="")],
            "fences": {"store": pg_url, "replica_id": name}}), env={"DEX_REPLICA_SECRET": "rounds-test-secret"}))
            for name in ("a", "b"))
        for gateway in (a, b):
            gateway.wait_for_log("catalog ready", timeout=30)
        asked = result_of(post(a.url, "tools/call", write, key="del-c", token=tokens["alice"], extension=False,
                               capabilities=asking))
        assert asked["resultType"] == "input_required", asked
        (key, _), = asked["inputRequests"].items()
        rounds = {"inputResponses": {key: {"action": "accept", "content": {"confirm": True}}},
                  "requestState": asked["requestState"]}
        _, refused = post(b.url, "tools/call", {**write, **rounds}, key="del-c", token=tokens["bob"], extension=False,
                          capabilities=asking)
        assert refused["error"]["code"] == -32602 and "expired requestState" in refused["error"]["message"], refused
        done = result_of(post(b.url, "tools/call", {**write, **rounds}, key="del-c", token=tokens["alice"],
                              extension=False, capabilities=asking))
        assert done["content"][0]["text"] == "deleted c.txt", done
    assert len(read_executions(tmp_path / "up", tool="confirm_delete")) == 1
