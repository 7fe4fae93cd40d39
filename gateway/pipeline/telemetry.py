"""What the tools/call pipeline reports: a span per call and the call metrics, in one object.

The pipeline (gateway/pipeline/calls.py) calls three things: `call(route)` around the whole call (span,
in-flight gauge, latency, the count by outcome), `fenced(route, decision)` with the fence's
decision, `attempt(route, n, sending)` around each upstream attempt (its CLIENT span). With telemetry off
each is a few attribute lookups.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import trace
from opentelemetry.trace import Span, StatusCode, Tracer

from ..conventions.outcomes import Interrupted, NotSent, Replied, RpcError
from ..fences import FenceRejected, FenceUnknown, Proceed, Replay
from ..telemetry.tracing import ATTEMPT_RESULT, ERROR_TYPE, TOOL, attempt_span, mark_failed, traced

if TYPE_CHECKING:
    from .catalog import ToolRoute
    from ..conventions.answers import Answer
    from ..conventions.outcomes import AttemptEvent
    from ..fences import BeginResult
    from ..telemetry import Telemetry
    from ..telemetry.metrics import GatewayMetrics

__all__ = ["CallTelemetry", "NO_CALL_TELEMETRY"]

EFFECT = "dex.effect"
APPROVAL = "dex.approval"
UPSTREAM = "dex.upstream"
CONNECTOR = "dex.connector"
OUTCOME = "dex.outcome"
FENCE = "dex.fence.state"
REPLAYED = "dex.replayed"
ATTEMPTS = "dex.attempts"


def source_of(route: "ToolRoute") -> str:
    """The `upstream` label: the upstream's name, or `connector:<id>`."""
    if route.upstream is not None:
        return route.upstream
    connector_id = getattr(route.connector, "connector_id", None)
    return f"connector:{connector_id}" if connector_id else "connector"


def outcome_of(answer: "Answer") -> str:
    """ok, error (a failed result), or the conventions' outcome (unknown, rejected)."""
    outcome = answer.outcome
    if outcome is not None:
        return outcome.value
    return "error" if answer.is_error else "ok"


_EVENT_RESULTS: dict[type, str] = {Replied: "replied", RpcError: "rpc_error", Interrupted: "interrupted", NotSent: "not_sent"}


class _CallScope:
    """One call: enter before the fence, set `answer`, exit after the answer is final."""

    __slots__ = ("_owner", "_route", "_started", "_span", "_span_cm", "answer")
    _started: float

    def __init__(self, owner: "CallTelemetry", route: "ToolRoute") -> None:
        self._owner = owner
        self._route = route
        self._span: Span | None = None
        self._span_cm: Any = None
        self.answer: Answer | None = None

    def __enter__(self) -> "_CallScope":
        owner, route = self._owner, self._route
        if owner.metrics is not None:
            owner.metrics.in_flight.inc()
            self._started = time.perf_counter()
        if owner.tracer is not None:
            attributes: dict[str, Any] = {
                TOOL: route.name,
                EFFECT: route.effect.value,
                APPROVAL: "required" if route.classification.requires_approval else "none",
            }
            if route.upstream is not None:
                attributes[UPSTREAM] = route.upstream
            else:
                attributes[CONNECTOR] = source_of(route).removeprefix("connector:")
            self._span_cm = traced(owner.tracer, f"pipeline {route.name}", attributes)
            self._span = self._span_cm.__enter__()
            self._span.set_attribute(FENCE, "none")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        owner, route = self._owner, self._route
        answer = self.answer
        if answer is not None:
            outcome = outcome_of(answer)
        elif exc_type is not None and issubclass(exc_type, BaseException) and not issubclass(exc_type, Exception):
            outcome = "cancelled"  # the client went away (or shutdown) before an answer
        else:
            outcome = "failed"  # a gateway error; the front answers -32603
        if owner.metrics is not None:
            metrics = owner.metrics
            source = source_of(route)
            metrics.in_flight.dec()
            owner.child(metrics.calls, route.name, source, outcome).inc()
            owner.child(metrics.call_seconds, route.name, source).observe(time.perf_counter() - self._started)
        span = self._span
        if span is not None:
            span.set_attribute(OUTCOME, outcome)
            if answer is not None and answer.is_error:
                span.set_attribute(ERROR_TYPE, "tool_error")
                span.set_status(StatusCode.ERROR)
            self._span_cm.__exit__(exc_type, exc, tb)
        return False


class CallTelemetry:
    def __init__(self, tracer: Tracer | None = None, metrics: "GatewayMetrics | None" = None) -> None:
        self.tracer = tracer
        self.metrics = metrics
        # Labelled children by (metric, labels): prometheus-client's labels() validates and
        # locks on every call; the label sets are the catalog's, so this stays as small as its own.
        self._children: dict[tuple[Any, ...], Any] = {}


    @classmethod
    def of(cls, telemetry: "Telemetry") -> "CallTelemetry":
        """The call telemetry of the gateway's telemetry (one shared do-nothing one when it is off)."""
        if telemetry.tracer is None and telemetry.metrics is None:
            return NO_CALL_TELEMETRY
        return cls(telemetry.tracer, telemetry.metrics)

    def child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def call(self, route: "ToolRoute") -> _CallScope:
        return _CallScope(self, route)

    def fenced(self, route: "ToolRoute", decision: "BeginResult") -> None:
        """The fence's decision for a write: claimed, taken over, replayed, unknown, rejected."""
        metrics = self.metrics
        if metrics is None and self.tracer is None:
            return
        match decision:
            case Proceed():
                state = "taken_over" if decision.takeover else "claimed"
                if metrics is not None:
                    self.child(metrics.fence_takeovers if decision.takeover else metrics.fence_claims, route.name).inc()
            case Replay():
                state = "replayed"
                if metrics is not None:
                    self.child(metrics.fence_replays, route.name).inc()
            case FenceUnknown():
                state = "unknown"
                if metrics is not None:
                    self.child(metrics.fence_unknowns, route.name, decision.reason.value).inc()
            case FenceRejected():
                state = "rejected"
                if metrics is not None:
                    self.child(metrics.fence_rejections, route.name).inc()
            case _:
                return
        if self.tracer is not None:
            span = _current_span()
            span.set_attribute(FENCE, state)
            span.set_attribute(REPLAYED, state == "replayed")

    def policy_denied(self, rule: str, reason: str) -> None:
        """A call denied by policy rule `rule` (reason: matched, or error: it could not be evaluated)."""
        if self.metrics is not None:
            self.child(self.metrics.policy_denials, rule, reason).inc()

    def approval_settled(self, state: str, channel: str | None) -> None:
        """A held call's approval stage ended (docs/approvals.md): allowed, denied, expired or pending."""
        if self.metrics is not None:
            self.child(self.metrics.approvals, state, channel or "none").inc()

    def attempt(self, route: "ToolRoute", attempt: int) -> "_AttemptScope":
        """One upstream attempt: enter before sending, set `event`, exit once it is known (its
        CLIENT span, its count)."""
        return _AttemptScope(self, route, attempt)


class _AttemptScope:
    """One attempt of a call: its CLIENT span (traces on) and the attempts counter."""

    __slots__ = ("_owner", "_route", "_attempt", "_span_cm", "_span", "event")

    def __init__(self, owner: CallTelemetry, route: "ToolRoute", attempt: int) -> None:
        self._owner = owner
        self._route = route
        self._attempt = attempt
        self._span_cm: Any = None
        self._span: Span | None = None
        self.event: "AttemptEvent | None" = None

    def __enter__(self) -> "_AttemptScope":
        if self._owner.tracer is not None:
            route = self._route
            self._span_cm = attempt_span(route.name, route.target, route.upstream or "", self._attempt)
            self._span = self._span_cm.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        event, owner = self.event, self._owner
        result = _EVENT_RESULTS.get(type(event), "other")
        span = self._span
        if span is not None:
            if event is not None:
                span.set_attribute(ATTEMPT_RESULT, result)
                if result != "replied":
                    mark_failed(span, result)
            self._span_cm.__exit__(exc_type, exc, tb)
            _current_span().set_attribute(ATTEMPTS, self._attempt)  # the call's span: attempts so far
        if event is not None and owner.metrics is not None:
            owner.child(owner.metrics.attempts, source_of(self._route), result).inc()
        return False


def _current_span() -> Span:
    return trace.get_current_span()


NO_CALL_TELEMETRY = CallTelemetry()
