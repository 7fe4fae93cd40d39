"""`dex-agent serve`: the host as a long-running service: the HTTP API with the chat routes and
the web page, the driver that runs every session's turns by itself (`driver.py`), and the watcher
that polls the upstream tasks parked turns wait for (`task_watcher.py`).

Approvals and questions are answered through the API or the page only (nobody sits at a
terminal); a turn waiting for one is parked, not held in memory. Several `serve` processes may
share one store: a session's lease decides which one drives it.
"""

from __future__ import annotations

import argparse
import sys

import anyio

from ..api.approvals_api import checked_tokens
from ..api.approvals_server import ApprovalsServer, bind_loopback
from ..api.chat_api import ChatDefaults
from ..api.guard import api_guard_settings
from ..api.host_api import host_app
from ..approvals.gate import ApprovalGate
from ..domain.credentials import agent_token, approver_token
from ..gateway_client.images import image_library
from ..gateway_client.tasks import HostTasks
from ..gateway_client.tools import GatewayToolSource
from ..host import DEFAULT_MODEL, gateway_credential, host_telemetry, model_client
from ..models.base import ModelClient
from ..store.session_store import SessionStore, store_path, store_target
from ..turn.builtins import Builtins
from ..turn.loop import AgentConfig, TurnLoop
from .driver import Driver
from .task_watcher import TaskWatcher
from ..store.lease import this_process


def serve(args: argparse.Namespace) -> int:
    approvers, agents = checked_tokens([approver_token(args) or ""], [agent_token(args) or ""])
    guard = api_guard_settings(args)
    if args.lease_seconds <= 0:
        raise ValueError(f"--lease-seconds must be above 0, not {args.lease_seconds}")
    default_model = args.model or DEFAULT_MODEL
    clients: dict[str, ModelClient] = {default_model: model_client(default_model, args)}

    def resolve(name: str) -> ModelClient:
        if name not in clients:
            clients[name] = model_client(name, args)
        return clients[name]

    def check_model(name: str) -> None:
        resolve(name)

    credential = gateway_credential(args)
    sock = bind_loopback(args.port)

    async def go() -> int:
        async with SessionStore(store_target(args.store)) as store:
            library = image_library(store, store_path(args.store), args.gateway, credential)
            tools = GatewayToolSource(args.gateway, token=credential, call_timeout=args.call_timeout, images=library,
                                      protocol=args.protocol,
                                      tasks=HostTasks(store), park_tasks=True)
            assert tools.task_caller is not None
            gate = ApprovalGate(store, "api", timeout_seconds=args.approval_timeout, park=True)
            builtins = Builtins(store, None, question_timeout=args.approval_timeout, api_answers=True, park=True)
            config = AgentConfig(max_model_calls=args.max_model_calls,
                                 **({"instructions": args.instructions} if args.instructions else {}))
            loop = TurnLoop(store, clients[default_model], tools, gate, builtins, config, models=resolve, images=library)
            driver = Driver(store, loop, this_process(), lease_seconds=args.lease_seconds)
            watcher = TaskWatcher(store, tools.task_caller, driver.me)
            chat = ChatDefaults(default_model, args.gateway, check_model)
            server = ApprovalsServer(host_app(store, approvers, agents, guard=guard, chat=chat), sock)
            print(f"dex-agent serve: API on {server.base_url} (driver {driver.me.replica_id})", file=sys.stderr, flush=True)
            print(f"dex-agent serve: web page on {server.base_url}/ui/", file=sys.stderr, flush=True)
            async with anyio.create_task_group() as tg:
                tg.start_soon(driver.run)
                tg.start_soon(watcher.run)
                try:
                    await server.serve()
                finally:
                    tg.cancel_scope.cancel()
        return 0

    telemetry = host_telemetry()
    try:
        return anyio.run(go)
    finally:
        telemetry.shutdown()
        sock.close()
