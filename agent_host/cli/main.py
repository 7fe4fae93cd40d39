"""`dex-agent`: chat, run, resume, demo, serve, login, logout, sessions, approvals.

Every expected failure is one line on stderr, `dex-agent: <what went wrong>`, and a non-zero
exit: 2 for a usage or setup error (caught before a turn starts), 1 for a failed turn or an
unreachable approvals API, 130 for Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from gateway.errors import StoreError

from ..api.guard import add_api_guard_args
from ..approvals.gate import DEFAULT_APPROVAL_TIMEOUT_SECONDS
from ..domain.cards import parse_deadline
from ..domain.session_ids import check_session_id
from ..domain.credentials import RemovedFlag, add_approver_token_args, add_issuer_args, add_token_args
from ..gateway_client.connection import PROTOCOLS, describe
from . import admin as cli_admin
from . import chat as cli_chat
from . import login as cli_login
from . import run as cli_run
from . import settings as cli_settings
from ..service import serve as cli_serve
from ..store.lease import DEFAULT_LEASE_SECONDS
from .images import add_image_args

GATEWAY_ENV = "DEX_AGENT_GATEWAY"
DEFAULT_GATEWAY = "http://127.0.0.1:8080/mcp"
DEMO_QUESTION = "What is the balance of account acme and refund order 5521 by 40?"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """A usage error in one line (and a pointer to --help), exit 2."""
        self.exit(2, f"dex-agent: {message} (see {self.prog} --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="dex-agent: %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        args = _parser().parse_args(argv)
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except RemovedFlag as exc:
        return _fail(exc, 2)
    except BaseExceptionGroup as group:
        # anyio task groups wrap what a task raised; the first leaf is what went wrong.
        leaf = _leaf(group)
        if isinstance(leaf, KeyboardInterrupt):
            return 130
        if isinstance(leaf, (ValueError, KeyError, StoreError)):
            return _fail(leaf, 2)
        raise
    except (ValueError, KeyError, StoreError) as exc:
        return _fail(exc, 2)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _fail(exc: BaseException, code: int) -> int:
    message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    print(f"dex-agent: {message or describe(exc)}", file=sys.stderr)
    return code


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dex-agent", description="The Dex agent host: a durable agent loop over the gateway.")
    _store_arg(parser, argparse.SUPPRESS)
    parser.set_defaults(store=None)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    chat = sub.add_parser("chat", help="talk to the agent")
    _agent_args(chat)
    add_image_args(chat, "the first message")
    chat.set_defaults(run=cli_chat.chat)

    run = sub.add_parser("run", help="one turn: prints the answer; exit 1 when the turn failed")
    _agent_args(run)
    run.add_argument("message", nargs="?", help="the user message (omit with --session to only resume)")
    add_image_args(run, "the message")
    run.add_argument("--plan", action="store_true",
                     help="a planning turn: the model writes a draft plan, which runs once approved (terminal, API or web page)")
    run.set_defaults(run=cli_run.run)

    resume = sub.add_parser("resume", help="finish a session's unfinished turn (after a crash)")
    _agent_args(resume)
    resume.set_defaults(run=cli_run.run, message=None)

    demo = sub.add_parser("demo", help="the scripted demo turn, approvals granted automatically")
    _agent_args(demo, demo=True)
    demo.set_defaults(run=cli_run.run, message=DEMO_QUESTION)

    serve = sub.add_parser("serve", help="the host as a service: the chat API and web page, and every session's "
                                         "turns driven (and resumed) by itself")
    _store_arg(serve)
    serve.add_argument("--gateway", default=os.environ.get(GATEWAY_ENV, DEFAULT_GATEWAY), help=f"gateway MCP URL (default ${GATEWAY_ENV} or {DEFAULT_GATEWAY})")
    _protocol_arg(serve)
    serve.add_argument("--port", type=int, default=8790, help="the API and page on 127.0.0.1:PORT (default 8790)")
    serve.add_argument("--model", default=None, help="the default model of new sessions: scripted | scripted:module:function | openai:<model>")
    serve.add_argument("--openai-base-url", help="OpenAI-compatible base URL (as for chat)")
    serve.add_argument("--no-stream", action="store_true", help="ask the model API for whole answers")
    add_token_args(serve)
    add_issuer_args(serve)
    add_approver_token_args(serve)
    add_api_guard_args(serve)
    serve.add_argument("--approval-timeout", type=float, default=DEFAULT_APPROVAL_TIMEOUT_SECONDS,
                       help="seconds before a pending approval or question is rejected")
    serve.add_argument("--lease-seconds", type=float, default=DEFAULT_LEASE_SECONDS,
                       help=f"how long a session stays with this process without a renewal (default {DEFAULT_LEASE_SECONDS:g})")
    serve.add_argument("--max-model-calls", type=int, default=100)
    serve.add_argument("--instructions", help="system instructions of sessions that set none")
    serve.add_argument("--call-timeout", type=float, default=60.0, help="seconds to wait for one tool call")
    serve.set_defaults(run=cli_serve.serve)

    login = sub.add_parser("login", help="sign in at the gateway's issuer from this terminal (device login); "
                                         "the token is kept beside the store")
    _store_arg(login)
    login.add_argument("--gateway", default=os.environ.get(GATEWAY_ENV, DEFAULT_GATEWAY),
                       help=f"gateway MCP URL: the token's audience (default ${GATEWAY_ENV} or {DEFAULT_GATEWAY})")
    add_issuer_args(login, secret=False)
    login.set_defaults(run=cli_login.login)
    logout = sub.add_parser("logout", help="revoke the kept login at the issuer and delete it")
    _store_arg(logout)
    logout.set_defaults(run=cli_login.logout)

    sessions = sub.add_parser("sessions", help="list or show stored sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True, parser_class=_Parser)
    slist = ssub.add_parser("list")
    _store_arg(slist)
    slist.set_defaults(run=cli_admin.sessions_list)
    show = ssub.add_parser("show")
    _store_arg(show)
    show.add_argument("session_id")
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=cli_admin.sessions_show)
    sset = ssub.add_parser("set", help="change a session's settings (from its next turn on)")
    _store_arg(sset)
    sset.add_argument("session_id")
    sset.add_argument("--model", help="scripted | scripted:module:function | openai:<model>")
    cli_settings.add_settings_args(sset)
    sset.add_argument("--unset", action="append", default=[], metavar="SETTING", help="clear a setting (repeatable)")
    sset.set_defaults(run=cli_settings.sessions_set)

    approvals = sub.add_parser("approvals", help="the approvers' HTTP API (and web page) and a small client for it")
    asub = approvals.add_subparsers(dest="approvals_command", required=True, parser_class=_Parser)
    serve = asub.add_parser("serve", help="serve the host API and the web page on the session store")
    serve.add_argument("--port", type=int, default=8790)
    _store_arg(serve)
    add_approver_token_args(serve)
    add_token_args(serve)  # the agent's token, refused as an approver
    add_api_guard_args(serve)
    serve.set_defaults(run=cli_admin.approvals_serve)
    alist = asub.add_parser("list", help="pending approvals")
    alist.add_argument("--url", required=True, help="e.g. http://127.0.0.1:8790")
    add_approver_token_args(alist)
    alist.set_defaults(run=cli_admin.approvals_list)
    decide = asub.add_parser("decide", help="allow or deny one approval")
    decide.add_argument("approval_id")
    decide.add_argument("decision", choices=("allow", "deny"))
    decide.add_argument("--reason")
    decide.add_argument("--url", required=True)
    add_approver_token_args(decide)
    decide.set_defaults(run=cli_admin.approvals_decide)

    questions = sub.add_parser("questions", help="pending questions (ask_user, upstreams' forms) through the host API")
    qsub = questions.add_subparsers(dest="questions_command", required=True, parser_class=_Parser)
    qlist = qsub.add_parser("list", help="pending questions, with a form's fields")
    qlist.add_argument("--url", required=True, help="e.g. http://127.0.0.1:8790")
    add_approver_token_args(qlist)
    qlist.set_defaults(run=cli_admin.questions_list)
    qanswer = qsub.add_parser("answer", help="answer one question, or decline it")
    qanswer.add_argument("question_id")
    qanswer.add_argument("--text", help="the answer to an ask_user question")
    qanswer.add_argument("--field", action="append", default=[], metavar="NAME=VALUE",
                         help="a form field's value (JSON when it reads as JSON: true, 7, [\"a\"]; else text); repeatable")
    qanswer.add_argument("--decline", action="store_true")
    qanswer.add_argument("--url", required=True)
    add_approver_token_args(qanswer)
    qanswer.set_defaults(run=cli_admin.questions_answer)
    return parser


def _deadline(value: str) -> float | None:
    try:
        return parse_deadline(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _session_id(value: str) -> str:
    try:
        return check_session_id(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _store_arg(parser: argparse.ArgumentParser, default: object = argparse.SUPPRESS) -> None:
    # Accepted before or after the command; SUPPRESS keeps a value given before it.
    parser.add_argument("--store", default=default, help="session store: a SQLite file or postgresql://...?schema=NAME (default $DEX_AGENT_STORE or var/dex-agent.db)")


def _protocol_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protocol", choices=PROTOCOLS, default="auto",
                        help="the MCP era spoken to the gateway: auto (default: 2025-11-25 on a stateful gateway, "
                             "2026-07-28 on a stateless one), 2026-07-28, or 2025-11-25")


def _agent_args(parser: argparse.ArgumentParser, demo: bool = False) -> None:
    _store_arg(parser)
    parser.add_argument("--gateway", default=os.environ.get(GATEWAY_ENV, DEFAULT_GATEWAY), help=f"gateway MCP URL (default ${GATEWAY_ENV} or {DEFAULT_GATEWAY})")
    _protocol_arg(parser)
    add_token_args(parser)
    add_issuer_args(parser)
    parser.add_argument("--model", default=None,
                        help="scripted | scripted:module:function | openai:<model> (default: the session's model, else scripted)")
    parser.add_argument("--openai-base-url", help="OpenAI-compatible base URL (default $DEX_AGENT_OPENAI_BASE_URL, $OPENAI_BASE_URL or api.openai.com); the key comes from $DEX_AGENT_OPENAI_API_KEY or $OPENAI_API_KEY")
    parser.add_argument("--no-stream", action="store_true", help="ask the model API for whole answers")
    parser.add_argument("--session", type=_session_id,
                        help="session id: resume or continue it (created when new; 1-128 bytes, no spaces, control characters or /?#)")
    parser.add_argument("--approve", choices=("prompt", "auto", "api"), default="auto" if demo else "prompt",
                        help="who decides approvals: the terminal, nobody (auto-allow), or only the HTTP API")
    parser.add_argument("--yes", "-y", action="store_true", help="same as --approve auto")
    parser.add_argument("--approval-timeout", type=_deadline, default=DEFAULT_APPROVAL_TIMEOUT_SECONDS, metavar="SECONDS|none",
                        help="seconds before a pending approval or question is rejected (default none: no deadline)")
    parser.add_argument("--approvals-port", type=int,
                        help="also serve the host API (approvals, questions, steer, cancel, the live stream) and the web page on 127.0.0.1:PORT")
    add_approver_token_args(parser)
    add_api_guard_args(parser)
    parser.add_argument("--max-model-calls", type=int, default=100)
    parser.add_argument("--instructions", help="system instructions for the model")
    parser.add_argument("--call-timeout", type=float, default=60.0, help="seconds to wait for one tool call")
    parser.add_argument("--continuation-hook", metavar="MODULE:FUNCTION",
                        help="called at the end of each iteration: end the turn, continue it with a message, or default")
    cli_settings.add_settings_args(parser)


if __name__ == "__main__":
    sys.exit(main())
