"""Steps of a task's life, written as compare-and-set updates of its record.

Every step re-reads the record and changes it only if nobody else wrote since (the version);
a terminal task never changes again. The lost-task rule (SPEC 5) lives here: a task that can
no longer finish ends `failed`, and for anything but a `read` tool its error carries
`outcome: unknown` (the work may have been done).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from mcp_types import INTERNAL_ERROR

from ..conventions.answers import Answer
from ..conventions.keys import OUTCOME_KEY, Effect, Outcome
from .records import TaskRecord, TaskStatus
from .store import TaskStore

__all__ = ["Change", "cancelled_error", "change", "finish", "lose", "lost_error"]

logger = logging.getLogger(__name__)

# A record -> its changed copy, or None to leave it as it is.
Change = Callable[[TaskRecord], TaskRecord | None]
_TRIES = 20


async def change(store: TaskStore, task_id: str, step: Change, *, clock: Callable[[], float]) -> TaskRecord | None:
    """Apply `step` to the current record until the compare-and-set holds; the record after it
    (the unchanged one when `step` declined), or None when the task is gone."""
    for _ in range(_TRIES):
        current = await store.get(task_id)
        if current is None:
            return None
        updated = step(current)
        if updated is None:
            return current
        updated = dataclasses.replace(updated, updated_at=max(clock(), current.updated_at))
        if await store.save(updated, expected_version=current.version):
            return dataclasses.replace(updated, version=current.version + 1)
    logger.error("task %s: gave up updating it after %d conflicting writes", task_id, _TRIES)
    return await store.get(task_id)


def _unless_terminal(step: Change) -> Change:
    def guarded(record: TaskRecord) -> TaskRecord | None:
        return None if record.status.terminal else step(record)

    return guarded


def finish(answer: Answer, upstream_error: dict[str, Any] | None) -> Change:
    """The call ended: completed with its answer, or failed when the upstream task failed with a
    JSON-RPC error (the answer then is that error as the conventions word it)."""

    def step(record: TaskRecord) -> TaskRecord:
        if upstream_error is not None and answer.is_error:
            error = dict(upstream_error)
            if answer.outcome is not None:
                found = error.get("data")
                data: dict[str, Any] = found if isinstance(found, dict) else {}
                error["data"] = {**data, "_meta": {**(data.get("_meta") or {}), OUTCOME_KEY: answer.outcome.value}}
            return dataclasses.replace(record, status=TaskStatus.FAILED, error=error, status_message=answer.text or None,
                                       owner=None, lease_until=None, input_requests=None)
        return dataclasses.replace(record, status=TaskStatus.COMPLETED, result=answer.to_wire(), owner=None,
                                   lease_until=None, input_requests=None)

    return _unless_terminal(step)


def lost_error(effect: Effect, text: str) -> dict[str, Any]:
    error: dict[str, Any] = {"code": INTERNAL_ERROR, "message": text}
    if effect is not Effect.READ:
        error["data"] = {"_meta": {OUTCOME_KEY: Outcome.UNKNOWN.value}}
    return error


def lose(reason: str) -> Change:
    """The task can no longer finish (TTL passed, its process died with its session...)."""

    def step(record: TaskRecord) -> TaskRecord:
        if record.effect is Effect.READ:
            text = f"The task was lost: {reason}. The tool {record.tool} is a read; it is safe to call it again."
        else:
            text = (f"The task was lost: {reason}. Whether the call to {record.tool} took effect is unknown; "
                    "check the target system before calling it again with a new key.")
        return dataclasses.replace(record, status=TaskStatus.FAILED, error=lost_error(record.effect, text),
                                   status_message=text, owner=None, lease_until=None, input_requests=None)

    return _unless_terminal(step)


def cancelled_error(record: TaskRecord) -> dict[str, Any]:
    """What `tasks/result` (2025-11-25) answers for a cancelled task."""
    text = f"The task was cancelled before the call to {record.tool} finished."
    if record.effect is not Effect.READ:
        text += " Whether it took effect is unknown; check the target system before calling it again."
    return lost_error(record.effect, text)
