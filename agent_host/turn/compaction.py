"""Compaction: keep every model request under a share of the model's context window.

Before each model call the request is estimated (`history.request_tokens`, 3 bytes a token).
Past `compaction_trigger_ratio` (0.85) of `context_window_tokens`, the oldest messages are
summarised by the model into one message, keeping the newest ones that fit in
`compaction_retained_ratio` (0.3) of the window. The cut falls only between stored messages, so
a tool call is never separated from its result, and the running turn's newest message is always
kept. Tool results are kept by reference: the summary request shows each one cut short and
named by its call id, the full text stays in the store, and nothing is run again. The summary,
the message seqs it replaced and the call ids it refers to are stored (`compactions`); the
replaced messages stay stored too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..domain import texts
from ..domain.records import TurnRecord
from ..domain.settings import SessionSettings
from ..models.base import Message, ModelClient, ModelRequest, ToolSpec
from ..store.session_store import SessionStore
from .events import LoopEvents
from .history import History, Unit, estimate_tokens, load_history, message_tokens, request_tokens
from .turn_control import Section, TurnControl

SUMMARY_INSTRUCTIONS = (
    "You condense an agent's conversation so it can continue with less context. Write a faithful "
    "summary of the transcript below: the user's requests and decisions, what the agent did and "
    "found, every tool call that wrote something and its outcome (say plainly when an outcome was "
    "unknown), open questions and the current plan. Refer to tool results by their call id, e.g. "
    "[result call_3_0]: they are kept in the session store and are never run again. Answer with "
    "the summary only."
)
RESULT_CHARS_IN_SUMMARY = 1000
SUMMARY_OUTPUT_RESERVE_TOKENS = 1024


@dataclass(frozen=True)
class Request:
    """How the loop wants its request built (everything but the messages)."""

    turn: TurnRecord
    note: str | None
    instructions: str
    tools: list[ToolSpec]
    temperature: float | None
    max_output_tokens: int | None

    def of(self, history: History) -> ModelRequest:
        return history.request(
            self.turn.id, self.note, self.instructions, self.tools, model_call=self.turn.model_calls + 1,
            temperature=self.temperature, max_output_tokens=self.max_output_tokens,
        )


def select_cutoff(history: History, fixed_tokens: int, retained_budget: int) -> int:
    """How many of the oldest units to summarise (0: none): the fewest that leave the rest within
    the retained budget, always keeping the newest unit."""
    kept = fixed_tokens
    keep_from = len(history.units)
    for index in range(len(history.units) - 1, -1, -1):
        tokens = history.units[index].tokens
        if keep_from < len(history.units) and kept + tokens > retained_budget:
            break
        kept += tokens
        keep_from = index
    return keep_from


def _transcript_lines(previous: str | None, units: list[Unit]) -> list[str]:
    lines = [f"{texts.CONTEXT_SUMMARY_HEADER}\n{previous}"] if previous else []
    for unit in units:
        for message in unit.messages:
            if message.role == "tool":
                result = message.text
                if len(result) > RESULT_CHARS_IN_SUMMARY:
                    result = result[:RESULT_CHARS_IN_SUMMARY] + f" …(cut; the full result is kept as {message.tool_call_id})"
                lines.append(f"[result {message.tool_call_id}] {message.tool_name}: {result}")
                continue
            if message.text:
                lines.append(f"{message.role}: {message.text}")
            for call in message.tool_calls:
                lines.append(f"assistant called {call.name} ({call.id}) with {texts.as_json(call.arguments)}")
    return lines


def summary_prompt(previous: str | None, units: list[Unit], budget_tokens: int) -> str:
    """The transcript as one prompt that fits the budget: the oldest lines left out, and said so."""
    lines = _transcript_lines(previous, units)
    omitted = 0
    while len(lines) > 1 and estimate_tokens("\n".join(lines)) > budget_tokens:
        lines.pop(0)
        omitted += 1
    head = [f"[{omitted} earlier lines of the transcript were left out to fit the context window]"] if omitted else []
    return "Transcript to summarise:\n" + "\n".join(head + lines)


class Compactor:
    def __init__(self, store: SessionStore, events: LoopEvents) -> None:
        self._store = store
        self._events = events

    async def request(
        self, wanted: Request, settings: SessionSettings, model: ModelClient, control: TurnControl
    ) -> ModelRequest | None:
        """The model request, compacting the history first when it is too large; None when the
        turn was cancelled during the summary call."""
        history = await load_history(self._store, wanted.turn.session_id)
        request = wanted.of(history)
        window = settings.context_window
        if request_tokens(request) <= settings.trigger_ratio * window:
            return request
        fixed = request_tokens(request) - sum(unit.tokens for unit in history.units)
        cut = select_cutoff(history, fixed, int(settings.retained_ratio * window))
        if cut == 0:
            return request  # only the newest message is left: nothing to summarise
        summarised = history.units[:cut]
        budget = window - (settings.max_tokens or SUMMARY_OUTPUT_RESERVE_TOKENS) - estimate_tokens(SUMMARY_INSTRUCTIONS)
        previous = history.compaction.summary if history.compaction else None
        prompt = summary_prompt(previous, summarised, budget)
        summary_request = ModelRequest(
            instructions=SUMMARY_INSTRUCTIONS, messages=[Message(role="user", text=prompt)], tools=[],
            model_call=wanted.turn.model_calls + 1, purpose="summary", temperature=settings.temperature,
            max_output_tokens=settings.max_tokens,
        )
        with control.scope(Section.MODEL) as scope:
            response = await model.complete(summary_request)
        if scope.cancelled_caught:
            return None
        replaced = [unit.seq for unit in summarised]
        call_ids = [call_id for unit in summarised for call_id in unit.call_ids]
        usage = response.usage
        cost = settings.cost(usage.input_tokens, usage.output_tokens)
        await self._store.record_compaction(
            wanted.turn.session_id, wanted.turn.id, response.text.strip(), replaced, call_ids,
            (model.name, usage.input_tokens, usage.output_tokens, cost),
        )
        await self._events.compacted(wanted.turn, len(replaced), sum(message_tokens(m) for u in summarised for m in u.messages))
        return wanted.of(await load_history(self._store, wanted.turn.session_id))
