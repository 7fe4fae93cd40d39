"""The state of a stateful front session that another replica needs to go on serving it.

What the client negotiated and set, nothing the process holds open:

    version     the negotiated protocol version
    client      the client's `initialize` params (client info and capabilities)
    level       its `logging/setLevel` threshold (None: never set)
    resources   the URIs it subscribed to
    tasks       the tasks it watches (created, or asked `tasks/get` of, not ended; the newest
                `MAX_WATCHED_TASKS`), each with the status and message it was told as of the last
                write: the task's status notices reach it again once adopted

Kept in the shared store (gateway/storage/front_sessions.py) rather than in a signed session id:
subscriptions and the level change after the id is handed out, and the id cannot change then.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["MAX_WATCHED_TASKS", "SessionState", "Told"]

MAX_WATCHED_TASKS = 100
Told = tuple[str, str | None]  # a task's status and status message, as a session was told them


class SessionState(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: str
    client: dict[str, Any]
    level: str | None = None
    resources: list[str] = Field(default_factory=list)
    tasks: dict[str, Told] = Field(default_factory=dict)

    def client_params(self) -> types.InitializeRequestParams:
        return types.InitializeRequestParams.model_validate(self.client, by_name=False)

    @classmethod
    def of(cls, version: str, params: types.InitializeRequestParams, level: str | None,
           resources: set[str], tasks: dict[str, Told] | None = None) -> SessionState:
        client = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        watched = dict(list((tasks or {}).items())[-MAX_WATCHED_TASKS:])  # oldest first: the newest kept
        return cls(version=version, client=client, level=level, resources=sorted(resources), tasks=watched)
