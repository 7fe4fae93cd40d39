"""Pinned tool definitions: what the gateway reviewed of each upstream tool, and a change held or
warned about until an operator accepts it (docs/pinning.md)."""
