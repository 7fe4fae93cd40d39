"""Go-style durations as connector manifests write them (`30s`, `1m30s`, `500ms`)."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|us|µs|ns|h|m|s))+$"


def parse_duration(text: str) -> float:
    """Seconds in `text`; ValueError when it is not a Go duration."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"not a duration: {text!r} (write e.g. 30s, 1m30s, 500ms)")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(text))
