"""Bindings: how one attempt of a connector operation reaches the code that runs it."""

from __future__ import annotations

import logging
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
from .http import HttpBinding, binding_http_client
from .policy import BindingPolicy, Source
from .protocol import BranchError, ConnectorRequest, ConnectorResponse, NothingSent
from .python import PythonBinding, caller_cancelled

log = logging.getLogger(__name__)


class Binding(Protocol):
    async def attempt(self, request: ConnectorRequest, timeout: float) -> ConnectorResponse | NotSent | Interrupted:
        """One attempt: the service's answer, or proof nothing was sent, or an interruption."""
        ...


class ContainedBinding:
    """Whatever escapes a binding's attempt (a bug, a `BaseException`) is an interrupted
    attempt, never an error of the gateway's request; the caller's cancellation propagates."""

    def __init__(self, inner: Binding) -> None:
        self.inner = inner

    async def attempt(self, request: ConnectorRequest, timeout: float) -> ConnectorResponse | NotSent | Interrupted:
        try:
            return await self.inner.attempt(request, timeout)
        except BaseException as exc:  # noqa: BLE001 - the binding's failure is the attempt's, not the gateway's
            if caller_cancelled(exc):
                raise
            log.error("connector %s %s: the binding failed unexpectedly", request.connector, request.operation, exc_info=exc)
            return Interrupted("the binding failed unexpectedly (the gateway log has the details)")


def make_binding(
    config: HttpBindingConfig | PythonBindingConfig,
    *,
    client: httpx.AsyncClient | None = None,
    environ: Mapping[str, str] | None = None,
    policy: BindingPolicy | None = None,
    source: Source = "config",
    where: str = "binding",
) -> Binding:
    """Check `config` against `policy` (strings only: nothing imported or read before that
    passed), then build it. `source="api"`: an admin-API registration, held to the operator's
    allowlists; `"config"`: the connectors directory, held only to the link-local and metadata
    rule. Raises BindingNotAllowed / BindingConfigError."""
    policy = policy if policy is not None else BindingPolicy()
    policy.check(config, source=source, where=where)
    if isinstance(config, HttpBindingConfig):
        return ContainedBinding(HttpBinding(config, client=client, environ=environ, guard=policy))
    allowed = policy.python_modules if source == "api" else None
    return ContainedBinding(PythonBinding(config, allowed_modules=allowed))


__all__ = [
    "Binding", "BindingConfig", "BindingPolicy", "BranchError", "ConnectorRequest", "ConnectorResponse",
    "ContainedBinding", "CredentialConfig", "HttpBinding", "HttpBindingConfig", "NothingSent", "PythonBinding",
    "PythonBindingConfig", "binding_http_client", "binding_to_json", "make_binding", "parse_binding",
]
