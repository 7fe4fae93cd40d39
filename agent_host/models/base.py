"""What every model client takes and returns: the boundary between the loop and a model."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from gateway.media.references import ImageReference


class ToolSpec(BaseModel):
    """A tool as offered to the model: the exact name the loop will call."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Set when the model sent arguments that are not a JSON object; the call is not run.
    invalid_arguments: str | None = None


class Message(BaseModel):
    """One entry of the conversation as the model sees it.

    `user`: text. `assistant`: text and/or tool calls. `tool`: the result text of one call.
    `images` (user and tool messages): references only; the bytes travel in the request.
    """

    role: Literal["user", "assistant", "tool"]
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    images: list[ImageReference] = Field(default_factory=list)


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class ModelRequest(BaseModel):
    instructions: str
    messages: list[Message]
    tools: list[ToolSpec]
    # 1-based number of this model call within the turn (scripts branch on it).
    model_call: int = 1
    # The bytes of the messages' images, by SHA-256, loaded for this call (agent_host/gateway_client/images.py);
    # an image missing here is shown to the model as not available.
    image_data: dict[str, bytes] = Field(default_factory=dict, exclude=True)
    # "summary": the host compacting the history (no tools; answer with the summary).
    purpose: Literal["turn", "summary"] = "turn"
    # The session's settings, passed through when set.
    temperature: float | None = None
    max_output_tokens: int | None = None


class ModelResponse(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)


TextSink = Callable[[str], Awaitable[None]]


class ModelError(Exception):
    """The model call failed; the turn fails with this text (no key or body leaks into it)."""


class ModelClient(Protocol):
    name: str

    async def complete(self, request: ModelRequest, on_text: TextSink | None = None) -> ModelResponse:
        """One model call. Streams text deltas to `on_text` when given."""
        ...
