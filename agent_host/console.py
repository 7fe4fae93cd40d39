"""The terminal side of the host: prints the loop's events, asks approvals and questions."""

from __future__ import annotations

import sys
from typing import TextIO

import anyio

from .approvals import ApprovalCard, Decision, argument_view
from .models.base import ModelResponse
from .loop import LoopEvents
from .store import ApprovalStatus, CallStatus, ToolCallRecord, TurnRecord

_MARKS = {
    CallStatus.SUCCEEDED: "ok",
    CallStatus.FAILED: "failed",
    CallStatus.OUTCOME_UNKNOWN: "outcome unknown",
    CallStatus.REJECTED: "rejected",
    CallStatus.SKIPPED: "skipped",
    CallStatus.NOT_RUN: "not run",
}


def _one_line(text: str, limit: int = 240) -> str:
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class Console(LoopEvents):
    """Prints to one stream; reads answers from stdin, one prompt at a time."""

    def __init__(self, out: TextIO | None = None, stdin: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._stdin = stdin or sys.stdin
        self._lock = anyio.Lock()
        self._mid_line = False

    def say(self, line: str = "") -> None:
        if self._mid_line:
            self.out.write("\n")
            self._mid_line = False
        self.out.write(line + "\n")
        self.out.flush()

    async def readline(self, prompt: str) -> str | None:
        """One line from stdin (None at end of input), without blocking the event loop."""
        self.out.write(prompt)
        self.out.flush()
        line = await anyio.to_thread.run_sync(self._stdin.readline, abandon_on_cancel=True)
        return None if line == "" else line.rstrip("\n")

    # LoopEvents ------------------------------------------------------------------------------

    async def text(self, delta: str) -> None:
        if not self._mid_line:
            self.out.write("assistant> ")
        self.out.write(delta)
        self.out.flush()
        self._mid_line = True

    async def model_response(self, turn: TurnRecord, response: ModelResponse) -> None:
        if self._mid_line:
            self.out.write("\n")
            self.out.flush()
            self._mid_line = False

    async def tool_started(self, record: ToolCallRecord) -> None:
        resumed = "" if record.status in (CallStatus.PENDING,) else f", resuming from {record.status.value}"
        self.say(f"  -> {record.name}({argument_view(record.arguments)})  [{record.effect}{resumed}]")

    async def tool_finished(self, record: ToolCallRecord, replayed: bool) -> None:
        mark = _MARKS.get(record.status, record.status.value)
        extra = " (replayed by the gateway's fence)" if replayed else ""
        self.say(f"  <- {record.name}: {mark}{extra}: {_one_line(record.result_text or '')}")

    async def approval_card(self, card: ApprovalCard) -> None:
        self.say(f"  +-- {card.title}")
        self.say(f"  |   {card.call}")
        self.say(f"  |   tool {card.tool} · {card.effect} · approval {card.id}")
        self.say("  |   " + "  ".join(f"[ {button} ]" for button in card.buttons))

    async def approval_decided(self, record: ToolCallRecord, decision: Decision) -> None:
        verb = "allowed" if decision.allowed else ("expired" if decision.status is ApprovalStatus.EXPIRED else "denied")
        by = f" by {decision.decided_by}" if decision.decided_by else ""
        self.say(f"  +-- {verb}{by}" + (f": {decision.reason}" if decision.reason else ""))

    # Prompts --------------------------------------------------------------------------------

    async def ask(self, card: ApprovalCard) -> tuple[bool, str | None]:
        """ApprovalPrompter: Allow / Deny on the card already printed."""
        async with self._lock:
            while True:
                line = await self.readline("  Allow or Deny? [a/d] ")
                if line is None:
                    self.say("  (no answer on stdin: waiting for the approvals API or the deadline)")
                    await anyio.sleep_forever()
                answer, _, reason = line.strip().partition(" ")
                if answer.lower() in ("a", "allow", "y", "yes"):
                    return True, None
                if answer.lower() in ("d", "deny", "n", "no"):
                    return False, reason.strip() or None

    async def ask_question(self, question: str, choices: list[str] | None, allows_free_text: bool) -> str | None:
        async with self._lock:
            self.say(f"  ? {question}")
            for number, choice in enumerate(choices or [], start=1):
                self.say(f"    {number}. {choice}")
            while True:
                line = await self.readline("  answer (empty to decline)> ")
                if line is None or not line.strip():
                    return None
                text = line.strip()
                if choices and text.isdigit() and 1 <= int(text) <= len(choices):
                    return choices[int(text) - 1]
                if not choices or allows_free_text or text in choices:
                    return text
                self.say("  please pick one of the choices")


class ConsoleQuestioner:
    """Adapts Console to the built-ins' Questioner protocol."""

    def __init__(self, console: Console) -> None:
        self._console = console

    async def ask(self, question: str, choices: list[str] | None, allows_free_text: bool) -> str | None:
        return await self._console.ask_question(question, choices, allows_free_text)
