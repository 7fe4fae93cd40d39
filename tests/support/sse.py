"""Server-Sent Events read from a whole response body, for tests that look at raw SSE."""

from __future__ import annotations

import re


def sse_events(text: str) -> list[dict[str, str]]:
    """The SSE events of a body: their fields (data lines joined with newlines; comments left out)."""
    found = []
    for block in re.split(r"\r\n\r\n|\n\n", text):
        fields: dict[str, str] = {}
        for line in re.split(r"\r\n|\n", block):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            fields[name] = fields[name] + "\n" + value if name in fields and name == "data" else value
        if fields:
            found.append(fields)
    return found
