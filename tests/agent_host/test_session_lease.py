"""The session lease in the store: one holder at a time, renewal, takeover when the lease runs out
(a holder elsewhere) or at once (a holder process gone from this machine), the gateway's rule."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from agent_host.store.sqlite_service import LeaseHolder
from agent_host.store.sqlite_store import SqliteSessionStore


def test_one_holder_renewal_and_takeover_after_expiry(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "l.db")
    a = LeaseHolder("other-host/1", "boot-a")
    b = LeaseHolder("other-host/2", "boot-b")
    assert store.take_lease("s", a, 10, now=100.0) is not None
    assert store.take_lease("s", b, 10, now=105.0) is None  # live: refused
    assert store.take_lease("s", a, 10, now=108.0) is not None  # renewed to 118
    assert store.take_lease("s", b, 10, now=117.0) is None
    taken = store.take_lease("s", b, 10, now=118.0)  # ran out: taken over
    assert taken is not None and taken.holder == b
    # The same replica under a new boot: the old one is dead at once.
    assert store.take_lease("s", LeaseHolder("other-host/2", "boot-c"), 10, now=119.0) is not None
    store.release_lease("s", b)  # not the holder any more: nothing released
    lease = store.get_lease("s")
    assert lease is not None and lease.holder.boot_id == "boot-c"


def test_a_gone_process_on_this_machine_loses_its_lease_at_once(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "g.db")
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True)
    gone = LeaseHolder(f"{socket.gethostname()}/{child.stdout.strip()}", "boot-x")
    assert store.take_lease("s", gone, 3600, now=100.0) is not None
    me = LeaseHolder(f"{socket.gethostname()}/999999999", "boot-me")
    assert store.take_lease("s", me, 10, now=101.0) is not None
    queued, busy = store.queue_message("s2", "hello")
    assert busy is False and store.due_sessions(me, now=102.0) == ["s2"]


def test_the_postgresql_connection_speaks_the_statements_sqlite_subset() -> None:
    from agent_host.store.postgres import translate

    assert translate("SELECT * FROM controls WHERE session_id = ? AND turn_id IS ? LIMIT ?") == (
        "SELECT * FROM controls WHERE session_id = $1 AND turn_id IS NOT DISTINCT FROM $2 LIMIT $3", None, False)
    sql, key, ignore = translate("INSERT OR IGNORE INTO approvals (id, status) VALUES (?, ?)")
    assert (sql, key, ignore) == ("INSERT INTO approvals (id, status) VALUES ($1, $2) ON CONFLICT DO NOTHING", None, True)
    assert translate("INSERT INTO events (session_id, data) VALUES (?, ?)")[:2] == (
        "INSERT INTO events (session_id, data) VALUES ($1, $2) RETURNING id", "id")


def test_an_unreachable_postgresql_store_is_one_line() -> None:
    from tests.agent_host.host_support import run_agent
    from tests.support.servers import free_port

    result = run_agent("sessions", "list", "--store", f"postgresql://nobody@127.0.0.1:{free_port()}/test")
    assert result.returncode == 2
    assert result.stderr.startswith("dex-agent: cannot open the session store at PostgreSQL 127.0.0.1:")
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_lost_lease_stops_the_body_with_a_clear_error(tmp_path: Path) -> None:
    import time

    import anyio
    import pytest

    from agent_host.store.lease import SessionBusy, hold_lease
    from agent_host.store.session_store import SessionStore

    async def go() -> None:
        async with SessionStore(tmp_path / "lost.db") as store:
            me, thief = LeaseHolder("other-host/1", "a"), LeaseHolder("other-host/2", "b")
            with pytest.raises(SessionBusy, match="lost the lease of session s"):
                async with hold_lease(store, "s", me, seconds=0.3):
                    # Seen from a clock past this lease (as after a stall), the thief takes it over.
                    assert await store.take_lease("s", thief, 60, now=time.time() + 1) is not None
                    await anyio.sleep(5)  # cancelled by the failed renewal
            lease = await store.get_lease("s")
            assert lease is not None and lease.holder == thief  # not released by the loser

    anyio.run(go)
