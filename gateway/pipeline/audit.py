"""What the tools/call pipeline writes to the audit log (gateway/audit/): a row for every write call
and for every call refused before it ran; reads that run are never written.

    note = audit.begin(route, call)          # a write: started (time, approval from `call.approval`)
    note.fence_state = "claimed"; note.timed(seconds)   # the fence's decision, the upstream's time
    audit.finish(note, answer)               # queued (no I/O): gateway/audit/log.py writes it
    audit.refused(route, call, "scope")      # a call refused before anything ran (any effect)

The approval a row carries comes from `call.approval` (gateway/pipeline/stages.py `ToolCall`), the
decision the approval stage (gateway/pipeline/approval.py) leaves on a call it held: who decided, by
which channel, when (none for a deadline that passed undecided). A held call that stage does not let
through (denied, past its deadline, still waiting) is written `rejected` with that decision.
Trace and span ids are the current OpenTelemetry span's (the pipeline span of the call, or the
front's span for a call refused before it), so a row leads to its trace.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from opentelemetry import trace

from ..audit import Approval, AuditLog, PendingEntry
from ..conventions.keys import Effect
from ..errors import UpstreamRefusedRequest
from .telemetry import outcome_of, source_of

if TYPE_CHECKING:
    from ..conventions.answers import Answer
    from .catalog import ToolRoute
    from .stages import ToolCall

__all__ = ["CallAudit", "NO_AUDIT", "WriteNote", "approval_of"]

_REASON_CHARS = 300


class WriteNote:
    """One write call on its way through the tail: what the row will say besides the answer."""

    __slots__ = ("started", "fence_state", "latency", "reason")

    def __init__(self, started: float) -> None:
        self.started = started
        self.fence_state = "none"
        self.latency: float | None = None  # seconds spent on the upstream, all attempts
        self.reason: str | None = None

    def timed(self, seconds: float) -> None:
        self.latency = (self.latency or 0.0) + seconds


class CallAudit:
    def __init__(self, log: AuditLog | None = None) -> None:
        self.log = log

    @property
    def enabled(self) -> bool:
        return self.log is not None

    @staticmethod
    def audited(route: "ToolRoute") -> bool:
        """Whether a call to the tool is written when it runs: every effect but read."""
        return route.effect is not Effect.READ

    def begin(self) -> WriteNote:
        return WriteNote(time.time())

    def finish(self, route: "ToolRoute", call: "ToolCall", note: WriteNote, answer: "Answer") -> None:
        """The write's row (none for a round of questions: the call is not over)."""
        log = self.log
        if log is None or answer.input_required is not None:
            return
        outcome = "replayed" if note.fence_state == "replayed" else outcome_of(answer)
        reason = note.reason
        if reason is None and outcome in ("rejected", "unknown"):
            reason = answer.text[:_REASON_CHARS] or None  # the gateway's own text, never a result's
        latency = None if note.latency is None else note.latency * 1000
        log.record(self._pending(route, call, note.started, note.fence_state, outcome, reason, latency,
                                 approval_of(call)))

    def failed(self, route: "ToolRoute", call: "ToolCall", note: WriteNote, exc: BaseException) -> None:
        """A write that ended without an answer: cancelled (the client went away, the gateway
        stopped), refused by the upstream as a request (a JSON-RPC error), or a gateway error."""
        log = self.log
        if log is None:
            return
        if isinstance(exc, UpstreamRefusedRequest):
            outcome, reason = "rejected", f"the upstream refused the request (JSON-RPC error {exc.code})"
        elif not isinstance(exc, Exception):
            # Nothing sent yet: nothing was done; else it may have run (a fenced write is shielded
            # from its client and never ends here once claimed).
            outcome = "rejected" if note.latency is None else "unknown"
            reason = "cancelled: the client went away or the gateway stopped"
        else:
            outcome, reason = "error", f"gateway error ({type(exc).__name__})"
        latency = None if note.latency is None else note.latency * 1000
        log.record(self._pending(route, call, note.started, note.fence_state, outcome, reason, latency,
                                 approval_of(call)))

    def refused(self, route: "ToolRoute", call: "ToolCall", reason: str, *, approval: Approval | None = None) -> None:
        """A call refused before anything ran (scope, a policy rule, an approval denied): `rejected`."""
        if self.log is not None:
            self.log.record(self._pending(route, call, time.time(), "none", "rejected", reason, None,
                                          approval or approval_of(call)))

    @property
    def congested(self) -> bool:
        """The audit queue is full (the database is behind): the call waits (`backpressure`)."""
        log = self.log
        return log is not None and log.full

    async def backpressure(self) -> None:
        if self.log is not None:
            await self.log.wait_for_room()

    @staticmethod
    def _pending(route: "ToolRoute", call: "ToolCall", started: float, fence_state: str, outcome: str,
                 reason: str | None, latency_ms: float | None, approval: Approval | None) -> PendingEntry:
        context = trace.get_current_span().get_span_context()
        valid = context.is_valid
        return PendingEntry(
            started, call.principal, route.name, source_of(route), route.effect.value, call.arguments,
            call.idempotency_key, approval, fence_state, outcome, reason, latency_ms,
            format(context.trace_id, "032x") if valid else None, format(context.span_id, "016x") if valid else None,
        )


def approval_of(call: "ToolCall") -> Approval | None:
    """The row's approval of a held call: who decided, how, when; None when no one decided."""
    decided = call.approval
    if decided is None or decided.decided_by is None:
        return None
    return Approval(decided.decided_by, decided.channel or "", decided.decided_at or 0.0)


NO_AUDIT = CallAudit()
