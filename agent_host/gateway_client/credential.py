"""What the host sends the gateway as `Authorization: Bearer`: a fixed token, or one obtained from
an OAuth issuer and renewed before it expires (gateway_client/issuer.py).

The connection asks for the bearer token at the start of each exchange (a fresh MCP session per
exchange, gateway_client/connection.py), so a renewed token is used from the next exchange on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Credential", "CredentialError", "StaticToken", "as_credential"]


class CredentialError(Exception):
    """No token could be had (the issuer refused, or a login expired); nothing was sent."""


@runtime_checkable
class Credential(Protocol):
    @property
    def described(self) -> str:
        """What it is, for messages ("the agent's token"); never the secret."""

    async def bearer(self) -> str | None:
        """The token to send now (None: none); CredentialError when none can be had."""


@dataclass(frozen=True)
class StaticToken:
    """A token from $DEX_AGENT_TOKEN or --token-file (or none)."""

    token: str | None

    @property
    def described(self) -> str:
        return "the agent's token" if self.token else "no token"

    async def bearer(self) -> str | None:
        return self.token


def as_credential(token: str | Credential | None) -> Credential:
    return token if isinstance(token, Credential) else StaticToken(token)
