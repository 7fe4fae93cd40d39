"""The state of a stateful session that another replica needs (gateway/front/session_state.py)."""

from __future__ import annotations

import mcp_types as types

from gateway.front.session_state import MAX_WATCHED_TASKS, SessionState

PARAMS = types.InitializeRequestParams.model_validate(
    {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}, by_name=False)


def test_the_watched_tasks_kept_are_the_newest_and_bounded() -> None:
    watched = {f"task-{i}": ("working", f"step {i}") for i in range(MAX_WATCHED_TASKS + 20)}
    state = SessionState.of("2025-11-25", PARAMS, None, set(), watched)
    assert list(state.tasks) == [f"task-{i}" for i in range(20, MAX_WATCHED_TASKS + 20)]
    again = SessionState.model_validate(state.model_dump(mode="json"))  # through the store's JSON
    assert again.tasks["task-20"] == ("working", "step 20")


def test_a_state_stored_before_tasks_were_kept_reads_as_none_watched() -> None:
    state = SessionState.model_validate({"version": "2025-11-25", "client": {"capabilities": {}}})
    assert state.tasks == {}
