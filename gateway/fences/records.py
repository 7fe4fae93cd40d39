"""The fence record as every store keeps it."""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any

from gateway.conventions.keys import Effect

from ..protocol import JsonObject, Result


class FenceState(StrEnum):
    PENDING = "pending"  # claimed; the owner is (or was) sending the call upstream
    DONE = "done"  # the full answer is stored and replayed to every retry
    UNKNOWN = "unknown"  # whether the call took effect cannot be known: terminal


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds a pending fence.

    `replica_id` is stable across restarts of one gateway replica (and must be unique
    among the processes sharing a store); `boot_id` is new at every start. A restarted
    replica seeing its own replica_id with an older boot_id knows the holder is dead
    without waiting for the lease to run out.
    """

    replica_id: str
    boot_id: str

    @classmethod
    def fresh(cls, replica_id: str) -> "Owner":
        """The owner for this process start: a new boot id every time."""
        return cls(replica_id=replica_id, boot_id=uuid.uuid4().hex)


@dataclass(frozen=True, slots=True)
class FenceRecord:
    """One fence. Times are Unix seconds (float) as read from the gateway's clock."""

    fence_id: str
    principal: str
    fingerprint: str
    tool: str
    effect: Effect
    state: FenceState
    owner: Owner | None
    lease_until: float | None
    # The answer in Answer wire form (opaque here): set for done, optional for unknown.
    answer: Result | None
    created_at: float
    updated_at: float
    # Number of claims (1 + takeovers); also the fencing token every owner update checks,
    # so a holder that lost its fence can never overwrite its successor.
    attempts: int

    def as_dict(self) -> JsonObject:
        """JSON-ready view for operators (`dex-gateway fences show`)."""
        data = asdict(self)
        data["effect"] = self.effect.value
        data["state"] = self.state.value
        for name in ("created_at", "updated_at", "lease_until"):
            value = data[name]
            data[name] = None if value is None else datetime.fromtimestamp(value, timezone.utc).isoformat()
        return data


@dataclass(frozen=True, slots=True)
class FenceStats:
    total: int
    pending: int
    done: int
    unknown: int
    oldest_updated_at: float | None
    newest_updated_at: float | None


# Built once (json.dumps would build an encoder per call); `encode` keeps no state between calls.
_ANSWER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dump_answer(answer: Result | None) -> str | None:
    # Kept as text (not JSONB) so key order and content survive exactly for replays.
    return None if answer is None else _ANSWER.encode(answer)


def load_answer(text: str | None) -> Result | None:
    return None if text is None else json.loads(text)


# Column order shared by the SQL stores; `record_from_row` reads rows in this order.
COLUMNS = (
    "fence_id",
    "principal",
    "fingerprint",
    "tool",
    "effect",
    "state",
    "owner_replica",
    "owner_boot",
    "lease_until",
    "answer",
    "created_at",
    "updated_at",
    "attempts",
)


def record_to_row(record: FenceRecord) -> tuple[Any, ...]:
    owner = record.owner
    return (
        record.fence_id,
        record.principal,
        record.fingerprint,
        record.tool,
        record.effect.value,
        record.state.value,
        owner.replica_id if owner else None,
        owner.boot_id if owner else None,
        record.lease_until,
        dump_answer(record.answer),
        record.created_at,
        record.updated_at,
        record.attempts,
    )


def record_from_row(row: Any) -> FenceRecord:
    (fid, principal, fp, tool, effect, state, o_rep, o_boot, lease, answer, created, updated, attempts) = tuple(row)
    return FenceRecord(
        fence_id=fid,
        principal=principal,
        fingerprint=fp,
        tool=tool,
        effect=Effect(effect),
        state=FenceState(state),
        owner=Owner(o_rep, o_boot) if o_rep is not None else None,
        lease_until=lease,
        answer=load_answer(answer),
        created_at=created,
        updated_at=updated,
        attempts=attempts,
    )
