"""The gateway as the host's only tool source: the MCP connection, tools/call with re-issue rules, durable tasks, images."""
