"""RFC 9728 protected resource metadata, served with `auth.oauth`: what clients read (after a 401
names it in `resource_metadata`) to find the authorization servers that issue tokens for this
gateway. Served at `/.well-known/oauth-protected-resource` and at the path-suffixed form for the
resource's path (`/.well-known/oauth-protected-resource/mcp`), with CORS for browser clients.
The document and its route wrapper are the MCP SDK's (`mcp.server.auth`)."""

from __future__ import annotations

from urllib.parse import urlsplit

from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.routes import cors_middleware
from mcp.shared.auth import ProtectedResourceMetadata
from starlette.routing import BaseRoute, Route

from ..config.model import GatewayConfig

__all__ = ["WELL_KNOWN", "protected_resource_routes"]

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def protected_resource_routes(config: GatewayConfig) -> list[BaseRoute]:
    oauth = config.auth.oauth
    if oauth is None:
        return []
    # Validated from plain strings so the model's own URL settings apply (an issuer keeps its
    # exact spelling: no slash is added to an empty path, clients compare it with `iss`).
    metadata = ProtectedResourceMetadata.model_validate({
        "resource": oauth.resource,
        "authorization_servers": [i.issuer for i in oauth.issuers],
        "scopes_supported": list(oauth.required_scopes) or None,
        "bearer_methods_supported": ["header"],
        "resource_name": "Dex MCP Gateway",
    })
    endpoint = cors_middleware(ProtectedResourceMetadataHandler(metadata).handle, ["GET", "OPTIONS"])
    resource_path = urlsplit(oauth.resource).path.rstrip("/")
    paths = dict.fromkeys([WELL_KNOWN, WELL_KNOWN + resource_path, WELL_KNOWN + config.server.path])
    return [Route(path, endpoint=endpoint, methods=["GET", "OPTIONS"]) for path in paths]
