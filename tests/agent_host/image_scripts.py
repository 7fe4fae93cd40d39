"""A scripted model that looks at images: `--model scripted:tests.agent_host.image_scripts:look_at_images`."""

from __future__ import annotations

from agent_host.models.base import ModelRequest, ModelResponse, ToolCall
from agent_host.models.scripted import ScriptedModelClient


def look_at_images(request: ModelRequest) -> ModelResponse:
    """Call 1 asks the gateway for an image; call 2 says which images it was shown, with their sizes."""
    if request.model_call == 1:
        tool = ScriptedModelClient.find_tool(request, "image")
        assert tool is not None, [t.name for t in request.tools]
        return ModelResponse(tool_calls=[ToolCall(id="call_img", name=tool.name, arguments={"name": "png:5"})])
    seen = [f"{m.role}#{n}:{len(data) if data is not None else 'missing'}" for m, n, data in ScriptedModelClient.images(request)]
    return ModelResponse(text="SAW " + ", ".join(seen))


def say_what_it_sees(request: ModelRequest) -> ModelResponse:
    """Calls no tool: says which images the request shows, with their sizes (`missing`: not loaded)."""
    seen = [f"{m.role}#{n}:{len(data) if data is not None else 'missing'}" for m, n, data in ScriptedModelClient.images(request)]
    return ModelResponse(text="SAW " + ", ".join(seen))
