"""Channels that carry an upstream session's messages: a stdio process, or Streamable HTTP."""
