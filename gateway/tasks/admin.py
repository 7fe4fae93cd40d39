"""`dex-gateway tasks list|show|cancel`: the operator's view of the task store.

`cancel` marks the task cancelled in the store (any replica's record); the process running it
sees that at its next lease renewal, stops the call and cancels the upstream task.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ..config.model import load_config
from ..storage.database import run_with_store
from ..text_table import print_table
from .records import TaskRecord, TaskStatus, iso
from .store import TaskStore
from .stores import open_task_store
from .transitions import cancelled_error, change

__all__ = ["cancel_task", "configure_parser"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tasks_command", required=True)
    listing = sub.add_parser("list", help="tasks, newest first")
    listing.add_argument("--principal", help="only this principal's tasks")
    listing.add_argument("--status", choices=[s.value for s in TaskStatus], help="only tasks in this status")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(run=_list)
    show = sub.add_parser("show", help="one task, with its result or error")
    show.add_argument("task_id")
    show.set_defaults(run=_show)
    cancel = sub.add_parser("cancel", help="cancel a task (its process stops the call and the upstream task)")
    cancel.add_argument("task_id")
    cancel.set_defaults(run=_cancel)
    for command in (listing, show, cancel):
        command.add_argument("--config", help="config file (default: $DEX_GATEWAY_CONFIG or config/gateway.yaml)")


def _with_store(args: argparse.Namespace, action: Callable[[TaskStore], Awaitable[Any]]) -> Any:
    return run_with_store(open_task_store(load_config(args.config).fences.store), action)


def _list(args: argparse.Namespace) -> int:
    status = TaskStatus(args.status) if args.status else None

    async def action(store: TaskStore) -> list[TaskRecord]:
        return await store.list(principal=args.principal, status=status, limit=args.limit)

    records: list[TaskRecord] = _with_store(args, action)
    if args.json:
        print(json.dumps([r.as_dict() for r in records], indent=2, default=str))
        return 0
    columns = ("task_id", "principal", "tool", "status", "created", "upstream_task")
    rows = [{"task_id": r.task_id, "principal": r.principal, "tool": r.tool, "status": r.status.value,
             "created": iso(r.created_at) or "", "upstream_task": r.upstream_task_id or ""} for r in records]
    print_table(rows, columns)
    return 0


def _show(args: argparse.Namespace) -> int:
    async def action(store: TaskStore) -> TaskRecord | None:
        return await store.get(args.task_id)

    record = _with_store(args, action)
    if record is None:
        print(f"no task {args.task_id!r}", file=sys.stderr)
        return 1
    print(json.dumps(record.as_dict(), indent=2, default=str))
    return 0


async def cancel_task(store: TaskStore, task_id: str, clock: Callable[[], float] = time.time) -> TaskRecord | None:
    """Mark a task cancelled (a terminal task stays as it is); the record after, None if unknown."""

    def step(record: TaskRecord) -> TaskRecord | None:
        if record.status.terminal:
            return None
        return dataclasses.replace(record, status=TaskStatus.CANCELLED, cancel_requested=True,
                                   status_message="cancelled by the operator", error=cancelled_error(record),
                                   input_requests=None)

    return await change(store, task_id, step, clock=clock)


def _cancel(args: argparse.Namespace) -> int:
    record = _with_store(args, lambda store: cancel_task(store, args.task_id))
    if record is None:
        print(f"no task {args.task_id!r}", file=sys.stderr)
        return 1
    print(f"task {record.task_id}: {record.status.value}")
    return 0
