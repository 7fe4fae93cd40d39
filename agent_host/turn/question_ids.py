"""The ids of session questions: deterministic, so a question asked again after a restart of the
host is the same question (and finds its answer).

* the model's `ask_user`: from the tool call's id (`question_id`);
* an upstream's form during a call: `<call id>-input-<n>`, the n-th question of the call;
* a question of a 2026-07-28 `input_required` round (`round_question_id`): the question already
  kept for the same round (requestState) and input request, else the call's next `-input-<n>`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..domain.cards import approval_id
from ..domain.records import InputRound, QuestionRecord, ToolCallRecord


def question_id(session_id: str, tool_call_id: str) -> str:
    """Deterministic, like approval ids: the same call asked again after a restart keeps its id."""
    return approval_id(session_id, tool_call_id)


def input_question_id(record: ToolCallRecord, n: int) -> str:
    """The n-th (from 1) upstream question of a tool call."""
    return question_id(record.session_id, f"{record.id}-input-{n}")


def round_question_id(record: ToolCallRecord, asked: Sequence[QuestionRecord], kept: InputRound,
                      given: Collection[str] = ()) -> str:
    """The question of `kept`'s input request: the one `asked` already holds for that round and
    request, else the call's next `-input-<n>` (`asked`: the call's questions so far; `given`:
    ids already given to questions not stored yet, which are taken too)."""
    for question in asked:
        found = question.input_round
        if found is not None and found.request_state == kept.request_state and found.key == kept.key:
            return question.id
    taken = {q.id for q in asked} | set(given)
    n = len(asked) + 1
    while input_question_id(record, n) in taken:
        n += 1
    return input_question_id(record, n)
