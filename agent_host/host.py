"""The composition root: the host every agent command builds around the turn loop — the session
store, the model, the gateway's tools, the approval gate, the built-in tools and (when asked
for) the in-process host API.

Everything that can be refused is checked before a turn starts: the model, the tokens, the
settings, the continuation hook, the host API's port (bound first).
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from gateway.config.ops import TelemetryConfig
from gateway.telemetry import Telemetry

from .api.approvals_api import checked_tokens
from .api.approvals_server import ApprovalsServer, bind_loopback
from .api.guard import ApiGuardSettings, api_guard_settings
from .api.host_api import host_app
from .approvals.gate import ApprovalGate, ApprovalMode
from .domain.credentials import agent_token, approver_token, issuer_settings
from .domain.settings import resolve_settings
from .gateway_client.credential import Credential, StaticToken
from .gateway_client.issuer import IssuedToken, IssuerClient, load_login, login_path
from .gateway_client.images import ImageLibrary, image_library
from .gateway_client.tasks import HostTasks
from .gateway_client.tools import GatewayToolSource
from .models.base import ModelClient
from .models.openai_compat import OpenAICompatClient, OpenAIConfig
from .models.scripted import ScriptedModelClient, load_script
from .store.lease import hold_lease, this_process
from .store.session_store import SessionStore, store_path, store_target
from .terminal.console import Console, ConsoleQuestioner
from .turn.builtins import Builtins
from .turn.continuation import load_hook
from .turn.loop import AgentConfig, TurnLoop
from .turn.tracing import SCOPE as TRACING_SCOPE

DEFAULT_MODEL = "scripted"


@dataclass
class Host:
    loop: TurnLoop
    store: SessionStore
    session_id: str
    model: str
    console: Console
    mode: ApprovalMode
    api_url: str | None = None
    images: ImageLibrary | None = None


def model_client(spec: str, args: argparse.Namespace) -> ModelClient:
    if spec == "scripted" or spec.startswith("scripted:"):
        return ScriptedModelClient(load_script(spec.partition(":")[2]), name=spec)
    if spec.startswith("openai:") and spec != "openai:":
        config = OpenAIConfig.from_env(spec.partition(":")[2], base_url=args.openai_base_url, stream=not args.no_stream)
        return OpenAICompatClient(config)
    raise ValueError(f"unknown model {spec!r}: use scripted, scripted:module:function or openai:<model>")


def _api_socket(args: argparse.Namespace, token: str | None) -> tuple[list[str], socket.socket, ApiGuardSettings] | None:
    """The approver tokens, the bound port and the guards of the in-process host API (None: not
    asked for). ValueError, before anything starts, when it could not be served."""
    if args.approvals_port is None:
        return None
    approvers, _ = checked_tokens([approver_token(args) or ""], [token or ""])
    guard = api_guard_settings(args)
    return approvers, bind_loopback(args.approvals_port), guard


def gateway_credential(args: argparse.Namespace) -> Credential:
    """The agent's gateway token: $DEX_AGENT_TOKEN / --token-file; or client credentials
    ($DEX_AGENT_CLIENT_ID + $DEX_AGENT_CLIENT_SECRET / --client-secret-file) at the issuer; or the
    login `dex-agent login` kept beside the store; or none."""
    token = agent_token(args)
    oauth = issuer_settings(args)
    if oauth.client_secret:
        if token:
            raise ValueError("give either the agent's token or client credentials, not both")
        if not oauth.client_id:
            raise ValueError("client credentials need the client id ($DEX_AGENT_CLIENT_ID or --client-id)")
        return IssuedToken(IssuerClient(oauth.issuer, oauth.client_id, oauth.client_secret), resource=args.gateway,
                           scope=oauth.scope, token_endpoint=oauth.token_endpoint)
    if token:
        return StaticToken(token)
    path = login_path(store_path(args.store))
    record = load_login(path)
    if record is None:
        return StaticToken(None)
    if record.resource != args.gateway:
        raise ValueError(f"the login in {path} is for {record.resource}, not {args.gateway}: "
                         f"run `dex-agent login --gateway {args.gateway}`")
    return IssuedToken(IssuerClient(record.issuer, record.client_id), resource=record.resource, scope=record.scope,
                       tokens=record.tokens, token_endpoint=record.token_endpoint, record_path=path)


def host_telemetry() -> Telemetry:
    """The host's tracing, installed: spans only when an exporter is chosen (OTEL_TRACES_EXPORTER=
    otlp|console), as for the gateway; then the host's MCP requests carry `traceparent` in `_meta`.
    The caller shuts it down."""
    telemetry = Telemetry.from_config(TelemetryConfig(service_name=TRACING_SCOPE, metrics=False))
    telemetry.install()
    return telemetry


@asynccontextmanager
async def open_host(args: argparse.Namespace, console: Console, setting_changes: dict[str, Any]) -> AsyncIterator[Host]:
    """The host for the command line `args` (and the session settings its flags change)."""
    token = agent_token(args)
    credential = gateway_credential(args)
    hook = load_hook(args.continuation_hook) if args.continuation_hook else None
    api = _api_socket(args, token)
    async with AsyncExitStack() as stack:
        if api is not None:
            stack.callback(api[1].close)
        store = await stack.enter_async_context(SessionStore(store_target(args.store)))
        session = await store.get_session(args.session) if args.session else None
        settings = resolve_settings(session.settings if session else {}, setting_changes)
        # Continuing a session keeps its model unless --model says otherwise.
        spec = settings.model or (session.model if session is not None else DEFAULT_MODEL)
        clients: dict[str, ModelClient] = {spec: model_client(spec, args)}
        model = clients[spec]
        if session is None:
            session = await store.create_session(model.name, args.gateway, args.session, settings.stored())
        elif settings.stored() != session.settings:
            session = await store.set_settings(session.id, settings.stored(), settings.model)
        # One driver per session: a `serve` or another `run`/`chat` driving it is refused here.
        await stack.enter_async_context(hold_lease(store, session.id, this_process()))

        def resolve(name: str) -> ModelClient:
            if name not in clients:
                clients[name] = model_client(name, args)
            return clients[name]

        mode: ApprovalMode = "auto" if args.yes else args.approve
        console.others_can_answer = api is not None
        gate = ApprovalGate(store, mode, prompter=console, timeout_seconds=args.approval_timeout, on_card=console.approval_card)
        library = image_library(store, store_path(args.store), args.gateway, credential)
        tools = GatewayToolSource(args.gateway, token=credential, call_timeout=args.call_timeout, images=library,
                                  protocol=args.protocol,
                                  tasks=HostTasks(store))
        builtins = Builtins(store, ConsoleQuestioner(console), question_timeout=args.approval_timeout, api_answers=api is not None,
                            resources=tools.resources)
        config = AgentConfig(max_model_calls=args.max_model_calls, **({"instructions": args.instructions} if args.instructions else {}))
        stack.callback(host_telemetry().shutdown)
        loop = TurnLoop(store, model, tools, gate, builtins, config, console, models=resolve, continuation=hook, images=library)
        async with anyio.create_task_group() as tg:
            server: ApprovalsServer | None = None
            if api is not None:
                server = ApprovalsServer(host_app(store, api[0], [token or ""], guard=api[2]), api[1])
                tg.start_soon(server.serve)
                console.say(f"approvals API on {server.url}")
                console.say(f"web page on {server.page_url(session.id)}")
            yield Host(loop, store, session.id, spec, console, mode, server.base_url if server else None, library)
            if server is not None:
                server.stop()
