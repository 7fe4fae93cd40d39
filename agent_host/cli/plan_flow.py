"""After a planning turn: the draft plan waits for the user's approval of that revision — on the
terminal, through the HTTP API or on the web page, whichever comes first — and an executing
turn then runs it. Approvals are `execute_plan` controls in the session store, recorded only for
the current draft revision while no turn runs, so an approval of a revision that a later
planning turn replaced never runs."""

from __future__ import annotations

import time
from typing import Literal

from ..approvals.decisions import first_decision
from ..domain import texts
from ..domain.records import ControlKind, ControlRecord, PlanStatus, TurnMode, TurnRecord
from ..host import Host
from ..store.session_store import SessionStore

POLL_SECONDS = 0.2


async def pending_execution(store: SessionStore, session_id: str) -> ControlRecord | None:
    """An approval of the current draft waiting to run (others are settled as stale)."""
    session = await store.get_session(session_id)
    controls = [c for c in await store.pending_controls(session_id, None) if c.kind is ControlKind.EXECUTE_PLAN]
    if session is None or not controls:
        return None
    current = [c for c in controls if session.plan_status is PlanStatus.DRAFT and c.revision == session.plan_revision]
    stale = [c for c in controls if c not in current[:1]]
    if stale:
        await store.mark_applied(stale)
    return current[0] if current else None


async def execute_plan(host: Host, control: ControlRecord) -> TurnRecord:
    await host.store.mark_applied([control])
    await host.store.set_plan_status(host.session_id, PlanStatus.ACTIVE)
    host.console.say(f"executing plan revision {control.revision} (approved by {control.source})")
    return await host.loop.run_turn(host.session_id, texts.plan_approved(control.revision or 0), TurnMode.EXECUTING)


async def approve_from_terminal(host: Host, revision: int) -> ControlRecord | None:
    return await host.store.request_control(host.session_id, ControlKind.EXECUTE_PLAN, "terminal", revision=revision)


async def after_planning_turn(host: Host, ask: bool, timeout: float | None = None) -> TurnRecord | None:
    """Show the draft and wait for its approval (`ask`: also on the terminal); then execute it."""
    session = await host.store.get_session(host.session_id)
    if session is None or session.plan_status is not PlanStatus.DRAFT:
        host.console.say("no draft plan was written")
        return None
    revision = session.plan_revision
    host.console.show_plan(revision, PlanStatus.DRAFT.value, session.plan)
    if host.mode == "auto":
        control = await host.store.request_control(host.session_id, ControlKind.EXECUTE_PLAN, "auto (--approve auto)", revision=revision)
        return None if control is None else await execute_plan(host, control)
    declined = False

    async def prompt() -> None:
        nonlocal declined
        while True:
            line = await host.console.readline(f"  Execute plan revision {revision}? [y/n] ", fresh=True)
            if line is None:
                host.console.say("  (no answer on stdin: waiting for the web page / HTTP API)")
                return
            answer = line.strip().lower()
            if answer in ("y", "yes"):
                await approve_from_terminal(host, revision)
                return
            if answer in ("n", "no"):
                declined = True
                return

    async def read() -> ControlRecord | Literal[False] | None:
        if declined:
            return False
        return await pending_execution(host.store, host.session_id)

    async def expire() -> Literal[False]:
        return False

    deadline = None if timeout is None else time.time() + timeout
    terminal = prompt if ask and host.mode == "prompt" else None
    decided: ControlRecord | Literal[False] = await first_decision(read, expire, deadline, time.time, POLL_SECONDS, terminal)
    if decided is False:
        host.console.say(f"plan revision {revision} stays a draft: approve it later, or send feedback to revise it")
        return None
    return await execute_plan(host, decided)
