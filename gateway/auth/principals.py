"""Who a request comes from, as the rest of the gateway sees it."""

from __future__ import annotations

# The principal of every request when no auth is configured.
ANONYMOUS = "anonymous"
# Where the auth middleware leaves the principal in the ASGI scope for the MCP handlers.
PRINCIPAL_SCOPE_KEY = "dex.principal"
