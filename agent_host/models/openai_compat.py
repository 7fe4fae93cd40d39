"""An OpenAI-compatible chat-completions client over httpx (OpenAI, vLLM, Ollama, llama.cpp).

One HTTP request per model call, streamed by default: text deltas go to the terminal as they
come, tool calls are assembled from their fragments, usage comes from the last chunk.
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
from pydantic import BaseModel

from .base import Message, ModelError, ModelRequest, ModelResponse, TextSink, ToolCall, ToolSpec, Usage
from .openai_images import wire_messages

DEFAULT_BASE_URL = "https://api.openai.com/v1"
BASE_URL_ENVS = ("DEX_AGENT_OPENAI_BASE_URL", "OPENAI_BASE_URL")
API_KEY_ENVS = ("DEX_AGENT_OPENAI_API_KEY", "OPENAI_API_KEY")


def _first_env(names: tuple[str, ...]) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


class OpenAIConfig(BaseModel):
    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = None
    stream: bool = True
    timeout_seconds: float = 120.0

    @classmethod
    def from_env(cls, model: str, base_url: str | None = None, api_key: str | None = None, **extra: Any) -> "OpenAIConfig":
        return cls(
            model=model,
            base_url=base_url or _first_env(BASE_URL_ENVS) or DEFAULT_BASE_URL,
            api_key=api_key or _first_env(API_KEY_ENVS),
            **extra,
        )


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    if message.role == "assistant":
        # Providers accept a null content only beside tool calls.
        wire: dict[str, Any] = {"role": "assistant", "content": message.text or (None if message.tool_calls else "")}
        if message.tool_calls:
            wire["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in message.tool_calls
            ]
        return wire
    return {"role": "user", "content": message.text}


def _wire_tool(tool: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema}}


def _tool_call(call_id: str, name: str, raw_arguments: str) -> ToolCall:
    try:
        arguments = json.loads(raw_arguments) if raw_arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return ToolCall(id=call_id, name=name, invalid_arguments=f"arguments are not JSON: {exc.msg}")
    if not isinstance(arguments, dict):
        return ToolCall(id=call_id, name=name, invalid_arguments="arguments are not a JSON object")
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _usage(raw: dict[str, Any] | None) -> Usage:
    raw = raw or {}
    return Usage(input_tokens=int(raw.get("prompt_tokens") or 0), output_tokens=int(raw.get("completion_tokens") or 0))


class _Fragments:
    """Tool calls arrive in pieces keyed by index: id and name once, arguments in chunks."""

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}

    def add(self, delta: dict[str, Any]) -> None:
        slot = self._calls.setdefault(int(delta.get("index", 0)), {"id": "", "name": "", "arguments": ""})
        if delta.get("id"):
            slot["id"] = delta["id"]
        function = delta.get("function") or {}
        if function.get("name"):
            slot["name"] += function["name"]
        if function.get("arguments"):
            slot["arguments"] += function["arguments"]

    def calls(self) -> list[ToolCall]:
        return [_tool_call(s["id"] or f"call_{i}", s["name"], s["arguments"]) for i, s in sorted(self._calls.items())]


class OpenAICompatClient:
    def __init__(self, config: OpenAIConfig, http: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self.name = f"openai:{config.model}"
        self._http = http

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        messages = [{"role": "system", "content": request.instructions}] + wire_messages(
            request.messages, request.image_data, _wire_message
        )
        body: dict[str, Any] = {"model": self.config.model, "messages": messages}
        if request.tools:
            body["tools"] = [_wire_tool(t) for t in request.tools]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.max_output_tokens is not None:
            body["max_tokens"] = request.max_output_tokens
        if self.config.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelResponse:
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        http = self._http or httpx.AsyncClient(timeout=self.config.timeout_seconds)
        try:
            if self.config.stream:
                return await self._streamed(http, url, request, on_text)
            return await self._plain(http, url, request, on_text)
        except httpx.HTTPError as exc:
            # The exception text may hold the URL but never the key (it travels in a header).
            raise ModelError(f"{type(exc).__name__} calling {url}") from exc
        finally:
            if self._http is None:
                await http.aclose()

    async def _plain(self, http: httpx.AsyncClient, url: str, request: ModelRequest, on_text: TextSink | None) -> ModelResponse:
        response = await http.post(url, json=self._body(request), headers=self._headers())
        if response.status_code >= 400:
            raise ModelError(_error_text(response.status_code, response.text))
        payload = response.json()
        message = (payload.get("choices") or [{}])[0].get("message") or {}
        text = message.get("content") or ""
        if on_text is not None and text:
            await on_text(text)
        calls = [
            _tool_call(c.get("id") or f"call_{i}", c["function"]["name"], c["function"].get("arguments") or "")
            for i, c in enumerate(message.get("tool_calls") or [])
        ]
        return ModelResponse(text=text, tool_calls=calls, usage=_usage(payload.get("usage")))

    async def _streamed(self, http: httpx.AsyncClient, url: str, request: ModelRequest, on_text: TextSink | None) -> ModelResponse:
        text: list[str] = []
        fragments = _Fragments()
        usage = Usage()
        async with http.stream("POST", url, json=self._body(request), headers=self._headers()) as response:
            if response.status_code >= 400:
                raise ModelError(_error_text(response.status_code, (await response.aread()).decode(errors="replace")))
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[len("data:"):].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError as exc:
                    raise ModelError("unreadable stream chunk from the model API") from exc
                if chunk.get("usage"):
                    usage = _usage(chunk["usage"])
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        text.append(delta["content"])
                        if on_text is not None:
                            await on_text(delta["content"])
                    for call_delta in delta.get("tool_calls") or []:
                        fragments.add(call_delta)
        return ModelResponse(text="".join(text), tool_calls=fragments.calls(), usage=usage)


def _error_text(status: int, body: str) -> str:
    detail = ""
    try:
        detail = str((json.loads(body).get("error") or {}).get("message") or "")
    except (json.JSONDecodeError, AttributeError):
        pass
    return f"model API answered HTTP {status}" + (f": {detail[:300]}" if detail else "")
