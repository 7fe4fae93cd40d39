"""Approvals: the gate a tool call waits at, and the first of terminal, API and timeout that decides."""
