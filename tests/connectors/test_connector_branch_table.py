"""SPEC 7's branch -> outcome table, every row, driven by the conventions fixtures."""

from __future__ import annotations

from typing import Any

import pytest
from connector_support import load_doc, manifest_doc, python_tool

from gateway.connectors.bindings import ConnectorRequest
from gateway.connectors.branches import decide
from gateway.conventions.answers import Answer
from gateway.conventions.fixtures import cases
from gateway.conventions.keys import OUTCOME_KEY

CASES = cases("connector_branches")


def _manifest(case: dict[str, Any], *, retry_safe: bool) -> Any:
    inp = case["input"]
    agent: dict[str, Any] = {"exposed": True, "branches": inp["listing"]}
    if retry_safe:
        agent["retry"] = "safe"
    return load_doc(manifest_doc({
        "name": inp["operation"], "kind": inp["kind"], "description": "d", "branches": inp["branches"],
        "execution": {"executeMethodTimeout": "2s", "retry": {"initialInterval": "1ms", "maximumAttempts": 3}},
        "agent": agent, "inputSchema": {"type": "object"},
    }, name=inp["connector"]))


def _check(answer: Answer, expect: dict[str, Any]) -> None:
    assert answer.is_error is expect["is_error"]
    assert (answer.meta or {}).get(OUTCOME_KEY) == expect["outcome"]
    if "text" in expect:
        assert answer.text == expect["text"]
    for part in expect.get("text_contains", []):
        assert part in answer.text


def test_every_row_is_covered() -> None:
    rows = {c["expect"]["row"] for c in CASES}
    assert rows == {"uncertain", "mutation_defect", "success_branch", "mutation_maybe_sent", "listed_rejected",
                    "listed_unknown_or_mutation_unlisted", "query_unlisted"}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_decision(case: dict[str, Any]) -> None:
    inp = case["input"]
    manifest = _manifest(case, retry_safe=False)
    op = manifest.operations[0]
    decision = decide(kind=inp["kind"], branch=inp["response"]["branch"], success_branches=op.success_branches,
                      listing=inp["listing"], maybe_sent_before=inp["maybe_sent_before"])
    assert (decision.row.value, decision.verdict.value) == (case["expect"]["row"], case["expect"]["verdict"])


@pytest.mark.anyio
@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
async def test_call_answers(case: dict[str, Any]) -> None:
    """Through ConnectorTool.call: an earlier attempt that may have been sent is a real
    interrupted attempt (the binding raises after it 'ran'), then the case's response."""
    inp = case["input"]
    maybe = inp["maybe_sent_before"]
    manifest = _manifest(case, retry_safe=maybe and inp["kind"] == "mutation")
    attempts: list[ConnectorRequest] = []

    async def operation(request: ConnectorRequest) -> dict[str, Any]:
        attempts.append(request)
        if maybe and request.attempt == 1:
            raise ConnectionResetError("dropped after sending")
        return inp["response"]

    tool = python_tool(manifest, inp["operation"], operation)
    answer = await tool.call({}, idempotency_key="s/t/1", fence_id=None, takeover=False)
    _check(answer, case["expect"]["answer"])
    assert len(attempts) == (2 if maybe else 1)
    assert len({a.call_id for a in attempts}) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("case", [c for c in CASES if c["input"]["maybe_sent_before"]], ids=lambda c: c["id"])
async def test_takeover_counts_as_maybe_sent(case: dict[str, Any]) -> None:
    """takeover=True (a previous attempt of this call, by a replica that died, may have been
    sent) has the same effect as an interrupted attempt in this call."""
    inp = case["input"]
    manifest = _manifest(case, retry_safe=inp["kind"] == "mutation")

    async def operation(request: ConnectorRequest) -> dict[str, Any]:
        return inp["response"]

    tool = python_tool(manifest, inp["operation"], operation)
    _check(await tool.call({}, idempotency_key="k", fence_id="f", takeover=True), case["expect"]["answer"])
