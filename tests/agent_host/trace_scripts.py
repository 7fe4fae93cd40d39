"""A scripted model for the trace-context test (`--model scripted:tests.agent_host.trace_scripts:write_once`)."""

from __future__ import annotations

from agent_host.models.base import ModelRequest, ModelResponse
from agent_host.models.scripted import ScriptedModelClient, call


def write_once(request: ModelRequest) -> ModelResponse:
    """Call 1 writes once through the gateway (`ops__write`); call 2 answers."""
    if request.model_call == 1:
        tool = ScriptedModelClient.find_tool(request, "ops__write")
        assert tool is not None, [t.name for t in request.tools]
        return ModelResponse(tool_calls=[call(request, 0, tool.name, text="traced")])
    return ModelResponse(text="written")
