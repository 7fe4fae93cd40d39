"""The answer to one tools/call, in MCP wire form, as the gateway records and replays it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..protocol import ContentBlock, JsonObject, Meta, Result
from .keys import OUTCOME_KEY, Outcome


@dataclass(frozen=True, slots=True)
class Answer:
    """A tools/call result as JSON-ready wire values (camelCase keys inside content/meta).

    Fences store `to_wire()` and replay `from_wire()`; content blocks are kept verbatim so
    a replay is byte for byte the first answer.
    """

    content: list[ContentBlock] = field(default_factory=list)
    structured_content: JsonObject | None = None
    is_error: bool = False
    meta: Meta | None = None
    # An upstream's `input_required` result (2026-07-28, multi-round-trip): the call is not over
    # yet (the client answers its `inputRequests` and calls again), so it is passed on as it is
    # and never recorded as the call's answer.
    input_required: Result | None = None

    @property
    def outcome(self) -> Outcome | None:
        return Outcome.of((self.meta or {}).get(OUTCOME_KEY))

    @property
    def text(self) -> str:
        """Text blocks joined with newlines (what a log or a model reads)."""
        return "\n".join(b.get("text", "") for b in self.content if b.get("type") == "text")

    def to_wire(self) -> Result:
        if self.input_required is not None:
            return dict(self.input_required)
        wire: Result = {"content": self.content, "isError": self.is_error}
        if self.structured_content is not None:
            wire["structuredContent"] = self.structured_content
        if self.meta:
            wire["_meta"] = self.meta
        return wire

    @classmethod
    def from_wire(cls, wire: Result) -> "Answer":
        return cls(
            content=list(wire.get("content") or []),
            structured_content=wire.get("structuredContent"),
            is_error=bool(wire.get("isError", False)),
            meta=wire.get("_meta") or None,
        )

    def with_meta(self, **entries: Any) -> "Answer":
        return Answer(self.content, self.structured_content, self.is_error, {**(self.meta or {}), **entries},
                      self.input_required)

    @classmethod
    def error_text(cls, text: str, outcome: Outcome | None = None, meta: Meta | None = None) -> "Answer":
        """An isError answer with one text block; with `outcome`, the Dex key is set."""
        merged = dict(meta or {})
        if outcome is not None:
            merged[OUTCOME_KEY] = outcome.value
        return cls(content=[{"type": "text", "text": text}], is_error=True, meta=merged or None)


@dataclass(frozen=True, slots=True)
class Dispatched:
    """What one dispatch (upstream or connector) ended with.

    `sent` is False only when provably nothing reached the target on any attempt: the fence
    is then released, so the same key may be sent again as a new call.
    """

    answer: Answer
    sent: bool
