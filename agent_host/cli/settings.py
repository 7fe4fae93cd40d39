"""Per-session settings on the command line: the flags of `run`/`chat`/`resume` (stored with the
session when given) and `dex-agent sessions set ID ...`."""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
from ..domain.safe_text import terminal_text
from ..domain.settings import parse_policy, resolve_settings
from ..store.session_store import SessionStore, store_target

# flag -> (settings field, type, help)
_FLAGS: dict[str, tuple[str, type, str]] = {
    "--temperature": ("temperature", float, "sampling temperature passed to the model"),
    "--max-tokens": ("max_tokens", int, "most output tokens per model call"),
    "--context-window": ("context_window_tokens", int, "the model's context window in tokens (default 128000): compaction keeps requests under a share of it"),
    "--compaction-trigger": ("compaction_trigger_ratio", float, "share of the window that triggers compaction (default 0.85)"),
    "--compaction-retained": ("compaction_retained_ratio", float, "share of the window kept verbatim after compaction (default 0.3)"),
    "--max-turn-tokens": ("max_turn_tokens", int, "spend limit: tokens per turn"),
    "--max-session-tokens": ("max_session_tokens", int, "spend limit: tokens per session"),
    "--max-turn-cost": ("max_turn_cost", float, "spend limit: cost per turn (needs the prices)"),
    "--max-session-cost": ("max_session_cost", float, "spend limit: cost per session (needs the prices)"),
    "--input-price": ("input_price_per_mtok", float, "price of a million input tokens"),
    "--output-price": ("output_price_per_mtok", float, "price of a million output tokens"),
}
SETTING_NAMES = sorted({"model", "tool_policies", *(field for field, _, _ in _FLAGS.values())})


def add_settings_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("session settings (stored with the session, used on resume)")
    for flag, (field, kind, help_text) in _FLAGS.items():
        group.add_argument(flag, dest=f"setting_{field}", type=kind, default=None, help=help_text)
    group.add_argument("--tool-policy", dest="tool_policy", action="append", default=[], metavar="NAME=EFFECT[,approval|,no-approval]",
                       help="a tool's policy: it may raise the tool's effect, never lower it; NAME= removes it (repeatable)")


def settings_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags set (nothing for flags not given)."""
    changes: dict[str, Any] = {
        field: getattr(args, f"setting_{field}") for field, _, _ in _FLAGS.values()
        if getattr(args, f"setting_{field}", None) is not None
    }
    if getattr(args, "model", None):
        changes["model"] = args.model
    policies = dict(parse_policy(spec) for spec in getattr(args, "tool_policy", []) or [])
    if policies:
        changes["tool_policies"] = {name: (p.model_dump(exclude_none=True) if p else None) for name, p in policies.items()}
    return changes


def sessions_set(args: argparse.Namespace) -> int:
    unknown = [name for name in args.unset if name not in SETTING_NAMES]
    if unknown:
        raise ValueError(f"--unset {unknown[0]}: not a setting (one of {', '.join(SETTING_NAMES)})")

    async def go() -> int:
        async with SessionStore(store_target(args.store)) as store:
            session = await store.get_session(args.session_id)
            if session is None:
                raise ValueError(f"no session {args.session_id}")
            settings = resolve_settings(session.settings, settings_changes(args), args.unset)
            updated = await store.set_settings(session.id, settings.stored(), settings.model)
        print(f"session {terminal_text(updated.id, 128)} settings (from its next turn on):")
        print(json.dumps(updated.settings, indent=2, ensure_ascii=True))
        return 0

    return anyio.run(go)
