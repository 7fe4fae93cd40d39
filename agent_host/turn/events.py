"""What the turn loop reports as it goes (the CLI prints it), and what it needs from a tool source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..approvals.gate import ApprovalCard, Decision
from ..domain.records import ToolCallRecord, TurnRecord, UsageRecord
from ..gateway_client.tools import CallRequest, CallResult, GatewayTool, OnAttempt, OnProgress
from ..models.base import ModelResponse


class ToolSource(Protocol):
    async def list_tools(self, found: Sequence[GatewayTool] = ()) -> list[GatewayTool]: ...

    async def call(
        self, request: CallRequest, on_attempt: OnAttempt | None = None, on_progress: OnProgress | None = None
    ) -> CallResult: ...


class LoopEvents:
    """The default does nothing; override what you show."""

    async def text(self, delta: str) -> None: ...

    async def model_response(self, turn: TurnRecord, response: ModelResponse) -> None: ...

    async def tool_started(self, record: ToolCallRecord) -> None: ...

    async def tool_progress(self, record: ToolCallRecord, progress: float, total: float | None, message: str | None) -> None: ...

    async def tool_finished(self, record: ToolCallRecord, replayed: bool) -> None: ...

    async def tool_refused(self, record: ToolCallRecord) -> None:
        """A call the host refused before running it: unknown tool, bad arguments, limit reached."""

    async def approval_card(self, card: ApprovalCard) -> None: ...

    async def approval_decided(self, record: ToolCallRecord, decision: Decision) -> None: ...

    async def steered(self, turn: TurnRecord, messages: list[str]) -> None:
        """Steer messages were added to the turn before its next model call."""

    async def compacted(self, turn: TurnRecord, replaced_messages: int, replaced_tokens: int) -> None: ...

    async def turn_finished(self, turn: TurnRecord, turn_usage: UsageRecord, session_usage: UsageRecord) -> None: ...
