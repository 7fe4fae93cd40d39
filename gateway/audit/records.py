"""One row of the audit log, its JSON form (the admin API, `audit export`) and its table row.

A row is written for every write call (effect idempotent_write, non_idempotent_write or
unclassified) and for every call refused before it ran (scope, policy, a write without a key, an
approval denied or past its deadline). Reads that run are never written. Rows are only ever
appended; the retention sweep deletes the oldest (docs/audit.md).

Times are whole microseconds since the epoch in the table and ISO 8601 UTC with microseconds in
JSON (`2026-12-04T11:42:40.123456Z`), so an exported row reads back to the same row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from typing import Any, Final

from ..fences.ids import arguments_digest, canonical_json

__all__ = [
    "API_KEYS", "COLUMNS", "NO_DIGEST", "OUTCOMES", "Approval", "AuditEntry", "AuditRow", "arguments_digest", "iso_time",
    "micros_from_iso", "now_micros",
]

# What came of a call: ok (a result), error (a failed result), rejected (refused before anything
# ran), unknown (it may or may not have run), replayed (a retry answered from its fence).
OUTCOMES: Final = ("ok", "error", "rejected", "unknown", "replayed")
# The digest of arguments that have no JSON form (NaN, infinities: `arguments_digest` refuses them).
NO_DIGEST: Final = ""


def now_micros(clock: float) -> int:
    return int(round(clock * 1_000_000))


def iso_time(micros: int) -> str:
    """`micros` since the epoch as ISO 8601 UTC with microseconds and a `Z`."""
    moment = datetime.fromtimestamp(micros // 1_000_000, timezone.utc).replace(microsecond=micros % 1_000_000)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def micros_from_iso(text: str) -> int:
    """An ISO 8601 date or date-time (a time without an offset is UTC) as microseconds since the
    epoch. Raises ValueError naming the text."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time (e.g. 2026-12-04 or 2026-12-04T11:42:40Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass(frozen=True, slots=True)
class Approval:
    """Who approved the call, how, and when: `by` a person's or principal's name; `how` the
    channel (e.g. `elicitation`, `input_required`, `console`, `cli`, `client`); `at` Unix seconds."""

    by: str
    how: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return {"by": self.by, "how": self.how, "at": iso_time(now_micros(self.at))}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "Approval":
        return cls(str(value["by"]), str(value["how"]), micros_from_iso(str(value["at"])) / 1_000_000)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row. `id` is given by the database (None before it is stored); ids grow with each row
    stored, so `id` orders rows newest-first and pages the admin API (`before`)."""

    time: int  # microseconds since the epoch
    principal: str
    tool: str
    upstream: str | None  # the upstream's name, `connector:<id>` for a connector's tool
    effect: str
    arguments_digest: str
    arguments: str | None  # the arguments' canonical JSON, only with `audit.arguments: true`
    idempotency_key: str | None
    approval: Approval | None
    fence_state: str  # none, claimed, taken_over, replayed, unknown, rejected, settled, busy
    outcome: str  # one of OUTCOMES
    reason: str | None  # why a call was rejected (or why unknown), for the operator
    latency_ms: float | None  # the time spent on the upstream (all attempts); None when none was asked
    trace_id: str | None  # the OpenTelemetry trace (32 hex) and span (16 hex) the call ran in
    span_id: str | None
    id: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Every field (`audit export`, `audit list --jsonl`); `from_json` reads it back."""
        out = asdict(self)
        out["time"] = iso_time(self.time)
        out["approval"] = None if self.approval is None else self.approval.to_json()
        out["arguments"] = None if self.arguments is None else json.loads(self.arguments)
        return {"id": out.pop("id"), **out}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "AuditEntry":
        """The entry of one exported line; raises KeyError/ValueError/TypeError on a malformed one."""
        data = {f.name: value[f.name] for f in fields(cls)}
        data["time"] = micros_from_iso(str(value["time"]))
        approval = value["approval"]
        data["approval"] = None if approval is None else Approval.from_json(approval)
        arguments = value["arguments"]
        data["arguments"] = None if arguments is None else canonical_json(arguments)
        return cls(**data)

    def to_api(self) -> dict[str, Any]:
        """The admin API's entry (GET /admin/audit): the contract's keys, `arguments` only when stored."""
        out: dict[str, Any] = {
            "id": self.id, "time": iso_time(self.time), "principal": self.principal, "tool": self.tool,
            "upstream": self.upstream, "arguments_digest": self.arguments_digest,
        }
        if self.arguments is not None:
            out["arguments"] = json.loads(self.arguments)
        out.update(
            idempotency_key=self.idempotency_key,
            approval=None if self.approval is None else self.approval.to_json(),
            fence_state=self.fence_state, outcome=self.outcome, latency_ms=self.latency_ms, trace_id=self.trace_id,
        )
        return out

    def to_row(self) -> "AuditRow":
        approval = self.approval
        return (
            self.time, self.principal, self.tool, self.upstream, self.effect, self.arguments_digest, self.arguments,
            self.idempotency_key, approval.by if approval else None, approval.how if approval else None,
            now_micros(approval.at) if approval else None, self.fence_state, self.outcome, self.reason,
            self.latency_ms, self.trace_id, self.span_id,
        )

    @classmethod
    def from_row(cls, row: tuple[Any, ...] | Any) -> "AuditEntry":
        """A row of `id, *COLUMNS`."""
        (id_, time, principal, tool, upstream, effect, digest, arguments, idem, by, how, at, fence, outcome, reason,
         latency, trace_id, span_id) = tuple(row)
        approval = None if by is None else Approval(by, how, at / 1_000_000)
        return cls(int(time), principal, tool, upstream, effect, digest, arguments, idem, approval, fence, outcome,
                   reason, latency, trace_id, span_id, int(id_))


AuditRow = tuple[Any, ...]

# The table's columns after `id`, in `to_row` order.
COLUMNS: Final = (
    "time", "principal", "tool", "upstream", "effect", "arguments_digest", "arguments", "idempotency_key",
    "approval_by", "approval_how", "approval_at", "fence_state", "outcome", "reason", "latency_ms", "trace_id",
    "span_id",
)

# The keys of an admin API entry (GET /admin/audit), in order; `arguments` only when stored.
API_KEYS: Final = (
    "id", "time", "principal", "tool", "upstream", "arguments_digest", "arguments", "idempotency_key", "approval",
    "fence_state", "outcome", "latency_ms", "trace_id",
)
