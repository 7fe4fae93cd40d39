"""What the session store holds: sessions, turns, tool-call records, approvals, and their states."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from gateway.media.references import ImageReference


class CallStatus(StrEnum):
    PENDING = "pending"  # recorded with the model response, nothing done yet
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    SENT = "sent"  # a request may have left: a restart re-sends with the same key
    WAITING = "waiting"  # durable_wait: wait_until is set
    AWAITING_ANSWER = "awaiting_answer"  # ask_user
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    OUTCOME_UNKNOWN = "outcome_unknown"
    REJECTED = "rejected"  # approval denied or deadline passed, or cancelled (see cancel_reason)
    SKIPPED = "skipped"
    NOT_RUN = "not_run"

    @property
    def final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset(
    {CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.OUTCOME_UNKNOWN, CallStatus.REJECTED, CallStatus.SKIPPED, CallStatus.NOT_RUN}
)


# An upstream task's statuses while it runs by itself (MCP tasks): a turn parked on it waits; any
# other status (completed, failed, cancelled, input_required, or one the gateway no longer knows)
# makes the turn due again.
OPEN_TASK_STATUSES = ("working",)


class TurnStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"  # cancel_turn: `error` says why
    STOPPED = "stopped"  # a spend limit was reached before a model call: `error` says which


class TurnMode(StrEnum):
    CHAT = "chat"
    PLANNING = "planning"  # only write_todos: the turn writes a draft plan
    EXECUTING = "executing"  # runs an approved plan revision


class CancelReason(StrEnum):
    """Why a call that had not started (or a started read) was cancelled."""

    STEERED = "steered"
    TURN_CANCELLED = "turn_cancelled"


class PlanStatus(StrEnum):
    DRAFT = "draft"  # written by a planning turn, waiting for the user's approval
    ACTIVE = "active"
    COMPLETED = "completed"
    CLEARED = "cleared"


class SessionRecord(BaseModel):
    id: str
    created_at: float
    model: str
    gateway: str
    plan: list[dict[str, Any]] | None = None
    plan_revision: int = 0
    plan_status: PlanStatus | None = None
    settings: dict[str, Any] = Field(default_factory=dict)


class TurnRecord(BaseModel):
    session_id: str
    id: str
    seq: int
    status: TurnStatus
    user_text: str
    final_text: str | None = None
    error: str | None = None
    model_calls: int = 0
    started_at: float
    finished_at: float | None = None
    mode: TurnMode = TurnMode.CHAT
    # The session's settings when the turn started: a running turn (and its resume) keeps them.
    settings: dict[str, Any] = Field(default_factory=dict)
    # Continuations in a row after answers without tools (the turn continuation hook).
    continuations: int = 0


class ToolCallRecord(BaseModel):
    session_id: str
    turn_id: str
    id: str
    model_call: int
    position: int
    name: str
    arguments: dict[str, Any]
    kind: str  # "gateway" | "builtin" | "unknown"
    effect: str
    requires_approval: bool
    idempotency_key: str
    status: CallStatus
    result_text: str | None = None
    attempts: int = 0
    wait_until: float | None = None
    updated_at: float
    cancel_reason: CancelReason | None = None
    # References to the images of the result (agent_host/gateway_client/images.py); never their bytes.
    images: list[ImageReference] = Field(default_factory=list)

    @property
    def is_write(self) -> bool:
        return self.kind == "gateway" and self.effect != "read"


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"  # the turn was steered or cancelled before a decision


class ApprovalRecord(BaseModel):
    id: str
    session_id: str
    turn_id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    status: ApprovalStatus
    reason: str | None = None
    decided_by: str | None = None
    created_at: float
    decided_at: float | None = None
    deadline: float | None = None


class QuestionStatus(StrEnum):
    PENDING = "pending"
    ANSWERED = "answered"
    DECLINED = "declined"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class QuestionKind(StrEnum):
    ASK_USER = "ask_user"  # the model's ask_user
    ELICITATION = "elicitation"  # an upstream's elicitation/create (form mode) during a tool call


class InputRound(BaseModel):
    """One `input_required` round of a tool call, kept with each of its questions: the gateway's
    `requestState` and `inputRequests` (wire form), the input request the question covers (`key`),
    and the call it belongs to (tool, arguments, idempotency key), so that the round can be sent
    after a restart with the old state under the same key."""

    request_state: str | None = None
    input_requests: dict[str, Any]
    key: str
    tool: str
    arguments: dict[str, Any]
    idempotency_key: str


class QuestionRecord(BaseModel):
    """A question to the user: the model's `ask_user`, or an upstream's form (`kind` elicitation,
    `form` its requested schema, the answer the form's fields as JSON). Answered from the
    terminal, the HTTP API or the web page."""

    id: str
    session_id: str
    turn_id: str
    tool_call_id: str
    question: str
    choices: list[str] | None = None
    allows_free_text: bool = True
    status: QuestionStatus
    answer: str | None = None
    answered_by: str | None = None
    created_at: float
    decided_at: float | None = None
    deadline: float | None = None
    kind: QuestionKind = QuestionKind.ASK_USER
    form: dict[str, Any] | None = None
    # A 2026-07-28 `input_required` round this question answers part of (None for any other):
    # what a restarted host needs to send that round with the gateway's state (never shown).
    input_round: InputRound | None = None


class ControlKind(StrEnum):
    STEER = "steer"
    CANCEL = "cancel"
    EXECUTE_PLAN = "execute_plan"


class ControlRecord(BaseModel):
    """A request from the user to a session: steer or cancel the running turn, execute a plan."""

    id: int
    session_id: str
    turn_id: str | None = None
    kind: ControlKind
    text: str | None = None
    revision: int | None = None
    source: str
    created_at: float
    applied_at: float | None = None


class UsageRecord(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None  # None: no prices configured
    model_calls: int = 0


class EventRecord(BaseModel):
    """One entry of a session's event log (the live stream); ids only grow."""

    id: int
    session_id: str
    turn_id: str | None = None
    type: str
    data: dict[str, Any]
    at: float


class CompactionRecord(BaseModel):
    """A summary of earlier messages: the message seqs it replaced (they stay stored) and the
    tool calls whose results it refers to by id (kept in `tool_calls`, never re-executed)."""

    id: int
    session_id: str
    turn_id: str
    summary: str
    first_seq: int
    last_seq: int
    replaced: list[int]
    tool_call_ids: list[str]
    created_at: float
