"""The service's watch over the upstream tasks its parked turns wait for.

A turn of `dex-agent serve` that started a long-running upstream task (a `tools/call` run as an
MCP task) is parked once the task runs by itself (`gateway_client/tasks.py`); its task id is in
the session store (`host_tasks`). This loop polls those tasks: it claims the ones whose poll is
due (`claim_task_polls`: a transaction, so two processes on one store do not poll one task in
the same round), asks the gateway with `tasks/get` (one session per round, at most
`batch` tasks), and records what it saw (`record_task_poll`: the next poll at the task's
pollInterval, growing while nothing changes, up to 15 s; after failures 1, 2, 4 … up to 60 s).
A task that ended, asks for input or is no longer known makes its turn due work, and the driver
picks the session up once, under its lease (`driver.py`).

Polling rather than `notifications/tasks/status`: a parked turn has no live gateway session
(its process may even have been killed and restarted since), a notification goes to one session
of one process and is lost with it, and a stateless gateway sends none; `tasks/get` works from
any process at any time, after any restart.
"""

from __future__ import annotations

import logging

import anyio

from ..gateway_client.tasks import TaskCaller
from ..store.session_store import SessionStore
from ..store.sqlite_service import LeaseHolder

log = logging.getLogger(__name__)

ROUND_SECONDS = 0.25
BATCH = 32  # tasks polled in one round at most
CLAIM_SECONDS = 30.0  # a claimed poll not recorded by then (its process died) is claimed again


class TaskWatcher:
    def __init__(self, store: SessionStore, caller: TaskCaller, me: LeaseHolder,
                 round_seconds: float = ROUND_SECONDS, batch: int = BATCH) -> None:
        self.store = store
        self.caller = caller
        self.me = me
        self.round_seconds = round_seconds
        self.batch = batch

    async def run(self) -> None:
        """Poll the parked turns' tasks until cancelled."""
        while True:
            try:
                await self.poll_once()
            except Exception:  # a round that failed (the store unreachable): logged, tried again
                log.exception("polling upstream tasks failed")
            await anyio.sleep(self.round_seconds)

    async def poll_once(self) -> int:
        """One round: claim, poll, record; how many tasks were polled."""
        claimed = await self.store.claim_task_polls(self.me, self.batch, CLAIM_SECONDS)
        if not claimed:
            return 0
        statuses = await self.caller.statuses([task.task_id for task in claimed])
        for task in claimed:
            seen = statuses[task.task_id]
            if seen.status is not None and seen.status != task.status:
                log.info("upstream task %s of %s: %s", task.task_id, task.key, seen.status)
            await self.store.record_task_poll(task.key, seen.status, seen.poll_interval)
        return len(claimed)
