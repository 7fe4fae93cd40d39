"""The MCP servers behind the gateway: one `Upstream` per configured server, over stdio or HTTP."""
