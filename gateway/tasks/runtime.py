"""Tasks in the running gateway: the store opened in the app's lifespan, the service and its
background loops (lease keeper, sweeper) started in the gateway's task group."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from anyio.abc import TaskGroup

from ..pipeline.calls import CallPipeline
from ..config.model import TasksConfig
from ..storage.database import Database, opened
from ..fences import Fences
from ..supervision import Supervisor
from ..upstreams.upstream import Upstream
from .jobs import TaskJobs
from .requests import TaskRequests
from .creation import TaskParts
from .service import TaskSettings, Tasks
from .observed import ObservedTaskStore
from .store import TaskStore
from .stores import open_task_store

__all__ = ["open_tasks_store", "start_tasks", "task_requests"]


@asynccontextmanager
async def open_tasks_store(config: TasksConfig, database: Database) -> AsyncIterator[ObservedTaskStore | None]:
    """The task store (None when tasks are off), open for the body; its listeners hear of this
    process's writes (the front's task status notifications)."""
    if not config.enabled:
        yield None
        return
    async with opened(ObservedTaskStore(open_task_store(database))) as store:
        yield store


def task_requests(config: TasksConfig) -> TaskRequests | None:
    """What the pipeline asks which calls go upstream as tasks (None when tasks are off)."""
    if not config.enabled:
        return None
    return TaskRequests(default_ttl_ms=int(config.default_ttl_seconds * 1000), clock=time.time,
                        refuse_plain=config.plain_required == "refuse")


def start_tasks(config: TasksConfig, store: TaskStore | None, tg: TaskGroup, *, pipeline: CallPipeline,
                fences: Fences, upstreams: Mapping[str, Upstream], server_info: Mapping[str, Any],
                supervisor: Supervisor | None = None) -> Tasks | None:
    """The tasks service, its lease keeper and sweeper running in `tg` (None when tasks are off).
    The caller hands it to the pipeline as its task stage (`CallPipeline.add_task_stage`)."""
    if store is None:
        return None
    supervisor = supervisor or Supervisor()
    jobs = TaskJobs(store, fences.owner, tg, lease_seconds=fences.lease_seconds, clock=time.time,
                    max_held_bytes=config.max_result_bytes_per_principal, supervisor=supervisor)
    settings = TaskSettings(
        augment=config.augment,
        default_ttl_ms=int(config.default_ttl_seconds * 1000),
        max_ttl_ms=int(config.max_ttl_seconds * 1000),
        poll_interval_ms=config.poll_interval_ms,
        plain_required=config.plain_required,
        keep_expired_seconds=config.keep_expired_seconds,
        max_result_bytes_per_principal=config.max_result_bytes_per_principal,
    )
    tasks = Tasks(TaskParts(store, pipeline, fences, upstreams, jobs, settings, server_info, time.time))
    tg.start_soon(supervisor.loop, "task lease keeper", jobs.run_keeper)
    tg.start_soon(supervisor.loop, "task sweeper", lambda: tasks.run_sweeper(config.sweep_interval_seconds))
    return tasks
