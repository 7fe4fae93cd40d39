"""Plans and plan mode: the note that shows the model the session's plan, and the plan as the
terminal shows it.

The note is user text put before the running turn's messages in every model call, so the model
always sees the latest plan (as the seed's `buildPlanNote` does). A planning turn offers only
`write_todos` and writes a *draft*; the user approves that revision (terminal, HTTP API or web
page) before an *executing* turn runs it.
"""

from __future__ import annotations

from typing import Any

from .records import PlanStatus, SessionRecord, TurnMode
from .safe_text import terminal_text

PLANNING_NOTE = (
    "[Dex] This is a planning turn. Write the plan with write_todos (each task pending) and do not "
    "carry it out: no other tool is available, and the user reviews the draft and approves it "
    "before it runs. If something is unclear, ask in your answer instead. A message about an "
    "existing draft is feedback: revise the plan with write_todos."
)
_STATUS_NOTES = {
    PlanStatus.DRAFT: "It is a draft: the user has not approved it yet.",
    PlanStatus.ACTIVE: "Keep the task statuses current with write_todos as you work.",
    PlanStatus.COMPLETED: "Every task is completed.",
}


def plan_lines(plan: list[dict[str, Any]] | None) -> list[str]:
    """`1. [pending] Check the balance` per task, as written (for the model)."""
    return [f"{n}. [{t.get('status', '')}] {t.get('content', '')}" for n, t in enumerate(plan or [], start=1)]


def plan_note(session: SessionRecord, mode: TurnMode) -> str | None:
    parts: list[str] = []
    if mode is TurnMode.PLANNING:
        parts.append(PLANNING_NOTE)
    if session.plan:
        status = session.plan_status or PlanStatus.ACTIVE
        parts.append(f"[Dex] The current plan (revision {session.plan_revision}, {status.value}):")
        parts.extend(plan_lines(session.plan))
        if mode is not TurnMode.PLANNING and status in _STATUS_NOTES:
            parts.append(_STATUS_NOTES[status])
    return "\n".join(parts) if parts else None


def shown_plan(revision: int, status: str | None, plan: list[dict[str, Any]] | None) -> list[str]:
    """The plan for the terminal: every model-written text escaped (`safe_text`)."""
    head = f"plan revision {revision} ({terminal_text(status or 'active', 32)})"
    if not plan:
        return [f"{head}: no tasks"]
    return [head + ":"] + [
        f"  {n}. [{terminal_text(str(t.get('status', '')), 32)}] {terminal_text(str(t.get('content', '')), 500)}"
        for n, t in enumerate(plan, start=1)
    ]
