"""Model clients: the protocol, a scripted model (no key) and an OpenAI-compatible client."""

from .base import Message, ModelClient, ModelError, ModelRequest, ModelResponse, ToolCall, ToolSpec, Usage

__all__ = ["Message", "ModelClient", "ModelError", "ModelRequest", "ModelResponse", "ToolCall", "ToolSpec", "Usage"]
