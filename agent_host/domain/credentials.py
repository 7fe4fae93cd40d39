"""Secrets of the host: the agent's gateway token and the approvers' token.

Only from the environment or a file, never from a command-line flag (any user on the machine
can read another process's argv in `ps`). The old flags `--token` and `--approver-token` are
removed: giving one is a usage error that names the replacement.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TOKEN_ENV = "DEX_AGENT_TOKEN"
TOKEN_FILE_FLAG = "--token-file"
APPROVER_TOKEN_ENV = "DEX_APPROVER_TOKEN"
APPROVER_TOKEN_FILE_FLAG = "--approver-token-file"


class RemovedFlag(Exception):
    """A secret-bearing flag that no longer exists was given."""


class _Removed(argparse.Action):
    """Refuses a removed secret flag with a message naming the environment variable and file flag."""

    def __init__(self, option_strings: Sequence[str], dest: str, env: str, file_flag: str, **kwargs: Any) -> None:
        self._env = env
        self._file_flag = file_flag
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None, option_string: str | None = None) -> None:
        raise RemovedFlag(
            f"{option_string} was removed: a secret on the command line is visible in ps; "
            f"set ${self._env} or use {self._file_flag} PATH"
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


def read_secret(file: str | None, env: str) -> str | None:
    """The secret from `file` when given (first line, trimmed), else from `$env`; None when unset.

    Raises ValueError (one line) for a file that cannot be read or is empty.
    """
    if file:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read the token file {file}: {exc.__class__.__name__}") from None
        secret = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not secret:
            raise ValueError(f"the token file {file} is empty")
        return secret
    return os.environ.get(env) or None


def agent_token(args: argparse.Namespace) -> str | None:
    return read_secret(getattr(args, "token_file", None), TOKEN_ENV)


def approver_token(args: argparse.Namespace) -> str | None:
    return read_secret(getattr(args, "approver_token_file", None), APPROVER_TOKEN_ENV)
