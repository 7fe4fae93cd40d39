"""The task record as every task store keeps it (SPEC 5), and the small rules on it.

A task is one `tools/call` the gateway runs in the background (a client asked for a task, or the
gateway decided to answer with one on 2026-07-28) and whose status and answer any replica serves.
Times are Unix seconds (float) from the gateway's clock. `version` counts writes: every update is a
compare-and-set on it, so two replicas never overwrite each other's step.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any

from ..conventions.keys import Effect
from ..fences.records import Owner
from ..protocol import Era

__all__ = ["COLUMNS", "TaskRecord", "TaskStatus", "iso", "record_from_row", "record_to_row"]


class TaskStatus(StrEnum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class TaskRecord:
    task_id: str  # the gateway's id: unguessable, only ever served to `principal`
    principal: str
    tool: str  # the exposed tool name
    effect: Effect
    era: Era  # the era of the client that created it (decides its wire form); stored as its version
    status: TaskStatus
    created_at: float
    updated_at: float
    poll_interval_ms: int
    ttl_ms: int | None
    status_message: str | None = None
    # completed: the answer (Answer wire form, as a fence stores it); failed: a JSON-RPC error object.
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    fence_id: str | None = None
    upstream: str | None = None
    upstream_task_id: str | None = None
    upstream_era: str | None = None  # the protocol version its upstream negotiated
    # True when any replica may poll the upstream task (a stateless HTTP upstream); False when
    # only the process holding the upstream session can (stdio, a handshake-era HTTP session).
    upstream_stateless: bool = False
    owner: Owner | None = None  # the process running (or polling) the task
    lease_until: float | None = None
    # 2026-07-28: the outstanding input requests of an input_required task (key -> request).
    input_requests: dict[str, Any] | None = None
    cancel_requested: bool = False
    version: int = 1

    @property
    def expires_at(self) -> float | None:
        return None if self.ttl_ms is None else self.created_at + self.ttl_ms / 1000

    def expired(self, now: float) -> bool:
        expires = self.expires_at
        return expires is not None and now >= expires

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view for operators (`dex-gateway tasks show`)."""
        data = asdict(self)
        data["effect"] = self.effect.value
        data["era"] = self.era.value
        data["status"] = self.status.value
        data["owner"] = None if self.owner is None else f"{self.owner.replica_id}/{self.owner.boot_id}"
        for name in ("created_at", "updated_at", "lease_until"):
            data[name] = iso(data[name])
        data["expires_at"] = iso(self.expires_at)
        return data


def iso(ts: float | None) -> str | None:
    """ISO 8601 in UTC with milliseconds and a Z (the tasks wire form of a time)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _dump(value: dict[str, Any] | None) -> str | None:
    # Text, not JSONB, so a stored answer comes back byte for byte (as fence answers do).
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _load(text: str | None) -> dict[str, Any] | None:
    return None if text is None else json.loads(text)


# Column order shared by the SQL stores; `record_from_row` reads rows in this order.
COLUMNS = (
    "task_id", "principal", "tool", "effect", "era", "status", "created_at", "updated_at",
    "poll_interval_ms", "ttl_ms", "status_message", "result", "error", "fence_id", "upstream",
    "upstream_task_id", "upstream_era", "upstream_stateless", "owner_replica", "owner_boot",
    "lease_until", "input_requests", "cancel_requested", "version",
)  # fmt: skip


def record_to_row(r: TaskRecord) -> tuple[Any, ...]:
    return (
        r.task_id, r.principal, r.tool, r.effect.value, r.era.value, r.status.value, r.created_at, r.updated_at,
        r.poll_interval_ms, r.ttl_ms, r.status_message, _dump(r.result), _dump(r.error), r.fence_id, r.upstream,
        r.upstream_task_id, r.upstream_era, int(r.upstream_stateless),
        r.owner.replica_id if r.owner else None, r.owner.boot_id if r.owner else None,
        r.lease_until, _dump(r.input_requests), int(r.cancel_requested), r.version,
    )  # fmt: skip


def record_from_row(row: Any) -> TaskRecord:
    (task_id, principal, tool, effect, era, status, created, updated, poll, ttl, message, result, error, fence,
     upstream, up_id, up_era, up_stateless, o_rep, o_boot, lease, inputs, cancel, version) = tuple(row)  # fmt: skip
    return TaskRecord(
        task_id=task_id, principal=principal, tool=tool, effect=Effect(effect), era=Era.of(era), status=TaskStatus(status),
        created_at=created, updated_at=updated, poll_interval_ms=int(poll), ttl_ms=None if ttl is None else int(ttl),
        status_message=message, result=_load(result), error=_load(error), fence_id=fence, upstream=upstream,
        upstream_task_id=up_id, upstream_era=up_era, upstream_stateless=bool(up_stateless),
        owner=Owner(o_rep, o_boot) if o_rep is not None else None, lease_until=lease,
        input_requests=_load(inputs), cancel_requested=bool(cancel), version=int(version),
    )
