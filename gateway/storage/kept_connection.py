"""One of the pool's connections kept for a store's short hot statements.

asyncpg's pool costs each statement an acquire and a release, and the release runs in a shielded
task of its own: ~50 µs of CPU and ~70 µs of latency per statement on the reference box
(docs/benchmarks.md, "Where the PostgreSQL fence's time goes"). A store whose hot path is one
statement after another (the fence's claim and finish) keeps one of the pool's connections and
runs them on it while it is free; a statement that finds it busy goes through the pool as before,
so concurrency is what the pool allows either way.

The kept connection stays the pool's. Anything wrong with it -- a statement that failed or was
cancelled, a server that closed it -- hands it back with `pool.release`, which does for it what
it does for any connection (waits out a cancelled statement, terminates a broken one, reconnects
on a later acquire; one the server closed it has already taken back), and the next statement
takes another. It is also handed back after
`recycle_after` statements, so the pool's own recycling (`max_queries`) still applies, and on
`close()`, before the pool closes. A pool of a single connection has none to spare: there every
statement goes through the pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import asyncpg

__all__ = ["KeptConnection"]

log = logging.getLogger(__name__)


class KeptConnection:
    def __init__(self, pool: Callable[[], asyncpg.Pool], *, recycle_after: int = 10_000) -> None:
        """`pool()`: the pool to keep a connection of (called at each use, so a store can hand
        over a pool it opens later)."""
        self._pool = pool
        self._recycle_after = recycle_after
        self._conn: Any = None  # an asyncpg PoolConnectionProxy, or None
        self._uses = 0
        self._busy = False
        self._closed = False

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        return await self._run("fetchrow", sql, args)

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        return await self._run("fetch", sql, args)  # type: ignore[no-any-return]

    async def execute(self, sql: str, *args: Any) -> str:
        return await self._run("execute", sql, args)  # type: ignore[no-any-return]

    async def _run(self, method: str, sql: str, args: tuple[Any, ...]) -> Any:
        pool = self._pool()
        if self._busy or self._closed or pool.get_max_size() < 2:
            # (A pool of one connection keeps it for everyone: nothing to set apart.)
            return await getattr(pool, method)(sql, *args)
        self._busy = True
        try:
            conn = self._conn
            if conn is None or not _usable(conn):
                self._conn = None
                if conn is not None:
                    await self._give_back(conn)
                conn = await pool.acquire()
                self._conn, self._uses = conn, 0
            try:
                result = await getattr(conn, method)(sql, *args)
            except BaseException:
                self._conn = None
                await self._give_back(conn)
                raise
            self._uses += 1
            if self._uses >= self._recycle_after or self._closed:
                self._conn = None
                await self._give_back(conn)
            return result
        finally:
            self._busy = False

    async def _give_back(self, conn: Any) -> None:
        # (A connection the pool already took back, as it does when the server closed it, is
        # left as it is: releasing it again does nothing.)
        # Shielded: a connection taken from the pool goes back to it even when the caller is
        # cancelled (else the pool would wait for it at close).
        with anyio.CancelScope(shield=True):
            try:
                await self._pool().release(conn)
            except Exception:  # the pool closes what it cannot reset; the caller's own error stands
                log.debug("returning the kept connection to the pool failed", exc_info=True)

    async def close(self) -> None:
        """Hand the connection back (a statement under way hands it back as it ends)."""
        self._closed = True
        if self._conn is not None and not self._busy:
            conn, self._conn = self._conn, None
            await self._give_back(conn)


def _usable(conn: Any) -> bool:
    try:
        return not conn.is_closed()
    except asyncpg.InterfaceError:  # the pool took it back: the server closed it
        return False
