"""Secrets of the host: the agent's gateway token (or the OAuth client it gets one with) and the
approvers' token.

Only from the environment or a file, never from a command-line flag (any user on the machine
can read another process's argv in `ps`). The old flags `--token` and `--approver-token` are
removed: giving one is a usage error that names the replacement.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TOKEN_ENV = "DEX_AGENT_TOKEN"
TOKEN_FILE_FLAG = "--token-file"
APPROVER_TOKEN_ENV = "DEX_APPROVER_TOKEN"
APPROVER_TOKEN_FILE_FLAG = "--approver-token-file"
# The gateway token from an OAuth issuer (agent_host/gateway_client/issuer.py).
ISSUER_ENV = "DEX_AGENT_ISSUER"
TOKEN_ENDPOINT_ENV = "DEX_AGENT_TOKEN_ENDPOINT"
CLIENT_ID_ENV = "DEX_AGENT_CLIENT_ID"
CLIENT_SECRET_ENV = "DEX_AGENT_CLIENT_SECRET"
CLIENT_SECRET_FILE_FLAG = "--client-secret-file"
SCOPE_ENV = "DEX_AGENT_SCOPE"
DEFAULT_SCOPE = "mcp"


class RemovedFlag(Exception):
    """A secret-bearing flag that no longer exists was given."""


class _Removed(argparse.Action):
    """Refuses a removed secret flag with a message naming the environment variable and file flag."""

    def __init__(self, option_strings: Sequence[str], dest: str, env: str, file_flag: str, never: bool = False,
                 **kwargs: Any) -> None:
        self._env = env
        self._file_flag = file_flag
        self._never = never
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        raise RemovedFlag(
            f"{option_string} {'is refused' if self._never else 'was removed'}: a secret on the command line is "
            f"visible in ps; set ${self._env} or use {self._file_flag} PATH"
        )


def add_token_args(parser: argparse.ArgumentParser) -> None:
    """The agent's gateway token: `$DEX_AGENT_TOKEN` or `--token-file PATH`."""
    parser.add_argument(TOKEN_FILE_FLAG, dest="token_file", help=f"file holding the agent's gateway bearer token (default ${TOKEN_ENV})")
    parser.add_argument("--token", action=_Removed, env=TOKEN_ENV, file_flag=TOKEN_FILE_FLAG)


def add_approver_token_args(parser: argparse.ArgumentParser) -> None:
    """The approvers' token: `$DEX_APPROVER_TOKEN` or `--approver-token-file PATH`."""
    parser.add_argument(APPROVER_TOKEN_FILE_FLAG, dest="approver_token_file",
                        help=f"file holding the approvers' bearer token (default ${APPROVER_TOKEN_ENV})")
    parser.add_argument("--approver-token", action=_Removed, env=APPROVER_TOKEN_ENV, file_flag=APPROVER_TOKEN_FILE_FLAG)


def add_issuer_args(parser: argparse.ArgumentParser, *, secret: bool = True) -> None:
    """The OAuth client the host gets its gateway token with: `--issuer`, `--client-id`, `--scope`
    (or their environment variables) and, for client credentials, the secret from
    `$DEX_AGENT_CLIENT_SECRET` or `--client-secret-file PATH` (`--client-secret` is refused)."""
    group = parser.add_argument_group("gateway token from an OAuth issuer")
    group.add_argument("--issuer", default=None,
                       help=f"the issuer's URL (default ${ISSUER_ENV}, else the one the gateway's metadata names)")
    if secret:
        group.add_argument("--token-endpoint", dest="token_endpoint", default=None,
                           help=f"the issuer's token endpoint, instead of discovering it (default ${TOKEN_ENDPOINT_ENV})")
    group.add_argument("--client-id", dest="client_id", default=None, help=f"the OAuth client id (default ${CLIENT_ID_ENV})")
    group.add_argument("--scope", dest="oauth_scope", default=None, help=f"the scope asked for (default ${SCOPE_ENV} or {DEFAULT_SCOPE})")
    if secret:
        group.add_argument(CLIENT_SECRET_FILE_FLAG, dest="client_secret_file",
                           help=f"file holding the client secret, for client credentials (default ${CLIENT_SECRET_ENV})")
        group.add_argument("--client-secret", action=_Removed, env=CLIENT_SECRET_ENV, file_flag=CLIENT_SECRET_FILE_FLAG,
                           never=True)


@dataclass(frozen=True)
class IssuerSettings:
    """The OAuth client from the flags and the environment (nothing set: no issuer)."""

    issuer: str | None
    token_endpoint: str | None
    client_id: str | None
    client_secret: str | None = field(repr=False)
    scope: str


def issuer_settings(args: argparse.Namespace) -> IssuerSettings:
    return IssuerSettings(
        issuer=getattr(args, "issuer", None) or os.environ.get(ISSUER_ENV) or None,
        token_endpoint=getattr(args, "token_endpoint", None) or os.environ.get(TOKEN_ENDPOINT_ENV) or None,
        client_id=getattr(args, "client_id", None) or os.environ.get(CLIENT_ID_ENV) or None,
        client_secret=read_secret(getattr(args, "client_secret_file", None), CLIENT_SECRET_ENV, what="client secret"),
        scope=getattr(args, "oauth_scope", None) or os.environ.get(SCOPE_ENV) or DEFAULT_SCOPE,
    )


def read_secret(file: str | None, env: str, what: str = "token") -> str | None:
    """The secret from `file` when given (first line, trimmed), else from `$env`; None when unset.

    Raises ValueError (one line) for a file that cannot be read or is empty.
    """
    if file:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the {what} file {file}: {exc.__class__.__name__}") from None
        secret = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not secret:
            raise ValueError(f"the {what} file {file} is empty")
        return secret
    return os.environ.get(env) or None


def agent_token(args: argparse.Namespace) -> str | None:
    return read_secret(getattr(args, "token_file", None), TOKEN_ENV)


def approver_token(args: argparse.Namespace) -> str | None:
    return read_secret(getattr(args, "approver_token_file", None), APPROVER_TOKEN_ENV)
