"""Approvals: ids, cards, decisions, deadlines, and the approvers' HTTP API.

A card is built from the stored call (tool name and arguments), never from the model's
words about it. Decisions live in the session store, so the CLI prompt, the HTTP API (in
this process or another one on the same store) and a restarted host all see the first one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, Protocol

import anyio
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .store import ApprovalRecord, ApprovalStatus, SessionStore, ToolCallRecord

DEFAULT_APPROVAL_TIMEOUT_SECONDS = 600.0
APPROVER_TOKEN_ENV = "DEX_APPROVER_TOKEN"


def approval_id(session_id: str, tool_call_id: str) -> str:
    """First 32 hex chars of SHA-256 over the session id and the tool call id.

    A NUL separates the two so ("a", "bc") and ("ab", "c") differ. The same call raised
    again after a restart gets the same id, so a decision sent across the restart lands.
    """
    digest = hashlib.sha256(f"{session_id}\0{tool_call_id}".encode()).hexdigest()
    return digest[:32]


def display_name(tool_name: str) -> str:
    """The upstream tool's own name: the gateway publishes `<server>__<tool>`."""
    return tool_name.split("__", 1)[1] if "__" in tool_name else tool_name


def argument_view(arguments: dict[str, Any]) -> str:
    """`key: value` pairs, each value as JSON, in the call's own order."""
    return ", ".join(f"{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in arguments.items())


def call_summary(tool_name: str, arguments: dict[str, Any]) -> str:
    """`refund(order: "5521", amount: 40)`."""
    return f"{display_name(tool_name)}({argument_view(arguments)})"


class ApprovalCard(BaseModel):
    id: str
    title: str
    call: str
    tool: str
    effect: str
    session_id: str
    turn_id: str
    tool_call_id: str
    idempotency_key: str
    status: ApprovalStatus = ApprovalStatus.PENDING
    deadline: float | None = None
    buttons: tuple[str, str] = ("Allow", "Deny")

    @classmethod
    def for_call(cls, record: ToolCallRecord, status: ApprovalStatus = ApprovalStatus.PENDING, deadline: float | None = None) -> "ApprovalCard":
        return cls(
            id=approval_id(record.session_id, record.id),
            title=f"{display_name(record.name)} wants to run",
            call=call_summary(record.name, record.arguments),
            tool=record.name,
            effect=record.effect,
            session_id=record.session_id,
            turn_id=record.turn_id,
            tool_call_id=record.id,
            idempotency_key=record.idempotency_key,
            status=status,
            deadline=deadline,
        )

    @classmethod
    def for_approval(cls, approval: ApprovalRecord, store: SessionStore) -> "ApprovalCard":
        record = store.get_tool_call(approval.session_id, approval.tool_call_id)
        return cls.for_call(record, approval.status, approval.deadline)


class Decision(BaseModel):
    allowed: bool
    status: ApprovalStatus
    decided_by: str
    reason: str | None = None

    @classmethod
    def of(cls, approval: ApprovalRecord) -> "Decision":
        return cls(
            allowed=approval.status is ApprovalStatus.ALLOWED,
            status=approval.status,
            decided_by=approval.decided_by or "",
            reason=approval.reason,
        )


class ApprovalPrompter(Protocol):
    async def ask(self, card: ApprovalCard) -> tuple[bool, str | None]:
        """Show the card to a person; (allowed, reason). Cancelled when decided elsewhere."""
        ...


ApprovalMode = Literal["prompt", "auto", "api"]


class ApprovalGate:
    """Waits for the decision on one call: from the prompt, the API, auto, or the deadline."""

    def __init__(
        self,
        store: SessionStore,
        mode: ApprovalMode,
        prompter: ApprovalPrompter | None = None,
        timeout_seconds: float | None = DEFAULT_APPROVAL_TIMEOUT_SECONDS,
        poll_seconds: float = 0.1,
        clock: Callable[[], float] = time.time,
        on_card: Callable[[ApprovalCard], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self._mode = mode
        self._prompter = prompter
        self._timeout = timeout_seconds
        self._poll = poll_seconds
        self._clock = clock
        self._on_card = on_card

    def raise_approval(self, record: ToolCallRecord) -> ApprovalRecord:
        now = self._clock()
        return self._store.create_approval(
            ApprovalRecord(
                id=approval_id(record.session_id, record.id),
                session_id=record.session_id,
                turn_id=record.turn_id,
                tool_call_id=record.id,
                tool_name=record.name,
                arguments=record.arguments,
                status=ApprovalStatus.PENDING,
                created_at=now,
                deadline=None if self._timeout is None else now + self._timeout,
            )
        )

    async def wait(self, record: ToolCallRecord) -> Decision:
        approval = self.raise_approval(record)
        if approval.status is not ApprovalStatus.PENDING:
            return Decision.of(approval)
        card = ApprovalCard.for_call(record, approval.status, approval.deadline)
        if self._on_card is not None:
            await self._on_card(card)
        if self._mode == "auto":
            return self._decide(approval.id, ApprovalStatus.ALLOWED, "auto (--approve auto)", None)
        decided: Decision | None = None
        async with anyio.create_task_group() as tg:
            if self._mode == "prompt" and self._prompter is not None:
                prompter = self._prompter

                async def prompt() -> None:
                    allowed, reason = await prompter.ask(card)
                    status = ApprovalStatus.ALLOWED if allowed else ApprovalStatus.DENIED
                    self._decide(approval.id, status, "cli", reason)

                tg.start_soon(prompt)
            while decided is None:
                current = self._store.get_approval(approval.id)
                assert current is not None
                if current.status is not ApprovalStatus.PENDING:
                    decided = Decision.of(current)
                elif current.deadline is not None and self._clock() >= current.deadline:
                    decided = self._decide(approval.id, ApprovalStatus.EXPIRED, "deadline", None)
                else:
                    await anyio.sleep(self._poll)
            tg.cancel_scope.cancel()
        return decided

    def _decide(self, approval_id_: str, status: ApprovalStatus, by: str, reason: str | None) -> Decision:
        result = self._store.decide_approval(approval_id_, status, by, reason, self._clock())
        assert result is not None
        return Decision.of(result[0])


# The approvers' HTTP API ---------------------------------------------------------------------


class DecisionRequest(BaseModel):
    decision: Literal["allow", "deny"]
    reason: str | None = None


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _matches(token: str, candidates: Iterable[str]) -> bool:
    return any(hmac.compare_digest(token.encode(), c.encode()) for c in candidates)


def approvals_app(
    store: SessionStore,
    approver_tokens: list[str],
    agent_tokens: list[str],
    clock: Callable[[], float] = time.time,
) -> Starlette:
    """GET /approvals (pending cards), GET /approvals/{id}, POST /approvals/{id} {decision, reason}.

    Only approver tokens decide; the agent's own gateway token is refused with 403 even if
    someone configured it as an approver token too, because an agent must not approve itself.
    """
    approvers = [t for t in approver_tokens if t]
    agents = [t for t in agent_tokens if t]
    if not approvers:
        raise ValueError(f"the approvals API needs an approver token (--approver-token or ${APPROVER_TOKEN_ENV})")
    if any(_matches(t, agents) for t in approvers):
        raise ValueError("an approver token must differ from the agent's own gateway token")

    def authorize(request: Request) -> JSONResponse | None:
        token = _bearer(request)
        if token is None:
            return JSONResponse({"error": "missing bearer token"}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        if _matches(token, agents):
            return JSONResponse({"error": "the agent's own credentials cannot decide approvals"}, status_code=403)
        if not _matches(token, approvers):
            return JSONResponse({"error": "unknown token"}, status_code=401, headers={"WWW-Authenticate": "Bearer"})
        return None

    def card_json(approval: ApprovalRecord) -> dict[str, Any]:
        card = ApprovalCard.for_approval(approval, store).model_dump(mode="json")
        card.update(decided_by=approval.decided_by, reason=approval.reason)
        return card

    async def list_pending(request: Request) -> JSONResponse:
        if (refused := authorize(request)) is not None:
            return refused
        return JSONResponse({"approvals": [card_json(a) for a in store.pending_approvals()]})

    async def show(request: Request) -> JSONResponse:
        if (refused := authorize(request)) is not None:
            return refused
        approval = store.get_approval(request.path_params["approval_id"])
        if approval is None:
            return JSONResponse({"error": "no such approval"}, status_code=404)
        return JSONResponse({"approval": card_json(approval)})

    async def decide(request: Request) -> JSONResponse:
        if (refused := authorize(request)) is not None:
            return refused
        try:
            body = DecisionRequest.model_validate_json(await request.body())
        except ValidationError as exc:
            return JSONResponse({"error": "body must be {\"decision\": \"allow\"|\"deny\", \"reason\"?: str}", "detail": exc.errors(include_url=False, include_input=False)}, status_code=400)
        status = ApprovalStatus.ALLOWED if body.decision == "allow" else ApprovalStatus.DENIED
        result = store.decide_approval(request.path_params["approval_id"], status, "http", body.reason, clock())
        if result is None:
            return JSONResponse({"error": "no such approval"}, status_code=404)
        approval, replayed = result
        return JSONResponse({"approval": card_json(approval), "replayed": replayed})

    return Starlette(
        routes=[
            Route("/approvals", list_pending, methods=["GET"]),
            Route("/approvals/{approval_id}", show, methods=["GET"]),
            Route("/approvals/{approval_id}", decide, methods=["POST"]),
        ]
    )
