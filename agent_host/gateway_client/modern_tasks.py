"""A call the gateway answers with a task on 2026-07-28 (the `io.modelcontextprotocol/tasks`
extension, SEP-2663), finished the way the host finishes a 2025-11-25 task.

On 2026-07-28 a listing carries no `execution`: the server decides, per call, whether it runs as a
task, when the client declares the extension. The host declares it on calls of tools its
(2025-11-25) listing marks `taskSupport: required` (an SDK `ClientExtension` whose claim takes the
`resultType: "task"` answer), then polls `tasks/get` at the
task's `pollIntervalMs` (status messages become progress), puts each elicitation of an
`input_required` task to the user as a session question (the same `FormAsker` as every other
question) and sends the answers with `tasks/update`, and ends with the task's inlined `result`
(or its `error`, raised as the JSON-RPC error it is). A cancelled poll cancels its task.

The SDK 2.3 client has the extension mechanism (claims) but no tasks client: this is the host's.
The task id is not kept across a restart here (a 2025-11-25 task's is, agent_host/gateway_client/tasks.py):
a restarted host sends the call again under the same idempotency key, and the gateway's fence
answers that key with the same task.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value
from pydantic import ConfigDict, Field

from gateway.protocol import TASKS_EXTENSION

from .connection import FormAsker, answer_input_request, describe

__all__ = ["TASKS_EXTENSION", "TaskAnswer", "TasksExtension"]

log = logging.getLogger(__name__)

_TERMINAL = frozenset({"completed", "failed", "cancelled"})
_MIN_POLL, _MAX_POLL = 0.1, 30.0


class TaskAnswer(types.Result):
    """`tools/call` answered with a task (2026-07-28: the flat task, `resultType: "task"`)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str = "working"
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


OnProgress = Any  # async (progress, total, message) -> None, or None


class TasksExtension(ClientExtension):
    """The tasks extension of one call: declared in its requests' client capabilities; a task
    answer is polled to its end, its questions asked through `ask_form` (declined without one)."""

    identifier = TASKS_EXTENSION

    def __init__(self, ask_form: FormAsker | None, on_progress: OnProgress = None) -> None:
        self._ask_form = ask_form
        self._on_progress = on_progress
        self.task_id: str | None = None  # the call's task, once the gateway made one

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=TaskAnswer, resolve=self._finish),)

    async def _finish(self, answer: TaskAnswer, context: ClaimContext) -> types.CallToolResult:
        self.task_id = answer.task_id
        try:
            return await self._poll(context.session, answer)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await self._cancel(context.session, answer.task_id)
            raise

    async def _poll(self, session: ClientSession, answer: TaskAnswer) -> types.CallToolResult:
        task_id, interval = answer.task_id, answer.poll_interval_ms
        seen: tuple[Any, Any] | None = None
        step = 0
        answered: set[str] = set()  # input requests already answered (a poll may show them again)
        while True:
            task = await task_request(session, "tasks/get", {"taskId": task_id})
            status, message = task.get("status"), task.get("statusMessage")
            if (status, message) != seen:
                seen, step = (status, message), step + 1
                if self._on_progress is not None and isinstance(message, str):
                    await self._on_progress(step, None, message)
            if status == "completed":
                return types.CallToolResult.model_validate(task.get("result") or {"content": []})
            if status == "failed":
                found = task.get("error")
                error: dict[str, Any] = found if isinstance(found, dict) else {}
                raise MCPError(int(error.get("code", types.INTERNAL_ERROR)), str(error.get("message", "the task failed")),
                               error.get("data"))
            if status == "cancelled":
                return types.CallToolResult(content=[types.TextContent(text=f"the task {task_id} was cancelled")],
                                            is_error=True)
            requests = task.get("inputRequests") if status == "input_required" else None
            if isinstance(requests, dict) and (todo := {k: v for k, v in requests.items() if k not in answered}):
                responses = {key: await answer_input_request(self._ask_form, request) for key, request in todo.items()}
                await task_request(session, "tasks/update", {"taskId": task_id, "inputResponses": responses})
                answered.update(todo)
                continue
            interval = task.get("pollIntervalMs", interval)
            await anyio.sleep(min(max((interval or 1000) / 1000, _MIN_POLL), _MAX_POLL))

    async def _cancel(self, session: ClientSession, task_id: str) -> None:
        try:
            await task_request(session, "tasks/cancel", {"taskId": task_id})
        except Exception as exc:  # noqa: BLE001 - best effort: the task's TTL ends it anyway
            log.warning("cancelling task %s failed: %s", task_id, describe(exc))


async def task_request(session: ClientSession, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A tasks/* request of the extension through the session's own dispatcher: stamped for the
    era as the SDK stamps its own (client capabilities with the extension), `Mcp-Name` the task id."""
    data: dict[str, Any] = {"method": method, "params": params}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)  # type: ignore[arg-type]
    opts.setdefault("headers", {})[MCP_NAME_HEADER] = encode_header_value(str(params["taskId"]))
    result: dict[str, Any] = await session._dispatcher.send_raw_request(method, data["params"], opts)  # type: ignore[arg-type]
    return result
