"""Holding a session's lease while this process drives it (`serve`, and `run`/`chat` in-process).

The lease is taken in the store (`store/sqlite_service.py`, the gateway's lease rule) and renewed
every third of its time while the body runs; a renewal that finds another live holder (this
process stalled past its lease and was taken over) cancels the body, which then ends with
`SessionBusy`: it no longer drives the session. A body that ends releases the lease.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from .session_store import SessionStore
from .sqlite_service import LeaseHolder

DEFAULT_LEASE_SECONDS = 30.0


class SessionBusy(ValueError):
    """Another live process drives the session (a usage error for the CLI: one line, exit 2)."""


def this_process() -> LeaseHolder:
    """This process as a lease holder: its host and pid, and a boot id new at every start."""
    return LeaseHolder(f"{socket.gethostname()}/{os.getpid()}", uuid.uuid4().hex)


def busy_message(session_id: str, holder: LeaseHolder, until: float) -> str:
    left = max(0.0, until - time.time())
    return (f"session {session_id} is driven by another process ({holder.replica_id}); its lease ends in "
            f"{left:.0f} s unless renewed: wait for its turn to end, or stop that process")


@asynccontextmanager
async def hold_lease(
    store: SessionStore, session_id: str, me: LeaseHolder, seconds: float = DEFAULT_LEASE_SECONDS
) -> AsyncIterator[None]:
    """Drive `session_id` inside: SessionBusy when a live other process holds it, or when the
    lease is lost (then the body is cancelled first)."""
    if await store.take_lease(session_id, me, seconds) is None:
        lease = await store.get_lease(session_id)
        raise SessionBusy(busy_message(session_id, lease.holder, lease.lease_until) if lease else f"session {session_id} is busy")
    lost = False
    try:
        async with anyio.create_task_group() as tg:

            async def renew() -> None:
                nonlocal lost
                while True:
                    await anyio.sleep(seconds / 3)
                    if await store.take_lease(session_id, me, seconds) is None:
                        lost = True
                        tg.cancel_scope.cancel()  # the body too: it no longer drives the session
                        return

            tg.start_soon(renew)
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
        if lost:
            raise SessionBusy(f"lost the lease of session {session_id}: another process took it over "
                              "(this one stalled past its lease); it drives the session now")
    finally:
        with anyio.CancelScope(shield=True):
            await store.release_lease(session_id, me)
