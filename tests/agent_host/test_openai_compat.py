"""The OpenAI-compatible client against recorded chat-completions responses (respx, no key)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from agent_host.models.base import Message, ModelError, ModelRequest, ToolCall, ToolSpec
from agent_host.models.openai_compat import OpenAICompatClient, OpenAIConfig

pytestmark = pytest.mark.anyio
BASE = "http://127.0.0.1:11434/v1"
URL = BASE + "/chat/completions"


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


REQUEST = ModelRequest(
    instructions="be brief",
    messages=[
        Message(role="user", text="refund 5521"),
        Message(role="assistant", text="", tool_calls=[ToolCall(id="call_a", name="payments__get_balance", arguments={"account": "acme"})]),
        Message(role="tool", text="balance of acme: 1000.00 EUR", tool_call_id="call_a", tool_name="payments__get_balance"),
    ],
    tools=[ToolSpec(name="payments__refund", description="Refund", input_schema={"type": "object", "properties": {"order": {"type": "string"}}})],
)


def client(stream: bool = True) -> OpenAICompatClient:
    return OpenAICompatClient(OpenAIConfig(model="test-model", base_url=BASE, api_key="test-key-not-real", stream=stream))


@respx.mock
async def test_streamed_answer_goes_to_the_terminal_as_it_comes() -> None:
    route = respx.post(URL).mock(return_value=httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "The balance "}),
        chunk({"content": "is 1000 EUR."}),
        chunk({}, finish="stop"),
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 42, "completion_tokens": 7}},
    )))
    seen: list[str] = []

    async def sink(delta: str) -> None:
        seen.append(delta)

    response = await client().complete(REQUEST, on_text=sink)
    assert seen == ["The balance ", "is 1000 EUR."]
    assert response.text == "The balance is 1000 EUR." and response.tool_calls == []
    assert (response.usage.input_tokens, response.usage.output_tokens) == (42, 7)

    sent = route.calls.last.request
    assert sent.headers["authorization"] == "Bearer test-key-not-real"
    body = json.loads(sent.content)
    assert body["model"] == "test-model" and body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["messages"][2]["tool_calls"][0] == {
        "id": "call_a", "type": "function", "function": {"name": "payments__get_balance", "arguments": '{"account": "acme"}'}}
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "call_a", "content": "balance of acme: 1000.00 EUR"}
    assert body["tools"][0]["function"]["name"] == "payments__refund"


@respx.mock
async def test_streamed_tool_calls_are_assembled_from_fragments() -> None:
    respx.post(URL).mock(return_value=httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse(
        chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_x", "type": "function", "function": {"name": "payments__refund", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"order": "55'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '21", "amount": 40}'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "call_y", "type": "function", "function": {"name": "ask_user", "arguments": "{not json"}}]}),
        chunk({}, finish="tool_calls"),
    )))
    response = await client().complete(REQUEST)
    first, second = response.tool_calls
    assert (first.id, first.name, first.arguments) == ("call_x", "payments__refund", {"order": "5521", "amount": 40})
    assert second.name == "ask_user" and second.invalid_arguments is not None


@respx.mock
async def test_non_streamed_tool_calls_and_usage() -> None:
    respx.post(URL).mock(return_value=httpx.Response(200, json={
        "id": "chatcmpl-2", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": "call_z", "type": "function", "function": {"name": "payments__refund", "arguments": '{"order": "5521"}'}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
    }))
    response = await client(stream=False).complete(REQUEST)
    assert response.tool_calls == [ToolCall(id="call_z", name="payments__refund", arguments={"order": "5521"})]
    assert response.usage.output_tokens == 3


@respx.mock
async def test_http_errors_become_model_errors_without_the_key() -> None:
    respx.post(URL).mock(return_value=httpx.Response(401, json={"error": {"message": "Incorrect API key provided"}}))
    with pytest.raises(ModelError) as caught:
        await client().complete(REQUEST)
    assert "HTTP 401" in str(caught.value) and "test-key-not-real" not in str(caught.value)


def test_config_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", BASE)
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    config = OpenAIConfig.from_env("m")
    assert (config.base_url, config.api_key) == (BASE, "from-env")
