"""`dex-gateway`: serve, tools [review], check, connectors validate, tasks list|show|cancel, approvals list|decide,
fences stats|show|purge, audit list|export."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from ..server.app import Runtime, create_app
from ..config.model import GatewayConfig, load_config, with_server_overrides
from ..connectors import validate_cli
from ..conventions import check_cli
from ..config.durations import parse_duration
from ..errors import ConfigError, RequestError
from ..pipeline.discovery import MAX_LIMIT, build_index, parse_search, search_routes
from ..pipeline.tool_search import load_embedder
from ..tasks import admin as tasks_admin
from ..audit import admin as audit_admin
from ..approvals import cli as approvals_cli
from ..pins import cli as pins_cli
from ..text_table import print_table

if TYPE_CHECKING:
    from ..fences import FenceRecord, FenceStore
    from ..pipeline.catalog import ToolRoute

T = TypeVar("T")
logger = logging.getLogger("gateway")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # One line per request is noise at INFO (upstream requests, the SDK client's requests in `check`,
    # SDK session bookkeeping).
    for noisy in ("httpx", "httpx2", "mcp.server.streamable_http", "mcp.server.streamable_http_manager"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return int(args.run(args) or 0)
    except ConfigError as exc:
        print(f"dex-gateway: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dex-gateway", description="One MCP URL for every agent, with the Dex conventions.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway")
    _config_arg(serve)
    serve.add_argument("--host", help="bind address (default: server.host)")
    serve.add_argument("--port", type=int, help="port (default: server.port; 0 picks a free one)")
    serve.add_argument("--workers", type=int, default=None,
                       help="processes on the one port, to use more cores (default: $DEX_GATEWAY_WORKERS or 1)")
    serve.add_argument("-v", "--verbose", action="store_true")
    # Set by the --workers supervisor for each worker (gateway/server/workers.py).
    serve.add_argument("--worker-fd", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--worker-index", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--replica-id", help=argparse.SUPPRESS)
    serve.set_defaults(run=_serve)

    tools = sub.add_parser("tools", help="print the aggregated tools with effect and approval; `tools search`, `tools review`")
    _config_arg(tools)
    tools.add_argument("--json", action="store_true", help="machine-readable output")
    tools.set_defaults(run=_tools)
    tsub = tools.add_subparsers(dest="tools_command")
    search = tsub.add_parser("search", help="the tools that best match a plain-words query (docs/discovery.md)")
    _config_arg(search)
    search.add_argument("query", help="what the tool should do, in plain words")
    search.add_argument("--json", action="store_true", help="the full tool definitions, as search_tools answers them")
    search.add_argument("--limit", type=int, default=10, help=f"how many tools (1..{MAX_LIMIT}; default 10)")
    search.add_argument("--effect", help="only tools with this effect (read, idempotent_write, ...)")
    search.add_argument("--upstream", help="only tools of this upstream")
    search.set_defaults(run=_tools_search)
    review = tsub.add_parser("review", help="tool definitions awaiting review (pinning): diff, accept, reject")
    pins_cli.configure_parser(review)

    check = sub.add_parser("check", help="check an MCP server against the Dex conventions")
    check_cli.configure_parser(check)
    check.set_defaults(run=check_cli.run)

    connectors = sub.add_parser("connectors", help="connector manifests")
    csub = connectors.add_subparsers(dest="connectors_command", required=True)
    validate = csub.add_parser("validate", help="validate manifests and their agent blocks")
    validate_cli.configure_parser(validate)
    validate.set_defaults(run=validate_cli.run)

    tasks = sub.add_parser("tasks", help="list, show and cancel tasks (long-running tool calls)")
    tasks_admin.configure_parser(tasks)

    approvals = sub.add_parser("approvals", help="list and decide calls held for a person's decision")
    approvals_cli.configure_parser(approvals)

    fences = sub.add_parser("fences", help="inspect and purge idempotency fences")
    fsub = fences.add_subparsers(dest="fences_command", required=True)
    stats = fsub.add_parser("stats", help="fence counts by state")
    _config_arg(stats)
    stats.set_defaults(run=_fences_stats)
    show = fsub.add_parser("show", help="one fence by principal and idempotency key")
    _config_arg(show)
    show.add_argument("key", help="the idempotency key")
    show.add_argument("--principal", default="anonymous", help="the principal that sent the key (default: anonymous)")
    show.set_defaults(run=_fences_show)
    purge = fsub.add_parser("purge", help="delete finished fences older than a duration")
    _config_arg(purge)
    purge.add_argument("--older-than", required=True, help="a Go-style duration, e.g. 24h, 90m, 1h30m, 3600s")
    purge.set_defaults(run=_fences_purge)

    audit = sub.add_parser("audit", help="the audit log: write calls and refused calls, who, what came of it")
    audit_admin.configure_parser(audit)
    return parser


def _config_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="config file (default: $DEX_GATEWAY_CONFIG or config/gateway.yaml)")


# -- serve --------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    from ..server import serve, workers

    config = load_config(args.config)
    overrides: dict[str, Any] = {}
    if args.host:
        overrides["host"] = args.host
    if args.port is not None:
        overrides["port"] = args.port
    if overrides:
        config = with_server_overrides(config, "the command line", **overrides)
    if args.replica_id:
        config = config.model_copy(update={"fences": config.fences.model_copy(update={"replica_id": args.replica_id})})
    if args.worker_fd is not None:
        sock = socket.socket(fileno=args.worker_fd)
        anyio.run(partial(serve.serve, config, sock=sock, worker=args.worker_index or 0),
                  backend_options={"use_uvloop": True})
        return 0
    count = args.workers if args.workers is not None else _env_workers()
    if count < 1:
        raise ConfigError(f"--workers must be at least 1, not {count}")
    if count > 1:
        return workers.run_workers(config, count, workers.worker_argv(args.config, args.host, args.verbose))
    anyio.run(serve.serve, config, backend_options={"use_uvloop": True})
    return 0


def _env_workers() -> int:
    raw = os.environ.get("DEX_GATEWAY_WORKERS", "1").strip() or "1"
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"DEX_GATEWAY_WORKERS: {raw!r} is not a number of workers") from None


# -- tools --------------------------------------------------------------------------------


def _tools(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    routes = anyio.run(_collect_tools, config)
    rows = [
        {
            "name": r.name,
            "effect": r.effect.value,
            "approval": "recommended" if r.classification.requires_approval else "",
            "source": r.upstream or "connector",
            "description": (r.definition.get("description") or "").split("\n")[0][:60],
        }
        for r in routes
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print_table(rows, ["name", "effect", "approval", "source", "description"])
    return 0


def _tools_search(args: argparse.Namespace) -> int:
    arguments = {k: v for k, v in (("query", args.query), ("limit", args.limit), ("effect", args.effect),
                                   ("upstream", args.upstream)) if v is not None}
    try:
        query = parse_search(arguments)
    except RequestError as exc:
        print(f"dex-gateway tools search: {exc.message.removeprefix('search_tools: ')}", file=sys.stderr)
        return 2
    config = load_config(args.config)
    routes = anyio.run(_collect_tools, config)
    found = search_routes(build_index(routes, load_embedder()), routes, query)
    if args.json:
        print(json.dumps({"tools": [r.definition for r in found]}, indent=2))
        return 0
    rows = [{"rank": str(i), "name": r.name, "effect": r.effect.value,
             "approval": "recommended" if r.classification.requires_approval else "",
             "source": r.upstream or "connector",
             "description": (r.definition.get("description") or "").split("\n")[0][:60]}
            for i, r in enumerate(found, 1)]
    print_table(rows, ["rank", "name", "effect", "approval", "source", "description"])
    return 0


async def _collect_tools(config: GatewayConfig) -> list[ToolRoute]:
    app = create_app(config)
    async with app.router.lifespan_context(app):
        runtime: Runtime = app.state.runtime
        return await runtime.catalog.tools()


# -- fences -------------------------------------------------------------------------------


def _with_store(config_path: str | None, action: Callable[[FenceStore], Awaitable[T]]) -> T:
    from ..storage.database import opened
    from ..fences import open_fence_store

    config = load_config(config_path)

    async def run() -> T:
        async with opened(open_fence_store(config.fences.store)) as store:
            return await action(store)

    return anyio.run(run)


def _fences_stats(args: argparse.Namespace) -> int:
    from ..fences import stats

    print(json.dumps(_with_store(args.config, stats), indent=2, default=str))
    return 0


def _fences_show(args: argparse.Namespace) -> int:
    from ..fences import show

    async def action(store: FenceStore) -> FenceRecord | None:
        return await show(store, args.principal, args.key)

    record = _with_store(args.config, action)
    if record is None:
        print(f"no fence for key {args.key!r} of principal {args.principal!r}", file=sys.stderr)
        return 1
    print(json.dumps(record.as_dict(), indent=2, default=str))
    return 0


def _fences_purge(args: argparse.Namespace) -> int:
    from ..fences import purge

    cutoff = older_than(args.older_than)

    async def action(store: FenceStore) -> int:
        return await purge(store, cutoff)

    print(f"purged {_with_store(args.config, action)} fences older than {args.older_than}")
    return 0


def older_than(text: str) -> timedelta:
    """`--older-than`: a Go-style duration (`24h`, `90m`, `1h30m`, `3600s`)."""
    try:
        return timedelta(seconds=parse_duration(text.strip()))
    except ValueError:
        raise ConfigError(f"--older-than: cannot read {text!r}; use e.g. 24h, 90m, 1h30m or 3600s") from None


if __name__ == "__main__":
    sys.exit(main())
