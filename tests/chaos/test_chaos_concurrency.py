"""Concurrent calls through real gateway processes and the SDK client (SPEC 4, the fence).

The upstream is plain_server's `append_log`, made `non_idempotent_write` by a tool policy:
plain_server ignores idempotency keys, so only the gateway's fence keeps a key to one run.

* 50 concurrent calls with one key: exactly one upstream execution, 50 identical answers
  (one sent, 49 replayed after waiting for it). `held`: the upstream is paused (its notes
  lock held by the test) until all 50 are in flight, so 49 of them must wait on a live
  owner; `racing`: nothing paused, the calls race the claim and the first answer.
* 1,000 calls with distinct keys over 16 SDK clients: 1,000 executions, one per key.

Against SQLite (one gateway) and the machine's PostgreSQL (two gateway processes sharing a
fresh schema, calls spread across both; the schema is dropped afterwards; skipped only if
PostgreSQL is unreachable).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from tests.chaos.chaos_support import (
    REPLAYED,
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

TOOL = "notes__append_log"
CLIENTS = 16


@dataclass
class Rig:
    store: str  # "sqlite" or "postgresql"
    gateways: list[RunningGateway]
    notes: RunningServer

    @property
    def urls(self) -> list[str]:
        return [g.url for g in self.gateways]

    @property
    def state(self) -> Path:
        return self.notes.state_dir


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    store = str(request.param)
    root = tmp_path_factory.mktemp(f"concurrency-{store}")
    fences = {"store": f"sqlite:///{root / 'fences.db'}"}
    if store == "postgresql":
        fences = {"store": request.getfixturevalue("pg_store_url")}
    with start_http_server("plain_server", state_dir=root / "notes") as notes:
        config = write_config(root, {
            "upstreams": [http_upstream("notes", notes.url,
                                        tool_policies={"append_log": {"effect": "non_idempotent_write"}})],
            "fences": fences,
        })
        count = 2 if store == "postgresql" else 1
        # Port 0: each replica gets its own ephemeral replica id, so neither mistakes the
        # other's live claims for its own dead ones.
        with start_gateway(config) as first:
            gateways = [first]
            if count == 2:
                with start_gateway(config) as second:
                    gateways.append(second)
                    yield _warmed(Rig(store, gateways, notes))
            else:
                yield _warmed(Rig(store, gateways, notes))


def _warmed(rig: Rig) -> Rig:
    """Every gateway has listed the upstream (so a paused upstream cannot stall a listing)."""

    async def warm() -> None:
        for url in rig.urls:
            async with sdk_client(url) as client:
                result = await client.call_tool("notes__list_notes", {})
                assert result.is_error is False

    anyio.run(warm)
    return rig


def assert_one_answer_for_all(rig: Rig, key: str, outcomes: list[CallOutcome]) -> Counter[str]:
    assert all(o.error is None for o in outcomes), describe_failures(outcomes)
    results = [o.result for o in outcomes if o.result is not None]
    assert len(results) == len(outcomes)
    assert all(r.is_error is False for r in results), describe_failures(outcomes)
    executions = read_executions(rig.state, tool="append_log", key=key)
    assert len(executions) == 1, f"{len(executions)} upstream executions for one key"
    contents = {repr(content_of(r)) for r in results}
    assert len(contents) == 1, f"answers differ: {sorted(contents)[:3]}"
    labels = Counter(outcome_label(r) for r in results)
    # The one call that was sent is not marked; every other call got the stored answer.
    assert labels == {"ok": 1, "ok-replayed": len(results) - 1}, labels
    return labels


@pytest.mark.timeout(90)
@pytest.mark.parametrize("mode", ["held", "racing"])
async def test_fifty_concurrent_calls_with_one_key_run_once(rig: Rig, mode: str) -> None:
    key = f"same/{rig.store}/{mode}/{uuid.uuid4().hex[:8]}"
    calls = [Call(TOOL, {"line": f"one line for {key}"}, key) for _ in range(50)]
    finished: list[CallOutcome] = []
    sent = SentRequests()
    started = time.monotonic()
    lock = NotesLock(rig.state) if mode == "held" else None
    try:
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:

                async def send() -> None:
                    await run_calls(rig.urls, calls, clients=CLIENTS, all_at_once=True, started=finished, sent=sent)

                tg.start_soon(send)
                if lock is not None:
                    # The first call is at the upstream (recorded, blocked on the lock) ...
                    await anyio.to_thread.run_sync(
                        lambda: wait_for_executions(rig.state, 1, tool="append_log", key=key, timeout=30))
                    # ... and the other 49 are inside the gateways (every request written, every
                    # byte read), where they can only wait on its live claim.
                    await sent.wait_for(len(calls), timeout=30)
                    await wait_until_read([g.port for g in rig.gateways], timeout=30)
                    assert finished == [], "a call answered while the first one was still running"
                    assert len(read_executions(rig.state, tool="append_log", key=key)) == 1
                    lock.release()
    finally:
        if lock is not None:
            lock.release()
    outcomes = sorted(finished, key=lambda o: o.seconds)
    labels = assert_one_answer_for_all(rig, key, outcomes)
    per_gateway = Counter(rig.urls.index(o.url) for o in outcomes)
    assert len(per_gateway) == len(rig.gateways)
    report(f"SAME-KEY {rig.store} {mode}: 50 calls over {CLIENTS} SDK clients, {len(rig.gateways)} gateway(s) "
           f"{dict(per_gateway)}: upstream executions=1, "
           f"answers {dict(labels)}, identical content, {time.monotonic() - started:.2f} s")


async def distinct_keys(rig: Rig, n: int) -> None:
    prefix = f"distinct/{rig.store}/{n}/{uuid.uuid4().hex[:8]}"
    calls = [Call(TOOL, {"line": f"{prefix} line {i}"}, f"{prefix}/{i}") for i in range(n)]
    started = time.monotonic()
    with anyio.fail_after(120):
        outcomes = await run_calls(rig.urls, calls, clients=CLIENTS)
    seconds = time.monotonic() - started
    assert all(o.error is None and o.result is not None and not o.result.is_error for o in outcomes), \
        describe_failures(outcomes)
    assert not any(meta_of(o.result).get(REPLAYED) for o in outcomes if o.result is not None)
    executions = [e for e in read_executions(rig.state, tool="append_log")
                  if str(e.get("idempotency_key", "")).startswith(prefix + "/")]
    per_key = Counter(e["idempotency_key"] for e in executions)
    assert len(executions) == n, f"{len(executions)} executions for {n} distinct keys"
    assert set(per_key.values()) == {1} and len(per_key) == n
    per_gateway = Counter(rig.urls.index(o.url) for o in outcomes)
    report(f"DISTINCT-KEYS {rig.store}: {n} calls over {CLIENTS} SDK clients, {len(rig.gateways)} gateway(s) "
           f"{dict(per_gateway)}: upstream executions={len(executions)}, {seconds:.1f} s ({n / seconds:.0f} calls/s)")


@pytest.mark.timeout(180)
async def test_thousand_distinct_keys_run_once_each(rig: Rig) -> None:
    # ~8 s per store on the 2-core reference box (SDK clients, gateways and upstream share it).
    await distinct_keys(rig, 1000)
