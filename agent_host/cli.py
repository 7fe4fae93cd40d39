"""`dex-agent`: chat, run, resume, demo, sessions, approvals."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime

import anyio
import httpx
import uvicorn

from .approvals import APPROVER_TOKEN_ENV, DEFAULT_APPROVAL_TIMEOUT_SECONDS, ApprovalGate, approvals_app
from .builtins import Builtins
from .console import Console, ConsoleQuestioner
from .gateway_tools import TOKEN_ENV, GatewayToolSource
from .loop import AgentConfig, TurnLoop
from .models.base import ModelClient
from .models.openai_compat import OpenAICompatClient, OpenAIConfig
from .models.scripted import ScriptedModelClient, load_script
from .store import SessionStore, TurnRecord, TurnStatus, store_path

GATEWAY_ENV = "DEX_AGENT_GATEWAY"
DEFAULT_GATEWAY = "http://127.0.0.1:8080/mcp"
DEMO_QUESTION = "What is the balance of account acme and refund order 5521 by 40?"
LOOPBACK = "127.0.0.1"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="dex-agent: %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return int(args.run(args) or 0)
    except (ValueError, KeyError) as exc:
        print(f"dex-agent: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dex-agent", description="The Dex agent host: a durable agent loop over the gateway.")
    _store_arg(parser, argparse.SUPPRESS)
    parser.set_defaults(store=None)
    sub = parser.add_subparsers(dest="command", required=True)

    chat = sub.add_parser("chat", help="talk to the agent")
    _agent_args(chat)
    chat.set_defaults(run=_chat)

    run = sub.add_parser("run", help="one turn: prints the answer; exit 1 when the turn failed")
    _agent_args(run)
    run.add_argument("message", nargs="?", help="the user message (omit with --session to only resume)")
    run.set_defaults(run=_run)

    resume = sub.add_parser("resume", help="finish a session's unfinished turn (after a crash)")
    _agent_args(resume)
    resume.set_defaults(run=_run, message=None)

    demo = sub.add_parser("demo", help="the scripted demo turn, approvals granted automatically")
    _agent_args(demo, demo=True)
    demo.set_defaults(run=_run, message=DEMO_QUESTION)

    sessions = sub.add_parser("sessions", help="list or show stored sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True)
    slist = ssub.add_parser("list")
    _store_arg(slist)
    slist.set_defaults(run=_sessions_list)
    show = ssub.add_parser("show")
    _store_arg(show)
    show.add_argument("session_id")
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=_sessions_show)

    approvals = sub.add_parser("approvals", help="the approvers' HTTP API and a small client for it")
    asub = approvals.add_subparsers(dest="approvals_command", required=True)
    serve = asub.add_parser("serve", help="serve the approvals API on the session store")
    serve.add_argument("--port", type=int, default=8790)
    _store_arg(serve)
    _approver_token_arg(serve)
    serve.add_argument("--agent-token", default=os.environ.get(TOKEN_ENV), help=f"refused as approver (default ${TOKEN_ENV})")
    serve.set_defaults(run=_approvals_serve)
    alist = asub.add_parser("list", help="pending approvals")
    alist.add_argument("--url", required=True, help="e.g. http://127.0.0.1:8790")
    _approver_token_arg(alist)
    alist.set_defaults(run=_approvals_list)
    decide = asub.add_parser("decide", help="allow or deny one approval")
    decide.add_argument("approval_id")
    decide.add_argument("decision", choices=("allow", "deny"))
    decide.add_argument("--reason")
    decide.add_argument("--url", required=True)
    _approver_token_arg(decide)
    decide.set_defaults(run=_approvals_decide)
    return parser


def _store_arg(parser: argparse.ArgumentParser, default: object = argparse.SUPPRESS) -> None:
    # Accepted before or after the command; SUPPRESS keeps a value given before it.
    parser.add_argument("--store", default=default, help="session store (SQLite file; default $DEX_AGENT_STORE or var/dex-agent.db)")


def _approver_token_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--approver-token", default=os.environ.get(APPROVER_TOKEN_ENV), help=f"default ${APPROVER_TOKEN_ENV}")


def _agent_args(parser: argparse.ArgumentParser, demo: bool = False) -> None:
    _store_arg(parser)
    parser.add_argument("--gateway", default=os.environ.get(GATEWAY_ENV, DEFAULT_GATEWAY), help=f"gateway MCP URL (default ${GATEWAY_ENV} or {DEFAULT_GATEWAY})")
    parser.add_argument("--token", default=os.environ.get(TOKEN_ENV), help=f"the agent's gateway bearer token (default ${TOKEN_ENV})")
    parser.add_argument("--model", default="scripted", help="scripted | scripted:module:function | openai:<model>")
    parser.add_argument("--openai-base-url", help="OpenAI-compatible base URL (default $DEX_AGENT_OPENAI_BASE_URL, $OPENAI_BASE_URL or api.openai.com); the key comes from $DEX_AGENT_OPENAI_API_KEY or $OPENAI_API_KEY")
    parser.add_argument("--no-stream", action="store_true", help="ask the model API for whole answers")
    parser.add_argument("--session", help="session id: resume or continue it (created when new)")
    parser.add_argument("--approve", choices=("prompt", "auto", "api"), default="auto" if demo else "prompt",
                        help="who decides approvals: the terminal, nobody (auto-allow), or only the HTTP API")
    parser.add_argument("--yes", "-y", action="store_true", help="same as --approve auto")
    parser.add_argument("--approval-timeout", type=float, default=DEFAULT_APPROVAL_TIMEOUT_SECONDS, help="seconds before a pending approval is rejected")
    parser.add_argument("--approvals-port", type=int, help="also serve the approvals API on 127.0.0.1:PORT")
    _approver_token_arg(parser)
    parser.add_argument("--max-model-calls", type=int, default=100)
    parser.add_argument("--instructions", help="system instructions for the model")
    parser.add_argument("--call-timeout", type=float, default=60.0, help="seconds to wait for one tool call")


def _model(args: argparse.Namespace) -> ModelClient:
    spec: str = args.model
    if spec == "scripted" or spec.startswith("scripted:"):
        return ScriptedModelClient(load_script(spec.partition(":")[2]), name=spec)
    if spec.startswith("openai:") and spec != "openai:":
        config = OpenAIConfig.from_env(spec.partition(":")[2], base_url=args.openai_base_url, stream=not args.no_stream)
        return OpenAICompatClient(config)
    raise ValueError(f"unknown model {spec!r}: use scripted, scripted:module:function or openai:<model>")


@asynccontextmanager
async def _host(args: argparse.Namespace, console: Console) -> AsyncIterator[tuple[TurnLoop, SessionStore, str]]:
    store = SessionStore(store_path(args.store))
    model = _model(args)
    session = store.get_session(args.session) if args.session else None
    if session is None:
        session = store.create_session(model.name, args.gateway, args.session)
    mode = "auto" if args.yes else args.approve
    gate = ApprovalGate(store, mode, prompter=console, timeout_seconds=args.approval_timeout, on_card=console.approval_card)
    loop = TurnLoop(
        store,
        model,
        GatewayToolSource(args.gateway, token=args.token, call_timeout=args.call_timeout),
        gate,
        Builtins(store, ConsoleQuestioner(console)),
        AgentConfig(max_model_calls=args.max_model_calls, **({"instructions": args.instructions} if args.instructions else {})),
        console,
    )
    try:
        async with anyio.create_task_group() as tg:
            server: uvicorn.Server | None = None
            if args.approvals_port is not None:
                app = approvals_app(store, [args.approver_token or ""], [args.token or ""])
                server = uvicorn.Server(uvicorn.Config(app, host=LOOPBACK, port=args.approvals_port, log_level="warning", lifespan="off"))
                tg.start_soon(server.serve)
                console.say(f"approvals API on http://{LOOPBACK}:{args.approvals_port}/approvals")
            yield loop, store, session.id
            if server is not None:
                server.should_exit = True
    finally:
        store.close()


def _report(console: Console, turn: TurnRecord | None) -> int:
    if turn is None:
        return 0
    if turn.status is TurnStatus.FAILED:
        console.say(f"turn {turn.id} failed: {turn.error}")
        return 1
    console.say()
    return 0


def _run(args: argparse.Namespace) -> int:
    async def go() -> int:
        console = Console()
        async with _host(args, console) as (loop, store, session_id):
            console.say(f"session {session_id}")
            code = 0
            unfinished = store.unfinished_turn(session_id)
            if unfinished is not None:
                console.say(f"resuming {unfinished.id}: {unfinished.user_text}")
                code = _report(console, await loop.resume(session_id))
            if args.message:
                console.say(f"you> {args.message}")
                code = _report(console, await loop.run_turn(session_id, args.message))
            elif unfinished is None and args.command != "resume":
                raise ValueError("nothing to do: give a message, or --session with an unfinished turn")
            return code

    return anyio.run(go)


def _chat(args: argparse.Namespace) -> int:
    async def go() -> int:
        console = Console()
        async with _host(args, console) as (loop, store, session_id):
            console.say(f"session {session_id} · gateway {args.gateway} · model {args.model} · /exit to leave")
            if store.unfinished_turn(session_id) is not None:
                _report(console, await loop.resume(session_id))
            while True:
                line = await console.readline("you> ")
                if line is None or line.strip() in ("/exit", "/quit"):
                    console.say()
                    return 0
                if line.strip():
                    _report(console, await loop.run_turn(session_id, line.strip()))

    return anyio.run(go)


def _sessions_list(args: argparse.Namespace) -> int:
    store = SessionStore(store_path(args.store))
    try:
        for session, turns, last in store.list_sessions():
            created = datetime.fromtimestamp(session.created_at).isoformat(timespec="seconds")
            print(f"{session.id}  {created}  turns={turns}  last={last or '-'}  model={session.model}  gateway={session.gateway}")
    finally:
        store.close()
    return 0


def _sessions_show(args: argparse.Namespace) -> int:
    store = SessionStore(store_path(args.store))
    try:
        session = store.get_session(args.session_id)
        if session is None:
            raise ValueError(f"no session {args.session_id}")
        turns = store.turns(session.id)
        calls = store.tool_calls(session.id)
        if args.json:
            print(json.dumps({
                "session": session.model_dump(mode="json"),
                "turns": [t.model_dump(mode="json") for t in turns],
                "messages": [m.model_dump(mode="json") for m in store.messages(session.id)],
                "tool_calls": [c.model_dump(mode="json") for c in calls],
            }, indent=2))
            return 0
        print(f"session {session.id} · model {session.model} · gateway {session.gateway}")
        for turn in turns:
            print(f"\n{turn.id} [{turn.status.value}] model calls: {turn.model_calls}")
            print(f"  user: {turn.user_text}")
            for call in (c for c in calls if c.turn_id == turn.id):
                print(f"  call {call.id} {call.name} {json.dumps(call.arguments)} [{call.effect}] -> {call.status.value}"
                      f" (key {call.idempotency_key}, attempts {call.attempts})")
                if call.result_text:
                    print(f"      {call.result_text.splitlines()[0][:200]}")
            if turn.final_text:
                print(f"  answer: {turn.final_text}")
            if turn.error:
                print(f"  error: {turn.error}")
    finally:
        store.close()
    return 0


def _approvals_serve(args: argparse.Namespace) -> int:
    store = SessionStore(store_path(args.store))
    try:
        app = approvals_app(store, [args.approver_token or ""], [args.agent_token or ""])
        print(f"approvals API on http://{LOOPBACK}:{args.port}/approvals", file=sys.stderr, flush=True)
        uvicorn.run(app, host=LOOPBACK, port=args.port, log_level="warning")
    finally:
        store.close()
    return 0


def _api(args: argparse.Namespace, method: str, path: str, body: dict[str, object] | None = None) -> int:
    headers = {"Authorization": f"Bearer {args.approver_token}"} if args.approver_token else {}
    response = httpx.request(method, args.url.rstrip("/") + path, headers=headers, json=body, timeout=30)
    print(json.dumps(response.json(), indent=2))
    return 0 if response.status_code < 400 else 1


def _approvals_list(args: argparse.Namespace) -> int:
    return _api(args, "GET", "/approvals")


def _approvals_decide(args: argparse.Namespace) -> int:
    return _api(args, "POST", f"/approvals/{args.approval_id}", {"decision": args.decision, "reason": args.reason})


if __name__ == "__main__":
    sys.exit(main())
