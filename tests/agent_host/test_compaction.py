"""Compaction with a scripted model: over 50 turns every request stays under the context window,
the summaries and what they replaced are stored, and no tool is ever run again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_host.domain import texts
from agent_host.turn.compaction import SUMMARY_INSTRUCTIONS, select_cutoff, summary_prompt
from agent_host.turn.history import History, Unit, estimate_tokens, load_history, request_tokens
from agent_host.models.base import Message, ModelRequest, ModelResponse
from agent_host.models.scripted import call
from gateway.conventions.keys import Effect
from tests.agent_host.loop_support import Tools, host, last_user, tool

pytestmark = pytest.mark.anyio

WINDOW = 3000  # tokens (3 bytes each): a small model, so 50 turns need several compactions
TURNS = 50


async def test_request_sizes_stay_bounded_over_50_turns(tmp_path: Path) -> None:
    sizes: list[tuple[str, int]] = []
    summaries: list[ModelRequest] = []

    def script(request: ModelRequest) -> ModelResponse:
        sizes.append((request.purpose, request_tokens(request)))
        if request.purpose == "summary":
            summaries.append(request)
            refs = sorted(set(part.split("]")[0] for part in request.messages[0].text.split("[result ")[1:]))
            return ModelResponse(text=f"SUMMARY of {len(refs)} results: " + ", ".join(refs[-5:]))
        if request.model_call == 1:
            return ModelResponse(text="Looking it up.", tool_calls=[call(request, 0, "lookup", text=last_user(request))])
        return ModelResponse(text="Answer: " + "the order is on its way. " * 8)

    tools = Tools([tool("lookup", Effect.READ)], results={"lookup": "order details: " + "line item; " * 60})
    settings = {"context_window_tokens": WINDOW}
    async with host(tmp_path, script, tools, settings=settings) as h:
        for n in range(TURNS):
            turn = await h.loop.run_turn("s1", f"where is order {n}?")
            assert turn.status.value == "completed", turn.error
        compactions = await h.store.compactions("s1")
        history = await load_history(h.store, "s1")
        usage = await h.store.usage_totals("s1")

    turn_sizes = [size for purpose, size in sizes if purpose == "turn"]
    assert len(turn_sizes) == 2 * TURNS
    assert max(size for _, size in sizes) <= WINDOW  # every request, the summary requests included
    # Without compaction the last request would have been far larger than the window.
    assert sum(estimate_tokens(tools.results["lookup"]) for _ in range(TURNS)) > 3 * WINDOW
    assert len(compactions) >= 3 and h.seen.compactions == len(compactions)
    # Each summary is stored with exactly what it replaced: message seqs in order, no overlap,
    # and the calls whose results it refers to by id.
    replaced = [seq for c in compactions for seq in c.replaced]
    assert replaced == sorted(replaced) and len(replaced) == len(set(replaced))
    assert all(c.tool_call_ids and c.summary.startswith("SUMMARY of") for c in compactions)
    # Tool results kept by reference, never re-executed: one lookup per turn, no more.
    assert tools.sent == ["lookup"] * TURNS
    # A summary request offers no tools, and names results by their call id.
    assert all(not r.tools and r.instructions == SUMMARY_INSTRUCTIONS for r in summaries)
    assert "[result call_1_0" in summaries[0].messages[0].text
    # The model sees the latest summary first, then what came after it.
    assert history.compaction is not None and history.compaction.id == compactions[-1].id
    messages = history.messages("turn-50", None)
    assert messages[0].text.startswith(texts.CONTEXT_SUMMARY_HEADER)
    # The usage of the summary calls is kept too.
    assert usage.model_calls == 2 * TURNS + len(compactions)


def test_the_cut_never_takes_the_newest_message_and_keeps_what_fits() -> None:
    units = [Unit(seq, "t", [Message(role="user", text="x" * 300)]) for seq in range(1, 6)]
    history = History(None, units)
    per_unit = units[0].tokens
    assert select_cutoff(history, 0, 2 * per_unit) == 3  # the two newest fit
    assert select_cutoff(history, 0, 1) == 4  # the newest is always kept
    assert select_cutoff(history, 0, 100 * per_unit) == 0  # everything fits: nothing to summarise


def test_the_summary_prompt_leaves_out_the_oldest_lines_and_says_so() -> None:
    units = [
        Unit(seq, "t", [Message(role="assistant", text=f"step {seq} " + "y" * 200)]) for seq in range(1, 30)
    ]
    prompt = summary_prompt("an earlier summary", units, budget_tokens=400)
    assert estimate_tokens(prompt) <= 450
    assert "earlier lines of the transcript were left out" in prompt
    assert "step 29" in prompt and "step 1 " not in prompt


def test_long_tool_results_are_cut_and_referred_to_by_call_id() -> None:
    unit = Unit(1, "t", [
        Message(role="assistant", tool_calls=[call(ModelRequest(instructions="", messages=[], tools=[]), 0, "big")]),
        Message(role="tool", text="z" * 5000, tool_call_id="call_1_0", tool_name="big"),
    ], ["call_1_0"])
    prompt = summary_prompt(None, [unit], budget_tokens=10_000)
    assert "[result call_1_0] big: " in prompt and "the full result is kept as call_1_0" in prompt
    assert len(prompt) < 2000
    assert json.dumps({}) in prompt  # the call's arguments, as JSON
