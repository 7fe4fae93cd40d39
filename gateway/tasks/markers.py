"""The answer a fence keeps for a call that runs as a task: the task's id, not the call's result.

A retried `tools/call` with the same key finds it and gets the same task (a task-augmented
retry) or waits for that task's end (a plain retry), so the key never starts a second task.
"""

from __future__ import annotations

from typing import Any

from ..conventions.keys import GATEWAY_PREFIX
from .records import TaskRecord

__all__ = ["TASK_MARKER_KEY", "marker_answer", "marker_task"]

TASK_MARKER_KEY = GATEWAY_PREFIX + "task"


def marker_answer(record: TaskRecord) -> dict[str, Any]:
    """The fence answer of a call run as this task (Answer wire form)."""
    text = f"This call runs as task {record.task_id}; its result is served by tasks/get and tasks/result."
    return {
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "_meta": {TASK_MARKER_KEY: {"taskId": record.task_id, "expiresAt": record.expires_at}},
    }


def marker_task(answer: dict[str, Any] | None) -> tuple[str, float | None] | None:
    """(task id, expiry) when a fence answer is a task marker."""
    meta = (answer or {}).get("_meta")
    marker = meta.get(TASK_MARKER_KEY) if isinstance(meta, dict) else None
    if not isinstance(marker, dict) or not isinstance(marker.get("taskId"), str):
        return None
    expires = marker.get("expiresAt")
    return marker["taskId"], float(expires) if isinstance(expires, (int, float)) else None
