"""Scripted models of the questions and resources tests, loaded by
`--model scripted:tests.agent_host.question_scripts:<name>`. Deterministic functions of the request."""

from __future__ import annotations

import json

from agent_host.models.base import ModelRequest, ModelResponse, ToolCall
from agent_host.models.scripted import ScriptedModelClient, call


def _summary(request: ModelRequest) -> ModelResponse:
    results = ScriptedModelClient.tool_results(request)
    return ModelResponse(text="RESULTS " + " || ".join(f"{r.tool_name}={r.text}" for r in results))


def read_resource_and_prompt(request: ModelRequest) -> ModelResponse:
    """Lists the gateway's resources and prompts, then reads the first resource and gets the first
    prompt that needs no arguments."""
    if request.model_call == 1:
        return ModelResponse(tool_calls=[call(request, 0, "mcp_list_resources_and_prompts", server="gateway")])
    if request.model_call == 2:
        [listing] = ScriptedModelClient.tool_results(request)
        listed = json.loads(listing.text)
        uri = listed["resources"][0]["uri"]
        prompt = next(p["name"] for p in listed["prompts"] if not any(a.get("required") for a in p.get("arguments", [])))
        return ModelResponse(text=f"LISTED {len(listed['resources'])} resources, {len(listed['prompts'])} prompts", tool_calls=[
            call(request, 0, "mcp_read_resource", server="gateway", uri=uri),
            ToolCall(id=f"call_{request.model_call}_1", name="mcp_get_prompt", arguments={"server": "gateway", "name": prompt}),
            call(request, 2, "mcp_read_resource", server="elsewhere", uri=uri),
        ])
    return _summary(request)


def call_tool_named(request: ModelRequest) -> ModelResponse:
    """Calls the tool whose name ends with the user's message (`<suffix>` or `<suffix> {json args}`)."""
    if request.model_call == 1:
        text = (ScriptedModelClient.user_texts(request) or [""])[-1]
        suffix, _, raw = text.partition(" ")
        tool = ScriptedModelClient.find_tool(request, suffix)
        if tool is None:
            return ModelResponse(text=f"NO TOOL {suffix}: {[t.name for t in request.tools]}")
        return ModelResponse(tool_calls=[call(request, 0, tool.name, **(json.loads(raw) if raw else {}))])
    return _summary(request)
