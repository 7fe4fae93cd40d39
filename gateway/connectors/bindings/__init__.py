"""Bindings: how one attempt of a connector operation reaches the code that runs it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import httpx

from ...conventions.outcomes import Interrupted, NotSent
from .config import (
    BindingConfig,
    CredentialConfig,
    HttpBindingConfig,
    PythonBindingConfig,
    binding_to_json,
    parse_binding,
)
from .http import HttpBinding
from .protocol import BranchError, ConnectorRequest, ConnectorResponse, NothingSent
from .python import PythonBinding


class Binding(Protocol):
    async def attempt(self, request: ConnectorRequest, timeout: float) -> ConnectorResponse | NotSent | Interrupted:
        """One attempt: the service's answer, or proof nothing was sent, or an interruption."""
        ...


def make_binding(
    config: HttpBindingConfig | PythonBindingConfig,
    *,
    client: httpx.AsyncClient | None = None,
    environ: Mapping[str, str] | None = None,
) -> Binding:
    if isinstance(config, HttpBindingConfig):
        return HttpBinding(config, client=client, environ=environ)
    return PythonBinding(config)


__all__ = [
    "Binding", "BindingConfig", "BranchError", "ConnectorRequest", "ConnectorResponse", "CredentialConfig",
    "HttpBinding", "HttpBindingConfig", "NothingSent", "PythonBinding", "PythonBindingConfig",
    "binding_to_json", "make_binding", "parse_binding",
]
