"""A model that is a function of the request: the demo and the tests run it without a key.

Keep scripts deterministic: after a crash during a model call the loop asks again, and the
same request must give the same answer.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Awaitable, Callable
from typing import cast

from .base import Message, ModelRequest, ModelResponse, TextSink, ToolCall, ToolSpec, Usage

Script = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]


class ScriptedModelClient:
    def __init__(self, script: Script, name: str = "scripted") -> None:
        self._script = script
        self.name = name

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelResponse:
        reply = self._script(request)
        if inspect.isawaitable(reply):
            reply = await reply
        if on_text is not None and reply.text:
            # Word by word, so the terminal shows the same streaming as with a real model.
            for piece in re.findall(r"\S+\s*|\s+", reply.text):
                await on_text(piece)
        words = sum(len(m.text.split()) for m in request.messages)
        return reply.model_copy(update={"usage": Usage(input_tokens=words, output_tokens=len(reply.text.split()))})

    # Helpers for scripts -------------------------------------------------------------------

    @staticmethod
    def user_texts(request: ModelRequest) -> list[str]:
        return [m.text for m in request.messages if m.role == "user"]

    @staticmethod
    def tool_results(request: ModelRequest) -> list[Message]:
        """The results of the previous model response (the trailing tool messages)."""
        trailing: list[Message] = []
        for message in reversed(request.messages):
            if message.role != "tool":
                break
            trailing.append(message)
        return list(reversed(trailing))

    @staticmethod
    def images(request: ModelRequest) -> list[tuple[Message, int, bytes | None]]:
        """Every image the model is shown: (its message, its number there, its bytes or None
        when they could not be loaded for this call)."""
        return [(m, n, request.image_data.get(ref.sha256)) for m in request.messages for n, ref in enumerate(m.images, 1)]

    @staticmethod
    def find_tool(request: ModelRequest, suffix: str) -> ToolSpec | None:
        """The offered tool named `suffix`, or `<prefix>__suffix` when behind the gateway."""
        for tool in request.tools:
            if tool.name == suffix or tool.name.endswith("__" + suffix):
                return tool
        return None


def call(request: ModelRequest, index: int, name: str, **arguments: object) -> ToolCall:
    """A tool call with an id that depends only on the request, so a rerun gives the same id."""
    return ToolCall(id=f"call_{request.model_call}_{index}", name=name, arguments=dict(arguments))


_DEMO_BALANCE = re.compile(r"balance of (?:account )?(?P<account>[\w-]+)", re.I)
_DEMO_REFUND = re.compile(r"refund (?:order )?(?P<order>[\w-]+) by (?P<amount>\d+(?:\.\d+)?)", re.I)


def demo_script(request: ModelRequest) -> ModelResponse:
    """The demo: "What is the balance of account acme and refund order 5521 by 40?"

    Call 1 reads in parallel (get_balance, list_payments), call 2 asks for the refund (a
    write that needs approval), call 3 answers from the results. Anything else is echoed.
    """
    question = (ScriptedModelClient.user_texts(request) or [""])[-1]
    balance = _DEMO_BALANCE.search(question)
    refund = _DEMO_REFUND.search(question)
    get_balance = ScriptedModelClient.find_tool(request, "get_balance")
    list_payments = ScriptedModelClient.find_tool(request, "list_payments")
    refund_tool = ScriptedModelClient.find_tool(request, "refund")
    results = ScriptedModelClient.tool_results(request)

    if request.model_call == 1 and balance and get_balance:
        calls = [call(request, 0, get_balance.name, account=balance.group("account"))]
        if list_payments:
            calls.append(call(request, 1, list_payments.name))
        return ModelResponse(text="Let me look that up.", tool_calls=calls)
    if request.model_call <= 2 and refund and refund_tool and not any(r.tool_name == refund_tool.name for r in results):
        amount = float(refund.group("amount"))
        return ModelResponse(
            text=f"Now the refund of order {refund.group('order')}.",
            tool_calls=[
                call(request, 0, refund_tool.name, order=refund.group("order"), amount=int(amount) if amount.is_integer() else amount)
            ],
        )
    last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
    done = [m for m in request.messages[last_user:] if m.role == "tool"]
    if done:
        lines = [f"- {m.tool_name}: {m.text}" for m in done]
        return ModelResponse(text="Here is what I found and did:\n" + "\n".join(lines))
    return ModelResponse(text=f"Demo reply: {question}")


def load_script(spec: str) -> Script:
    """`scripted` is the demo; `scripted:package.module:function` loads a script of your own."""
    if spec in ("", "demo"):
        return demo_script
    module_name, _, attribute = spec.partition(":")
    if not attribute:
        raise ValueError(f"scripted model {spec!r}: expected module:function")
    script = getattr(importlib.import_module(module_name), attribute)
    if not callable(script):
        raise ValueError(f"scripted model {spec!r} is not callable")
    return cast(Script, script)
