"""What every admin route answers the same way: errors as `{"error": "..."}`, the 401/403 for
credentials that may not use it, and a JSON body read into a pydantic model (a size limit, then
a 400 that names each field that is wrong)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

__all__ = ["denied", "json_error", "read_json_body"]

M = TypeVar("M", bound=BaseModel)


def json_error(status: int, message: str, **extra: Any) -> JSONResponse:
    """`{"error": message}` with the `extra` fields that are not None."""
    return JSONResponse({"error": message, **{k: v for k, v in extra.items() if v is not None}}, status_code=status)


def denied(request: Request, what: str = "use the admin API") -> JSONResponse:
    """401 without credentials, 403 with credentials that may not `what`."""
    if "authorization" not in request.headers:
        return json_error(401, "admin credentials required (Authorization: Bearer <admin token>)")
    return json_error(403, f"these credentials may not {what}")


async def read_json_body(request: Request, model: type[M], *, max_bytes: int, empty: bytes | None = None) -> M | JSONResponse:
    """The request's JSON body as `model`, or the error to answer: 413 over `max_bytes`, 400 naming
    every field that is wrong. `empty`: what an empty body stands for (None: an empty body is wrong)."""
    body = await request.body()
    if len(body) > max_bytes:
        return json_error(413, f"request body over {max_bytes} bytes")
    try:
        return model.model_validate_json(body or empty or b"")
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(body)'}: {e['msg']}" for e in exc.errors())
        return json_error(400, f"invalid request: {problems}")
