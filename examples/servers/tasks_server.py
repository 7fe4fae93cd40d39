#!/usr/bin/env python3
"""A reference MCP server with long-running tools as tasks, in both protocol eras.

* 2025-11-25 (core tasks): tools list `execution.taskSupport`; `tools/call` with `task` answers
  `{"task": ...}`; `tasks/get`, `tasks/result` (blocks), `tasks/cancel`, `tasks/list`.
* 2026-07-28 (the `io.modelcontextprotocol/tasks` extension, SEP-2663): advertised in
  `server/discover`; a request that declares the extension gets a task for a task-supporting tool
  (`resultType: "task"`); `tasks/get` inlines result / error / inputRequests; `tasks/update`;
  `tasks/cancel`. Without the extension: `tasks/*` and task-required tools answer -32021.

Its tools are the fixtures the conformance suite's `tasks-*` scenarios call (greet, slow_compute,
failing_job, protocol_error_job, confirm_delete, multi_input, test_tool_with_task); the conformance
reference server (conformance/reference_server.py) serves them through this class. Every task start is
logged in the state directory (executions.jsonl, with the idempotency key) for the gateway tests.

    python examples/servers/tasks_server.py --transport http --port 0    (stateless HTTP, both eras)
    python examples/servers/tasks_server.py --transport stdio            (handshake era)
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from example_runtime import IDEMPOTENCY_KEY, ExecutionLog, build_parser, serve, state_dir

EXT = "io.modelcontextprotocol/tasks"
CAPS = "io.modelcontextprotocol/clientCapabilities"
MODERN = "2026-07-28"
TERMINAL = ("completed", "failed", "cancelled")
POLL_MS = 200
OBJ = {"type": "object"}
TOOLS: list[dict[str, Any]] = [
    {"name": "greet", "description": "Says hello (never a task)", "inputSchema": {
        "type": "object", "properties": {"name": {"type": "string"}}}, "annotations": {"readOnlyHint": True}},
    {"name": "slow_compute", "description": "Sleeps `seconds`, then answers (a task when the client takes one)",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}},
     "execution": {"taskSupport": "optional"}, "annotations": {"readOnlyHint": True}},
    {"name": "slow_write", "description": "Sleeps `seconds`, then 'writes' (no hints: a write that needs a key)",
     "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}}},
     "execution": {"taskSupport": "optional"}},
    {"name": "failing_job", "description": "Fails with a tool error after ~1 s (task required)",
     "inputSchema": OBJ, "execution": {"taskSupport": "required"}, "annotations": {"readOnlyHint": True}},
    {"name": "protocol_error_job", "description": "Fails with a JSON-RPC error (a failed task)", "inputSchema": OBJ,
     "execution": {"taskSupport": "optional"}, "annotations": {"readOnlyHint": True}},
    {"name": "confirm_delete", "description": "Asks the user to confirm, then 'deletes' a file", "inputSchema": {
        "type": "object", "properties": {"filename": {"type": "string"}}},
     "execution": {"taskSupport": "optional"}, "annotations": {"idempotentHint": True}},
    {"name": "multi_input", "description": "Asks two questions at once", "inputSchema": OBJ,
     "execution": {"taskSupport": "optional"}, "annotations": {"readOnlyHint": True}},
    {"name": "test_tool_with_task", "description": "Asks for a name (MRTR), then runs as a task", "inputSchema": OBJ,
     "execution": {"taskSupport": "required"}, "annotations": {"readOnlyHint": True}},
    {"name": "research", "description": "A 4-stage job (task required), like server-everything's simulate-research-query",
     "inputSchema": {"type": "object", "properties": {"topic": {"type": "string"}, "seconds": {"type": "number"}}},
     "execution": {"taskSupport": "required"}, "annotations": {"readOnlyHint": True}},
]
SUPPORT = {t["name"]: t.get("execution", {}).get("taskSupport", "forbidden") for t in TOOLS}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text(text: str, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def _elicit(message: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"confirm": {"type": "boolean"}, "name": {"type": "string"}}}
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": schema}}


@dataclass
class Job:
    task_id: str
    ttl_ms: int | None
    status: str = "working"
    message: str | None = None
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    inputs: dict[str, Any] = field(default_factory=dict)  # outstanding input requests
    answers: dict[str, asyncio.Future[Any]] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    runner: asyncio.Task[None] | None = None

    def set(self, status: str, message: str | None = None) -> None:
        if self.status in TERMINAL:
            return
        self.status, self.message, self.updated = status, message, time.time()
        if status in TERMINAL:
            self.done.set()

    def task(self, modern: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"taskId": self.task_id, "status": self.status}
        if self.message:
            out["statusMessage"] = self.message
        out.update(createdAt=_iso(self.created), lastUpdatedAt=_iso(self.updated))
        out.update({"ttlMs": self.ttl_ms, "pollIntervalMs": POLL_MS} if modern else {"ttl": self.ttl_ms, "pollInterval": POLL_MS})
        return out

    def detailed(self) -> dict[str, Any]:
        out = self.task(True)
        if self.status == "completed":
            out["result"] = self.result
        elif self.status == "failed":
            out["error"] = self.error
        elif self.status == "input_required":
            out["inputRequests"] = dict(self.inputs)
        return {**out, "resultType": "complete"}

    async def ask(self, key: str, request: dict[str, Any]) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.answers[key], self.inputs[key] = future, request
        self.set("input_required", "waiting for the user")
        try:
            return await future
        finally:
            self.inputs.pop(key, None)
            if not self.inputs:
                self.set("working")


class TasksServer:
    def __init__(self, log: ExecutionLog) -> None:
        self.jobs: dict[str, Job] = {}
        self.log = log

    async def work(self, job: Job, name: str, args: dict[str, Any]) -> None:
        try:
            if name in ("slow_compute", "slow_write"):
                seconds = float(args.get("seconds", 1))
                steps = max(1, int(seconds * 2))
                for step in range(steps):
                    job.set("working", f"computing {step + 1}/{steps}")
                    await asyncio.sleep(seconds / steps)
                job.result = _text(f"computed {args.get('label', '')} in {seconds:g} s")
            elif name == "research":
                seconds = float(args.get("seconds", 4))
                for stage in ("gathering", "analyzing", "synthesizing", "writing"):
                    job.set("working", f"research on {args.get('topic', '?')}: {stage}")
                    await asyncio.sleep(seconds / 4)
                job.result = _text(f"Research report on {args.get('topic', '?')}: done in 4 stages.")
            elif name == "failing_job":
                await asyncio.sleep(1)
                job.result = _text("failing_job failed on purpose", error=True)
            elif name == "protocol_error_job":
                await asyncio.sleep(0.2)
                job.error = {"code": -32603, "message": "protocol_error_job broke on purpose"}
                job.set("failed", "the job broke")
                return
            elif name == "confirm_delete":
                answer = await job.ask(f"confirm-{secrets.token_hex(4)}", _elicit(f"Delete {args.get('filename')}?"))
                job.result = _text(f"deleted {args.get('filename')}" if _accepted(answer) else "kept the file")
            elif name == "multi_input":
                keys = [f"q{n}-{secrets.token_hex(3)}" for n in (1, 2)]
                answers = await asyncio.gather(*(job.ask(k, _elicit(f"Question {k}?")) for k in keys))
                job.result = _text("answers: " + ", ".join(str((a or {}).get("content")) for a in answers))
            else:
                job.result = _text(f"Hello, {args.get('name', 'World')}!")
            job.set("completed", "done")
        except asyncio.CancelledError:
            job.set("cancelled", "cancelled by the client")

    def start(self, name: str, args: dict[str, Any], meta: dict[str, Any], ttl_ms: Any) -> Job:
        self.log.record(name, meta.get(IDEMPOTENCY_KEY), args)
        ttl = ttl_ms if isinstance(ttl_ms, int) and ttl_ms > 0 else 3_600_000
        job = Job(secrets.token_urlsafe(12), ttl)
        self.jobs[job.task_id] = job
        job.runner = asyncio.get_running_loop().create_task(self.work(job, name, args))
        return job

    async def list_tools(self, ctx: ServerRequestContext[Any], params: Any) -> dict[str, Any]:
        return {"tools": TOOLS}

    async def middleware(self, ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        modern = ctx.protocol_version == MODERN
        params = ctx.params if isinstance(ctx.params, dict) else {}
        meta = params.get("_meta") if isinstance(params.get("_meta"), dict) else {}
        takes = modern and EXT in ((meta.get(CAPS) or {}).get("extensions") or {})
        if ctx.method == "tools/list":
            tools = [{k: v for k, v in t.items() if k != "execution"} for t in TOOLS] if modern else TOOLS
            return {"tools": tools, **({"resultType": "complete"} if modern else {})}
        if ctx.method == "tools/call":
            return await self.call(params, meta, modern, takes)
        if ctx.method.startswith("tasks/"):
            return await self.task_method(ctx, params, modern, takes)
        return await call_next(ctx)

    async def call(self, params: dict[str, Any], meta: dict[str, Any], modern: bool, takes: bool) -> dict[str, Any]:
        name, args = params.get("name"), params.get("arguments") or {}
        if name not in SUPPORT:
            raise MCPError(-32602, f"unknown tool {name!r}")
        support = SUPPORT[name]
        if name == "test_tool_with_task" and modern:
            answer = (params.get("inputResponses") or {}).get("user_name")
            if answer is None:
                return {"resultType": "input_required", "inputRequests": {"user_name": _elicit("Your name?")},
                        "requestState": "round-1"}
            args = {"name": ((answer or {}).get("content") or {}).get("name", "?")}
        as_task = (takes if modern else params.get("task") is not None) and support != "forbidden"
        if support == "required" and not as_task:
            if modern:
                raise MCPError(-32021, "Missing required client capability",
                               {"requiredCapabilities": {"extensions": {EXT: {}}}})
            raise MCPError(-32601, f"{name} must be called as a task")
        if as_task:
            job = self.start(name, args, meta, (params.get("task") or {}).get("ttl"))
            return {**job.task(True), "resultType": "task"} if modern else {"task": job.task(False)}
        job = self.start(name, args, meta, None)
        await job.done.wait()
        if job.status == "failed":
            raise MCPError(job.error["code"], job.error["message"])
        return {**(job.result or _text("")), **({"resultType": "complete"} if modern else {})}

    async def task_method(self, ctx: ServerRequestContext[Any], params: dict[str, Any], modern: bool,
                          takes: bool) -> dict[str, Any]:
        method = ctx.method
        allowed = ("tasks/get", "tasks/update", "tasks/cancel") if modern else ("tasks/get", "tasks/result",
                                                                                 "tasks/cancel", "tasks/list")
        if method not in allowed:
            raise MCPError(-32601, "Method not found")
        if modern and not takes:
            raise MCPError(-32021, "Missing required client capability", {"requiredCapabilities": {"extensions": {EXT: {}}}})
        named = ctx.request.headers.get("mcp-name") if ctx.request is not None else None
        if modern and named is not None and named.strip() != params.get("taskId"):
            raise MCPError(-32020, "Mcp-Name header does not match params.taskId")
        if method == "tasks/list":
            return {"tasks": [j.task(False) for j in self.jobs.values()]}
        job = self.jobs.get(str(params.get("taskId")))
        if job is None:
            raise MCPError(-32602, f"unknown task {params.get('taskId')!r}")
        if method == "tasks/get":
            return job.detailed() if modern else job.task(False)
        if method == "tasks/cancel":
            if job.status not in TERMINAL and job.runner is not None:
                job.runner.cancel()
                job.set("cancelled", "cancelled by the client")
            elif not modern and job.status != "cancelled":
                raise MCPError(-32602, f"task {job.task_id} already ended")
            return {"resultType": "complete"} if modern else job.task(False)
        if method == "tasks/update":
            for key, value in (params.get("inputResponses") or {}).items():
                future = job.answers.get(key)
                if future is not None and not future.done():
                    future.set_result(value)
            return {"resultType": "complete"}
        return await self.payload(ctx, job)

    async def payload(self, ctx: ServerRequestContext[Any], job: Job) -> dict[str, Any]:
        """2025-11-25 tasks/result: wait for the end; questions go to the client on this request."""
        while not job.done.is_set():
            for key, request in list(job.inputs.items()):
                future = job.answers.get(key)
                if future is None or future.done():
                    continue
                try:
                    answer = await ctx.session.elicit_form(request["params"]["message"], request["params"]["requestedSchema"],
                                                           related_request_id=ctx.request_id)
                    future.set_result(answer.model_dump(by_alias=True, mode="json", exclude_none=True))
                except Exception as exc:  # noqa: BLE001 - no back channel: the question stays unanswered
                    job.error = {"code": -32603, "message": f"input could not be asked: {exc}"}
                    if job.runner is not None:
                        job.runner.cancel()
                    job.status = "failed"
                    job.done.set()
            await asyncio.wait([asyncio.ensure_future(job.done.wait())], timeout=0.1)
        if job.status == "completed":
            meta = {"io.modelcontextprotocol/related-task": {"taskId": job.task_id}}
            return {**(job.result or {}), "_meta": meta}
        error = job.error or {"code": -32603, "message": f"task {job.status}"}
        raise MCPError(error["code"], error["message"])

    def server(self) -> Server[Any]:
        server = Server("dex-example-tasks", version="0.1.0", on_list_tools=self.list_tools)
        server.middleware.append(self.middleware)
        server.extensions[EXT] = {}
        return server


def _accepted(answer: Any) -> bool:
    return isinstance(answer, dict) and answer.get("action") == "accept"


def main() -> None:
    args = build_parser("An MCP server whose long-running tools run as tasks (both eras).").parse_args()
    directory = state_dir()
    serve(TasksServer(ExecutionLog(directory / "executions.jsonl", "tasks")).server(), args)


if __name__ == "__main__":
    main()
