"""Separate OS processes sharing one SQLite file or one PostgreSQL schema, and SIGKILL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import anyio
import pytest

from gateway.conventions.keys import Effect
from gateway.fences import FenceUnknown, Fences, Owner, Proceed, Replay, UnknownReason, open_fence_store

WORKER = Path(__file__).with_name("_fence_worker.py")


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        raise AssertionError(f"worker did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")


def sigkill(proc: subprocess.Popen[str]) -> list[str]:
    """SIGKILL the worker; every line it printed. Read through the same buffered file as
    `wait_ready` (communicate() reads the pipe itself and would miss what that readline buffered)."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout is not None
    with proc.stdout:
        out = proc.stdout.read()
    for pipe in (proc.stdin, proc.stderr):
        if pipe is not None:
            pipe.close()
    return out.splitlines()


def test_two_processes_same_keys_one_execution_each(durable_url: str) -> None:
    nkeys = 300
    procs = [spawn("hammer", durable_url, f"replica-{n}", str(nkeys)) for n in (1, 2)]
    for proc in procs:
        wait_ready(proc)  # its store is open
    for proc in procs:  # both start together
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    by_key: dict[str, list[dict[str, str]]] = defaultdict(list)
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        for row in json.loads(out.strip().splitlines()[-1]):
            by_key[row["key"]].append(row)
    assert len(by_key) == nkeys
    winners: Counter[str] = Counter()
    for key, rows in by_key.items():
        kinds = sorted(r["kind"] for r in rows)
        assert kinds == ["proceed", "replay"], (key, rows)
        # The replay is the other process's answer, word for word.
        assert rows[0]["text"] == rows[1]["text"]
        winners[rows[0]["text"].rsplit(" ", 1)[1]] += 1
    # Each process executed some keys and replayed the other's: they really raced.
    assert set(winners) == {"replica-1", "replica-2"}, winners


@pytest.mark.anyio
async def test_sigkill_pending_dead_at_once_and_done_kept(durable_url: str) -> None:
    proc = spawn("claim-and-hang", durable_url, "r1")
    wait_ready(proc)
    sigkill(proc)
    async with open_fence_store(durable_url) as store:
        # Another replica only has the lease to go by (60 s): still looks alive.
        other = Fences(store, Owner.fresh("r2"), wait_seconds=0.0)
        r = await other.begin(principal="p", key="pend-other", tool="t", arguments=None, effect=Effect.NON_IDEMPOTENT_WRITE)
        assert isinstance(r, FenceUnknown) and r.reason is UnknownReason.WAIT_TIMEOUT
        # The restarted r1 (new boot id) knows at once: no waiting for the lease.
        restarted = Fences(store, Owner.fresh("r1"), wait_seconds=0.0)

        async def begin(key: str, effect: Effect) -> object:
            return await restarted.begin(principal="p", key=key, tool="t", arguments=None, effect=effect)

        done = await begin("done", Effect.NON_IDEMPOTENT_WRITE)
        assert isinstance(done, Replay)
        assert done.answer["content"] == [{"type": "text", "text": "done executed by r1"}]
        idem = await begin("pend-idem", Effect.IDEMPOTENT_WRITE)
        assert isinstance(idem, Proceed) and idem.takeover
        for key, effect in [("pend-non", Effect.NON_IDEMPOTENT_WRITE), ("pend-unclassified", Effect.UNCLASSIFIED)]:
            out = await begin(key, effect)
            assert isinstance(out, FenceUnknown) and out.reason is UnknownReason.OWNER_DIED


async def _check_after_kill(url: str, lines: list[str]) -> int:
    # The worker claims k0, k1, ... one at a time, printing "sending <key>" once claimed and
    # "done <key>" once its answer is stored. The last line may be cut short by the kill: only
    # whole "<verb> <key>" lines count.
    words = [line.split() for line in lines]
    sent = [w[1] for w in words if len(w) >= 2 and w[0] == "sending"]
    done = [w[1] for w in words if len(w) >= 2 and w[0] == "done"]
    assert sent == [f"k{i}" for i in range(len(sent))], sent
    assert done == sent[: len(done)] and len(sent) - len(done) <= 1, (sent, done)
    async with open_fence_store(url) as store:
        # The same replica restarted (new boot id): its old claims are dead at once.
        f = Fences(store, Owner.fresh("r1"), wait_seconds=0.0)
        for i in range(len(sent) + 2):
            key = f"k{i}"
            r = await f.begin(principal="p", key=key, tool="t", arguments=None, effect=Effect.NON_IDEMPOTENT_WRITE)
            owner_died = isinstance(r, FenceUnknown) and r.reason is UnknownReason.OWNER_DIED
            fresh = isinstance(r, Proceed) and not r.takeover
            if key in done:
                # No finished answer is lost.
                assert isinstance(r, Replay), (key, r)
            elif key in sent:
                # Sent: its answer was stored just before the kill (a replay), or it is unknown;
                # never sent a second time.
                assert isinstance(r, Replay) or owner_died, (key, r)
            elif i == len(sent):
                # Maybe claimed (its "sending" line lost to the kill): unknown; else a new call.
                assert owner_died or fresh, (key, r)
            else:
                # Never claimed: a new call.
                assert fresh, (key, r)
            if isinstance(r, Replay):
                assert r.answer["content"][0]["text"] == f"{key} executed by r1"
    return len(done)


def _crash_loop(url: str, rounds: int) -> None:
    for _ in range(rounds):
        proc = spawn("loop", url, "r1")
        wait_ready(proc)
        time.sleep(random.uniform(0.05, 0.4))
        lines = sigkill(proc)
        anyio.run(_check_after_kill, url, lines)
        # Next round starts from a clean key space.
        anyio.run(_wipe, url)


async def _wipe(url: str) -> None:
    async with open_fence_store(url) as store:
        await store.sweep(float("inf"))


def test_sigkill_at_random_instants_loses_nothing(durable_url: str) -> None:
    _crash_loop(durable_url, rounds=3)


@pytest.mark.slow
def test_sigkill_crash_loop_long(durable_url: str) -> None:
    _crash_loop(durable_url, rounds=30)


@pytest.mark.anyio
async def test_sigkill_before_a_shared_commit_runs_nothing_twice_loses_nothing(pg_url: str) -> None:
    """PostgreSQL group commit: 16 callers' finishes share commits; the process is SIGKILLed while
    a shared commit of several answers is about to be sent. Every answer reported stored replays;
    every call in the killed commit (and any other sent, unanswered one) is unknown, never sent
    again; keys never claimed start fresh."""
    proc = spawn("group-loop", pg_url, "r1")
    wait_ready(proc)
    assert proc.stdout is not None
    group: list[str] = []
    lines: list[str] = []
    with anyio.fail_after(30):
        while not group:
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
            assert line, proc.stderr.read() if proc.stderr else "worker ended"
            lines.append(line)
            if line.startswith("group "):
                group = line.split()[1:]
    lines += sigkill(proc)
    words = [line.split() for line in lines]
    sent = {w[2]: w[1] for w in words if len(w) == 3 and w[0] == "sending"}  # fence id -> key
    done = {w[1] for w in words if len(w) == 2 and w[0] == "done"}
    assert len(group) > 1 and set(group) <= set(sent), (group, sent)
    in_group = {sent[fid] for fid in group}
    assert not in_group & done
    async with open_fence_store(pg_url) as store:
        f = Fences(store, Owner.fresh("r1"), wait_seconds=0.0)

        async def begin(key: str) -> object:
            return await f.begin(principal="p", key=key, tool="t", arguments=None, effect=Effect.NON_IDEMPOTENT_WRITE)

        for key in sorted(set(sent.values())):
            r = await begin(key)
            if key in done:
                assert isinstance(r, Replay), (key, r)  # nothing lost
                assert r.answer["content"][0]["text"] == f"{key} executed by r1"
            elif key in in_group:
                # Its shared commit never reached the database: the outcome is unknown to the
                # fence, and the call is never sent again.
                assert isinstance(r, FenceUnknown) and r.reason is UnknownReason.OWNER_DIED, (key, r)
            else:
                assert isinstance(r, Replay) or (isinstance(r, FenceUnknown) and r.reason is UnknownReason.OWNER_DIED), (key, r)
        # A key no caller reached is new.
        assert isinstance(await begin("k0-9999"), Proceed)
