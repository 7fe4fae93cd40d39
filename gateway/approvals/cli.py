"""`dex-gateway approvals list|decide`: the operator's view of held calls, on the gateway's
database directly (the same table the admin API reads; any replica's waiting call sees a decision
made here at its next look, `approvals.poll_seconds`).

    dex-gateway approvals list [--state pending|decided|all] [--json]
    dex-gateway approvals decide ID allow|deny [--reason TEXT] [--as NAME]

`decide` records `decided_by` "cli:<NAME>" (default: the operating-system user) and channel "cli";
a name equal to the call's principal is refused, as on the admin API.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from ..config.model import load_config
from ..errors import ApprovalError
from ..storage.database import run_with_store
from .records import Channel
from .service import Approvals
from .open_store import open_approval_store

__all__ = ["configure_parser"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="approvals_command", required=True)
    listing = sub.add_parser("list", help="held calls, newest first")
    listing.add_argument("--state", choices=["pending", "decided", "all"], default="pending")
    listing.add_argument("--json", action="store_true", help="machine-readable output (the admin API's shape)")
    listing.set_defaults(run=_list)
    decide = sub.add_parser("decide", help="allow or deny a held call")
    decide.add_argument("approval_id")
    decide.add_argument("decision", choices=["allow", "deny"])
    decide.add_argument("--reason", help="why (shown to the caller when denied)")
    decide.add_argument("--as", dest="approver", help="who decides (default: the operating-system user)")
    decide.set_defaults(run=_decide)
    for command in (listing, decide):
        command.add_argument("--config", help="config file (default: $DEX_GATEWAY_CONFIG or config/gateway.yaml)")


def _with_service(args: argparse.Namespace, action: Callable[[Approvals], Awaitable[Any]]) -> Any:
    config = load_config(args.config)
    return run_with_store(open_approval_store(config.fences.store),
                          lambda store: action(Approvals(store, config.approvals)))


def _list(args: argparse.Namespace) -> int:
    async def action(service: Approvals) -> list[dict[str, Any]]:
        now = service.clock()
        return [a.to_json(now) for a in await service.list(args.state)]

    shown: list[dict[str, Any]] = _with_service(args, action)
    if args.json:
        print(json.dumps({"approvals": shown}, indent=2))
        return 0
    for a in shown:
        print(f"{a['id']}  {a['state']}  {a['principal']}  {a['tool']}  expires {a['expires_at']}"
              + (f"  decided by {a['decided_by']} ({a['channel']})" if a["decided_by"] else ""))
        print("    " + a["card"].replace("\n", "\n    "))
    return 0


def _decide(args: argparse.Namespace) -> int:
    name = args.approver or getpass.getuser()

    async def action(service: Approvals) -> tuple[dict[str, Any], bool]:
        approval, first = await service.decide(args.approval_id, args.decision == "allow", by=f"cli:{name}",
                                               channel=Channel.CLI.value, reason=args.reason, approver_principal=name)
        return approval.to_json(service.clock()), first

    try:
        shown, first = _with_service(args, action)
    except ApprovalError as exc:
        print(f"dex-gateway: {exc}", file=sys.stderr)
        return 1
    if not first:
        print(f"dex-gateway: approval {shown['id']} is already {shown['state']} (by {shown['decided_by']})",
              file=sys.stderr)
        return 1
    print(f"approval {shown['id']}: {shown['state']}")
    return 0
