"""Resources and prompts of the host's MCP servers, for the model's `mcp_*` built-in tools.

The host has one MCP server, the gateway (named `gateway`); the gateway passes resources and
prompts of its upstreams through. Each request opens its own session (like every gateway call),
lists every page, and returns the server's items as JSON values (by the wire's field names,
without absent fields). An MCP error answer, an unreachable gateway and an unknown server name
raise `ResourceError` with one line that says which.
"""

from __future__ import annotations

from typing import Any

from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from .connection import GatewayConnection, GatewayUnavailable, describe

__all__ = ["GATEWAY_SERVER", "GatewayResources", "ResourceError"]

GATEWAY_SERVER = "gateway"


class ResourceError(Exception):
    """The request could not be answered: the text says why (the model reads it)."""


def _wire(item: BaseModel) -> Any:
    return item.model_dump(mode="json", by_alias=True, exclude_none=True)


class GatewayResources:
    def __init__(self, connection: GatewayConnection) -> None:
        self._connection = connection

    @property
    def server_names(self) -> list[str]:
        return [GATEWAY_SERVER]

    def _check(self, server: str) -> None:
        if server not in self.server_names:
            raise ResourceError(f"unknown server {server!r}: the servers are {', '.join(self.server_names)}")

    async def list_all(self, server: str) -> dict[str, Any]:
        """Every page of the server's prompts, resource templates and resources (none when it
        offers none)."""
        self._check(server)
        out: dict[str, list[Any]] = {"prompts": [], "resource_templates": [], "resources": []}

        async def run(client: Any) -> None:
            capabilities = client.server_capabilities
            if capabilities is None or capabilities.prompts is not None:
                cursor: str | None = None
                while True:
                    page = await client.list_prompts(cursor=cursor)
                    out["prompts"].extend(_wire(p) for p in page.prompts)
                    if not (cursor := page.next_cursor):
                        break
            if capabilities is None or capabilities.resources is not None:
                cursor = None
                while True:
                    rpage = await client.list_resources(cursor=cursor)
                    out["resources"].extend(_wire(r) for r in rpage.resources)
                    if not (cursor := rpage.next_cursor):
                        break
                while True:
                    tpage = await client.list_resource_templates(cursor=cursor)
                    out["resource_templates"].extend(_wire(t) for t in tpage.resource_templates)
                    if not (cursor := tpage.next_cursor):
                        break

        await self._with_client(server, "listing resources and prompts", run)
        return out

    async def read(self, server: str, uri: str) -> dict[str, Any]:
        self._check(server)
        out: dict[str, Any] = {}

        async def run(client: Any) -> None:
            result = await client.read_resource(uri)
            out["contents"] = [_wire(c) for c in result.contents]

        await self._with_client(server, f"reading {uri}", run)
        return out

    async def get_prompt(self, server: str, name: str, arguments: dict[str, str] | None) -> dict[str, Any]:
        self._check(server)
        out: dict[str, Any] = {}

        async def run(client: Any) -> None:
            result = await client.get_prompt(name, arguments or None)
            out["description"] = result.description
            out["messages"] = [_wire(m) for m in result.messages]

        await self._with_client(server, f"getting prompt {name}", run)
        return out

    async def _with_client(self, server: str, what: str, run: Any) -> None:
        try:
            async with self._connection.session() as client:
                await run(client)
        except GatewayUnavailable as exc:
            raise ResourceError(f"{what} on {server} failed: {exc}") from None
        except MCPError as exc:
            raise ResourceError(f"{what} on {server} failed: MCP error {exc.error.code}: {exc.error.message}") from None
        except Exception as exc:  # noqa: BLE001 - any other failure is told in one line
            raise ResourceError(f"{what} on {server} failed: {describe(exc)}") from None
