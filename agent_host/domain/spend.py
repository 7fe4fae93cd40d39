"""Spend limits: tokens (and cost, when prices are set) per turn and per session, checked before
each model call from the usage the store keeps; and the usage line shown after each turn."""

from __future__ import annotations

from . import texts
from .records import UsageRecord
from .settings import SessionSettings


def _tokens(usage: UsageRecord) -> int:
    return usage.input_tokens + usage.output_tokens


def limit_reached(settings: SessionSettings, turn: UsageRecord, session: UsageRecord) -> str | None:
    """The message when a limit is reached (the turn then ends `stopped`), else None."""
    for scope, usage, tokens, cost in (
        ("turn", turn, settings.max_turn_tokens, settings.max_turn_cost),
        ("session", session, settings.max_session_tokens, settings.max_session_cost),
    ):
        if tokens is not None and _tokens(usage) >= tokens:
            return texts.spend_limit(scope, f"{_tokens(usage):,} tokens", f"{tokens:,}-token")
        if cost is not None and (usage.cost or 0.0) >= cost:
            return texts.spend_limit(scope, f"${usage.cost or 0.0:.4f}", f"${cost:.4f}")
    return None


def usage_line(turn: UsageRecord, session: UsageRecord) -> str:
    """`usage: this turn 1,234 tokens (1,000 in, 234 out; 3 model calls) · session 5,678 tokens`."""
    line = (
        f"usage: this turn {_tokens(turn):,} tokens ({turn.input_tokens:,} in, {turn.output_tokens:,} out; "
        f"{turn.model_calls} model call{'s' if turn.model_calls != 1 else ''}) · session {_tokens(session):,} tokens"
    )
    if turn.cost is not None or session.cost is not None:
        line += f" · cost ${turn.cost or 0.0:.4f} this turn, ${session.cost or 0.0:.4f} in all"
    return line
