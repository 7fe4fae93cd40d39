"""What goes into the tools/call pipeline and what comes out of it (gateway/pipeline/calls.py).

    ToolCall     one tools/call as the front received it: its era, the client's task request, rounds
    CallResult   what the pipeline answers: TaskCreated | Answered | InputRound
    TaskStage    the pipeline's task stage, implemented by gateway/tasks/ (a protocol: the pipeline is
                 below the tasks package and never imports it)
    UpstreamTaskRequests   how a call goes upstream when the upstream runs it as a task (gateway/tasks/)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from ..approvals.service import Decided
from ..conventions.answers import Answer
from ..auth.principals import ANONYMOUS_IDENTITY, Identity
from ..conventions.keys import IDEMPOTENCY_KEY
from ..protocol import Era, Result
from ..upstreams.relay import CallRelay

if TYPE_CHECKING:
    from ..upstreams.upstream import Upstream
    from .catalog import ToolRoute
    from .task_sink import UpstreamTaskSink

__all__ = [
    "Answered", "CallResult", "InputRound", "Request", "TaskCreated", "TaskStage", "ToolCall", "UpstreamTaskRequests",
]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tools/call as the front received it."""

    principal: str
    name: str
    arguments: dict[str, Any]
    meta: Mapping[str, Any]
    relay: CallRelay | None = None  # progress, logs and requests back to the client
    era: Era = Era.HANDSHAKE  # the client's era: what it takes as an answer
    # The client's request for a task (2025-11-25 `params.task`), None when it asked for none.
    task: Mapping[str, Any] | None = None
    # Set when the call runs as a gateway task (gateway/tasks/): what its upstream task reports.
    sink: "UpstreamTaskSink | None" = None
    # A 2026-07-28 client's later round of a multi-round-trip call: inputResponses, requestState.
    rounds: Mapping[str, Any] = field(default_factory=dict)
    # Who calls, as authentication established it (claims for policy, the token for an exchange).
    identity: Identity = ANONYMOUS_IDENTITY
    # A held call's decision: who decided, how and when (`approval.allowed`: the call went on); None
    # when it needed no approval at the gateway. Set by gateway/pipeline/approval.py, for the audit log.
    approval: Decided | None = None

    @property
    def idempotency_key(self) -> str | None:
        key = self.meta.get(IDEMPOTENCY_KEY)
        return key if isinstance(key, str) and key else None


@dataclass(frozen=True, slots=True)
class TaskCreated:
    """The call runs as a gateway task: the `tools/call` result that hands it out, in the call's era."""

    result: Result


@dataclass(frozen=True, slots=True)
class Answered:
    """The call's answer (a 2026-07-28 client's round of questions is an `InputRound` instead)."""

    answer: Answer


@dataclass(frozen=True, slots=True)
class InputRound:
    """A round of questions for a 2026-07-28 client (`resultType: input_required`): the upstream's
    own, or the gateway's for a parked call (gateway/pipeline/rounds.py)."""

    result: Result


CallResult: TypeAlias = TaskCreated | Answered | InputRound


class TaskStage(Protocol):
    """The task stage of the pipeline (gateway/tasks/service.py `Tasks`)."""

    async def start(self, route: "ToolRoute", call: ToolCall) -> TaskCreated | Answer | None:
        """TaskCreated when the call runs as a task; an Answer when the policy refused it or the
        upstream answered at once (2026-07-28, it decides); None: a plain call. Raises RequestError
        when a plain call of a task-required tool is refused (tasks.plain_required)."""

    async def resolve(self, principal: str, answer: Answer) -> Answer:
        """A plain call whose fence holds a task answers the task's end."""


Request = Callable[..., Awaitable[dict[str, Any]]]


class UpstreamTaskRequests(Protocol):
    """Picks how a tools/call goes upstream: None for a plain request, else a request that runs it as
    an upstream task and polls it to its end (gateway/tasks/requests.py)."""

    def for_call(self, upstream: "Upstream", route: "ToolRoute", call: ToolCall) -> Request | None: ...

    def follows_task(self, upstream: "Upstream") -> bool:
        """Whether a plain call may run as an upstream task the gateway follows (and whose
        `input_required` questions it must then carry to the caller)."""
        ...
