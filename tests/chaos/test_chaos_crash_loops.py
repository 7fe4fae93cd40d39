"""Crash loops: the gateway SIGKILLed while a write is in flight at the upstream, restarted on
the same port and fence store, then the client retries with the same key (SPEC 4).

Each iteration, through a real `dex-gateway serve` process and the SDK client:

1. a keyed write starts and the upstream records its execution, then blocks (dex_server's
   hold_* tools wait at a gate file; plain_server waits on its notes lock, held by the test);
2. the gateway is SIGKILLed (its process group) while the call is in flight;
3. the gateway is started again on the same port (same replica id, new boot id: its old
   claim is dead at once) and the same SQLite store;
4. the upstream is let go (plain_server's first execution finishes into a dead connection;
   dex_server's was cancelled when that connection died);
5. the client retries with the same key, then once more.

Expected, by effect:
* non_idempotent_write (dex_server hold_payment; plain_server append_log made
  non_idempotent_write by a tool policy, an upstream with no fence of its own): the retry
  answers `outcome: unknown` (isError) and is never sent: exactly one execution per key;
* idempotent_write (dex_server hold_memo; plain_server put_note by its annotations): the
  retry takes the fence over and is sent again with the same key, and answers the first
  call's result: two executions with that key (plain_server runs the resend again; dex_server's
  first execution was cancelled when the gateway's connection died, so its own fence lets the
  resend run).

The upstreams run as separate HTTP processes, so they survive the gateway's SIGKILL.
`pytest -m slow tests/chaos` runs each variant CHAOS_ITERATIONS (default 20) times and prints
a CRASH-LOOP summary line; every normal run does one iteration of each.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.fences.ids import fence_id
from tests.chaos.chaos_support import (
    KEY,
    OUTCOME,
    REPLAYED,
    NotesLock,
    Tally,
    meta_of,
    outcome_label,
    report,
    sdk_client,
    text_of,
)
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config
from tests.support.servers import (
    RunningServer,
    count_executions,
    free_port,
    read_executions,
    release_gate,
    start_http_server,
    wait_for_executions,
)

pytestmark = [pytest.mark.anyio]

SLOW_ITERATIONS = int(os.environ.get("CHAOS_ITERATIONS", "20"))


@dataclass(frozen=True)
class Variant:
    id: str
    upstream: str  # "pay" (dex_server) or "notes" (plain_server)
    tool: str  # the upstream's tool name, as executions.jsonl records it
    resendable: bool  # idempotent_write: taken over and sent again
    arguments: Callable[[str], dict[str, Any]]
    expected_text: Callable[[str], str]  # the first call's answer, for resendable variants

    @property
    def exposed(self) -> str:
        return f"{self.upstream}__{self.tool}"


VARIANTS = {
    v.id: v
    for v in (
        Variant("dex-hold_payment-non_idempotent", "pay", "hold_payment", False,
                lambda tag: {"gate": tag}, lambda tag: ""),
        Variant("plain-append_log-policy-non_idempotent", "notes", "append_log", False,
                lambda tag: {"line": tag}, lambda tag: ""),
        Variant("dex-hold_memo-idempotent", "pay", "hold_memo", True,
                lambda tag: {"gate": tag}, lambda tag: f"hold_memo released at gate {tag}"),
        Variant("plain-put_note-idempotent", "notes", "put_note", True,
                lambda tag: {"name": tag, "text": "v1"}, lambda tag: f"note {tag!r} saved"),
    )
}


@dataclass
class Rig:
    gateway: RunningGateway
    pay: RunningServer
    notes: RunningServer

    def state(self, variant: Variant) -> Path:
        return (self.pay if variant.upstream == "pay" else self.notes).state_dir


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    root = tmp_path_factory.mktemp("crash-loops")
    with start_http_server("dex_server", state_dir=root / "pay") as pay, \
            start_http_server("plain_server", state_dir=root / "notes") as notes:
        config = write_config(root, {"upstreams": [
            http_upstream("pay", pay.url),
            # plain_server has no fence of its own: only the gateway's fence can keep a
            # retried append_log from running twice.
            http_upstream("notes", notes.url, tool_policies={"append_log": {"effect": "non_idempotent_write"}}),
        ]})
        # A fixed port: the replica id (host:port) is the same after every restart.
        with start_gateway(config, port=free_port()) as gateway:
            yield Rig(gateway, pay, notes)


class Hold:
    """The upstream part of an in-flight call: opened before the call, let go after the restart."""

    def __init__(self, rig: Rig, variant: Variant, tag: str) -> None:
        self.state = rig.state(variant)
        self.tag = tag
        self.lock = NotesLock(self.state) if variant.upstream == "notes" else None

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
        else:
            release_gate(self.state, self.tag)


async def crash_iteration(rig: Rig, variant: Variant, n: int, tally: Tally) -> None:
    gateway = rig.gateway
    state = rig.state(variant)
    tag = f"{variant.upstream}-{n}-{uuid.uuid4().hex[:8]}"
    key = f"chaos/{variant.id}/{n}/{uuid.uuid4().hex[:8]}"
    arguments = variant.arguments(tag)
    t_start = time.monotonic()
    log_mark = len(gateway.stderr_lines)
    first: list[Any] = []

    async def first_call() -> None:
        try:
            async with sdk_client(gateway.url) as client:
                first.append(await client.call_tool(variant.exposed, arguments, meta={KEY: key}))
        except Exception as exc:  # noqa: BLE001 - the gateway dies under this call
            first.append(exc)

    hold = Hold(rig, variant, tag)
    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(first_call)
                # In flight at the upstream: its execution is recorded, the call is blocked.
                await anyio.to_thread.run_sync(
                    lambda: wait_for_executions(state, 1, tool=variant.tool, key=key, timeout=20))
                gateway.kill()
        assert len(first) == 1 and isinstance(first[0], BaseException), (
            f"the first call should have lost its gateway, got {first!r}")
        tally.first_call[type(first[0]).__name__] += 1

        gateway.start()
        hold.release()

        async with sdk_client(gateway.url) as client:
            with anyio.fail_after(40):
                t0 = time.monotonic()
                retry = await client.call_tool(variant.exposed, arguments, meta={KEY: key})
                tally.retry_seconds.append(time.monotonic() - t0)
                again = await client.call_tool(variant.exposed, arguments, meta={KEY: key})
    finally:
        hold.release()

    executions = read_executions(state, tool=variant.tool, key=key)
    fid = fence_id("anonymous", key)
    takeovers = sum(1 for line in gateway.stderr_lines[log_mark:] if fid in line and "took over" in line)
    tally.executions[len(executions)] += 1
    tally.retry[outcome_label(retry)] += 1
    tally.second_retry[outcome_label(again)] += 1
    tally.takeovers[takeovers] += 1
    tally.iteration_seconds.append(time.monotonic() - t_start)

    context = f"iteration {n}, key {key}: retry {text_of(retry)!r}, executions {len(executions)}"
    if variant.resendable:
        # Taken over, sent again with the same key, answered with the first call's result.
        assert retry.is_error is False, context
        assert OUTCOME not in meta_of(retry), context
        assert text_of(retry) == variant.expected_text(tag), context
        assert takeovers == 1, context + "\n" + "\n".join(gateway.stderr_lines[log_mark:])
        assert len(executions) == 2, context
        assert {e["idempotency_key"] for e in executions} == {key}, context
        # The takeover's answer is stored: the next retry is a replay, the upstream not called.
        assert again.is_error is False and meta_of(again).get(REPLAYED) is True, text_of(again)
        assert text_of(again) == text_of(retry)
    else:
        assert retry.is_error is True, context
        assert meta_of(retry).get(OUTCOME) == "unknown", context
        assert "unknown" in text_of(retry), context
        assert takeovers == 0, context
        assert len(executions) == 1, context
        # Unknown forever: never sent again with this key.
        assert again.is_error is True and meta_of(again).get(OUTCOME) == "unknown", text_of(again)
    # A restarted replica sees its own old claim as dead at once (no lease wait).
    assert tally.retry_seconds[-1] < 5, context
    # Nothing ran after the retries either (the first execution finished into a dead socket).
    assert count_executions(state, tool=variant.tool, key=key) == len(executions)


async def crash_loop(rig: Rig, variant: Variant, iterations: int) -> Tally:
    tally = Tally(f"{variant.id} x{iterations}")
    for n in range(iterations):
        await crash_iteration(rig, variant, n, tally)
    report(tally.line())
    return tally


@pytest.mark.timeout(120)
@pytest.mark.parametrize("variant_id", list(VARIANTS))
async def test_gateway_killed_with_write_in_flight_once(rig: Rig, variant_id: str) -> None:
    """One crash-restart-retry iteration of each variant (every CI run)."""
    await crash_loop(rig, VARIANTS[variant_id], 1)


@pytest.mark.slow
@pytest.mark.timeout(60 + 15 * SLOW_ITERATIONS)
@pytest.mark.parametrize("variant_id", list(VARIANTS))
async def test_gateway_crash_loop(rig: Rig, variant_id: str) -> None:
    """CHAOS_ITERATIONS (20) crash-restart-retry iterations of each variant, with a summary line."""
    variant = VARIANTS[variant_id]
    tally = await crash_loop(rig, variant, SLOW_ITERATIONS)
    assert tally.iterations == SLOW_ITERATIONS
    if variant.resendable:
        assert tally.executions == {2: SLOW_ITERATIONS}
        assert tally.retry == {"ok": SLOW_ITERATIONS}
    else:
        assert tally.executions == {1: SLOW_ITERATIONS}
        assert tally.retry == {"unknown": SLOW_ITERATIONS}
