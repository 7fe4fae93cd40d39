"""`dex-agent chat`: talk to the agent on a terminal.

While a turn runs, a line typed (when no approval or question waits for it) **steers** the turn:
it is added before the next model call, and waiting approvals and questions are cancelled.
**Ctrl-C cancels the turn** (a second Ctrl-C ends the host); Ctrl-C at the idle `you>` prompt ends
the host at once (exit 130). Commands: `/plan MESSAGE` starts a planning turn, `/approve`
executes the draft plan, `/cancel` cancels the running turn, `/exit` leaves. A plan approved on
the web page or through the HTTP API runs as soon as the prompt is idle.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import anyio

from ..domain.records import ControlKind, ControlRecord, PlanStatus, TurnMode, TurnRecord
from ..domain.safe_text import terminal_text
from ..gateway_client.connection import GatewayRefused
from ..host import Host, open_host
from ..terminal.console import Console
from .images import show_images, user_images
from .plan_flow import approve_from_terminal, execute_plan, pending_execution
from .run import report
from .settings import settings_changes

PLAN_POLL_SECONDS = 0.2
HELP = "type a line while a turn runs to steer it · Ctrl-C cancels the turn · /plan MSG · /approve · /exit"


@contextmanager
def ctrl_c_cancels(on_cancel: Callable[[], None]) -> Iterator[None]:
    """While the block runs, the first Ctrl-C calls `on_cancel` (in the event loop); a second one
    does what Ctrl-C did before (ends the host)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(signal.SIGINT)
    pressed = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal pressed
        if pressed:
            signal.signal(signal.SIGINT, previous)
            if callable(previous):
                previous(signum, frame)
                return
            raise KeyboardInterrupt
        pressed = True
        loop.call_soon_threadsafe(on_cancel)

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


async def _request(host: Host, kind: ControlKind, text: str | None) -> ControlRecord | None:
    return await host.store.request_control(host.session_id, kind, "terminal", text)


async def _steer_lines(host: Host) -> None:
    while (line := await host.console.background_line()) is not None:
        text = line.strip()
        if not text:
            continue
        if text == "/cancel":
            await _request(host, ControlKind.CANCEL, None)
            host.console.say("  >> cancelling the turn")
            continue
        if await _request(host, ControlKind.STEER, text) is None:
            host.console.give_back(line)  # the turn had just ended: the line is the next message
            return
        host.console.say(f"  >> steering the turn: {terminal_text(text, 200)}")


async def run_controlled(host: Host, start: Callable[[], Awaitable[TurnRecord | None]]) -> TurnRecord | None:
    """Run a turn with the terminal's controls: typed lines steer it, Ctrl-C cancels it."""
    async with anyio.create_task_group() as tg:
        if host.console.interactive:
            tg.start_soon(_steer_lines, host)

        def cancel() -> None:
            host.console.say("  >> Ctrl-C: cancelling the turn (Ctrl-C again ends the host)")
            tg.start_soon(_request, host, ControlKind.CANCEL, "Ctrl-C")

        with ctrl_c_cancels(cancel):
            turn = await start()
        tg.cancel_scope.cancel()
    return turn


async def _idle(host: Host) -> tuple[str | None, ControlRecord | None]:
    """The next typed line, or a plan execution approved elsewhere, whichever comes first."""
    got: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:

        async def read() -> None:
            got["line"] = await host.console.readline("you> ")
            tg.cancel_scope.cancel()

        async def plans() -> None:
            while (control := await pending_execution(host.store, host.session_id)) is None:
                await anyio.sleep(PLAN_POLL_SECONDS)
            got["plan"] = control
            tg.cancel_scope.cancel()

        tg.start_soon(read)
        tg.start_soon(plans)
    return got.get("line"), got.get("plan")


async def _draft_hint(host: Host) -> None:
    session = await host.store.get_session(host.session_id)
    if session is not None and session.plan_status is PlanStatus.DRAFT:
        host.console.show_plan(session.plan_revision, PlanStatus.DRAFT.value, session.plan)
        host.console.say("  /approve executes it (or Execute on the web page); any other message revises it")


async def _command(host: Host, text: str) -> TurnRecord | None | bool:
    """A chat command; False when `text` is none."""
    if text == "/approve":
        session = await host.store.get_session(host.session_id)
        control = await approve_from_terminal(host, session.plan_revision) if session else None
        if control is None:
            host.console.say("  no draft plan to approve")
            return None
        return await run_controlled(host, lambda: execute_plan(host, control))
    if text == "/cancel":
        host.console.say("  no turn is running")
        return None
    if text.startswith("/plan "):
        return await run_controlled(host, lambda: host.loop.run_turn(host.session_id, text[6:].strip(), TurnMode.PLANNING))
    return False


def chat(args: argparse.Namespace) -> int:
    async def go() -> int:
        console = Console()
        async with open_host(args, console, settings_changes(args)) as host:
            console.say(f"session {host.session_id} · gateway {args.gateway} · model {host.model}")
            console.say(HELP)
            # --image: shown with the first message typed.
            images = await user_images(host.images, args) if host.images else []
            if await host.store.unfinished_turn(host.session_id) is not None:
                report(console, await run_controlled(host, lambda: host.loop.resume(host.session_id)))
            while True:
                if isinstance(host.loop.gateway_error, GatewayRefused):
                    return 1  # no turn can reach the gateway's tools: fix the token first
                line, plan = await _idle(host)
                if plan is not None:
                    report(console, await run_controlled(host, lambda: execute_plan(host, plan)))
                    continue
                if line is None or line.strip() in ("/exit", "/quit"):
                    console.say()
                    return 0
                text = line.strip()
                if not text:
                    continue
                done = await _command(host, text)
                if done is False:
                    show_images(console, images)
                    attached, images = images, []
                    done = await run_controlled(host, lambda: host.loop.run_turn(host.session_id, text, images=attached))
                if isinstance(done, TurnRecord):
                    report(console, done)
                    await _draft_hint(host)

    return anyio.run(go)


__all__ = ["Console", "chat", "ctrl_c_cancels", "run_controlled"]
