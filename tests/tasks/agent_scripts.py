"""Scripted models for the task tests (`--model scripted:tests.tasks.agent_scripts:<name>`)."""

from __future__ import annotations

from agent_host.models.base import ModelRequest, ModelResponse
from agent_host.models.scripted import ScriptedModelClient, call


def research(request: ModelRequest) -> ModelResponse:
    """One call of a tool that needs a task (taskSupport required), then a summary."""
    if request.model_call == 1:
        tool = ScriptedModelClient.find_tool(request, "research")
        assert tool is not None, [t.name for t in request.tools]
        return ModelResponse(tool_calls=[call(request, 0, tool.name, topic="otters", seconds=6)])
    results = ScriptedModelClient.tool_results(request)
    return ModelResponse(text="RESULTS " + " || ".join(f"{r.tool_name}={r.text}" for r in results))
