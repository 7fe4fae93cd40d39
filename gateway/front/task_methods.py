"""The task methods (`tasks/*`) as the SDK entry serves them: parse, check the era's rules, and
hand the work to gateway/tasks/service.py.

* 2025-11-25 (handshake era): `tasks/get`, `tasks/result`, `tasks/cancel`, `tasks/list`.
* 2026-07-28 (the tasks extension): `tasks/get`, `tasks/update`, `tasks/cancel`, only for a
  request that declares the extension (else -32021, naming it); over HTTP `Mcp-Name` must be the
  task id (absent or another: -32020, the rule of gateway/name_header.py); `tasks/result` and
  `tasks/list` do not exist there (-32601).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY

from ..protocol import Era
from ..errors import RequestError
from ..name_header import name_mismatch
from ..tasks import Tasks
from ..tasks.wire import TASKS_EXTENSION, client_takes_tasks

__all__ = ["TASK_METHODS", "answer_task_method"]

TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/cancel", "tasks/list", "tasks/update"})
_MODERN = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
_HANDSHAKE = frozenset({"tasks/get", "tasks/result", "tasks/cancel", "tasks/list"})


async def answer_task_method(
    tasks: Tasks, method: str, params: Any, principal: str, *, era: Era, headers: Mapping[str, str] | None
) -> dict[str, Any]:
    """The wire result of one task method; raises RequestError (the JSON-RPC error to answer)."""
    if method not in (_MODERN if era is Era.MODERN else _HANDSHAKE):
        raise RequestError(METHOD_NOT_FOUND, "Method not found", method)
    params = params if isinstance(params, dict) else {}
    if method == "tasks/list":
        cursor = params.get("cursor")
        return await tasks.list(principal, cursor if isinstance(cursor, str) else None)
    task_id = params.get("taskId")
    if era is Era.MODERN:
        # Over HTTP the header must name the task, by the rule the SDK applies to tools/call (stdio: no headers).
        mismatch = name_mismatch(method, params, headers) if headers is not None else None
        if mismatch is not None:
            raise mismatch
        if not client_takes_tasks(params.get("_meta")):
            raise RequestError(MISSING_REQUIRED_CLIENT_CAPABILITY, f"{method} needs the {TASKS_EXTENSION} extension in the request's "
                               "client capabilities", {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})
    if not isinstance(task_id, str) or not task_id:
        raise RequestError(INVALID_PARAMS, f"{method}: params.taskId must be a non-empty string")
    if method == "tasks/get":
        return await tasks.get(principal, task_id, era=era)
    if method == "tasks/result":
        return await tasks.result(principal, task_id)
    if method == "tasks/cancel":
        return await tasks.cancel(principal, task_id, era=era)
    responses = params.get("inputResponses")
    if not isinstance(responses, dict):
        raise RequestError(INVALID_PARAMS, "tasks/update: params.inputResponses must be an object")
    return await tasks.update(principal, task_id, responses)
