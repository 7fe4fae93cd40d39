"""`dex-gateway audit list|export`: the operator's view of the audit log, read from the gateway's
database (`fences.store`) whether the gateway runs or not.

    audit list   [--since T] [--principal P] [--tool NAME] [--outcome O] [--limit 100] [--jsonl]
    audit export [--since T] [--until T] [--principal P] [--tool NAME] [--outcome O]   (JSON lines)

`list` prints the newest rows first as a table (`--jsonl`: one JSON object per line); `export`
writes every matching row, oldest first, one JSON object per line: `AuditEntry.from_json` reads
each back to the same row. `--since`/`--until`: an ISO 8601 date or time (UTC unless it says
otherwise), or a duration meaning that long ago (`24h`, `90m`, `7d`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..config.durations import parse_duration
from ..config.model import load_config
from ..errors import ConfigError
from ..text_table import print_table
from ..storage.database import run_with_store
from .records import OUTCOMES, AuditEntry, iso_time, micros_from_iso, now_micros
from .store import AuditQuery, AuditStore
from .stores import open_audit_store

__all__ = ["configure_parser", "moment"]

T = TypeVar("T")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="audit_command", required=True)
    listing = sub.add_parser("list", help="the newest audit rows (a table; --jsonl: JSON lines)")
    listing.add_argument("--limit", type=int, default=100, help="rows shown (default 100)")
    export = sub.add_parser("export", help="every matching audit row, oldest first, as JSON lines")
    export.add_argument("--until", help="only rows before this time (ISO 8601, or a duration ago: 1h)")
    for command in (listing, export):
        command.add_argument("--since", help="only rows at or after this time (ISO 8601, or a duration ago: 24h, 7d)")
        command.add_argument("--principal", help="only this principal's rows")
        command.add_argument("--tool", help="only rows of this tool (its exposed name)")
        command.add_argument("--outcome", choices=OUTCOMES, help="only rows with this outcome")
        command.add_argument("--jsonl", action="store_true", help="JSON lines (export always writes them)")
        command.add_argument("--config", help="config file (default: $DEX_GATEWAY_CONFIG or config/gateway.yaml)")
    listing.set_defaults(run=_list)
    export.set_defaults(run=_export)


def moment(option: str, text: str, now: float | None = None) -> int:
    """`--since`/`--until` as microseconds since the epoch: ISO 8601, or a duration that long ago."""
    text = text.strip()
    try:
        return micros_from_iso(text)
    except ValueError:
        pass
    try:
        seconds = _duration_seconds(text)
    except ValueError:
        raise ConfigError(f"{option}: cannot read {text!r}; use an ISO 8601 time (2026-12-04T10:00:00Z) "
                          "or a duration ago (24h, 90m, 7d)") from None
    return now_micros((time.time() if now is None else now) - seconds)


def _duration_seconds(text: str) -> float:
    if text.endswith("d") and text[:-1].isdigit():
        return int(text[:-1]) * 86_400.0
    return parse_duration(text)


def _query(args: argparse.Namespace) -> AuditQuery:
    return AuditQuery(
        since=None if args.since is None else moment("--since", args.since),
        until=None if getattr(args, "until", None) is None else moment("--until", args.until),
        principal=args.principal, tool=args.tool, outcome=args.outcome,
    )


def _with_store(args: argparse.Namespace, action: Callable[[AuditStore], Awaitable[T]]) -> T:
    return run_with_store(open_audit_store(load_config(args.config).fences.store), action)


def _list(args: argparse.Namespace) -> int:
    if args.limit < 1:
        raise ConfigError(f"--limit must be at least 1, not {args.limit}")
    query = _query(args)

    async def action(store: AuditStore) -> list[AuditEntry]:
        return await store.newest(query, limit=args.limit)

    entries = _with_store(args, action)
    if args.jsonl:
        for entry in entries:
            print(json.dumps(entry.to_json(), ensure_ascii=False))
        return 0
    if not entries:
        print("no audit rows match", file=sys.stderr)
        return 0
    rows = [_table_row(entry) for entry in entries]
    print_table(rows, list(rows[0]))
    return 0


def _export(args: argparse.Namespace) -> int:
    query = _query(args)

    async def action(store: AuditStore) -> int:
        count = 0
        async for entry in store.oldest_first(query):
            sys.stdout.write(json.dumps(entry.to_json(), ensure_ascii=False) + "\n")
            count += 1
        return count

    count = _with_store(args, action)
    sys.stdout.flush()
    print(f"exported {count} audit rows", file=sys.stderr)
    return 0


def _table_row(entry: AuditEntry) -> dict[str, str]:
    approval = entry.approval
    return {
        "id": str(entry.id),
        "time": iso_time(entry.time)[:23] + "Z",
        "principal": _printable(entry.principal, 24),
        "tool": _printable(entry.tool, 32),
        "outcome": entry.outcome,
        "fence": entry.fence_state,
        "key": _printable(entry.idempotency_key or "-", 24),
        "approval": _printable(f"{approval.by} ({approval.how})", 24) if approval else "-",
        "ms": "-" if entry.latency_ms is None else f"{entry.latency_ms:.1f}",
        "reason": _printable(entry.reason or "", 60),
    }


def _printable(text: str, width: int) -> str:
    """`text` safe for a terminal (control and format characters escaped), cut to `width`."""
    safe = "".join(c if unicodedata.category(c)[0] != "C" else c.encode("unicode_escape").decode("ascii") for c in text)
    return safe if len(safe) <= width else safe[: width - 1] + "…"


