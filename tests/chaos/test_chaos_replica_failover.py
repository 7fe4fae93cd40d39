"""A replica SIGKILLed while it owns a call that retries are waiting for at another replica.

Two `dex-gateway serve` processes share one PostgreSQL schema (`fences.lease_seconds: 1`).
Replica A claims a keyed write and sends it to plain_server, which records it and is held
(its notes lock). Ten retries of the same key arrive at replica B and wait on A's live
claim. A is SIGKILLed: its lease stops being renewed, B's waiters see a dead owner, and
* non_idempotent_write (append_log by policy): every waiter answers `outcome: unknown`,
  the call is never sent again: one execution;
* idempotent_write (put_note): the ten waiters race the compare-and-set takeover; exactly
  one resends with the same key, the others wait for its answer: two executions, never
  more, ten identical answers.

(The same-replica restart is in test_chaos_crash_loops.py; a live second replica in
tests/gateway/test_gateway_crashes.py.)
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import anyio
import pytest

from tests.chaos.chaos_support import (
    OUTCOME,
    Call,
    CallOutcome,
    NotesLock,
    content_of,
    describe_failures,
    meta_of,
    outcome_label,
    report,
    run_calls,
    sdk_client,
)
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config
from tests.support.inflight import SentRequests, wait_until_read
from tests.support.servers import RunningServer, read_executions, start_http_server, wait_for_executions

pytestmark = [pytest.mark.anyio]

LEASE_SECONDS = 1.0
WAITERS = 10


@dataclass
class Pair:
    a: RunningGateway
    b: RunningGateway
    notes: RunningServer


@pytest.fixture
def pair(tmp_path, pg_store_url: str) -> Iterator[Pair]:
    with start_http_server("plain_server", state_dir=tmp_path / "notes") as notes:
        config = write_config(tmp_path, {
            "upstreams": [http_upstream("notes", notes.url,
                                        tool_policies={"append_log": {"effect": "non_idempotent_write"}})],
            "fences": {"store": pg_store_url, "lease_seconds": LEASE_SECONDS, "wait_seconds": 20},
        })
        with start_gateway(config) as a, start_gateway(config) as b:

            async def warm() -> None:
                for url in (a.url, b.url):
                    async with sdk_client(url) as client:
                        assert (await client.call_tool("notes__list_notes", {})).is_error is False

            anyio.run(warm)
            yield Pair(a, b, notes)


CASES = {
    "append_log-non_idempotent": ("append_log", lambda tag: {"line": tag}),
    "put_note-idempotent": ("put_note", lambda tag: {"name": tag, "text": "v1"}),
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("case", list(CASES))
async def test_owner_replica_killed_while_retries_wait_at_another(pair: Pair, case: str) -> None:
    tool, make_args = CASES[case]
    state = pair.notes.state_dir
    tag = f"failover-{uuid.uuid4().hex[:8]}"
    key = f"failover/{case}/{uuid.uuid4().hex[:8]}"
    arguments = make_args(tag)
    resendable = tool == "put_note"
    first: list[object] = []
    waiters: list[CallOutcome] = []
    sent = SentRequests()
    lock = NotesLock(state)
    started = time.monotonic()
    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:

                async def first_call() -> None:
                    try:
                        async with sdk_client(pair.a.url) as client:
                            first.append(await client.call_tool(f"notes__{tool}", arguments,
                                                                meta={"io.superdurable.dex/idempotencyKey": key}))
                    except Exception as exc:  # noqa: BLE001 - replica A dies under this call
                        first.append(exc)

                tg.start_soon(first_call)
                await anyio.to_thread.run_sync(lambda: wait_for_executions(state, 1, tool=tool, key=key, timeout=20))

                async def retries() -> None:
                    calls = [Call(f"notes__{tool}", arguments, key) for _ in range(WAITERS)]
                    await run_calls([pair.b.url], calls, clients=WAITERS, all_at_once=True, started=waiters,
                                    sent=sent)

                tg.start_soon(retries)
                # The ten retries are inside B (every request written, every byte read) ...
                await sent.wait_for(WAITERS)
                await wait_until_read([pair.b.port])
                # ... and keep waiting for longer than a lease while A is alive and renewing: an
                # observation window, since what must not happen is an answer within it.
                await anyio.sleep(2 * LEASE_SECONDS)
                assert waiters == [], "a retry answered while the owner replica was alive"
                pair.a.kill()
                killed_at = time.monotonic()
                if resendable:
                    lock.release()  # the takeover's resend needs the upstream
    finally:
        lock.release()
    assert isinstance(first[0], BaseException), first
    assert len(waiters) == WAITERS, describe_failures(waiters)
    assert all(o.error is None and o.result is not None for o in waiters), describe_failures(waiters)
    results = [o.result for o in waiters if o.result is not None]
    executions = read_executions(state, tool=tool, key=key)
    labels = Counter(outcome_label(r) for r in results)
    answered_after = max(o.seconds for o in waiters)
    if resendable:
        assert len(executions) == 2, f"{len(executions)} executions: the takeover must resend exactly once"
        assert all(r.is_error is False for r in results), describe_failures(waiters)
        assert len({repr(content_of(r)) for r in results}) == 1
        assert labels == {"ok": 1, "ok-replayed": WAITERS - 1}, labels
    else:
        assert len(executions) == 1, f"{len(executions)} executions of a non-idempotent write"
        assert all(r.is_error is True and meta_of(r).get(OUTCOME) == "unknown" for r in results), labels
        # A later retry is still unknown, still not sent.
        async with sdk_client(pair.b.url) as client:
            again = await client.call_tool(f"notes__{tool}", arguments, meta={"io.superdurable.dex/idempotencyKey": key})
        assert meta_of(again).get(OUTCOME) == "unknown"
        assert len(read_executions(state, tool=tool, key=key)) == 1
    report(f"FAILOVER {case}: owner replica SIGKILLed with {WAITERS} retries waiting at the other replica "
           f"(PostgreSQL, lease {LEASE_SECONDS:g} s): executions={len(executions)}, answers {dict(labels)}, "
           f"answered {time.monotonic() - killed_at:.2f} s after the kill (waiters' longest call {answered_after:.2f} s, "
           f"test {time.monotonic() - started:.2f} s)")
