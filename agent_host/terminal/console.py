"""The terminal side of the host: prints the loop's events, asks approvals and questions.

Everything that did not come from the host itself (the model's text, tool names, arguments and
results, upstream progress, an approver's reason) goes through `safe_text` first, so no control
sequence, bidi control or invisible character ever reaches the terminal as itself.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

import anyio

from ..approvals.gate import ApprovalCard, Decision, time_left
from ..domain.forms import FormError, check_form, field_value, form_fields
from ..domain.plan import shown_plan
from ..domain.records import ApprovalStatus, CallStatus, ToolCallRecord, TurnRecord, TurnStatus, UsageRecord
from ..domain.safe_text import arguments_view, terminal_text
from ..domain.spend import usage_line
from ..gateway_client.images import image_line
from ..models.base import ModelResponse
from ..turn.builtins import WRITE_TODOS
from ..turn.events import LoopEvents
from .line_reader import LineReader

RESULT_CHARS = 240

_MARKS = {
    CallStatus.SUCCEEDED: "ok",
    CallStatus.FAILED: "failed",
    CallStatus.OUTCOME_UNKNOWN: "outcome unknown",
    CallStatus.REJECTED: "rejected",
    CallStatus.SKIPPED: "skipped",
    CallStatus.NOT_RUN: "not run",
}


def _one_line(text: str, limit: int = RESULT_CHARS) -> str:
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return terminal_text(flat, limit)


def _call_line(record: ToolCallRecord) -> str:
    return f"{terminal_text(record.name, 128)}({arguments_view(record.arguments)})"


class Console(LoopEvents):
    """Prints to one stream; reads answers from stdin through one `LineReader`."""

    def __init__(self, out: TextIO | None = None, stdin: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        stdin = stdin or sys.stdin
        self._reader = LineReader(stdin)
        # On a terminal, a person types: a card or a question takes only lines typed after it
        # was shown. Piped input is a script of answers, taken in order.
        self._interactive = stdin.isatty()
        # True when the HTTP API (or the web page) can answer questions too: end of input on
        # stdin then waits for them instead of declining.
        self.others_can_answer = False
        self._lock = anyio.Lock()
        self._mid_line = False  # streamed assistant text without its line break yet
        self._prompt_open = False  # a prompt was written and no line was read for it (yet)

    def _end_line(self) -> None:
        if self._mid_line or self._prompt_open:
            self.out.write("\n")
            self._mid_line = self._prompt_open = False

    def say(self, line: str = "") -> None:
        self._end_line()
        self.out.write(line + "\n")
        self.out.flush()

    async def readline(self, prompt: str, fresh: bool = False) -> str | None:
        """One line from stdin (None at end of input); cancelling it loses no input. `fresh`:
        on a terminal, only a line typed after this prompt was shown."""
        shown = time.monotonic() if fresh and self._interactive else None
        self._end_line()
        self.out.write(prompt)
        self.out.flush()
        self._prompt_open = True
        line = await self._reader.readline(shown)
        # Typed lines end with the terminal's own echo of Enter; piped ones have none.
        self._prompt_open = not self._interactive
        return line

    @property
    def interactive(self) -> bool:
        return self._interactive

    async def background_line(self) -> str | None:
        """A line typed while no prompt waits (chat's steering); None at end of input."""
        return await self._reader.readline(background=True)

    def give_back(self, line: str) -> None:
        """A line `background_line` took that was not for it: the next prompt reads it."""
        self._reader.unread(line)

    # LoopEvents ------------------------------------------------------------------------------

    async def text(self, delta: str) -> None:
        if not self._mid_line:
            self._end_line()
            self.out.write("assistant> ")
        self.out.write(terminal_text(delta, keep_newlines=True))
        self.out.flush()
        self._mid_line = True

    async def model_response(self, turn: TurnRecord, response: ModelResponse) -> None:
        if self._mid_line:
            self._end_line()
            self.out.flush()

    async def tool_started(self, record: ToolCallRecord) -> None:
        resumed = "" if record.status in (CallStatus.PENDING,) else f", resuming from {record.status.value}"
        self.say(f"  -> {_call_line(record)}  [{record.effect}{resumed}]")

    async def tool_progress(self, record: ToolCallRecord, progress: float, total: float | None, message: str | None) -> None:
        amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
        text = f": {terminal_text(message, 160)}" if message else ""
        self.say(f"  .. {terminal_text(record.name, 128)} {amount}{text}")

    async def tool_finished(self, record: ToolCallRecord, replayed: bool) -> None:
        mark = _MARKS.get(record.status, record.status.value)
        extra = " (replayed by the gateway's fence)" if replayed else ""
        if record.cancel_reason is not None:
            extra += f" ({record.cancel_reason.value})"
        self.say(f"  <- {terminal_text(record.name, 128)}: {mark}{extra}: {_one_line(record.result_text or '')}")
        for n, image in enumerate(record.images, 1):
            self.say(f"     {image_line(n, image)}")
        if record.name == WRITE_TODOS and record.status is CallStatus.SUCCEEDED:
            self.show_plan(_revision(record.result_text), None, record.arguments.get("todos"))

    def show_plan(self, revision: int, status: str | None, todos: list[dict[str, object]] | None) -> None:
        for line in shown_plan(revision, status, todos):
            self.say(f"  {line}")

    async def steered(self, turn: TurnRecord, messages: list[str]) -> None:
        for message in messages:
            self.say(f"  >> steered: {terminal_text(message, 500)}")

    async def compacted(self, turn: TurnRecord, replaced_messages: int, replaced_tokens: int) -> None:
        self.say(f"  .. compacted {replaced_messages} earlier messages (~{replaced_tokens:,} tokens) into a summary")

    async def turn_finished(self, turn: TurnRecord, turn_usage: UsageRecord, session_usage: UsageRecord) -> None:
        if turn.status is TurnStatus.CANCELLED:
            self.say(f"  turn {turn.id} cancelled: {terminal_text(turn.error or '', 300)}")
        elif turn.status is TurnStatus.STOPPED:
            self.say(f"  turn {turn.id} stopped: {terminal_text(turn.error or '', 300)}")
        self.say(f"  {usage_line(turn_usage, session_usage)}")

    async def tool_refused(self, record: ToolCallRecord) -> None:
        mark = _MARKS.get(record.status, record.status.value)
        self.say(f"  x  {_call_line(record)}: {mark}: {_one_line(record.result_text or '')}")

    async def approval_card(self, card: ApprovalCard) -> None:
        self.say(f"  +-- {card.title}")
        self.say(f"  |   {card.call}")
        self.say(f"  |   tool {card.tool} · {card.effect} · approval {card.id}")
        left = time_left(card.deadline, time.time())
        if left is not None:
            until = time.strftime("%H:%M:%S", time.localtime(card.deadline))
            self.say(f"  |   {left} to decide (until {until}; then it is rejected)")
        self.say("  |   " + "  ".join(f"[ {button} ]" for button in card.buttons))

    async def approval_decided(self, record: ToolCallRecord, decision: Decision) -> None:
        verb = "allowed" if decision.allowed else ("expired" if decision.status is ApprovalStatus.EXPIRED else "denied")
        by = f" by {terminal_text(decision.decided_by, 64)}" if decision.decided_by else ""
        reason = f": {terminal_text(decision.reason, RESULT_CHARS)}" if decision.reason else ""
        self.say(f"  +-- {verb}{by}{reason}")

    # Prompts --------------------------------------------------------------------------------

    async def ask(self, card: ApprovalCard) -> tuple[bool, str | None]:
        """ApprovalPrompter: Allow / Deny on the card already printed; cancelled when the API
        or the deadline decides first."""
        async with self._lock:
            while True:
                line = await self.readline("  Allow or Deny? [a/d] ", fresh=True)
                if line is None:
                    self.say("  (no answer on stdin: waiting for the approvals API or the deadline)")
                    await anyio.sleep_forever()
                    continue
                answer, _, reason = line.strip().partition(" ")
                if answer.lower() in ("a", "allow", "y", "yes"):
                    return True, None
                if answer.lower() in ("d", "deny", "n", "no"):
                    return False, reason.strip() or None

    async def ask_question(self, question: str, choices: list[str] | None, allows_free_text: bool) -> str | None:
        async with self._lock:
            self.say(f"  ? {terminal_text(question, 1000)}")
            for number, choice in enumerate(choices or [], start=1):
                self.say(f"    {number}. {terminal_text(choice, 200)}")
            while True:
                line = await self.readline("  answer (empty to decline)> ", fresh=True)
                if line is None and self.others_can_answer:
                    self.say("  (no answer on stdin: waiting for the web page / HTTP API or the deadline)")
                    await anyio.sleep_forever()
                if line is None or not line.strip():
                    return None
                text = line.strip()
                if choices and text.isdigit() and 1 <= int(text) <= len(choices):
                    return choices[int(text) - 1]
                if not choices or allows_free_text or text in choices:
                    return text
                self.say("  please pick one of the choices")


    async def ask_form(self, question: str, schema: dict[str, Any]) -> dict[str, Any] | None:
        """An upstream's form, one field at a time, each value checked against its part of the
        schema (asked again when it does not fit): an empty line skips an optional field and
        declines the form on a required one."""
        fields = form_fields(schema)
        async with self._lock:
            self.say(f"  ? {terminal_text(question, 1000)}")
            self.say("    (a form: an empty line skips an optional field, and declines on a required one)")
            content: dict[str, Any] = {}
            for field in fields:
                label = terminal_text(field.title or field.name, 200)
                if field.description:
                    self.say(f"    {label}: {terminal_text(field.description, 500)}")
                for number, choice in enumerate(field.enum_titles or field.enum or [], start=1):
                    self.say(f"    {number}. {terminal_text(choice, 200)}")
                kind = {"boolean": "yes/no", "array": "numbers, comma-separated"}.get(field.type, field.type)
                while True:
                    line = await self.readline(f"  {label} ({kind}{'' if field.required else ', optional'})> ", fresh=True)
                    if line is None and self.others_can_answer:
                        self.say("  (no answer on stdin: waiting for the web page / HTTP API or the deadline)")
                        await anyio.sleep_forever()
                    if line is None or not line.strip():
                        if field.required or line is None:
                            return None
                        break
                    try:
                        value = field_value(field, line)
                    except FormError as exc:
                        self.say(f"  {terminal_text(str(exc), 300)}")
                        continue
                    one = {"type": "object", "properties": {field.name: schema["properties"][field.name]}}
                    if (problem := check_form(one, {field.name: value})) is not None:
                        self.say(f"  {terminal_text(problem, 300)}")
                        continue
                    content[field.name] = value
                    break
            if not any(f.required for f in fields):
                # Nothing had to be typed (an empty form: a yes/no question, such as the gateway's
                # approval of a call): sending it is a decision of its own, never a default.
                line = await self.readline("  send this answer (accept)? [y/N]> ", fresh=True)
                if line is None and self.others_can_answer:
                    self.say("  (no answer on stdin: waiting for the web page / HTTP API or the deadline)")
                    await anyio.sleep_forever()
                if line is None or line.strip().lower() not in ("y", "yes"):
                    return None
            return content


def _revision(result_text: str | None) -> int:
    try:
        return int(json.loads(result_text or "{}").get("revision", 0))
    except (ValueError, AttributeError):
        return 0


class ConsoleQuestioner:
    """Adapts Console to the built-ins' Questioner protocol."""

    def __init__(self, console: Console) -> None:
        self._console = console

    async def ask(self, question: str, choices: list[str] | None, allows_free_text: bool) -> str | None:
        return await self._console.ask_question(question, choices, allows_free_text)

    async def ask_form(self, question: str, schema: dict[str, Any]) -> dict[str, Any] | None:
        return await self._console.ask_form(question, schema)
