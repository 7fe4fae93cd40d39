"""Tasks (SPEC 5): long-running tool calls as MCP tasks, in both protocol eras.

    records.py      the task record and its statuses
    store.py        the store contract; stores/ (memory, SQLite, PostgreSQL) in the fences' database
    markers.py      the fence answer of a call that runs as a task (a retry gets the same task)
    wire.py         the wire forms of both eras (2025-11-25 core tasks, the 2026-07-28 extension)
    transitions.py  compare-and-set steps of a task's life; the lost-task rule
    jobs.py         the calls this process runs in the background, their leases, cancellation
    upstream.py     a tools/call run as an upstream task, polled to its end (polling.py: intervals)
    requests.py     which calls go upstream as tasks (the pipeline asks)
    service.py      the entry points both front entries call (tools/call, tasks/*)
    observed.py     the store with listeners of this process's writes (status notifications)
    admin.py        `dex-gateway tasks list|show|cancel`
"""

from __future__ import annotations

from .jobs import TaskJobs
from .observed import ObservedTaskStore
from .records import TaskRecord, TaskStatus
from .requests import TaskRequests
from .service import TaskSettings, Tasks
from .store import TaskStore
from .stores import open_task_store

__all__ = ["ObservedTaskStore", "TaskJobs", "TaskRecord", "TaskRequests", "TaskSettings", "TaskStatus", "TaskStore", "Tasks", "open_task_store"]
