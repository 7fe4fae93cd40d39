"""What a PostgreSQL statement raises when the database could not answer now: the one list both
PostgreSQL stores (fences, approvals) retry on, or settle as "may or may not have happened".

A lost or refused connection, a server shutting down, a statement timeout, a deadlock or
serialization failure. `InternalClientError`: what a statement sent on a connection the server
has just ended raises before the client saw the end ("another operation is in progress";
measured: 6 in 20 statements sent right after `pg_terminate_backend`).
"""

from __future__ import annotations

import asyncpg

__all__ = ["TRANSIENT_ERRORS"]

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.QueryCanceledError,
    asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError,
)
