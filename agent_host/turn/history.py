"""What a model call sees of the session, built from committed state only.

The latest compaction's summary (if any) first, then every stored message after what it
replaced; each assistant message with tool calls is followed by their results (a call without a
final result gets the outcome-unknown text, so an orphaned call never reaches a provider), and
the plan note goes before the running turn's messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..domain import texts
from ..domain.records import CompactionRecord
from ..models.base import Message, ModelRequest, ToolSpec
from ..store.session_store import SessionStore

BYTES_PER_TOKEN = 3  # errs high for English text, as the seed's estimateTextTokens
IMAGE_TOKENS = 1600  # each image a message shows the model (the seeds' estimatedImageInputTokens)


def estimate_tokens(text: str) -> int:
    return (len(text.encode("utf-8")) + BYTES_PER_TOKEN - 1) // BYTES_PER_TOKEN


def message_tokens(message: Message) -> int:
    calls = "".join(c.name + texts.as_json(c.arguments) for c in message.tool_calls)
    return estimate_tokens(message.text + calls) + 4 + IMAGE_TOKENS * len(message.images)


def request_tokens(request: ModelRequest) -> int:
    """An estimate of the request's input: instructions, messages and tool definitions."""
    tools = "".join(t.name + t.description + texts.as_json(t.input_schema) for t in request.tools)
    return estimate_tokens(request.instructions + tools) + sum(message_tokens(m) for m in request.messages)


@dataclass
class Unit:
    """One stored message, with the results of its tool calls: never split by a compaction."""

    seq: int
    turn_id: str
    messages: list[Message]
    call_ids: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(message_tokens(m) for m in self.messages)


@dataclass
class History:
    compaction: CompactionRecord | None
    units: list[Unit]

    def messages(self, turn_id: str, note: str | None) -> list[Message]:
        out: list[Message] = []
        if self.compaction is not None:
            out.append(Message(role="user", text=f"{texts.CONTEXT_SUMMARY_HEADER}\n{self.compaction.summary}"))
        noted = note is None
        for unit in self.units:
            if not noted and unit.turn_id == turn_id:
                out.append(Message(role="user", text=note or ""))
                noted = True
            out.extend(unit.messages)
        if not noted:
            out.append(Message(role="user", text=note or ""))
        return out

    def request(self, turn_id: str, note: str | None, instructions: str, tools: list[ToolSpec], **extra: object) -> ModelRequest:
        return ModelRequest(instructions=instructions, messages=self.messages(turn_id, note), tools=tools, **extra)


async def load_history(store: SessionStore, session_id: str) -> History:
    compactions = await store.compactions(session_id)
    latest = compactions[-1] if compactions else None
    records = {c.id: c for c in await store.tool_calls(session_id)}
    units: list[Unit] = []
    for seq, turn_id, message in await store.stored_messages(session_id, latest.last_seq if latest else 0):
        unit = Unit(seq, turn_id, [message], [c.id for c in message.tool_calls])
        for call in message.tool_calls:
            record = records.get(call.id)
            text = record.result_text if record and record.status.final and record.result_text is not None else None
            text = text if text is not None else texts.missing_result()
            images = record.images if record and record.status.final else []
            unit.messages.append(Message(role="tool", text=text, tool_call_id=call.id, tool_name=call.name, images=images))
        units.append(unit)
    return History(latest, units)
