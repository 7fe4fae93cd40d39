"""A recording scripted model for `dex-agent serve` tests (`--model scripted:tests.agent_host.serve_scripts:flow`).

The last user message says what the turn does; every model call is appended to the file named by
$DEX_TEST_MODEL_LOG (one JSON line: the message, the call number, the process id) before it
answers, so a test counts which process made which call of which turn.
"""

from __future__ import annotations

import json
import os

import anyio

from agent_host.models.base import ModelRequest, ModelResponse
from agent_host.models.scripted import ScriptedModelClient, call

LOG_ENV = "DEX_TEST_MODEL_LOG"


def _record(text: str, number: int) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps({"text": text, "call": number, "pid": os.getpid()}) + "\n")


def _tool(request: ModelRequest, suffix: str) -> str:
    tool = ScriptedModelClient.find_tool(request, suffix)
    assert tool is not None, f"no tool {suffix}"
    return tool.name


async def flow(request: ModelRequest) -> ModelResponse:
    """`slow S ...`: the first call takes S seconds (none once `<log>.fast` exists); `wait S ...`: a durable_wait of S s;
    `refund ORDER ...`: a refund (needs approval); `hold GATE ...`: a write held upstream; `research TOPIC S`: the
    tasks server's research (a task of S seconds); else an echo."""
    text = ScriptedModelClient.user_texts(request)[-1]
    _record(text, request.model_call)
    words = text.split()
    results = ScriptedModelClient.tool_results(request)
    if request.model_call == 1 and len(words) >= 2:
        if words[0] == "slow" and not os.path.exists(os.environ.get(LOG_ENV, "") + ".fast"):
            await anyio.sleep(float(words[1]))
        elif words[0] == "wait":
            return ModelResponse(tool_calls=[call(request, 0, "durable_wait", duration_seconds=int(words[1]), reason=text)])
        elif words[0] == "refund":
            return ModelResponse(text="Refunding.", tool_calls=[call(request, 0, _tool(request, "refund"), order=words[1], amount=5)])
        elif words[0] == "hold":
            return ModelResponse(tool_calls=[call(request, 0, _tool(request, "hold_payment"), gate=words[1])])
        elif words[0] == "research" and len(words) >= 3:
            return ModelResponse(tool_calls=[call(request, 0, _tool(request, "research"), topic=words[1], seconds=float(words[2]))])
    done = " | ".join(f"{r.tool_name}={r.text[:80]}" for r in results[-1:]) if request.model_call > 1 else ""
    return ModelResponse(text=f"done: {text}" + (f" ({done})" if done else ""))
