"""How replicas sharing PostgreSQL find each other: each live process's advertised URL, under a lease.

    dex_replicas   boot_id (a process start), replica_id, url, lease_until (epoch seconds)

Each process writes its row at start and renews its lease while it runs (`run_heartbeat`); a
row whose lease ran out names a dead process (the lease rule: gateway/storage/leases.py), and is
never forwarded to. The URL is where the other replicas reach this process's MCP endpoint
(`DEX_REPLICA_URL`, else the loopback address and port it serves on). With SQLite or a memory
store there are no other replicas: nothing is written and nothing is found.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from .database import Database, lock_schema
from .leases import holder_dead

__all__ = ["ReplicaDirectory"]

logger = logging.getLogger(__name__)

_TABLE = "dex_replicas"


@dataclass(frozen=True)
class _Holder:
    replica_id: str
    boot_id: str


class ReplicaDirectory:
    def __init__(self, database: Database, *, replica_id: str, boot_id: str, url: str,
                 lease_seconds: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        self._database = database
        self.me = _Holder(replica_id, boot_id)
        self.url = url
        self.lease_seconds = lease_seconds
        self._clock = clock
        self._table = f'"{database.postgres.schema}".{_TABLE}' if self.enabled else ""

    @property
    def table(self) -> str:
        """The directory's table, qualified by the schema (PostgreSQL only)."""
        return self._table

    @property
    def enabled(self) -> bool:
        return self._database.scheme == "postgresql"

    async def open(self) -> None:
        """Create the table (once per schema) and write this process's row."""
        if not self.enabled:
            return
        async with self._database.pool.acquire() as conn, conn.transaction():
            await lock_schema(conn, self._database.postgres.schema, "replicas")
            await conn.execute(f"CREATE TABLE IF NOT EXISTS {self._table} (boot_id TEXT PRIMARY KEY, "
                               "replica_id TEXT NOT NULL, url TEXT NOT NULL, lease_until DOUBLE PRECISION NOT NULL)")
        await self.renew()

    async def renew(self) -> None:
        if not self.enabled:
            return
        now = self._clock()
        await self._database.pool.execute(
            f"INSERT INTO {self._table} (boot_id, replica_id, url, lease_until) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (boot_id) DO UPDATE SET url = EXCLUDED.url, lease_until = EXCLUDED.lease_until",
            self.me.boot_id, self.me.replica_id, self.url, now + self.lease_seconds)
        # Rows of processes dead for a while: housekeeping, any replica may do it.
        await self._database.pool.execute(f"DELETE FROM {self._table} WHERE lease_until < $1",
                                          now - 10 * self.lease_seconds)

    async def close(self) -> None:
        """A clean stop: this process's row goes at once (its sessions are gone with it)."""
        if not self.enabled:
            return
        try:
            with anyio.CancelScope(shield=True):
                await self._database.pool.execute(f"DELETE FROM {self._table} WHERE boot_id = $1", self.me.boot_id)
        except Exception:  # noqa: BLE001 - the lease runs out all the same
            logger.info("could not remove this replica's row from %s", _TABLE, exc_info=True)

    async def url_of(self, boot_id: str) -> str | None:
        """The URL of the live process `boot_id`; None when it is unknown or dead (or is this one)."""
        if not self.enabled or boot_id == self.me.boot_id:
            return None
        row = await self._database.pool.fetchrow(
            f"SELECT replica_id, url, lease_until FROM {self._table} WHERE boot_id = $1", boot_id)
        if row is None:
            return None
        holder = _Holder(str(row["replica_id"]), boot_id)
        if holder_dead(holder, float(row["lease_until"]), me=self.me, now=self._clock()):
            return None
        return str(row["url"])

    async def run_heartbeat(self) -> None:
        """Renew this process's lease every third of it, until cancelled."""
        while True:
            await anyio.sleep(self.lease_seconds / 3)
            await self.renew()
