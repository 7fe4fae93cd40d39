"""Images on the OpenAI chat-completions wire: `image_url` content parts with data URLs.

A user message with images gets a content list (its text, then one part per image). A tool
message must stay text on that wire, so the images of a run of tool results go in one user
message right after the run (providers want the tool messages directly after the assistant
message that called them): `Images from tool results: [image 1] (call_a, chart)` and the parts.
An image whose bytes could not be loaded for this call is a text part that says so.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

from .base import Message

__all__ = ["wire_messages"]


def _parts(message: Message, image_data: Mapping[str, bytes]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for n, image in enumerate(message.images, 1):
        data = image_data.get(image.sha256)
        if data is None:
            parts.append({"type": "text", "text": f"[image {n} ({image.mime_type}) is not available right now]"})
            continue
        url = f"data:{image.mime_type};base64,{base64.b64encode(data).decode('ascii')}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _tool_images(tools: list[Message], image_data: Mapping[str, bytes]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for message in tools:
        names = ", ".join(f"[image {n}]" for n in range(1, len(message.images) + 1))
        content.append({"type": "text", "text": f"Images from the result of {message.tool_name} (call {message.tool_call_id}): {names}"})
        content.extend(_parts(message, image_data))
    return {"role": "user", "content": content}


def wire_messages(
    messages: list[Message], image_data: Mapping[str, bytes], wire_one: Callable[[Message], dict[str, Any]]
) -> list[dict[str, Any]]:
    """The messages on the wire (`wire_one` writes one without images), images as parts."""
    wired: list[dict[str, Any]] = []
    waiting: list[Message] = []  # tool results with images, until their run of tool messages ends
    for message in messages:
        if message.role != "tool" and waiting:
            wired.append(_tool_images(waiting, image_data))
            waiting = []
        entry = wire_one(message)
        if message.images and message.role == "user":
            entry["content"] = [{"type": "text", "text": message.text}, *_parts(message, image_data)]
        elif message.images and message.role == "tool":
            waiting.append(message)
        wired.append(entry)
    if waiting:
        wired.append(_tool_images(waiting, image_data))
    return wired
