"""Scripted models for the host's tests, loaded by `--model scripted:tests.agent_host.scripts:<name>`.

Each is a deterministic function of the request: the model call number picks the step.
"""

from __future__ import annotations

from agent_host.models.base import ModelRequest, ModelResponse
from agent_host.models.scripted import ScriptedModelClient, call


def _tool(request: ModelRequest, suffix: str) -> str:
    tool = ScriptedModelClient.find_tool(request, suffix)
    if tool is None:
        raise AssertionError(f"no tool {suffix} offered: {[t.name for t in request.tools]}")
    return tool.name


def _summary(request: ModelRequest) -> ModelResponse:
    results = ScriptedModelClient.tool_results(request)
    return ModelResponse(text="RESULTS " + " || ".join(f"{r.tool_name}={r.text}" for r in results))


def parallel_and_ordered(request: ModelRequest) -> ModelResponse:
    """Two slow reads (parallel) and four writes: the third is refused, so the fourth is skipped."""
    if request.model_call == 1:
        return ModelResponse(tool_calls=[
            call(request, 0, _tool(request, "sleep"), seconds=1.0),
            call(request, 1, _tool(request, "set_memo"), payment_id="pay-x", memo="first"),
            call(request, 2, _tool(request, "sleep"), seconds=1.0),
            call(request, 3, _tool(request, "send_payment"), to="bob", amount=5, account="ordered"),
            call(request, 4, _tool(request, "close_account"), account="ordered"),
            call(request, 5, _tool(request, "send_payment"), to="carol", amount=7, account="ordered"),
        ])
    return _summary(request)


def two_refunds(request: ModelRequest) -> ModelResponse:
    """Two refunds in one response, each needing approval (one allowed, one denied)."""
    if request.model_call == 1:
        refund = _tool(request, "refund")
        return ModelResponse(text="Two refunds.", tool_calls=[
            call(request, 0, refund, order="7001", amount=11),
            call(request, 1, refund, order="7002", amount=12),
        ])
    return _summary(request)


def one_refund(request: ModelRequest) -> ModelResponse:
    if request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, _tool(request, "refund"), order="8001", amount=21)])
    return _summary(request)


def ask_color(request: ModelRequest) -> ModelResponse:
    if request.model_call == 1:
        return ModelResponse(tool_calls=[
            call(request, 0, "ask_user", question="Which color?", choices=["red", "green"], allows_free_text=False)
        ])
    return _summary(request)


def hold(request: ModelRequest) -> ModelResponse:
    """A non-idempotent write that blocks upstream until the test opens its gate."""
    if request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, _tool(request, "hold_payment"), gate="kill-gate")])
    return _summary(request)


def wait_three(request: ModelRequest) -> ModelResponse:
    if request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, "durable_wait", duration_seconds=3, reason="cool down")])
    return _summary(request)


def always_tools(request: ModelRequest) -> ModelResponse:
    """Never answers: asks for a plan update on every model call, offered tools or not."""
    return ModelResponse(tool_calls=[call(request, 0, "write_todos", todos=[])])
