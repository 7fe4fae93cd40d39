"""`dex-gateway tools review`: the tool definitions awaiting review, with what changed, on the
gateway's database directly (the table the admin API reads; every replica picks a review up within
`PIN_POLL_SECONDS`, 5 s, and lists an accepted tool again).

    dex-gateway tools review [--all] [--json]           pending reviews, each with a unified diff
    dex-gateway tools review --accept NAME [--as WHO]   pin what the upstream lists now
    dex-gateway tools review --reject NAME [--as WHO]   keep the pinned definition (a held tool stays held)

NAME is the tool's exposed name (`crm__find`) or `UPSTREAM/TOOL` (the upstream's own name).
"""

from __future__ import annotations

import argparse
import difflib
import getpass
import json
import sys


import anyio

from ..config.model import GatewayConfig, load_config
from ..conventions.naming import exposed_tool_name
from ..storage.database import Database, opened
from .admin_api import pin_json
from .open_store import open_pin_store
from .records import Pin
from .service import ToolPins

__all__ = ["configure_parser", "definition_diff"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--all", action="store_true", help="every pin, not only those awaiting review")
    parser.add_argument("--json", action="store_true", help="machine-readable output (the admin API's shape)")
    verdict = parser.add_mutually_exclusive_group()
    verdict.add_argument("--accept", metavar="NAME", help="pin the definition the upstream lists now")
    verdict.add_argument("--reject", metavar="NAME", help="keep the pinned definition")
    parser.add_argument("--as", dest="reviewer", help="who reviews (default: the operating-system user)")
    parser.add_argument("--config", help="config file (default: $DEX_GATEWAY_CONFIG or config/gateway.yaml)")
    parser.set_defaults(run=run)


def definition_diff(pin: Pin) -> str:
    """What changed, as a unified diff of the two definitions (pretty JSON, sorted keys)."""
    before = json.dumps(pin.pinned_definition, indent=2, sort_keys=True, ensure_ascii=False).splitlines() \
        if pin.pinned_definition is not None else []
    after = json.dumps(pin.seen_definition, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    return "\n".join(difflib.unified_diff(before, after, "pinned", "listed now", lineterm=""))


def _find(config: GatewayConfig, pins: list[Pin], name: str) -> Pin | None:
    for pin in pins:
        upstream = next((u for u in config.upstreams if u.name == pin.upstream), None)
        exposed = exposed_tool_name(pin.upstream, pin.tool, upstream.prefix) if upstream is not None else None
        if name in (exposed, f"{pin.upstream}/{pin.tool}"):
            return pin
    return None


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    modes = {u.name: u.pinning for u in config.upstreams}
    name = args.accept or args.reject

    async def work() -> tuple[list[Pin], Pin | None, bool]:
        async with Database(config.fences.store) as database, opened(open_pin_store(database)) as store:
            service = ToolPins(store, modes, spawn=lambda fn: None)
            await service.load()
            if name is None:
                return service.pins(), None, False
            found = _find(config, service.pins(), name)
            if found is None:
                return service.pins(), None, True
            return service.pins(), await service.review(found.upstream, found.tool, args.accept is not None,
                                                        by=f"cli:{args.reviewer or getpass.getuser()}"), True

    pins, reviewed, asked = anyio.run(work)
    if asked:
        if reviewed is None:
            print(f"dex-gateway: no pinned tool {name!r} (give its exposed name or UPSTREAM/TOOL; "
                  "`dex-gateway tools review --all` lists them)", file=sys.stderr)
            return 1
        print(f"{reviewed.upstream}/{reviewed.tool}: {'accepted' if args.accept else 'rejected'} "
              f"({reviewed.state}, pinned {str(reviewed.pinned_digest)[:12]})")
        return 0
    shown = [p for p in pins if args.all or p.pending]
    if args.json:
        print(json.dumps({"pins": [pin_json(p, modes.get(p.upstream, "warn")) for p in shown]}, indent=2))
        return 0
    if not shown:
        print("no tool definitions await review")
        return 0
    for pin in shown:
        print(f"{pin.upstream}/{pin.tool}  {pin.state}  (pinning: {modes.get(pin.upstream, 'warn')})")
        if pin.pending:
            print("    " + definition_diff(pin).replace("\n", "\n    "))
    return 0


