"""`dex-agent run | resume | demo`: one turn (or the resume of an unfinished one) on the host.

A turn that fails prints one line on stderr and `run` exits 1 (also for a turn cancelled or
stopped by a spend limit).
"""

from __future__ import annotations

import argparse
import sys

import anyio

from ..domain.records import TurnMode, TurnRecord, TurnStatus
from ..host import open_host
from ..terminal.console import Console
from .images import show_images, user_images
from .plan_flow import after_planning_turn
from .settings import settings_changes


def report(console: Console, turn: TurnRecord | None) -> int:
    if turn is None:
        return 0
    console.say()
    if turn.status is not TurnStatus.COMPLETED:
        verb = {TurnStatus.CANCELLED: "was cancelled", TurnStatus.STOPPED: "stopped"}.get(turn.status, "failed")
        print(f"dex-agent: turn {turn.id} {verb}: {turn.error}", file=sys.stderr, flush=True)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    async def go() -> int:
        console = Console()
        async with open_host(args, console, settings_changes(args)) as host:
            console.say(f"session {host.session_id} · model {host.model}")
            code = 0
            unfinished = await host.store.unfinished_turn(host.session_id)
            if unfinished is not None:
                console.say(f"resuming {unfinished.id}: {unfinished.user_text}")
                code = report(console, await host.loop.resume(host.session_id))
            images = await user_images(host.images, args) if host.images else []
            if args.message:
                console.say(f"you> {args.message}")
                show_images(console, images)
                mode = TurnMode.PLANNING if getattr(args, "plan", False) else TurnMode.CHAT
                turn = await host.loop.run_turn(host.session_id, args.message, mode, images)
                code = report(console, turn)
                if code == 0 and mode is TurnMode.PLANNING:
                    code = report(console, await after_planning_turn(host, ask=True, timeout=args.approval_timeout))
            elif unfinished is None and args.command != "resume":
                raise ValueError("nothing to do: give a message, or --session with an unfinished turn")
            return code

    return anyio.run(go)
