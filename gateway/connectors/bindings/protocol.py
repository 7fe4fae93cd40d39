"""What a binding sends and gets back for one attempt (the wire contract of SPEC 7).

HTTP: `POST <base_url>/<operation>` with the JSON body of ConnectorRequest (camelCase), answer
200 with ConnectorResponse: `{"branch": "...", "value": ...}` or
`{"branch": "...", "error": {"kind": "...", "message": "..."}}`. Services dedupe on `callId`,
which is the same on every attempt of one call.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ...protocol import Arguments, JsonObject


class ConnectorRequest(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    connector: str
    operation: str
    input: Arguments
    call_id: str = Field(alias="callId")
    idempotency_key: str | None = Field(alias="idempotencyKey")
    attempt: int

    def wire(self) -> JsonObject:
        return self.model_dump(by_alias=True)


class BranchError(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: str = "error"
    message: str = ""


class ConnectorResponse(BaseModel):
    model_config = ConfigDict(frozen=True)

    branch: str = Field(min_length=1)
    value: Any = None
    error: BranchError | None = None


class NothingSent(Exception):
    """Raised by a Python-bound operation to prove it did nothing: the attempt counts as never
    sent, so the call may be retried as new (any other exception means it may have acted)."""
