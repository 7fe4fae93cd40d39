"""The admin API for connector registrations, under /admin/connectors.

    POST   /admin/connectors        {"manifest": "<yaml or json text>", "filename": "...", "binding": {...}}
    GET    /admin/connectors        the registrations (config directory and admin API)
    GET    /admin/connectors/{id}   one, with its manifest text
    DELETE /admin/connectors/{id}   remove an admin-API registration

Errors are JSON `{"error": "..."}`: 401 without credentials, 403 with wrong ones, 400 for an
invalid manifest or binding (the loader's message, naming file, operation and key), 403 for a
binding the operator's policy does not grant (`config_key` names the gateway config key that
would: connectors.python_modules, connectors.credential_env, connectors.allowed_hosts), 404, 409.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..admin_json import denied, json_error as _error, read_json_body
from ..protocol import JsonObject
from .errors import BindingConfigError, BindingNotAllowed, ManifestError, RegistrationError, RegistrationNotFound
from .registry import ConnectorRegistry

MAX_BODY_BYTES = 1024 * 1024


class AddRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    manifest: str = Field(min_length=1)
    filename: str | None = None
    binding: JsonObject | None = None

    def resolved_filename(self) -> str:
        if self.filename:
            return self.filename
        # The loader picks JSON or YAML by the name; guess it from the text.
        return "dex-connector.json" if self.manifest.lstrip().startswith("{") else "connector.yaml"


def admin_routes(
    registry: ConnectorRegistry, authorize: Callable[[Request], Awaitable[bool]]
) -> list[Route]:
    async def guarded(request: Request) -> JSONResponse | None:
        return None if await authorize(request) else denied(request)

    async def collection(request: Request) -> Response:
        if (refused := await guarded(request)) is not None:
            return refused
        if request.method == "GET":
            return JSONResponse({"connectors": [r.model_dump(mode="json") for r in await registry.list()]})
        add = await read_json_body(request, AddRequest, max_bytes=MAX_BODY_BYTES)
        if isinstance(add, JSONResponse):
            return add
        try:
            registration = await registry.add(add.manifest, add.resolved_filename(), add.binding)
        except ManifestError as exc:
            return _error(400, str(exc), file=exc.file, operation=exc.operation, key=exc.key, line=exc.line)
        except BindingNotAllowed as exc:
            return _error(403, str(exc), config_key=exc.config_key)
        except BindingConfigError as exc:
            return _error(400, str(exc))
        except RegistrationError as exc:
            return _error(409, str(exc))
        return JSONResponse(registration.model_dump(mode="json"), status_code=201)

    async def item(request: Request) -> Response:
        if (refused := await guarded(request)) is not None:
            return refused
        connector_id = request.path_params["connector_id"]
        try:
            if request.method == "GET":
                return JSONResponse((await registry.show(connector_id)).model_dump(mode="json"))
            await registry.remove(connector_id)
        except RegistrationNotFound as exc:
            return _error(404, str(exc))
        except RegistrationError as exc:
            return _error(409, str(exc))
        return JSONResponse({"removed": connector_id})

    return [
        Route("/admin/connectors", collection, methods=["GET", "POST"]),
        Route("/admin/connectors/{connector_id}", item, methods=["GET", "DELETE"]),
    ]


__all__ = ["AddRequest", "admin_routes"]
