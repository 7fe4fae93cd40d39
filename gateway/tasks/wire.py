"""The wire forms of a task, per protocol era: one place for every answer about a task.

* 2025-11-25 (core tasks): `Task` has `ttl` (required, nullable) and `pollInterval`;
  `tools/call` answers `{"task": Task}`; `tasks/get` and `tasks/cancel` answer the Task;
  `tasks/result` answers the tool's result (with the related-task `_meta` key) or its error.
* 2026-07-28 (the `io.modelcontextprotocol/tasks` extension, SEP-2663): `ttlMs` and
  `pollIntervalMs`; `tools/call` answers the flat task with `resultType: "task"`; `tasks/get`
  answers the detailed task (`result`, `error` or `inputRequests` inlined) with
  `resultType: "complete"`; `tasks/update` and `tasks/cancel` answer an empty acknowledgement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_types import SERVER_INFO_META_KEY

from ..protocol import CLIENT_CAPABILITIES_KEY, TASKS_EXTENSION, Era, Params, Result, client_takes_tasks
from .records import TaskRecord, TaskStatus, iso

__all__ = [
    "RELATED_TASK_KEY", "TASKS_EXTENSION", "ack", "client_takes_tasks", "created", "declaring_tasks", "detailed",
    "related_result", "task_fields",
]  # fmt: skip

RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"


def declaring_tasks(params: Params, era: Era) -> Params:
    """Params of a request to a 2026-07-28 upstream, declaring the tasks extension (tasks/* need it)."""
    if era is not Era.MODERN:
        return params
    meta = dict(params.get("_meta") or {})
    meta[CLIENT_CAPABILITIES_KEY] = {"extensions": {TASKS_EXTENSION: {}}}
    return {**params, "_meta": meta}


def task_fields(record: TaskRecord, *, era: Era) -> Result:
    """The Task object of this era (no status-specific payload)."""
    task: dict[str, Any] = {"taskId": record.task_id, "status": record.status.value}
    if record.status_message:
        task["statusMessage"] = record.status_message
    task["createdAt"] = iso(record.created_at)
    task["lastUpdatedAt"] = iso(record.updated_at)
    if era is Era.MODERN:
        task["ttlMs"] = record.ttl_ms
        task["pollIntervalMs"] = record.poll_interval_ms
    else:
        task["ttl"] = record.ttl_ms  # required and nullable: kept when null
        task["pollInterval"] = record.poll_interval_ms
    return task


def _stamp(result: dict[str, Any], result_type: str, server_info: Mapping[str, Any]) -> dict[str, Any]:
    result["resultType"] = result_type
    meta = result.get("_meta")
    result["_meta"] = {**(meta if isinstance(meta, dict) else {}), SERVER_INFO_META_KEY: dict(server_info)}
    return result


def created(record: TaskRecord, *, era: Era, server_info: Mapping[str, Any]) -> Result:
    """The `tools/call` answer that hands out the task."""
    if era is Era.MODERN:
        return _stamp(task_fields(record, era=era), "task", server_info)
    return {"task": task_fields(record, era=era)}


def detailed(record: TaskRecord, *, era: Era, server_info: Mapping[str, Any]) -> Result:
    """The `tasks/get` answer (and, on 2025-11-25, the `tasks/cancel` one)."""
    task = task_fields(record, era=era)
    if era is not Era.MODERN:
        return task
    if record.status is TaskStatus.COMPLETED and record.result is not None:
        task["result"] = record.result
    elif record.status is TaskStatus.FAILED:
        task["error"] = record.error or {"code": -32603, "message": record.status_message or "the task failed"}
    elif record.status is TaskStatus.INPUT_REQUIRED:
        task["inputRequests"] = record.input_requests or {}
    return _stamp(task, "complete", server_info)


def ack(server_info: Mapping[str, Any]) -> dict[str, Any]:
    """The empty 2026-07-28 acknowledgement of `tasks/update` and `tasks/cancel`."""
    return _stamp({}, "complete", server_info)


def related_result(record: TaskRecord) -> dict[str, Any]:
    """A completed task's tool result as 2025-11-25 `tasks/result` answers it."""
    result = dict(record.result or {"content": [], "isError": False})
    result["_meta"] = {**(result.get("_meta") or {}), RELATED_TASK_KEY: {"taskId": record.task_id}}
    return result
