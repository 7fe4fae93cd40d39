"""Scripted models for the host's tests, loaded by `--model scripted:tests.agent_host.scripts:<name>`.

Each is a deterministic function of the request: the model call number picks the step.
"""

from __future__ import annotations

from agent_host.models.base import ModelRequest, ModelResponse, ToolCall
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


def cut_effects(request: ModelRequest) -> ModelResponse:
    """One call of each effect through a connection-cutting proxy: a read and an idempotent
    write first (parallel / ordered), then a non-idempotent write, then the results verbatim."""
    if request.model_call == 1:
        return ModelResponse(tool_calls=[
            call(request, 0, _tool(request, "get_balance"), account="cut"),
            call(request, 1, _tool(request, "set_memo"), payment_id="pay-cut", memo="cut"),
        ])
    if request.model_call == 2:
        return ModelResponse(tool_calls=[call(request, 0, _tool(request, "send_payment"), to="dora", amount=3, account="cut")])
    return ModelResponse(text="MODEL SAW " + " || ".join(
        f"{m.tool_name}={m.text}" for m in request.messages if m.role == "tool"))


def hold_memo(request: ModelRequest) -> ModelResponse:
    """An idempotent write that blocks upstream until the test opens its gate."""
    if request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, _tool(request, "hold_memo"), gate="memo-gate")])
    return _summary(request)


def refused_and_progress(request: ModelRequest) -> ModelResponse:
    """An unknown tool, bad arguments, and a read that reports progress."""
    if request.model_call == 1:
        return ModelResponse(tool_calls=[
            call(request, 0, "no_such_tool", x=1),
            call(request, 1, _tool(request, "get_balance"), account=5),
            call(request, 2, _tool(request, "long_report"), steps=3, step_seconds=0.05),
        ])
    return _summary(request)


def refund_then_echo(request: ModelRequest) -> ModelResponse:
    """A turn whose message starts with "refund" asks for one refund (approval needed); any
    other turn echoes the user's message, so a test can see which lines reached the host."""
    last = (ScriptedModelClient.user_texts(request) or [""])[-1]
    if ScriptedModelClient.tool_results(request):
        return _summary(request)
    if last.startswith("refund") and request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, _tool(request, "refund"), order="9001", amount=5)])
    return ModelResponse(text=f"ECHO: {last}")


def end_turn_hook(context: object) -> str:
    """A turn continuation hook (`--continuation-hook tests.agent_host.scripts:end_turn_hook`):
    every turn ends after its first iteration."""
    return "end"


def hold_for_stream(request: ModelRequest) -> ModelResponse:
    """A write that blocks upstream at its own gate, then the results: the live stream's test."""
    if request.model_call == 1:
        return ModelResponse(text="Holding the payment.", tool_calls=[call(request, 0, _tool(request, "hold_payment"), gate="sse-gate")])
    return _summary(request)


def _last_user(request: ModelRequest) -> str:
    return (ScriptedModelClient.user_texts(request) or [""])[-1]


def ask_free_text(request: ModelRequest) -> ModelResponse:
    """An ask_user question with choices and free text (the web page answers it)."""
    if request.model_call == 1:
        return ModelResponse(tool_calls=[
            call(request, 0, "ask_user", question="Which color should the <b>report</b> use?",
                 choices=["red", "green"], allows_free_text=True)
        ])
    return _summary(request)


def wait_then_follow_steering(request: ModelRequest) -> ModelResponse:
    """A long durable wait; a steer message cancels it, and the next model call answers the
    user's latest message."""
    if request.model_call == 1:
        return ModelResponse(text="Waiting before I deploy.", tool_calls=[
            call(request, 0, "durable_wait", duration_seconds=600, reason="deploy window")])
    return ModelResponse(text=f"STEERED: {_last_user(request)}")


def hostile_refund(request: ModelRequest) -> ModelResponse:
    """A refund whose argument names and values try to forge the approval card."""
    if request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, _tool(request, "refund"), **HOSTILE_ARGUMENTS)])
    return _summary(request)


HOSTILE_ARGUMENTS: dict[str, object] = {
    "order": "7777",
    "amount": 1,
    "<img src=x onerror=\"window.__pwned=1\">": "</script><script>window.__pwned=2</script>",
    "\u202eevil": "\u202e004",
    "amount: 40, note": "zero\u200bwidth",
    "bell\x07\x1b[2K": "<b>bold</b>",
}


def plan_then_execute(request: ModelRequest) -> ModelResponse:
    """A planning turn writes a two-task plan; the executing turn reads the balance, marks the
    tasks completed and answers."""
    if [t.name for t in request.tools] == ["write_todos"]:
        if request.model_call == 1:
            return ModelResponse(text="My plan.", tool_calls=[call(request, 0, "write_todos", todos=[
                {"content": "read the balance of acme", "status": "pending"},
                {"content": "report it", "status": "pending"}])])
        return ModelResponse(text="Plan ready for review.")
    if not request.tools:
        return ModelResponse(text="no tools")
    if request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, _tool(request, "get_balance"), account="acme")])
    if request.model_call == 2:
        return ModelResponse(tool_calls=[call(request, 0, "write_todos", todos=[
            {"content": "read the balance of acme", "status": "completed"},
            {"content": "report it", "status": "completed"}])])
    return ModelResponse(text="EXECUTED: " + " | ".join(m.text for m in request.messages if m.role == "tool"))


def discover_and_call(request: ModelRequest) -> ModelResponse:
    """Discovery (docs/discovery.md): the gateway lists only search_tools and call_tool; search for
    the balance tool, then call it by its own name once it is offered."""
    offered = {t.name for t in request.tools}
    if request.model_call == 1:
        if any(name.endswith("get_balance") for name in offered):
            raise AssertionError(f"get_balance was listed before any search: {sorted(offered)}")
        return ModelResponse(tool_calls=[call(request, 0, "search_tools", query="balance of an account", limit=3)])
    if request.model_call == 2:
        return ModelResponse(tool_calls=[call(request, 0, _tool(request, "get_balance"), account="acme")])
    return _summary(request)


def refund_through_call_tool(request: ModelRequest) -> ModelResponse:
    """Discovery (docs/discovery.md): search for the refund tool, then run it through the gateway's
    call_tool (as a client that can only call listed tools does)."""
    if request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, "search_tools", query="refund an order", limit=3)])
    if request.model_call == 2:
        target = {"name": _tool(request, "refund"), "arguments": {"order": "5521", "amount": 40}}
        return ModelResponse(tool_calls=[ToolCall(id=f"call_{request.model_call}_0", name="call_tool", arguments=target)])
    return _summary(request)


def call_found_at_once(request: ModelRequest) -> ModelResponse:
    """A resumed discovery session (docs/discovery.md): the balance tool found earlier is offered
    from the first model call on; call it without searching."""
    if request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, _tool(request, "get_balance"), account="acme")])
    return _summary(request)
