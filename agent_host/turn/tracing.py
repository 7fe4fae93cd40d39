"""The host's spans, by the OpenTelemetry GenAI semantic conventions: `invoke_agent dex-agent` for
each drive of a turn (its root), `chat {model}` for each model call, `execute_tool {tool}` for each
tool call. No span is recorded unless a tracer provider is installed (the host installs one when
an exporter is chosen with OTEL_TRACES_EXPORTER, as the gateway does)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from ..domain.records import ToolCallRecord, TurnRecord

__all__ = ["AGENT_NAME", "SCOPE", "Tracing"]

SCOPE = "dex-agent"
AGENT_NAME = "dex-agent"


class Tracing:
    def __init__(self, tracer: Tracer | None = None) -> None:
        # The global provider's tracer (a no-op until a provider is installed) unless given one.
        self._tracer = tracer or trace.get_tracer(SCOPE)

    @contextmanager
    def invoke_agent(self, turn: TurnRecord) -> Iterator[Span]:
        with self._tracer.start_as_current_span(f"invoke_agent {AGENT_NAME}", kind=SpanKind.INTERNAL, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.conversation.id": turn.session_id, "dex.turn.id": turn.id, "dex.turn.mode": turn.mode.value,
        }) as span:
            yield span

    @contextmanager
    def chat(self, model: str, turn: TurnRecord) -> Iterator[Span]:
        with self._tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model,
            "gen_ai.conversation.id": turn.session_id,
        }) as span:
            yield span

    @contextmanager
    def execute_tool(self, record: ToolCallRecord) -> Iterator[Span]:
        with self._tracer.start_as_current_span(f"execute_tool {record.name}", kind=SpanKind.INTERNAL, attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": record.name, "gen_ai.tool.call.id": record.id,
            "gen_ai.tool.type": "function" if record.kind == "builtin" else "extension",
            "gen_ai.conversation.id": record.session_id, "dex.tool.effect": record.effect,
        }) as span:
            yield span

    @staticmethod
    def ended(span: Span, outcome: str, error: str | None = None) -> None:
        """A span's outcome: an error status with its text when the operation failed."""
        span.set_attribute("dex.outcome", outcome)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error[:500]))
