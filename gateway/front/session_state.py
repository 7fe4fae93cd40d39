"""The state of a stateful front session that another replica needs to go on serving it.

What the client negotiated and set, nothing the process holds open:

    version     the negotiated protocol version
    client      the client's `initialize` params (client info and capabilities)
    level       its `logging/setLevel` threshold (None: never set)
    resources   the URIs it subscribed to

Kept in the shared store (gateway/storage/front_sessions.py) rather than in a signed session id:
subscriptions and the level change after the id is handed out, and the id cannot change then.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["SessionState"]


class SessionState(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: str
    client: dict[str, Any]
    level: str | None = None
    resources: list[str] = Field(default_factory=list)

    def client_params(self) -> types.InitializeRequestParams:
        return types.InitializeRequestParams.model_validate(self.client, by_name=False)

    @classmethod
    def of(cls, version: str, params: types.InitializeRequestParams, level: str | None,
           resources: set[str]) -> SessionState:
        client = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        return cls(version=version, client=client, level=level, resources=sorted(resources))
